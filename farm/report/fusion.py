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

Uncertainty: a seeded percentile bootstrap (numpy PCG64, `seed`, `n_boot` resamples, 95 %).
Each side is resampled independently; the reduction is computed per resample and its 2.5th
and 97.5th percentiles are the interval. End-to-end resamples the raw samples and takes the
median. A block resamples the per-profile-run category times (`ops.category_runs`) when both sides
kept at least two runs (method "bootstrap: profile runs"); otherwise the block's relative
uncertainty is taken to be that of the end-to-end median: block_b = block × median_b /
median (method "bootstrap: e2e-scaled"). `significant` means the interval excludes 0.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from farm.report.configs import Config
from farm.results.stats import DEFAULT_N_BOOT, DEFAULT_SEED, bootstrap_medians

BLOCKS: dict[str, tuple[str, ...]] = {"attention": ("attention",), "FFN": ("fc", "gelu")}
E2E = "end-to-end"
METHOD_E2E = "bootstrap: raw samples"
METHOD_RUNS = "bootstrap: profile runs"
METHOD_SCALED = "bootstrap: e2e-scaled"


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

    @property
    def significant(self) -> bool:
        return self.ci_low_pct > 0 or self.ci_high_pct < 0


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


def _effect(off: Config, on: Config, block: str, boots: tuple[np.ndarray, np.ndarray],
            rng: np.random.Generator, n_boot: int) -> FusionEffect | None:
    boot_off, boot_on = boots
    med_off, med_on = off.summary.median, on.summary.median  # type: ignore[union-attr]
    if block == E2E:
        t_off, t_on, method = med_off, med_on, METHOD_E2E
        b_off, b_on = boot_off, boot_on
    else:
        t_off_opt, t_on_opt = block_ms(off, block), block_ms(on, block)
        if t_off_opt is None or t_on_opt is None:
            return None
        t_off, t_on = t_off_opt, t_on_opt
        runs_off, runs_on = off.category_runs(), on.category_runs()
        if len(runs_off) >= 2 and len(runs_on) >= 2:
            method = METHOD_RUNS
            b_off = _run_means(runs_off, BLOCKS[block], rng, n_boot)
            b_on = _run_means(runs_on, BLOCKS[block], rng, n_boot)
        else:
            method = METHOD_SCALED
            b_off = t_off * boot_off / med_off if med_off > 0 else np.full(n_boot, t_off)
            b_on = t_on * boot_on / med_on if med_on > 0 else np.full(n_boot, t_on)
    low, high = _interval(_reduction(b_off, b_on))
    return FusionEffect(
        device=on.device, route=on.route, model=on.model, variant=on.variant,
        threads=on.threads, block=block, off_label=off.label, on_label=on.label,
        off_ms=float(t_off), on_ms=float(t_on),
        reduction_pct=float(_reduction(t_off, t_on)), ci_low_pct=low, ci_high_pct=high,
        method=method,
    )


def fusion_effects(configs: Sequence[Config], *, seed: int = DEFAULT_SEED,
                   n_boot: int = DEFAULT_N_BOOT) -> list[FusionEffect]:
    out = []
    for off, on in fusion_pairs(configs):
        rng = np.random.default_rng(seed)  # per pair: a row does not depend on the others
        # both sides' e2e bootstrap medians serve the e2e row and the e2e-scaled blocks
        boots = (bootstrap_medians(off.samples_ms, rng, n_boot),
                 bootstrap_medians(on.samples_ms, rng, n_boot))
        for block in (E2E, *BLOCKS):
            effect = _effect(off, on, block, boots, rng, n_boot)
            if effect is not None:
                out.append(effect)
    return out
