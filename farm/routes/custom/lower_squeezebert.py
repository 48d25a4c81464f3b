"""SqueezeBERT's channels-first encoder (used by lower.py and lower_ops.py).

SqueezeBERT keeps its hidden state as [B, C, S] (`Transpose(0, 2, 1)` of the token rows) and
runs every projection as a grouped 1x1 `Conv` over the sequence. The executor keeps the
token rows [B*S, C] and reads the channels-first tensor as their transpose (`ChanFirst`):
- `Transpose [0,2,1]` of an activation is `ChanFirst` of it, and back;
- `Conv` 1x1 (stride 1, no pad) with constant weights [M, C/G, 1] of a `ChanFirst` is an FC
  over the token rows: dense when G = 1, else a grouped FC (G GEMMs side by side, each on
  its block of the weights: FcWeights.groups; dense block-diagonal when the blocks are not
  whole 16-column panels or the FC is quantised);
- elementwise ops (residual Add, the erf GELU chain) on `ChanFirst` values run on the rows
  inside, wrapped again (`unwrap` / `wrap` around the usual handlers);
- attention: `Reshape [B, H, D, S]` of a `ChanFirst` is `SplitCF` (channel h*D + d, as the
  token rows' head split), its `Transpose [0,1,3,2]` the heads, used as is the keys
  transposed; the context's `Transpose [0,1,3,2]` and `Reshape [B, C, S]` end as `ChanFirst`
  of the fused attention.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
from onnx import NodeProto

from farm.routes.custom.ir import FcWeights
from farm.routes.custom.lowering import LowererApi
from farm.routes.custom.plan_format import ACT_NONE, W_F32
from farm.routes.custom.values import ACTIVATIONS, Const, Context, Heads, Lin

NR = 16  # the GEMMs' weight panel width (fk.h FK_NR)
ELEMENTWISE = ("Add", "Sub", "Mul", "Div", "Erf")


@dataclass(frozen=True)
class ChanFirst:
    """The [B, C, S] transpose of the token rows `inner` (a pending or materialised value)."""

    inner: object


@dataclass(frozen=True)
class SplitCF:
    """`Reshape [B, H, D, S]` of a ChanFirst: heads over the token rows `value`."""

    value: int
    heads: int
    dim: int


@dataclass(frozen=True)
class ContextCF:
    """The attention context transposed to [B, H, D, S], waiting for its Reshape."""

    ctx: Context


def _perm(node: NodeProto) -> list[int] | None:
    return next((list(a.ints) for a in node.attribute if a.name == "perm"), None)


def transpose(self: LowererApi, node: NodeProto, ins: list[Any]) -> Any:
    x, perm = ins[0], _perm(node)
    if perm == [0, 2, 1] and isinstance(x, ChanFirst):
        return x.inner
    if perm == [0, 2, 1] and isinstance(x, ACTIVATIONS):
        return ChanFirst(x)
    if perm == [0, 1, 3, 2] and isinstance(x, SplitCF):
        return Heads(x.value, x.heads, x.dim, False)
    if perm == [0, 1, 3, 2] and isinstance(x, Context) and not x.merged:
        return ContextCF(x)
    return None


def reshape(self: LowererApi, node: NodeProto, ins: list[Any], attention: Any) -> Any:
    x, shape = ins
    if not isinstance(shape, Const):
        return None
    dims = [int(d) for d in shape.arr.reshape(-1)]
    if isinstance(x, ChanFirst) and len(dims) == 4:
        v = self.act(x.inner)
        cols = self.ir.cols[v]
        h, d = dims[1], dims[2]
        if h == -1 and d > 0:
            h = cols // d
        if d == -1 and h > 0:
            d = cols // h
        if h > 0 and d > 0 and h * d == cols:
            return SplitCF(v, h, d)
    if isinstance(x, ContextCF) and len(dims) == 3:
        return ChanFirst(attention(self, node, Context(x.ctx.probs, x.ctx.v, True)))
    return None


def matmul_keys(ins: list[Any]) -> tuple[Heads, Heads] | None:
    """Q·K with K the channels-first split itself ([B, H, D, S] is Kᵀ)."""
    a, b = ins
    if isinstance(a, Heads) and not a.transposed and isinstance(b, SplitCF):
        return a, Heads(b.value, b.heads, b.dim, True)
    return None


def conv(self: LowererApi, node: NodeProto, ins: list[Any]) -> Any:
    x, w = ins[:2]
    bias = ins[2] if len(ins) > 2 else None
    attrs = {a.name: a for a in node.attribute}
    groups = attrs["group"].i if "group" in attrs else 1
    ones = all(list(attrs[k].ints) in ([], [1]) for k in ("strides", "dilations", "kernel_shape")
               if k in attrs)
    no_pad = "pads" not in attrs or not any(attrs["pads"].ints)
    if not (isinstance(x, ChanFirst) and isinstance(w, Const) and w.arr.ndim == 3
            and w.arr.shape[2] == 1 and ones and no_pad
            and (bias is None or isinstance(bias, Const))):
        return None
    m, cg = w.arr.shape[:2]
    c = cg * groups
    dense = np.zeros((c, m), np.float32)
    mg = m // groups
    for j in range(groups):  # W[j mg + o, i, 0] -> dense[j cg + i, j mg + o]
        dense[j * cg:(j + 1) * cg, j * mg:(j + 1) * mg] = w.arr[j * mg:(j + 1) * mg, :, 0].T
    lin = self.fc(x.inner, dense)
    if groups > 1 and lin.fc.wtype == W_F32 and mg % NR == 0:
        lin = Lin(lin.x, FcWeights(W_F32, lin.fc.w, groups=groups), None, ACT_NONE, lin.name)
    if bias is not None:
        lin = Lin(lin.x, lin.fc, bias.arr.reshape(-1).astype(np.float32), ACT_NONE, lin.name)
    return ChanFirst(lin)


def unwrap(node: NodeProto, ins: list[Any]) -> list[Any] | None:
    """The inputs of an elementwise node on channels-first values, unwrapped; None when it
    is not one (other inputs must be scalar constants)."""
    if node.op_type not in ELEMENTWISE or not any(isinstance(v, ChanFirst) for v in ins):
        return None
    if not all(isinstance(v, ChanFirst) or (isinstance(v, Const) and v.arr.size == 1)
               for v in ins if v is not None):
        return None
    return [v.inner if isinstance(v, ChanFirst) else v for v in ins]
