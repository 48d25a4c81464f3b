"""Deploy a bundle to devices: content-addressed, atomic, verified, resumable, parallel.

Per device: (1) one `sh` command creates the directories and returns the device's
manifest plus size/mtime of the files we expect and of their partial uploads; files whose
sha256, size and mtime all match the manifest are skipped; (2) the others are uploaded to
`<name>.part-<sha12>` (a part already there for the same content is continued from its
size, so an interrupted deploy never re-sends what arrived); (3) the agent's `--commit`
mode on the device (agents/agent_commit.py, piped with the agent) hashes each part and
renames it into place only if it matches, updating the manifest. Inventory values only
ever travel as separate arguments (`sh -c SCRIPT sh ARG...`), never pasted into the
script.

One connection per device: a caller that goes on to talk to the agent (the bench) passes
its own transport and keeps it. `stop` (a threading.Event, set on Ctrl-C) ends uploads
between writes; the parts stay for the next run.
"""

from __future__ import annotations

import json
import os
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath

from farm import followup
from farm.artifacts import Artifact
from farm.deploy.write_cause import upload_failed
from farm.devices.agent_program import run_agent_mode
from farm.errors import DeployError, FarmError, TransportError
from farm.inventory.device import Device
from farm.transports import Transport, open_transport
from farm.transports.sftp_upload import UploadInterrupted

