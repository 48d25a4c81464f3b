"""The device work dir's own files, shared by the agent and its deploy modes (stdlib only,
Python 3.8+): the deploy manifest, the device lock and the sha256 of a file.

- `manifest.json` is {"version": 1, "files": {path: {"sha256", "size", "mtime_ns"}}},
  written by the commit mode and pruned by the prune mode, each time whole (a temporary
  file renamed over it). One that is missing or damaged reads as empty: the host then
  uploads everything again.
- `agent.lock` is the device lock: whoever holds its flock (an agent for its whole life,
  the prune mode while it removes files) owns the work dir. The kernel drops the flock
  when its holder dies, so a crash never leaves the device locked.
"""
import errno
import fcntl
import hashlib
import json
import os

MANIFEST = "manifest.json"
LOCK = "agent.lock"


def file_sha256(path):
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def read_manifest(workdir):
    """The manifest deploy keeps in `workdir`; an empty one when it is missing or damaged."""
    try:
        with open(os.path.join(workdir, MANIFEST)) as handle:
            manifest = json.load(handle)
    except (OSError, ValueError):
        manifest = None
    if not isinstance(manifest, dict) or not isinstance(manifest.get("files"), dict):
        manifest = {"version": 1, "files": {}}
    return manifest


def write_manifest(workdir, manifest):
    """Replace the manifest whole: a reader sees the old one or the new one, never half."""
    path = os.path.join(workdir, MANIFEST)
    tmp = path + ".tmp" + str(os.getpid())
    with open(tmp, "w") as handle:
        json.dump(manifest, handle, indent=1, sort_keys=True)
    os.replace(tmp, path)


def lock_path(workdir):
    return os.path.join(workdir, LOCK)


def open_lock(workdir):
    """A descriptor on the device lock file (created if needed), for `try_lock`."""
    return os.open(lock_path(workdir), os.O_RDWR | os.O_CREAT, 0o644)


def try_lock(fd):
    """Take the device lock without waiting: True once held, False while another process
    holds it; any other failure raises."""
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError as exc:
        if exc.errno in (errno.EAGAIN, errno.EACCES):
            return False
        raise
    return True
