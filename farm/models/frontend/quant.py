"""Detect how a model file is quantised, from its operators.

`detect_quantisation(model) -> variant`: ``int4`` (MatMulNBits), ``int8-dynamic``
(DynamicQuantizeLinear / MatMulInteger / DynamicQuantizeMatMul, as `quantize_dynamic`
writes), ``int8-qdq`` (QuantizeLinear/DequantizeLinear pairs, as `quantize_static` QDQ
writes, or QLinear* ops), else ``fp32``. The variant names are farm's (config.VARIANTS).
"""

from __future__ import annotations

import onnx

_INT4 = {"MatMulNBits", "MatMulBnb4"}
_DYNAMIC = {"DynamicQuantizeLinear", "MatMulInteger", "DynamicQuantizeMatMul",
            "MatMulIntegerToFloat"}
_QDQ = {"QuantizeLinear", "DequantizeLinear", "QLinearMatMul", "QGemm", "QAttention"}


def detect_quantisation(model: onnx.ModelProto) -> str:
    ops = {n.op_type for n in model.graph.node}
    if ops & _INT4:
        return "int4"
    if ops & _DYNAMIC:
        return "int8-dynamic"
    if ops & _QDQ:
        return "int8-qdq"
    return "fp32"
