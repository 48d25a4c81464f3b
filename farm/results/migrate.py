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

Both backends (SQLite, PostgreSQL: `farm.results.backend`) migrate through this one
function: each hands it a `SchemaAccess` (its columns of a table, one statement, one
transaction, its SQL type of each field type). The version history is `MIGRATIONS`, one
entry per version: what it changed and any statements beyond the added columns (a new
table, an index), written in SQL both backends take. A new version is one entry there
(and `SCHEMA_VERSION` in schema.py; tests/test_pg_store.py checks they agree).
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator, Mapping, Sequence
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass
from typing import Protocol

from farm.errors import StoreError
from farm.results.schema import Field


@dataclass(frozen=True)
class Migration:
    """What version `version` changed; `statements` run after the columns are added."""

    version: int
    what: str
    statements: tuple[str, ...] = ()


# the history of `meta.schema_version`; the last entry is `schema.SCHEMA_VERSION`
MIGRATIONS: tuple[Migration, ...] = (
    Migration(1, "the first store"),
    Migration(2, "columns are migrated in place; records may carry fields added after "
                 "version 1"),
    Migration(3, "runs name their controller (controller_pid, controller_host, "
                 "controller_started: farm.results.controller), so a run whose bench was "
                 "killed is found"),
    Migration(4, "records carry `isa`, the ISA level their route ran at (farm/isa.py); "
                 "records of an older store read it as None (never recorded, not guessed)"),
    Migration(5, "rounds are the unit: `round_medians_ms`, `ci_method` (a record of version "
                 "4 or older reads None there and keeps its bootstrap of pooled samples: "
                 "`farm results check` recomputes it that way), `memory_baseline_kb`"),
)
# the oldest version whose layout this module can bring up to date
OLDEST_MIGRATABLE = MIGRATIONS[0].version
SQLITE_TYPES = {"text": "TEXT", "int": "INTEGER", "real": "REAL", "json": "TEXT"}
SQL_TYPES = SQLITE_TYPES  # the name older callers import


class SchemaAccess(Protocol):
    """What a backend lends the migration: its own SQL dialect's few needs."""

    mark: str  # the dialect's parameter placeholder

    @property
    def types(self) -> Mapping[str, str]:
        """field type ("text", "int", "real", "json") -> SQL type"""

    def columns(self, table: str) -> list[str]: ...

    def execute(self, sql: str, params: Sequence[object] = ()) -> None: ...

    def transaction(self) -> AbstractContextManager[None]: ...


class SqliteSchema:
    """`SchemaAccess` over an autocommit sqlite3 connection."""

    mark = "?"

    def __init__(self, db: sqlite3.Connection) -> None:
        self.db = db

    @property
    def types(self) -> Mapping[str, str]:
        return SQL_TYPES  # looked up when used (a test injects a failing mapping)

    def columns(self, table: str) -> list[str]:
        return [r[1] for r in self.db.execute(f"PRAGMA table_info({table})")]

    def execute(self, sql: str, params: Sequence[object] = ()) -> None:
        self.db.execute(sql, params)

    @contextmanager
    def transaction(self) -> Iterator[None]:
        self.db.execute("BEGIN IMMEDIATE")
        try:
            yield
        except BaseException:
            self.db.execute("ROLLBACK")
            raise
        self.db.execute("COMMIT")


def missing_columns(db: SchemaAccess, fields: Sequence[Field]) -> list[Field]:
    have = set(db.columns("records"))
    return [f for f in fields if f.name not in have]


def extra_columns(db: SchemaAccess, fields: Sequence[Field]) -> list[str]:
    names = {f.name for f in fields}
    return [c for c in db.columns("records") if c not in names]


def upgrade(db: SchemaAccess | sqlite3.Connection, where: object, fields: Sequence[Field],
            found: int, target: int, run_columns: Mapping[str, str] | None = None
            ) -> list[str]:
    """Migrate the store open on `db` from version `found` to `target` in one
    transaction; returns the names of the records columns added. StoreError when it
    cannot. (`where` names the store in messages.)"""
    if isinstance(db, sqlite3.Connection):
        db = SqliteSchema(db)
    if found < OLDEST_MIGRATABLE:
        raise StoreError(f"result store {where} has schema version {found}, older than any "
                         f"this farm can migrate (oldest: {OLDEST_MIGRATABLE})",
                         hint=f"move it aside (mv {where} {where}.v{found}) and rerun")
    extra = extra_columns(db, fields)
    if extra:
        raise StoreError(f"result store {where} (version {found}) has columns this farm does "
                         f"not know: {extra}",
                         hint="open it with the farm version that wrote it")
    added = missing_columns(db, fields)
    have_runs = set(db.columns("runs"))
    added_runs = {n: t for n, t in (run_columns or {}).items() if n not in have_runs}
    with db.transaction():
        for f in added:
            db.execute(f'ALTER TABLE records ADD COLUMN "{f.name}" {db.types[f.type]}')
        for name, sql_type in added_runs.items():
            db.execute(f'ALTER TABLE runs ADD COLUMN "{name}" {sql_type}')
        for step in MIGRATIONS:
            if found < step.version <= target:
                for statement in step.statements:
                    db.execute(statement)
        db.execute(f"UPDATE meta SET value = {db.mark} WHERE key = 'schema_version'",
                   (str(target),))
    return [f.name for f in added]
