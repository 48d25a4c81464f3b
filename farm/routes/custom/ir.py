"""The plan compiler's intermediate form: ops over virtual values, weights in logical form.

Lowering (lower.py) emits `IrOp`s whose `ins`/`out` are virtual value ids (one per tensor
produced) and whose FC weights are `FcWeights` in logical form, so passes (passes.py) can still
merge matrices; `finalize` turns the result into a `Plan` (packed weights, physical buffers).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from farm.routes.custom import weights as W
from farm.routes.custom.plan_format import (
    BUF_FLAT,
    BUF_SEQS,
    BUF_TOKENS,
    OP_FC,
    W_F32,
    W_I8,
    W_Q4_0,
    Plan,
    PlanOp,
)


@dataclass
class FcWeights:
    """Weights of one FC in logical form.

    f32: w [K, N]; i8: w [N, K] int8 + scale [N]; q4: w = ggml Q4_0 blocks [N, nb*20] uint8.
    `tensors()` packs them into the kernels' panel layouts.
    """

    wtype: int
    w: np.ndarray
    scale: np.ndarray | None = None
    # > 1: a grouped fp32 FC (SqueezeBERT's grouped 1x1 convolutions): w is the dense
    # block-diagonal [K, N], packed as `groups` [K/G, N/G] blocks (exec.c fc_gemm)
    groups: int = 1

    @property
    def n(self) -> int:
        return int(self.w.shape[1] if self.wtype == W_F32 else self.w.shape[0])

    def concat(self, others: list[FcWeights]) -> FcWeights:
        """Weights of [self | others...] along N (all of one wtype)."""
        parts = [self, *others]
        if self.wtype == W_F32:
            return FcWeights(W_F32, np.concatenate([p.w for p in parts], axis=1))
        w = np.concatenate([p.w for p in parts], axis=0)
        scale = None if self.scale is None else np.concatenate([p.scale for p in parts])  # type: ignore[misc]
        return FcWeights(self.wtype, w, scale)

    def scaled(self, gamma: np.ndarray) -> FcWeights:
        """Weights of (x . W) * gamma, gamma one factor per output column (NoNorm folded)."""
        g = gamma.astype(np.float32)
        if self.wtype == W_F32:
            return FcWeights(W_F32, (self.w * g[None, :]).astype(np.float32), groups=self.groups)
        if self.wtype == W_I8:
            assert self.scale is not None
            return FcWeights(W_I8, self.w, (self.scale * g).astype(np.float32))
        blocks = np.ascontiguousarray(self.w, np.uint8).reshape(self.n, -1).view(W.Q4_BLOCK).copy()
        blocks["d"] *= g[:, None]  # w = d * (q - 8): the block scale carries the column factor
        return FcWeights(W_Q4_0, blocks.view(np.uint8).reshape(self.n, -1))

    def tensors(self) -> tuple[np.ndarray, np.ndarray | None]:
        if self.groups > 1:
            k, n = self.w.shape[0] // self.groups, self.n // self.groups
            return np.concatenate([W.pack_f32(self.w[j * k:(j + 1) * k, j * n:(j + 1) * n])
                                   for j in range(self.groups)]), None
        if self.wtype == W_F32:
            return W.pack_f32(self.w), None
        if self.wtype == W_I8:
            return W.pack_i8(self.w), self.scale
        assert self.wtype == W_Q4_0
        return W.pack_q4_panels(self.w, self.n), None


@dataclass
class IrOp:
    kind: int
    name: str
    ins: list[int]
    out: int
    arrays: list[np.ndarray | None] = field(default_factory=list)  # non-FC tensors
    fc: FcWeights | None = None
    bias: np.ndarray | None = None
    res_scale: np.ndarray | None = None  # FC: + ins[1] * res_scale after the bias (passes.py)
    params: list[int] = field(default_factory=list)
    floats: list[float] = field(default_factory=list)


@dataclass
class Ir:
    inputs: list[tuple[str, int]] = field(default_factory=list)
    outputs: list[tuple[str, int]] = field(default_factory=list)  # (name, value id)
    cols: list[int] = field(default_factory=list)                 # per value id
    ops: list[IrOp] = field(default_factory=list)
    seq_values: set[int] = field(default_factory=set)  # one row per sequence (after OP_ROW)
    flat_values: set[int] = field(default_factory=set)  # a fallback tensor (BUF_FLAT)
    # (node, op type, why) of every node lowered by the generic fallback (lower_generic.py)
    fallback: list[tuple[str, str, str]] = field(default_factory=list)

    def kind(self, v: int) -> int:
        """The row kind of value v's buffer."""
        return BUF_SEQS if v in self.seq_values else BUF_FLAT if v in self.flat_values \
            else BUF_TOKENS

    def new_value(self, cols: int) -> int:
        self.cols.append(int(cols))
        return len(self.cols) - 1


def finalize(ir: Ir, assign: dict[int, int], n_bufs_cols: list[int],
             features: set[str]) -> Plan:
    """Plan with tensors laid out for the kernels and values mapped to physical buffers."""
    rows = [BUF_TOKENS] * len(n_bufs_cols)
    for v in ir.seq_values | ir.flat_values:
        if v in assign:
            rows[assign[v]] = ir.kind(v)  # allocate() never shares a buffer across row kinds
    plan = Plan(inputs=list(ir.inputs), bufs=list(n_bufs_cols), buf_rows=rows,
                features=set(features))
    plan.outputs = [(name, assign[v]) for name, v in ir.outputs]
    for op in ir.ops:
        tens: list[int | None] = []
        if op.kind == OP_FC:
            assert op.fc is not None
            w, scale = op.fc.tensors()
            tens = [plan.add_tensor(w),
                    None if op.bias is None else plan.add_tensor(op.bias.astype(np.float32)),
                    None if scale is None else plan.add_tensor(scale.astype(np.float32)),
                    None if op.res_scale is None
                    else plan.add_tensor(op.res_scale.astype(np.float32))]
        else:
            tens = [None if a is None else plan.add_tensor(a) for a in op.arrays]
        plan.ops.append(PlanOp(op.kind, op.name, [assign[v] if v >= 0 else -1 for v in op.ins],
                               assign[op.out], tens, list(op.params), list(op.floats)))
    return plan