_STAT_MARK = "@@farm-stat@@"
_DF_MARK = "@@farm-df@@"
_NO_WORKDIR = "@@farm-no-workdir@@"
# $1 = workdir; $2 = 1 to create directories (0: dry run, change nothing); then directory
# names until "--"; then the files to stat (relative).
_PLAN_SCRIPT = (
    'w="$1"; mk="$2"; shift 2; '
    'if [ "$mk" = 1 ]; then mkdir -p "$w" || exit 9; fi; '
    'cd "$w" 2>/dev/null || { echo "' + _NO_WORKDIR + '"; exit 0; }; '
    'while [ "$#" -gt 0 ] && [ "$1" != "--" ]; do '
    'if [ "$mk" = 1 ]; then mkdir -p "$1" || exit 9; fi; shift; done; '
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
    bytes_resumed: int = 0  # bytes already on the device in partial uploads, not re-sent
    seconds: float = 0.0
    error: str | None = None
    interrupted: bool = False
    # dry run: one {"file", "bytes", "action": upload | resume | unchanged} per artifact
    plan: list[dict] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return self.error is None


def part_name(artifact: Artifact) -> str:
    """Where an upload of `artifact` grows until it is verified (resumable by content)."""
    return f"{artifact.remote}.part-{artifact.sha256[:12]}"


def remote_state(transport: Transport, device: Device, artifacts: Sequence[Artifact], *,
                 create: bool = True) -> tuple[dict, dict[str, tuple[int, int]], int | None]:
    """The device's manifest, (size, mtime_s) of each expected file and partial upload
    present, and the free bytes in the work dir (None when `df` gave nothing readable).
    `create=False` (dry run) changes nothing on the device."""
    dirs = sorted({str(PurePosixPath(a.remote).parent) for a in artifacts})
    names = [n for a in artifacts for n in (a.remote, part_name(a))]
    result = transport.run(["sh", "-c", _PLAN_SCRIPT, "sh", device.workdir,
                            "1" if create else "0", *dirs, "--", *names],
                           timeout=60, check=False)
    if result.exited != 0:
        raise DeployError(
            f"device {device.name!r}: cannot create work dir {device.workdir}: "
            f"{result.stderr.strip()[-300:]}",
            hint="check `workdir` in the inventory and free space on the device")
    if result.stdout.startswith(_NO_WORKDIR):
        return {}, {}, None
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


def resume_offset(artifact: Artifact, present: dict[str, tuple[int, int]]) -> int:
    """Bytes of `artifact` already on the device in its partial upload (0: start over)."""
    size = present.get(part_name(artifact), (0, 0))[0]
    return size if 0 < size <= artifact.size else 0


def deploy_device(device: Device, artifacts: Sequence[Artifact],
                  progress: Progress | None = None, *, transport: Transport | None = None,
                  stop: threading.Event | None = None, dry_run: bool = False) -> DeployResult:
    """Deploy `artifacts` to one device; errors are returned in the result, not raised.
    With `transport`, that connection is used and left open for the caller."""
    started = time.monotonic()
    result = DeployResult(device.name)
    report = progress or (lambda *_: None)
    own = transport is None
    link = transport or open_transport(device)
    try:
        report(device.name, 0, 0, "checking")
        manifest, present, free = remote_state(link, device, artifacts, create=not dry_run)
        todo = [a for a in artifacts if not unchanged(a, manifest, present)]
        result.unchanged = [a.remote for a in artifacts if a not in todo]
        offsets = {a.remote: resume_offset(a, present) for a in todo}
        result.plan = [{"file": a.remote, "bytes": a.size,
                        "action": "unchanged" if a not in todo
                        else "resume" if offsets[a.remote] else "upload"} for a in artifacts]
        total = sum(a.size - offsets[a.remote] for a in todo)
        if dry_run:
            result.bytes_sent = total
            report(device.name, 0, total, "dry run")
            return result
        if free is not None and total + _SPACE_MARGIN > free:
            raise DeployError(
                f"device {device.name!r} is out of space: the upload needs "
                f"{total / 2**20:.1f} MiB, {free / 2**20:.1f} MiB free in {device.workdir}",
                hint="free space on the device or point `workdir` in the inventory at a "
                     "larger file system")
        done = 0
        partial = [0]  # bytes of the file being sent, for an interrupted upload's count
        plan = []
        stopped = stop.is_set if stop is not None else None

        def sending(sent: int, base: int, offset: int) -> None:
            partial[0] = sent - offset
            report(device.name, base + sent - offset, total, "uploading")

        try:
            for artifact in todo:
                tmp, offset = part_name(artifact), offsets[artifact.remote]
                base, partial[0] = done, 0
                report(device.name, done, total, "uploading")
                try:
                    link.put(Path(artifact.local), f"{device.workdir}/{tmp}", offset=offset,
                             stop=stopped,
                             callback=lambda sent, _t, b=base, o=offset: sending(sent, b, o))
                except UploadInterrupted:
                    raise
                except TransportError as exc:  # SFTP often says only "Failure": ask why
                    raise upload_failed(link, device, f"{device.workdir}/{tmp}",
                                        artifact.size - offset, exc) from None
                done += artifact.size - offset
                partial[0] = 0
                result.bytes_resumed += offset
                mode = "755" if os.access(artifact.local, os.X_OK) else None
                plan.append({"tmp": tmp, "final": artifact.remote, "sha256": artifact.sha256,
                             "mode": mode})
        except UploadInterrupted:
            result.interrupted = True  # what arrived whole is still verified and kept
        result.bytes_sent = done + partial[0]
        if plan:
            report(device.name, done, total, "verifying")
            committed = commit(link, device, plan)
            result.uploaded = committed["ok"]
            if committed["bad"]:
                bad = committed["bad"][0]
                again = followup.command("deploy", "--device", device.name)
                raise DeployError(f"device {device.name!r}: {bad['final']}: {bad['error']}",
                                  hint=f"re-run `{again}`; if it repeats, check the "
                                       "device's storage")
        if result.interrupted:
            raise DeployError(f"device {device.name!r}: deploy interrupted after "
                              f"{len(result.uploaded)} of {len(todo)} files",
                              hint="run the same command again: finished files are kept and "
                                   "the partial one is continued")
        report(device.name, done, total, "done")
    except FarmError as exc:
        result.error = str(exc)
    finally:
        if own:
            link.close()
        result.seconds = time.monotonic() - started
    return result


def commit(transport: Transport, device: Device, plan: list[dict]) -> dict:
    """The agent's `--commit` mode (agents/agent_commit.py): {"ok": [...], "bad": [...]}."""
    out = run_agent_mode(transport, device, ["--commit", json.dumps(plan)], timeout=300)
    try:
        return json.loads(out.stdout.strip().splitlines()[-1])
    except (ValueError, IndexError):
        raise DeployError(
            f"device {device.name!r}: verifying the upload failed (exit {out.exited}): "
            f"{out.stderr.strip()[-300:]}",
            hint="check `python` in the inventory and free space on the device") from None
