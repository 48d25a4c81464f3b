"""The triangle report recomputes from the store: every figure it shows is checked here
against an independent recomputation from the stored raw fields (samples_ms, ops, sizes,
memory readings, build_flags, status)."""

from __future__ import annotations

import json

import numpy as np
import pytest
from scipy.stats import wilcoxon
from test_report_data import constructed_records, write_store

from farm.errors import StoreError
from farm.report.analysis import analyze, load_report
from farm.report.configs import config_flags, fusion_of
from farm.report.outputs import format_report
from farm.report.tables import to_csv
from farm.results.rounds import ci_of_median, split_rounds
from farm.results.stats import bootstrap_ci


@pytest.fixture(scope="module")
def stored(tmp_path_factory):
    store, run_id = write_store(tmp_path_factory.mktemp("store") / "r.sqlite",
                                constructed_records())
    yield store, run_id
    store.close()


@pytest.fixture(scope="module")
def report(stored):
    store, run_id = stored
    return load_report(store, [run_id])


def _fusion_key(flags):
    return "on" if fusion_of(flags) is not False else "off"


def _groups(store, run_id):
    """Independent grouping of the stored records: (device, route, fusion on/off)."""
    out = {}
    for r in store.records(run_id=run_id):
        out.setdefault((r["device"], r["route"], _fusion_key(r["build_flags"])), []).append(r)
    return out


def _row_key(row):
    return row["device"], row["route"], "off" if "=off" in row["config"] or "=disable" in \
        row["config"] else "on"


def test_latency_every_number_is_recomputed_from_raw_samples(stored, report):
    store, run_id = stored
    groups = _groups(store, run_id)
    rows = report.tables["latency"].rows
    assert len(rows) == len(groups)
    for row in rows:
        recs = groups[_row_key(row)]
        samples = [v for r in recs for v in (r["samples_ms"] or [])]
        if not samples:
            assert row["n"] == 0 and row["median_ms"] is None
            continue
        x = np.array(samples)
        assert row["n"] == x.size
        assert row["median_ms"] == pytest.approx(np.median(x), rel=1e-12)
        assert row["p90_ms"] == pytest.approx(np.percentile(x, 90), rel=1e-12)
        assert row["p99_ms"] == pytest.approx(np.percentile(x, 99), rel=1e-12)
        assert row["mean_ms"] == pytest.approx(x.mean(), rel=1e-12)
        assert row["min_ms"] == pytest.approx(x.min(), rel=1e-12)
        assert row["cv"] == pytest.approx(x.std(ddof=1) / x.mean(), rel=1e-9)
        policy = recs[0]["policy"]
        rounds = [y for r in recs
                  for y in split_rounds(r["samples_ms"], (r["rounds"] or {}).get("sizes"))]
        # several rounds: the two-level bootstrap; one round: the bootstrap of its samples
        seed, n_boot = policy["seed"], policy["n_boot"]
        low, high = (ci_of_median(rounds, seed=seed, n_boot=n_boot) if len(rounds) > 1
                     else bootstrap_ci(x, seed=seed, n_boot=n_boot))
        assert (row["ci95_low_ms"], row["ci95_high_ms"]) == pytest.approx((low, high))
        assert row["rounds"] == len(rounds)
        assert row["ci95_low_ms"] <= row["median_ms"] <= row["ci95_high_ms"]
        loads = [r["load_ms"] for r in recs if r["load_ms"] is not None]
        assert row["load_ms"] == (pytest.approx(np.median(loads)) if loads else None)


def test_single_record_configuration_matches_stored_statistics(stored, report):
    store, run_id = stored
    for row in report.tables["latency"].rows:
        recs = _groups(store, run_id)[_row_key(row)]
        if len(recs) == 1 and recs[0]["samples_ms"]:
            rec = recs[0]
            for key in ("median_ms", "p90_ms", "ci95_low_ms", "ci95_high_ms", "cv"):
                assert row[key] == pytest.approx(rec[key], rel=1e-12), key


def test_pooled_repeats(stored, report):
    store, run_id = stored
    tvm_on = _groups(store, run_id)[("local", "tvm", "on")]
    assert len(tvm_on) == 2  # two interleaved repeats pooled into one configuration
    row = next(r for r in report.tables["latency"].rows
               if _row_key(r) == ("local", "tvm", "on"))
    assert row["n"] == sum(len(r["samples_ms"]) for r in tvm_on)


