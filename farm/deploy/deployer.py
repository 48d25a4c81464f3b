"""Deploy a bundle to devices: content-addressed, atomic, verified, parallel.

Per device: (1) one `sh` command creates the directories and returns the device's
manifest plus size/mtime of the files we expect; files whose sha256, size and mtime all
match the manifest are skipped; (2) the others are uploaded to temporary names;
(3) `deploy_commit.py` on the device hashes each upload and renames it into place only
if it matches, updating the manifest. Inventory values only ever travel as separate
arguments (`sh -c SCRIPT sh ARG...`), never pasted into the script.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath

from farm.build.registry import Artifact
from farm.deploy.write_cause import upload_failed
from farm.errors import DeployError, FarmError, TransportError
from farm.inventory.device import Device
from farm.paths import agents_dir
from farm.transports import Transport, open_transport

_STAT_MARK = "@@farm-stat@@"
_DF_MARK = "@@farm-df@@"
# $1 = workdir; then directory names until "--"; then the files to stat (relative).
_PLAN_SCRIPT = (
    'w="$1"; shift; mkdir -p "$w" && cd "$w" || exit 9; '
    'while [ "$#" -gt 0 ] && [ "$1" != "--" ]; do mkdir -p "$1" || exit 9; shift; done; '
    '[ "$#" -gt 0 ] && shift; cat manifest.json 2>/dev/null; echo; echo "' + _STAT_MARK + '"; '
    'for f in "$@"; do [ -f "$f" ] && stat -c "%s|%Y|%n" -- "$f"; done; '
    'echo "' + _DF_MARK + '"; df -Pk . 2>/dev/null; exit 0'
)
# bytes kept free on the device beyond what an upload needs
_SPACE_MARGIN = 1 << 20

Progress = Callable[[str, int, int, str], None]  # device, bytes done, bytes total, status


@dataclass
class DeployResult:
    device: str
    uploaded: list[str] = field(default_factory=list)
    unchanged: list[str] = field(default_factory=list)
    bytes_sent: int = 0
    seconds: float = 0.0
    error: str | None = None

    @property
    def ok(self) -> bool:
        return self.error is None


def remote_state(transport: Transport, device: Device, artifacts: Sequence[Artifact]
                 ) -> tuple[dict, dict[str, tuple[int, int]], int | None]:
    """The device's manifest, (size, mtime_s) of each expected file present, and the free
    bytes in the work dir (None when `df` gave nothing readable)."""
    dirs = sorted({str(PurePosixPath(a.remote).parent) for a in artifacts})
    result = transport.run(["sh", "-c", _PLAN_SCRIPT, "sh", device.workdir, *dirs, "--",
                            *[a.remote for a in artifacts]], timeout=60, check=False)
    if result.exited != 0:
        raise DeployError(
            f"device {device.name!r}: cannot create work dir {device.workdir}: "
            f"{result.stderr.strip()[-300:]}",
            hint="check `workdir` in the inventory and free space on the device")
    head, _, rest = result.stdout.partition(_STAT_MARK)
    stats, _, df = rest.partition(_DF_MARK)
    try:
        manifest = json.loads(head.strip() or "{}")
    except ValueError:
        manifest = {}  # a damaged manifest only costs a full re-upload
    present = {}
    for line in stats.strip().splitlines():
        size, mtime, name = line.split("|", 2)
        present[name] = (int(size), int(mtime))
    return manifest, present, _free_bytes(df)


def _free_bytes(df_output: str) -> int | None:
    """Available bytes from POSIX `df -Pk` output (its last line, 4th column, KiB)."""
    lines = df_output.strip().splitlines()
    try:
        return int(lines[-1].split()[3]) * 1024
    except (IndexError, ValueError):
        return None


def unchanged(artifact: Artifact, manifest: dict, present: dict[str, tuple[int, int]]) -> bool:
    entry = (manifest.get("files") or {}).get(artifact.remote)
    if not entry or artifact.remote not in present:
        return False
    size, mtime = present[artifact.remote]
    return (entry.get("sha256") == artifact.sha256 and entry.get("size") == size == artifact.size
            and int(entry.get("mtime_ns", -1)) // 1_000_000_000 == mtime)


def deploy_device(device: Device, artifacts: Sequence[Artifact],
                  progress: Progress | None = None) -> DeployResult:
    """Deploy `artifacts` to one device; errors are returned in the result, not raised."""
    started = time.monotonic()
    result = DeployResult(device.name)
    report = progress or (lambda *_: None)
    try:
        with open_transport(device) as transport:
            report(device.name, 0, 0, "checking")
            manifest, present, free = remote_state(transport, device, artifacts)
            todo = [a for a in artifacts if not unchanged(a, manifest, present)]
            result.unchanged = [a.remote for a in artifacts if a not in todo]
            total = sum(a.size for a in todo)
            if free is not None and total + _SPACE_MARGIN > free:
                raise DeployError(
                    f"device {device.name!r} is out of space: the upload needs "
                    f"{total / 2**20:.1f} MiB, {free / 2**20:.1f} MiB free in {device.workdir}",
                    hint="free space on the device or point `workdir` in the inventory at a "
                         "larger file system")
            done = 0
            plan = []
            for artifact in todo:
                tmp = f"{artifact.remote}.tmp-{os.getpid()}"
                base = done
                try:
                    transport.put(Path(artifact.local), f"{device.workdir}/{tmp}",
                                  callback=lambda sent, _t, b=base: report(
                                      device.name, b + sent, total, "uploading"))
                except TransportError as exc:  # SFTP often says only "Failure": ask why
                    raise upload_failed(transport, device, f"{device.workdir}/{tmp}",
                                        artifact.size, exc) from None
                done += artifact.size
                mode = "755" if os.access(artifact.local, os.X_OK) else None
                plan.append({"tmp": tmp, "final": artifact.remote, "sha256": artifact.sha256,
                             "mode": mode})
            if plan:
                report(device.name, done, total, "verifying")
                committed = commit(transport, device, plan)
                result.uploaded = committed["ok"]
                if committed["bad"]:
                    bad = committed["bad"][0]
                    raise DeployError(f"device {device.name!r}: {bad['final']}: {bad['error']}",
                                      hint="re-run `farm deploy`; if it repeats, check the "
                                           "device's storage")
            result.bytes_sent = done
            report(device.name, done, total, "done")
    except FarmError as exc:
        result.error = str(exc)
    result.seconds = time.monotonic() - started
    return result


def commit(transport: Transport, device: Device, plan: list[dict]) -> dict:
    script = (agents_dir() / "deploy_commit.py").read_bytes()
    out = transport.run([device.python, "-", device.workdir, json.dumps(plan)], stdin=script,
                        timeout=300, check=False)
    try:
        return json.loads(out.stdout.strip().splitlines()[-1])
    except (ValueError, IndexError):
        raise DeployError(
            f"device {device.name!r}: verifying the upload failed (exit {out.exited}): "
            f"{out.stderr.strip()[-300:]}",
            hint="check `python` in the inventory and free space on the device") from None
