"""Statistics against hand-computed values, the bootstrap CI, drift flags, route order,
and the per-dtype output comparison."""

from __future__ import annotations

import itertools
import json
import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from farm.bench.accuracy import compare_outputs, tolerance_for
from farm.results.schema import FIELD_NAMES
from farm.results.stats import (
    STAT_FIELDS,
    bootstrap_ci,
    drift_flags,
    interleaved_order,
    record_stats,
    summarize,
)


# -- summarize: values computed by hand ---------------------------------------------------
def test_one_to_ten_by_hand() -> None:
    s = summarize([7, 3, 10, 1, 5, 9, 2, 8, 6, 4])  # order must not matter
    assert s.n == 10
    assert s.median == pytest.approx(5.5)  # (5 + 6) / 2
    # linear method: position (n-1)*q = 8.1 -> 9 + 0.1 * (10 - 9)
    assert s.p90 == pytest.approx(9.1)
    assert s.p99 == pytest.approx(9.91)  # position 8.91
    assert s.mean == pytest.approx(5.5)
    # sum of squared deviations = 82.5, sample variance = 82.5 / 9
    assert s.stddev == pytest.approx(math.sqrt(82.5 / 9))
    assert s.cv == pytest.approx(math.sqrt(82.5 / 9) / 5.5)
    assert (s.min, s.max) == (1.0, 10.0)


def test_three_values_by_hand() -> None:
    s = summarize([3.0, 1.0, 2.0])
    assert (s.median, s.mean, s.stddev, s.cv) == pytest.approx((2.0, 2.0, 1.0, 0.5))
    assert s.p90 == pytest.approx(2.8)  # position 1.8 between 2 and 3
    assert s.p99 == pytest.approx(2.98)


def test_classic_eight_values() -> None:
    s = summarize([2, 4, 4, 4, 5, 5, 7, 9])
    assert s.mean == pytest.approx(5.0)
    assert s.stddev == pytest.approx(math.sqrt(32 / 7))  # population sd would be 2.0
    assert s.median == pytest.approx(4.5)
    assert s.p90 == pytest.approx(7.6)  # position 6.3: 7 + 0.3 * 2


def test_single_sample() -> None:
    s = summarize([4.0])
    assert (s.n, s.median, s.stddev, s.cv, s.ci95_low, s.ci95_high) == (1, 4, 0, 0, 4, 4)


@pytest.mark.parametrize("bad", [[], [1.0, float("nan")], [1.0, float("inf")], [-1.0, 2.0]])
def test_bad_samples_are_refused(bad: list[float]) -> None:
    with pytest.raises(ValueError, match="samples_ms"):
        summarize(bad)


# -- bootstrap CI of the median -----------------------------------------------------------
def test_bootstrap_is_deterministic_under_seed_and_contains_median() -> None:
    x = np.random.default_rng(7).lognormal(1.0, 0.2, 300).tolist()
    a, b = summarize(x, seed=11), summarize(x, seed=11)
    assert (a.ci95_low, a.ci95_high) == (b.ci95_low, b.ci95_high)
    assert a.ci95_low <= a.median <= a.ci95_high
    assert a.min <= a.ci95_low < a.ci95_high <= a.max
    other = summarize(x, seed=12)
    assert (other.ci95_low, other.ci95_high) != (a.ci95_low, a.ci95_high)


def test_bootstrap_width_matches_theory() -> None:
    # median of N(0,1): standard error ~ 1.2533 / sqrt(n); 95% half-width ~ 1.96 * se
    x = np.random.default_rng(3).normal(100.0, 1.0, 400)
    low, high = bootstrap_ci(x, seed=0)
    expected_half = 1.96 * 1.2533 / math.sqrt(400)
    assert 0.6 * expected_half < (high - low) / 2 < 1.5 * expected_half


def test_record_stats_fields() -> None:
    assert record_stats(None) == dict.fromkeys(STAT_FIELDS)
    assert record_stats([]) == dict.fromkeys(STAT_FIELDS)
    fields = record_stats([1.0, 2.0, 3.0], seed=5)
    assert tuple(fields) == STAT_FIELDS
    assert set(STAT_FIELDS) <= set(FIELD_NAMES)
    assert fields["median_ms"] == 2.0 and fields["n"] == 3


# -- drift flags --------------------------------------------------------------------------
def _state(freq: int = 1_800_000, temp: float = 40.0, gov: str = "performance") -> dict:
    return {"governor": {"cpu0": gov, "cpu1": gov},
            "freq_khz": {"cpu0": freq, "cpu1": 1_800_000},
            "thermal_c": {"thermal_zone0": temp}, "load": [0.1, 0.1, 0.1]}


def test_no_drift() -> None:
    assert drift_flags(_state(), _state(freq=1_850_000, temp=43.0)) == []
    empty = {"governor": {}, "freq_khz": {}, "thermal_c": {}, "load": [0.0, 0.0, 0.0]}
    assert drift_flags(empty, empty) == []  # a container exposes none of it


def test_frequency_drop_is_flagged() -> None:
    flags = drift_flags(_state(), _state(freq=1_200_000))
    assert flags == ["freq: cpu0 1800000 -> 1200000 kHz (-33.3%)"]


