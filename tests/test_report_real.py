"""The report of a REAL bench on `local` (tiny model; ORT measured, TVM and custom as the
agent reports them): every figure traces back to the stored raw fields."""

from __future__ import annotations

import numpy as np
import pytest

from farm.bench.config import BenchConfig, Policy
from farm.bench.runner import run_bench
from farm.bench.stats import bootstrap_ci
from farm.inventory.builtin import local_device
from farm.report.analysis import load_report
from farm.report.html import render_html
from farm.results.store import ResultStore

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def real(tmp_path_factory):
    home = tmp_path_factory.mktemp("farm-home")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("FARM_HOME", str(home))
        mp.setenv("FARM_LOCAL_WORKDIR", str(home / "device"))
        config = BenchConfig(model="tiny", routes=("ort", "tvm", "custom"), pause_s=0.0,
                             profile_runs=2, policy=Policy(warmup_runs=2, warmup_min_s=0.05,
                                                           min_runs=30, min_time_s=0.2,
                                                           max_time_s=2.0))
        store = ResultStore(home / "results.sqlite")
        result = run_bench([local_device()], config, store, ["pytest", "report-real"])
        assert result.run_id
        yield store, result.run_id, load_report(store, [result.run_id])
        store.close()


def test_real_latency_and_memory_trace_to_stored_samples(real):
    store, run_id, report = real
    records = {r["route"]: r for r in store.records(run_id=run_id)}
    ort = records["ort"]
    assert ort["status"] == "ok", ort["status_detail"]
    (row,) = [r for r in report.tables["latency"].rows if r["route"] == "ort"]
    x = np.asarray(ort["samples_ms"])
    assert row["n"] == x.size >= 30
    assert row["median_ms"] == pytest.approx(np.median(x), rel=1e-12)
    assert row["p90_ms"] == pytest.approx(np.percentile(x, 90), rel=1e-12)
    low, high = bootstrap_ci(x, seed=ort["policy"]["seed"], n_boot=ort["policy"]["n_boot"])
    assert (row["ci95_low_ms"], row["ci95_high_ms"]) == pytest.approx((low, high))
    (mem,) = [r for r in report.tables["memory"].rows if r["route"] == "ort"]
    assert mem["peak_vmhwm_kb"] == ort["peak_vmhwm_kb"] > 0
    (size,) = [r for r in report.tables["size"].rows if r["route"] == "ort"]
    assert size["weights_kib"] == ort["sizes"]["weights"] / 1024


def test_real_per_op_and_availability(real):
    store, run_id, report = real
    records = {r["route"]: r for r in store.records(run_id=run_id)}
    (ops,) = [r for r in report.tables["ops"].rows if r["route"] == "ort"]
    cats = records["ort"]["ops"]["categories"]
    for c in ("attention", "fc", "layernorm", "gelu", "other"):
        assert ops[c] == pytest.approx(cats[c], rel=1e-12)
    assert ops["profiled_ms"] == pytest.approx(sum(cats.values()), rel=1e-12)
    avail = {r["route"]: r for r in report.tables["availability"].rows}
    assert avail["ort"]["available"] is True
    for route in ("tvm", "custom"):  # measured when deployed, else the agent says why not
        rec = records[route]
        assert avail[route]["available"] == (rec["status"] == "ok")
        if rec["status"] != "ok":
            assert avail[route]["why_not"] == rec["status_detail"]


def test_real_html_plots_real_samples(real):
    _, _, report = real
    html = render_html(report)
    (row,) = [r for r in report.tables["latency"].rows if r["route"] == "ort"]
    # the plotted median is exactly the table's median (same float, repr round-trips)
    assert 'class="median" x1=' in html
    assert f'data-value="{row["median_ms"]!r}" data-stat="median"' in html
