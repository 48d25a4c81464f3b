"""The fusion table from REAL measurements: the ORT route runner run as a child process
with graph optimisation off and on (two interleaved rounds each), its events turned into
records by the bench's own `RouteOutcome`/`make_record`, stored, and reported. Every
figure of the fusion rows is recomputed from the stored raw samples and per-op profile."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest

from farm.bench.config import BenchConfig, Policy
from farm.bench.records import RouteOutcome, make_record
from farm.inventory.builtin import local_device
from farm.models import build_model, write_inputs
from farm.paths import agents_dir
from farm.report.analysis import load_report
from farm.results.store import ResultStore

pytestmark = pytest.mark.slow
RUNNER = agents_dir() / "runners" / "ort_runner.py"
POLICY = Policy(warmup_runs=3, warmup_min_s=0.05, min_runs=40, min_time_s=0.3, max_time_s=2)


def _run(tmp, model, inputs, level: str, i: int) -> RouteOutcome:
    request = {"route": "ort", "model": str(model), "inputs": str(inputs),
               "outputs": str(tmp / f"out-{level}-{i}.ftns"), "threads": 1,
               "options": {"provider": "CPUExecutionProvider", "opt_level": level},
               "policy": POLICY.as_request(), "profile_runs": 3}
    req = tmp / f"req-{level}-{i}.json"
    req.write_text(json.dumps(request))
    proc = subprocess.run([sys.executable, str(RUNNER), "--request", str(req)],
                          capture_output=True, text=True, timeout=120, check=True)
    out = RouteOutcome("ort")
    for line in proc.stdout.splitlines():
        out.absorb(json.loads(line))
    return out


@pytest.fixture(scope="module")
def measured(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("fusion")
    info = build_model("tiny", "fp32", tmp)
    inputs = write_inputs(info, 0, tmp)
    config = BenchConfig(model="tiny", routes=("ort",), policy=POLICY)
    store = ResultStore(tmp / "r.sqlite")
    run_id = store.start_run(["pytest", "fusion-real"])
    for i in range(2):  # interleaved rounds: off, on, off, on
        for level in ("disable", "all"):
            out = _run(tmp, info.path, inputs, level, i)
            store.add(make_record(run_id=run_id, device=local_device(), hello=None,
                                  route="ort", config=config, model_label=info.name,
                                  model_hash=info.sha256, status="ok", outcome=out))
    store.finish_run(run_id, "ok")
    yield store, run_id, load_report(store, [run_id])
    store.close()


def test_real_fusion_rows_recompute_from_the_store(measured):
    store, run_id, report = measured
    recs = {"disable": [], "all": []}
    for r in store.records(run_id=run_id):
        recs[r["build_flags"]["opt_level"]].append(r)
    assert len(recs["disable"]) == len(recs["all"]) == 2
    rows = {r["block"]: r for r in report.tables["fusion"].rows}
    assert set(rows) == {"end-to-end", "attention", "FFN"}

    def e2e(side):
        return np.percentile([v for r in recs[side] for v in r["samples_ms"]], 50)

    def block(side, cats):
        return np.mean([sum(r["ops"]["categories"][c] for c in cats) for r in recs[side]])

    expected = {"end-to-end": (e2e("disable"), e2e("all")),
                "attention": (block("disable", ["attention"]), block("all", ["attention"])),
                "FFN": (block("disable", ["fc", "gelu"]), block("all", ["fc", "gelu"]))}
    for name, (off, on) in expected.items():
        row = rows[name]
        assert row["off_ms"] == pytest.approx(off, rel=1e-12)
        assert row["on_ms"] == pytest.approx(on, rel=1e-12)
        if name == "end-to-end":
            # paired by round (each record here is one round): 1 - the median round ratio;
            # two rounds are far too few for the signed-rank test to judge
            ratios = [np.median(b["samples_ms"]) / np.median(a["samples_ms"])
                      for a, b in zip(recs["disable"], recs["all"], strict=True)]
            assert row["reduction_pct"] == pytest.approx((1 - np.median(ratios)) * 100,
                                                         rel=1e-9)
            assert row["verdict"] == "not enough rounds to judge" and row["rounds"] == 2
        else:
            assert row["reduction_pct"] == pytest.approx((off - on) / off * 100, rel=1e-9)
        assert row["ci_low_pct"] <= row["reduction_pct"] <= row["ci_high_pct"]
        assert row["off_config"].startswith("opt=disable")
        assert row["on_config"].startswith("opt=all")


def test_real_pooling_and_availability(measured):
    store, run_id, report = measured
    lat = {r["config"].split(",")[0]: r for r in report.tables["latency"].rows}
    for level in ("disable", "all"):
        n = sum(len(r["samples_ms"]) for r in store.records(run_id=run_id)
                if r["build_flags"]["opt_level"] == level)
        assert lat[f"opt={level}"]["n"] == n
    (avail,) = report.tables["availability"].rows
    assert avail["valid"] == avail["attempted"] == 2
