"""Plan passes after lowering: merge Q/K/V projections, fold residual NoNorms into the FC
before them, then map values to few buffers.

- `merge_qkv`: the three FCs feeding one attention op that read the same activation with
  the same weight type become one FC with N = 3H (one pass over the activation, one bigger
  GEMM); the attention op then reads q, k and v at column offsets 0, H and 2H of its output.
  When only q and k share their input (MobileBERT's shared Q/K bottleneck; v reads the
  wide hidden state), q and k become one FC with N = 2H read at offsets 0 and H.
- `fold_residual_norms`: MobileBERT's NoNorm after a residual Add, (x + r) * g + b with x an
  FC's output read by nothing else, becomes that FC's epilogue: the FC's weights and bias
  take g (W * g, bias * g + b) and the FC adds r * g to its output in the tile it just
  stored (FK_EPI_BIAS_RES), so the NoNorm pass over x and r, from L2, is gone.
- `allocate`: liveness-based reuse of activation buffers of equal width; an op's output
  never shares a buffer with its own inputs (GEMM and attention read inputs while writing).
"""

from __future__ import annotations

import numpy as np

from farm.routes.custom.ir import Ir, IrOp
from farm.routes.custom.plan_format import ACT_NONE, OP_ATTENTION, OP_FC, OP_NONORM


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
    if any(f.fc.groups > 1 for f in [q, *others]):  # type: ignore[union-attr]
        return False  # grouped FCs keep their own column blocks
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


def fold_residual_norms(ir: Ir) -> int:
    """Returns how many NoNorms became an FC epilogue (see the module docstring)."""
    producer = {op.out: op for op in ir.ops}
    users = _users(ir)
    outputs = {v for _, v in ir.outputs}
    folded = []
    for norm in [op for op in ir.ops if op.kind == OP_NONORM and len(op.ins) == 2]:
        x, r = norm.ins
        fc = producer.get(x)
        if (fc is None or fc.kind != OP_FC or fc.params[3] != ACT_NONE or fc.res_scale is not None
                or len(users.get(x, [])) != 1 or x in outputs or x in ir.seq_values
                # the FC reads r, so r must exist when the FC runs
                or not _ready_before(ir, producer, r, fc)):
            continue
        gamma, beta = (np.asarray(a, np.float32) for a in norm.arrays)
        fc.fc = fc.fc.scaled(gamma)  # type: ignore[union-attr]
        bias = np.zeros_like(gamma) if fc.bias is None else np.asarray(fc.bias, np.float32)
        fc.bias = (bias * gamma + beta).astype(np.float32)
        fc.res_scale = gamma
        fc.ins = [fc.ins[0], r]
        fc.out = norm.out
        folded.append(norm)
    for norm in folded:
        ir.ops.remove(norm)
    return len(folded)


def _ready_before(ir: Ir, producer: dict[int, IrOp], v: int, op: IrOp) -> bool:
    """Whether value v exists when `op` runs, moving v's producer earlier if it can be.

    Lowering emits an FC where its value is first used, so MobileBERT's input bottleneck
    (the attention output's residual) comes after the attention. Its input, the layer's
    hidden state, exists long before: the FC moves to just before the first other op that
    reads that input (the attention bottleneck and V, whose quantised input it then shares),
    or else to just before `op`."""
    made = producer.get(v)
    order = {id(o): i for i, o in enumerate(ir.ops)}
    if made is None or order[id(made)] < order[id(op)]:
        return True
    # the earliest place it can go: after whatever makes its inputs
    earliest = max((order[id(producer[i])] + 1 for i in made.ins if i in producer), default=0)
    if made.kind != OP_FC or earliest > order[id(op)]:
        return False
    peers = [o for o in ir.ops if o is not made and made.ins[0] in o.ins
             and order[id(o)] < order[id(op)]]
    at = max(order[id(peers[0])] if peers else order[id(op)], earliest)
    ir.ops.remove(made)  # it comes after `at`, so removing it shifts nothing before `at`
    ir.ops.insert(at, made)
    return True


def drop_dead(ir: Ir) -> int:
    """Drops ops whose value nothing reads (a fused pattern that broke half way left them:
    its consumer fell back and recomputed the tensor generically). Returns how many."""
    live = {v for _, v in ir.outputs}
    keep: list[IrOp] = []
    for op in reversed(ir.ops):
        if op.out in live:
            keep.append(op)
            live.update(v for v in op.ins if v >= 0)
    dropped = len(ir.ops) - len(keep)
    ir.ops[:] = keep[::-1]
    return dropped


def allocate(ir: Ir) -> tuple[dict[int, int], list[int]]:
    """value id -> buffer id, and the columns of each buffer."""
    last: dict[int, int] = {}
    for i, op in enumerate(ir.ops):
        for v in op.ins:
            if v >= 0:  # -1: a fallback op's constant operand
                last[v] = i
    pinned = {v for _, v in ir.outputs}
    assign: dict[int, int] = {}
    cols: list[int] = []
    seqs: list[int] = []
    free: list[int] = []
    for i, op in enumerate(ir.ops):
        need, seq = ir.cols[op.out], ir.kind(op.out)
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
        done = {v for v in op.ins if v >= 0 and last.get(v) == i and v not in pinned}
        if op.out not in last and op.out not in pinned:
            done.add(op.out)
        free.extend(assign[v] for v in done if assign[v] not in free)
    return assign, cols
