"""The PostgreSQL result store: the SQLite store's tables and contract on a shared server.

`--store postgresql://USER[:PASSWORD]@HOST[:PORT]/DB` (or `$FARM_STORE`), through psycopg 3
(`psycopg[binary]`, pinned in pyproject.toml). Several benches and controllers, on one host
or many, write into one database at once; CI runners push their runs into it and
`farm compare main latest` reads it.

Tables are those of `farm.results.store` (generated from `schema.FIELDS`; JSON fields are
TEXT holding JSON, as in SQLite, so a record pushed from one backend to the other reads
back the same), with PostgreSQL's types (BIGINT, DOUBLE PRECISION). Creating and migrating
the schema (`farm.results.migrate`, the same steps as SQLite) run in one transaction
under an advisory lock, so two controllers that open a new or older database at once do
it once. Every record is its own transaction (autocommit connection, `conn.transaction()`
per write): a bench killed -9 leaves its last record either committed or absent, never
half-written; the server rolls back what an abandoned connection left open.

Errors are one line each, the password never shown (`location.redacted`):
* a URL psycopg cannot parse: StoreError "not a valid PostgreSQL URL";
* a refused login (bad password, unknown role, pg_hba) or a missing database: StoreError
  naming the user / database and what to fix;
* a server that cannot be reached, goes away mid-bench (connection refused, reset,
  admin shutdown) or does not take connections now (starting up, shutting down, too many
  connections): `StoreUnavailable`. The bench's keeper (`farm.results.keeper`) then
  keeps the write in this store's spill file, a local file under `$FARM_HOME/spill/`
  named after the server and database, and the bench goes on measuring; the next write
  reconnects. The spill file is replayed when the store is next opened (its records are
  keyed by record id: replaying twice adds nothing), which `farm results push URL` does.

Life cycle: as `farm.results.backend.Store`.
"""

from __future__ import annotations

import hashlib
import json
import re
import shlex
import threading
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import Any

import psycopg
from psycopg import conninfo

from farm.errors import StoreError, StoreUnavailable
from farm.paths import state_dir
from farm.results import controller, migrate, provenance, spill
from farm.results.backend import (
    COLUMNS_SQL,
    RUN_CONTROLLER_COLUMNS,
    RUNS_COLUMNS,
    RunInfo,
    Store,
    record_row,
)
from farm.results.integrity import IntegrityReport, check_rows
from farm.results.location import redacted
from farm.results.schema import FIELD_NAMES, FIELDS, SCHEMA_VERSION
from farm.results.store import new_run_id, records_table_sql
from farm.results.validate import RECORD_STATUSES, RUN_STATUSES, normalize_record

PG_TYPES = {"text": "TEXT", "int": "BIGINT", "real": "DOUBLE PRECISION", "json": "TEXT"}
_RUN_TYPES = {"INTEGER": "BIGINT", "TEXT": "TEXT"}
# pg_advisory_xact_lock key of schema creation and migration ("farm" in ASCII)
_SCHEMA_LOCK = 0x6661726D
CONNECT_TIMEOUT_S = 5
URL_FORM = "postgresql://USER[:PASSWORD]@HOST[:PORT]/DATABASE"
_REACH = re.compile(r"connection refused|timeout expired|could not translate host name|"
                    r"no route to host|network is unreachable|server closed the connection|"
                    r"name or service not known|could not connect", re.I)
_LOGIN = re.compile(r"password authentication failed|no password supplied|role .* does not "
                    r"exist|pg_hba\.conf|authentication failed", re.I)


class PgSchema:
    """`migrate.SchemaAccess` over a psycopg connection."""

    mark = "%s"
    types = PG_TYPES

    def __init__(self, conn: psycopg.Connection[Any]) -> None:
        self.conn = conn

    def columns(self, table: str) -> list[str]:
        return [str(r[0]) for r in self.conn.execute(
            "SELECT column_name FROM information_schema.columns WHERE table_schema = "
            "current_schema() AND table_name = %s ORDER BY ordinal_position", (table,))]

    def execute(self, sql: str, params: Sequence[object] = ()) -> None:
        self.conn.execute(sql, tuple(params) or None)

    @contextmanager
    def transaction(self) -> Iterator[None]:
        with self.conn.transaction():
            yield


