"""One bench of a model file on `local` and the check that every route ran and agreed with
ORT on the file: shared by the real-export tests (transformers 4.x and 5.x)."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

from farm.bench.config import BenchConfig, Policy
from farm.bench.runner import run_bench
from farm.inventory.builtin import local_device
from farm.results.store import ResultStore

FAST = Policy(warmup_runs=1, warmup_min_s=0.0, min_runs=3, min_time_s=0.0, max_time_s=1.0)


def bench_routes_agree(path: Path, routes: tuple[str, ...], tmp_path: Path, seq: int,
                       atol: float = 1e-3) -> dict[str, dict[str, Any]]:
    """{route: record} of one bench at `seq`; each route ok, valid and within `atol` of ORT."""
    dev = dataclasses.replace(local_device(), workdir=str(tmp_path / "wd"))
    config = BenchConfig(model=str(path), routes=routes, policy=FAST, pause_s=0.0,
                         profile_runs=0, seq=seq)
    with ResultStore(tmp_path / "r.sqlite") as store:
        recs = {r["route"]: r for r in store.records(run_bench([dev], config, store,
                                                                "test").run_id)}
    assert set(recs) == set(routes)
    for route, r in recs.items():
        assert r["status"] == "ok", (route, r["status_detail"])
        assert r["accuracy"]["ok"], (route, r["accuracy"])
        assert r["accuracy"]["max_abs_diff"] < atol, (route, r["accuracy"])
    return recs
