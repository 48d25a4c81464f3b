"""Per-operator handlers of the Lowerer (lower.py); each returns the output value(s).

Each is `op_<OpType>(self, node, ins)` where `ins` are the input values (values.py). A
handler either extends a pending value (fusion) or materialises its inputs via `self.act`.
"""

from __future__ import annotations

import math
from dataclasses import replace
from typing import Any

import numpy as np
from onnx import NodeProto

from farm.routes.custom import lower_deberta as deberta
from farm.routes.custom import lower_mobilebert as mobilebert
from farm.routes.custom import lower_pooler as pooler
from farm.routes.custom import lower_roberta as roberta
from farm.routes.custom import lower_squeezebert as squeeze
from farm.routes.custom import weights as W
from farm.routes.custom.ir import FcWeights
from farm.routes.custom.lowering import LowererApi
from farm.routes.custom.plan_format import (
    ACT_NONE,
    OP_ATTENTION,
    OP_LAYERNORM,
    SRC_POSITION,
    W_I8,
    W_Q4_0,
)
from farm.routes.custom.qdq import QdqWeight, int8_weights
from farm.routes.custom.values import (
    ACTIVATIONS,
    Act,
    Const,
    Context,
    DynQuant,
    Embed,
    FakeQuant,
    Gelu,
    GeluPart,
    Heads,
    Input,
    IntMatMul,
    Lin,
    MaskFn,
    Probs,
    ScaleProd,
    Scores,
    Split,
    Sum,
)


def _pair(ins: list[Any], a: type | tuple, b: type | tuple) -> tuple[Any, Any] | None:
    """(x, y) with x of type a and y of type b, trying both orders (commutative ops)."""
    if isinstance(ins[0], a) and isinstance(ins[1], b):
        return ins[0], ins[1]
    if isinstance(ins[1], a) and isinstance(ins[0], b):
        return ins[1], ins[0]
    return None


def _scalar(c: Const) -> float | None:
    return float(c.arr.reshape(-1)[0]) if c.arr.size == 1 else None


def op_Identity(self: LowererApi, node: NodeProto, ins: list[Any]) -> Any:
    return ins[0]


def op_Gather(self: LowererApi, node: NodeProto, ins: list[Any]) -> Any:
    table, idx = ins
    if isinstance(table, Const) and isinstance(idx, Input):
        if any(a.name == "axis" and a.i != 0 for a in node.attribute) or table.arr.ndim != 2:
            raise self.fail("only row gathers from a 2-D table are supported")
        return Embed(((table.arr.astype(np.float32), idx.slot),), node.name)
    if isinstance(table, Const) and (src := roberta.gather_source(idx)) is not None:
        if any(a.name == "axis" and a.i != 0 for a in node.attribute) or table.arr.ndim != 2:
            raise self.fail("only row gathers from a 2-D table are supported")
        return Embed(((table.arr.astype(np.float32), src),), node.name)
    if (v := pooler.row_gather(self, node, ins, ACTIVATIONS)) is not None:
        return v
    raise self.fail("only Gather(constant table, int input) is supported")


def op_Add(self: LowererApi, node: NodeProto, ins: list[Any]) -> Any:
    if (v := deberta.add(ins)) is not None:
        return v
    if (v := mobilebert.add_pattern(self, node, ins)) is not None:
        return v
    if (p := _pair(ins, Embed, Embed)) is not None:
        return Embed(p[0].terms + p[1].terms, p[0].name)
    if (p := _pair(ins, Embed, Const)) is not None:
        rows = p[1].arr.astype(np.float32)
        rows = rows.reshape(-1, rows.shape[-1]) if rows.ndim >= 1 else None
        if rows is None or rows.shape[1] != p[0].terms[0][0].shape[1]:
            raise self.fail("constant added to embeddings must be position rows [S, H] or one row")
        source = SRC_POSITION if rows.shape[0] > 1 else -2  # one row: the same for every token
        return Embed((*p[0].terms, (rows, source)), p[0].name, p[0].base)
    if (p := _pair(ins, Lin, Const)) is not None and p[0].bias is None and p[0].act == ACT_NONE:
        lin, c = p
        if c.arr.size != lin.fc.n or (c.arr.ndim > 1 and c.arr.shape[-1] != lin.fc.n):
            raise self.fail(f"bias of {c.arr.shape} does not match N={lin.fc.n}")
        return Lin(lin.x, lin.fc, c.arr.reshape(-1).astype(np.float32), ACT_NONE, lin.name)
    if (p := _pair(ins, Scores, MaskFn)) is not None and p[0].mask is None:
        return replace(p[0], mask=p[1])
    if (p := _pair(ins, Scores, Const)) is not None and (b := _score_bias(p[0], p[1])) is not None:
        return replace(p[0], bias=b)
    p = _pair(ins, GeluPart, Const)
    if p is not None and p[0].stage == "erf" and _scalar(p[1]) == 1.0:
        return GeluPart(p[0].u, "erf1")
    if (p := _pair(ins, MaskFn, Const)) is not None and (c := _scalar(p[1])) is not None:
        return replace(p[0], v0=p[0].v0 + c, v1=p[0].v1 + c)
    if (v := pooler.add_pattern(self, node, ins)) is not None:
        return v
    if (v := roberta.add_pattern(ins)) is not None:
        return v
    if all(isinstance(v, ACTIVATIONS) for v in ins):
        a, b = self.act(ins[0]), self.act(ins[1])
        if self.ir.cols[a] != self.ir.cols[b]:
            raise self.fail("Add of activations with different widths (broadcasting)")
        return Sum(a, b, node.name)
    raise self.fail("this Add pattern is not supported")


