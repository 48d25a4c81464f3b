"""Read a result store row by row, around damaged pages.

A store damaged inside the file (pages zeroed by a bad disk or a killed copy) still opens:
SQLite only complains ("database disk image is malformed") when a query walks onto a
damaged page. A full scan stops at the first one, so this module finds every row id it
can — from a table scan as far as it goes, from the indexes (which live on other pages and
hold the row ids of every record and run), and by probing the row id range — and then reads
each row alone by row id: a damaged page costs only the rows stored on it.

Contract:
* `scan(db, table, columns, keys)` -> `Scan`: `rows` {rowid: tuple of `columns`} of every
  readable row, `unreadable` {rowid: {key: value}} of rows that exist (a scan or an index
  names them) but could not be read (with the `keys` — e.g. record_id, run_id — that an
  index still names), `unprobed` (row ids of the probe that no source names and whose
  read failed: a row may or may not be there, so they are not counted as lost rows: with
  the table's root page zeroed every probe fails, and counting them reported 113 lost
  records of a store of 49), and `errors` (SQLite's own words, deduplicated). Never
  raises `sqlite3.DatabaseError`.
* `is_damage(exc)` -> whether a `sqlite3.DatabaseError` means a damaged file (as opposed
  to, say, a locked one).
"""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

# rows probed past the highest row id any source named: rows appended after the last
# one an index still lists (a damaged index page) are found too
_PROBE_MARGIN = 64

# what SQLite says when a query meets a damaged page or a file that is not a database
_DAMAGE_WORDS = ("malformed", "not a database", "corrupt", "disk i/o error")


def is_damage(exc: BaseException) -> bool:
    text = str(exc).lower()
    return isinstance(exc, sqlite3.DatabaseError) and any(w in text for w in _DAMAGE_WORDS)


@dataclass
class Scan:
    rows: dict[int, tuple[Any, ...]] = field(default_factory=dict)
    unreadable: dict[int, dict[str, str]] = field(default_factory=dict)
    unprobed: list[int] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)

    def note(self, exc: BaseException) -> None:
        if str(exc) not in self.errors:
            self.errors.append(str(exc))


def id_ranges(ids: Sequence[int]) -> str:
    """"1-3, 7, 9-12": row ids as ranges, for a message."""
    parts: list[tuple[int, int]] = []
    for rowid in sorted(ids):
        if parts and rowid == parts[-1][1] + 1:
            parts[-1] = (parts[-1][0], rowid)
        else:
            parts.append((rowid, rowid))
    return ", ".join(str(a) if a == b else f"{a}-{b}" for a, b in parts)


def _rowids_by_scan(db: sqlite3.Connection, table: str, out: Scan) -> set[int]:
    found: set[int] = set()
    try:
        for (rowid,) in db.execute(f"SELECT rowid FROM {table}"):
            found.add(int(rowid))
    except sqlite3.DatabaseError as exc:
        out.note(exc)
    return found


def _keys_by_index(db: sqlite3.Connection, table: str, wanted: Sequence[str],
                   out: Scan) -> dict[int, dict[str, str]]:
    """{rowid: {key: value}} from every index of `table` that covers one of `wanted` (the
    table's pages are not read: a covering index scan touches only the index's own pages)."""
    keys: dict[int, dict[str, str]] = {}
    try:
        indexes = [r[1] for r in db.execute(f"PRAGMA index_list({table})")]
    except sqlite3.DatabaseError as exc:
        out.note(exc)
        return keys
    for index in indexes:
        try:
            cols = [r[2] for r in db.execute(f'PRAGMA index_info("{index}")')]
            for key in (k for k in wanted if k == cols[0]):
                for rowid, value in db.execute(
                        f'SELECT rowid, "{key}" FROM {table} INDEXED BY "{index}"'):
                    keys.setdefault(int(rowid), {})[key] = str(value)
        except sqlite3.DatabaseError as exc:
            out.note(exc)
    return keys


def scan(db: sqlite3.Connection, table: str, columns: Sequence[str],
         keys_wanted: Sequence[str]) -> Scan:
    """Every readable row of `table` (see module docstring)."""
    out = Scan()
    rowids = _rowids_by_scan(db, table, out)
    keys = _keys_by_index(db, table, keys_wanted, out)
    rowids |= set(keys)
    try:
        top = db.execute(f"SELECT max(rowid) FROM {table}").fetchone()[0]
        if top is not None:
            rowids.add(int(top))
    except sqlite3.DatabaseError as exc:
        out.note(exc)
    highest = max(rowids, default=0)
    probe = set(range(1, highest + _PROBE_MARGIN + 1)) | rowids
    cols = ", ".join(f'"{c}"' for c in columns)
    sql = f"SELECT {cols} FROM {table} WHERE rowid = ?"
    for rowid in sorted(probe):
        try:
            row = db.execute(sql, (rowid,)).fetchone()
        except sqlite3.DatabaseError as exc:
            out.note(exc)
            if rowid in rowids:
                out.unreadable[rowid] = keys.get(rowid, {})
            else:
                out.unprobed.append(rowid)
            continue
        if row is not None:
            out.rows[rowid] = tuple(row)
        elif rowid in rowids:
            # named by a scan or an index but not there: the table page that held it is
            # gone, or the index is stale (damaged itself)
            out.unreadable[rowid] = keys.get(rowid, {})
    return out
