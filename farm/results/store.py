"""The SQLite result store: runs and their records, schema generated from `schema.FIELDS`.

One of the two backends of `farm.results.backend.Store` (the other is PostgreSQL,
`farm.results.pg_store`); `farm.results.open_store` picks it for a file path.
File: `farm.paths.state_dir() / "results.sqlite"` unless a path is given (a path, never a
URL: `farm.results.location`). Tables:

* `meta(key, value)` – `schema_version` (= `schema.SCHEMA_VERSION`). An older store is
  migrated (below); a newer one, or one of this version whose `records` columns differ
  from `FIELDS` (a field changed without a version bump), is refused with StoreError.
* `runs(run_id, started_utc, finished_utc, command, status, meta, controller_pid,
  controller_host, controller_started)` – one bench invocation; status "running" until
  `finish_run` sets ok | partial | failed | interrupted. The controller columns name the
  process writing it (`farm.results.controller`): a `running` run whose controller died
  (kill -9) is marked `interrupted` when the store is next opened (its meta says why);
  `claim_run` (a resume) makes the run running again under the new process.
* `records(<FIELDS>)` – text -> TEXT, int -> INTEGER, real -> REAL, json -> TEXT
  holding JSON. `records()` returns dicts with the JSON fields parsed.

Crash safety (chosen, not defaulted): every `add` is its own transaction, so records
written before a crash, a SIGKILL or Ctrl-C survive and a record is never half written.
The journal is WAL (`journal_mode=WAL`, kept in the file) so `farm results` can read while
a bench writes, and `synchronous=FULL` (set on every connection): each commit fsyncs the
WAL, so a record the bench reported stored survives a power cut too. NORMAL would only
risk the last records on power loss, but records are few and small (one fsync each costs
milliseconds next to a route's seconds), so durability wins. One `ResultStore` may be
shared by the worker threads of a bench (a lock serialises them).

A store written by an older farm is migrated in place when opened (`farm.results.migrate`:
missing columns added, version bumped, one transaction). Columns are named in every query,
so their order in the file does not matter.

A full (or failing) disk is not damage: every SQLite error caused by the disk becomes
`StoreDiskError` (`farm.results.disk` tells the two apart), one line naming the file
system and what to free (`farm.paths.host_write_failure`), whether it happens when opening
(SQLite cannot grow its `-shm`/`-wal` files) or writing. A reader (`create=False`) then
still reads an intact store, opened immutable. A bench writes through
`farm.results.keeper`, which sends what the disk refuses to the spill file beside the
store (`farm.results.spill`); the next open with room replays that file into the store.

Damage: a store damaged inside the file still opens; a query that meets a damaged page
raises StoreError saying the store is damaged and pointing at `farm results check` (names
what is unreadable, `farm.results.damage`) and `farm results recover OUT.sqlite` (salvages
every readable record, `farm.results.recover`). `require_sound()` (SQLite's quick_check)
is what a bench calls before writing: it refuses a damaged store.

Life cycle: `ResultStore(path)` opens or creates the file and checks its version ->
`start_run` -> `add`* [-> `set_status` of kept records] -> `finish_run` -> `close()` (or
use it as a context manager).
"""

from __future__ import annotations

import contextlib
import errno
import json
import secrets
import shlex
import sqlite3
import threading
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from farm.errors import StoreError
from farm.paths import host_write_failure, state_dir
from farm.results import controller, migrate, provenance, spill
from farm.results.backend import (
    COLUMNS_SQL,
    RUN_CONTROLLER_COLUMNS,
    RUNS_COLUMNS,
    RunInfo,
    Store,
    record_row,
)
from farm.results.damage import is_damage, scan
from farm.results.disk import StoreDiskError, connect, disk_errno, intact
from farm.results.integrity import IntegrityReport, check_store
from farm.results.location import store_location
from farm.results.schema import FIELD_NAMES, FIELDS, SCHEMA_VERSION, Field
from farm.results.validate import RECORD_STATUSES, RUN_STATUSES, normalize_record

STORE_FILENAME = "results.sqlite"
SQL_TYPES = migrate.SQLITE_TYPES

__all__ = ["RUN_STATUSES", "IntegrityReport", "ResultStore", "RunInfo", "StoreDiskError",
           "default_store_path"]


