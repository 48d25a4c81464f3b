"""Why a write on a device failed, asked of the device itself.

SFTP reports most write errors as its generic status `Failure` (OpenSSH's sftp-server maps
EROFS, ENOSPC, EDQUOT... all to SSH2_FX_FAILURE), so "upload to …tmp-NNN failed: Failure"
leaves the user guessing. `upload_failed(transport, device, remote, needed, exc)` is the
DeployError a failed upload raises: the transport's words plus the device's cause.
`explain_write_failure(transport, device, directory, needed)`
asks the device over the same transport — its Python runs `_PROBE` from stdin with the
directory and byte count as separate argv entries (no shell, nothing pasted into code) —
and returns a `WriteCause`:

  missing-dir   the directory (or a parent) does not exist; names the deepest that does
  read-only     the file system holding it is mounted read-only (statvfs ST_RDONLY, or a
                probe write fails with EROFS)
  no-space      fewer free bytes than the write needs, or the probe write hits ENOSPC
  no-inodes     no free inodes for a new file
  quota         the probe write hits EDQUOT (the user's quota, not the disk, is full)
  permission    the directory is not writable for the login user (EACCES/EPERM)
  unknown       the device could not tell (then `text` says what it did see)

The probe creates one small file (O_EXCL, under a name of its own) and removes it. When the
device cannot be asked at all (the link is gone), `explain_write_failure` returns None and
the caller keeps the transport's own message.
"""

from __future__ import annotations

import json
import posixpath
from dataclasses import dataclass

from farm.errors import DeployError, FarmError
from farm.inventory.device import Device
from farm.transports import Transport

# stdlib only, Python 3.8: runs on the device's interpreter
_PROBE = r'''
import errno, json, os, sys
d, need = sys.argv[1], int(sys.argv[2])
out = {"dir": d}
probe = d
while probe and not os.path.isdir(probe):
    probe = os.path.dirname(probe.rstrip("/")) or "/"
if probe != d:
    out.update(kind="missing-dir", existing=probe)
    print(json.dumps(out)); sys.exit(0)
st = os.statvfs(d)
out["free"] = st.f_bavail * st.f_frsize
out["free_inodes"] = st.f_favail
out["uid"] = os.getuid()
if st.f_flag & getattr(os, "ST_RDONLY", 1):
    out["kind"] = "read-only"; print(json.dumps(out)); sys.exit(0)
name = os.path.join(d, ".farm-write-probe-%d" % os.getpid())
try:
    fd = os.open(name, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        os.write(fd, b"\0" * min(max(need, 1), 1 << 16))
        os.fsync(fd)
    finally:
        os.close(fd)
        os.unlink(name)
except OSError as exc:
    out["errno"] = errno.errorcode.get(exc.errno, str(exc.errno))
    out["error"] = str(exc)
    kinds = {errno.EROFS: "read-only", errno.ENOSPC: "no-space", errno.EDQUOT: "quota",
             errno.EACCES: "permission", errno.EPERM: "permission"}
    if exc.errno == errno.ENOSPC and st.f_favail == 0:
        out["kind"] = "no-inodes"
    else:
        out["kind"] = kinds.get(exc.errno, "unknown")
    print(json.dumps(out)); sys.exit(0)
if out["free"] < need:
    out["kind"] = "no-space"
elif st.f_favail == 0:
    out["kind"] = "no-inodes"
else:
    out["kind"] = "unknown"
print(json.dumps(out))
'''


@dataclass(frozen=True)
class WriteCause:
    kind: str
    text: str   # one sentence for the user, naming the directory
    hint: str   # the next step


def _mib(n: object) -> str:
    return f"{n / 2**20:.1f} MiB" if isinstance(n, int) else "?"


def describe(facts: dict[str, object], needed: int) -> WriteCause:
    """The user's sentence and next step for the device's answer."""
    d, kind = facts.get("dir"), str(facts.get("kind"))
    if kind == "missing-dir":
        return WriteCause(kind, f"{d} does not exist on the device (deepest existing: "
                          f"{facts.get('existing')})",
                          "check `workdir` in the inventory; deploy creates it when its "
                          "parent is writable")
    if kind == "read-only":
        return WriteCause(kind, f"{d} is on a read-only file system",
                          "remount it read-write on the device, or point `workdir` in the "
                          "inventory at a writable file system")
    if kind == "no-space":
        return WriteCause(kind, f"no space left in {d}: {_mib(facts.get('free'))} free, "
                          f"the write needs {_mib(needed)}",
                          "free space on the device or point `workdir` at a larger file system")
    if kind == "no-inodes":
        return WriteCause(kind, f"no free inodes in {d} (the file system cannot hold another "
                          "file)", "delete files on the device (old runs: out/)")
    if kind == "quota":
        return WriteCause(kind, f"the disk quota of the login user is exhausted in {d}",
                          "free space under that user's quota or raise it")
    if kind == "permission":
        return WriteCause(kind, f"{d} is not writable for the login user (uid "
                          f"{facts.get('uid')}): {facts.get('error') or 'permission denied'}",
                          "fix the directory's owner/mode on the device, or log in as its owner")
    seen = facts.get("error") or f"{_mib(facts.get('free'))} free, writable"
    return WriteCause("unknown", f"the device cannot tell why writing in {d} failed ({seen})",
                      "look at the device's kernel log (dmesg) and its sftp-server log")


def explain_write_failure(transport: Transport, device: Device, directory: str,
                          needed: int) -> WriteCause | None:
    """Ask the device why writing `needed` bytes in `directory` fails (see module doc)."""
    try:
        result = transport.run([device.python, "-", directory, str(max(needed, 0))],
                               stdin=_PROBE.encode(), timeout=30, check=False)
        facts = json.loads(result.stdout.strip().splitlines()[-1])
    except (FarmError, OSError, ValueError, IndexError):
        return None
    if not isinstance(facts, dict):
        return None
    return describe(facts, needed)


def upload_failed(transport: Transport, device: Device, remote: str, needed: int,
                  exc: Exception) -> DeployError:
    """The error for a failed upload of `needed` bytes to `remote`, with the cause the
    device gives (or the transport's own words when the device cannot be asked)."""
    cause = explain_write_failure(transport, device, posixpath.dirname(remote), needed)
    # the transport's own words, without the device/upload prefix repeated below
    said = (getattr(exc, "message", None) or str(exc)).rsplit(" failed: ", 1)[-1]
    if cause is None or cause.kind == "unknown":
        return DeployError(f"device {device.name!r}: {said}" + (
            f"; {cause.text}" if cause else " (the device could not be asked why)"),
            hint=cause.hint if cause else "check the device's link and storage, then rerun")
    return DeployError(f"device {device.name!r}: upload to {remote} failed: {cause.text} "
                       f"(SFTP said: {said})", hint=cause.hint)
