"""The lab's journal: a JSON record of everything `farm lab up` created.

Contract: a resource is recorded BEFORE it is created (`add`), and the file is rewritten
atomically each time, so after a crash at any point `farm lab down` finds every leftover
by these records alone. A process is recorded first by a `match` string (a path that only
its command line holds) and then, once spawned, by (pid, start time).

File: `<lab_dir>/state.json` = {"version": 1, "mode", "slot", "lab_dir", "resources": [...],
"devices": [...], "owner": {"pid", "start"} | null}. Resource kinds: bridge, netns,
veth (name), mount (path, where), mntns (ns), process (match, pid, start, device),
route (prefix: the host's unreachable route for the subnet behind a gateway).
Devices: see `LabDevice`.
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from farm.lab.system import LabError

STATE_VERSION = 1
STATE_FILE = "state.json"


@dataclass
class LabDevice:
    """One device of a running lab, as recorded (and as written to the inventory)."""

    name: str
    arch: str
    address: str
    port: int
    user: str
    netns: str | None  # None in loopback mode
    dir: str           # host directory of the device: keys, config, log, home
    python: str
    workdir: str
    features: list[str] = field(default_factory=list)
    via: str | None = None  # the lab device it is reached through (its gateway)
    pid: int | None = None
    start: int | None = None


@dataclass
class LabState:
    """The whole journal; `save()` after every change."""

    lab_dir: str
    mode: str  # "netns" or "loopback"
    slot: int
    resources: list[dict[str, Any]] = field(default_factory=list)
    devices: list[LabDevice] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    owner: dict[str, Any] | None = None  # {"pid", "start"}: the lab dies with this process

    @property
    def path(self) -> Path:
        return Path(self.lab_dir) / STATE_FILE

    def add(self, kind: str, **attrs: Any) -> dict[str, Any]:
        """Record a resource about to be created; returns the live record to update."""
        record = {"kind": kind, **attrs}
        self.resources.append(record)
        self.save()
        return record

    def device(self, name: str) -> LabDevice:
        for dev in self.devices:
            if dev.name == name:
                return dev
        known = ", ".join(d.name for d in self.devices) or "none"
        raise LabError(f"the lab has no device {name!r} (devices: {known})")

    def save(self) -> None:
        data = {"version": STATE_VERSION, "lab_dir": self.lab_dir, "mode": self.mode,
                "slot": self.slot, "resources": self.resources,
                "devices": [asdict(d) for d in self.devices], "notes": self.notes,
                "owner": self.owner}
        tmp = self.path.with_suffix(".tmp")
        tmp.write_text(json.dumps(data, indent=1) + "\n")
        os.replace(tmp, self.path)


def load_state(lab_dir: Path) -> LabState | None:
    """The recorded lab in `lab_dir`, or None when nothing is recorded there."""
    path = lab_dir / STATE_FILE
    try:
        data = json.loads(path.read_text())
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as exc:
        raise LabError(f"lab state {path} is unreadable: {exc}",
                       hint="inspect it; remove it only after checking `ip netns list`") from exc
    if data.get("version") != STATE_VERSION:
        raise LabError(f"lab state {path} has version {data.get('version')!r}, "
                       f"this farm reads {STATE_VERSION}",
                       hint="tear it down with the farm version that created it")
    try:
        devices = [LabDevice(**d) for d in data["devices"]]
    except (KeyError, TypeError) as exc:  # a field this farm does not know: another version
        raise LabError(f"lab state {path} has a device this farm cannot read ({exc})",
                       hint="tear it down with the farm version that created it") from exc
    return LabState(lab_dir=data["lab_dir"], mode=data["mode"], slot=data["slot"],
                    resources=data["resources"], devices=devices,
                    notes=data.get("notes", []), owner=data.get("owner"))