def _score_bias(s: Scores, c: Const) -> np.ndarray | None:
    """A constant added to the scores as the attention op's bias [heads, S, S], or None:
    [1 | B=1, heads | 1, S, S] broadcast over heads; one per batch row is not taken."""
    a = c.arr
    if s.bias is not None or a.ndim != 4 or a.shape[0] != 1 \
            or a.shape[2] != a.shape[3] or a.shape[1] not in (1, s.q.heads):
        return None
    return np.ascontiguousarray(np.broadcast_to(a[0], (s.q.heads, *a.shape[2:])), np.float32)


def op_Sub(self: LowererApi, node: NodeProto, ins: list[Any]) -> Any:
    a, b = ins
    if isinstance(a, Const) and isinstance(b, MaskFn) and (c := _scalar(a)) is not None:
        return replace(b, v0=c - b.v0, v1=c - b.v1)
    if isinstance(a, MaskFn) and isinstance(b, Const) and (c := _scalar(b)) is not None:
        return replace(a, v0=a.v0 - c, v1=a.v1 - c)
    raise self.fail("Sub is supported only in the attention-mask computation")


def _gelu_of(self: LowererApi, u: str) -> Any:
    src = self.get(u)
    if isinstance(src, squeeze.ChanFirst):  # SqueezeBERT's GELU runs on the rows inside
        src = src.inner
    if isinstance(src, Lin) and src.act == ACT_NONE:
        return Lin(src.x, src.fc, src.bias, self.gelu_act, src.name)  # fused epilogue
    return Gelu(u)


def op_Mul(self: LowererApi, node: NodeProto, ins: list[Any]) -> Any:
    if (v := deberta.scale(node, ins)) is not None or (v := deberta.mul_mask(self, node, ins)):
        return v
    if (p := _pair(ins, MaskFn, Const)) is not None and (c := _scalar(p[1])) is not None:
        return replace(p[0], v0=p[0].v0 * c, v1=p[0].v1 * c)
    if (p := _pair(ins, Heads, Const)) is not None and (c := _scalar(p[1])) is not None:
        h = p[0]  # a scale on Q or Kᵀ: the scores' (V's is refused in _attention)
        return replace(h, scale=h.scale * c)
    if (p := _pair(ins, Scores, Const)) is not None and (c := _scalar(p[1])) is not None \
            and p[0].bias is None and not p[0].rel:  # a scale after a bias would scale it too
        return replace(p[0], scale=p[0].scale * c)
    if (p := _pair(ins, DynQuant, Const)) is not None and p[0].part == "scale":
        return ScaleProd(p[0].value, p[1].arr.astype(np.float32))
    if (p := _pair(ins, IntMatMul, ScaleProd)) is not None and p[0].x == p[1].x:
        mm, sp = p
        scale = np.broadcast_to(sp.scale.reshape(-1), (mm.fc.n,)).astype(np.float32)
        return Lin(mm.x, FcWeights(W_I8, mm.fc.w, scale), None, ACT_NONE, mm.name)
    if (p := _pair(ins, GeluPart, ACTIVATIONS)) is not None and p[0].stage == "erf1":
        other = node.input[1] if ins[0] is p[0] else node.input[0]
        if other == p[0].u:
            return GeluPart(p[0].u, "mul")
    p = _pair(ins, GeluPart, Const)
    if p is not None and p[0].stage == "mul" and _scalar(p[1]) == 0.5:
        return _gelu_of(self, p[0].u)
    # torchlib's aten_gelu (dynamo export) halves first: x * (0.5 * (1 + erf(x / sqrt 2)))
    if p is not None and p[0].stage == "erf1" and _scalar(p[1]) == 0.5:
        return GeluPart(p[0].u, "half")
    if (p := _pair(ins, GeluPart, ACTIVATIONS)) is not None and p[0].stage == "half":
        other = node.input[1] if ins[0] is p[0] else node.input[0]
        if other == p[0].u:
            return _gelu_of(self, p[0].u)
    if (v := pooler.mul_pattern(self, node, ins, ACTIVATIONS)) is not None:
        return v
    if (v := roberta.mul_pattern(ins)) is not None:
        return v
    if (v := mobilebert.mul_pattern(self, node, ins, ACTIVATIONS)) is not None:
        return v
    raise self.fail("this Mul pattern is not supported")