def default_store_path() -> Path:
    return state_dir() / STORE_FILENAME


def damaged_error(path: Path, what: str, exc: BaseException) -> StoreError:
    """The one message every reader gives when it meets a damaged part of a store."""
    return StoreError(
        f"result store {path} is damaged: {what} failed ({exc})",
        hint=f"`farm results check --store {path}` names the unreadable runs and records; "
             f"`farm results recover OUT.sqlite --store {path}` copies every readable record "
             "into a new store (then use OUT.sqlite, or move it over this one)")


def records_table_sql(*, if_not_exists: bool = False, link_runs: bool = True,
                      types: Mapping[str, str] = SQL_TYPES,
                      fields: Sequence[Field] = FIELDS) -> str:
    """CREATE TABLE statement of the records table, generated from `FIELDS`
    (`link_runs`: run_id references the runs table, as in the store; `types`: the
    backend's SQL type of each field type)."""
    cols = ",\n  ".join(
        f'"{f.name}" {types[f.type]}'
        + (" PRIMARY KEY" if f.name == "record_id" else "")
        + (" NOT NULL" if f.name == "run_id" else "")
        + (" REFERENCES runs(run_id)" if f.name == "run_id" and link_runs else "")
        for f in fields
    )
    return f"CREATE TABLE {'IF NOT EXISTS ' if if_not_exists else ''}records (\n  {cols}\n)"


def _create_sql() -> list[str]:
    controller_cols = "".join(f", {n} {t}" for n, t in RUN_CONTROLLER_COLUMNS.items())
    return [
        "CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)",
        "CREATE TABLE runs (run_id TEXT PRIMARY KEY, started_utc TEXT NOT NULL, "
        f"finished_utc TEXT, command TEXT NOT NULL, status TEXT NOT NULL, meta TEXT"
        f"{controller_cols})",
        records_table_sql(),
        "CREATE INDEX records_run ON records(run_id)",
    ]


def new_run_id() -> str:
    """Sortable and short to type: UTC start time plus 6 random hex digits."""
    return f"{datetime.now(timezone.utc):%Y%m%d-%H%M%S}-{secrets.token_hex(3)}"


