"""`farm results recover OUT.sqlite`: salvage every readable record of a damaged store.

Contract: `recover_store(src, out)` -> `Recovery`. The source is only read (rows one by one
around damaged pages, `farm.results.damage`); a NEW store of the current schema is built
next to `out` under a temporary name, filled in one transaction, fsynced and renamed onto
`out` — so `out` either does not exist or is a complete, sound store, never half written.
`out` must not exist (nothing is overwritten) and must not be the source.

What is copied, and what the copy says about the damage (nothing is invented):
* every record whose row can be read and whose JSON fields parse, as it was written;
* every run whose row can be read. A run that lost records to the damage is marked
  `partial` (its own status kept in meta `recovered.status_before`); a run whose row is
  unreadable but whose records survived gets a stand-in row (status `partial`, command
  `(run row lost: recovered)`, started at its first record), so those records stay listed;
* meta keys other than the schema version (tags...).
"""

from __future__ import annotations

import json
import os
import sqlite3
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from farm.errors import StoreError
from farm.results.damage import id_ranges, scan
from farm.results.schema import FIELD_NAMES, FIELDS
from farm.results.store import ResultStore

_JSON = {f.name for f in FIELDS if f.type == "json"}
_RUN_COLS = ("run_id", "started_utc", "finished_utc", "command", "status", "meta")


@dataclass
class Recovery:
    out: Path
    runs: int = 0
    records: int = 0
    runs_recreated: list[str] = field(default_factory=list)
    runs_partial: list[str] = field(default_factory=list)
    lost: list[str] = field(default_factory=list)  # records that could not be salvaged
    unprobed: str = ""  # row ids no index names whose page is damaged ("" none; damage.py)

    def summary(self) -> str:
        lines = [f"recovered {self.records} record(s) of {self.runs} run(s) into {self.out}"]
        if self.lost:
            lines.append(f"  lost {len(self.lost)} record(s): " + ", ".join(self.lost[:10])
                         + (" ..." if len(self.lost) > 10 else ""))
        if self.unprobed:
            lines.append(f"  row ids {self.unprobed} could not be probed (a damaged table "
                         "page): records there, if any, are not known")
        if self.runs_partial:
            lines.append("  runs that lost records (now partial): "
                         + ", ".join(self.runs_partial))
        if self.runs_recreated:
            lines.append("  run rows recreated (their own row was unreadable): "
                         + ", ".join(self.runs_recreated))
        return "\n".join(lines)


def _parses(row: dict[str, Any]) -> str | None:
    for name in _JSON & set(row):
        if row[name] is not None:
            try:
                json.loads(row[name])
            except (TypeError, ValueError) as exc:
                return f"field {name} is not valid JSON ({exc})"
    return None


def recover_store(src: Path, out: Path) -> Recovery:
    src, out = Path(src), Path(out)
    if not src.exists():
        raise StoreError(f"no result store at {src}")
    if out.exists() or out.resolve() == src.resolve():
        raise StoreError(f"{out} already exists; recover writes a NEW store",
                         hint="name a file that does not exist yet")
    # read-only: a damaged source must not be touched (no WAL replay writes, no migration)
    db = sqlite3.connect(f"file:{src}?mode=ro", uri=True)
    try:
        return _copy(db, src, out)
    finally:
        db.close()


def _copy(db: sqlite3.Connection, src: Path, out: Path) -> Recovery:
    try:
        src_cols = [r[1] for r in db.execute("PRAGMA table_info(records)")]
        meta = dict(db.execute("SELECT key, value FROM meta").fetchall())
    except sqlite3.DatabaseError as exc:
        raise StoreError(f"{src}: its table list or meta is unreadable ({exc}): nothing "
                         "can be salvaged by row", hint="try sqlite3's `.recover` on it") from exc
    cols = [c for c in src_cols if c in FIELD_NAMES]
    runs = scan(db, "runs", _RUN_COLS, ("run_id",))
    records = scan(db, "records", cols, ("record_id", "run_id"))
    result = Recovery(out)
    keep: list[dict[str, Any]] = []
    for row in records.rows.values():
        rec = dict(zip(cols, row, strict=True))
        problem = _parses(rec)
        if problem:
            result.lost.append(f"{rec.get('record_id')} ({problem})")
        else:
            keep.append(rec)
    lost_by_run: dict[str, int] = {}
    result.unprobed = id_ranges(records.unprobed)
    for rowid, keys in records.unreadable.items():
        result.lost.append(keys.get("record_id") or f"rowid {rowid}")
        if keys.get("run_id"):
            lost_by_run[keys["run_id"]] = lost_by_run.get(keys["run_id"], 0) + 1
    run_rows = {r[0]: dict(zip(_RUN_COLS, r, strict=True)) for r in runs.rows.values()}
    for rec in sorted(keep, key=lambda r: r.get("created_utc") or ""):
        if rec["run_id"] not in run_rows:  # its run's row is gone: a stand-in keeps it listed
            run_rows[rec["run_id"]] = {
                "run_id": rec["run_id"], "started_utc": rec.get("created_utc") or "",
                "finished_utc": None, "command": "(run row lost: recovered)",
                "status": "partial", "meta": json.dumps({"recovered": {"row_lost": True}})}
            result.runs_recreated.append(rec["run_id"])
    for run_id, n in lost_by_run.items():
        run = run_rows.get(run_id)
        if run is None:
            continue
        try:
            run_meta = json.loads(run["meta"] or "{}")
        except ValueError:
            run_meta = {}
        run_meta["recovered"] = {**run_meta.get("recovered", {}), "lost_records": n,
                                 "status_before": run["status"]}
        run["meta"], run["status"] = json.dumps(run_meta), "partial"
        result.runs_partial.append(run_id)
    tmp = out.with_name(f"{out.name}.tmp-{os.getpid()}")
    try:
        with ResultStore(tmp) as store, store._transaction() as new:
            for run in run_rows.values():
                new.execute(f"INSERT INTO runs ({', '.join(_RUN_COLS)}) VALUES (?, ?, ?, ?, ?, ?)",
                            [run[c] for c in _RUN_COLS])
            names = ", ".join(f'"{c}"' for c in cols)
            marks = ", ".join("?" * len(cols))
            for rec in sorted(keep, key=lambda r: (r.get("created_utc") or "")):
                new.execute(f"INSERT INTO records ({names}) VALUES ({marks})",
                            [rec[c] for c in cols])
            for key, value in meta.items():
                if key != "schema_version":
                    new.execute("INSERT OR REPLACE INTO meta VALUES (?, ?)", (key, value))
        _fsync(tmp)
        os.replace(tmp, out)
        _fsync(out.parent)
    except BaseException:
        for leftover in (tmp, Path(f"{tmp}-wal"), Path(f"{tmp}-shm")):
            leftover.unlink(missing_ok=True)
        raise
    result.runs, result.records = len(run_rows), len(keep)
    return result


def _fsync(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
