"""The rule a quantised model's outputs are judged by against ORT's run of the SAME file.

Two int8 runtimes requantise activations with their own rounding (u8 vs s8, per-tensor
scales computed over slightly different values), so element-wise tolerances reject correct
routes. The statistic is the **per-token cosine**: for every token (row of the last axis of
each output) the cosine between the route's vector and the reference's; the rule bounds its
minimum and its mean. Bounds (int8: min >= 0.90, mean >= 0.99; int4: min >= 0.75,
mean >= 0.90) follow the note in issue #11: a correct int8 model with trained weights can
reach a per-token cosine of ~0.93 against fp32, and routes of the same file sit well inside
that; a wrong kernel (transposed weights, dropped bias, garbage) gives a mean far below 0.9.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from farm.bench.accuracy import Accuracy, tolerance_for

BOUNDS: dict[str, tuple[float, float]] = {"int8": (0.90, 0.99), "int4": (0.75, 0.90)}
STATISTIC = "per-token cosine"


def per_token_cosine(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    x = a.astype(np.float64).reshape(-1, a.shape[-1] if a.ndim else 1)
    y = b.astype(np.float64).reshape(-1, b.shape[-1] if b.ndim else 1)
    num = (x * y).sum(axis=1)
    den = np.linalg.norm(x, axis=1) * np.linalg.norm(y, axis=1)
    same = np.isclose(den, 0.0)
    return np.where(same, 1.0, num / np.where(same, 1.0, den))


def compare_quantised(candidate: Mapping[str, Any], reference: Mapping[str, Any], variant: str,
                      *, reference_label: str) -> Accuracy:
    family = variant.split("-", 1)[0]
    lo_min, lo_mean = BOUNDS.get(family, BOUNDS["int8"])
    atol, rtol = tolerance_for(variant)
    problems: list[str] = []
    worst_min, worst_mean, max_abs, worst = 1.0, 1.0, 0.0, None
    if set(candidate) != set(reference):
        problems.append(f"output names differ: {sorted(candidate)} vs {sorted(reference)}")
    for name in sorted(set(candidate) & set(reference)):
        a, b = np.asarray(candidate[name]), np.asarray(reference[name])
        if a.shape != b.shape:
            problems.append(f"{name}: shape {a.shape} vs reference {b.shape}")
            continue
        if not (np.isfinite(a).all() and np.isfinite(b).all()):
            problems.append(f"{name}: non-finite values")
            continue
        cos = per_token_cosine(a, b)
        mn, mean = float(cos.min()), float(cos.mean())
        diff = float(np.abs(a.astype(np.float64) - b).max()) if a.size else 0.0
        if diff >= max_abs:
            max_abs, worst = diff, name
        worst_min, worst_mean = min(worst_min, mn), min(worst_mean, mean)
        if mn < lo_min or mean < lo_mean:
            problems.append(f"{name}: {STATISTIC} min {mn:.4f} (limit {lo_min}), mean "
                            f"{mean:.4f} (limit {lo_mean})")
    detail = "; ".join(problems) or (
        f"{STATISTIC} min {worst_min:.4f} >= {lo_min}, mean {worst_mean:.4f} >= {lo_mean} "
        f"(max abs diff {max_abs:.3g})")
    return Accuracy(ok=not problems, variant=variant, atol=atol, rtol=rtol,
                    max_abs_diff=max_abs, max_rel_diff=None, worst_output=worst,
                    reference=reference_label, detail=detail, cosine=worst_min,
                    rule=f"quantized-same-file: {STATISTIC} min/mean")