def op_Div(self: LowererApi, node: NodeProto, ins: list[Any]) -> Any:
    a, b = ins
    c = _scalar(b) if isinstance(b, Const) else None
    if c is None or c == 0:
        raise self.fail("Div is supported only by a non-zero constant scalar")
    if (v := deberta.scale(node, ins)) is not None:
        return v
    if isinstance(a, Scores) and a.bias is None and not a.rel:
        return replace(a, scale=a.scale / c)
    if isinstance(a, MaskFn):
        return replace(a, v0=a.v0 / c, v1=a.v1 / c)
    if isinstance(a, ACTIVATIONS) and abs(c - math.sqrt(2.0)) < 1e-4:
        return GeluPart(node.input[0], "div")
    raise self.fail("this Div pattern is not supported")


def op_Erf(self: LowererApi, node: NodeProto, ins: list[Any]) -> Any:
    if isinstance(ins[0], GeluPart) and ins[0].stage == "div":
        return GeluPart(ins[0].u, "erf")
    raise self.fail("Erf is supported only inside GELU: x * 0.5 * (1 + erf(x / sqrt(2)))")


def op_Gelu(self: LowererApi, node: NodeProto, ins: list[Any]) -> Any:
    approx = next((a.s.decode() for a in node.attribute if a.name == "approximate"), "none")
    if approx != "none" or not isinstance(ins[0], ACTIVATIONS):
        raise self.fail("only exact (erf) Gelu on an activation is supported")
    return _gelu_of(self, node.input[0])


def op_Cast(self: LowererApi, node: NodeProto, ins: list[Any]) -> Any:
    x = ins[0]
    if (v := roberta.cast_pattern(ins)) is not None:
        return v
    if isinstance(x, Input):
        return MaskFn(x.slot, 0.0, 1.0)
    if isinstance(x, (MaskFn, IntMatMul)):
        return x
    raise self.fail("Cast is supported only on the mask input, MatMulInteger results and "
                    "RoBERTa's position ids")


def op_Unsqueeze(self: LowererApi, node: NodeProto, ins: list[Any]) -> Any:
    if isinstance(ins[0], (MaskFn, Input)):
        return ins[0]  # broadcasting dims of the [B, 1, 1, S] mask carry no data
    raise self.fail("Unsqueeze is supported only in the attention-mask computation")


def op_LayerNormalization(self: LowererApi, node: NodeProto, ins: list[Any]) -> Any:
    x, g, b = [*ins, None][:3]
    axis = next((a.i for a in node.attribute if a.name == "axis"), -1)
    eps = next((a.f for a in node.attribute if a.name == "epsilon"), 1e-5)
    if not isinstance(g, Const) or not isinstance(b, Const) or axis not in (-1, 2):
        raise self.fail("LayerNormalization needs constant scale and bias over the last axis")
    if isinstance(x, Sum):
        srcs = [x.a, x.b]
    elif isinstance(x, ACTIVATIONS):
        srcs = [self.act(x)]
    else:
        raise self.fail("LayerNormalization input is not an activation")
    cols = self.ir.cols[srcs[0]]
    if g.arr.size != cols or b.arr.size != cols:
        raise self.fail(f"LayerNormalization scale/bias do not have {cols} values")
    out = self.emit(OP_LAYERNORM, node.name, srcs, cols,
                    arrays=[g.arr.reshape(-1).astype(np.float32),
                            b.arr.reshape(-1).astype(np.float32)],
                    floats=[float(eps)])
    return Act(out)


