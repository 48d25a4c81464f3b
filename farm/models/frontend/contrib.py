"""Expand the com.microsoft ops ORT's transformer optimizer writes into the canonical op set.

ORT runs these natively; TVM's ONNX importer has none of them and the custom lowerer takes the
standard encoder pattern, so for those two routes each becomes its standard-op meaning
(contrib op schemas: onnxruntime/docs/ContribOperators.md):

- `SkipLayerNormalization(x, skip, gamma, beta[, bias])` -> `Add(x, bias)`, `Add(., skip)`,
  `LayerNormalization` (a used 4th output, the pre-norm sum, is kept).
- `BiasGelu(x, b)`, `Gelu(x)` -> `Add`, erf chain; `FastGelu(x[, b])` -> `Add`, tanh chain.
- `EmbedLayerNormalization(ids, segment_ids, word, pos, segment, gamma, beta[, mask,
  position_ids])` -> Gathers + Adds + `LayerNormalization`; its mask_index output is traced
  back to the int mask it was computed from.
- `Attention(x, qkv_weight, qkv_bias, mask_index)` -> three projections (the packed weight
  split by columns), the head Reshape/Transpose, scaled scores, the additive mask of the
  traced int mask, Softmax, context. Needs the bound batch and sequence (constant shapes).
Int32 Casts of graph inputs the optimizer inserted in front of these ops are bypassed.
Anything else of the domain stays and is named by the route that cannot take it.
"""

from __future__ import annotations

import math

import numpy as np
import onnx

from farm.errors import BuildError
from farm.models.frontend.graph import MS, Graph, attr
from farm.models.frontend.rewrite import _additive_mask


def _fail(node: onnx.NodeProto, why: str) -> BuildError:
    return BuildError(f"front-end: node {node.name!r} ({node.op_type}, {MS}): {why}",
                      hint="run the ort route on this file; `farm models check FILE` shows "
                           "which routes can take it")


def _uncast(g: Graph, name: str) -> str:
    """A graph input behind the optimizer's int32 Cast, else the name itself."""
    n = g.producer.get(name)
    inputs = {i.name for i in g.g.input}
    if n is not None and n.op_type == "Cast" and n.input[0] in inputs:
        return n.input[0]
    return name


def _gelu_erf(g: Graph, x: str, out: str, scope: str) -> None:
    d = g.add("Div", [x, g.add_const("sqrt2", np.array(math.sqrt(2.0), np.float32))],
              name=f"{scope}/gelu/Div").output[0]
    e = g.add("Erf", [d], name=f"{scope}/gelu/Erf").output[0]
    e = g.add("Add", [e, g.add_const("one", np.array(1.0, np.float32))],
              name=f"{scope}/gelu/Add").output[0]
    m = g.add("Mul", [x, e], name=f"{scope}/gelu/Mul").output[0]
    g.add("Mul", [m, g.add_const("half", np.array(0.5, np.float32))], [out],
          name=f"{scope}/gelu/Mul_1")


def _gelu_tanh(g: Graph, x: str, out: str, scope: str) -> None:
    c = lambda h, v: g.add_const(h, np.array(v, np.float32))  # noqa: E731
    cube = g.add("Mul", [x, g.add("Mul", [x, x], name=f"{scope}/gelu/Mul_sq").output[0]],
                 name=f"{scope}/gelu/Mul_cube").output[0]
    inner = g.add("Add", [x, g.add("Mul", [cube, c("k", 0.044715)],
                                   name=f"{scope}/gelu/Mul_k").output[0]],
                  name=f"{scope}/gelu/Add_inner").output[0]
    t = g.add("Tanh", [g.add("Mul", [inner, c("s", math.sqrt(2 / math.pi))],
                             name=f"{scope}/gelu/Mul_s").output[0]],
              name=f"{scope}/gelu/Tanh").output[0]
    one = g.add("Add", [t, c("one", 1.0)], name=f"{scope}/gelu/Add_1").output[0]
    half = g.add("Mul", [x, c("half", 0.5)], name=f"{scope}/gelu/Mul_half").output[0]
    g.add("Mul", [half, one], [out], name=f"{scope}/gelu/Mul_out")


def _bias(g: Graph, x: str, bias: str | None, scope: str) -> str:
    if not bias:
        return x
    return g.add("Add", [x, bias], name=f"{scope}/bias_Add").output[0]


def _skip_ln(g: Graph, n: onnx.NodeProto) -> None:
    ins = [*n.input, "", ""][:5]
    s = _bias(g, ins[0], ins[4], n.name)
    total = n.output[3] if len(n.output) > 3 and n.output[3] else g.fresh(n.name)
    g.add("Add", [s, ins[1]], [total], name=f"{n.name}/residual_Add")
    g.add("LayerNormalization", [total, ins[2], ins[3]], [n.output[0]],
          name=f"{n.name}/LayerNormalization", axis=-1, epsilon=float(attr(n, "epsilon", 1e-12)))
    if any(o for o in n.output[1:3]) and any(g.users(o) for o in n.output[1:3] if o):
        raise _fail(n, "its mean/inv_std outputs are used; only the normalised output is")


def _mask_source(g: Graph, n: onnx.NodeProto, name: str) -> str | None:
    if not name:
        return None
    src = g.producer.get(name)
    if src is not None and src.op_type == "EmbedLayerNormalization" and src.output[1] == name:
        if len(src.input) > 7 and src.input[7]:
            return _uncast(g, src.input[7])
        return None
    inputs = {i.name: i for i in g.g.input}
    raw = _uncast(g, name)
    if raw in inputs and len(inputs[raw].type.tensor_type.shape.dim) == 2:
        return raw
    raise _fail(n, f"mask_index {name!r} is not a [batch, seq] int mask nor an "
                   "EmbedLayerNormalization mask; other mask forms are not expanded")


