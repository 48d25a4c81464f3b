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
from dataclasses import dataclass
from typing import Any

import numpy as np
import onnx

from farm.errors import BuildError
from farm.routes.custom.ir import IrOp
from farm.routes.custom.plan_format import OP_GENERIC
from farm.routes.custom.values import ACTIVATIONS, Act, Const, Input

# generic kinds and functions (kernels/runtime/generic.h)
EW, COPY, GATHER, MATMUL, SOFTMAX, REDUCE, CONV, CUMSUM, RANGE, INPUT = range(10)
UNARY = {"Identity": 0, "Neg": 1, "Abs": 2, "Sqrt": 3, "Exp": 4, "Log": 5, "Erf": 6, "Tanh": 7,
         "Sigmoid": 8, "Relu": 9, "Not": 10, "Sign": 11, "Ceil": 12, "Floor": 13, "Round": 14,
         "Reciprocal": 15, "Softplus": 20, "Sin": 21, "Cos": 22, "IsNaN": 23, "IsInf": 24}
F_TRUNC, F_BOOL, F_CLIP, F_GELU = 16, 17, 18, 19
BINARY = {"Add": 32, "Sub": 33, "Mul": 34, "Div": 35, "Pow": 36, "Min": 37, "Max": 38,
          "Equal": 39, "Less": 40, "Greater": 41, "LessOrEqual": 42, "GreaterOrEqual": 43,
          "And": 44, "Or": 45, "Xor": 46}
F_MOD, F_FMOD, F_WHERE = 47, 48, 64
REDUCES = {"ReduceSum": 0, "ReduceMean": 1, "ReduceMax": 2, "ReduceMin": 3, "ReduceProd": 4,
           "ReduceSumSquare": 5, "ReduceL2": 6, "ReduceL1": 7, "ReduceLogSumExp": 8}
RESHAPES = ("Reshape", "Squeeze", "Unsqueeze", "Flatten")
COPIES = ("Transpose", "Slice", "Expand", "Tile", "Concat", "Pad", "Split")
OTHERS = ("Where", "Clip", "Cast", "Gelu", "Mod", "Gather", "GatherElements", "MatMul", "Softmax",
          "LogSoftmax", "Conv", "CumSum", "Range", "Shape", "Size", "ConstantOfShape")
FOLDED = ("Shape", "Size", "ConstantOfShape")
SUPPORTED = frozenset([*UNARY, *BINARY, *REDUCES, *RESHAPES, *COPIES, *OTHERS])
INT_TYPES = {onnx.TensorProto.INT64, onnx.TensorProto.INT32, onnx.TensorProto.INT16,
             onnx.TensorProto.INT8, onnx.TensorProto.UINT8, onnx.TensorProto.UINT16,
             onnx.TensorProto.UINT32, onnx.TensorProto.UINT64}
RANK = 8


@dataclass(frozen=True)
class Flat:
    """A fallback tensor in a buffer of its own shape (plan BUF_FLAT)."""

    value: int