def op_MatMul(self: LowererApi, node: NodeProto, ins: list[Any]) -> Any:
    a, b = ins
    if isinstance(a, ACTIVATIONS) and isinstance(b, QdqWeight) and self.quant is None:
        xv = self.act(a)
        if self.ir.cols[xv] != b.wq.shape[0]:
            raise self.fail(f"K mismatch: activation has {self.ir.cols[xv]}, weight {b.wq.shape}")
        return Lin(xv, int8_weights(b, node.name), None, ACT_NONE, node.name)
    if isinstance(a, ACTIVATIONS) and isinstance(b, Const):
        return self.fc(a, b.arr)
    if (rp := deberta.matmul(ins)) is not None:
        return rp
    if (qk := squeeze.matmul_keys(ins)) is not None:
        return Scores(qk[0], qk[1], 1.0, None, node.name)
    if isinstance(a, Heads) and isinstance(b, Heads) and not a.transposed and b.transposed:
        if (a.heads, a.dim) != (b.heads, b.dim):
            raise self.fail("query and key heads differ")
        return Scores(a, b, a.scale * b.scale, None, node.name)
    if isinstance(a, Probs) and isinstance(b, Heads) and not b.transposed:
        return Context(a, b, False)
    raise self.fail("MatMul needs constant weights or the attention pattern")


def op_MatMulNBits(self: LowererApi, node: NodeProto, ins: list[Any]) -> Any:
    x, blob, scales = ins[:3]
    zp = ins[3] if len(ins) > 3 else None
    bias = ins[5] if len(ins) > 5 else None
    attrs = {a.name: a.i for a in node.attribute if a.type == a.INT}
    if not (isinstance(blob, Const) and isinstance(scales, Const) and isinstance(x, ACTIVATIONS)):
        raise self.fail("MatMulNBits needs constant weights and scales")
    k, n = attrs.get("K", 0), attrs.get("N", 0)
    q4 = W.from_matmul_nbits(blob.arr, scales.arr, zp.arr if isinstance(zp, Const) else None, k, n,
                             attrs.get("bits", 4), attrs.get("block_size", 32), node.name)
    xv = self.act(x)
    if self.ir.cols[xv] != k:
        raise self.fail(f"K mismatch: activation has {self.ir.cols[xv]}, K={k}")
    b = bias.arr.reshape(-1).astype(np.float32) if isinstance(bias, Const) else None
    return Lin(xv, FcWeights(W_Q4_0, q4.reshape(n, -1)), b, ACT_NONE, node.name)


def op_DynamicQuantizeLinear(self: LowererApi, node: NodeProto, ins: list[Any]) -> Any:
    v = self.act(ins[0])
    return DynQuant(v, "q"), DynQuant(v, "scale"), DynQuant(v, "zp")


def op_MatMulInteger(self: LowererApi, node: NodeProto, ins: list[Any]) -> Any:
    a, w = ins[:2]
    wzp = ins[3] if len(ins) > 3 else None
    if not (isinstance(a, DynQuant) and a.part == "q" and isinstance(w, Const)):
        raise self.fail("MatMulInteger is supported only as written by quantize_dynamic")
    if self.ir.cols[a.value] != w.arr.shape[0]:
        raise self.fail(f"K mismatch: activation has {self.ir.cols[a.value]}, weight {w.arr.shape}")
    wt, _ = W.from_matmul_integer(w.arr, np.ones(1, np.float32),
                                  wzp.arr if isinstance(wzp, Const) else None, node.name)
    return IntMatMul(a.value, FcWeights(W_I8, wt, None), node.name)


def op_QuantizeLinear(self: LowererApi, node: NodeProto, ins: list[Any]) -> Any:
    return FakeQuant(ins[0])


def op_DequantizeLinear(self: LowererApi, node: NodeProto, ins: list[Any]) -> Any:
    # QDQ models: a Q/DQ pair on an activation is ORT's cue to run that edge in int8; here it
    # is dropped: the executor quantises the activation per row for the int8 GEMM (weights
    # arrive as qdq.QdqWeight and stay int8).
    if isinstance(ins[0], FakeQuant):
        return ins[0].inner
    raise self.fail("DequantizeLinear is supported on constants and after QuantizeLinear")


