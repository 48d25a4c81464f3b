"""DeBERTa's disentangled attention, lowered into the fused attention op.

DeBERTa (v2/v3) adds two relative-position terms to the content scores Q.Kᵀ: content-to-
position, c2p[i, j] = Q_i . posK[idx_c[i, j]], and position-to-content, p2c[i, j] = K_j .
posQ[idx_p[j, i]], each divided by the scores' scale. HF's export writes them as MatMul(Q,
posKᵀ) -> [B*H, S, 2*span] -> GatherElements(axis -1, the bucketed relative positions) (and a
Transpose for p2c), then Div, Add, the 2-D mask Where(not(m_i * m_j), -FLT_MAX, scores),
Softmax and @V over [B*H, S, D] views of the heads. For a bound sequence length posK, posQ
(projections of the constant relative embeddings) and the positions are constants, so:

- `Heads` take the [B*H, S, D] view (`rank3`) and its Transpose [0, 2, 1] (Kᵀ);
- MatMul(Heads, constant [H, D, R]) is a pending `RelProd`; GatherElements of it along the
  last axis by constant indices is a `RelTerm` (the gathered product: only the kept elements
  are ever computed, kernels' `gather_mm_f32`); Transpose, Div/Mul by a scalar and Add keep it
  pending (`RelSum`), and Add onto `Scores` makes them the attention op's relative terms;
- the mask m_i * m_j (Mul of two views of the mask input) is a `MaskFn` with `outer`: keys
  are masked additively and a padded query row gets the uniform softmax Where gives it.

The attention op (plan_format OP_ATTENTION) then carries t1/t2 (c2p table [H, D, R] with the
scale folded in, indices [S, S]) and t3/t4 (p2c); the executor computes the terms per block of
query rows beside the scores (runtime/exec.c, rel_terms). A pattern that differs falls back
generically, as before.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np
from onnx import NodeProto

from farm.routes.custom.lowering import LowererApi
from farm.routes.custom.values import Const, Context, Heads, Input, MaskFn, Probs, Scores

# B's row stride in the plan: R plus this, so the D rows a block of columns reads do not all
# fall in the same few L1 sets (R is a power of two: 2 * span)
ROW_PAD = 16


@dataclass(frozen=True)
class RelProd:
    """MatMul(heads, table): [B*H, S, R] (table [H, D, R], constant)."""

    heads: Heads
    table: np.ndarray = field(compare=False)


@dataclass(frozen=True)
class RelTerm:
    """The kept elements of a RelProd: term[i, j] = heads_i . table[:, idx[i, j]] * scale, or,
    transposed, term[i, j] = heads_j . table[:, idx[j, i]] * scale."""

    heads: Heads
    table: np.ndarray = field(compare=False)
    idx: np.ndarray = field(compare=False)
    transposed: bool = False
    scale: float = 1.0


@dataclass(frozen=True)
class RelSum:
    terms: tuple[RelTerm, ...]


def _scalar(v: Any) -> float | None:
    return float(v.arr.reshape(-1)[0]) if isinstance(v, Const) and v.arr.size == 1 else None


def reshape(self: LowererApi, dims: list[int], x: Any) -> Any:
    """The [B*H, S, D] views of heads, scores, probabilities and context: the same values."""
    if isinstance(x, Heads) and not x.transposed and len(dims) == 3 and dims[-1] == x.dim:
        return replace(x, rank3=True)
    if isinstance(x, (Scores, Probs)) and len(dims) in (3, 4) and dims[-1] == dims[-2] > 0:
        return x
    if isinstance(x, Context) and not x.merged and len(dims) == 4 and dims[-1] == x.v.dim:
        return x
    return None


def transpose(perm: list[int] | None, x: Any) -> Any:
    if isinstance(x, Heads) and x.rank3 and not x.transposed and perm == [0, 2, 1]:
        return replace(x, transposed=True)
    if isinstance(x, RelTerm) and perm == [0, 2, 1]:
        return replace(x, transposed=not x.transposed)
    return None


def matmul(ins: list[Any]) -> Any:
    a, b = ins
    if isinstance(a, Heads) and a.rank3 and not a.transposed and isinstance(b, Const) \
            and b.arr.ndim == 3 and b.arr.shape[:2] == (a.heads, a.dim):
        return RelProd(a, b.arr.astype(np.float32))
    return None


def op_GatherElements(self: LowererApi, node: NodeProto, ins: list[Any]) -> Any:
    x, idx = ins
    axis = next((a.i for a in node.attribute if a.name == "axis"), 0)
    if not (isinstance(x, RelProd) and isinstance(idx, Const) and axis in (-1, 2)):
        raise self.fail("GatherElements is fused only as DeBERTa's relative positions (a "
                        "product of the heads with a constant, gathered along its last axis)")
    ix = idx.arr
    if ix.ndim != 3 or ix.shape[1] != ix.shape[2] or not (ix == ix[:1]).all():
        raise self.fail("relative position indices differ between heads or are not [S, S]")
    r = x.table.shape[2]
    ix2 = np.where(ix[0] < 0, ix[0] + r, ix[0])
    if ix2.min() < 0 or ix2.max() >= r:
        raise self.fail(f"relative position indices outside the table's {r} columns")
    return RelTerm(x.heads, x.table, ix2.astype(np.int32))


def scale(node: NodeProto, ins: list[Any]) -> Any:
    """Div or Mul of a relative term by a constant scalar."""
    p = (ins[0], ins[1]) if isinstance(ins[0], RelTerm) else (ins[1], ins[0])
    c = _scalar(p[1])
    if not isinstance(p[0], RelTerm) or c is None or c == 0:
        return None
    if node.op_type == "Div":
        return replace(p[0], scale=p[0].scale / c) if p[0] is ins[0] else None
    return replace(p[0], scale=p[0].scale * c)


def add(ins: list[Any]) -> Any:
    terms = [v.terms if isinstance(v, RelSum) else (v,) if isinstance(v, RelTerm) else None
             for v in ins]
    if terms[0] is not None and terms[1] is not None:
        return RelSum(terms[0] + terms[1])
    for s, t in ((ins[0], terms[1]), (ins[1], terms[0])):
        if isinstance(s, Scores) and t is not None and not s.rel:
            return replace(s, rel=t)
    return None


def mul_mask(self: LowererApi, node: NodeProto, ins: list[Any]) -> Any:
    """m[:, None, None, :] * m[:, None, :, None]: the outer product of the mask with itself."""
    a, b = ins
    if not (isinstance(a, Input) and isinstance(b, Input) and a.slot == b.slot):
        return None
    sa, sb = (self.value_shape(n) for n in node.input)
    if sa and sb and len(sa) == len(sb) >= 2 and sa[:-2] == sb[:-2]:
        rows, cols = (sa, sb) if sa[-2] == 1 else (sb, sa)  # [.., 1, S] times [.., S, 1]
        if rows[-2] == 1 and cols[-1] == 1 and rows[-1] == cols[-2] > 1:
            return MaskFn(a.slot, 0.0, 1.0, outer=True)
    if sa and sa == sb:
        return MaskFn(a.slot, 0.0, 1.0)  # m * m = m for a 0/1 mask
    return None


def op_Squeeze(self: LowererApi, node: NodeProto, ins: list[Any]) -> Any:
    if isinstance(ins[0], (Input, MaskFn)):
        return ins[0]  # the mask's broadcasting dims carry no data
    raise self.fail("Squeeze is supported only in the attention-mask computation")


def not_mask(ins: list[Any]) -> Any:
    x = ins[0]
    if isinstance(x, MaskFn) and {x.v0, x.v1} <= {0.0, 1.0}:
        return replace(x, v0=float(not x.v0), v1=float(not x.v1))
    return None


def op_Where(self: LowererApi, node: NodeProto, ins: list[Any]) -> Any:
    """Where(mask condition, constant, scores): the condition's entries become that constant;
    added to the scores instead (exp of either is 0 next to any unmasked key)."""
    cond, x, y = ins
    c = _scalar(x)
    if not (isinstance(cond, MaskFn) and {cond.v0, cond.v1} <= {0.0, 1.0} and c is not None
            and isinstance(y, Scores) and y.mask is None):
        raise self.fail("Where is fused only as the attention mask: Where(mask, constant, scores)")
    if cond.outer and not (cond.v0 and not cond.v1):
        raise self.fail("a query-row mask must mask the padded positions")
    mask = MaskFn(cond.slot, c if cond.v0 else 0.0, c if cond.v1 else 0.0, outer=cond.outer)
    return replace(y, mask=mask)


def rel_arrays(self: LowererApi, s: Scores) -> list[np.ndarray | None]:
    """[c2p table, c2p indices, p2c table, p2c indices] of the attention op (None: no term)."""
    out: list[np.ndarray | None] = [None] * 4
    for t in s.rel:
        slot = 2 if t.transposed else 0
        want = s.k if t.transposed else s.q
        if out[slot] is not None or t.heads.value != want.value \
                or (t.heads.heads, t.heads.dim) != (want.heads, want.dim):
            raise self.fail("the relative terms are not one content-to-position term on the "
                            "query heads and one position-to-content term on the key heads")
        tab = t.table * np.float32(t.scale * t.heads.scale)
        out[slot] = np.ascontiguousarray(np.pad(tab, ((0, 0), (0, 0), (0, ROW_PAD))), np.float32)
        out[slot + 1] = np.ascontiguousarray(t.idx, np.int32)
    return out
