"""Telling a full (or failing) disk from a damaged store.

SQLite reports the disk in words that also fit damage: a `-shm` file it cannot grow on a
full file system is "disk I/O error" (SQLITE_IOERR_SHMSIZE), the same words a zeroed page
can give. `disk_errno(exc, path)` decides: SQLITE_FULL is a full disk; an I/O or
cannot-open error with next to no space left on the store's file system is one too; a
read-only error on a read-only mount is EROFS; OSErrors keep their own errno. The store
turns those into `StoreDiskError` (one line: `farm.paths.host_write_failure`) and keeps
"damaged" for the rest. `intact(path)` checks the file itself (SQLite's quick_check on an
immutable open, which needs no -wal/-shm), so the message can say the data is safe.
"""

from __future__ import annotations

import errno
import os
import sqlite3
from pathlib import Path

from farm.errors import StoreUnavailable
from farm.paths import free_bytes

# SQLite's primary result codes that may mean "the disk", not "the file"
_SQLITE_READONLY, _SQLITE_IOERR, _SQLITE_FULL, _SQLITE_CANTOPEN = 8, 10, 13, 14
# below this much free space an I/O or cannot-open error of SQLite is a full disk
_LOW_SPACE = 1 << 20
_OS_ERRNOS = (errno.ENOSPC, errno.EDQUOT, errno.EIO, errno.EROFS)


class StoreDiskError(StoreUnavailable):
    """The disk under the store is full, failing or read-only (not damage in the file)."""

    def __init__(self, message: str, errno_: int) -> None:
        super().__init__(message)
        self.errno = errno_


def connect(target: str | Path, uri: bool = False) -> sqlite3.Connection:
    """How the store connects (autocommit, shared by its threads)."""
    return sqlite3.connect(target, timeout=30, isolation_level=None,
                           check_same_thread=False, uri=uri)


def disk_errno(exc: BaseException, path: Path) -> int | None:
    """The errno to blame when `exc` (from SQLite or the OS) came from the disk under
    `path`: ENOSPC (full), EDQUOT, EIO, EROFS; None when it is something else."""
    if isinstance(exc, OSError):
        return exc.errno if exc.errno in _OS_ERRNOS else None
    if not isinstance(exc, sqlite3.Error):
        return None
    code = (getattr(exc, "sqlite_errorcode", None) or 0) & 0xFF
    if code == _SQLITE_FULL or "database or disk is full" in str(exc):
        return errno.ENOSPC
    if code in (_SQLITE_IOERR, _SQLITE_CANTOPEN):
        free = free_bytes(path)
        if free is not None and free < _LOW_SPACE:
            return errno.ENOSPC
    if code == _SQLITE_READONLY:
        try:
            if os.statvfs(path.parent).f_flag & os.ST_RDONLY:
                return errno.EROFS
        except OSError:
            return None
    return None


def intact(path: Path) -> bool:
    """Whether the store file passes SQLite's quick_check, read as it is on disk."""
    try:
        db = connect(f"file:{path}?immutable=1", uri=True)
    except sqlite3.Error:
        return False
    try:
        return [r[0] for r in db.execute("PRAGMA quick_check")] == ["ok"]
    except sqlite3.Error:
        return False
    finally:
        db.close()
