"""MatMulNBits (ONNX Runtime's block-quantized weights, the `int4` variant) for TVM.

TVM 0.27's ONNX front-end has no MatMulNBits. Its weights are constants, so the build
dequantises them once: each `com.microsoft.MatMulNBits(A, B, scales[, zero_points, g_idx,
bias])` becomes `MatMul(A, W)` (+ `Add(bias)`) with W an fp32 [K, N] initializer,

    W[k, n] = (q[n, k] - zp[n, k // block_size]) * scales[n, k // block_size]

q unpacked from B's [N, n_blocks, blob] bytes, low bits first (ORT's layout, see the
contrib op's schema); zp defaults to 2^(bits-1) (symmetric) and may be packed uint8 or float.
TVM then schedules and fuses the MatMul like any fp32 one: the result is ORT's fp32-compute
path (accuracy_level 0) of the same weights; the library carries fp32 weights (4-8x the
int4 file), which the record's sizes show.

`dequantized(model)` returns the rewritten model, or None when there is no MatMulNBits
(rewrites.py applies it before TVM imports a file). Errors name the node and what it needs.
"""

from __future__ import annotations

import numpy as np
import onnx
from onnx import helper, numpy_helper

from farm.errors import BuildError

OP = "MatMulNBits"


def _attrs(node: onnx.NodeProto) -> dict[str, int]:
    return {a.name: int(helper.get_attribute_value(a)) for a in node.attribute
            if a.type == onnx.AttributeProto.INT}


def _unpack(packed: np.ndarray, bits: int, count: int) -> np.ndarray:
    """Unsigned `bits`-wide values from bytes along the last axis, low bits first."""
    per_byte = 8 // bits
    shifts = np.arange(per_byte, dtype=np.uint8) * bits
    values = (packed[..., None] >> shifts) & np.uint8((1 << bits) - 1)
    return values.reshape(*packed.shape[:-1], -1)[..., :count]


def dequantize_weight(node: onnx.NodeProto, consts: dict[str, np.ndarray]) -> np.ndarray:
    """The fp32 [K, N] weight one MatMulNBits node multiplies by."""
    attrs = _attrs(node)
    try:
        k, n, bits, block = attrs["K"], attrs["N"], attrs.get("bits", 4), attrs["block_size"]
    except KeyError as exc:
        raise BuildError(f"{OP} node {node.name!r} lacks attribute {exc}") from exc
    if bits not in (2, 4, 8):
        raise BuildError(f"{OP} node {node.name!r}: bits={bits} is not 2, 4 or 8")
    inputs = list(node.input) + [""] * (6 - len(node.input))
    for position in (1, 2, 3):
        if inputs[position] and inputs[position] not in consts:
            raise BuildError(f"{OP} node {node.name!r}: input {inputs[position]!r} is not a "
                             "constant initializer; TVM needs constant weights to dequantise")
    if inputs[4]:
        raise BuildError(f"{OP} node {node.name!r} uses g_idx (act-order), which farm's TVM "
                         "rewrite does not handle", hint="quantize without act-order")
    blocks = (k + block - 1) // block
    q = _unpack(consts[inputs[1]].reshape(n, blocks, -1), bits, block).astype(np.float32)
    scales = consts[inputs[2]].astype(np.float32).reshape(n, blocks)
    if inputs[3]:
        zp_raw = consts[inputs[3]]
        if zp_raw.dtype == np.uint8:  # packed like B, blocks of one row padded to whole bytes
            per_row = (blocks * bits + 7) // 8
            zp = _unpack(zp_raw.reshape(n, per_row), bits, blocks).astype(np.float32)
        else:
            zp = zp_raw.astype(np.float32).reshape(n, blocks)
    else:
        zp = np.full((n, blocks), float(1 << (bits - 1)), np.float32)
    w = (q - zp[..., None]) * scales[..., None]  # [N, blocks, block]
    return np.ascontiguousarray(w.reshape(n, blocks * block)[:, :k].T)


def dequantized(model: onnx.ModelProto) -> onnx.ModelProto | None:
    """`model` with every MatMulNBits replaced by MatMul (+ Add) on fp32 weights."""
    nodes = [nd for nd in model.graph.node if nd.op_type == OP]
    if not nodes:
        return None
    out = onnx.ModelProto()
    out.CopyFrom(model)
    graph = out.graph
    consts = {t.name: numpy_helper.to_array(t) for t in graph.initializer}
    used: set[str] = set()
    rewritten = []
    for node in graph.node:
        if node.op_type != OP:
            rewritten.append(node)
            continue
        weight = dequantize_weight(node, consts)
        name = f"{node.name or node.output[0]}_dequantized_weight"
        graph.initializer.append(numpy_helper.from_array(weight, name))
        used.update(i for i in node.input[1:] if i)
        bias = node.input[5] if len(node.input) > 5 and node.input[5] else None
        product = f"{node.output[0]}_nobias" if bias else node.output[0]
        rewritten.append(helper.make_node("MatMul", [node.input[0], name], [product],
                                          name=f"{node.name}_matmul"))
        if bias:
            used.discard(bias)
            rewritten.append(helper.make_node("Add", [product, bias], [node.output[0]],
                                              name=f"{node.name}_bias"))
    del graph.node[:]
    graph.node.extend(rewritten)
    still_read = {i for nd in graph.node for i in nd.input}
    keep = [t for t in graph.initializer if t.name not in used or t.name in still_read]
    del graph.initializer[:]
    graph.initializer.extend(keep)
    if not any(nd.domain == "com.microsoft" for nd in graph.node):
        ops = [o for o in out.opset_import if o.domain != "com.microsoft"]
        del out.opset_import[:]
        out.opset_import.extend(ops)
    return out

