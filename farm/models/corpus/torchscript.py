"""BERT-family encoders in the op pattern of the TorchScript `torch.onnx.export`.

`export(family, dims, opset, dynamic) -> onnx.ModelProto` reproduces what
`torch.onnx.export(model, (input_ids, attention_mask[, token_type_ids]), opset_version=11|14|17,
do_constant_folding=True, dynamic_axes={'input_ids': {0: 'batch', 1: 'sequence'}, ...})`
(torch 2.x, TorchScript exporter) writes for a Hugging Face transformers 4.x model with eager
attention:

- **BERT** (`BertModel`): word + position (a `Slice` of the `position_ids` buffer) + token-type
  Gathers, LayerNorm, additive mask `(1 - mask[:, None, None, :]) * finfo(float32).min`,
  per layer `/encoder/layer.{i}/attention/self/{query,key,value}/MatMul+Add`, the
  `transpose_for_scores` Reshape/Transpose (Q and V `[0,2,1,3]`, K `[0,2,3,1]` after the
  exporter's transpose-fusion peephole), `Div(scores, sqrt(d))`, `Add(mask)`, `Softmax`,
  `attention/output/dense` + residual + LayerNorm, `intermediate/dense` + exact GELU (erf chain
  `Div(x, 1.4142135) Erf Add(1) Mul(x) Mul(0.5)`), `output/dense` + residual + LayerNorm, and
  the pooler `Gather(axis=1, index 0) -> Gemm(transB=1) -> Tanh`.
- **DistilBERT** (`DistilBertModel`): no token types, no pooler, `q / sqrt(d)` before the
  product, and the mask applied by `masked_fill`: `Equal(mask, 0) -> Reshape -> Expand ->
  Where(., finfo.min, scores)`; FFN scope `/ffn/lin1`, `/ffn/lin2`.
- **RoBERTa** (`RobertaModel`): position ids from the mask of non-padding tokens,
  `Not(Equal(ids, pad)) -> Cast(int32) -> CumSum -> Mul(mask) -> Cast(int64) -> Add(pad)`.
- **opset 18, every family**: the dynamo exporter's (`torch.onnx.export(..., dynamo=True)`,
  transformers' default SDPA attention) pattern: `aten_scaled_dot_product_attention` multiplies
  Q and Kᵀ each by sqrt(1/sqrt(d)), Kᵀ of the [B,H,S,D] heads written through 3-D
  (`Reshape [-1,S,D] -> Transpose [0,2,1] -> Reshape [B,H,D,S]`); the mask of
  `_prepare_4d_attention_mask_for_sdpa` (DistilBERT's too) is `Unsqueeze [1,2] -> Expand
  [B,1,S,S] -> Cast -> Sub(1, .) -> Where(Cast(., bool), finfo.min, .)`; GELU halves first,
  `x * (0.5 * (1 + erf(x/sqrt 2)))`; RoBERTa's CumSum runs on int64 between two Casts.
  Node names keep the TorchScript scopes (dynamo writes `node_<Op>_<n>`), literals stay
  `Constant` nodes (dynamo writes initializers) and weights are inline (dynamo writes
  FILE.onnx.data): none of that reaches the routes (the front-end folds constants, and
  `resolve_model` inlines external data).
- **Checked against real exports** (tests/test_real_torch_exports.py): torch 2.13.0 (CPU),
  transformers 4.57.6, tiny random-init models; after the front-end the generated file and
  the real one have the same op histogram at opset 14 (eager attention:
  `attn_implementation="eager"`; transformers' default SDPA at opset 14 differs only in the
  scale, `Mul` of Q and Kᵀ by sqrt(scale) instead of `Div`, which the front-end moves after
  Q·Kᵀ) and at opset 18 (default SDPA). Not reproduced: transformers 5.x, whose exports
  build the mask with vmap (`GatherND`, `IsNaN`; docs/real-models.md).
- **ALBERT** (`AlbertModel`): factorised embedding (size E, then
  `embedding_hidden_mapping_in` E->H), ONE layer's weights shared by every layer, and
  `gelu_new` (tanh chain `0.5*x*(1+tanh(sqrt(2/pi)*(x+0.044715*x^3)))`).

With `dynamic=True` the reshapes take their shapes from `Shape -> Gather -> Unsqueeze ->
Concat` chains of the running tensor, and the inputs have the symbolic dims ``batch`` and
``sequence``; with fixed axes the exporter's constant folding leaves `Constant` nodes instead.
Opset 11 differs by attribute-form `Unsqueeze` axes; opset 17 has `LayerNormalization` where
11/14 have the decomposed chain `ReduceMean Sub Pow ReduceMean Add Sqrt Div Mul Add`.
Weights are random (seeded), scaled so activations stay O(1); Linear weights are stored
transposed ([in, out]) as the exporter stores them for MatMul.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

FAMILIES = ("bert", "distilbert", "roberta", "albert")
F32_MIN = float(np.finfo(np.float32).min)


@dataclass(frozen=True)
class Dims:
    layers: int = 2
    hidden: int = 64
    heads: int = 4
    ffn: int = 128
    seq: int = 16
    vocab: int = 200
    max_pos: int = 512  # Hugging Face's default (max_position_embeddings)
    embed: int = 32  # ALBERT's factorised embedding size
    seed: int = 0


SMALL = Dims()
BENCH = Dims(layers=6, hidden=384, heads=12, ffn=1536, seq=128, vocab=30522, max_pos=512,
             embed=128)


class _Export:
    """Emits nodes in the exporter's naming (`<module scope>/<Op>[_<n>]`)."""

    def __init__(self, family: str, d: Dims, opset: int, dynamic: bool) -> None:
        self.family, self.d, self.opset, self.dynamic = family, d, opset, dynamic
        self.rng = np.random.default_rng(d.seed)
        self.nodes: list[onnx.NodeProto] = []
        self.inits: dict[str, onnx.TensorProto] = {}
        self.names: set[str] = set()
        self.shared: dict[str, str] = {}

    def op(self, op_type: str, scope: str, inputs: list[str], n_out: int = 1,
           **attrs: object) -> str:
        base = name = f"{scope}/{op_type}"
        k = 0
        while name in self.names:
            k += 1
            name = f"{base}_{k}"
        self.names.add(name)
        outs = [f"{name}_output_{i}" for i in range(n_out)]
        self.nodes.append(helper.make_node(op_type, inputs, outs, name=name, **attrs))
        return outs[0]

    def const(self, scope: str, value: np.ndarray | float | int) -> str:
        """A `Constant` node, as TorchScript emits for literals."""
        arr = np.asarray(value)
        if arr.dtype == np.float64:
            arr = arr.astype(np.float32)
        return self.op("Constant", scope, [], value=numpy_helper.from_array(arr))

    def weight(self, name: str, shape: tuple[int, ...], std: float, mean: float = 0.0) -> str:
        if name not in self.inits:
            data = self.rng.standard_normal(shape).astype(np.float32) * np.float32(std)
            self.inits[name] = numpy_helper.from_array(data + np.float32(mean), name)
        return name

    def linear(self, scope: str, prefix: str, x: str, k: int, n: int) -> str:
        w = self.weight(f"{prefix}.weight.T", (k, n), 1.0 / math.sqrt(k))
        b = self.weight(f"{prefix}.bias", (n,), 0.02)
        return self.op("Add", scope, [b, self.op("MatMul", scope, [x, w])])

    def unsqueeze(self, scope: str, x: str, axes: list[int]) -> str:
        if self.opset < 13:
            return self.op("Unsqueeze", scope, [x], axes=axes)
        return self.op("Unsqueeze", scope, [x, self.const(scope, np.array(axes, np.int64))])

    def layer_norm(self, scope: str, prefix: str, x: str, width: int) -> str:
        g = self.weight(f"{prefix}.weight", (width,), 0.02, 1.0)
        b = self.weight(f"{prefix}.bias", (width,), 0.02)
        eps = 1e-12
        if self.opset >= 17:
            return self.op("LayerNormalization", scope, [x, g, b], axis=-1, epsilon=eps)
        mean = self.op("ReduceMean", scope, [x], axes=[-1])
        xc = self.op("Sub", scope, [x, mean])
        var = self.op("ReduceMean", scope, [self.op("Pow", scope, [xc, self.const(scope, 2.0)])],
                      axes=[-1])
        std = self.op("Sqrt", scope, [self.op("Add", scope, [var, self.const(scope, eps)])])
        return self.op("Add", scope, [self.op("Mul", scope, [self.op("Div", scope, [xc, std]),
                                                             g]), b])

    def dim(self, scope: str, x: str, i: int) -> str:
        """Unsqueezed size of dim i of x: a Shape chain (dynamic) or a Constant."""
        if not self.dynamic:
            size = {0: 1, 1: self.d.seq}[i]
            return self.const(scope, np.array([size], np.int64))
        s = self.op("Shape", scope, [x])
        g = self.op("Gather", scope, [s, self.const(scope, np.array(i, np.int64))], axis=0)
        return self.unsqueeze(scope, g, [0])

    def reshape(self, scope: str, x: str, like: str, tail: list[int]) -> str:
        parts = [self.dim(scope, like, 0), self.dim(scope, like, 1)]
        parts += [self.const(scope, np.array([t], np.int64)) for t in tail]
        shape = self.op("Concat", scope, parts, axis=0)
        return self.op("Reshape", scope, [x, shape])


