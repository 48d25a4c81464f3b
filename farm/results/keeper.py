"""A bench's writes into the result store, kept through a full disk: nothing measured is lost.

Each write goes to the store first. When the disk refuses it (`StoreDiskError`: full,
over quota, failing), it goes to the spill file beside the store (`farm.results.spill`;
the next open of the store with room writes it in), and when even that fails, it stays in
memory: `unsaved()` are the records written nowhere, which the CLI prints as JSON on
stdout so the user can keep them. Status changes follow a record wherever it is.
`problems` holds each disk message once, for the user.

Life cycle: `Keeper(store)` (one per bench, shared by its device threads) →
`keep(record)`* / `keep_status(...)`* → `keep_finish(run_id, status)` → `pending(run_id)`
(the records of the run that are not in the store) and `unsaved()`.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping, Sequence
from typing import Any

from farm.errors import StoreUnavailable
from farm.paths import host_write_failure, is_host_disk_error
from farm.results import provenance, spill
from farm.results.backend import Store
from farm.results.validate import normalize_record

STORE, SPILL, MEMORY = "store", "spill", "memory"  # where a write ended up


class Keeper:
    """See module docstring."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self.spill_file = store.spill_file
        self.problems: list[str] = []
        self._lock = threading.Lock()
        self._pending: dict[str, dict[str, Any]] = {}  # record id -> record not in the store
        self._where: dict[str, str] = {}  # record id -> SPILL | MEMORY

    def _problem(self, text: str) -> None:
        with self._lock:
            if text not in self.problems:
                self.problems.append(text)

    def _spill(self, entry: spill.Entry) -> bool:
        try:
            spill.append(self.spill_file, entry)
        except OSError as exc:
            if not is_host_disk_error(exc):
                raise
            self._problem(host_write_failure(self.spill_file, exc.errno, "the spill file"))
            return False
        return True

    def keep(self, record: Mapping[str, Any]) -> tuple[dict[str, Any], str]:
        """Store one record, or keep it (see module docstring): (the record, where)."""
        full = normalize_record(record)
        try:
            return self.store._insert(full), STORE
        except StoreUnavailable as exc:
            self._problem(str(exc))
            self.store.release_space()
        where = SPILL if self._spill({"kind": "record", "record": full}) else MEMORY
        with self._lock:
            self._pending[full["record_id"]] = full
            self._where[full["record_id"]] = where
        return full, where

    def keep_status(self, record_ids: Sequence[str], status: str, detail: str | None) -> str:
        """`ResultStore.set_status` for records wherever they are; where it ended up."""
        with self._lock:
            held = [i for i in record_ids if i in self._pending]
            for record_id in held:
                self._pending[record_id].update(status=status, status_detail=detail)
            spilled = [i for i in held if self._where[i] == SPILL]
        stored = [i for i in record_ids if i not in held]
        where = STORE
        if stored:
            try:
                self.store.set_status(stored, status, detail)
            except StoreUnavailable as exc:
                self._problem(str(exc))
                spilled += stored
                where = MEMORY
        if spilled:
            entry = {"kind": "status", "record_ids": spilled, "status": status,
                     "detail": detail}
            where = SPILL if self._spill(entry) else MEMORY
        return where

    def keep_finish(self, run_id: str, status: str) -> str:
        """`ResultStore.finish_run`, or its spill entry; MEMORY means the run stays
        `running` in the store (its next open marks it interrupted)."""
        try:
            self.store.finish_run(run_id, status)
            return STORE
        except StoreUnavailable as exc:
            self._problem(str(exc))
        entry = {"kind": "finish", "run_id": run_id, "status": status,
                 "finished_utc": provenance.utc_now()}
        return SPILL if self._spill(entry) else MEMORY

    def pending(self, run_id: str) -> list[dict[str, Any]]:
        """Records of `run_id` that are not in the store (spilled or unsaved)."""
        with self._lock:
            return [dict(r) for r in self._pending.values() if r["run_id"] == run_id]

    def spilled(self) -> list[dict[str, Any]]:
        with self._lock:
            return [dict(r) for i, r in self._pending.items() if self._where[i] == SPILL]

    def unsaved(self) -> list[dict[str, Any]]:
        """Records written nowhere: the caller must show them to the user."""
        with self._lock:
            return [dict(r) for i, r in self._pending.items() if self._where[i] == MEMORY]

