"""Output comparison between routes (and against the fp32 reference), per-dtype tolerance.

Contract: `compare_outputs(candidate, reference, dtype_variant)` -> `Accuracy`.
Both sides are either one array or a mapping {output name: array}; a mapping must have
the same names on both sides. An element passes when

    |candidate - reference| <= atol + rtol * |reference|        (numpy.allclose rule)

with (atol, rtol) chosen by the model variant (`TOLERANCES`). Why these numbers:

* fp32 (1e-3, 1e-3): routes differ only in accumulation order, fused kernels and
  approximate erf/exp; encoder outputs of order 1 agree to ~1e-5..1e-4 in practice.
* int8-dynamic / int8-qdq (5e-2, 5e-2): runtimes requantize activations with their own
  rounding (and u8 vs s8 choices); one LSB of an 8-bit scale is ~0.4-1% of the activation
  range and it compounds over layers.
* int4 (1e-1, 1e-1): 4-bit block weights leave ~16x coarser steps than int8.

Against the fp32 reference, a quantized variant is NOT held to an element-wise rule: its
error is the model's quantization error, not a route bug, and a few outliers carry the
maximum (measured on the generated encoders: tiny int8-qdq max 0.47 with cosine 0.9994;
mobilebert int4 max 1.41 with cosine 0.90). With `against_fp32=True` and a quantized
variant the check is a sanity bound on the whole tensor instead: relative RMS error
||a - b|| / ||b|| <= `QUANT_REL_RMS` and cosine similarity >= `QUANT_MIN_COSINE`, which
still catches a wrong or garbage output. Routes running the SAME quantized model are
compared element-wise with the table above.

`max_rel_diff` is taken over elements whose |reference| > atol only: near zero a relative
difference is meaningless and the absolute term of the rule governs. Any NaN/Inf on
either side fails the comparison and is counted in `detail`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

# variant (or its family before the first "-") -> (atol, rtol)
TOLERANCES: dict[str, tuple[float, float]] = {
    "fp32": (1e-3, 1e-3),
    "int8": (5e-2, 5e-2),
    "int8-dynamic": (5e-2, 5e-2),
    "int8-qdq": (5e-2, 5e-2),
    "int4": (1e-1, 1e-1),
}


# quantized family -> bound against the fp32 reference (see module docstring)
QUANT_REL_RMS: dict[str, float] = {"int8": 0.15, "int4": 0.6}
QUANT_MIN_COSINE: dict[str, float] = {"int8": 0.99, "int4": 0.8}


@dataclass(frozen=True)
class Accuracy:
    """Result of one output comparison; `as_json()` is the record's `accuracy` field."""

    ok: bool
    variant: str
    atol: float
    rtol: float
    max_abs_diff: float | None
    max_rel_diff: float | None
    worst_output: str | None
    reference: str | None
    detail: str
    rel_rms: float | None = None
    cosine: float | None = None
    rule: str = "elementwise"

    def as_json(self) -> dict[str, Any]:
        return asdict(self)


def tolerance_for(dtype_variant: str) -> tuple[float, float]:
    """(atol, rtol) for a model variant; raises ValueError for an unknown variant."""
    if dtype_variant in TOLERANCES:
        return TOLERANCES[dtype_variant]
    family = dtype_variant.split("-", 1)[0]
    if family in TOLERANCES:
        return TOLERANCES[family]
    raise ValueError(
        f"no output tolerance for model variant {dtype_variant!r}; "
        f"known: {', '.join(sorted(TOLERANCES))}"
    )


def _as_mapping(outputs: Any) -> dict[str, np.ndarray]:
    if isinstance(outputs, Mapping):
        return {str(k): np.asarray(v) for k, v in outputs.items()}
    return {"output": np.asarray(outputs)}


def compare_outputs(
    a: Any, b: Any, dtype_variant: str, *, reference: str | None = None,
    against_fp32: bool = False,
) -> Accuracy:
    """Compare candidate outputs `a` with reference outputs `b` (see module docstring).

    `reference` names what `b` came from (e.g. "ort fp32") and is stored in the result.
    """
    atol, rtol = tolerance_for(dtype_variant)
    family = dtype_variant.split("-", 1)[0]
    quant_rule = against_fp32 and family in QUANT_REL_RMS
    cand, ref = _as_mapping(a), _as_mapping(b)
    worst_rms: float | None = None
    worst_cos: float | None = None
    problems: list[str] = []
    if set(cand) != set(ref):
        problems.append(
            f"output names differ: {sorted(cand)} vs reference {sorted(ref)}"
        )
    max_abs: float | None = None
    max_rel: float | None = None
    worst: str | None = None
    for name in sorted(set(cand) & set(ref)):
        x = cand[name].astype(np.float64, copy=False)
        y = ref[name].astype(np.float64, copy=False)
        if x.shape != y.shape:
            problems.append(f"{name}: shape {x.shape} vs reference {y.shape}")
            continue
        finite = np.isfinite(x) & np.isfinite(y)
        bad = int(finite.size - np.count_nonzero(finite))
        if bad:
            problems.append(f"{name}: {bad} non-finite value(s)")
        diff = np.abs(x[finite] - y[finite])
        if diff.size == 0:
            continue
        absref = np.abs(y[finite])
        norm = float(np.linalg.norm(y[finite])) or 1.0
        rms = float(np.linalg.norm(diff)) / norm
        denom = float(np.linalg.norm(x[finite])) * norm
        cos = float(np.dot(x[finite], y[finite]) / denom) if denom else 1.0
        worst_rms = rms if worst_rms is None else max(worst_rms, rms)
        worst_cos = cos if worst_cos is None else min(worst_cos, cos)
        over = diff > atol + rtol * absref
        if quant_rule:
            if rms > QUANT_REL_RMS[family] or cos < QUANT_MIN_COSINE[family]:
                problems.append(
                    f"{name}: relative RMS error {rms:.3g} (limit {QUANT_REL_RMS[family]:g}), "
                    f"cosine {cos:.4f} (limit {QUANT_MIN_COSINE[family]:g}) against fp32")
        elif np.any(over):
            problems.append(
                f"{name}: {int(np.count_nonzero(over))} of {diff.size} element(s) "
                f"beyond atol={atol:g} + rtol={rtol:g}*|ref|"
            )
        tensor_abs = float(diff.max())
        if max_abs is None or tensor_abs > max_abs:
            max_abs, worst = tensor_abs, name
        sizable = absref > atol
        if np.any(sizable):
            tensor_rel = float((diff[sizable] / absref[sizable]).max())
            max_rel = tensor_rel if max_rel is None else max(max_rel, tensor_rel)
    ok = not problems
    if ok and quant_rule:
        detail = (f"quantization error vs fp32 within bounds: relative RMS {worst_rms:.3g} "
                  f"<= {QUANT_REL_RMS[family]:g}, cosine {worst_cos:.4f}")
    elif ok:
        detail = f"within atol={atol:g}, rtol={rtol:g}"
        if max_abs is not None:
            detail += f" (max abs diff {max_abs:.3g})"
    else:
        detail = "; ".join(problems)
    return Accuracy(
        ok=ok, variant=dtype_variant, atol=atol, rtol=rtol, max_abs_diff=max_abs,
        max_rel_diff=max_rel, worst_output=worst, reference=reference, detail=detail,
        rel_rms=worst_rms, cosine=worst_cos,
        rule="quantized-vs-fp32" if quant_rule else "elementwise",
    )