def _gelu(e: _Export, scope: str, x: str) -> str:
    if e.family == "albert":  # gelu_new
        cube = e.op("Pow", scope, [x, e.const(scope, 3.0)])
        inner = e.op("Add", scope, [x, e.op("Mul", scope, [e.const(scope, 0.044715), cube])])
        t = e.op("Tanh", scope, [e.op("Mul", scope, [e.const(scope, math.sqrt(2 / math.pi)),
                                                     inner])])
        half = e.op("Mul", scope, [e.const(scope, 0.5), x])
        return e.op("Mul", scope, [half, e.op("Add", scope, [e.const(scope, 1.0), t])])
    div = e.op("Div", scope, [x, e.const(scope, 1.4142135381698608)])
    erf = e.op("Add", scope, [e.op("Erf", scope, [div]), e.const(scope, 1.0)])
    if e.opset >= 18:  # torchlib's aten_gelu halves first
        return e.op("Mul", scope, [x, e.op("Mul", scope, [e.const(scope, 0.5), erf])])
    return e.op("Mul", scope, [e.op("Mul", scope, [x, erf]), e.const(scope, 0.5)])


def _embeddings(e: _Export) -> str:
    d, fam = e.d, e.family
    width = d.embed if fam == "albert" else d.hidden
    sc = "/embeddings"
    word = e.op("Gather", f"{sc}/word_embeddings",
                [e.weight("embeddings.word_embeddings.weight", (d.vocab, width), 0.5),
                 "input_ids"])
    pos_table = e.weight("embeddings.position_embeddings.weight", (d.max_pos, width), 0.5)
    if fam == "roberta":  # create_position_ids_from_input_ids, padding_idx 1
        ne = e.op("Not", sc, [e.op("Equal", sc, ["input_ids", e.const(sc, np.array(1))])])
        m = e.op("Cast", sc, [ne], to=TensorProto.INT32)
        # torch's cumsum of int32 is int64: dynamo writes both casts, TorchScript neither
        cs = e.op("CumSum", sc, [e.op("Cast", sc, [m], to=TensorProto.INT64) if e.opset >= 18
                                 else m, e.const(sc, np.array(1, np.int64))])
        inc = e.op("Mul", sc, [e.op("Cast", sc, [cs], to=TensorProto.INT32), m])
        ids = e.op("Add", sc, [e.op("Cast", sc, [inc], to=TensorProto.INT64),
                               e.const(sc, np.array(1, np.int64))])
        # RoBERTa's table has padding_idx + 1 extra rows in front
    else:
        buf = e.weight("embeddings.position_ids", (1, d.max_pos), 0.0)
        e.inits[buf] = numpy_helper.from_array(np.arange(d.max_pos, dtype=np.int64)[None], buf)
        end = e.dim(sc, "input_ids", 1)
        ids = e.op("Slice", sc, [buf, e.const(sc, np.array([0], np.int64)), end,
                                 e.const(sc, np.array([1], np.int64)),
                                 e.const(sc, np.array([1], np.int64))])
    x = e.op("Add", sc, [word, e.op("Gather", f"{sc}/position_embeddings", [pos_table, ids])])
    if fam != "distilbert":
        tt = e.op("Gather", f"{sc}/token_type_embeddings",
                  [e.weight("embeddings.token_type_embeddings.weight", (2, width), 0.5),
                   "token_type_ids"])
        x = e.op("Add", sc, [x, tt])
    x = e.layer_norm(f"{sc}/LayerNorm", "embeddings.LayerNorm", x, width)
    if fam == "albert":
        x = e.linear("/encoder/embedding_hidden_mapping_in", "encoder.embedding_hidden_mapping_in",
                     x, width, d.hidden)
    return x


