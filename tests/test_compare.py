"""compare: significance over rounds on constructed samples, the noise floor, key
matching, and the CLI."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from rich.console import Console

from farm.cli.main import main
from farm.results.compare import (
    FASTER,
    NOT_MEASURED,
    ONLY_A,
    ONLY_B,
    SAME,
    SLOWER,
    compare_records,
    format_comparisons,
    render_comparisons,
)
from farm.results.floor import Floor, floor_of, load_floor, save_floor
from farm.results.rounds import NOT_ENOUGH
from farm.results.store import ResultStore


def _rec(samples, route: str = "ort", rounds: int = 6, **over):  # type: ignore[no-untyped-def]
    """A record whose samples ran in `rounds` rounds of equal size (the rest in the last)."""
    rec = {"device": "local", "route": route, "variant": "fp32", "threads": 1,
           "status": "ok", "model": "tiny", "model_hash": "abc",
           "samples_ms": None if samples is None else [float(v) for v in samples]}
    if samples is not None:
        n = len(rec["samples_ms"])
        k = min(rounds, n)
        sizes = [n // k] * k
        sizes[-1] += n - sum(sizes)
        rec["rounds"] = {"planned": k, "done": k, "sizes": sizes}
    rec.update(over)
    return rec


def _floor(pct: float) -> Floor:
    return Floor("local", {"p10": pct, "median": pct, "p90": 2 * pct}, [], {"model": "tiny"})


def test_clearly_different_is_significant() -> None:
    rng = np.random.default_rng(100)
    a = rng.normal(10.0, 0.2, 60)
    b = rng.normal(9.0, 0.2, 60)
    (faster,) = compare_records([_rec(a)], [_rec(b)])
    assert faster.verdict == FASTER and (faster.rounds_a, faster.rounds_b) == (6, 6)
    # every round of B below every round of A: the exact two-sided p of 6 vs 6 rounds
    assert faster.p_value == pytest.approx(2 / 924)
    assert faster.ratio == pytest.approx(np.median(b) / np.median(a))
    assert faster.ratio_ci_high is not None and faster.ratio_ci_high < 1.0
    assert faster.ratio_ci_low is not None and faster.ratio_ci_low < faster.ratio
    (slower,) = compare_records([_rec(b)], [_rec(a)])
    assert slower.verdict == SLOWER and slower.ratio is not None and slower.ratio > 1.0


def test_same_distribution_is_no_significant_difference() -> None:
    rng = np.random.default_rng(101)
    a = rng.lognormal(2.0, 0.05, 200)
    b = rng.lognormal(2.0, 0.05, 200)
    (same,) = compare_records([_rec(a)], [_rec(b)])
    assert same.verdict == SAME
    assert same.p_value is not None and same.p_value > 0.05
    assert same.ratio_ci_low is not None and same.ratio_ci_high is not None
    assert same.ratio_ci_low < 1.0 < same.ratio_ci_high
    (identical,) = compare_records([_rec(a)], [_rec(a)])
    assert (identical.verdict, identical.ratio, identical.p_value) == (SAME, 1.0, 1.0)
    (constant,) = compare_records([_rec([5.0] * 10)], [_rec([5.0] * 10)])
    assert (constant.verdict, constant.p_value) == (SAME, 1.0)  # all ties: no evidence


def test_few_rounds_are_not_enough_evidence() -> None:
    # B is twice as slow, but 3 rounds each can never reach p < 0.05 (smallest p 0.1)
    (c,) = compare_records([_rec([1.0, 1.1, 1.2])], [_rec([2.0, 2.1, 2.2])])
    assert c.ratio == pytest.approx(2.1 / 1.1) and (c.rounds_a, c.rounds_b) == (3, 3)
    assert c.p_value is None and c.verdict == NOT_ENOUGH
    (c,) = compare_records([_rec([1.0, 1.1, 1.2])], [_rec([2.0, 2.1, 2.2])], alpha=0.2)
    assert c.verdict == SLOWER and c.p_value == pytest.approx(0.1)
    # thousands of samples in ONE round each: still one replicate a side, never a verdict
    rng = np.random.default_rng(7)
    (c,) = compare_records([_rec(rng.normal(10, 0.1, 3000), rounds=1)],
                           [_rec(rng.normal(12, 0.1, 3000), rounds=1)])
    assert c.verdict == NOT_ENOUGH


def test_a_change_inside_the_noise_floor_is_within_noise() -> None:
    rng = np.random.default_rng(8)
    base = rng.normal(10.0, 0.05, 600)
    slow = rng.normal(10.4, 0.05, 600)  # +4 %, every round
    (plain,) = compare_records([_rec(base)], [_rec(slow)])
    assert plain.verdict == SLOWER and plain.floor_pct is None
    (c,) = compare_records([_rec(base)], [_rec(slow)], floors={"local": _floor(5.0)})
    assert c.verdict == "within noise (±5.0 %)" and c.floor_pct == 5.0
    (c,) = compare_records([_rec(base)], [_rec(slow)], floors={"local": _floor(2.0)})
    assert c.verdict == SLOWER  # beyond the floor and significant over rounds
    (c,) = compare_records([_rec(base)], [_rec(slow)], floors={"other": _floor(5.0)})
    assert c.verdict == SLOWER  # another device's floor is not this one's


def test_floor_of_a_b_pairs_and_the_store(tmp_path: Path) -> None:
    rng = np.random.default_rng(9)
    runs = [[_rec(rng.normal(10.0 * f, 0.05, 120), run_id=f"r{i}")]
            for i, f in enumerate((1.0, 1.03, 1.0, 0.98))]
    for (rec,) in runs:
        rec["rounds"].update(steal_pct=[0.0, 1.5] * 3, load1=[1.0, 3.0] * 3)
    floor = floor_of("local", [("r0", "r1", runs[0], runs[1]), ("r2", "r3", runs[2], runs[3])],
                     {"model": "tiny", "routes": ["ort"]}, "2026-01-01T00:00:00Z")
    # the spread of all four runs (1.03 / 0.98 - 1), wider than either pair's own move
    assert floor.pct() == pytest.approx(5.1, abs=0.5)
    assert [round(p["changes"][next(iter(p["changes"]))]["median"]) for p in floor.pairs] \
        == [3, -2]
    assert floor.steal_pct["max"] == 1.5 and floor.load1["max"] == 3.0
    assert "A/A pair(s) of tiny ort" in floor.describe()
    with ResultStore(tmp_path / "r.sqlite") as store:
        save_floor(store, floor)
        assert load_floor(store, "local") == floor and load_floor(store, "other") is None


def test_keys_missing_and_unmeasured() -> None:
    a = [_rec([1, 2, 3], "ort"), _rec([1, 2, 3], "tvm"),
         _rec(None, "custom", status="failed", status_detail="boom")]
    b = [_rec([1, 2, 3], "ort", threads=2), _rec([1, 2, 3], "tvm"),
         _rec([1, 2, 3], "custom")]
    got = {(c.route, c.threads): c for c in compare_records(a, b)}
    assert got[("ort", 1)].verdict == ONLY_A
    assert got[("ort", 2)].verdict == ONLY_B
    assert got[("tvm", 1)].verdict == NOT_ENOUGH  # 3 rounds of one sample each
    custom = got[("custom", 1)]
    assert custom.verdict == NOT_MEASURED and "A not measured (failed: boom)" in custom.note
    assert [c.route for c in compare_records(a, b)] == ["custom", "ort", "ort", "tvm"]


def test_notes_pooling_models_invalid_drift() -> None:
    a = [_rec([1.0, 1.2]), _rec([1.1, 1.3])]
    b = [_rec([1.0, 1.2, 1.1], model="other", model_hash="def", status="invalid",
              drift=["freq: cpu0 1 -> 2 kHz (+100.0%)"])]
    (c,) = compare_records(a, b)
    assert c.n_a == 4 and c.n_b == 3 and (c.rounds_a, c.rounds_b) == (4, 3)
    for part in ("models differ", "A pools 2 records", "B outputs invalid", "B drift: 1"):
        assert part in c.note


def test_printing_comparisons() -> None:
    rng = np.random.default_rng(105)
    comps = compare_records([_rec(rng.normal(10, 0.2, 30))], [_rec(rng.normal(8, 0.2, 30))])
    doc = json.loads(format_comparisons(comps, "json"))
    assert doc["alpha"] == 0.05 and doc["comparisons"][0]["verdict"] == FASTER
    assert format_comparisons(comps, "md").splitlines()[0].startswith("| device | route |")
    console = Console(force_terminal=True, color_system=None, width=160, record=True)
    console.print(render_comparisons(comps, "runA", "runB"))
    text = console.export_text()
    assert "ratio B/A" in text and "faster" in text and "Mann-Whitney U" in text
    assert "median B / median A" in text and "(exact) on round" in text and "6/6" in text


def test_cli_compare_and_results(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rng = np.random.default_rng(106)
    path = tmp_path / "r.sqlite"
    with ResultStore(path) as store:
        run_a = store.start_run("a")
        store.add({"run_id": run_a, **_rec(rng.normal(10, 0.1, 40))})
        store.finish_run(run_a, "ok")
        run_b = store.start_run("b")
        store.add({"run_id": run_b, **_rec(rng.normal(12, 0.1, 40))})
        store.finish_run(run_b, "ok")
    assert main(["compare", run_a, "latest", "--store", str(path), "--output", "json"]) == 0
    (c,) = json.loads(capsys.readouterr().out)["comparisons"]
    assert c["verdict"] == SLOWER and c["ratio"] > 1.1
    assert main(["compare", run_a, "latest", "--store", str(path)]) == 0
    assert "slower" in capsys.readouterr().out
    assert main(["results", "list", "--store", str(path), "--output", "jsonl"]) == 0
    runs = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [r["run_id"] for r in runs] == [run_a, run_b]
    assert main(["results", "show", run_b[:-1], "--store", str(path), "--output", "md"]) == 0
    assert "median ms" in capsys.readouterr().out
    assert main(["results", "show", "latest", "--store", str(path), "--output", "csv",
                 "--columns", "route,median_ms"]) == 0
    assert capsys.readouterr().out.splitlines()[0] == "route,median_ms"
    assert main(["results", "check", "--store", str(path)]) == 0
    assert "ok" in capsys.readouterr().out
    assert main(["compare", "nope", "latest", "--store", str(path)]) == 1
    assert "no run matches 'nope'" in capsys.readouterr().err
    assert main(["results", "show", "latest", "--store", str(path), "--columns", "x"]) == 2
    missing = tmp_path / "none.sqlite"
    assert main(["results", "list", "--store", str(missing)]) == 1
    assert "no result store at" in capsys.readouterr().err and not missing.exists()


def test_fusion_on_and_off_are_compared_apart_not_pooled():
    on = _rec([1.0, 1.1, 0.9] * 5, "ort")
    off = _rec([5.0, 5.1, 4.9] * 5, "ort")
    on["build_flags"] = {"opt_level": "all", "build_s": 1.0}
    off["build_flags"] = {"opt_level": "disable", "build_s": 2.0}  # cost keys do not split
    comps = compare_records([on, off], [dict(on), dict(off)])
    assert sorted(c.config for c in comps) == ["opt=all", "opt=disable"]
    assert all(c.verdict == "no significant difference" for c in comps)
