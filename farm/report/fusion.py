"""Fusion effect per route: the same configuration measured with fusion off and on.

Contract: `fusion_effects(configs, seed, n_boot)` -> one `FusionEffect` per fusion pair and
block. A pair is two measured configurations with the same device, route, model, variant,
threads and other config flags, one with `fusion_of(flags) is False` (TVM/custom
`{"fusion": false}`, ORT `graph_optimization: "disable"`) and one with True.

Blocks and their time per inference:
* `end-to-end`: the median of the pooled steady-state `samples_ms`;
* `attention`: the `attention` op category of the per-op profile;
* `FFN`: the `fc` + `gelu` categories. `fc` also holds the attention projections
  (Q/K/V/out) on routes that keep them as separate products, and ORT's fused `Attention`
  node absorbs the Q/K/V projection when on: compare the blocks with that in mind; the
  end-to-end row is the one free of any attribution.

Reduction = (t_off - t_on) / t_off × 100 %: positive means fusion made it faster.

End-to-end is judged over ROUNDS, paired: fusion off and on ran in the same rounds of
one bench (`Config.rounds`, keyed by run and round), so each shared round gives a ratio
on/off of the round medians, and the machine's state of that round cancels out. The
reduction is 1 - the median ratio (times 100), its 95 % CI a seeded paired bootstrap of
the rounds, and `verdict` Wilcoxon's signed-rank test on the log ratios
(`farm.results.rounds.paired_test`): "significant" when p < alpha, "not significant",
or "not enough rounds to judge" (fewer than 6 shared rounds at alpha 0.05); a pair that
shares no round (measured in different runs) is "not judged: no shared rounds".

Blocks come from the per-op profile, which one round produces per key: their interval is
a seeded percentile bootstrap (numpy PCG64, 95 %), each side resampled independently, of
the per-profile-run category times (`ops.category_runs`) when both sides kept two or more
(method "bootstrap: profile runs"), else scaled from the end-to-end interval (block x
ratio / median ratio, "bootstrap: e2e-scaled"). Their verdict is "not judged: one profile
per key": profile runs of one round are not replicates of the machine's state, so the
blocks say where the time went, and the end-to-end row says whether fusion helped.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from farm.report.configs import Config
from farm.results.rounds import NOT_ENOUGH, RoundTest, paired_test
from farm.results.stats import DEFAULT_N_BOOT, DEFAULT_SEED

BLOCKS: dict[str, tuple[str, ...]] = {"attention": ("attention",), "FFN": ("fc", "gelu")}
E2E = "end-to-end"
METHOD_E2E = "paired rounds: bootstrap of round ratios; Wilcoxon signed-rank"
METHOD_RUNS = "bootstrap: profile runs"
METHOD_SCALED = "bootstrap: e2e-scaled"
ALPHA = 0.05
SIGNIFICANT, NOT_SIGNIFICANT = "significant", "not significant"
NO_SHARED = "not judged: no shared rounds"
BLOCK_VERDICT = "not judged: one profile per key"


@dataclass(frozen=True)
class FusionEffect:
    device: str
    route: str
    model: str
    variant: str
    threads: int | None
    block: str
    off_label: str
    on_label: str
    off_ms: float
    on_ms: float
    reduction_pct: float
    ci_low_pct: float
    ci_high_pct: float
    method: str
    verdict: str
    rounds: int = 0
    p_value: float | None = None

    @property
    def significant(self) -> bool:
        return self.verdict == SIGNIFICANT

    @property
    def sign(self) -> str:
        """"faster" / "slower" with fusion on when significant, else the verdict."""
        if not self.significant:
            return self.verdict
        return "faster" if self.reduction_pct > 0 else "slower"


def fusion_pairs(configs: Sequence[Config]) -> list[tuple[Config, Config]]:
    """(off, on) pairs of measured configurations; see the module docstring."""
    offs = {c.block_key: c for c in configs if c.fusion is False and c.measured}
    pairs = []
    for on in configs:
        if on.fusion is True and on.measured and on.block_key in offs:
            pairs.append((offs[on.block_key], on))
    return pairs


def block_ms(config: Config, block: str) -> float | None:
    cats = config.categories_ms()
    if cats is None:
        return None
    return sum(cats[c] for c in BLOCKS[block])


def _reduction(off: np.ndarray | float, on: np.ndarray | float) -> np.ndarray:
    off_a, on_a = np.asarray(off, dtype=float), np.asarray(on, dtype=float)
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(off_a > 0, (off_a - on_a) / off_a * 100.0, np.nan)


def _interval(values: np.ndarray) -> tuple[float, float]:
    finite = values[np.isfinite(values)]
    if finite.size == 0:
        return float("nan"), float("nan")
    low, high = np.percentile(finite, [2.5, 97.5])
    return float(low), float(high)


def _run_means(runs: list[dict[str, float]], cats: tuple[str, ...], rng: np.random.Generator,
               n_boot: int) -> np.ndarray:
    per_run = np.array([sum(run[c] for c in cats) for run in runs])
    idx = rng.integers(0, per_run.size, size=(n_boot, per_run.size))
    return per_run[idx].mean(axis=1)


def paired_rounds(off: Config, on: Config, seed: int, n_boot: int) -> RoundTest | None:
    """The paired test of on vs off over the rounds both ran in; None when none shared."""
    r_off, r_on = off.rounds(), on.rounds()
    shared = sorted(set(r_off) & set(r_on))
    if not shared:
        return None
    return paired_test([r_off[k] for k in shared], [r_on[k] for k in shared], alpha=ALPHA,
                       seed=seed, n_boot=n_boot)


def round_verdict(test: RoundTest | None) -> str:
    if test is None:
        return NO_SHARED
    if not test.judged:
        return NOT_ENOUGH
    return SIGNIFICANT if test.significant(ALPHA) else NOT_SIGNIFICANT


def _ratio_pct(ratio: float | None) -> float:
    return float("nan") if ratio is None else (1.0 - ratio) * 100.0


def _e2e(off: Config, on: Config, test: RoundTest | None) -> FusionEffect:
    med_off, med_on = off.summary.median, on.summary.median  # type: ignore[union-attr]
    if test is None or test.ratio is None:  # no shared round: the pooled medians, unjudged
        reduction, low, high, n, p = (float(_reduction(med_off, med_on)), float("nan"),
                                      float("nan"), 0, None)
    else:
        # the CI of the ratio flips into the CI of the reduction (1 - ratio)
        reduction, n, p = _ratio_pct(test.ratio), test.n_a, test.p_value
        low, high = _ratio_pct(test.ci_high), _ratio_pct(test.ci_low)
    return FusionEffect(
        device=on.device, route=on.route, model=on.model, variant=on.variant,
        threads=on.threads, block=E2E, off_label=off.label, on_label=on.label,
        off_ms=float(med_off), on_ms=float(med_on), reduction_pct=reduction,
        ci_low_pct=low, ci_high_pct=high, method=METHOD_E2E, verdict=round_verdict(test),
        rounds=n, p_value=p)


def _block(off: Config, on: Config, block: str, test: RoundTest | None,
           rng: np.random.Generator, n_boot: int) -> FusionEffect | None:
    t_off, t_on = block_ms(off, block), block_ms(on, block)
    if t_off is None or t_on is None:
        return None
    runs_off, runs_on = off.category_runs(), on.category_runs()
    if len(runs_off) >= 2 and len(runs_on) >= 2:
        method = METHOD_RUNS
        low, high = _interval(_reduction(_run_means(runs_off, BLOCKS[block], rng, n_boot),
                                         _run_means(runs_on, BLOCKS[block], rng, n_boot)))
    elif test is not None and test.ratio and test.ci_low and test.ci_high:
        # the block's relative uncertainty taken to be the end-to-end ratio's
        method = METHOD_SCALED
        ratio = t_on / t_off if t_off > 0 else float("nan")
        low = _ratio_pct(ratio * test.ci_high / test.ratio)
        high = _ratio_pct(ratio * test.ci_low / test.ratio)
    else:
        method, low, high = METHOD_SCALED, float("nan"), float("nan")
    return FusionEffect(
        device=on.device, route=on.route, model=on.model, variant=on.variant,
        threads=on.threads, block=block, off_label=off.label, on_label=on.label,
        off_ms=float(t_off), on_ms=float(t_on),
        reduction_pct=float(_reduction(t_off, t_on)), ci_low_pct=low, ci_high_pct=high,
        method=method, verdict=BLOCK_VERDICT)


def fusion_effects(configs: Sequence[Config], *, seed: int = DEFAULT_SEED,
                   n_boot: int = DEFAULT_N_BOOT) -> list[FusionEffect]:
    out = []
    for off, on in fusion_pairs(configs):
        rng = np.random.default_rng(seed)  # per pair: a row does not depend on the others
        test = paired_rounds(off, on, seed, n_boot)
        out.append(_e2e(off, on, test))
        for block in BLOCKS:
            effect = _block(off, on, block, test, rng, n_boot)
            if effect is not None:
                out.append(effect)
    return out
