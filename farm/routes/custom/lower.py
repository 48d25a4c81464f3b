"""Lower an ONNX encoder graph to executor ops (see values.py for the pending-value scheme).

Supported: Gather embeddings (+ constant position rows), the additive attention mask computed
from an int mask input by Cast/Unsqueeze/Sub/Mul/Add/Div, MatMul with constant weights (fp32,
or quantised here with `quant`), ORT's dynamic int8 chain (DynamicQuantizeLinear,
MatMulInteger, Cast, Mul), MatMulNBits (4-bit), QDQ models (Quantize/DequantizeLinear pairs
on activations are dropped, DequantizeLinear of constant int8 weights keeps them int8 for the
int8 GEMM: qdq.py), bias Add,
LayerNormalization (with a residual Add fused), GELU as Gelu or the erf chain
Div/Erf/Add/Mul/Mul, attention as Reshape/Transpose/MatMul/Div|Mul/Add(mask)/Softmax/MatMul/
Transpose/Reshape, Identity, BERT's pooler (row Gather, FC, Tanh) and ALBERT's tanh GELU
(lower_pooler.py), RoBERTa's position ids (lower_roberta.py), MPNet's relative position bias
(a constant [heads, S, S] added to the scores: the attention op's bias), DeBERTa's
disentangled attention (its relative-position terms and 2-D mask: lower_deberta.py), SqueezeBERT's
channels-first encoder and grouped 1x1 convolutions (lower_squeezebert.py), and any node whose
inputs are all constant (folded with onnx's reference evaluator). Any other node runs as a
generic fallback kernel with shapes bound at build time (lower_generic.py); a node no kernel
runs raises BuildError naming the node and its operator.
"""

from __future__ import annotations

import numpy as np
import onnx
from onnx import numpy_helper

from farm.errors import BuildError
from farm.routes.custom import lower_squeezebert as squeeze
from farm.routes.custom import weights as W
from farm.routes.custom.ir import FcWeights, Ir, IrOp
from farm.routes.custom.lower_generic import Fallback
from farm.routes.custom.lower_mobilebert import emit_nonorm
from farm.routes.custom.lower_roberta import PadPositions
from farm.routes.custom.plan_format import (
    ACT_GELU,
    ACT_GELU_TAB,
    ACT_NONE,
    GELU_TANH,
    OP_ADD,
    OP_ATTENTION,
    OP_EMBED,
    OP_FC,
    OP_GELU,
    OP_TRIGRAM,
    ROLE_IDS,
    ROLE_MASK,
    ROLE_OTHER,
    ROLE_TYPE,
    W_F32,
    W_I8,
    W_Q4_0,
)
from farm.routes.custom.qdq import qdq_weight
from farm.routes.custom.values import (
    ACTIVATIONS,
    Act,
    Affine,
    Const,
    Embed,
    Gelu,
    Input,
    Lin,
    Sum,
)

QUANTS = {None: None, "fp32": None, "int8": W_I8, "q4_0": W_Q4_0, "int4": W_Q4_0}


def _toposort(graph: onnx.GraphProto) -> list[onnx.NodeProto]:
    known = {i.name for i in graph.initializer} | {i.name for i in graph.input} | {""}
    pending, order = list(graph.node), []
    while pending:
        ready = [n for n in pending if all(i in known for i in n.input)]
        if not ready:
            n = pending[0]
            raise BuildError(f"node {n.name!r} ({n.op_type}): inputs never produced or a cycle")
        for n in ready:
            order.append(n)
            known.update(n.output)
        pending = [n for n in pending if n not in ready]
    return order


