"""Constructed triangle records for the report tests, written into a real ResultStore.

The samples are drawn from seeded lognormal distributions (the shape real latency has);
every figure the report shows is then checked against a recomputation from these raw
fields. Real measurements from `farm bench` on `local` are used where the bench exists
(see test_report_real.py).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from farm.results.store import ResultStore

CATS = ("attention", "fc", "layernorm", "gelu", "other")


def _samples(rng: np.random.Generator, median: float, n: int, spread: float = 0.04
             ) -> list[float]:
    return [float(v) for v in median * rng.lognormal(0.0, spread, size=n)]


def _ops(rng: np.random.Generator, total: float, shares: dict[str, float], runs: int
         ) -> dict[str, Any]:
    per_run = [{c: total * shares[c] * float(rng.lognormal(0, 0.03)) for c in CATS}
               for _ in range(runs)]
    cats = {c: float(np.mean([r[c] for r in per_run])) for c in CATS}
    out: dict[str, Any] = {"categories": cats, "total_ms": sum(cats.values()),
                           "nodes": [{"name": f"/{c}/node", "op": c, "category": c,
                                      "ms": cats[c]} for c in CATS]}
    if runs > 1:
        out["category_runs"] = per_run
    return out


SHARES_FUSED = {"attention": 0.30, "fc": 0.45, "layernorm": 0.08, "gelu": 0.07, "other": 0.10}
SHARES_UNFUSED = {"attention": 0.36, "fc": 0.42, "layernorm": 0.10, "gelu": 0.08,
                  "other": 0.12}


ROUNDS = 6


def _sizes(n: int) -> list[int]:
    """n samples in ROUNDS rounds (the rest in the last)."""
    return [n // ROUNDS] * (ROUNDS - 1) + [n - n // ROUNDS * (ROUNDS - 1)]


def constructed_records(seed: int = 7, devices: tuple[str, ...] = ("local", "qemu-a64")
                        ) -> list[dict[str, Any]]:
    """A triangle's worth of records: ORT and TVM with fusion off/on in 6 rounds (TVM's
    fused config in two records of one run: pooled), custom unavailable on one device."""
    rng = np.random.default_rng(seed)
    recs: list[dict[str, Any]] = []
    base = {"model": "tiny", "variant": "fp32", "threads": 1, "transport": "local",
            "arch": "x86_64", "policy": {"seed": 0, "n_boot": 400, "warmup_runs": 3}}
    for dev_i, device in enumerate(devices):
        scale = 1.0 + 3.0 * dev_i
        plan = [
            ("ort", {"graph_optimization": "disable", "provider": "cpu", "build_s": 0.4},
             6.0, SHARES_UNFUSED, 1, 30),
            ("ort", {"graph_optimization": "all", "provider": "cpu", "build_s": 0.4},
             5.0, SHARES_FUSED, 1, 30),
            ("tvm", {"fusion": False, "build_s": 21.0, "tune_s": 300.0}, 9.0,
             SHARES_UNFUSED, 1, 25),
            ("tvm", {"fusion": True, "build_s": 20.0, "tune_s": 300.0}, 7.0,
             SHARES_FUSED, 2, 20),
        ]
        for route, flags, med, shares, repeats, n in plan:
            for _ in range(repeats):
                e2e = med * scale
                recs.append({**base, "device": device, "route": route, "status": "ok",
                             "build_flags": flags, "samples_ms": _samples(rng, e2e, n),
                             "rounds": {"planned": ROUNDS, "done": ROUNDS,
                                        "sizes": _sizes(n)},
                             "ops": _ops(rng, e2e * 1.05, shares, 5 if route == "tvm" else 1),
                             "sizes": {"runtime": 9_000_000 if route == "ort" else 1_500_000,
                                       "code": 0 if route == "ort" else 400_000 + 1000 * dev_i,
                                       "weights": 2_000_000},
                             "peak_vmhwm_kb": int((80_000 if route == "ort" else 40_000)
                                                  + rng.integers(0, 500)),
                             "peak_pss_kb": 70_000 if route == "ort" else 35_000,
                             # the idle runner: a Python with numpy and onnxruntime for ORT,
                             # the C++ runtime for TVM (so ORT's model adds less)
                             "memory_baseline_kb": 60_000 if route == "ort" else 5_000,
                             "memory_method": "smaps_rollup", "load_ms": 30.0 + dev_i,
                             "first_run_ms": e2e * 2, "warmup_runs": 3})
        if dev_i == 0:
            recs.append({**base, "device": device, "route": "custom", "status": "ok",
                         "build_flags": {"fusion": True, "build_s": 3.0},
                         "samples_ms": _samples(rng, 5.05 * scale, 30),
                         "rounds": {"planned": ROUNDS, "done": ROUNDS, "sizes": _sizes(30)},
                         "sizes": {"runtime": 0, "code": 150_000, "weights": 2_000_000},
                         "peak_vmhwm_kb": 12_000, "peak_pss_kb": 11_000,
                         "memory_baseline_kb": 1_000,
                         "memory_method": "smaps_rollup",
                         "ops": _ops(rng, 5.2, SHARES_FUSED, 1)})
        else:
            recs.append({**base, "device": device, "route": "custom", "status": "unavailable",
                         "build_flags": {"fusion": True},
                         "status_detail": "missing CPU feature: asimddp (dot product)"})
    return recs


def write_store(path: Path, records: list[dict[str, Any]]) -> tuple[ResultStore, str]:
    store = ResultStore(path)
    run_id = store.start_run(["farm", "triangle", "--model", "tiny"], {"model": "tiny"})
    for r in records:
        store.add({**r, "run_id": run_id})
    store.finish_run(run_id, "ok")
    return store, run_id


def test_constructed_records_store_round_trip(tmp_path):
    store, run_id = write_store(tmp_path / "r.sqlite", constructed_records())
    stored = store.records(run_id=run_id)
    assert len(stored) == len(constructed_records())
    assert store.integrity_check().ok