def test_memory_size_build_recomputed(stored, report):
    store, run_id = stored
    groups = _groups(store, run_id)
    for row in report.tables["memory"].rows:
        recs = groups[_row_key(row)]
        assert row["peak_vmhwm_kb"] == max(r["peak_vmhwm_kb"] for r in recs)
        assert row["peak_pss_kb"] == max(r["peak_pss_kb"] for r in recs)
    for row in report.tables["size"].rows:
        sizes = groups[_row_key(row)][0]["sizes"]
        for part in ("runtime", "code", "weights"):
            assert row[f"{part}_kib"] == sizes[part] / 1024
        assert row["total_kib"] == sum(sizes.values()) / 1024
    for row in report.tables["build"].rows:
        flags = groups[_row_key(row)][0]["build_flags"]
        assert row["build_s"] == flags.get("build_s")
        assert row["tune_s"] == flags.get("tune_s")
        expected = (None if "build_s" not in flags and "tune_s" not in flags
                    else flags.get("build_s", 0) + flags.get("tune_s", 0))
        assert row["total_s"] == expected


def test_per_op_table_recomputed(stored, report):
    store, run_id = stored
    groups = _groups(store, run_id)
    rows = report.tables["ops"].rows
    assert rows
    for row in rows:
        recs = groups[_row_key(row)]
        cats = {c: np.mean([r["ops"]["categories"][c] for r in recs])
                for c in ("attention", "fc", "layernorm", "gelu", "other")}
        for c, v in cats.items():
            assert row[c] == pytest.approx(v, rel=1e-12)
        median = np.median([v for r in recs for v in r["samples_ms"]])
        named = cats["attention"] + cats["fc"] + cats["layernorm"] + cats["gelu"]
        assert row["named_share_pct"] == pytest.approx(named / median * 100, rel=1e-9)
        assert row["profiled_share_pct"] == pytest.approx(
            sum(cats.values()) / median * 100, rel=1e-9)


def test_fusion_effect_recomputed(stored, report):
    store, run_id = stored
    groups = _groups(store, run_id)
    rows = report.tables["fusion"].rows
    # ORT and TVM have off/on pairs on both devices, custom has none: 2 × 2 × 3 blocks
    assert len(rows) == 12
    assert {r["route"] for r in rows} == {"ort", "tvm"}
    for row in rows:
        off = groups[(row["device"], row["route"], "off")]
        on = groups[(row["device"], row["route"], "on")]

        def block(recs, block):
            if block == "end-to-end":
                return np.median([v for r in recs for v in r["samples_ms"]])
            cats = ("attention",) if block == "attention" else ("fc", "gelu")
            return np.mean([sum(r["ops"]["categories"][c] for c in cats) for r in recs])

        t_off, t_on = block(off, row["block"]), block(on, row["block"])
        assert row["off_ms"] == pytest.approx(t_off, rel=1e-12)
        assert row["on_ms"] == pytest.approx(t_on, rel=1e-12)
        if row["block"] == "end-to-end":
            # paired by round: both keys' rounds in run order, the first 6 of each shared
            def medians(recs):
                return [float(np.median(y)) for r in recs
                        for y in split_rounds(r["samples_ms"], r["rounds"]["sizes"])]
            m_off, m_on = medians(off), medians(on)
            k = min(len(m_off), len(m_on))
            ratio = np.median(np.array(m_on[:k]) / np.array(m_off[:k]))
            assert row["reduction_pct"] == pytest.approx((1 - ratio) * 100, rel=1e-9)
            assert row["rounds"] == k == 6 and row["p_value"] == pytest.approx(2 / 64)
            # every round faster with fusion on: judged, and significant at 0.05
            assert row["verdict"] == "significant" and row["significant"]
            assert row["method"].startswith("paired rounds")
        else:
            assert row["reduction_pct"] == pytest.approx((t_off - t_on) / t_off * 100,
                                                         rel=1e-9)
            assert row["verdict"] == "not judged: one profile per key"
            assert row["method"] == ("bootstrap: profile runs" if row["route"] == "tvm" else
                                     "bootstrap: e2e-scaled")
        assert row["ci_low_pct"] <= row["reduction_pct"] <= row["ci_high_pct"]


