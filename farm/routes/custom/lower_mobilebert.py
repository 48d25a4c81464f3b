"""Lowering of MobileBERT's own patterns (farm/models/corpus/mobilebert.py), used by
the Lowerer like lower_ops.py's handlers:

- the trigram input: Slice/Pad of the word-embedding Gather and Concat of [i+1, i, i-1]
  become one Trigram op (shifted table rows, zero rows past either end of the sequence);
- NoNorm (``x * gamma + beta``): after a GEMM it is folded into the GEMM's weights and bias
  (``(x.W + b) * g + beta = x.(W g) + (b g + beta)``, per output column, for fp32, int8 and
  4-bit weights alike); after the embedding sum into the embedding tables, the
  transformation GEMM and a fixed bias row; after a residual Add it is one NoNorm op
  ``(a + r) * g + beta`` (a residual cannot be rescaled for free), which passes.py then
  folds into the FC that made ``a`` as its residual epilogue;
- ReLU as the GEMM's epilogue;
- ``Constant`` nodes (torch writes Python scalars and slice bounds as Constant nodes).
`add_pattern`/`mul_pattern` return None when a node is not one of these patterns.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from onnx import NodeProto, numpy_helper

from farm.routes.custom.lowering import LowererApi
from farm.routes.custom.plan_format import (
    ACT_NONE,
    ACT_RELU,
    OP_NONORM,
    OP_TRIGRAM,
    SRC_POSITION,
)
from farm.routes.custom.values import Act, Affine, Const, Embed, Lin, Shift, Sum

INT64_MAX = np.iinfo(np.int64).max


def _vector(c: Const, n: int) -> np.ndarray | None:
    """c as a per-column vector [n] if it broadcasts as one over [tokens, n], else None."""
    a = c.arr
    if a.size == n and (a.ndim <= 1 or all(d == 1 for d in a.shape[:-1])) and a.shape[-1:] == (n,):
        return a.reshape(-1).astype(np.float32)
    return None


def _scale_lin(lin: Lin, g: np.ndarray) -> Lin | None:
    if lin.act != ACT_NONE:
        return None  # max(x, 0) * g != max(x * g, 0) for g < 0
    bias = None if lin.bias is None else (lin.bias * g).astype(np.float32)
    return Lin(lin.x, lin.fc.scaled(g), bias, ACT_NONE, lin.name)


def _scale_embed(e: Embed, g: np.ndarray) -> Embed | None:
    base = e.base
    if base is not None:
        base = _scale_lin(base, g) if isinstance(base, Lin) else None
        if base is None:
            return None
    terms = tuple(((t * g[None, :]).astype(np.float32), s) for t, s in e.terms)
    return Embed(terms, e.name, base)


def op_Constant(self: LowererApi, node: NodeProto, ins: list[Any]) -> Any:
    for a in node.attribute:
        if a.name == "value":
            return Const(numpy_helper.to_array(a.t))
    raise self.fail("only Constant nodes with a tensor 'value' are supported")


def _int_list(c: Any) -> list[int] | None:
    return [int(v) for v in c.arr.reshape(-1)] if isinstance(c, Const) else None


def op_Slice(self: LowererApi, node: NodeProto, ins: list[Any]) -> Any:
    x = ins[0]
    starts, ends = _int_list(ins[1]), _int_list(ins[2])
    axes = _int_list(ins[3]) if len(ins) > 3 and ins[3] is not None else [0]
    steps = _int_list(ins[4]) if len(ins) > 4 and ins[4] is not None else [1]
    one_table = (isinstance(x, Embed) and len(x.terms) == 1 and x.base is None
                 and isinstance(x.terms[0][1], int) and x.terms[0][1] >= 0)  # an ids input
    if one_table and axes in ([1], [-2]) and steps == [1] and starts is not None and ends:
        if starts == [1] and ends[0] >= INT64_MAX // 2:
            return Shift(x, +1, False)  # x[:, 1:]: token i reads token i+1
        if starts == [0] and ends == [-1]:
            return Shift(x, -1, False)  # x[:, :-1] (padded at the start): token i reads i-1
    raise self.fail("Slice is supported only as the trigram embedding's x[:, 1:] / x[:, :-1]")


def op_Pad(self: LowererApi, node: NodeProto, ins: list[Any]) -> Any:
    x, pads = ins[0], _int_list(ins[1])
    value = ins[2] if len(ins) > 2 else None
    mode = next((a.s.decode() for a in node.attribute if a.name == "mode"), "constant")
    zero = value is None or (isinstance(value, Const) and float(value.arr.reshape(-1)[0]) == 0.0)
    if isinstance(x, Shift) and not x.padded and mode == "constant" and zero and pads:
        want = [0, 0, 0, 0, 1, 0] if x.offset > 0 else [0, 1, 0, 0, 0, 0]
        if pads == want:
            return Shift(x.embed, x.offset, True)
    raise self.fail("Pad is supported only as the trigram embedding's zero row at one end")


def op_Concat(self: LowererApi, node: NodeProto, ins: list[Any]) -> Any:
    axis = next((a.i for a in node.attribute if a.name == "axis"), 0)
    parts: list[tuple[Embed, int]] = []
    for v in ins:
        if isinstance(v, Shift) and v.padded:
            parts.append((v.embed, v.offset))
        elif isinstance(v, Embed):
            parts.append((v, 0))
        else:
            parts = []
            break
    if axis in (2, -1) and parts and len(parts) <= 6:
        tables = {id(e.terms[0][0]) for e, _ in parts}
        slots = {e.terms[0][1] for e, _ in parts}
        if len(tables) == 1 and len(slots) == 1 and all(len(e.terms) == 1 for e, _ in parts):
            table, slot = parts[0][0].terms[0]
            width = table.shape[1] * len(parts)
            out = self.emit(OP_TRIGRAM, node.name, [], width, arrays=[table.astype(np.float32)],
                            params=[slot, len(parts), *[off for _, off in parts]])
            return Act(out)
    raise self.fail("Concat is supported only as the trigram embedding (shifted rows of one "
                    "embedding table along the last axis)")


def op_Relu(self: LowererApi, node: NodeProto, ins: list[Any]) -> Any:
    x = ins[0]
    if isinstance(x, Lin) and x.act == ACT_NONE:
        return Lin(x.x, x.fc, x.bias, ACT_RELU, x.name)  # the GEMM's epilogue
    raise self.fail("Relu is supported only right after a MatMul (+ bias): it is fused into "
                    "the GEMM's epilogue")


def mul_pattern(self: LowererApi, node: NodeProto, ins: list[Any], activations: tuple) -> Any:
    """x * gamma (NoNorm's first half), or None."""
    for x, c in ((ins[0], ins[1]), (ins[1], ins[0])):
        if not isinstance(c, Const) or c.arr.size == 1:
            continue
        scaled: Lin | Embed | None = None
        if isinstance(x, Lin) and (g := _vector(c, x.fc.n)) is not None:
            scaled = _scale_lin(x, g)
        elif isinstance(x, Embed) and (g := _vector(c, x.terms[0][0].shape[1])) is not None:
            scaled = _scale_embed(x, g)
        if scaled is not None:
            return scaled
        if isinstance(x, Sum) and (g := _vector(c, self.ir.cols[x.a])) is not None:
            return Affine(x.a, x.b, g, node.name)
        if isinstance(x, activations):
            v = self.act(x)
            if (g := _vector(c, self.ir.cols[v])) is not None:
                return Affine(v, -1, g, node.name)
    return None


def emit_nonorm(self: LowererApi, aff: Affine, beta: np.ndarray, name: str) -> int:
    ins = [aff.a] if aff.b < 0 else [aff.a, aff.b]
    return self.emit(OP_NONORM, name, ins, self.ir.cols[aff.a],
                     arrays=[aff.gamma, beta.astype(np.float32)])


def add_pattern(self: LowererApi, node: NodeProto, ins: list[Any]) -> Any:
    """NoNorm's second half, a bias added to a folded GEMM, and the embedding sum; or None."""
    for x, c in ((ins[0], ins[1]), (ins[1], ins[0])):
        if not isinstance(c, Const):
            continue
        if isinstance(x, Affine) and (b := _vector(c, self.ir.cols[x.a])) is not None:
            return Act(emit_nonorm(self, x, b, node.name))
        if isinstance(x, Lin) and x.act == ACT_NONE:
            if x.bias is not None and (b := _vector(c, x.fc.n)) is not None:
                return Lin(x.x, x.fc, (x.bias + b).astype(np.float32), ACT_NONE, x.name)
            rows = c.arr.astype(np.float32)
            n = x.fc.n
            if rows.ndim >= 2 and rows.shape[-1] == n and rows.reshape(-1, n).shape[0] > 1:
                return Embed(((rows.reshape(-1, n), SRC_POSITION),), node.name, x)
        if (isinstance(x, Embed) and x.base is not None
                and (b := _vector(c, x.terms[0][0].shape[1])) is not None):
            return Embed((*x.terms, (b[None, :], -2)), x.name, x.base)  # fixed row 0
    a, b = ins
    if isinstance(a, Embed) and isinstance(b, Embed) and (a.base is None or b.base is None):
        return Embed(a.terms + b.terms, a.name, a.base if a.base is not None else b.base)
    return None