def op_Reshape(self: LowererApi, node: NodeProto, ins: list[Any]) -> Any:
    x, shape = ins
    if not isinstance(shape, Const):
        raise self.fail("Reshape needs a constant shape")
    if (cf := squeeze.reshape(self, node, ins, _attention_act)) is not None:
        return cf
    dims = [int(d) for d in shape.arr.reshape(-1)]
    if (v := deberta.reshape(self, dims, x)) is not None:
        return v
    if isinstance(x, Context) and x.merged:
        return Act(_attention(self, node, x))
    if isinstance(x, ACTIVATIONS):
        v = self.act(x)
        cols = self.ir.cols[v]
        if len(dims) == 4 and (dims[2] == -1) != (dims[3] == -1) and max(dims[2:]) > 0 \
                and cols % max(dims[2:]) == 0:
            # transformers 5.x writes the head split as view(B, S, -1, head_dim)
            dims[dims.index(-1, 2)] = cols // max(dims[2:])
        if len(dims) == 4 and dims[2] > 0 and dims[3] > 0 and dims[2] * dims[3] == cols:
            return Split(v, dims[2], dims[3])
        if dims and dims[-1] == cols:
            return Act(v)
    raise self.fail(f"Reshape to {dims} is not part of a supported pattern")


def op_Transpose(self: LowererApi, node: NodeProto, ins: list[Any]) -> Any:
    x = ins[0]
    perm = next((list(a.ints) for a in node.attribute if a.name == "perm"), None)
    if (cf := squeeze.transpose(self, node, ins)) is not None:
        return cf
    if (v := deberta.transpose(perm, x)) is not None:
        return v
    if isinstance(x, Split) and perm in ([0, 2, 1, 3], [0, 2, 3, 1]):
        return Heads(x.value, x.heads, x.dim, perm == [0, 2, 3, 1])
    if isinstance(x, Heads) and not x.transposed and perm == [0, 1, 3, 2]:
        return replace(x, transposed=True)
    if isinstance(x, Context) and not x.merged and perm == [0, 2, 1, 3]:
        return Context(x.probs, x.v, True)
    raise self.fail(f"Transpose {perm} is not part of the attention pattern")


def op_Softmax(self: LowererApi, node: NodeProto, ins: list[Any]) -> Any:
    axis = next((a.i for a in node.attribute if a.name == "axis"), -1)
    if isinstance(ins[0], Scores) and axis in (-1, 3):
        return Probs(ins[0])
    raise self.fail("Softmax is supported only over attention scores (last axis)")


def op_Conv(self: LowererApi, node: NodeProto, ins: list[Any]) -> Any:
    if (v := squeeze.conv(self, node, ins)) is not None:
        return v
    raise self.fail("Conv is fused only as SqueezeBERT's 1x1 convolution over the sequence")


def _attention_act(self: LowererApi, node: NodeProto, ctx: Context) -> Act:
    return Act(_attention(self, node, ctx))


def _attention(self: LowererApi, node: NodeProto, ctx: Context) -> int:
    s = ctx.probs.scores
    q, k, v = s.q, s.k, ctx.v
    if (v.heads, v.dim) != (q.heads, q.dim):
        raise self.fail("value heads differ from query heads")
    if v.scale != 1.0:
        raise self.fail("a scale on the value heads is not part of the attention pattern")
    mask = s.mask
    name = s.name.rsplit("/", 1)[0] + "/" if "/" in s.name else s.name
    arrays = [s.bias, *deberta.rel_arrays(self, s)] if s.rel else [s.bias]
    return self.emit(OP_ATTENTION, name, [q.value, k.value, v.value], q.heads * q.dim,
                     arrays=arrays if any(a is not None for a in arrays) else [],
                     params=[q.heads, q.dim, 0, 0, 0, mask.slot if mask else -1,
                             int(bool(mask and mask.outer))],
                     floats=[s.scale, mask.v0 if mask else 0.0, mask.v1 if mask else 0.0])


def op_Not(self: LowererApi, node: NodeProto, ins: list[Any]) -> Any:
    if (v := deberta.not_mask(ins)) is not None:
        return v
    return roberta.op_Not(self, node, ins)