def test_thermal_and_governor_are_flagged() -> None:
    flags = drift_flags(_state(), _state(temp=46.5, gov="powersave"))
    assert "thermal: thermal_zone0 40.0 -> 46.5 C (+6.5 C)" in flags
    assert "governor: cpu0 performance -> powersave" in flags
    assert len(flags) == 3
    assert drift_flags(_state(), _state(temp=44.9)) == []
    assert drift_flags(_state(), _state(temp=44.9), temp_tol_c=2.0) != []


def test_missing_and_odd_state() -> None:
    assert drift_flags(None, _state()) == [
        "state: device state before the route was not read; drift unknown"]
    after = _state()
    after["freq_khz"]["cpu2"] = 900_000
    after["thermal_c"]["thermal_zone0"] = "N/A"
    flags = drift_flags(_state(), after)
    assert "freq: cpu2 seen only after the route" in flags
    assert any(f.startswith("thermal: thermal_zone0 unreadable") for f in flags)


# -- interleaved order --------------------------------------------------------------------
def test_interleaved_order() -> None:
    routes = ["ort", "tvm", "custom"]
    order = interleaved_order(routes, 5, seed=1)
    assert order == interleaved_order(routes, 5, seed=1)
    assert len(order) == 15
    for i in range(0, 15, 3):
        assert sorted(order[i:i + 3]) == sorted(routes)  # every round runs each once
    assert all(a != b for a, b in itertools.pairwise(order))  # never twice in a row
    orders = {tuple(interleaved_order(routes, 2, seed=s)) for s in range(20)}
    assert len(orders) > 3  # the seed actually shuffles
    assert interleaved_order(["ort"], 3, seed=0) == ["ort", "ort", "ort"]
    assert interleaved_order(routes, 0, seed=0) == []
    with pytest.raises(ValueError):
        interleaved_order(["ort", "ort"], 1, seed=0)


# -- output comparison --------------------------------------------------------------------
def test_fp32_tolerance() -> None:
    ref = {"logits": np.linspace(-3, 3, 50, dtype=np.float32)}
    same = compare_outputs(ref, ref, "fp32", reference="ort fp32")
    assert same.ok and same.max_abs_diff == 0.0 and same.reference == "ort fp32"
    close = compare_outputs({"logits": ref["logits"] + 2e-4}, ref, "fp32")
    assert close.ok and close.max_abs_diff == pytest.approx(2e-4, rel=1e-3)
    far = compare_outputs({"logits": ref["logits"] + 1e-2}, ref, "fp32")
    assert not far.ok
    assert "50 of 50 element(s)" in far.detail
    assert far.max_abs_diff == pytest.approx(1e-2, rel=1e-3)
    json.dumps(far.as_json(), allow_nan=False)


def test_quantized_tolerances_are_looser() -> None:
    ref = np.ones((2, 8), dtype=np.float32)
    off = ref + 0.15
    assert not compare_outputs(off, ref, "fp32").ok
    assert not compare_outputs(off, ref, "int8-dynamic").ok  # 0.15 > 0.05 + 0.05
    assert compare_outputs(off, ref, "int4").ok              # 0.15 <= 0.1 + 0.1
    assert compare_outputs(ref + 0.02, ref, "int8-qdq").ok
    assert tolerance_for("int8-whatever") == tolerance_for("int8")
    with pytest.raises(ValueError, match="fp16"):
        tolerance_for("fp16")


def test_comparison_failures_are_explained() -> None:
    ref = {"a": np.zeros(4), "b": np.ones(3)}
    assert "output names differ" in compare_outputs({"a": np.zeros(4)}, ref, "fp32").detail
    shape = compare_outputs({"a": np.zeros(5), "b": np.ones(3)}, ref, "fp32")
    assert not shape.ok and "shape" in shape.detail
    nan = compare_outputs({"a": np.array([0, 0, 0, np.nan]), "b": np.ones(3)}, ref, "fp32")
    assert not nan.ok and "1 non-finite" in nan.detail


def test_relative_diff_ignores_near_zero_reference() -> None:
    ref = np.array([0.0, 1e-6, 2.0])
    cand = np.array([5e-4, 5e-4, 2.001])
    acc = compare_outputs(cand, ref, "fp32")
    assert acc.ok
    assert acc.max_rel_diff == pytest.approx(0.0005)  # only the 2.0 element counts


# -- properties ---------------------------------------------------------------------------
@settings(max_examples=60, deadline=None)
@given(st.lists(st.floats(min_value=0.0, max_value=1e4, allow_nan=False), min_size=1,
                max_size=60), st.randoms(use_true_random=False))
def test_summary_invariants(samples: list[float], rnd) -> None:  # type: ignore[no-untyped-def]
    s = summarize(samples, n_boot=200)
    tol = 1e-9 * max(1.0, s.max)
    assert s.min - tol <= s.median <= s.p90 + tol <= s.p99 + 2 * tol <= s.max + 3 * tol
    assert s.min - tol <= s.mean <= s.max + tol
    assert s.min - tol <= s.ci95_low <= s.ci95_high <= s.max + tol
    assert s.stddev >= 0.0
    shuffled = list(samples)
    rnd.shuffle(shuffled)
    again = summarize(shuffled, n_boot=200)
    assert (again.median, again.p90, again.p99) == (s.median, s.p90, s.p99)