def _embed_ln(g: Graph, n: onnx.NodeProto, seq: int) -> None:
    ins = [*n.input, "", ""][:9]
    ids, seg, word, pos, segt, gamma, beta, _mask, pos_ids = ins
    sc = n.name
    x = g.add("Gather", [word, _uncast(g, ids)], name=f"{sc}/word_Gather").output[0]
    if not pos_ids:
        pos_ids = g.add_const("position_ids", np.arange(seq, dtype=np.int64)[None, :])
    p = g.add("Gather", [pos, _uncast(g, pos_ids)], name=f"{sc}/position_Gather").output[0]
    x = g.add("Add", [x, p], name=f"{sc}/position_Add").output[0]
    if seg and segt:
        t = g.add("Gather", [segt, _uncast(g, seg)], name=f"{sc}/segment_Gather").output[0]
        x = g.add("Add", [x, t], name=f"{sc}/segment_Add").output[0]
    g.add("LayerNormalization", [x, gamma, beta], [n.output[0]], name=f"{sc}/LayerNormalization",
          axis=-1, epsilon=float(attr(n, "epsilon", 1e-12)))


def _attention(g: Graph, n: onnx.NodeProto, batch: int, seq: int, masks: dict[str, str]) -> None:
    ins = [*n.input, "", "", "", ""][:6]
    x, w_name, b_name, mask_index = ins[:4]
    w, b = g.const(w_name), g.const(b_name) if b_name else None
    heads = int(attr(n, "num_heads", 0))
    if w is None or heads < 1 or attr(n, "unidirectional", 0) or any(ins[4:]):
        raise _fail(n, "only a bidirectional Attention with constant packed weights, no past "
                       "state and no attention bias is expanded")
    sizes = attr(n, "qkv_hidden_sizes") or [w.shape[1] // 3] * 3
    if len(set(sizes)) != 1:
        raise _fail(n, f"unequal qkv_hidden_sizes {sizes}")
    h = int(sizes[0])
    d = h // heads
    sc = n.name
    heads_shape = g.add_const("heads_shape", np.array([batch, seq, heads, d], np.int64))
    parts = {}
    for i, (part, perm) in enumerate((("q", [0, 2, 1, 3]), ("k", [0, 2, 3, 1]),
                                      ("v", [0, 2, 1, 3]))):
        wi = g.add_const(f"{sc}.{part}.weight", np.ascontiguousarray(w[:, i * h:(i + 1) * h]))
        y = g.add("MatMul", [x, wi], name=f"{sc}/{part}/MatMul").output[0]
        if b is not None:
            y = g.add("Add", [y, g.add_const(f"{sc}.{part}.bias", b[i * h:(i + 1) * h])],
                      name=f"{sc}/{part}/Add").output[0]
        y = g.add("Reshape", [y, heads_shape], name=f"{sc}/core/{part}_Reshape").output[0]
        parts[part] = g.add("Transpose", [y], name=f"{sc}/core/{part}_Transpose",
                            perm=perm).output[0]
    s = g.add("MatMul", [parts["q"], parts["k"]], name=f"{sc}/core/scores_MatMul").output[0]
    scale = attr(n, "scale", 0.0) or 1.0 / math.sqrt(d)
    s = g.add("Mul", [s, g.add_const("scale", np.array(scale, np.float32))],
              name=f"{sc}/core/scale_Mul").output[0]
    src = _mask_source(g, n, mask_index)
    if src is not None:
        if src not in masks:
            masks[src] = _additive_mask(g, src, "/mask")
        s = g.add("Add", [s, masks[src]], name=f"{sc}/core/mask_Add").output[0]
    p = g.add("Softmax", [s], name=f"{sc}/core/Softmax", axis=-1).output[0]
    c = g.add("MatMul", [p, parts["v"]], name=f"{sc}/core/context_MatMul").output[0]
    c = g.add("Transpose", [c], name=f"{sc}/core/Transpose", perm=[0, 2, 1, 3]).output[0]
    g.add("Reshape", [c, g.add_const("hidden_shape", np.array([batch, seq, h], np.int64))],
          [n.output[0]], name=f"{sc}/core/Reshape")


def expand_contrib(g: Graph, batch: int, seq: int) -> dict[str, int]:
    """Expand every known com.microsoft node; returns {op: count}."""
    counts: dict[str, int] = {}
    masks: dict[str, str] = {}
    for n in [n for n in g.nodes if n.domain == MS]:
        op = n.op_type
        if op == "SkipLayerNormalization":
            _skip_ln(g, n)
        elif op in ("BiasGelu", "Gelu"):
            _gelu_erf(g, _bias(g, n.input[0], n.input[1] if len(n.input) > 1 else None, n.name),
                      n.output[0], n.name)
        elif op == "FastGelu":
            _gelu_tanh(g, _bias(g, n.input[0], n.input[1] if len(n.input) > 1 else None, n.name),
                       n.output[0], n.name)
        elif op == "EmbedLayerNormalization":
            _embed_ln(g, n, seq)
        elif op == "Attention":
            _attention(g, n, batch, seq, masks)
        else:
            continue
        g.kill(n)
        counts[op] = counts.get(op, 0) + 1
    return counts
