"""What the result store could not take, kept beside it until it can.

When a store cannot take a write now (the disk under a SQLite file is full or failing, a
PostgreSQL server went away), the bench's keeper (`farm.results.keeper`) appends it to
the store's spill file (`Store.spill_file`: `<store>.spill` beside a SQLite file,
`spill_path`; under `$FARM_HOME/spill/` for a server), one JSON object a line:

  {"kind": "record", "record": {...}}        a whole record, already checked and completed
  {"kind": "status", "record_ids": [...], "status": S, "detail": D}   a failed set_status
  {"kind": "finish", "run_id": R, "status": S, "finished_utc": T}    a failed finish_run

A line needs a few KiB where SQLite needs whole pages in its WAL, so a disk too full for
the store often still takes it. Every append holds an exclusive flock on the file and
either writes its whole line or truncates back to where it started: a reader never sees a
half line (one cut by a crash is skipped). `replay(path, apply)` is the way back: under the
same flock it reads every entry, calls `apply(entries)` (the store applies them in one
transaction) and removes the file only when `apply` returned. An appender that waited on
the lock of a file removed meanwhile writes to a new one (it checks the link count).
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, BinaryIO

Entry = dict[str, Any]


def spill_path(store_path: Path) -> Path:
    return store_path.with_name(store_path.name + ".spill")


@contextlib.contextmanager
def _locked(path: Path, *, create: bool) -> Iterator[BinaryIO | None]:
    """The file open for read+append under an exclusive flock (None when absent and not
    `create`); reopened when it was removed while we waited for the lock."""
    while True:
        flags = os.O_RDWR | os.O_APPEND | (os.O_CREAT if create else 0)
        try:
            fd = os.open(path, flags, 0o644)
        except FileNotFoundError:
            yield None
            return
        handle = os.fdopen(fd, "r+b", buffering=0)
        with handle:
            fcntl.flock(handle, fcntl.LOCK_EX)
            if os.fstat(handle.fileno()).st_nlink == 0:
                continue  # replayed and removed while we waited: start a new file
            yield handle
            return


def append(path: Path, entry: Entry) -> None:
    """Add one entry; OSError (the disk is full here too) leaves the file as it was."""
    line = json.dumps(entry, allow_nan=False).encode() + b"\n"
    path.parent.mkdir(parents=True, exist_ok=True)  # a server store's: under $FARM_HOME/spill
    with _locked(path, create=True) as handle:
        assert handle is not None
        start = os.fstat(handle.fileno()).st_size
        try:
            handle.write(line)
            os.fsync(handle.fileno())
        except OSError:
            with contextlib.suppress(OSError):
                os.ftruncate(handle.fileno(), start)
                if start == 0:
                    path.unlink()  # ours and empty (a waiting appender sees it unlinked)
            raise


def _entries(data: bytes) -> list[Entry]:
    out = []
    for raw in data.splitlines():
        try:
            entry = json.loads(raw)
        except ValueError:
            continue  # a line cut by a crash: it was never reported kept
        if isinstance(entry, dict) and entry.get("kind") in ("record", "status", "finish"):
            out.append(entry)
    return out


def read(path: Path) -> list[Entry]:
    """Every entry of the spill file (none when there is no file)."""
    with _locked(path, create=False) as handle:
        return [] if handle is None else _entries(handle.read())


def replay(path: Path, apply: Callable[[list[Entry]], None]) -> int:
    """Hand every entry to `apply`, then remove the file; returns how many entries.
    The file stays when `apply` raises."""
    with _locked(path, create=False) as handle:
        if handle is None:
            return 0
        entries = _entries(handle.read())
        if entries:
            apply(entries)
        path.unlink()
        return len(entries)