def probe_shapes(model: onnx.ModelProto) -> dict[str, tuple[tuple[int, ...], bool]]:
    """{tensor: (shape, is integer)} from one ORT run with every tensor as an output."""
    import onnxruntime as ort

    m = onnx.ModelProto()
    m.CopyFrom(model)
    have = {o.name for o in m.graph.output}
    for n in m.graph.node:
        for o in n.output:
            if o and o not in have:
                m.graph.output.append(onnx.ValueInfoProto(name=o))
                have.add(o)
    inits = {i.name for i in m.graph.initializer}
    feeds = {}
    for gi in m.graph.input:
        if gi.name in inits:
            continue
        dims = [d.dim_value if d.HasField("dim_value") else 0
                for d in gi.type.tensor_type.shape.dim]
        if any(d <= 0 for d in dims):
            raise BuildError(f"custom plan: input {gi.name!r} has no bound shape, which the "
                             "executor's fallback ops need", hint="give --seq (and --batch)")
        dt = onnx.helper.tensor_dtype_to_np_dtype(gi.type.tensor_type.elem_type)
        feeds[gi.name] = np.ones(dims, dt)  # ids 1, mask 1: shapes do not depend on values
    opts = ort.SessionOptions()
    opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    opts.log_severity_level = 3
    try:
        sess = ort.InferenceSession(m.SerializeToString(), opts, providers=["CPUExecutionProvider"])
        names = [o.name for o in sess.get_outputs()]
        outs = sess.run(names, feeds)
    except Exception as exc:
        raise BuildError(f"custom plan: binding the fallback ops' shapes (one ONNX Runtime run) "
                         f"failed: {str(exc).splitlines()[0]}") from exc
    return {n: (tuple(int(d) for d in a.shape), bool(np.issubdtype(a.dtype, np.integer)
                                                      or a.dtype == np.bool_))
            for n, a in [*feeds.items(), *zip(names, outs, strict=True)]}


def _strides(shape: tuple[int, ...]) -> list[int]:
    out, acc = [0] * len(shape), 1
    for i in range(len(shape) - 1, -1, -1):
        out[i], acc = acc, acc * shape[i]
    return out


def _bcast(shape: tuple[int, ...], out: tuple[int, ...]) -> list[int]:
    """Strides of `shape` read over the broadcast iteration space `out`."""
    s = (1,) * (len(out) - len(shape)) + tuple(shape)
    st = _strides(s)
    return [0 if s[d] == 1 and out[d] != 1 else st[d] for d in range(len(out))]


def _attr(node: onnx.NodeProto, name: str, default: Any = None) -> Any:
    for a in node.attribute:
        if a.name == name:
            return onnx.helper.get_attribute_value(a)
    return default


