"""Rounds as the unit of replication: round medians, the two-level bootstrap, and the
tests that judge a difference over rounds rather than over pooled samples.

Why: the thousands of samples of one round share the machine's state (frequency,
neighbours, caches, the hypervisor's steal), so they are not independent replicates of a
run. A CI or a test over pooled samples says how well we know *this* run, not whether the
next one agrees; two identical runs then "differ significantly". Rounds (one interleaved
pass over every route key, `stats.interleaved_order`) are the replicates.

Contract (host side, numpy and scipy):

* `split_rounds(samples, sizes)` -> the samples of each round (a record keeps `samples_ms`
  in round order and `rounds.sizes`); sizes that do not add up to the samples -> one round.
* `round_medians(samples, sizes)` -> the median of each round.
* `hierarchical_medians(rounds, rng, n_boot)` -> `n_boot` medians of two-level resamples:
  draw R rounds with replacement, then, inside each drawn round, its n_r samples with
  replacement; pool them and take the median. `ci_of_median` takes the percentiles.
  With one round this is the ordinary bootstrap of the samples (method `METHOD_ONE_ROUND`).
* `paired_test(a, b)`: keys that ran in the same rounds (fusion off/on, route vs route).
  Per round the ratio b/a of the round medians; the effect is the median ratio, its 95 % CI a
  paired bootstrap of the rounds (seeded), and the verdict Wilcoxon's signed-rank test on the
  log ratios (scipy, exact): with fewer rounds than the test can ever call significant
  (`min_paired_rounds(alpha)`: 6 at alpha 0.05, because the smallest two-sided p of n
  rounds is 2 / 2**n) the verdict is `NOT_ENOUGH`, never significant.
* `unpaired_test(a, b, alternative)`: runs that did not share rounds (`farm compare`, the
  gate). Mann-Whitney U on the per-round values of each run (exact), `NOT_ENOUGH` when even
  a total separation of the rounds could not reach alpha (3 vs 3 rounds cannot, at 0.05).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from scipy.stats import mannwhitneyu, wilcoxon

METHOD_HIERARCHICAL = "hierarchical bootstrap: rounds, then samples within each round"
METHOD_ONE_ROUND = "bootstrap of samples: one round"
# records written before rounds were the unit: a bootstrap of the pooled samples
METHOD_LEGACY = "bootstrap of pooled samples"
NOT_ENOUGH = "not enough rounds to judge"
PAIRED_TEST = "Wilcoxon signed-rank (exact) on log ratios of round medians"
UNPAIRED_TEST = "Mann-Whitney U (exact) on round medians"


def split_rounds(samples: Sequence[float], sizes: Sequence[int] | None) -> list[np.ndarray]:
    """The samples of each round, in order; one round when `sizes` does not describe them."""
    x = np.asarray(samples, dtype=np.float64)
    sizes = [int(s) for s in sizes or []]
    if not sizes or any(s < 1 for s in sizes) or sum(sizes) != x.size:
        return [x] if x.size else []
    return np.split(x, np.cumsum(sizes)[:-1])


def record_sizes(record: Mapping[str, Any]) -> list[int] | None:
    """A record's samples per round (`rounds.sizes`), None when it has none."""
    rounds = record.get("rounds")
    sizes = rounds.get("sizes") if isinstance(rounds, Mapping) else None
    return sizes if isinstance(sizes, list) else None


def round_medians(samples: Sequence[float], sizes: Sequence[int] | None) -> list[float]:
    return [float(np.median(r)) for r in split_rounds(samples, sizes)]


def ci_method(n_rounds: int) -> str:
    return METHOD_HIERARCHICAL if n_rounds > 1 else METHOD_ONE_ROUND


def hierarchical_medians(rounds: Sequence[np.ndarray], rng: np.random.Generator,
                         n_boot: int) -> np.ndarray:
    """Medians of `n_boot` two-level resamples (see module docstring)."""
    if not rounds or any(r.size == 0 for r in rounds):
        raise ValueError("every round needs samples")
    x = np.concatenate(rounds)
    sizes = np.array([r.size for r in rounds])
    offsets = np.concatenate([[0], np.cumsum(sizes)[:-1]])
    out = np.empty(n_boot, dtype=np.float64)
    for b in range(n_boot):
        picked = rng.integers(0, sizes.size, sizes.size)
        n = sizes[picked]
        # every pooled position: its round's start + a uniform draw within that round
        starts, lens = np.repeat(offsets[picked], n), np.repeat(n, n)
        idx = starts + (rng.random(int(n.sum())) * lens).astype(np.int64)
        out[b] = np.median(x[idx])
    return out