def _additive_mask(e: _Export) -> str:
    sc = "/"
    if e.opset >= 18:  # _prepare_4d_attention_mask_for_sdpa: expand, invert, masked_fill
        m = e.unsqueeze(sc, "attention_mask", [1, 2])
        shape = e.op("Concat", sc, [e.dim(sc, "input_ids", 0), e.const(sc, np.array([1], np.int64)),
                                    e.dim(sc, "input_ids", 1), e.dim(sc, "input_ids", 1)],
                     axis=0)
        m = e.op("Cast", sc, [e.op("Expand", sc, [m, shape])], to=TensorProto.FLOAT)
        inv = e.op("Sub", sc, [e.const(sc, 1.0), m])
        cond = e.op("Cast", sc, [inv], to=TensorProto.BOOL)
        return e.op("Where", sc, [cond, e.const(sc, np.array(F32_MIN, np.float32)), inv])
    m = e.unsqueeze(sc, e.unsqueeze(sc, "attention_mask", [1]), [2])
    m = e.op("Cast", sc, [m], to=TensorProto.FLOAT)
    return e.op("Mul", sc, [e.op("Sub", sc, [e.const(sc, 1.0), m]), e.const(sc, F32_MIN)])


def _layer(e: _Export, i: int, x: str, mask: str) -> str:
    d, fam = e.d, e.family
    hd = d.hidden // d.heads
    if fam == "distilbert":
        sc, pre = f"/transformer/layer.{i}", f"transformer.layer.{i}"
        att, names = f"{sc}/attention", ("q_lin", "k_lin", "v_lin", "out_lin")
    else:
        shared = 0 if fam == "albert" else i
        sc = f"/encoder/layer.{i}"
        pre = f"encoder.albert_layer.{shared}" if fam == "albert" else f"encoder.layer.{shared}"
        att, names = f"{sc}/attention/self", ("query", "key", "value", "output/dense")
    proj = {n: e.linear(f"{att}/{n}", f"{pre}.attention.{n.replace('/', '.')}", x, d.hidden,
                        d.hidden) for n in names[:3]}
    q = e.op("Transpose", att, [e.reshape(att, proj[names[0]], x, [d.heads, hd])],
             perm=[0, 2, 1, 3])
    k = e.op("Transpose", att, [e.reshape(att, proj[names[1]], x, [d.heads, hd])],
             perm=[0, 2, 1, 3] if e.opset >= 18 else [0, 2, 3, 1])  # SDPA takes K unflipped
    v = e.op("Transpose", att, [e.reshape(att, proj[names[2]], x, [d.heads, hd])],
             perm=[0, 2, 1, 3])
    def scale() -> str:
        return e.const(att, np.array(math.sqrt(hd), np.float32))

    if e.opset >= 18:  # torchlib's aten_scaled_dot_product_attention (every family)
        flat = e.op("Concat", att, [e.const(att, np.array([-1], np.int64)), e.dim(att, x, 1),
                                    e.const(att, np.array([hd], np.int64))], axis=0)
        kt = e.op("Transpose", att, [e.op("Reshape", att, [k, flat])], perm=[0, 2, 1])
        back = e.op("Concat", att, [e.dim(att, x, 0), e.const(att, np.array([d.heads], np.int64)),
                                    e.const(att, np.array([hd], np.int64)), e.dim(att, x, 1)],
                    axis=0)
        kt = e.op("Reshape", att, [kt, back])  # Kᵀ through 3-D: [B*H,S,D] -> [B,H,D,S]
        half = e.const(att, np.array(1.0 / math.sqrt(math.sqrt(hd)), np.float32))
        scores = e.op("MatMul", att, [e.op("Mul", att, [q, half]), e.op("Mul", att, [kt, half])])
        scores = e.op("Add", att, [scores, mask])
    elif fam == "distilbert":
        scores = e.op("MatMul", att, [e.op("Div", att, [q, scale()]), k])
        zero = e.op("Equal", att, ["attention_mask", e.const(att, np.array(0, np.int64))])
        shape = e.op("Concat", att, [e.dim(att, x, 0), e.const(att, np.array([1, 1], np.int64)),
                                     e.dim(att, x, 1)], axis=0)
        masked = e.op("Expand", att, [e.op("Reshape", att, [zero, shape]),
                                      e.op("Shape", att, [scores])])
        scores = e.op("Where", att, [masked, e.const(att, np.array(F32_MIN, np.float32)),
                                     scores])
    else:
        scores = e.op("Add", att, [e.op("Div", att, [e.op("MatMul", att, [q, k]), scale()]),
                                   mask])
    probs = e.op("Softmax", att, [scores], axis=3 if e.opset < 13 else -1)
    ctx = e.op("Transpose", att, [e.op("MatMul", att, [probs, v])], perm=[0, 2, 1, 3])
    ctx = e.reshape(att, ctx, x, [d.hidden])
    if fam == "distilbert":
        out = e.linear(f"{att}/out_lin", f"{pre}.attention.out_lin", ctx, d.hidden, d.hidden)
        a = e.layer_norm(f"{sc}/sa_layer_norm", f"{pre}.sa_layer_norm",
                         e.op("Add", sc, [out, x]), d.hidden)
        u = e.linear(f"{sc}/ffn/lin1", f"{pre}.ffn.lin1", a, d.hidden, d.ffn)
        g = _gelu(e, f"{sc}/ffn/activation", u)
        down = e.linear(f"{sc}/ffn/lin2", f"{pre}.ffn.lin2", g, d.ffn, d.hidden)
        return e.layer_norm(f"{sc}/output_layer_norm", f"{pre}.output_layer_norm",
                            e.op("Add", sc, [down, a]), d.hidden)
    osc = f"{sc}/attention/output"
    out = e.linear(f"{osc}/dense", f"{pre}.attention.output.dense", ctx, d.hidden, d.hidden)
    a = e.layer_norm(f"{osc}/LayerNorm", f"{pre}.attention.output.LayerNorm",
                     e.op("Add", osc, [out, x]), d.hidden)
    u = e.linear(f"{sc}/intermediate/dense", f"{pre}.intermediate.dense", a, d.hidden, d.ffn)
    g = _gelu(e, f"{sc}/intermediate/intermediate_act_fn", u)
    down = e.linear(f"{sc}/output/dense", f"{pre}.output.dense", g, d.ffn, d.hidden)
    return e.layer_norm(f"{sc}/output/LayerNorm", f"{pre}.output.LayerNorm",
                        e.op("Add", f"{sc}/output", [down, a]), d.hidden)


