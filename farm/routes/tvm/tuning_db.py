"""Where MetaSchedule tuning databases live and how they are identified (no TVM import).

One database per (model, target): `.farm/tuning/<sha256(model sha + target json)[:16]>/`
holding MetaSchedule's JSON database (`database_workload.json`,
`database_tuning_record.json`) and farm's `state.json` (trials done, seconds spent, per run).
`farm tune` writes it, `build_tvm` applies it; its content hash enters the artifact key, so
more tuning yields a new artifact.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

from farm.paths import state_dir
from farm.routes.tvm.target import spec_json

DB_FILES = ("database_workload.json", "database_tuning_record.json")


def default_database_dir(model_sha: str, spec: dict[str, Any]) -> Path:
    ident = hashlib.sha256(f"{model_sha}\n{spec_json(spec)}".encode()).hexdigest()[:16]
    return state_dir() / "tuning" / ident


def database_hash(db_dir: Path | None) -> str | None:
    """sha256 over the database files, or None when there is no tuning record yet."""
    if db_dir is None:
        return None
    records = db_dir / DB_FILES[1]
    if not records.is_file() or records.stat().st_size == 0:
        return None
    digest = hashlib.sha256()
    for name in DB_FILES:
        path = db_dir / name
        if path.is_file():
            digest.update(path.read_bytes())
    return digest.hexdigest()


def read_state(db_dir: Path) -> dict[str, Any]:
    path = db_dir / "state.json"
    if path.is_file():
        return json.loads(path.read_text())
    return {"version": 1, "trials": 0, "seconds": 0.0, "runs": []}


def write_state(db_dir: Path, state: dict[str, Any]) -> None:
    db_dir.mkdir(parents=True, exist_ok=True)
    tmp = db_dir / "state.json.tmp"
    tmp.write_text(json.dumps(state, indent=1))
    tmp.replace(db_dir / "state.json")