def ci_of_median(rounds: Sequence[np.ndarray], *, seed: int, n_boot: int,
                 level: float = 0.95) -> tuple[float, float]:
    medians = hierarchical_medians(rounds, np.random.default_rng(seed), n_boot)
    tail = (1.0 - level) / 2.0 * 100.0
    low, high = np.percentile(medians, [tail, 100.0 - tail])
    return float(low), float(high)


# -- tests over rounds ---------------------------------------------------------------------
def min_paired_rounds(alpha: float) -> int:
    """Fewest rounds whose exact two-sided signed-rank test can reach p < alpha."""
    return next(n for n in range(1, 64) if 2.0 * 0.5 ** n < alpha)


def can_judge_unpaired(n_a: int, n_b: int, alpha: float, sides: int = 2) -> bool:
    """Whether the exact Mann-Whitney test of n_a vs n_b rounds can reach p < alpha at all
    (its smallest p is sides / C(n_a + n_b, n_a))."""
    return n_a > 0 and n_b > 0 and sides / math.comb(n_a + n_b, n_a) < alpha


@dataclass(frozen=True)
class RoundTest:
    """The outcome of a test over rounds: `ratio` is B relative to A (< 1: B faster)."""

    n_a: int
    n_b: int
    ratio: float | None
    ci_low: float | None
    ci_high: float | None
    p_value: float | None
    judged: bool
    test: str

    def significant(self, alpha: float) -> bool:
        return self.judged and self.p_value is not None and self.p_value < alpha

    def direction(self) -> int:
        """+1 when B is slower, -1 when faster, 0 when equal or unknown."""
        if self.ratio is None or self.ratio == 1.0:
            return 0
        return 1 if self.ratio > 1.0 else -1


def _percentiles(values: np.ndarray) -> tuple[float, float]:
    low, high = np.percentile(values, [2.5, 97.5])
    return float(low), float(high)


def paired_test(a: Sequence[float], b: Sequence[float], *, alpha: float = 0.05,
                seed: int = 0, n_boot: int = 2000) -> RoundTest:
    """Round medians of two keys that ran in the same rounds, aligned by round."""
    ma, mb = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    if ma.size != mb.size:
        raise ValueError(f"paired rounds differ in number: {ma.size} vs {mb.size}")
    keep = (ma > 0) & (mb > 0)
    ma, mb = ma[keep], mb[keep]
    n = int(ma.size)
    if n == 0:
        return RoundTest(0, 0, None, None, None, None, False, PAIRED_TEST)
    ratios = mb / ma
    ratio = float(np.median(ratios))
    rng = np.random.default_rng(seed)
    boot = np.median(ratios[rng.integers(0, n, size=(n_boot, n))], axis=1)
    low, high = _percentiles(boot)
    judged = n >= min_paired_rounds(alpha)
    p = None
    if judged:
        logs = np.log(ratios)
        p = 1.0 if not np.any(logs) else float(
            wilcoxon(logs, alternative="two-sided", method="auto").pvalue)
    return RoundTest(n, n, ratio, low, high, p, judged, PAIRED_TEST)


def unpaired_test(a: Sequence[float], b: Sequence[float], *, alpha: float = 0.05,
                  alternative: str = "two-sided") -> RoundTest:
    """Per-round values of two runs; `alternative` "greater" asks whether B is larger."""
    va, vb = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    sides = 2 if alternative == "two-sided" else 1
    judged = can_judge_unpaired(va.size, vb.size, alpha, sides)
    p = None
    if judged:
        method = "exact" if va.size + vb.size <= 40 else "auto"
        p = float(mannwhitneyu(vb, va, alternative=alternative, method=method).pvalue)
        p = 1.0 if math.isnan(p) else p
    return RoundTest(int(va.size), int(vb.size), None, None, None, p, judged, UNPAIRED_TEST)


def records_rounds(records: Sequence[Mapping[str, Any]]) -> list[np.ndarray]:
    """The rounds of every record of one configuration, records in order (each record's
    `samples_ms` split by its `rounds.sizes`; a record without sizes is one round)."""
    return [r for rec in records if rec.get("samples_ms")
            for r in split_rounds(rec["samples_ms"], record_sizes(rec))]

