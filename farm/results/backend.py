"""The result store's one interface, and what its two backends share.

`Store` is what every reader and writer of results uses (the bench's keeper, `results`,
`compare`, the gate, the report, the pytest plugin, push/pull); `farm.results.open_store`
picks the backend from the location: a file path is `farm.results.store.ResultStore`
(SQLite), a `postgresql://` URL is `farm.results.pg_store.PgStore`. Both keep the same
tables (generated from `schema.FIELDS`; JSON fields as JSON text in both, so a record reads
back byte for byte the same from either), the same schema version and migrations
(`farm.results.migrate`), one transaction per record, and the same spill file semantics:
what a store cannot take now (`StoreUnavailable`: a full disk, a server gone) goes to
`spill_file`, which the backend replays when it is next opened, and which `farm results
push` also sends.

Backend-specific: SQLite's damage reading and recovery, and its immutable read on a full
disk; PostgreSQL's connection errors and reconnects.

Life cycle: `open_store(location)` -> `start_run` -> `add`* [-> `set_status`] ->
`finish_run` -> `close()` (or use it as a context manager).
"""

from __future__ import annotations

import json
from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from farm import followup
from farm.errors import StoreError
from farm.results.integrity import IntegrityReport
from farm.results.schema import FIELD_NAMES, FIELDS
from farm.results.validate import normalize_record

JSON_FIELDS = tuple(f.name for f in FIELDS if f.type == "json")
COLUMNS_SQL = ", ".join(f'"{n}"' for n in FIELD_NAMES)
# the run columns added by schema version 3 (the controller, `farm.results.controller`)
RUN_CONTROLLER_COLUMNS = {"controller_pid": "INTEGER", "controller_host": "TEXT",
                          "controller_started": "TEXT"}
RUNS_COLUMNS = ("run_id", "started_utc", "finished_utc", "command", "status", "meta",
                *RUN_CONTROLLER_COLUMNS)


@dataclass(frozen=True)
class RunInfo:
    run_id: str
    started_utc: str
    finished_utc: str | None
    command: str
    status: str
    meta: dict[str, Any]
    n_records: int


def record_row(full: Mapping[str, Any]) -> list[Any]:
    """A record's values in `FIELDS` order, JSON fields as JSON text."""
    return [json.dumps(full[f.name], allow_nan=False)
            if f.type == "json" and full[f.name] is not None else full[f.name]
            for f in FIELDS]


class Store(ABC):
    """A result store; see the module docstring. Subclasses set `where` (the path, or the
    URL without its password: every message names the store by it) and `spill_file`."""

    where: str
    spill_file: Path
    # how spilled writes reach the store: told to the user with the spill file's name
    spill_back = "written into the store at its next open with room"

    def __init__(self) -> None:
        self.migrated: list[str] = []  # columns added when this store was opened
        self.read_only = False
        self.interrupted: dict[str, str] = {}  # run id -> why (its controller died)
        self.replayed = 0  # spill entries written into the store when it was opened

    def __enter__(self) -> Store:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __str__(self) -> str:
        return self.where

    # -- runs ----------------------------------------------------------------------------
    @abstractmethod
    def start_run(self, command: str | Sequence[str], meta: Mapping[str, Any] | None = None
                  ) -> str: ...

    @abstractmethod
    def claim_run(self, run_id: str) -> None: ...

    @abstractmethod
    def discard_run(self, run_id: str) -> bool: ...

    @abstractmethod
    def finish_run(self, run_id: str, status: str) -> None: ...

    @abstractmethod
    def runs(self) -> list[RunInfo]: ...

    @abstractmethod
    def _latest_run(self) -> str | None: ...

    @abstractmethod
    def _runs_with_prefix(self, prefix: str) -> list[str]: ...

    def resolve_run(self, prefix: str) -> str:
        """The run id matching `prefix` exactly or as a unique prefix; "latest" is the
        most recently started run."""
        if prefix == "latest":
            latest = self._latest_run()
            if latest is None:
                raise StoreError(f"no runs in {self.where}",
                                 hint=f"run `{followup.command('bench')}` first")
            return latest
        ids = self._runs_with_prefix(prefix)
        if prefix in ids:
            return prefix
        if not ids:
            raise StoreError(f"no run matches {prefix!r} in {self.where}",
                             hint=f"see `{followup.command('results', 'list')}` for run ids")
        if len(ids) > 1:
            shown = ", ".join(ids[:5]) + (" ..." if len(ids) > 5 else "")
            raise StoreError(f"run prefix {prefix!r} is ambiguous: {shown}",
                             hint="give more characters of the run id")
        return ids[0]

    # -- meta ----------------------------------------------------------------------------
    @abstractmethod
    def set_meta(self, key: str, value: str) -> None: ...

    @abstractmethod
    def meta_items(self, prefix: str) -> dict[str, str]: ...

    # -- records -------------------------------------------------------------------------
    def add(self, record: Mapping[str, Any]) -> dict[str, Any]:
        """Validate, complete (see `validate.normalize_record`) and store one record in
        its own transaction; returns the stored record."""
        return self._insert(normalize_record(record))

    @abstractmethod
    def _insert(self, full: dict[str, Any]) -> dict[str, Any]: ...

    @abstractmethod
    def set_status(self, record_ids: Sequence[str], status: str, detail: str | None
                   ) -> None: ...

    @abstractmethod
    def records(self, run_id: str | list[str] | None = None, **filters: Any
                ) -> list[dict[str, Any]]: ...

    def _decode(self, row: Sequence[Any]) -> dict[str, Any]:
        rec = dict(zip(FIELD_NAMES, row, strict=True))
        for name in JSON_FIELDS:
            if rec[name] is not None:
                try:
                    rec[name] = json.loads(rec[name])
                except ValueError as exc:
                    raise StoreError(
                        f"{self.where}: record {rec['record_id']}: field {name!r} is not "
                        f"valid JSON ({exc})",
                        hint=f"run `{followup.command('results', 'check')}`") from exc
        return rec

    @staticmethod
    def _filters(filters: Mapping[str, Any], mark: str) -> tuple[list[str], list[Any]]:
        """WHERE terms and parameters for equality filters (a list means "any of")."""
        where, params = [], []
        for name, value in filters.items():
            if name not in FIELD_NAMES:
                raise StoreError(f"cannot filter records on {name!r}: not a record field")
            if isinstance(value, (list, tuple, set, frozenset)):
                values = list(value)
                if not values:
                    where.append("1 = 0")
                    continue
                where.append(f'"{name}" IN ({", ".join([mark] * len(values))})')
                params += values
            else:
                where.append(f'"{name}" = {mark}')
                params.append(value)
        return where, params

    # -- moving runs between stores (`farm.results.transfer`) -----------------------------
    @abstractmethod
    def import_run(self, run: RunInfo, records: Sequence[Mapping[str, Any]]
                   ) -> tuple[bool, int]:
        """Add `run` (unless a run of its id is here) and those of `records` whose ids are
        not here, in one transaction: (run added, records added)."""

    # -- health --------------------------------------------------------------------------
    @abstractmethod
    def integrity_check(self) -> IntegrityReport: ...

    def quick_check(self) -> list[str]:
        return []

    def require_sound(self) -> None:  # noqa: B027 (a server keeps its own pages sound)
        """Refuse to write into a damaged store (a bench calls it before it starts)."""

    def release_space(self) -> None:  # noqa: B027 (nothing to give back on a server)
        """After a write the store refused: give back what may let a smaller write fit."""

    @abstractmethod
    def close(self) -> None: ...