def test_fusion_needs_a_pair_and_finds_no_effect_in_identical_samples():
    base = {"device": "d", "route": "tvm", "model": "m", "variant": "fp32", "threads": 1,
            "status": "ok", "samples_ms": [1.0, 1.1, 0.9, 1.05, 0.95] * 8, "run_id": "r",
            "rounds": {"sizes": [5] * 8}}
    recs = [{**base, "build_flags": {"fusion": False}}, {**base, "build_flags": {"fusion": True}}]
    rep = analyze(recs, n_boot=300)
    (row,) = rep.tables["fusion"].rows
    assert row["reduction_pct"] == 0.0 and not row["significant"]
    assert row["verdict"] == "not significant" and row["rounds"] == 8
    # the same data in 5 rounds: too few for the signed-rank test to ever say yes
    few = [{**r, "samples_ms": r["samples_ms"][:25], "rounds": {"sizes": [5] * 5}}
           for r in recs]
    (row,) = analyze(few, n_boot=300).tables["fusion"].rows
    assert row["verdict"] == "not enough rounds to judge" and not row["significant"]
    only_on = analyze(recs[1:], n_boot=300)
    assert only_on.tables["fusion"].rows == []


def test_config_flags_drop_observed_facts():
    flags = {"route": "ort", "opt_level": "all", "provider": "CPUExecutionProvider",
             "ort_version": "1.32.0", "node_count": 72, "node_providers": {"CPU": 72},
             "build_s": 0.4}
    assert config_flags(flags) == {"opt_level": "all", "provider": "CPUExecutionProvider"}
    # a second bench of a TVM config reuses the build and holds other sessions: same config
    rpc = {"fusion": True, "rpc": True, "number": 1, "tracker_key": "phone",
           "build_cached": True, "rpc_sessions": [{"queued_s": 0.1, "load_s": 0.002}]}
    assert config_flags(rpc) == {"fusion": True, "number": 1, "rpc": True}
    assert fusion_of({"opt_level": "disable"}, "ort") is False
    assert fusion_of({"route": "ort", "opt_level": "all"}) is True
    assert fusion_of({"opt_level": "disable"}) is None  # only ORT's records name opt_level
    assert fusion_of({"graph_optimization": "all"}) is True
    assert fusion_of({"opt_level": "basic"}, "ort") is None
    assert fusion_of({"fusion": False}) is False


def test_availability_says_why_not(report):
    rows = {(r["device"], r["route"]): r for r in report.tables["availability"].rows}
    custom = rows[("qemu-a64", "custom")]
    assert custom["available"] is False and custom["valid"] == 0
    assert "asimddp" in custom["why_not"]
    assert rows[("local", "custom")]["available"] is True


