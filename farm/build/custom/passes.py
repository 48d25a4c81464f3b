"""Plan passes after lowering: merge Q/K/V projections, then map values to few buffers.

- `merge_qkv`: the three FCs feeding one attention op that read the same activation with
  the same weight type become one FC with N = 3H (one pass over the activation, one bigger
  GEMM); the attention op then reads q, k and v at column offsets 0, H and 2H of its output.
  When only q and k share their input (MobileBERT's shared Q/K bottleneck; v reads the
  wide hidden state), q and k become one FC with N = 2H read at offsets 0 and H.
- `allocate`: liveness-based reuse of activation buffers of equal width; an op's output
  never shares a buffer with its own inputs (GEMM and attention read inputs while writing).
"""

from __future__ import annotations

import numpy as np

from farm.build.custom.ir import Ir, IrOp
from farm.build.custom.plan_format import ACT_NONE, OP_ATTENTION, OP_FC


def _users(ir: Ir) -> dict[int, list[IrOp]]:
    users: dict[int, list[IrOp]] = {}
    for op in ir.ops:
        for v in op.ins:
            users.setdefault(v, []).append(op)
    return users


def merge_qkv(ir: Ir) -> int:
    """Returns how many attention ops had their projections merged."""
    producer = {op.out: op for op in ir.ops}
    users = _users(ir)
    outputs = {v for _, v in ir.outputs}
    merged = 0
    for att in [op for op in ir.ops if op.kind == OP_ATTENTION]:
        fcs = [producer.get(v) for v in att.ins[:3]]
        if len({id(f) for f in fcs}) != 3 or any(f is None or f.kind != OP_FC for f in fcs):
            continue
        q, k, v = fcs  # type: ignore[misc]
        private = all(len(users.get(f.out, [])) == 1 and f.out not in outputs  # type: ignore[union-attr]
                      for f in fcs)
        if not private:
            continue
        if not _mergeable(q, [k, v]):  # type: ignore[arg-type]
            if _mergeable(q, [k]):  # type: ignore[arg-type]
                _merge_qk(ir, att, q, k)  # type: ignore[arg-type]
                merged += 1
            continue
        n = q.fc.n  # type: ignore[union-attr]
        name = q.name.rsplit("/", 2)[0] + "/qkv/MatMul"
        fused = IrOp(OP_FC, name, [q.ins[0]], ir.new_value(3 * n),
                     fc=q.fc.concat([k.fc, v.fc]),  # type: ignore[union-attr]
                     bias=None if q.bias is None else
                     np.concatenate([q.bias, k.bias, v.bias]),  # type: ignore[union-attr]
                     params=[q.fc.wtype, 3 * n, q.params[2], ACT_NONE])  # type: ignore[union-attr]
        at = ir.ops.index(q)  # type: ignore[arg-type]
        for f in fcs:
            ir.ops.remove(f)  # type: ignore[arg-type]
        ir.ops.insert(min(at, ir.ops.index(att)), fused)
        att.ins = [fused.out] * 3
        att.params[2:5] = [0, n, 2 * n]
        merged += 1
    return merged


def _mergeable(q: IrOp, others: list[IrOp]) -> bool:
    return all(f.ins[0] == q.ins[0] and f.fc.wtype == q.fc.wtype  # type: ignore[union-attr]
               and f.params[3] == ACT_NONE and q.params[3] == ACT_NONE
               and (f.bias is None) == (q.bias is None) for f in others)


def _merge_qk(ir: Ir, att: IrOp, q: IrOp, k: IrOp) -> None:
    n = q.fc.n  # type: ignore[union-attr]
    name = q.name.rsplit("/", 2)[0] + "/qk/MatMul"
    fused = IrOp(OP_FC, name, [q.ins[0]], ir.new_value(2 * n),
                 fc=q.fc.concat([k.fc]),  # type: ignore[union-attr]
                 bias=None if q.bias is None else np.concatenate([q.bias, k.bias]),  # type: ignore[list-item]
                 params=[q.fc.wtype, 2 * n, q.params[2], ACT_NONE])  # type: ignore[union-attr]
    at = min(ir.ops.index(q), ir.ops.index(k))
    ir.ops.remove(q)
    ir.ops.remove(k)
    ir.ops.insert(at, fused)
    att.ins = [fused.out, fused.out, att.ins[2]]
    att.params[2:5] = [0, n, 0]


def allocate(ir: Ir) -> tuple[dict[int, int], list[int]]:
    """value id -> buffer id, and the columns of each buffer."""
    last: dict[int, int] = {}
    for i, op in enumerate(ir.ops):
        for v in op.ins:
            last[v] = i
    pinned = {v for _, v in ir.outputs}
    assign: dict[int, int] = {}
    cols: list[int] = []
    seqs: list[bool] = []
    free: list[int] = []
    for i, op in enumerate(ir.ops):
        need, seq = ir.cols[op.out], op.out in ir.seq_values
        # Buffers carry their width (the executor's row stride) and row kind (per token or
        # per sequence), so reuse needs both equal.
        fits = [b for b in free if cols[b] == need and seqs[b] == seq]
        if fits:
            buf = fits[0]
        else:
            cols.append(need)
            seqs.append(seq)
            buf = len(cols) - 1
        if buf in free:
            free.remove(buf)
        assign[op.out] = buf
        done = {v for v in op.ins if last.get(v) == i and v not in pinned}
        if op.out not in last and op.out not in pinned:
            done.add(op.out)
        free.extend(assign[v] for v in done if assign[v] not in free)
    return assign, cols
