"""Static QDQ MatMuls (`quantize_static`'s QDQ format) as integer GEMMs for TVM.

TVM 0.27's ONNX importer lowers QuantizeLinear/DequantizeLinear to fp32 arithmetic, so a
QDQ file's MatMuls run as fp32 GEMMs on fake-quantised values (mobilebert int8-qdq: 59.9 ms,
fp32 speed, where its int8-dynamic build runs 21 ms on vpdpbusd). Before import, each

    MatMul(DequantizeLinear(QuantizeLinear(x, sx, zx)), DequantizeLinear(Wq, sw, 0))

with per-tensor constant sx, zx, a constant int8 [K, N] weight Wq, sw per tensor or per
output column (axis 1) and a zero weight zero point, becomes

    Mul(Cast(MatMulInteger(QuantizeLinear(x, sx, zu), Wq, zu), float), sx * sw)

the same sum, sum_k sx (q_k - zx) sw w_kn = sx sw sum_k (q_k - zx) w_kn, with the sum exact in
int32 instead of rounded in fp32 (what ORT's QDQ fusion computes too). zu is zx for uint8
activations (ORT's x86 choice, the int8-qdq variant; the file's QuantizeLinear is reused) and
zx + 128 as uint8 for int8 activations (users' S8S8 files): a uint8 QuantizeLinear with zero
point zx + 128 yields exactly the int8 one plus 128, saturation included, so q - zu is
unchanged. `api._u8s8_matmul_integer` then imports the MatMulInteger as a u8 x s8 -> i32
matmul that `api_rules.CpuMatmulVnni` tensorizes with vpdpbusd (`CpuMatmulPmaddwd` with
vpmaddwd on AVX2 without VNNI), as for int8-dynamic.

Anything else keeps TVM's own path (Q/DQ as fp32 ops): activation x activation MatMuls
(attention scores and context), weights that are not constant int8 [K, N], non-zero weight
zero points, per-axis or non-constant activation parameters, blocked quantisation.
A DequantizeLinear or QuantizeLinear left without readers is removed.

`integer_matmuls(model) -> Rewrite | None`: the rewritten model and how many MatMuls were and
were not rewritten; None when the model has no QDQ MatMul.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from farm.models.frontend.graph import Graph

QUANTIZE, DEQUANTIZE = "QuantizeLinear", "DequantizeLinear"
_INT_ATTRS = ("axis", "block_size", "output_dtype", "saturate")


@dataclass(frozen=True)
class Rewrite:
    model: onnx.ModelProto
    rewritten: int  # MatMuls now MatMulInteger
    kept: int       # MatMuls reading a DequantizeLinear that keep TVM's fp32 path


@dataclass(frozen=True)
class _Activation:
    quantize: onnx.NodeProto
    scale: np.float32
    zero: int             # zx
    signed: bool          # int8 activations: zu = zx + 128


def _attrs(node: onnx.NodeProto) -> dict[str, int]:
    return {a.name: int(a.i) for a in node.attribute if a.name in _INT_ATTRS}


def _src(g: Graph, name: str, op: str) -> onnx.NodeProto | None:
    """The ONNX-domain `op` node producing `name` (com.microsoft's Q/DQ take other types)."""
    node = g.src(name, op)
    return node if node is not None and node.domain in ("", "ai.onnx") else None


def _scalar_params(g: Graph, node: onnx.NodeProto) -> tuple[np.float32, np.ndarray] | None:
    """(scale, zero point) of a per-tensor Q or DQ with constant parameters."""
    scale = g.const(node.input[1]) if len(node.input) > 1 else None
    zp_name = node.input[2] if len(node.input) > 2 else ""
    zero = g.const(zp_name) if zp_name else np.array(0, np.uint8)
    if scale is None or zero is None or scale.size != 1 or zero.size != 1:
        return None
    if scale.dtype != np.float32 or not float(scale.reshape(())) > 0:
        return None
    if zero.dtype not in (np.uint8, np.int8) or _attrs(node).get("block_size", 0):
        return None
    return np.float32(scale.reshape(())), zero.reshape(())


def _activation(g: Graph, name: str) -> _Activation | None:
    """The per-tensor QuantizeLinear behind the activation DequantizeLinear producing `name`."""
    dq = _src(g, name, DEQUANTIZE)
    q = _src(g, dq.input[0], QUANTIZE) if dq is not None else None
    if dq is None or q is None:
        return None
    qp, dqp = _scalar_params(g, q), _scalar_params(g, dq)
    if qp is None or dqp is None or qp[0] != dqp[0] or qp[1].dtype != dqp[1].dtype or \
            int(qp[1]) != int(dqp[1]):
        return None
    # without a zero point the output type is output_dtype's (opset 21), uint8 by default
    if (len(q.input) < 3 or not q.input[2]) and \
            _attrs(q).get("output_dtype", 0) not in (0, TensorProto.UINT8):
        return None
    return _Activation(q, qp[0], int(qp[1]), qp[1].dtype == np.int8)


def _weight(g: Graph, name: str) -> tuple[str, np.ndarray] | None:
    """(int8 weight initializer name, fp32 scale: [] or [N]) of a DQ of a constant weight."""
    dq = _src(g, name, DEQUANTIZE)
    if dq is None or dq.input[0] not in g.consts or len(dq.input) < 2:
        return None
    w, scale = g.const(dq.input[0]), g.const(dq.input[1])
    zero = g.const(dq.input[2]) if len(dq.input) > 2 and dq.input[2] else None
    attrs = _attrs(dq)
    if w is None or scale is None or w.dtype != np.int8 or w.ndim != 2 or \
            scale.dtype != np.float32 or attrs.get("block_size", 0):
        return None
    if (len(dq.input) > 2 and dq.input[2] and zero is None) or \
            (zero is not None and (zero.dtype != np.int8 or np.any(zero))):
        return None  # a non-zero weight zero point: the converter's int32 path, not VNNI
    per_column = scale.size == w.shape[1] and attrs.get("axis", 1) in (1, -1)
    if scale.size != 1 and not per_column:
        return None
    return dq.input[0], scale.reshape(()) if scale.size == 1 else scale.reshape(-1)


def integer_matmuls(model: onnx.ModelProto) -> Rewrite | None:
    """`model` with its QDQ MatMuls (constant int8 weights) as MatMulInteger + scale."""
    if not any(n.op_type == DEQUANTIZE for n in model.graph.node):
        return None
    out = onnx.ModelProto()
    out.CopyFrom(model)
    graph = out.graph
    g = Graph(out)
    u8_of: dict[str, tuple[str, str]] = {}  # Q output -> (uint8 activation, its zero point)
    nodes: list[onnx.NodeProto] = []
    rewritten = kept = 0
    for node in graph.node:
        if node.op_type != "MatMul" or node.domain not in ("", "ai.onnx"):
            nodes.append(node)
            continue
        act, weight = _activation(g, node.input[0]), _weight(g, node.input[1])
        if act is None or weight is None:
            kept += int(_src(g, node.input[0], DEQUANTIZE) is not None
                        or _src(g, node.input[1], DEQUANTIZE) is not None)
            nodes.append(node)
            continue
        base = node.name or node.output[0]
        q_out = act.quantize.output[0]
        if q_out not in u8_of:
            u8_of[q_out] = _uint8_activation(g, act, nodes)
        x_u8, zu = u8_of[q_out]
        w_name, sw = weight
        scale = numpy_helper.from_array((act.scale * sw).astype(np.float32), f"{base}_int_scale")
        graph.initializer.append(scale)
        acc, accf = f"{node.output[0]}_int32", f"{node.output[0]}_int32_float"
        nodes += [
            helper.make_node("MatMulInteger", [x_u8, w_name, zu], [acc], name=f"{base}_int"),
            helper.make_node("Cast", [acc], [accf], name=f"{base}_int_cast",
                             to=TensorProto.FLOAT),
            helper.make_node("Mul", [accf, scale.name], [node.output[0]],
                             name=f"{base}_int_scale"),
        ]
        rewritten += 1
    if not rewritten:
        return None
    _replace_nodes(graph, nodes)
    return Rewrite(out, rewritten, kept)


def _uint8_activation(g: Graph, act: _Activation,
                      nodes: list[onnx.NodeProto]) -> tuple[str, str]:
    """(uint8 activation, its scalar zero point) for `act`: the file's own QuantizeLinear when
    it is uint8, else a uint8 one with zero point zx + 128 appended to `nodes`."""
    q = act.quantize
    zp_name = q.input[2] if len(q.input) > 2 else ""
    if not act.signed and zp_name and g.consts[zp_name].ndim == 0:
        return q.output[0], zp_name
    # MatMulInteger's converter takes a scalar zero point only (api._u8s8_matmul_integer)
    zero = numpy_helper.from_array(np.array(act.zero + (128 if act.signed else 0), np.uint8),
                                   f"{q.output[0]}_u8_zero_point")
    g.g.initializer.append(zero)
    if not act.signed:
        return q.output[0], zero.name
    x_u8 = f"{q.output[0]}_u8"
    nodes.append(helper.make_node(QUANTIZE, [q.input[0], q.input[1], zero.name], [x_u8],
                                  name=f"{q.name or q.output[0]}_u8"))
    return x_u8, zero.name


def _replace_nodes(graph: onnx.GraphProto, nodes: list[onnx.NodeProto]) -> None:
    """Set the graph's nodes to `nodes` less the Q/DQ nodes nothing reads any more, and drop
    the initializers and value_info only those read or wrote."""
    outputs = {o.name for o in graph.output}
    dropped: set[str] = set()
    while True:
        read = {i for n in nodes for i in n.input} | outputs
        dead = [n for n in nodes if n.op_type in (QUANTIZE, DEQUANTIZE)
                and not any(o in read for o in n.output)]
        if not dead:
            break
        gone = {id(n) for n in dead}
        nodes = [n for n in nodes if id(n) not in gone]
        dropped.update(name for n in dead for name in (*n.input, *n.output))
    kept_nodes = [onnx.NodeProto() for _ in nodes]
    for copy, node in zip(kept_nodes, nodes, strict=True):
        copy.CopyFrom(node)
    del graph.node[:]
    graph.node.extend(kept_nodes)
    # an initializer listed as a graph input too (IR < 4) stays: removing it would make it
    # an input the caller must feed
    read = {i for n in graph.node for i in n.input} | outputs | {i.name for i in graph.input}
    unread = dropped - read
    inits = [t for t in graph.initializer if t.name not in unread]
    del graph.initializer[:]
    graph.initializer.extend(inits)
    infos = [vi for vi in graph.value_info if vi.name not in unread]
    del graph.value_info[:]
    graph.value_info.extend(infos)