def test_decision_matrix_winners_margins_and_overlap(stored, report):
    store, run_id = stored
    groups = _groups(store, run_id)
    rows = {(r["device"], r["criterion"]): r for r in report.tables["decision"].rows}
    for device in ("local", "qemu-a64"):
        meds = {route: np.median([v for r in groups[(device, route, "on")]
                                  for v in r["samples_ms"] or []])
                for route in ("ort", "tvm", "custom")
                if (device, route, "on") in groups
                and groups[(device, route, "on")][0]["status"] == "ok"}
        ranked = sorted(meds, key=meds.get)
        fastest = rows[(device, "fastest")]
        assert fastest["winner"] == ranked[0]
        assert fastest["runner_up"] == ranked[1]
        assert fastest["margin_value"] == pytest.approx(
            (meds[ranked[1]] / meds[ranked[0]] - 1) * 100, rel=1e-9)
        # judged over the 6 rounds both ran in: signed-rank test of the paired round medians
        def medians(route, device=device):
            return [float(np.median(y)) for r in groups[(device, route, "on")]
                    for y in split_rounds(r["samples_ms"], r["rounds"]["sizes"])][:6]
        p = wilcoxon(np.log(np.array(medians(ranked[1])) / np.array(medians(ranked[0])))).pvalue
        assert fastest["verdict"] == ("winner" if p < 0.05 else "no significant difference")
    # constructed so: on local, ORT (5.0 ms) and custom (5.05 ms) are not told apart by 6
    # rounds; on qemu ORT wins every round
    assert rows[("local", "fastest")]["verdict"] == "no significant difference"
    assert rows[("qemu-a64", "fastest")]["verdict"] == "winner"
    assert rows[("local", "smallest")]["winner"] == "custom"
    assert rows[("local", "smallest")]["winner_value"] == 150_000 + 2_000_000
    assert rows[("local", "leanest")]["winner"] == "custom"
    # ranked on what the model adds to the idle runner: ORT's ~20 MB over its 60 MB Python
    # beats TVM's ~35 MB over 5 MB, although ORT's total (80 MB) is twice TVM's
    lean = rows[("qemu-a64", "leanest")]
    assert lean["winner"] == "ort" and lean["runner_up"] == "tvm"
    assert lean["statistic"] == "peak VmHWM - idle runner"
    assert "on an idle runner of 58.6 MiB (total" in lean["note"]
    caption = report.tables["decision"].caption
    assert "Left out:" in caption and "fusion off: the fusion table's baseline" in caption
    assert rows[("qemu-a64", "coverage")]["winner"] == "ort = tvm"
    assert rows[("qemu-a64", "coverage")]["runner_up"] == "custom"
    assert rows[("local", "build cost")]["winner"] == "ort"


def test_text_outputs_carry_the_same_numbers(report):
    doc = json.loads(format_report(report, "json"))
    assert doc["meta"]["run_ids"] == report.run_ids
    for name, table in report.tables.items():
        got = doc["tables"][name]["rows"]
        assert len(got) == len(table.rows)
        for g, row in zip(got, table.rows, strict=True):
            for col in table.columns:
                assert g[col.key] == row.get(col.key)
    csv_text = to_csv(list(report.tables.values()))
    lat = report.tables["latency"].rows[0]
    assert f"latency,0,median_ms,median ms,ms,{lat['median_ms']!r}" in csv_text
    md = format_report(report, "md")
    assert "## End-to-end latency per inference" in md
    assert "| median ms |" in md and f"{lat['median_ms']:.3f}" in md


def test_load_report_refuses_an_empty_selection(stored):
    store, _ = stored
    with pytest.raises(StoreError, match="no run given"):
        load_report(store, [])


def test_several_runs_pool_per_configuration(tmp_path):
    from test_report_data import constructed_records as recs

    store, first = write_store(tmp_path / "r.sqlite", recs(seed=1))
    second = store.start_run(["farm", "triangle"])
    for r in recs(seed=2):
        store.add({**r, "run_id": second})
    store.finish_run(second, "ok")
    one = load_report(store, [first])
    both = load_report(store, [first, second])
    n_one = {(r["device"], r["route"], r["config"]): r["n"]
             for r in one.tables["latency"].rows}
    for row in both.tables["latency"].rows:
        assert row["n"] == 2 * n_one[(row["device"], row["route"], row["config"])]
    assert both.run_ids == [first, second] and len(both.runs) == 2
    store.close()


def test_nothing_measured_still_reports_why():
    from farm.report.html import render_html
    from farm.report.terminal import render_report

    recs = [{"device": "pi", "route": route, "model": "m", "variant": "fp32", "threads": 1,
             "status": "unavailable", "status_detail": f"{route}: no Python on the device"}
            for route in ("ort", "tvm")] + [
            {"device": "pi", "route": "custom", "model": "m", "variant": "fp32", "threads": 1,
             "status": "failed", "status_detail": "device lost during this route"}]
    rep = analyze(recs)
    assert [r["n"] for r in rep.tables["latency"].rows] == [0, 0, 0]
    assert {r["verdict"] for r in rep.tables["decision"].rows} == {"no data"}
    why = {r["route"]: r["why_not"] for r in rep.tables["availability"].rows}
    assert why["custom"] == "device lost during this route"
    html = render_html(rep)
    assert "no Python on the device" in html and "<svg" not in html
    assert render_report(rep)
    for fmt in ("md", "csv", "json"):
        assert format_report(rep, fmt)
