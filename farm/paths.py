"""Where farm keeps its state: `.farm/` in the working directory (override: $FARM_HOME),
and how to say that a write there failed because of the disk (`host_write_failure`)."""

from __future__ import annotations

import contextlib
import errno
import os
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent


def state_dir_path() -> Path:
    """Where the state directory is, without creating it."""
    return Path(os.environ.get("FARM_HOME") or Path.cwd() / ".farm")


def state_dir() -> Path:
    """The state directory (artifacts, lab, results); created on first use."""
    path = state_dir_path()
    path.mkdir(parents=True, exist_ok=True)
    return path


def build_cache_dir() -> Path:
    """Where outputs that are a pure function of their inputs are kept (TVM libraries, the
    runner and executor binaries, custom plans, generated and canonical models, each under a
    content key): $FARM_BUILD_CACHE when set, so several state directories (test sessions,
    labs, checkouts) build each of them once; else the state directory. What was built for
    which device (the registry), results, locks and the lab stay in the state directory."""
    env = os.environ.get("FARM_BUILD_CACHE")
    if not env:
        return state_dir()
    path = Path(env)
    path.mkdir(parents=True, exist_ok=True)
    return path


def agents_dir() -> Path:
    """Source of the on-device agent and its route runners."""
    return REPO_ROOT / "agents"


def kernels_dir() -> Path:
    """Source of the custom executor's C kernels."""
    return REPO_ROOT / "kernels"


# -- when a write on the host fails ----------------------------------------------------
# Every host write (store, lease, spill, events, build outputs) that fails for one of these
# reasons is reported with `host_write_failure`: one line naming the file system and what
# to free, never a traceback.
_DISK_ERRNOS = {errno.ENOSPC: "no space left", errno.EDQUOT: "disk quota exceeded",
                errno.EIO: "I/O error", errno.EROFS: "read-only file system"}
_FULL_ERRNOS = (errno.ENOSPC, errno.EDQUOT)
_DU_FILE_CAP = 20000  # stop sizing a tree after this many files (an error path stays fast)


def is_host_disk_error(exc: BaseException) -> bool:
    """Whether an OSError is the disk's fault (full, quota, EIO, read-only), not the code's."""
    return isinstance(exc, OSError) and exc.errno in _DISK_ERRNOS


def mount_point(path: str | Path) -> Path:
    """The mount point of the file system holding `path` (or its nearest existing parent)."""
    p = Path(os.path.abspath(path))
    while not p.exists() and p != p.parent:
        p = p.parent
    while not os.path.ismount(p) and p != p.parent:
        p = p.parent
    return p


def free_bytes(path: str | Path) -> int | None:
    """Bytes an unprivileged writer may still use on the file system of `path`."""
    try:
        st = os.statvfs(mount_point(path))
    except OSError:
        return None
    return st.f_bavail * st.f_frsize


def _fs_type(mount: Path) -> str:
    try:
        lines = Path("/proc/self/mounts").read_text().splitlines()
    except OSError:
        return ""
    kinds = [ln.split()[2] for ln in lines if len(ln.split()) > 2 and ln.split()[1] == str(mount)]
    return kinds[-1] if kinds else ""


def human_bytes(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit in ("B", "KiB") else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} TiB"


def _tree_bytes(path: Path) -> int:
    if not path.is_dir() or path.is_symlink():
        return path.lstat().st_blocks * 512
    total, seen = 0, 0
    for root, dirs, files in os.walk(path):
        for name in files + dirs:
            seen += 1
            with contextlib.suppress(OSError):
                total += os.lstat(os.path.join(root, name)).st_blocks * 512
        if seen > _DU_FILE_CAP:
            break
    return total


def largest_entries(directory: Path, count: int = 3) -> list[tuple[str, int]]:
    """(name, bytes) of the biggest entries directly under `directory`, biggest first."""
    sizes = []
    with contextlib.suppress(OSError):
        for child in directory.iterdir():
            with contextlib.suppress(OSError):
                sizes.append((child.name, _tree_bytes(child)))
    return sorted((s for s in sizes if s[1] > 0), key=lambda s: -s[1])[:count]


def host_write_failure(path: str | Path, err: int | None, what: str, note: str = "") -> str:
    """One line for a failed host write of `what` at `path` (`err`: its errno; `note`
    follows the path): which file system, how full, and what to free there (the biggest
    parts of the state directory and build cache on it), or what else to do."""
    mount = mount_point(path)
    kind = _fs_type(mount)
    try:
        st = os.statvfs(mount)
        space = (f"{human_bytes(st.f_bavail * st.f_frsize)} free of "
                 f"{human_bytes(st.f_blocks * st.f_frsize)}")
    except OSError:
        space = "size unknown"
    where = f"{mount} ({kind + ', ' if kind else ''}{space})"
    head = f"{what} {path}{f' ({note})' if note else ''}"
    if err == errno.EIO:
        return (f"I/O error writing {head} on {where}: the disk is failing or was removed; "
                "check `dmesg` and the disk, then rerun (FARM_HOME or --store elsewhere "
                "meanwhile)")
    if err == errno.EROFS:
        return (f"cannot write {head}: {where} is mounted read-only; remount it read-write "
                "or point FARM_HOME (or --store) at a writable file system")
    reason = _DISK_ERRNOS.get(err or errno.ENOSPC, "no space left")
    tips: dict[Path, str] = {}
    for label, env in (("FARM_HOME", None), ("the build cache", "FARM_BUILD_CACHE")):
        directory = state_dir_path() if env is None else Path(os.environ.get(env) or ".")
        directory = directory.resolve()
        if (env and not os.environ.get(env)) or directory in tips or not directory.is_dir() \
                or mount_point(directory) != mount:
            continue
        parts = ", ".join(f"{name} {human_bytes(n)}" for name, n in largest_entries(directory))
        if parts:
            tips[directory] = f"largest in {label} {directory}: {parts}"
    tip = "; ".join(tips.values()) or "nothing of farm's is big there"
    return (f"{reason} on {where} writing {head}: free space there ({tip}) or point "
            "FARM_HOME (or --store) at a larger file system")
