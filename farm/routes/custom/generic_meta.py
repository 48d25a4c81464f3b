"""What the generic fallback (lower_generic.py) shares: the executor's kind and function
codes (kernels/runtime/generic.h), the ops it takes, the bound-shape probe, stride helpers."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import onnx

from farm.errors import BuildError

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


def cstrides(shape: tuple[int, ...]) -> list[int]:
    out, acc = [0] * len(shape), 1
    for i in range(len(shape) - 1, -1, -1):
        out[i], acc = acc, acc * shape[i]
    return out


def bcast(shape: tuple[int, ...], out: tuple[int, ...]) -> list[int]:
    """Strides of `shape` read over the broadcast iteration space `out`."""
    s = (1,) * (len(out) - len(shape)) + tuple(shape)
    st = cstrides(s)
    return [0 if s[d] == 1 and out[d] != 1 else st[d] for d in range(len(out))]


def attr(node: onnx.NodeProto, name: str, default: Any = None) -> Any:
    for a in node.attribute:
        if a.name == name:
            return onnx.helper.get_attribute_value(a)
    return default


def norm_axis(a: int, r: int) -> int:
    return a + r if a < 0 else a