def _create_sql() -> list[str]:
    run_cols = "".join(f", {n} {_RUN_TYPES[t]}" for n, t in RUN_CONTROLLER_COLUMNS.items())
    return [
        "CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)",
        "CREATE TABLE runs (run_id TEXT PRIMARY KEY, started_utc TEXT NOT NULL, "
        f"finished_utc TEXT, command TEXT NOT NULL, status TEXT NOT NULL, meta TEXT{run_cols})",
        records_table_sql(types=PG_TYPES),
        "CREATE INDEX records_run ON records(run_id)",
    ]


def _one_line(exc: BaseException, secret: str | None) -> str:
    text = " ".join(str(exc).split())
    text = re.sub(r"^connection failed: ", "", text)
    return text.replace(secret, "***") if secret else text


def spill_file_for(url: str) -> Path:
    """The local spill file of the database `url` names (same server, port, database and
    user: same file, whatever the password or option order)."""
    try:
        parts = conninfo.conninfo_to_dict(url)
    except psycopg.Error:
        parts = {}
    key = "|".join(str(parts.get(k, "")) for k in ("host", "port", "dbname", "user"))
    digest = hashlib.sha256(key.encode()).hexdigest()[:16]
    return state_dir() / "spill" / f"postgresql-{digest}.spill"


