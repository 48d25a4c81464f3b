"""Rounds as the unit of replication, on synthetic rounds whose answer is known.

The model of a run: sample = round effect x within-round noise. The round effect (the
machine's state during that round: frequency, neighbours, steal) is shared by every sample
of the round, so thousands of samples do not make a run's median known to a fraction of a
percent. What a test over pooled samples gets wrong, a test over rounds must get right.
"""

from __future__ import annotations

import numpy as np
import pytest
from scipy.stats import mannwhitneyu

from farm.results.rounds import (
    METHOD_HIERARCHICAL,
    METHOD_ONE_ROUND,
    NOT_ENOUGH,
    ci_of_median,
    min_paired_rounds,
    paired_test,
    round_medians,
    split_rounds,
    unpaired_test,
)
from farm.results.stats import bootstrap_ci, record_stats, summarize

ROUNDS, PER_ROUND = 6, 400
WITHIN_SD, DRIFT_SD = 0.5, 0.10  # log-sd of the samples of a round / of the round effect


def _run(rng: np.random.Generator, *, rounds: int = ROUNDS, effects: np.ndarray | None = None,
         scale: float = 1.0, per_round: int = PER_ROUND) -> list[np.ndarray]:
    """One run: each round's samples, lognormal within the round around its round effect."""
    if effects is None:
        effects = rng.normal(0.0, DRIFT_SD, rounds)
    return [scale * np.exp(e + rng.normal(0.0, WITHIN_SD, per_round)) for e in effects]


def _medians(run: list[np.ndarray]) -> list[float]:
    return [float(np.median(r)) for r in run]


# -- the two-level bootstrap ----------------------------------------------------------------
def test_split_rounds_and_round_medians() -> None:
    samples = [1.0, 2.0, 3.0, 10.0, 20.0, 5.0]
    assert [r.tolist() for r in split_rounds(samples, [3, 3])] == [[1, 2, 3], [10, 20, 5]]
    assert round_medians(samples, [3, 3]) == [2.0, 10.0]
    # sizes that do not describe the samples: one round, never a wrong split
    assert len(split_rounds(samples, [3, 2])) == 1 and len(split_rounds(samples, None)) == 1


def test_hierarchical_ci_covers_the_true_median_where_pooled_samples_do_not() -> None:
    """Known answer: the run's population median is exp(0) = 1 (lognormal round effects
    times lognormal noise). Over 40 runs the two-level CI holds it about 95 % of the time;
    the bootstrap of pooled samples, blind to the round effect, misses it most times."""
    rng = np.random.default_rng(2024)
    hier = flat = 0
    for i in range(40):
        run = _run(rng)
        low, high = ci_of_median(run, seed=i, n_boot=400)
        hier += low <= 1.0 <= high
        flow, fhigh = bootstrap_ci(np.concatenate(run), seed=i, n_boot=400)
        flat += flow <= 1.0 <= fhigh
    assert hier >= 32, f"two-level CI covered the true median in {hier}/40 runs"
    assert flat <= 24, f"pooled CI covered it in {flat}/40: the test shows nothing"


def test_record_stats_name_the_method_and_keep_round_medians() -> None:
    run = _run(np.random.default_rng(1))
    samples = np.concatenate(run).tolist()
    fields = record_stats(samples, sizes=[PER_ROUND] * ROUNDS, n_boot=200)
    assert fields["ci_method"] == METHOD_HIERARCHICAL
    assert fields["round_medians_ms"] == pytest.approx(_medians(run))
    one = record_stats(samples, n_boot=200)
    assert one["ci_method"] == METHOD_ONE_ROUND and len(one["round_medians_ms"]) == 1
    # rounds widen the interval: the round effect is the uncertainty that matters
    assert (fields["ci95_high_ms"] - fields["ci95_low_ms"]) > \
        2 * (one["ci95_high_ms"] - one["ci95_low_ms"])
    again = summarize(samples, sizes=[PER_ROUND] * ROUNDS, n_boot=200)
    assert (again.ci95_low, again.ci95_high) == (fields["ci95_low_ms"], fields["ci95_high_ms"])


# -- within a run: paired by round ----------------------------------------------------------
def test_min_paired_rounds() -> None:
    # the smallest two-sided p of the exact signed-rank test of n rounds is 2 / 2**n
    assert min_paired_rounds(0.05) == 6 and min_paired_rounds(0.10) == 5
    assert min_paired_rounds(0.01) == 8


def test_round_level_shift_under_large_noise_is_found() -> None:
    """B is 10 % slower in every round; within-round noise (CV ~50 %) and a drift shared
    by both keys of a round (they ran in it together) are large: paired rounds see it."""
    for seed in range(10):
        rng = np.random.default_rng(seed)
        effects = rng.normal(0.0, 0.20, ROUNDS)
        a, b = _run(rng, effects=effects), _run(rng, effects=effects, scale=1.10)
        result = paired_test(_medians(a), _medians(b), seed=seed, n_boot=500)
        assert result.judged and result.significant(0.05), (seed, result)
        assert result.direction() == 1 and result.ratio == pytest.approx(1.10, abs=0.05)
        assert result.ci_low is not None and result.ci_low > 1.0


