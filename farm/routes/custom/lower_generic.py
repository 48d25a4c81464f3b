"""The generic fallback of the lowering: an ONNX node the fused patterns do not take becomes
one OP_GENERIC executor op (kernels/runtime/generic.h) with its shapes bound at build time.

`Fallback(lowerer)` lowers a node by name on demand: `value(name)` is the executor value
holding ONNX tensor `name` in C order. A fused pending value whose layout is the tensor's
(values.ACTIVATIONS) is materialised as it is; any other pending value (attention parts, a
mask function) is recomputed by lowering its producer node generically, so a fused pattern
that breaks half way costs the generic ops of the broken part only.

Shapes come from one ONNX Runtime run of the (shape-bound) canonical file with every tensor
as an output (`probe_shapes`): exact where onnx's inference leaves a dim unknown (DeBERTa's
Expand/GatherElements chains). Shape, Size and ConstantOfShape then fold to constants for the
bound shape. Values are f32 (integer/boolean tensors exact below 2^24, generic.h).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import onnx

from farm.errors import BuildError
from farm.routes.custom.generic_meta import (
    BINARY,
    CONV,
    CUMSUM,
    EW,
    F_BOOL,
    F_CLIP,
    F_FMOD,
    F_GELU,
    F_MOD,
    F_TRUNC,
    F_WHERE,
    FOLDED,
    GATHER,
    INPUT,
    INT_TYPES,
    MATMUL,
    RANGE,
    RANK,
    REDUCE,
    REDUCES,
    RESHAPES,
    SOFTMAX,
    SUPPORTED,
    UNARY,
    Flat,
    attr,
    bcast,
    cstrides,
    norm_axis,
    probe_shapes,
)
from farm.routes.custom.ir import IrOp
from farm.routes.custom.plan_format import OP_GENERIC
from farm.routes.custom.values import ACTIVATIONS, Act, Const, Input


class Fallback:
    """Generic lowering bound to one Lowerer (lower.py); see the module docstring."""

    def __init__(self, low: Any) -> None:
        self.low = low
        self.shapes: dict[str, tuple[tuple[int, ...], bool]] | None = None
        self.memo: dict[str, Any] = {}
        self.inputs: dict[int, int] = {}
        self.producer = {o: n for n in low.graph.node for o in n.output}
        self.nodes: list[tuple[str, str, str]] = []  # (node, op, why) of every fallback node
        b_s = [(d[0], d[1]) for d in self._input_dims() if len(d) == 2]
        self.B, self.S = b_s[0] if b_s else (0, 0)

    def _input_dims(self) -> list[list[int]]:
        inits = {i.name for i in self.low.graph.initializer}
        return [[d.dim_value for d in gi.type.tensor_type.shape.dim]
                for gi in self.low.graph.input if gi.name not in inits]

    # -- shapes ----------------------------------------------------------------------------
    def shape(self, name: str) -> tuple[int, ...]:
        v = self.low.vals.get(name)
        if isinstance(v, Const):
            return tuple(v.arr.shape)
        if self.shapes is None:
            if self.B <= 0 or self.S <= 0:
                raise self.low.fail("the fallback ops need bound input shapes",
                                    hint="give --seq (and --batch)")
            self.shapes = probe_shapes(self.low.model)
        if name not in self.shapes:
            raise self.low.fail(f"no shape for tensor {name!r}")
        return self.shapes[name][0]

    def is_int(self, name: str) -> bool:
        self.shape(name)
        v = self.low.vals.get(name)
        if isinstance(v, Const):
            return bool(np.issubdtype(v.arr.dtype, np.integer) or v.arr.dtype == np.bool_)
        return self.shapes[name][1]  # type: ignore[index]

    # -- operands --------------------------------------------------------------------------
    def operand(self, name: str) -> tuple[int, np.ndarray | None]:
        """(buffer value id, -1) or (-1, constant array) of tensor `name`."""
        v = self.low.vals.get(name)
        if isinstance(v, Const):
            return -1, np.ascontiguousarray(v.arr, dtype=np.float32).reshape(-1) \
                if v.arr.size else np.zeros(1, np.float32)
        return self.value(name), None

    def value(self, name: str) -> int:
        v = self.low.vals.get(name)
        if isinstance(v, Flat):
            return v.value
        if isinstance(v, Input):
            if v.slot not in self.inputs:
                self.inputs[v.slot] = self.emit(f"{name}/as_f32", INPUT, [], [], (self.B * self.S,),
                                                p1=v.slot).value  # type: ignore[union-attr]
            return self.inputs[v.slot]
        if isinstance(v, ACTIVATIONS):
            return self.low.act(v)
        if name in self.memo:
            got = self.memo[name]
            return got.value
        node = self.producer.get(name)
        if node is None:
            raise self.low.fail(f"tensor {name!r} has no producer to recompute")
        saved = self.low.node
        self.low.node = node
        try:
            outs = self.lower(node, "recomputed for a fallback consumer")
        finally:
            self.low.node = saved
        for o, val in zip(node.output, outs, strict=False):
            self.memo[o] = val
        got = self.memo[name]
        if isinstance(got, Const):
            raise self.low.fail(f"tensor {name!r} folded to a constant")
        return got.value

    # -- emission --------------------------------------------------------------------------
    def emit(self, name: str, kind: int, meta: list[int], ops: list[tuple[int, np.ndarray | None]],
             shape: tuple[int, ...], p1: int = 0, p2: int = 0,
             floats: tuple[float, ...] = ()) -> Act | Flat:
        ir = self.low.ir
        n = max(1, math.prod(shape))
        B, S = self.B, self.S
        if len(shape) >= 2 and math.prod(shape[:-1]) == B * S and shape[-1] > 0:
            cols, kind_rows = shape[-1], "tokens"
        elif len(shape) == 2 and shape[0] == B:
            cols, kind_rows = shape[1], "seqs"
        else:
            cols, kind_rows = n, "flat"
        out = ir.new_value(cols)
        if kind_rows == "seqs":
            ir.seq_values.add(out)
        elif kind_rows == "flat":
            ir.flat_values.add(out)
        ins = [v for v, _ in ops] + [-1] * (4 - len(ops))
        arrays: list[np.ndarray | None] = [np.asarray([B, S, *meta], np.int64)]
        arrays += [c for _, c in ops] + [None] * (3 - len(ops))
        ir.ops.append(IrOp(OP_GENERIC, name, ins, out, arrays=arrays,
                           params=[kind, p1, p2], floats=list(floats)))
        return Act(out) if kind_rows != "flat" else Flat(out)

    # -- lowering --------------------------------------------------------------------------
    def lower(self, node: onnx.NodeProto, why: str) -> list[Any]:
        """The node's output values, lowered generically (raises when no kernel exists)."""
        op = node.op_type
        if node.domain not in ("", "ai.onnx") or op not in SUPPORTED:
            raise BuildError(f"custom plan: node {node.name!r} ({op}): no executor kernel, fused "
                             "or fallback", hint="use the ort or tvm route for this model")
        if op not in FOLDED:  # a shape-only node folds for the bound shape: no kernel runs
            self.nodes.append((node.name, op, why))
        outs = getattr(self, f"_{op}", None)
        if outs is not None:
            return outs(node)
        if op in UNARY:
            return [self._ew(node, [node.input[0]], UNARY[op])]
        if op in BINARY:
            if op in ("Min", "Max") and len(node.input) != 2:
                raise self.low.fail(f"{op} of {len(node.input)} inputs has no fallback kernel")
            return [self._ew(node, list(node.input[:2]), BINARY[op])]
        if op in REDUCES:
            return [self._reduce(node)]
        if op in RESHAPES:
            return [self.reshape_node(node)]
        raise self.low.fail("no fallback kernel")

    def _const_in(self, node: onnx.NodeProto, i: int) -> np.ndarray | None:
        if len(node.input) <= i or not node.input[i]:
            return None
        v = self.low.vals.get(node.input[i])
        if not isinstance(v, Const):
            raise self.low.fail(f"input {i} must be a constant for the fallback kernel")
        return v.arr

    def _ew(self, node: onnx.NodeProto, names: list[str], fn: int,
            floats: tuple[float, ...] = ()) -> Act | Flat:
        out = self.shape(node.output[0])
        if len(out) > RANK:
            raise self.low.fail(f"rank {len(out)} (the fallback handles {RANK})")
        meta = [len(out), *out, len(names)]
        for n in names:
            meta += bcast(self.shape(n), out)
        integer = int(fn == BINARY["Div"] and self.is_int(node.output[0]))
        return self.emit(node.name, EW, meta, [self.operand(n) for n in names], out, fn, integer,
                         floats)

    def _Where(self, node: onnx.NodeProto) -> list[Any]:
        return [self._ew(node, list(node.input[:3]), F_WHERE)]

    def _Mod(self, node: onnx.NodeProto) -> list[Any]:
        fn = F_FMOD if attr(node, "fmod", 0) else F_MOD
        return [self._ew(node, list(node.input[:2]), fn)]

    def _Clip(self, node: onnx.NodeProto) -> list[Any]:
        lo, hi = self._const_in(node, 1), self._const_in(node, 2)
        return [self._ew(node, [node.input[0]], F_CLIP,
                         (float(lo) if lo is not None else -3.0e38,
                          float(hi) if hi is not None else 3.0e38))]

    def _Gelu(self, node: onnx.NodeProto) -> list[Any]:
        if attr(node, "approximate", b"none") not in (b"none", "none"):
            raise self.low.fail("tanh Gelu has no fallback kernel")
        return [self._ew(node, [node.input[0]], F_GELU)]

    def _Cast(self, node: onnx.NodeProto) -> list[Any]:
        to = attr(node, "to")
        fn = (F_BOOL if to == onnx.TensorProto.BOOL else F_TRUNC if to in INT_TYPES
              else UNARY["Identity"])
        return [self._ew(node, [node.input[0]], fn)]

    def _Shape(self, node: onnx.NodeProto) -> list[Any]:
        dims = np.asarray(self.shape(node.input[0]), np.int64)
        start, end = attr(node, "start", 0), attr(node, "end", None)
        return [Const(dims[start:end])]

    def _Size(self, node: onnx.NodeProto) -> list[Any]:
        return [Const(np.asarray(math.prod(self.shape(node.input[0])), np.int64))]

    def _ConstantOfShape(self, node: onnx.NodeProto) -> list[Any]:
        val = attr(node, "value")
        arr = onnx.numpy_helper.to_array(val) if val is not None else np.zeros(1, np.float32)
        return [Const(np.full(self.shape(node.output[0]), arr.reshape(-1)[0], arr.dtype))]

    def _Gather(self, node: onnx.NodeProto) -> list[Any]:
        data, idx = node.input[:2]
        ds = self.shape(data)
        axis = norm_axis(attr(node, "axis", 0), len(ds))
        m = max(1, math.prod(self.shape(idx)))
        meta = [math.prod(ds[:axis]), ds[axis], math.prod(ds[axis + 1:]), m]
        return [self.emit(node.name, GATHER, meta, [self.operand(data), self.operand(idx)],
                          self.shape(node.output[0]))]

    def _GatherElements(self, node: onnx.NodeProto) -> list[Any]:
        data, idx = node.input[:2]
        ds, xs = self.shape(data), self.shape(idx)
        axis = norm_axis(attr(node, "axis", 0), len(ds))
        meta = [len(xs), *xs, *cstrides(ds), axis, ds[axis]]
        return [self.emit(node.name, GATHER, meta, [self.operand(data), self.operand(idx)], xs,
                          p1=1)]

    def _MatMul(self, node: onnx.NodeProto) -> list[Any]:
        a, b = node.input[:2]
        sa, sb = self.shape(a), self.shape(b)
        a2 = (1, *sa) if len(sa) == 1 else sa
        b2 = (*sb, 1) if len(sb) == 1 else sb
        M, K, N = a2[-2], a2[-1], b2[-1]
        r = max(len(a2), len(b2)) - 2
        ab = (1,) * (r - len(a2) + 2) + tuple(a2[:-2])
        bb = (1,) * (r - len(b2) + 2) + tuple(b2[:-2])
        bd = [max(x, y) for x, y in zip(ab, bb, strict=True)]
        ast, bst = cstrides((*ab, M * K)), cstrides((*bb, K * N))
        meta = [r, *bd, *[0 if ab[d] == 1 else ast[d] for d in range(r)],
                *[0 if bb[d] == 1 else bst[d] for d in range(r)], M, K, N]
        return [self.emit(node.name, MATMUL, meta, [self.operand(a), self.operand(b)],
                          self.shape(node.output[0]))]

    def _softmax(self, node: onnx.NodeProto, log: int) -> list[Any]:
        x = node.input[0]
        xs = self.shape(x)
        axis = norm_axis(attr(node, "axis", -1), len(xs))
        meta = [math.prod(xs[:axis]), xs[axis], math.prod(xs[axis + 1:])]
        return [self.emit(node.name, SOFTMAX, meta, [self.operand(x)], xs, p1=log)]

    def _Softmax(self, node: onnx.NodeProto) -> list[Any]:
        return self._softmax(node, 0)

    def _LogSoftmax(self, node: onnx.NodeProto) -> list[Any]:
        return self._softmax(node, 1)

    def _reduce(self, node: onnx.NodeProto) -> Act | Flat:
        x = node.input[0]
        xs = self.shape(x)
        axes = attr(node, "axes")
        if axes is None and len(node.input) > 1 and node.input[1]:
            axes = [int(a) for a in self._const_in(node, 1)]  # type: ignore[union-attr]
        if not axes:
            axes = [] if attr(node, "noop_with_empty_axes", 0) else list(range(len(xs)))
        red = {norm_axis(a, len(xs)) for a in axes}
        kept = tuple(1 if d in red else xs[d] for d in range(len(xs)))
        ost = cstrides(kept)
        meta = [len(xs), *xs, *[0 if d in red else ost[d] for d in range(len(xs))],
                max(1, math.prod(kept)), max(1, math.prod(xs[d] for d in red))]
        return self.emit(node.name, REDUCE, meta, [self.operand(x)], self.shape(node.output[0]),
                         p1=REDUCES[node.op_type])

    def _Conv(self, node: onnx.NodeProto) -> list[Any]:
        x, w = node.input[:2]
        xs, ws, out = self.shape(x), self.shape(w), self.shape(node.output[0])
        if attr(node, "auto_pad", b"NOTSET") not in (b"NOTSET", "NOTSET") or len(xs) not in (3, 4):
            raise self.low.fail("Conv fallback takes 1-D/2-D convolutions with explicit pads")
        nd = len(xs) - 2
        k = list(ws[2:])
        strides = list(attr(node, "strides", [1] * nd))
        dil = list(attr(node, "dilations", [1] * nd))
        pads = list(attr(node, "pads", [0] * 2 * nd))[:nd]
        sp_in, sp_out = list(xs[2:]), list(out[2:])
        if nd == 1:  # as 2-D with height 1
            k, strides, dil, pads, sp_in, sp_out = ([1, *v] if i != 3 else [0, *v]
                                                    for i, v in enumerate(
                                                        (k, strides, dil, pads, sp_in, sp_out)))
        meta = [xs[0], xs[1], ws[0], int(attr(node, "group", 1)), 2, *sp_in, *sp_out, *k,
                *strides, *pads, *dil]
        ops = [self.operand(x), self.operand(w)]
        if len(node.input) > 2 and node.input[2]:
            ops.append(self.operand(node.input[2]))
        return [self.emit(node.name, CONV, meta, ops, out)]

    def _CumSum(self, node: onnx.NodeProto) -> list[Any]:
        x = node.input[0]
        xs = self.shape(x)
        axis = norm_axis(int(self._const_in(node, 1).reshape(-1)[0]), len(xs))  # type: ignore[union-attr]
        mode = int(bool(attr(node, "exclusive", 0))) | 2 * int(bool(attr(node, "reverse", 0)))
        meta = [math.prod(xs[:axis]), xs[axis], math.prod(xs[axis + 1:])]
        return [self.emit(node.name, CUMSUM, meta, [self.operand(x)], xs, p1=mode)]

    def _Range(self, node: onnx.NodeProto) -> list[Any]:
        out = self.shape(node.output[0])
        return [self.emit(node.name, RANGE, [max(1, math.prod(out))],
                          [self.operand(node.input[0]), self.operand(node.input[2])], out)]

    # data movement (lower_generic_copy.py)
    from farm.routes.custom.lower_generic_copy import (
        _Concat,
        _Expand,
        _Identity,
        _Pad,
        _Slice,
        _Split,
        _Tile,
        _Transpose,
        copy,
        reshape_node,
    )
