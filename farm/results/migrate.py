"""Bring a store written by an older farm up to the current schema, in place.

A field added to `schema.FIELDS` (e.g. `rounds`, `emulated`) is a column an older store
lacks. Opening such a store (`meta.schema_version` lower than `SCHEMA_VERSION`) adds every
missing column with `ALTER TABLE records ADD COLUMN` and writes the new version into
`meta`, all in ONE transaction: a crash leaves the old store as it was, never half
migrated. Old records read the new fields as NULL (None): the older farm did not record
them, and nothing is invented for them. A column is only ever added — a store whose table
has columns the schema does not know (a newer farm's) is refused, not trimmed.

The function is generic over the field list (the store passes `schema.FIELDS`), so any
field a later change appends is migrated the same way, whatever its position in `FIELDS`:
the store names its columns in every query, so their order in the table does not matter.

The runs table grows the same way: `run_columns` (name -> SQL type) are added to it
when missing, in the same transaction; old runs read them as NULL.

Version history (the number in `meta.schema_version`):
  1  the first store.
  2  columns are migrated in place; records may carry fields added after version 1.
  3  runs name their controller (controller_pid, controller_host, controller_started:
     `farm.results.controller`), so a run whose bench was killed is found.
  4  records carry `isa`, the ISA level their route ran at (farm/isa.py); records of an
     older store read it as None (their level was never recorded, and is not guessed).
  5  rounds are the unit: `round_medians_ms`, `ci_method` (a record of version 4 or older
     reads None there and keeps its bootstrap of pooled samples: `farm results check`
     recomputes it that way), `memory_baseline_kb`.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Mapping, Sequence
from pathlib import Path

from farm.errors import StoreError
from farm.results.schema import Field

# the oldest version whose layout this module can bring up to date
OLDEST_MIGRATABLE = 1
SQL_TYPES = {"text": "TEXT", "int": "INTEGER", "real": "REAL", "json": "TEXT"}


def missing_columns(db: sqlite3.Connection, fields: Sequence[Field]) -> list[Field]:
    have = {r[1] for r in db.execute("PRAGMA table_info(records)")}
    return [f for f in fields if f.name not in have]


def extra_columns(db: sqlite3.Connection, fields: Sequence[Field]) -> list[str]:
    names = {f.name for f in fields}
    return [r[1] for r in db.execute("PRAGMA table_info(records)") if r[1] not in names]


def upgrade(db: sqlite3.Connection, path: Path, fields: Sequence[Field], found: int,
            target: int, run_columns: Mapping[str, str] | None = None) -> list[str]:
    """Migrate the store open on `db` (autocommit connection) from version `found` to
    `target`; returns the names of the records columns added. StoreError when it cannot."""
    if found < OLDEST_MIGRATABLE:
        raise StoreError(f"result store {path} has schema version {found}, older than any "
                         f"this farm can migrate (oldest: {OLDEST_MIGRATABLE})",
                         hint=f"move it aside (mv {path} {path}.v{found}) and rerun")
    extra = extra_columns(db, fields)
    if extra:
        raise StoreError(f"result store {path} (version {found}) has columns this farm does "
                         f"not know: {extra}",
                         hint="open it with the farm version that wrote it")
    added = missing_columns(db, fields)
    have_runs = {r[1] for r in db.execute("PRAGMA table_info(runs)")}
    added_runs = {n: t for n, t in (run_columns or {}).items() if n not in have_runs}
    db.execute("BEGIN IMMEDIATE")
    try:
        for f in added:
            db.execute(f'ALTER TABLE records ADD COLUMN "{f.name}" {SQL_TYPES[f.type]}')
        for name, sql_type in added_runs.items():
            db.execute(f'ALTER TABLE runs ADD COLUMN "{name}" {sql_type}')
        db.execute("UPDATE meta SET value = ? WHERE key = 'schema_version'", (str(target),))
    except BaseException:
        db.execute("ROLLBACK")
        raise
    db.execute("COMMIT")
    return [f.name for f in added]
