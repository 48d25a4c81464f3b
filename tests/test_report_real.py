"""The report of a REAL bench on `local` (tiny model; ORT measured, TVM and custom as the
agent reports them): every figure traces back to the stored raw fields."""

from __future__ import annotations

import numpy as np
import pytest

from farm.bench.config import BenchConfig, Policy
from farm.bench.runner import run_bench
from farm.inventory.builtin import local_device
from farm.report.analysis import load_report
from farm.report.html import render_html
from farm.results.config_flags import config_flags, config_label
from farm.results.stats import bootstrap_ci
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


def _check_recomputed(store, run_id, doc):
    """Every latency/memory figure of a `farm report --output json` document against the
    raw samples of the store (configurations here: device, route and its fusion setting)."""
    recs: dict[tuple[str, str, str], list[dict]] = {}
    for r in store.records(run_id=run_id):
        label = config_label(config_flags(r["build_flags"]))
        recs.setdefault((r["device"], r["route"], label), []).append(r)
    rows = doc["tables"]["latency"]["rows"]
    assert {(r["device"], r["route"], r["config"]) for r in rows} == set(recs)
    for row in rows:
        mine = recs[(row["device"], row["route"], row["config"])]
        samples = [v for r in mine for v in (r["samples_ms"] or [])]
        assert row["n"] == len(samples)
        if samples:
            assert row["median_ms"] == pytest.approx(np.percentile(samples, 50), rel=1e-12)
            assert row["p90_ms"] == pytest.approx(np.percentile(samples, 90), rel=1e-12)
    for row in doc["tables"]["memory"]["rows"]:
        mine = recs[(row["device"], row["route"], row["config"])]
        assert row["peak_vmhwm_kb"] == max(r["peak_vmhwm_kb"] for r in mine)
    # availability is per (device, route), over all its configurations
    avail = {(r["device"], r["route"]): r for r in doc["tables"]["availability"]["rows"]}
    by_route: dict[tuple[str, str], list[dict]] = {}
    for (device, route, _label), mine in recs.items():
        by_route.setdefault((device, route), []).extend(mine)
    for key, mine in by_route.items():
        detail = "; ".join(dict.fromkeys(r["status_detail"] for r in mine
                                         if r["status"] != "ok" and r["status_detail"]))
        assert avail[key]["why_not"] == (detail or None)


TRIANGLE_ARGS = ["--model", "tiny", "--runs", "20", "--min-time", "0.2", "--max-time", "1",
                 "--warmup", "2", "--warmup-time", "0.05", "--pause", "0",
                 "--profile-runs", "2", "--output", "json"]
TRIANGLE_FAST = [*TRIANGLE_ARGS, "--repeats", "2"]
# the lab's triangle runs one round: rounds pooled in one row are checked on `local`, and each
# route run on the emulated pixel7 costs 1-3 s (its runner starts under qemu)
TRIANGLE_ONE_ROUND = [*TRIANGLE_ARGS, "--repeats", "1"]


def test_farm_triangle_on_local(tmp_path, monkeypatch, capsys):
    import json

    from farm.cli.main import main

    monkeypatch.setenv("FARM_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("FARM_LOCAL_WORKDIR", str(tmp_path / "device"))
    store_path = tmp_path / "r.sqlite"
    html = tmp_path / "t.html"
    code = main(["triangle", "--device", "local", *TRIANGLE_FAST, "--store", str(store_path),
                 "--html", str(html)])
    doc = json.loads(capsys.readouterr().out)
    assert code == 0
    (run_id,) = doc["meta"]["run_ids"]
    # every route measured fused and unfused: the fusion table has a pair per route
    fusion = {(r["route"], r["block"]) for r in doc["tables"]["fusion"]["rows"]}
    assert {(route, "end-to-end") for route in ("ort", "tvm", "custom")} <= fusion
    with ResultStore(store_path, create=False) as store:
        records = store.records(run_id=run_id)
        assert {r["route"] for r in records} == {"ort", "tvm", "custom"}
        assert all(r["status"] == "ok" for r in records), [r["status_detail"] for r in records]
        # build cost: what each artifact cost when first built, the same for fused and unfused
        # (one plan and executor serve both); ORT compiles nothing ahead of time
        def build_costs(route: str) -> set[float]:
            return {r["build_flags"]["build_s"] for r in records if r["route"] == route}

        assert build_costs("ort") == {0.0}
        (custom,) = build_costs("custom")
        assert custom > 0
        # two interleaved rounds: the ORT samples of both are pooled in one row
        _check_recomputed(store, run_id, doc)
    assert html.is_file()


@pytest.mark.lab
@pytest.mark.aarch64
def test_farm_triangle_on_the_lab(lab, tmp_path, monkeypatch, capsys):
    """One native and one emulated aarch64 lab device, reached over SSH."""
    import json

    from farm.cli.main import main

    lab.require("pixel7")
    monkeypatch.setenv("FARM_HOME", str(tmp_path / "home"))
    store_path = tmp_path / "r.sqlite"
    code = main(["--inventory", str(lab.inventory_path), "triangle", "--device", "lab1",
                 "--device", "pixel7", *TRIANGLE_ONE_ROUND, "--store", str(store_path)])
    doc = json.loads(capsys.readouterr().out)
    assert code in (0, 3)
    (run_id,) = doc["meta"]["run_ids"]
    assert set(doc["meta"]["devices"]) == {"lab1", "pixel7"}
    with ResultStore(store_path, create=False) as store:
        _check_recomputed(store, run_id, doc)
    measured = [r for r in doc["tables"]["latency"]["rows"] if r["n"]]
    assert {r["device"] for r in measured} == {"lab1", "pixel7"}
    # pixel7 is qemu-user: its records say so and no fastest route is named from them
    from farm.results.emulation import NOT_RANKED

    assert doc["meta"]["emulated_devices"] == ["pixel7"]
    fastest = [r for r in doc["tables"]["decision"]["rows"] if r["criterion"] == "fastest"]
    assert {r["device"] for r in fastest} == {"lab1", "pixel7"}
    for row in fastest:
        emulated = row["device"] == "pixel7"
        assert (row["verdict"] == NOT_RANKED) is emulated, row
        assert (row["winner"] is None) is emulated, row
    with ResultStore(store_path, create=False) as store:
        assert {(r["device"], r["emulated"]) for r in store.records(run_id)} == {
            ("lab1", 0), ("pixel7", 1)}