class ResultStore(Store):
    """Open (or create) a SQLite store; see the module docstring for its life cycle."""

    def __init__(self, path: str | Path | None = None, *, create: bool = True) -> None:
        """`create=False` (readers such as `farm results`) refuses a missing file instead
        of leaving an empty store behind."""
        super().__init__()
        self.path = store_location(path) if path is not None else default_store_path()
        self.where = str(self.path)
        self.spill_file = spill.spill_path(self.path)
        self._lock = threading.RLock()
        if not create and not self.path.exists():
            raise StoreError(f"no result store at {self.path}",
                             hint="run `farm bench` first, or point --store at a store file")
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._db = connect(self.path)
        except (OSError, sqlite3.DatabaseError) as exc:
            raise self._disk_error(exc) or StoreError(
                f"result store {self.path}: cannot open ({exc})") from exc
        try:
            self._open()
        except BaseException as exc:
            self._db.close()
            if not isinstance(exc, sqlite3.DatabaseError):
                raise
            disk = self._disk_error(exc, opening=True)
            if disk is None:
                raise StoreError(
                    f"result store {self.path}: cannot be read as SQLite ({exc})",
                    hint="move the file aside and rerun; a new store is created",
                ) from exc
            if create or not self._open_immutable():
                raise disk from exc
        self._settle()

    def _disk_error(self, exc: BaseException, *, opening: bool = False
                    ) -> StoreDiskError | None:
        """The one-line StoreDiskError when `exc` is the disk's fault, else None."""
        err = disk_errno(exc, self.path)
        if err is None:
            return None
        note = ""
        if opening and self.path.exists():
            note = ("the file is intact: SQLite needs room for its -wal/-shm to open it"
                    if intact(self.path) else "the file may also be damaged")
        return StoreDiskError(host_write_failure(self.path, err, "the result store", note), err)

    def _open_immutable(self) -> bool:
        """A reader on a full disk: open the file as it is, without the -shm/-wal SQLite
        cannot create. Only when no committed data waits in the WAL (a closed store)."""
        wal = Path(f"{self.path}-wal")
        if wal.exists() and wal.stat().st_size > 0:
            return False
        try:
            self._db = connect(f"file:{self.path}?immutable=1", uri=True)
            self.read_only = True
            self._open()
        except (sqlite3.DatabaseError, StoreError):
            self._db.close()
            return False
        return True

    # -- opening -------------------------------------------------------------------------
    def _open(self) -> None:
        tables = {r[0] for r in self._db.execute(
            "SELECT name FROM sqlite_master WHERE type = 'table'")}
        # see the module docstring: WAL for reading while a bench writes, FULL for durability
        self._db.execute("PRAGMA synchronous=FULL")
        if not tables:
            self._db.execute("PRAGMA journal_mode=WAL")
            with self._transaction():
                for stmt in _create_sql():
                    self._db.execute(stmt)
                self._db.execute("INSERT INTO meta VALUES ('schema_version', ?)",
                                 (str(SCHEMA_VERSION),))
            return
        if "meta" not in tables:
            raise StoreError(f"{self.path} is a SQLite file but not a farm result store",
                             hint="use another path (--store) or move the file aside")
        row = self._db.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone()
        version = row[0] if row else None
        if version is not None and version.isdigit() and not self.read_only and \
                migrate.OLDEST_MIGRATABLE <= int(version) < SCHEMA_VERSION:
            self.migrated = migrate.upgrade(migrate.SqliteSchema(self._db), str(self.path),
                                            FIELDS, int(version), SCHEMA_VERSION,
                                            RUN_CONTROLLER_COLUMNS)
            version = str(SCHEMA_VERSION)
        if version != str(SCHEMA_VERSION):
            newer = version is not None and version.isdigit() and int(version) > SCHEMA_VERSION
            raise StoreError(
                f"result store {self.path} has schema version {version}; "
                f"this farm reads version {SCHEMA_VERSION} only",
                hint="upgrade farm to read it" if newer else
                f"move it aside (mv {self.path} {self.path}.v{version}) and rerun; "
                f"the farm version that wrote it can still read it",
            )
        columns = [r[1] for r in self._db.execute("PRAGMA table_info(records)")]
        if set(columns) != set(FIELD_NAMES):
            raise StoreError(
                f"result store {self.path}: records columns differ from schema version "
                f"{SCHEMA_VERSION} (missing {sorted(set(FIELD_NAMES) - set(columns))}, "
                f"extra {sorted(set(columns) - set(FIELD_NAMES))})",
                hint="the field list changed without a SCHEMA_VERSION bump; bump it in "
                     "farm/results/schema.py, or move this store aside",
            )
        run_columns = {r[1] for r in self._db.execute("PRAGMA table_info(runs)")}
        if not set(RUNS_COLUMNS) <= run_columns:
            raise StoreError(
                f"result store {self.path}: runs table lacks "
                f"{sorted(set(RUNS_COLUMNS) - run_columns)} (schema version {SCHEMA_VERSION})",
                hint="move this store aside; the farm version that wrote it can read it")

    def _settle(self) -> None:
        """What opening a store also does: runs whose controller died become
        `interrupted`, and a spill file left by a full disk is written into the store.
        Neither may stop the opening: on a disk still full they wait for the next one."""
        try:
            with self._reading("reading the runs") as db:
                rows = db.execute(
                    "SELECT run_id, controller_pid, controller_host, controller_started, meta "
                    "FROM runs WHERE status = 'running'").fetchall()
        except StoreError:
            return
        for run_id, pid, host, started, _meta in rows:
            if controller.is_gone(pid, host, started):
                self.interrupted[run_id] = (f"its controller (pid {pid} on {host}, started "
                                            f"{started or '?'}) is gone: killed before it "
                                            "finished; `farm bench --resume` continues it")
        if self.read_only:
            return
        try:
            with self._transaction() as db:
                for run_id, *_, meta in rows:
                    if run_id in self.interrupted:
                        full = {**json.loads(meta or "{}"),
                                "interrupted": self.interrupted[run_id],
                                "interrupted_found_utc": provenance.utc_now()}
                        db.execute("UPDATE runs SET status = 'interrupted', meta = ? "
                                   "WHERE run_id = ? AND status = 'running'",
                                   (json.dumps(full), run_id))
            self.replayed = spill.replay(self.spill_file, self._apply_spill)
        except (StoreError, OSError, ValueError):
            return

    def _apply_spill(self, entries: list[spill.Entry]) -> None:
        marks = ", ".join("?" * len(FIELDS))
        with self._transaction() as db:
            for entry in entries:
                if entry["kind"] == "record":
                    full = normalize_record(entry["record"])
                    db.execute("INSERT OR IGNORE INTO runs (run_id, started_utc, command, "
                               "status, meta) VALUES (?, ?, '(kept in a spill file)', "
                               "'partial', '{}')", (full["run_id"], full["created_utc"]))
                    db.execute(f"INSERT OR IGNORE INTO records ({COLUMNS_SQL}) VALUES "
                               f"({marks})", self._row(full))
                elif entry["kind"] == "status":
                    for record_id in entry["record_ids"]:
                        db.execute("UPDATE records SET status = ?, status_detail = ? "
                                   "WHERE record_id = ?",
                                   (entry["status"], entry["detail"], record_id))
                else:
                    db.execute("UPDATE runs SET finished_utc = ?, status = ? WHERE run_id = ?",
                               (entry["finished_utc"], entry["status"], entry["run_id"]))

    @contextmanager
    def _transaction(self) -> Iterator[sqlite3.Connection]:
        with self._reading("writing"):
            if self.read_only:
                raise StoreDiskError(host_write_failure(self.path, errno.ENOSPC,
                                                        "the result store"), errno.ENOSPC)
            self._db.execute("BEGIN IMMEDIATE")
            try:
                yield self._db
                self._db.execute("COMMIT")  # a full disk may refuse the commit itself
            except BaseException:
                if self._db.in_transaction:
                    with contextlib.suppress(sqlite3.Error):
                        self._db.execute("ROLLBACK")
                raise

    @contextmanager
    def _reading(self, what: str) -> Iterator[sqlite3.Connection]:
        """The connection, under the lock; a full disk becomes StoreDiskError, a damaged
        page the "damaged" StoreError."""
        with self._lock:
            try:
                yield self._db
            except sqlite3.DatabaseError as exc:
                disk = self._disk_error(exc)
                if disk is not None:
                    raise disk from exc
                if is_damage(exc):
                    raise damaged_error(self.path, what, exc) from exc
                raise

    def release_space(self) -> None:
        """After a write the disk refused: hand the WAL's space back (checkpoint and
        truncate it) so that smaller writes, such as the spill file's, may still fit.
        Harmless when it cannot."""
        with self._lock, contextlib.suppress(sqlite3.Error):
            self._db.execute("PRAGMA wal_checkpoint(TRUNCATE)")

    def quick_check(self) -> list[str]:
        """SQLite's `PRAGMA quick_check` (structure only, no index contents): [] when the
        file is sound, else its complaints."""
        with self._lock:
            try:
                rows = [str(r[0]) for r in self._db.execute("PRAGMA quick_check")]
            except sqlite3.DatabaseError as exc:
                return [str(exc)]
        return [] if rows == ["ok"] else rows

    def require_sound(self) -> None:
        """Refuse to write into a damaged store (a bench calls this before it starts):
        records added to a damaged file could land on, or next to, the broken pages."""
        problems = self.quick_check()
        if problems:
            raise damaged_error(self.path, "SQLite's quick_check",
                                "; ".join(problems[:3]) + (" ..." if len(problems) > 3 else ""))

    def close(self) -> None:
        with self._lock:
            self._db.close()

    # -- runs ----------------------------------------------------------------------------
    def start_run(self, command: str | Sequence[str], meta: Mapping[str, Any] | None = None
                  ) -> str:
        """Record a new run (status "running") and return its id. `meta` is free-form
        JSON (devices, model, policy...); host provenance is added under "provenance"."""
        cmd = command if isinstance(command, str) else shlex.join(command)
        full_meta = {"provenance": provenance.host_provenance(), **dict(meta or {})}
        run_id = new_run_id()
        me = controller.this_controller()
        with self._transaction() as db:
            db.execute(f"INSERT INTO runs ({', '.join(RUNS_COLUMNS)}) "
                       "VALUES (?, ?, NULL, ?, 'running', ?, ?, ?, ?)",
                       (run_id, provenance.utc_now(), cmd, json.dumps(full_meta), me.pid,
                        me.host, me.started))
        return run_id

    def claim_run(self, run_id: str) -> None:
        """This process continues `run_id` (`farm bench --resume`): running again, with
        this process as its controller, so a kill of the resume is found like any other."""
        me = controller.this_controller()
        with self._transaction() as db:
            cur = db.execute("UPDATE runs SET status = 'running', finished_utc = NULL, "
                             "controller_pid = ?, controller_host = ?, controller_started = ? "
                             "WHERE run_id = ?", (me.pid, me.host, me.started, run_id))
            if cur.rowcount != 1:
                raise StoreError(f"run {run_id!r} is not in {self.path}")
        self.interrupted.pop(run_id, None)

    def discard_run(self, run_id: str) -> bool:
        """Remove a run that holds no record (a bench refused on every device stores no
        run); False, and nothing changes, when it has records."""
        with self._transaction() as db:
            if db.execute("SELECT 1 FROM records WHERE run_id = ? LIMIT 1",
                          (run_id,)).fetchone() is not None:
                return False
            db.execute("DELETE FROM runs WHERE run_id = ?", (run_id,))
        return True

    def finish_run(self, run_id: str, status: str) -> None:
        if status not in RUN_STATUSES[1:]:
            raise StoreError(f"run {run_id}: cannot finish with status {status!r}; "
                             f"use one of {list(RUN_STATUSES[1:])}")
        with self._transaction() as db:
            cur = db.execute("UPDATE runs SET finished_utc = ?, status = ? WHERE run_id = ?",
                             (provenance.utc_now(), status, run_id))
            if cur.rowcount != 1:
                raise StoreError(f"run {run_id!r} is not in {self.path}")

    def runs(self) -> list[RunInfo]:
        """Every run, oldest first, with its record count; a `running` run whose
        controller is gone reads `interrupted` (also when the store could not be written
        to say so)."""
        with self._reading("reading the runs") as db:
            rows = db.execute(
                "SELECT r.run_id, r.started_utc, r.finished_utc, r.command, r.status, r.meta, "
                "(SELECT COUNT(*) FROM records c WHERE c.run_id = r.run_id) "
                "FROM runs r ORDER BY r.started_utc, r.run_id").fetchall()
        out = []
        for row in rows:
            meta, status = json.loads(row[5] or "{}"), row[4]
            if status == "running" and row[0] in self.interrupted:
                status, meta = "interrupted", {**meta, "interrupted": self.interrupted[row[0]]}
            out.append(RunInfo(*row[:4], status=status, meta=meta, n_records=row[6]))
        return out

    def _latest_run(self) -> str | None:
        with self._reading("reading the runs") as db:
            row = db.execute("SELECT run_id FROM runs ORDER BY started_utc DESC, run_id DESC "
                             "LIMIT 1").fetchone()
        return None if row is None else str(row[0])

    def _runs_with_prefix(self, prefix: str) -> list[str]:
        with self._reading("reading the runs") as db:
            return [str(r[0]) for r in db.execute(
                "SELECT run_id FROM runs WHERE substr(run_id, 1, ?) = ? ORDER BY run_id",
                (len(prefix), prefix))]

    # -- meta ----------------------------------------------------------------------------
    def set_meta(self, key: str, value: str) -> None:
        """Set one key of the meta table (e.g. a run tag, `farm.results.tags`)."""
        if key == "schema_version":
            raise StoreError("the schema version of a store is not set by hand")
        with self._transaction() as db:
            db.execute("INSERT OR REPLACE INTO meta VALUES (?, ?)", (key, value))

    def meta_items(self, prefix: str) -> dict[str, str]:
        """Meta keys starting with `prefix` (prefix removed) and their values."""
        with self._lock:
            rows = self._db.execute(
                "SELECT key, value FROM meta WHERE substr(key, 1, ?) = ? ORDER BY key",
                (len(prefix), prefix)).fetchall()
        return {str(k)[len(prefix):]: str(v) for k, v in rows}

    # -- records -------------------------------------------------------------------------
    _row = staticmethod(record_row)

    def _insert(self, full: dict[str, Any]) -> dict[str, Any]:
        values = self._row(full)
        marks = ", ".join("?" * len(FIELDS))  # columns named: their order in the file is free
        with self._transaction() as db:
            if db.execute("SELECT 1 FROM runs WHERE run_id = ?", (full["run_id"],)
                          ).fetchone() is None:
                raise StoreError(f"record for run {full['run_id']!r}: no such run in "
                                 f"{self.path}", hint="call start_run() first")
            try:
                db.execute(f"INSERT INTO records ({COLUMNS_SQL}) VALUES ({marks})", values)
            except sqlite3.IntegrityError as exc:
                raise StoreError(f"record {full['record_id']!r} not stored: {exc}") from exc
        return full

    def set_status(self, record_ids: Sequence[str], status: str, detail: str | None) -> None:
        """Re-mark stored records (e.g. "partial" once their device failed later in the
        run), in one transaction. Only status and status_detail change: the
        measurements of a record are never edited after it is written."""
        if status not in RECORD_STATUSES:
            raise StoreError(f"status {status!r} is not one of {list(RECORD_STATUSES)}")
        with self._transaction() as db:
            for record_id in record_ids:
                cur = db.execute(
                    "UPDATE records SET status = ?, status_detail = ? WHERE record_id = ?",
                    (status, detail, record_id))
                if cur.rowcount != 1:
                    raise StoreError(f"record {record_id!r} is not in {self.path}")

    def records(self, run_id: str | list[str] | None = None, **filters: Any
                ) -> list[dict[str, Any]]:
        """Records in write order, filtered by equality on any field (a list/tuple value
        means "any of"); JSON fields are parsed."""
        if run_id is not None:
            filters["run_id"] = run_id
        where, params = self._filters(filters, "?")
        sql = f"SELECT {COLUMNS_SQL} FROM records" + (
            " WHERE " + " AND ".join(where) if where else "")
        what = f"reading the records of run {run_id}" if run_id else "reading records"
        try:
            with self._reading(what) as db:
                rows = db.execute(sql + " ORDER BY created_utc, rowid", params).fetchall()
        except StoreError as exc:
            if not isinstance(exc.__cause__, sqlite3.DatabaseError):
                raise
            rows = self._records_around_damage(filters, exc)
        return [self._decode(row) for row in rows]

    def _records_around_damage(self, filters: dict[str, Any], damaged: StoreError
                               ) -> list[tuple[Any, ...]]:
        """The query's rows read one by one (the damage may be in an index, or on pages
        of other runs); `damaged` is raised when an unreadable row may be one of them."""
        with self._lock:
            found = scan(self._db, "records", FIELD_NAMES, ("record_id", "run_id"))

        def wanted(value: Any, want: Any) -> bool:
            many = isinstance(want, (list, tuple, set, frozenset))
            return value in want if many else value == want

        run = filters.get("run_id")
        if found.unprobed:  # rows no index names may be there, of any run
            raise damaged
        for keys in found.unreadable.values():
            if run is None or "run_id" not in keys or wanted(keys["run_id"], run):
                raise damaged
        index = {name: i for i, name in enumerate(FIELD_NAMES)}
        rows = [(rowid, row) for rowid, row in found.rows.items()
                if all(wanted(row[index[k]], v) for k, v in filters.items())]
        rows.sort(key=lambda item: (item[1][index["created_utc"]] or "", item[0]))
        return [row for _, row in rows]

    def import_run(self, run: RunInfo, records: Sequence[Mapping[str, Any]]
                   ) -> tuple[bool, int]:
        marks = ", ".join("?" * len(FIELDS))
        with self._transaction() as db:
            cur = db.execute("INSERT OR IGNORE INTO runs (run_id, started_utc, finished_utc, "
                             "command, status, meta) VALUES (?, ?, ?, ?, ?, ?)",
                             (run.run_id, run.started_utc, run.finished_utc, run.command,
                              run.status, json.dumps(run.meta)))
            run_added = cur.rowcount == 1
            before = db.total_changes
            db.executemany(f"INSERT OR IGNORE INTO records ({COLUMNS_SQL}) VALUES ({marks})",
                           [self._row(r) for r in records])
            return run_added, db.total_changes - before

    def integrity_check(self) -> IntegrityReport:
        """SQLite's own check, JSON fields parse, statistics match `samples_ms`,
        every record belongs to a run. Reports problems; does not raise on them."""
        with self._lock:
            return check_store(self._db)
