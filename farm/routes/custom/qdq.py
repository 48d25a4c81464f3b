"""QDQ weights through the int8 kernels (issue 14).

A static QDQ model (ORT's `quantize_static`, QDQ format) stores each MatMul weight as int8
plus a scale and zero point, read through `DequantizeLinear`. Folding that node to fp32 (what
the plan compiler did before) ran QDQ models at fp32 speed. Here the int8 weight is kept:
`QdqWeight` is a constant that still carries its dequantised fp32 value (so any consumer other
than a MatMul sees an ordinary constant) and the int8 form, which `op_MatMul` hands to the int8
GEMM as [N, K] int8 + per-column scale (`weights.from_matmul_integer`: -128 becomes -127, the
kernels' no-saturation rule). The Q/DQ pair on the activation is dropped (lower_ops) and the
executor quantises the activation per row at run time, as for int8-dynamic models: the
activation scale is the row's own instead of the calibrated per-tensor one, which is at least
as accurate.

Only per-tensor or per-output-column (axis 1 of [K, N]) int8/uint8 weights qualify; any other
layout folds to fp32 as before.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import onnx

from farm.routes.custom import weights as W
from farm.routes.custom.ir import FcWeights
from farm.routes.custom.plan_format import W_I8
from farm.routes.custom.values import Const


@dataclass(frozen=True)
class QdqWeight(Const):
    """A DequantizeLinear of a constant int8 weight: `arr` is the fp32 value."""

    wq: np.ndarray = None  # type: ignore[assignment]  # [K, N] int8/uint8
    scale: np.ndarray = None  # type: ignore[assignment]
    zero_point: np.ndarray | None = None


def qdq_weight(node: onnx.NodeProto, ins: list[Any], folded: np.ndarray) -> QdqWeight | None:
    """The int8 view of a constant DequantizeLinear (its folded value `folded`), or None."""
    if node.op_type != "DequantizeLinear" or len(ins) < 2:
        return None
    wq, scale = ins[0].arr, np.asarray(ins[1].arr, np.float32)
    zp = ins[2].arr if len(ins) > 2 and ins[2] is not None else None
    axis = next((a.i for a in node.attribute if a.name == "axis"), 1)
    per_column = scale.size == 1 or (wq.ndim == 2 and scale.size == wq.shape[1]
                                     and axis in (1, -1))
    if wq.ndim != 2 or wq.dtype not in (np.int8, np.uint8) or not per_column:
        return None
    if zp is not None and zp.size not in (1, scale.size):
        return None
    return QdqWeight(folded, wq, scale, zp)


def int8_weights(w: QdqWeight, where: str) -> FcWeights:
    """FC weights for the int8 GEMM: [N, K] int8 rows and one scale per output column."""
    return FcWeights(W_I8, *W.from_matmul_integer(w.wq, w.scale, w.zero_point, where))