def _pooler(e: _Export, x: str) -> str:
    sc = "/pooler"
    first = e.op("Gather", sc, [x, e.const(sc, np.array(0, np.int64))], axis=1)
    w = e.weight("pooler.dense.weight", (e.d.hidden, e.d.hidden), 1.0 / math.sqrt(e.d.hidden))
    b = e.weight("pooler.dense.bias", (e.d.hidden,), 0.02)
    return e.op("Tanh", sc, [e.op("Gemm", f"{sc}/dense", [first, w, b], alpha=1.0, beta=1.0,
                                  transB=1)])


def export(family: str, dims: Dims = SMALL, opset: int = 14, dynamic: bool = True
           ) -> onnx.ModelProto:
    """The fp32 model of `family` in TorchScript-export form (see the module docstring)."""
    if family not in FAMILIES:
        raise ValueError(f"unknown family {family!r}; known: {', '.join(FAMILIES)}")
    e = _Export(family, dims, opset, dynamic)
    x = _embeddings(e)
    mask = "" if family == "distilbert" and opset < 18 else _additive_mask(e)
    for i in range(dims.layers):
        x = _layer(e, i, x, mask)
    e.nodes[-1].output[0] = "last_hidden_state"
    b, s = ("batch", "sequence") if dynamic else (1, dims.seq)
    names = ["input_ids", "attention_mask"] + ([] if family == "distilbert"
                                               else ["token_type_ids"])
    inputs = [helper.make_tensor_value_info(n, TensorProto.INT64, [b, s]) for n in names]
    outputs = [helper.make_tensor_value_info("last_hidden_state", TensorProto.FLOAT,
                                             [b, s, dims.hidden])]
    if family in ("bert", "albert", "roberta"):
        pooled = _pooler(e, "last_hidden_state")
        e.nodes[-1].output[0] = "pooler_output"
        del pooled
        outputs.append(helper.make_tensor_value_info("pooler_output", TensorProto.FLOAT,
                                                     [b, dims.hidden]))
    graph = helper.make_graph(e.nodes, "main_graph", inputs, outputs,
                              initializer=list(e.inits.values()))
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)],
                              producer_name="pytorch", producer_version="2.5.0")
    model.ir_version = 8 if opset >= 17 else 7
    # the sequence the inputs default to (farm.models.inputs reads farm.config's seq)
    helper.set_model_props(model, {"farm.config": json.dumps({"seq": dims.seq})})
    onnx.checker.check_model(model, full_check=True)
    return model