class Lowerer:
    """Walks one graph once; `run()` returns the Ir."""

    def __init__(self, model: onnx.ModelProto, quant: str | None, gelu: str) -> None:
        if quant not in QUANTS:
            raise BuildError(f"unknown quant {quant!r}", hint="use None, 'int8' or 'q4_0'")
        self.model, self.graph = model, model.graph
        self.quant = QUANTS[quant]
        self.gelu_act = ACT_GELU_TAB if gelu == "table" else ACT_GELU
        self.ir = Ir()
        self.vals: dict[str, object] = {}
        self.node: onnx.NodeProto | None = None
        # pending value (by identity) -> its materialised value id: a value with several
        # consumers (MobileBERT's hidden state feeds three GEMMs and a residual) is computed once
        self.done: dict[int, tuple[object, int]] = {}
        self.fallback = Fallback(self)
        self._shapes: dict[str, tuple[int, ...]] | None = None

    # -- helpers -----------------------------------------------------------------------
    def fail(self, why: str, hint: str | None = None) -> BuildError:
        n = self.node
        where = f"node {n.name!r} ({n.op_type})" if n is not None else "graph"
        # inside a fused handler this error only sends the node to the generic fallback
        # (visit); it reaches the user when no kernel, fused or fallback, can run the node
        return BuildError(f"custom plan: {where}: {why}", hint=hint or
                          "`farm models check FILE` lists what the custom executor runs; "
                          "use the ort or tvm route for this model")

    def get(self, name: str) -> object:
        if name not in self.vals:
            raise self.fail(f"input {name!r} is not available")
        return self.vals[name]

    def const(self, name: str) -> np.ndarray | None:
        v = self.vals.get(name)
        return v.arr if isinstance(v, Const) else None

    def scalar(self, name: str) -> float | None:
        a = self.const(name)
        return float(a.reshape(-1)[0]) if a is not None and a.size == 1 else None

    def value_shape(self, name: str) -> tuple[int, ...] | None:
        """Tensor `name`'s static shape as the (canonical) file declares it, or None."""
        if self._shapes is None:
            g = self.graph
            self._shapes = {}
            for vi in [*g.input, *g.value_info, *g.output]:
                dims = vi.type.tensor_type.shape.dim
                if all(d.HasField("dim_value") for d in dims):
                    self._shapes[vi.name] = tuple(d.dim_value for d in dims)
        return self._shapes.get(name)

    def emit(self, kind: int, name: str, ins: list[int], cols: int, **kw) -> int:
        seq = [v in self.ir.seq_values for v in ins if v >= 0]
        if any(seq) and (not all(seq) or kind in (OP_EMBED, OP_ATTENTION, OP_TRIGRAM)):
            raise self.fail("mixes one-row-per-sequence values (after the pooler's row "
                            "Gather) with per-token ones")
        out = self.ir.new_value(cols)
        if any(seq):
            self.ir.seq_values.add(out)
        self.ir.ops.append(IrOp(kind, name, ins, out, **kw))
        return out

    def act(self, v: object) -> int:
        """Materialise a pending value (once); returns its value id."""
        if isinstance(v, Act):
            return v.value
        if id(v) in self.done:
            return self.done[id(v)][1]
        out = self._materialise(v)
        self.done[id(v)] = (v, out)  # keeps v alive, so its id is never reused
        return out

    def _materialise(self, v: object) -> int:
        if isinstance(v, Embed):
            arrays: list[np.ndarray | None] = [t for t, _ in v.terms]
            ins = [] if v.base is None else [self.act(v.base)]
            if len(arrays) > 4:
                raise self.fail(f"{len(arrays)} embedding terms, the executor sums at most 4")
            srcs = [s.slot if isinstance(s, PadPositions) else s for _, s in v.terms]
            pads = [s.pad + 1 if isinstance(s, PadPositions) else 0 for _, s in v.terms]
            params = srcs + [0] * (4 - len(srcs)) + pads if any(pads) else srcs
            return self.emit(OP_EMBED, v.name, ins, v.terms[0][0].shape[1], arrays=arrays,
                             params=params)
        if isinstance(v, Affine):  # NoNorm's Mul with no bias Add after it
            return emit_nonorm(self, v, np.zeros_like(v.gamma), v.name)
        if isinstance(v, Lin):
            return self.emit(OP_FC, v.name, [v.x], v.fc.n, fc=v.fc, bias=v.bias,
                             params=[v.fc.wtype, v.fc.n, self.ir.cols[v.x], v.act, v.fc.groups])
        if isinstance(v, Sum):
            return self.emit(OP_ADD, v.name, [v.a, v.b], self.ir.cols[v.a])
        if isinstance(v, Gelu):
            src = self.get(v.u)
            x = self.act(src.inner if isinstance(src, squeeze.ChanFirst) else src)
            mode = GELU_TANH if v.tanh else int(self.gelu_act == ACT_GELU_TAB)
            return self.emit(OP_GELU, self.node.name if self.node else "gelu", [x],
                             self.ir.cols[x], params=[mode])
        raise self.fail(f"needs an activation but got {type(v).__name__}")

    def fc(self, x: object, w: np.ndarray) -> Lin:
        if w.ndim != 2:
            raise self.fail(f"weight has shape {w.shape}, expected [K, N]")
        xv = self.act(x)
        if self.ir.cols[xv] != w.shape[0]:
            raise self.fail(f"K mismatch: activation has {self.ir.cols[xv]}, weight {w.shape}")
        w = w.astype(np.float32)
        if self.quant == W_I8:
            fcw = FcWeights(W_I8, *W.quantize_i8(w))
        elif self.quant == W_Q4_0:
            fcw = FcWeights(W_Q4_0, W.quantize_q4_0(w, self.node.name).reshape(w.shape[1], -1))
        else:
            fcw = FcWeights(W_F32, w)
        return Lin(xv, fcw, None, ACT_NONE, self.node.name)

    # -- graph walk --------------------------------------------------------------------
    def run(self) -> Ir:
        g = self.graph
        for init in g.initializer:
            self.vals[init.name] = Const(numpy_helper.to_array(init))
        inits = {i.name for i in g.initializer}
        for gi in (i for i in g.input if i.name not in inits):
            et = gi.type.tensor_type.elem_type
            if et not in (onnx.TensorProto.INT64, onnx.TensorProto.INT32):
                kind = onnx.TensorProto.DataType.Name(et).lower()
                raise BuildError(
                    f"custom plan: graph input {gi.name!r} is {kind}, not int64/int32 token "
                    "ids: the custom executor runs token-id text encoders (BERT-like) only",
                    hint="use the ort or tvm route for this model")
            low = gi.name.lower()
            role = (ROLE_MASK if "mask" in low else ROLE_TYPE if "type" in low
                    else ROLE_IDS if "id" in low else ROLE_OTHER)
            self.ir.inputs.append((gi.name, role))
            self.vals[gi.name] = Input(len(self.ir.inputs) - 1)
        for node in _toposort(g):
            self.node = node
            self.visit(node)
        self.node = None
        for go in g.output:
            v = self.get(go.name)
            out = (self.act(v) if isinstance(v, ACTIVATIONS)
                   else self.fallback.value(go.name))
            self.ir.outputs.append((go.name, out))
        self.ir.fallback = list(self.fallback.nodes)
        return self.ir

    def visit(self, node: onnx.NodeProto) -> None:
        ins = [self.vals.get(i) if i else None for i in node.input]
        consts = all(isinstance(v, Const) or v is None for v in ins)
        if ins and consts and node.domain in ("", "ai.onnx"):
            return self.fold(node)
        handler = getattr(self, f"op_{node.op_type}", None)
        if handler is not None and (rows := squeeze.unwrap(node, ins)) is not None:
            ins, wrap = rows, True  # SqueezeBERT: on the token rows, then channels-first again
        else:
            wrap = False
        if handler is None:
            out = tuple(self.fallback.lower(node, "no fused pattern for this operator"))
        else:
            try:
                out = handler(node, ins)
            except BuildError as exc:
                # a pattern the fused lowering does not take: the node runs as a plain
                # kernel (its output in the tensor's own layout), and any pending input is
                # recomputed (lower_generic.py)
                out, wrap = tuple(self.fallback.lower(node, exc.message.split(": ", 2)[-1])), False
        outs = out if isinstance(out, tuple) else (out,)
        if wrap:
            outs = tuple(squeeze.ChanFirst(v) for v in outs)
        for name, v in zip(node.output, outs, strict=False):
            self.vals[name] = v

    def fold(self, node: onnx.NodeProto) -> None:
        from onnx.reference import ReferenceEvaluator

        feeds = {i: self.const(i) for i in node.input if i}
        try:
            res = ReferenceEvaluator(node).run(None, feeds)
        except Exception as exc:
            raise self.fail(f"cannot fold constant node: {exc}") from exc
        for name, arr in zip(node.output, res, strict=False):
            self.vals[name] = Const(np.asarray(arr))
        # a QDQ model's int8 weight stays int8 for the GEMM (qdq.py)
        qw = qdq_weight(node, [self.vals.get(i) if i else None for i in node.input],
                        np.asarray(res[0]))
        if qw is not None:
            self.vals[node.output[0]] = qw

    # The handlers live in their own module; importing them here makes them methods.
    from farm.routes.custom.lower_deberta import op_GatherElements, op_Squeeze, op_Where
    from farm.routes.custom.lower_mobilebert import (
        op_Concat,
        op_Constant,
        op_Pad,
        op_Relu,
        op_Slice,
    )
    from farm.routes.custom.lower_ops import (
        op_Add,
        op_Cast,
        op_Conv,
        op_DequantizeLinear,
        op_Div,
        op_DynamicQuantizeLinear,
        op_Erf,
        op_Gather,
        op_Gelu,
        op_Identity,
        op_LayerNormalization,
        op_MatMul,
        op_MatMulInteger,
        op_MatMulNBits,
        op_Mul,
        op_Not,
        op_QuantizeLinear,
        op_Reshape,
        op_Softmax,
        op_Sub,
        op_Transpose,
        op_Unsqueeze,
    )
    from farm.routes.custom.lower_pooler import op_Pow, op_Tanh
    from farm.routes.custom.lower_roberta import op_CumSum, op_Equal


def lower(model: onnx.ModelProto, quant: str | None = None, gelu: str = "erf") -> Ir:
    return Lowerer(model, quant, gelu).run()