def test_within_round_differences_with_drift_are_not_called_significant() -> None:
    """No real difference: each key meets its own state in each round (a neighbour that
    came and went between them: +-10 % per key and round) on top of a round-to-round
    drift. The pooled samples (1500 a round, as a fast model gives) call most such pairs
    "significant"; the paired rounds must not (about the test's own 5 %: <= 2 of 20)."""
    paired = pooled = 0
    for seed in range(20):
        rng = np.random.default_rng(100 + seed)
        drift = rng.normal(0.0, 0.20, ROUNDS)
        a = _run(rng, effects=drift + rng.normal(0.0, 0.10, ROUNDS), per_round=1500)
        b = _run(rng, effects=drift + rng.normal(0.0, 0.10, ROUNDS), per_round=1500)
        result = paired_test(_medians(a), _medians(b), seed=seed, n_boot=200)
        assert result.judged
        paired += result.significant(0.05)
        pooled += mannwhitneyu(np.concatenate(a), np.concatenate(b)).pvalue < 0.05
    assert paired <= 2, f"paired rounds called {paired}/20 identical pairs significant"
    assert pooled >= 12, f"pooled samples called only {pooled}/20: the case is too easy"


def test_too_few_rounds_are_never_significant() -> None:
    a, b = [1.0, 1.0, 1.0, 1.0, 1.0], [2.0, 2.0, 2.0, 2.0, 2.0]  # twice as slow, 5 rounds
    result = paired_test(a, b)
    assert not result.judged and not result.significant(0.05) and result.p_value is None
    assert result.ratio == 2.0 and NOT_ENOUGH == "not enough rounds to judge"
    assert paired_test(a * 2, b * 2).significant(0.05)  # 10 rounds: judged, significant


# -- between runs: rounds of each run ------------------------------------------------------
def test_between_runs_a_run_level_drift_is_not_a_difference() -> None:
    """Two runs of one unchanged model; each round of each run meets its own state. The
    pooled samples differ "significantly" in most pairs, the round medians rarely."""
    rounds = pooled = 0
    for seed in range(20):
        rng = np.random.default_rng(500 + seed)
        a, b = _run(rng, per_round=1500), _run(rng, per_round=1500)
        rounds += unpaired_test(_medians(a), _medians(b)).significant(0.05)
        pooled += mannwhitneyu(np.concatenate(a), np.concatenate(b)).pvalue < 0.05
    assert rounds <= 2 and pooled >= 12, (rounds, pooled)


def test_between_runs_a_real_slowdown_is_found_and_few_rounds_are_not_judged() -> None:
    found = 0
    for seed in range(10):  # +25 % against a round-to-round drift of 10 % (log-sd)
        rng = np.random.default_rng(900 + seed)
        a, b = _run(rng), _run(rng, scale=1.25)
        result = unpaired_test(_medians(a), _medians(b), alternative="greater")
        assert result.judged
        found += result.significant(0.05)
    assert found >= 8, f"a 25 % slowdown found in {found}/10 pairs of runs"
    assert not unpaired_test([1.0, 1.1, 1.2], [2.0, 2.1, 2.2]).judged  # 3 vs 3 at 0.05
    assert unpaired_test([1.0, 1.1, 1.2], [2.0, 2.1, 2.2], alternative="greater",
                         alpha=0.1).significant(0.1)


# -- the store: recomputable by `farm results check` ---------------------------------------
def test_store_fills_and_rechecks_the_two_level_ci(tmp_path) -> None:  # type: ignore[no-untyped-def]
    import sqlite3

    from farm.results.store import ResultStore

    run = _run(np.random.default_rng(4))
    path = tmp_path / "r.sqlite"
    with ResultStore(path) as store:
        run_id = store.start_run("farm bench")
        stored = store.add({"run_id": run_id, "device": "local", "route": "ort",
                            "status": "ok", "samples_ms": np.concatenate(run).tolist(),
                            "rounds": {"planned": ROUNDS, "done": ROUNDS,
                                       "sizes": [PER_ROUND] * ROUNDS},
                            "policy": {"seed": 3, "n_boot": 300}})
        assert stored["ci_method"] == METHOD_HIERARCHICAL
        assert stored["round_medians_ms"] == pytest.approx(_medians(run))
        assert store.integrity_check().ok
    db = sqlite3.connect(path)
    db.execute("UPDATE records SET ci95_low_ms = ci95_low_ms * 0.99")
    db.commit()
    db.close()
    with ResultStore(path) as store:
        problems = store.integrity_check().problems
    assert len(problems) == 1 and "ci95_low_ms" in problems[0]
