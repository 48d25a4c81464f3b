"""Statistics of one measurement, drift between two device states, and route order.

Contract (host side, numpy allowed):

* `summarize(samples_ms, sizes=None, method=None)` -> `Summary`: n, median, p90, p99,
  mean, sample stddev (ddof=1; 0.0 when n == 1), CV = stddev / mean, min, max, the median
  of each round (`sizes`: samples per round, in order) and a 95% confidence interval of
  the MEDIAN by a seeded percentile bootstrap, named by `method`
  (`farm.results.rounds`): by default the two-level bootstrap over rounds then samples
  when there are several rounds (rounds are the replicates; samples of one round are
  not independent), the plain bootstrap of the samples for one round, and for
  `METHOD_LEGACY` (records stored before rounds were the unit) the bootstrap of the
  pooled samples. Percentiles (median, p90, p99 and the CI ends) use numpy's default
  "linear" method (Hyndman & Fan type 7: position (n - 1) * q / 100 in the sorted
  samples, linear interpolation between the two neighbours). The same seed, samples and
  sizes always give the same CI.
* `record_stats(samples_ms, seed, n_boot, sizes, method)` -> the record fields (`n`,
  `median_ms`, ..., `ci95_high_ms`, `round_medians_ms`, `ci_method`); all None when there
  are no samples. The store uses it to fill in and to re-check records, so the numbers in
  a record are always recomputable from its `samples_ms` and `rounds.sizes` with the seed
  and n_boot of its `policy` (defaults 0 and 2000) and its `ci_method`.
* `drift_flags(state_before, state_after)` -> human-readable flags (see DEVICE STATE).
* `interleaved_order(routes, repeats, seed)` -> a seeded, shuffled interleaving.

DEVICE STATE (what the agent reads before and after every route; any key may be absent
or empty when the device does not expose it, e.g. containers or qemu-user):

    {"governor":  {"cpu0": "performance", ...},   # scaling_governor per CPU
     "freq_khz":  {"cpu0": 1800000, ...},         # scaling_cur_freq per CPU, kHz
     "thermal_c": {"thermal_zone0": 41.5, ...},   # thermal zone temperature, Celsius
     "load":      [0.52, 0.40, 0.33]}             # /proc/loadavg 1, 5, 15 minutes

Output comparison (`compare_outputs`) lives in `farm.bench.accuracy` (the recorder judges
outputs; the store only keeps the verdict).
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable, Hashable, Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any, TypeVar

import numpy as np

from farm.results.rounds import METHOD_LEGACY, ci_method, ci_of_median, split_rounds

__all__ = [
    "DEFAULT_N_BOOT",
    "DEFAULT_SEED",
    "STAT_FIELDS",
    "Summary",
    "bootstrap_ci",
    "bootstrap_medians",
    "drift_flags",
    "interleaved_order",
    "record_stats",
    "summarize",
]

DEFAULT_SEED = 0
DEFAULT_N_BOOT = 2000
PERCENTILE_METHOD = "linear"  # numpy default; named so the docs and the code agree

# Record fields produced by `record_stats`, in schema order.
STAT_FIELDS: tuple[str, ...] = (
    "n", "median_ms", "p90_ms", "p99_ms", "mean_ms", "stddev_ms", "cv",
    "min_ms", "max_ms", "ci95_low_ms", "ci95_high_ms", "round_medians_ms", "ci_method",
)

# Bound the memory of one bootstrap chunk (indices * 8 bytes); the chunking depends on
# n only, so the result is the same on every machine.
_BOOT_CHUNK_ELEMS = 1 << 20

T = TypeVar("T", bound=Hashable)


@dataclass(frozen=True)
class Summary:
    """Statistics of one list of steady-state samples, all in milliseconds."""

    n: int
    median: float
    p90: float
    p99: float
    mean: float
    stddev: float
    cv: float
    min: float
    max: float
    ci95_low: float
    ci95_high: float
    round_medians: tuple[float, ...] = ()
    method: str = METHOD_LEGACY

    @property
    def rounds(self) -> int:
        return len(self.round_medians)

    def as_record_fields(self) -> dict[str, Any]:
        """The record fields (`median_ms`, ...) for this summary."""
        d = asdict(self)
        return {
            "n": d["n"], "median_ms": d["median"], "p90_ms": d["p90"], "p99_ms": d["p99"],
            "mean_ms": d["mean"], "stddev_ms": d["stddev"], "cv": d["cv"],
            "min_ms": d["min"], "max_ms": d["max"],
            "ci95_low_ms": d["ci95_low"], "ci95_high_ms": d["ci95_high"],
            "round_medians_ms": list(self.round_medians), "ci_method": self.method,
        }


def _as_samples(samples_ms: Sequence[float]) -> np.ndarray:
    x = np.asarray(samples_ms, dtype=np.float64)
    if x.ndim != 1 or x.size == 0:
        raise ValueError("samples_ms must be a non-empty list of numbers")
    if not np.all(np.isfinite(x)) or np.any(x < 0):
        raise ValueError("samples_ms must be finite, non-negative milliseconds")
    return x


def bootstrap_ci(
    samples_ms: Sequence[float], *, seed: int = DEFAULT_SEED, n_boot: int = DEFAULT_N_BOOT,
    level: float = 0.95,
) -> tuple[float, float]:
    """Percentile-bootstrap CI of the median: resample with replacement `n_boot` times
    (numpy PCG64 seeded with `seed`), take each resample's median, and return the
    (1-level)/2 and (1+level)/2 percentiles of those medians."""
    medians = bootstrap_medians(samples_ms, np.random.default_rng(seed), n_boot)
    tail = (1.0 - level) / 2.0 * 100.0
    low, high = np.percentile(medians, [tail, 100.0 - tail], method=PERCENTILE_METHOD)
    return float(low), float(high)


def bootstrap_medians(
    samples_ms: Sequence[float], rng: np.random.Generator, n_boot: int = DEFAULT_N_BOOT,
) -> np.ndarray:
    """Medians of `n_boot` resamples (with replacement) drawn from `rng`."""
    x = _as_samples(samples_ms)
    if n_boot < 1:
        raise ValueError("n_boot must be at least 1")
    n = x.size
    rows = max(1, _BOOT_CHUNK_ELEMS // n)
    out = np.empty(n_boot, dtype=np.float64)
    for start in range(0, n_boot, rows):
        stop = min(n_boot, start + rows)
        idx = rng.integers(0, n, size=(stop - start, n))
        out[start:stop] = np.median(x[idx], axis=1)
    return out


def summarize(
    samples_ms: Sequence[float], *, seed: int = DEFAULT_SEED, n_boot: int = DEFAULT_N_BOOT,
    sizes: Sequence[int] | None = None, method: str | None = None,
) -> Summary:
    """Summarize steady-state samples (ms) of rounds of `sizes` samples each (None: one
    round). Raises ValueError on an empty or bad list."""
    x = _as_samples(samples_ms)
    rounds = split_rounds(x, sizes)
    method = method or ci_method(len(rounds))
    median, p90, p99 = np.percentile(x, [50.0, 90.0, 99.0], method=PERCENTILE_METHOD)
    mean = float(np.mean(x))
    stddev = float(np.std(x, ddof=1)) if x.size > 1 else 0.0
    cv = stddev / mean if mean > 0 else 0.0
    if len(rounds) > 1 and method != METHOD_LEGACY:
        low, high = ci_of_median(rounds, seed=seed, n_boot=n_boot)
    else:  # one round, or a record stored before rounds were the unit
        low, high = bootstrap_ci(x, seed=seed, n_boot=n_boot)
    return Summary(
        n=int(x.size), median=float(median), p90=float(p90), p99=float(p99), mean=mean,
        stddev=stddev, cv=cv, min=float(x.min()), max=float(x.max()),
        ci95_low=low, ci95_high=high,
        round_medians=tuple(float(np.median(r)) for r in rounds), method=method,
    )


def record_stats(
    samples_ms: Sequence[float] | None, *, seed: int = DEFAULT_SEED,
    n_boot: int = DEFAULT_N_BOOT, sizes: Sequence[int] | None = None,
    method: str | None = None,
) -> dict[str, Any]:
    """The statistics fields of a record; every field None when there are no samples. A
    legacy record (`METHOD_LEGACY`) keeps no round medians or method: it had none."""
    if not samples_ms:
        return dict.fromkeys(STAT_FIELDS)
    out = summarize(samples_ms, seed=seed, n_boot=n_boot, sizes=sizes,
                    method=method).as_record_fields()
    if method == METHOD_LEGACY:
        out.update(round_medians_ms=None, ci_method=None)
    return out


def _num(value: Any) -> float | None:
    try:
        out = float(value)
    except (TypeError, ValueError):
        return None
    return out if math.isfinite(out) else None


def drift_flags(
    state_before: Mapping[str, Any] | None, state_after: Mapping[str, Any] | None, *,
    freq_tol: float = 0.05, temp_tol_c: float = 5.0,
) -> list[str]:
    """Flags for what changed on the device during a route (empty list: no drift seen).

    Flagged: a governor change; a CPU frequency that moved by more than `freq_tol`
    (relative); a thermal zone that warmed or cooled by more than `temp_tol_c`; a CPU or
    zone present on one side only (hot-plug, a zone that failed to read). Load is kept
    in the record but not flagged: the route's own threads raise it, so a rise is expected.
    A missing state (None) on either side yields one flag saying so.
    """
    if not state_before or not state_after:
        side = "before" if not state_before else "after"
        return [f"state: device state {side} the route was not read; drift unknown"]
    flags: list[str] = []
    gov_a = state_before.get("governor") or {}
    gov_b = state_after.get("governor") or {}
    for cpu in sorted(set(gov_a) & set(gov_b)):
        if gov_a[cpu] != gov_b[cpu]:
            flags.append(f"governor: {cpu} {gov_a[cpu]} -> {gov_b[cpu]}")
    flags += _numeric_drift(
        "freq", state_before.get("freq_khz") or {}, state_after.get("freq_khz") or {},
        lambda a, b: a > 0 and abs(b - a) / a > freq_tol,
        lambda cpu, a, b: f"freq: {cpu} {a:.0f} -> {b:.0f} kHz ({(b - a) / a:+.1%})",
    )
    flags += _numeric_drift(
        "thermal", state_before.get("thermal_c") or {}, state_after.get("thermal_c") or {},
        lambda a, b: abs(b - a) > temp_tol_c,
        lambda zone, a, b: f"thermal: {zone} {a:.1f} -> {b:.1f} C ({b - a:+.1f} C)",
    )
    return flags


def _numeric_drift(
    kind: str, before: Mapping[str, Any], after: Mapping[str, Any],
    drifted: Callable[[float, float], bool], describe: Callable[[str, float, float], str],
) -> list[str]:
    flags: list[str] = []
    for key in sorted(set(before) | set(after)):
        if key not in before or key not in after:
            where = "after" if key in after else "before"
            flags.append(f"{kind}: {key} seen only {where} the route")
            continue
        a, b = _num(before[key]), _num(after[key])
        if a is None or b is None:
            flags.append(f"{kind}: {key} unreadable ({before[key]!r} -> {after[key]!r})")
        elif drifted(a, b):
            flags.append(describe(key, a, b))
    return flags


def interleaved_order(routes: Sequence[T], repeats: int, seed: int) -> list[T]:
    """`repeats` rounds; each round runs every route once, in a seeded shuffled order.

    Rounds (block randomisation) keep every route equally exposed to slow drift; the
    shuffle keeps a fixed order from favouring one route. When a round would start
    with the route that ended the previous one, it is rotated so no route runs twice
    back to back (a warm cache would favour it), unless there is only one route.
    """
    if repeats < 0:
        raise ValueError("repeats must be >= 0")
    if len(set(routes)) != len(routes):
        raise ValueError(f"routes must be distinct, got {list(routes)}")
    rng = random.Random(seed)
    order: list[T] = []
    for _ in range(repeats):
        block = list(routes)
        rng.shuffle(block)
        if order and len(block) > 1 and block[0] == order[-1]:
            block = block[1:] + block[:1]
        order.extend(block)
    return order