class PgStore(Store):
    """A store in a PostgreSQL database; see the module docstring."""

    spill_back = "`farm results push URL` sends it to the server, as does the store's next open"

    def __init__(self, url: str, *, create: bool = True) -> None:
        super().__init__()
        self.url = url
        self.where = redacted(url)
        self._lock = threading.RLock()
        self._conn: psycopg.Connection[Any] | None = None
        try:
            self._params = conninfo.conninfo_to_dict(url)
        except psycopg.Error as exc:
            raise StoreError(f"result store {self.where}: not a valid PostgreSQL URL "
                             f"({_one_line(exc, None)})", hint=f"write it as {URL_FORM}") from exc
        self._secret = self._params.get("password")
        self.spill_file = spill_file_for(url)
        self._params.setdefault("connect_timeout", CONNECT_TIMEOUT_S)
        self._params.setdefault("application_name", "farm")
        self._connection()
        self._open(create)
        self._settle()

    # -- connecting ----------------------------------------------------------------------
    def _connection(self) -> psycopg.Connection[Any]:
        """The open connection, or a new one (after the server went away)."""
        if self._conn is not None and not self._conn.closed and not self._conn.broken:
            return self._conn
        self._conn = None
        try:
            self._conn = psycopg.connect(autocommit=True, **self._params)
        except psycopg.Error as exc:
            raise self._connect_error(exc) from exc
        return self._conn

    def _connect_error(self, exc: psycopg.Error) -> StoreError:
        text = _one_line(exc, self._secret)
        user, db = self._params.get("user", "(default user)"), self._params.get("dbname", "?")
        if _LOGIN.search(text):
            return StoreError(f"result store {self.where}: the server refused the login of "
                              f"user {user!r}: {text}",
                              hint="check the user and password in the URL (or PGPASSWORD, "
                                   "~/.pgpass) and the server's pg_hba.conf")
        if re.search(r"database .* does not exist", text):
            return StoreError(f"result store {self.where}: database {db!r} does not exist "
                              f"on the server: {text}",
                              hint=f"create it (createdb {shlex.quote(str(db))}) or fix the "
                                   "database name in the URL")
        if isinstance(exc, psycopg.ProgrammingError) or re.search(
                r"invalid .*(value|option)|missing \"=\"|invalid URI", text):
            return StoreError(f"result store {self.where}: not a valid PostgreSQL URL "
                              f"({text})", hint=f"write it as {URL_FORM}")
        if _REACH.search(text):
            return StoreUnavailable(f"result store {self.where}: cannot reach the PostgreSQL "
                                    f"server: {text}",
                                    hint="is the server running, and are host and port in "
                                         "the URL right?")
        # the rest is the server's state, not the URL's: starting up, shutting down, in
        # recovery, too many connections. A bench spills and retries on its next write
        return StoreUnavailable(f"result store {self.where}: the PostgreSQL server does not "
                                f"take connections now: {text}",
                                hint="farm retries on the next write; see the server's log")

    @contextmanager
    def _session(self, what: str) -> Iterator[psycopg.Connection[Any]]:
        """The connection, under the lock; a lost server becomes StoreUnavailable, any
        other database error a one-line StoreError."""
        with self._lock:
            conn = self._connection()
            try:
                yield conn
            except (psycopg.OperationalError, psycopg.InterfaceError) as exc:
                self._drop()
                raise StoreUnavailable(
                    f"result store {self.where}: the PostgreSQL server went away while "
                    f"{what}: {_one_line(exc, self._secret)}",
                    hint="farm reconnects on the next write; a bench keeps what it could not "
                         "store in its spill file for `farm results push`") from exc
            except psycopg.Error as exc:
                raise StoreError(f"result store {self.where}: {what} failed: "
                                 f"{_one_line(exc, self._secret)}") from exc

    @contextmanager
    def _transaction(self, what: str) -> Iterator[psycopg.Connection[Any]]:
        with self._session(what) as conn, conn.transaction():
            yield conn

    def _drop(self) -> None:
        if self._conn is not None:
            with suppress(psycopg.Error):
                self._conn.close()
            self._conn = None

    def close(self) -> None:
        with self._lock:
            self._drop()

    # -- opening -------------------------------------------------------------------------
    def _open(self, create: bool) -> None:
        with self._transaction("opening the store") as conn:
            conn.execute("SELECT pg_advisory_xact_lock(%s)", (_SCHEMA_LOCK,))
            tables = {str(r[0]) for r in conn.execute(
                "SELECT table_name FROM information_schema.tables "
                "WHERE table_schema = current_schema()")}
            if not tables & {"meta", "runs", "records"}:
                if not create:
                    raise StoreError(f"no farm result store in {self.where} (no tables yet)",
                                     hint="run `farm bench --store URL` or `farm results push "
                                          "URL` first")
                for statement in _create_sql():
                    conn.execute(statement)
                conn.execute("INSERT INTO meta VALUES ('schema_version', %s)",
                             (str(SCHEMA_VERSION),))
                return
            if "meta" not in tables:
                raise StoreError(f"{self.where} holds tables but is not a farm result store",
                                 hint="use another database (or schema) in the URL")
            row = conn.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone()
            version = row[0] if row else None
            if version is not None and version.isdigit() and \
                    migrate.OLDEST_MIGRATABLE <= int(version) < SCHEMA_VERSION:
                self.migrated = migrate.upgrade(
                    PgSchema(conn), self.where, FIELDS, int(version), SCHEMA_VERSION,
                    {n: _RUN_TYPES[t] for n, t in RUN_CONTROLLER_COLUMNS.items()})
                version = str(SCHEMA_VERSION)
            if version != str(SCHEMA_VERSION):
                newer = version is not None and version.isdigit() and \
                    int(version) > SCHEMA_VERSION
                raise StoreError(
                    f"result store {self.where} has schema version {version}; this farm "
                    f"reads version {SCHEMA_VERSION} only",
                    hint="upgrade farm to read it" if newer else
                    "the farm version that wrote it can still read it")
            columns = PgSchema(conn).columns("records")
            if set(columns) != set(FIELD_NAMES):
                raise StoreError(
                    f"result store {self.where}: records columns differ from schema version "
                    f"{SCHEMA_VERSION} (missing {sorted(set(FIELD_NAMES) - set(columns))}, "
                    f"extra {sorted(set(columns) - set(FIELD_NAMES))})",
                    hint="the field list changed without a SCHEMA_VERSION bump")

    def _settle(self) -> None:
        """As the SQLite store: runs of this host whose controller died become
        `interrupted`; this store's spill file is written in. Neither stops the opening."""
        try:
            with self._session("reading the runs") as conn:
                rows = conn.execute(
                    "SELECT run_id, controller_pid, controller_host, controller_started, meta "
                    "FROM runs WHERE status = 'running'").fetchall()
        except StoreError:
            return
        for run_id, pid, host, started, _meta in rows:
            if controller.is_gone(pid, host, started):
                self.interrupted[run_id] = (f"its controller (pid {pid} on {host}, started "
                                            f"{started or '?'}) is gone: killed before it "
                                            "finished; `farm bench --resume` continues it")
        try:
            with self._transaction("marking interrupted runs") as conn:
                for run_id, *_, meta in rows:
                    if run_id in self.interrupted:
                        full = {**json.loads(meta or "{}"),
                                "interrupted": self.interrupted[run_id],
                                "interrupted_found_utc": provenance.utc_now()}
                        conn.execute("UPDATE runs SET status = 'interrupted', meta = %s "
                                     "WHERE run_id = %s AND status = 'running'",
                                     (json.dumps(full), run_id))
            self.replay_spill()
        except (StoreError, OSError, ValueError):
            return

    def replay_spill(self) -> int:
        """Write this store's spill file in (one transaction); how many entries."""
        self.replayed += spill.replay(self.spill_file, self._apply_spill)
        return self.replayed

    def _apply_spill(self, entries: list[spill.Entry]) -> None:
        marks = ", ".join(["%s"] * len(FIELDS))
        with self._transaction("writing the spill file in") as conn:
            for entry in entries:
                if entry["kind"] == "record":
                    full = normalize_record(entry["record"])
                    conn.execute("INSERT INTO runs (run_id, started_utc, command, status, meta) "
                                 "VALUES (%s, %s, '(kept in a spill file)', 'partial', '{}') "
                                 "ON CONFLICT (run_id) DO NOTHING",
                                 (full["run_id"], full["created_utc"]))
                    conn.execute(f"INSERT INTO records ({COLUMNS_SQL}) VALUES ({marks}) "
                                 "ON CONFLICT (record_id) DO NOTHING", record_row(full))
                elif entry["kind"] == "status":
                    for record_id in entry["record_ids"]:
                        conn.execute("UPDATE records SET status = %s, status_detail = %s "
                                     "WHERE record_id = %s",
                                     (entry["status"], entry["detail"], record_id))
                else:
                    conn.execute("UPDATE runs SET finished_utc = %s, status = %s "
                                 "WHERE run_id = %s",
                                 (entry["finished_utc"], entry["status"], entry["run_id"]))

    # -- runs ----------------------------------------------------------------------------
    def start_run(self, command: str | Sequence[str], meta: Mapping[str, Any] | None = None
                  ) -> str:
        cmd = command if isinstance(command, str) else shlex.join(command)
        full_meta = {"provenance": provenance.host_provenance(), **dict(meta or {})}
        run_id = new_run_id()
        me = controller.this_controller()
        with self._transaction("starting a run") as conn:
            conn.execute(f"INSERT INTO runs ({', '.join(RUNS_COLUMNS)}) "
                         "VALUES (%s, %s, NULL, %s, 'running', %s, %s, %s, %s)",
                         (run_id, provenance.utc_now(), cmd, json.dumps(full_meta), me.pid,
                          me.host, me.started))
        return run_id

    def claim_run(self, run_id: str) -> None:
        me = controller.this_controller()
        with self._transaction("claiming a run") as conn:
            cur = conn.execute(
                "UPDATE runs SET status = 'running', finished_utc = NULL, controller_pid = %s, "
                "controller_host = %s, controller_started = %s WHERE run_id = %s",
                (me.pid, me.host, me.started, run_id))
            if cur.rowcount != 1:
                raise StoreError(f"run {run_id!r} is not in {self.where}")
        self.interrupted.pop(run_id, None)

    def discard_run(self, run_id: str) -> bool:
        with self._transaction("discarding a run") as conn:
            if conn.execute("SELECT 1 FROM records WHERE run_id = %s LIMIT 1",
                            (run_id,)).fetchone() is not None:
                return False
            conn.execute("DELETE FROM runs WHERE run_id = %s", (run_id,))
        return True

    def finish_run(self, run_id: str, status: str) -> None:
        if status not in RUN_STATUSES[1:]:
            raise StoreError(f"run {run_id}: cannot finish with status {status!r}; "
                             f"use one of {list(RUN_STATUSES[1:])}")
        with self._transaction("finishing a run") as conn:
            cur = conn.execute("UPDATE runs SET finished_utc = %s, status = %s "
                               "WHERE run_id = %s", (provenance.utc_now(), status, run_id))
            if cur.rowcount != 1:
                raise StoreError(f"run {run_id!r} is not in {self.where}")

    def runs(self) -> list[RunInfo]:
        with self._session("reading the runs") as conn:
            rows = conn.execute(
                "SELECT r.run_id, r.started_utc, r.finished_utc, r.command, r.status, r.meta, "
                "(SELECT COUNT(*) FROM records c WHERE c.run_id = r.run_id) "
                "FROM runs r ORDER BY r.started_utc, r.run_id").fetchall()
        out = []
        for row in rows:
            meta, status = json.loads(row[5] or "{}"), row[4]
            if status == "running" and row[0] in self.interrupted:
                status, meta = "interrupted", {**meta, "interrupted": self.interrupted[row[0]]}
            out.append(RunInfo(*row[:4], status=status, meta=meta, n_records=int(row[6])))
        return out

    def _latest_run(self) -> str | None:
        with self._session("reading the runs") as conn:
            row = conn.execute("SELECT run_id FROM runs ORDER BY started_utc DESC, "
                               "run_id DESC LIMIT 1").fetchone()
        return None if row is None else str(row[0])

    def _runs_with_prefix(self, prefix: str) -> list[str]:
        with self._session("reading the runs") as conn:
            return [str(r[0]) for r in conn.execute(
                "SELECT run_id FROM runs WHERE left(run_id, %s) = %s ORDER BY run_id",
                (len(prefix), prefix))]

    # -- meta ----------------------------------------------------------------------------
    def set_meta(self, key: str, value: str) -> None:
        if key == "schema_version":
            raise StoreError("the schema version of a store is not set by hand")
        with self._transaction("writing the meta table") as conn:
            conn.execute("INSERT INTO meta VALUES (%s, %s) ON CONFLICT (key) "
                         "DO UPDATE SET value = EXCLUDED.value", (key, value))

    def meta_items(self, prefix: str) -> dict[str, str]:
        with self._session("reading the meta table") as conn:
            rows = conn.execute("SELECT key, value FROM meta WHERE left(key, %s) = %s "
                                "ORDER BY key", (len(prefix), prefix)).fetchall()
        return {str(k)[len(prefix):]: str(v) for k, v in rows}

    # -- records -------------------------------------------------------------------------
    def _insert(self, full: dict[str, Any]) -> dict[str, Any]:
        marks = ", ".join(["%s"] * len(FIELDS))
        values = record_row(full)
        try:
            with self._transaction(f"storing record {full['record_id']}") as conn:
                conn.execute(f"INSERT INTO records ({COLUMNS_SQL}) VALUES ({marks})", values)
        except StoreError as exc:
            if isinstance(exc.__cause__, psycopg.errors.ForeignKeyViolation):
                raise StoreError(f"record for run {full['run_id']!r}: no such run in "
                                 f"{self.where}", hint="call start_run() first") from exc
            raise
        return full

    def set_status(self, record_ids: Sequence[str], status: str, detail: str | None) -> None:
        if status not in RECORD_STATUSES:
            raise StoreError(f"status {status!r} is not one of {list(RECORD_STATUSES)}")
        with self._transaction("re-marking records") as conn:
            for record_id in record_ids:
                cur = conn.execute("UPDATE records SET status = %s, status_detail = %s "
                                   "WHERE record_id = %s", (status, detail, record_id))
                if cur.rowcount != 1:
                    raise StoreError(f"record {record_id!r} is not in {self.where}")

    def records(self, run_id: str | list[str] | None = None, **filters: Any
                ) -> list[dict[str, Any]]:
        if run_id is not None:
            filters["run_id"] = run_id
        where, params = self._filters(filters, "%s")
        sql = f"SELECT {COLUMNS_SQL} FROM records" + (
            " WHERE " + " AND ".join(where) if where else "")
        with self._session("reading records") as conn:
            rows = conn.execute(sql + " ORDER BY created_utc, record_id", params or None
                                ).fetchall()
        return [self._decode(row) for row in rows]

    def import_run(self, run: RunInfo, records: Sequence[Mapping[str, Any]]
                   ) -> tuple[bool, int]:
        marks = ", ".join(["%s"] * len(FIELDS))
        with self._transaction(f"importing run {run.run_id}") as conn:
            cur = conn.execute("INSERT INTO runs (run_id, started_utc, finished_utc, command, "
                               "status, meta) VALUES (%s, %s, %s, %s, %s, %s) "
                               "ON CONFLICT (run_id) DO NOTHING",
                               (run.run_id, run.started_utc, run.finished_utc, run.command,
                                run.status, json.dumps(run.meta)))
            run_added = cur.rowcount == 1
            added = 0
            if records:
                with conn.cursor() as many:
                    many.executemany(f"INSERT INTO records ({COLUMNS_SQL}) VALUES ({marks}) "
                                     "ON CONFLICT (record_id) DO NOTHING",
                                     [record_row(r) for r in records])
                    added = max(many.rowcount, 0)
        return run_added, added

    def integrity_check(self) -> IntegrityReport:
        """The SQLite store's record and run checks (the server keeps its own pages)."""
        with self._session("checking the store") as conn:
            runs = conn.execute("SELECT run_id, status, meta FROM runs").fetchall()
            records = conn.execute(f"SELECT {COLUMNS_SQL} FROM records").fetchall()
        return check_rows(runs, records)

    def quick_check(self) -> list[str]:
        with self._session("checking the connection") as conn:
            conn.execute("SELECT 1")
        return []
