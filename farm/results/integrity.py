"""Integrity of a result store.

Contract:
* `check_store(db)` -> `IntegrityReport` over an open SQLite connection: SQLite's
  `PRAGMA integrity_check`; every run's status and meta JSON; every record's JSON fields
  parse, its fields have their schema types, its status is known, it belongs to a run,
  and its statistics equal a recomputation from `samples_ms` (`validate.stats_mismatches`).
  Rows are read one by one around damaged pages (`farm.results.damage`): the report names
  the runs and records that cannot be read (`unreadable_runs`, `unreadable_records`,
  `damaged_runs`: runs that lost records). Problems are collected, never raised — not even
  SQLite's "database disk image is malformed"; `ResultStore.integrity_check()` calls this.
The checks over a stored run that tests and fault scenarios make are in run_checks.py.
"""

from __future__ import annotations

import json
import sqlite3
from dataclasses import dataclass, field
from typing import Any

from farm.results.damage import id_ranges, scan
from farm.results.schema import FIELD_NAMES, FIELDS
from farm.results.validate import RECORD_STATUSES, RUN_STATUSES, check_type, stats_mismatches

_JSON_FIELDS = tuple(f.name for f in FIELDS if f.type == "json")


@dataclass
class IntegrityReport:
    """What `check_store` looked at and every problem it found (empty: all good)."""

    runs_checked: int = 0
    records_checked: int = 0
    problems: list[str] = field(default_factory=list)
    # damage inside the file: what could not be read at all
    unreadable_runs: list[str] = field(default_factory=list)
    unreadable_records: list[str] = field(default_factory=list)
    damaged_runs: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.problems

    @property
    def damaged(self) -> bool:
        return bool(self.unreadable_runs or self.unreadable_records
                    or any(p.startswith("sqlite: ") for p in self.problems))

    def summary(self) -> str:
        head = (f"{self.runs_checked} run(s), {self.records_checked} record(s) read: "
                + ("ok" if self.ok else f"{len(self.problems)} problem(s)"))
        lines = [head, *(f"  - {p}" for p in self.problems)]
        if self.damaged:
            lines.append("  DAMAGED: " + (
                f"{len(self.unreadable_records)} record(s) and {len(self.unreadable_runs)} "
                f"run row(s) cannot be read; runs that lost records: "
                f"{', '.join(self.damaged_runs) or 'none known'}"))
        return "\n".join(lines)


_RUN_COLS = ("run_id", "status", "meta")


def check_store(db: sqlite3.Connection) -> IntegrityReport:
    report = IntegrityReport()
    try:
        rows = [str(r[0]) for r in db.execute("PRAGMA integrity_check")]
    except sqlite3.DatabaseError as exc:  # too damaged for SQLite's own check to finish
        rows = [f"integrity_check stopped: {exc}"]
    if rows != ["ok"]:
        report.problems += [f"sqlite: {r}" for r in rows[:20]]
        if len(rows) > 20:
            report.problems.append(f"sqlite: ... and {len(rows) - 20} more")
    runs = scan(db, "runs", _RUN_COLS, ("run_id",))
    run_ids = set()
    for run_id, status, meta in runs.rows.values():
        report.runs_checked += 1
        run_ids.add(run_id)
        if status not in RUN_STATUSES:
            report.problems.append(f"run {run_id}: unknown status {status!r}")
        try:
            json.loads(meta or "{}")
        except ValueError as exc:
            report.problems.append(f"run {run_id}: meta is not valid JSON ({exc})")
    for rowid, keys in sorted(runs.unreadable.items()):
        name = keys.get("run_id") or f"rowid {rowid}"
        report.unreadable_runs.append(name)
        report.problems.append(f"run {name}: its row is on a damaged page and cannot be read")
    records = scan(db, "records", FIELD_NAMES, ("record_id", "run_id"))
    for row in records.rows.values():
        report.records_checked += 1
        report.problems += _record_problems(dict(zip(FIELD_NAMES, row, strict=True)), run_ids)
    damaged_runs = set()
    for rowid, keys in sorted(records.unreadable.items()):
        name = keys.get("record_id") or f"rowid {rowid}"
        run = keys.get("run_id")
        report.unreadable_records.append(name)
        report.problems.append(f"record {name} (run {run or 'unknown'}): on a damaged page, "
                               "cannot be read")
        if run:
            damaged_runs.add(run)
    if records.unprobed:
        # no source names a row there: it may hold records or nothing (the probe past the
        # highest known id); counted apart, never as lost records
        report.problems.append(
            f"records: row id(s) {id_ranges(records.unprobed)} could not be probed (a "
            "damaged table page); records there, if any, are not counted")
    report.damaged_runs = sorted(damaged_runs | set(report.unreadable_runs))
    return report


def check_rows(runs: list[tuple[Any, Any, Any]], records: list[tuple[Any, ...]]
               ) -> IntegrityReport:
    """The same checks over rows read by a backend with no damage reading (PostgreSQL):
    `runs` are (run_id, status, meta text), `records` rows in `FIELD_NAMES` order."""
    report = IntegrityReport()
    run_ids = set()
    for run_id, status, meta in runs:
        report.runs_checked += 1
        run_ids.add(run_id)
        if status not in RUN_STATUSES:
            report.problems.append(f"run {run_id}: unknown status {status!r}")
        try:
            json.loads(meta or "{}")
        except ValueError as exc:
            report.problems.append(f"run {run_id}: meta is not valid JSON ({exc})")
    for row in records:
        report.records_checked += 1
        report.problems += _record_problems(dict(zip(FIELD_NAMES, row, strict=True)), run_ids)
    return report


def _record_problems(rec: dict[str, Any], run_ids: set[str]) -> list[str]:
    where = f"record {rec['record_id']} ({rec['device']}/{rec['route']})"
    problems = []
    for name in _JSON_FIELDS:
        if rec[name] is None:
            continue
        try:
            rec[name] = json.loads(rec[name])
        except (TypeError, ValueError) as exc:
            problems.append(f"{where}: field {name!r} is not valid JSON ({exc})")
            rec[name] = None
    for name in FIELD_NAMES:
        problem = check_type(name, rec[name])
        if problem:
            problems.append(f"{where}: field {name!r}: {problem}")
    if rec["run_id"] not in run_ids:
        problems.append(f"{where}: run {rec['run_id']!r} is not in the runs table")
    if rec["status"] not in RECORD_STATUSES:
        problems.append(f"{where}: unknown status {rec['status']!r}")
    if not any(p.startswith(f"{where}: field 'samples_ms'") for p in problems):
        problems += [f"{where}: {m}" for m in stats_mismatches(rec)]
    return problems