def _axis(a: int, r: int) -> int:
    return a + r if a < 0 else a


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
            return [self._reshape(node)]
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
            meta += _bcast(self.shape(n), out)
        integer = int(fn == BINARY["Div"] and self.is_int(node.output[0]))
        return self.emit(node.name, EW, meta, [self.operand(n) for n in names], out, fn, integer,
                         floats)

    def _Where(self, node: onnx.NodeProto) -> list[Any]:
        return [self._ew(node, list(node.input[:3]), F_WHERE)]

    def _Mod(self, node: onnx.NodeProto) -> list[Any]:
        fn = F_FMOD if _attr(node, "fmod", 0) else F_MOD
        return [self._ew(node, list(node.input[:2]), fn)]

    def _Clip(self, node: onnx.NodeProto) -> list[Any]:
        lo, hi = self._const_in(node, 1), self._const_in(node, 2)
        return [self._ew(node, [node.input[0]], F_CLIP,
                         (float(lo) if lo is not None else -3.0e38,
                          float(hi) if hi is not None else 3.0e38))]

    def _Gelu(self, node: onnx.NodeProto) -> list[Any]:
        if _attr(node, "approximate", b"none") not in (b"none", "none"):
            raise self.low.fail("tanh Gelu has no fallback kernel")
        return [self._ew(node, [node.input[0]], F_GELU)]

    def _Cast(self, node: onnx.NodeProto) -> list[Any]:
        to = _attr(node, "to")
        fn = (F_BOOL if to == onnx.TensorProto.BOOL else F_TRUNC if to in INT_TYPES
              else UNARY["Identity"])
        return [self._ew(node, [node.input[0]], fn)]

    def _Shape(self, node: onnx.NodeProto) -> list[Any]:
        dims = np.asarray(self.shape(node.input[0]), np.int64)
        start, end = _attr(node, "start", 0), _attr(node, "end", None)
        return [Const(dims[start:end])]

    def _Size(self, node: onnx.NodeProto) -> list[Any]:
        return [Const(np.asarray(math.prod(self.shape(node.input[0])), np.int64))]

    def _ConstantOfShape(self, node: onnx.NodeProto) -> list[Any]:
        val = _attr(node, "value")
        arr = onnx.numpy_helper.to_array(val) if val is not None else np.zeros(1, np.float32)
        return [Const(np.full(self.shape(node.output[0]), arr.reshape(-1)[0], arr.dtype))]

    def _copy(self, name: str, dims: list[int], src: tuple[int, np.ndarray | None], src_off: int,
              src_strides: list[int], out_shape: tuple[int, ...], dst_off: int = 0,
              dst_strides: list[int] | None = None, mods: list[int] | None = None,
              base: tuple[int, np.ndarray | None] | None = None, fill: float | None = None
              ) -> Act | Flat:
        r = len(dims)
        if r > RANK:
            raise self.low.fail(f"rank {r} (the fallback handles {RANK})")
        if r == 0:
            dims, src_strides, dst_strides = [1], [0], [0]
            r = 1
        meta = [r, *dims, src_off, *src_strides, *(mods or [0] * r), dst_off,
                *(dst_strides if dst_strides is not None else _strides(tuple(dims))),
                max(1, math.prod(out_shape))]
        ops = [base if base is not None else (-1, None), src]
        return self.emit(name, COPY, meta, ops, out_shape, p1=int(fill is not None),
                         floats=(float(fill or 0.0),))

    def _reshape(self, node: onnx.NodeProto) -> Act | Flat:
        out = self.shape(node.output[0])
        x = node.input[0]
        v = self.low.vals.get(x)
        if isinstance(v, Flat) and not self._token_like(out):
            return v  # same bytes, same buffer kind: an alias
        n = max(1, math.prod(out))
        return self._copy(node.name, [n], self.operand(x), 0, [1], out)

    def _token_like(self, shape: tuple[int, ...]) -> bool:
        return (len(shape) >= 2 and math.prod(shape[:-1]) == self.B * self.S) or \
            (len(shape) == 2 and shape[0] == self.B)

    def _Identity(self, node: onnx.NodeProto) -> list[Any]:
        return [self._reshape(node)]

    def _Transpose(self, node: onnx.NodeProto) -> list[Any]:
        x = node.input[0]
        xs = self.shape(x)
        perm = _attr(node, "perm") or list(range(len(xs)))[::-1]
        st = _strides(xs)
        out = tuple(xs[p] for p in perm)
        return [self._copy(node.name, list(out), self.operand(x), 0, [st[p] for p in perm], out)]

    def _Slice(self, node: onnx.NodeProto) -> list[Any]:
        x = node.input[0]
        xs = self.shape(x)
        starts, ends = self._const_in(node, 1), self._const_in(node, 2)
        axes = self._const_in(node, 3)
        steps = self._const_in(node, 4)
        axes_l = [int(a) for a in (axes if axes is not None else range(len(starts)))]  # type: ignore[arg-type]
        st = _strides(xs)
        begin, step = [0] * len(xs), [1] * len(xs)
        dims = list(xs)
        for i, a in enumerate(axes_l):
            a = _axis(a, len(xs))
            s = int(steps[i]) if steps is not None else 1  # type: ignore[index]
            b, e, s2 = slice(int(starts[i]), int(ends[i]), s).indices(xs[a])  # type: ignore[index]
            begin[a], step[a], dims[a] = b, s2, len(range(b, e, s2))
        out = self.shape(node.output[0])
        if math.prod(dims) == 0:
            return [Const(np.zeros(out, np.float32))]
        off = sum(b * s for b, s in zip(begin, st, strict=True))
        return [self._copy(node.name, dims, self.operand(x), off,
                           [s * k for s, k in zip(st, step, strict=True)], out)]

    def _Expand(self, node: onnx.NodeProto) -> list[Any]:
        x, out = node.input[0], self.shape(node.output[0])
        return [self._copy(node.name, list(out), self.operand(x), 0, _bcast(self.shape(x), out),
                           out)]

    def _Tile(self, node: onnx.NodeProto) -> list[Any]:
        x, out = node.input[0], self.shape(node.output[0])
        xs = self.shape(x)
        return [self._copy(node.name, list(out), self.operand(x), 0, _strides(xs), out,
                           mods=list(xs))]

    def _Concat(self, node: onnx.NodeProto) -> list[Any]:
        out = self.shape(node.output[0])
        axis = _axis(_attr(node, "axis", 0), len(out))
        ost = _strides(out)
        prev: Act | Flat | None = None
        at = 0
        for i, x in enumerate(n for n in node.input if n):
            xs = self.shape(x)
            if math.prod(xs) == 0:
                continue
            base = None if prev is None else (prev.value, None)
            prev = self._copy(f"{node.name}/{i}", list(xs), self.operand(x), 0, _strides(xs), out,
                              dst_off=at * ost[axis], dst_strides=ost, base=base)
            at += xs[axis]
        if prev is None:
            raise self.low.fail("Concat of empty tensors")
        return [prev]

    def _Pad(self, node: onnx.NodeProto) -> list[Any]:
        if _attr(node, "mode", b"constant") not in (b"constant", "constant"):
            raise self.low.fail("only constant Pad has a fallback kernel")
        x, out = node.input[0], self.shape(node.output[0])
        xs = self.shape(x)
        pads = [int(p) for p in self._const_in(node, 1)]  # type: ignore[union-attr]
        axes = self._const_in(node, 3)
        begin = [0] * len(xs)
        for i, a in enumerate([int(a) for a in axes] if axes is not None else range(len(xs))):
            begin[_axis(a, len(xs))] = pads[i]
        if any(b < 0 for b in begin) or any(o < s for o, s in zip(out, xs, strict=True)):
            raise self.low.fail("negative Pad has no fallback kernel")
        cv = self._const_in(node, 2)
        ost = _strides(out)
        fill = float(cv.reshape(-1)[0]) if cv is not None and cv.size else 0.0
        return [self._copy(node.name, list(xs), self.operand(x), 0, _strides(xs), out,
                           dst_off=sum(b * s for b, s in zip(begin, ost, strict=True)),
                           dst_strides=ost, fill=fill)]

    def _Split(self, node: onnx.NodeProto) -> list[Any]:
        x = node.input[0]
        xs = self.shape(x)
        axis = _axis(_attr(node, "axis", 0), len(xs))
        st = _strides(xs)
        outs, at = [], 0
        for o in node.output:
            os_ = self.shape(o)
            outs.append(self._copy(f"{node.name}/{o}", list(os_), self.operand(x), at * st[axis],
                                   st, os_))
            at += os_[axis]
        return outs

    def _Gather(self, node: onnx.NodeProto) -> list[Any]:
        data, idx = node.input[:2]
        ds = self.shape(data)
        axis = _axis(_attr(node, "axis", 0), len(ds))
        m = max(1, math.prod(self.shape(idx)))
        meta = [math.prod(ds[:axis]), ds[axis], math.prod(ds[axis + 1:]), m]
        return [self.emit(node.name, GATHER, meta, [self.operand(data), self.operand(idx)],
                          self.shape(node.output[0]))]

    def _GatherElements(self, node: onnx.NodeProto) -> list[Any]:
        data, idx = node.input[:2]
        ds, xs = self.shape(data), self.shape(idx)
        axis = _axis(_attr(node, "axis", 0), len(ds))
        meta = [len(xs), *xs, *_strides(ds), axis, ds[axis]]
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
        ast, bst = _strides((*ab, M * K)), _strides((*bb, K * N))
        meta = [r, *bd, *[0 if ab[d] == 1 else ast[d] for d in range(r)],
                *[0 if bb[d] == 1 else bst[d] for d in range(r)], M, K, N]
        return [self.emit(node.name, MATMUL, meta, [self.operand(a), self.operand(b)],
                          self.shape(node.output[0]))]

    def _softmax(self, node: onnx.NodeProto, log: int) -> list[Any]:
        x = node.input[0]
        xs = self.shape(x)
        axis = _axis(_attr(node, "axis", -1), len(xs))
        meta = [math.prod(xs[:axis]), xs[axis], math.prod(xs[axis + 1:])]
        return [self.emit(node.name, SOFTMAX, meta, [self.operand(x)], xs, p1=log)]

    def _Softmax(self, node: onnx.NodeProto) -> list[Any]:
        return self._softmax(node, 0)

    def _LogSoftmax(self, node: onnx.NodeProto) -> list[Any]:
        return self._softmax(node, 1)

    def _reduce(self, node: onnx.NodeProto) -> Act | Flat:
        x = node.input[0]
        xs = self.shape(x)
        axes = _attr(node, "axes")
        if axes is None and len(node.input) > 1 and node.input[1]:
            axes = [int(a) for a in self._const_in(node, 1)]  # type: ignore[union-attr]
        if not axes:
            axes = [] if _attr(node, "noop_with_empty_axes", 0) else list(range(len(xs)))
        red = {_axis(a, len(xs)) for a in axes}
        kept = tuple(1 if d in red else xs[d] for d in range(len(xs)))
        ost = _strides(kept)
        meta = [len(xs), *xs, *[0 if d in red else ost[d] for d in range(len(xs))],
                max(1, math.prod(kept)), max(1, math.prod(xs[d] for d in red))]
        return self.emit(node.name, REDUCE, meta, [self.operand(x)], self.shape(node.output[0]),
                         p1=REDUCES[node.op_type])

    def _Conv(self, node: onnx.NodeProto) -> list[Any]:
        x, w = node.input[:2]
        xs, ws, out = self.shape(x), self.shape(w), self.shape(node.output[0])
        if _attr(node, "auto_pad", b"NOTSET") not in (b"NOTSET", "NOTSET") or len(xs) not in (3, 4):
            raise self.low.fail("Conv fallback takes 1-D/2-D convolutions with explicit pads")
        nd = len(xs) - 2
        k = list(ws[2:])
        strides = list(_attr(node, "strides", [1] * nd))
        dil = list(_attr(node, "dilations", [1] * nd))
        pads = list(_attr(node, "pads", [0] * 2 * nd))[:nd]
        sp_in, sp_out = list(xs[2:]), list(out[2:])
        if nd == 1:  # as 2-D with height 1
            k, strides, dil, pads, sp_in, sp_out = ([1, *v] if i != 3 else [0, *v]
                                                    for i, v in enumerate(
                                                        (k, strides, dil, pads, sp_in, sp_out)))
        meta = [xs[0], xs[1], ws[0], int(_attr(node, "group", 1)), 2, *sp_in, *sp_out, *k,
                *strides, *pads, *dil]
        ops = [self.operand(x), self.operand(w)]
        if len(node.input) > 2 and node.input[2]:
            ops.append(self.operand(node.input[2]))
        return [self.emit(node.name, CONV, meta, ops, out)]

    def _CumSum(self, node: onnx.NodeProto) -> list[Any]:
        x = node.input[0]
        xs = self.shape(x)
        axis = _axis(int(self._const_in(node, 1).reshape(-1)[0]), len(xs))  # type: ignore[union-attr]
        mode = int(bool(_attr(node, "exclusive", 0))) | 2 * int(bool(_attr(node, "reverse", 0)))
        meta = [math.prod(xs[:axis]), xs[axis], math.prod(xs[axis + 1:])]
        return [self.emit(node.name, CUMSUM, meta, [self.operand(x)], xs, p1=mode)]

    def _Range(self, node: onnx.NodeProto) -> list[Any]:
        out = self.shape(node.output[0])
        return [self.emit(node.name, RANGE, [max(1, math.prod(out))],
                          [self.operand(node.input[0]), self.operand(node.input[2])], out)]
