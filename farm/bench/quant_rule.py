"""The rule a quantised model's outputs are judged by against a run of the SAME file: the
file's exact integer outputs for int8 (farm/bench/int8_reference.py; ORT where they cannot
be computed), ORT's run of it otherwise.

Two int8 runtimes requantise activations with their own rounding (u8 vs s8, per-tensor
scales computed over slightly different values), so element-wise tolerances reject correct
routes. The statistic is the **per-token cosine**: for every token (row of the last axis of
each output) the cosine between the route's vector and the reference's; the rule bounds its
minimum and its mean, per variant.

Bounds derived on TRAINED weights (benchmarks/quant_bounds.py: all-MiniLM-L6-v2, BERT 6x384,
seq 128, in the corpus's opset-14 export, quantised by ORT's tools; generated inputs; per-token
cosine of last_hidden_state against ORT's run of the quantised file):

    variant       exact fp32 route   bias dropped   L0 value Wᵀ   attn-out Wᵀ   bounds
    int8-dynamic  0.800 / 0.938      0.665 / 0.880  0.450 / 0.858  0.067 / 0.375  0.70 / 0.90
    int8-qdq      0.587 / 0.815      0.560 / 0.761  0.411 / 0.763  0.001 / 0.342  0.49 / 0.78
    int4          0.911 / 0.965      0.811 / 0.904  0.447 / 0.881  0.073 / 0.387  0.80 / 0.93
    (min / mean)

A correct route of the file is at most as far from ORT as the exact fp32 model is (a route
that skips the activation quantisation, like custom on QDQ files, measured 0.707 / 0.846 on
int8-qdq; an int8 route sits closer: TVM's integer GEMMs on int8-qdq 0.966 / 0.989, custom
int8-dynamic 0.969 / 0.986), so each bound is the exact model's figure less a margin (~0.1 on
the min, 0.035 on the mean) and rejects the wrong kernels in the table (weight edits of the
fp32 file, trained.BUGS). The int8-qdq margin to a dropped bias is thin (0.761 vs 0.78):
per-tensor QDQ of a trained BERT's activations (outlier channels) costs as much as that bug.
int8-qdq row: the U8S8 file of quantize.QDQ_OPTIONS (QUANTIZER_REVISION 4; the S8S8 file
before it measured 0.594 / 0.815, bias dropped 0.560 / 0.762, L0 value 0.410 / 0.763: the
same grid shifted by 128, so only ORT's arithmetic moved; the bound's min follows the exact
figure down by 0.01). One model, one calibration: other trained encoders may sit lower
(tests/test_quant_bounds.py re-checks this one).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from farm.bench.accuracy import Accuracy, compare_outputs, tolerance_for

# variant -> (min, mean) of the per-token cosine (derivation in the docstring)
BOUNDS: dict[str, tuple[float, float]] = {"int8-dynamic": (0.70, 0.90),
                                          "int8-qdq": (0.49, 0.78), "int4": (0.80, 0.93)}
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
    lo_min, lo_mean = BOUNDS.get(variant, BOUNDS["int8-dynamic"])
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


def judge_against_reference(outputs: Mapping[str, Any], reference: Mapping[str, Any],
                            variant: str, *, same_file: bool, reference_label: str) -> Accuracy:
    """A route's validity, from the reference alone: a quantized model against ORT's run of
    the same pre-quantised file by the per-token cosine rule above, anything else by
    `compare_outputs` against fp32 (element-wise for fp32, whole-tensor for a quantized
    variant of an fp32 reference)."""
    if same_file and variant != "fp32":
        return compare_quantised(outputs, reference, variant, reference_label=reference_label)
    return compare_outputs(outputs, reference, variant, reference=reference_label,
                           against_fp32=True)
