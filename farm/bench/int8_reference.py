"""Which reference judges an int8 bench, and ORT's own deviation from the exact one.

`int8_reference(model_path, feeds, ort_outputs, same_file)` -> `Int8Reference` for an
int8-dynamic or int8-qdq model: the file's exact integer outputs
(`farm.models.exact_int8`), ORT-on-the-host's deviation from them (per-token cosine min and
mean, max abs difference), and the text the record and the report carry (`label`, `why`).

Which one judges validity:
- a pre-quantised file (`same_file`, judged by `quant_rule` against a run of the same file):
  the exact outputs, when the reference evaluator runs the file. ORT is no exact int8 engine
  on x86 without VNNI (its U8S8 GEMM's VPMADDUBSW saturates pairwise int16 sums), so a route
  more exact than ORT there must not be `invalid` for disagreeing with ORT; on other hosts
  ORT is still a runtime with its own requantisation (MobileBERT int8-qdq: max abs 0.16 off
  the file's QDQ arithmetic on an AVX-512 VNNI host), the exact outputs are the file itself.
  When the evaluator cannot run the file (a com.microsoft op), ORT judges and `why` says so,
  and whether ORT saturates on this host.
- a generated variant (fp32 reference): fp32 still judges (the quantisation error is
  bounded against the model it came from: `accuracy.compare_outputs`); the exact outputs
  are kept as information (each route's distance from them, and ORT's).
"""

from __future__ import annotations

import platform
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from farm.bench.quant_rule import per_token_cosine
from farm.inventory.builtin import local_device
from farm.models.exact_int8 import ExactUnavailable, exact_outputs, ort_int8_exact

INT8_VARIANTS = ("int8-dynamic", "int8-qdq")
EXACT_LABEL = "exact integer reference of the same {variant} file (numpy: int32 sums)"


@dataclass(frozen=True)
class Int8Reference:
    exact: dict[str, np.ndarray] | None   # None: the evaluator could not run the file
    judges: bool                          # the exact outputs are the bench's reference
    label: str                            # what judged (the record's accuracy.reference)
    why: str                              # why that one (accuracy.reference_why)
    ort_deviation: dict[str, Any] | None  # ORT on the host against the exact outputs


def deviation(outputs: Mapping[str, Any], exact: Mapping[str, Any]) -> dict[str, Any]:
    """Per-token cosine (min, mean) and max abs difference of `outputs` from `exact`."""
    mins, means, worst = [], [], 0.0
    for name in sorted(set(outputs) & set(exact)):
        a, b = np.asarray(outputs[name], np.float64), np.asarray(exact[name], np.float64)
        if a.shape != b.shape or not a.size:
            continue
        cos = per_token_cosine(a, b)
        mins.append(float(cos.min()))
        means.append(float(cos.mean()))
        worst = max(worst, float(np.abs(a - b).max()))
    return {"cosine_min": min(mins, default=None), "cosine_mean": min(means, default=None),
            "max_abs_diff": worst}


def _host_saturates() -> bool:
    host = local_device()
    return not ort_int8_exact(host.arch, host.features)


def int8_reference(model_path: Path, feeds: Mapping[str, np.ndarray],
                   ort_outputs: Mapping[str, np.ndarray], variant: str,
                   same_file: bool) -> Int8Reference:
    saturates = _host_saturates()
    ort_note = (f"ORT on this host ({platform.machine()} without VNNI) sums int8 products "
                "through saturating int16 pairs (VPMADDUBSW)" if saturates else
                "ORT on this host sums int8 products exactly but requantises in its own way")
    try:
        exact = exact_outputs(model_path, dict(feeds))
    except ExactUnavailable as exc:
        why = f"{exc.message}; ORT on the host judges"
        if saturates:
            why += (f" although it is not exact here ({ort_note}): a route more exact than "
                    "ORT may be judged invalid")
        return Int8Reference(None, False, "", why, None)
    label = EXACT_LABEL.format(variant=variant)
    ort = deviation(ort_outputs, exact)
    if same_file:
        why = (f"the file's own integer arithmetic, independent of any route's kernels; "
               f"{ort_note} (its deviation: ort_host_deviation)")
    else:
        why = ("the fp32 model judges a generated quantised variant (whole-tensor bound); "
               f"the {label} is information ({ort_note})")
    return Int8Reference(exact, same_file, label, why, ort)
