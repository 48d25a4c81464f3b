"""Look at a running lab: per-device status rows, the processes of a device, and running a
command inside a device's namespaces (network, mount, hostname and, for emulated
aarch64 devices, the user namespace with the private binfmt_misc) without SSH.
"""

from __future__ import annotations

import subprocess
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from farm.lab.lab import reachable, resolve_lab_dir
from farm.lab.records import LabState, load_state
from farm.lab.system import LabError, descendants, is_alive, netns_pids, run


@dataclass(frozen=True)
class DeviceStatus:
    name: str
    arch: str
    address: str
    port: int
    pid: int | None
    alive: bool
    reachable: bool
    netns: str | None


def device_status(lab_dir: Path | str | None = None) -> tuple[LabState | None,
                                                               list[DeviceStatus]]:
    """The lab's journal (None when no lab is recorded) and one row per device."""
    state = load_state(resolve_lab_dir(lab_dir))
    if state is None:
        return None, []
    rows = [DeviceStatus(d.name, d.arch, d.address, d.port, d.pid, is_alive(d.pid, d.start),
                         reachable(d, 0.5, state), d.netns) for d in state.devices]
    return state, rows


def device_pids(state: LabState, name: str) -> list[int]:
    """Pids of the processes of one device (its sshd, sessions and their children)."""
    dev = state.device(name)
    if dev.netns:
        return netns_pids(dev.netns)
    if dev.pid and is_alive(dev.pid, dev.start):
        return [dev.pid, *descendants(dev.pid)]
    return []


def device_exec(state: LabState, name: str, argv: Sequence[str], *,
                timeout: float = 60.0, check: bool = False) -> subprocess.CompletedProcess[str]:
    """Run `argv` inside device `name` as its sshd sees the world (root, its own /root)."""
    dev = state.device(name)
    if not is_alive(dev.pid, dev.start):
        raise LabError(f"lab device {name} is not running", hint="run `farm lab up`")
    if dev.netns is None:  # loopback mode: the device is this host
        return run(list(argv), check=check, timeout=timeout)
    enter = ["nsenter", "--target", str(dev.pid), "--net", "--mount", "--uts"]
    if dev.arch == "aarch64":
        enter.append("--user")  # the private binfmt_misc lives in the device's user ns
    return run([*enter, "--", *argv], check=check, timeout=timeout)
