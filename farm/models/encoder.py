"""Generate a BERT-shaped encoder as an ONNX graph (opset 17) with deterministic weights.

`build_encoder(config) -> onnx.ModelProto`. The op pattern below is a contract: the custom
executor's plan compiler pattern-matches it, and `farm.categories` reads its node-name
scopes. Change it only together with `GENERATOR_VERSION` (config.py) and those two.

Graph (S = seq, H = hidden, N = heads, D = H/N, F = ffn; all float32 unless noted)

Inputs ``input_ids`` int64 [1,S], ``attention_mask`` int64 [1,S] (1 = token, 0 = padding).
Output ``last_hidden_state`` float32 [1,S,H].

Embeddings, scope ``/embeddings/``:
  Gather(embeddings.word.weight [V,H], input_ids)                       -> [1,S,H]
  Gather(embeddings.position.weight [S,H], embeddings.position_ids
         int64 [1,S] = arange(S))                                       -> [1,S,H]
  Add(word, position)
  LayerNormalization(x, embeddings.norm.weight, .bias; axis=-1, epsilon=1e-12)
Additive mask, scope ``/mask/`` (computed once, shared by all layers):
  Cast(attention_mask, to=float) -> Unsqueeze(axes=const.mask_axes=[1,2]) -> [1,1,1,S]
  -> Sub(const.one, m) -> Mul(., const.mask_neg = -10000.0)                -> mask [1,1,1,S]
Layer i, scope ``/layers.{i}/`` (x is the layer input [1,S,H]):
  attention/{q,k,v}/MatMul(x, layers.{i}.attention.{q,k,v}.weight [H,H])
  attention/{q,k,v}/Add(., layers.{i}.attention.{q,k,v}.bias [H])
  attention/core/:
    q: Reshape(q, const.shape_heads=[1,S,N,D]) -> Transpose(perm=[0,2,1,3])  -> [1,N,S,D]
    k: Reshape(k, const.shape_heads)          -> Transpose(perm=[0,2,3,1])  -> [1,N,D,S]
    v: Reshape(v, const.shape_heads)          -> Transpose(perm=[0,2,1,3])  -> [1,N,S,D]
    MatMul(q, kT) -> [1,N,S,S]; Div(., const.sqrt_head_dim = sqrt(D)); Add(., mask)
    Softmax(axis=-1); MatMul(probs, v) -> [1,N,S,D]
    Transpose(perm=[0,2,1,3]) -> Reshape(., const.shape_hidden=[1,S,H])
  attention/out/MatMul(ctx, layers.{i}.attention.out.weight [H,H]); Add(., .bias)
  attention/norm/Add(out, x); LayerNormalization(., layers.{i}.attention.norm.weight, .bias)
  ffn/up/MatMul(a, layers.{i}.ffn.up.weight [H,F]); Add(., .bias)            -> u [1,S,F]
  ffn/gelu/ (PyTorch's exported exact GELU u*0.5*(1+erf(u/sqrt2)), same node order):
    Div(u, const.sqrt2) -> Erf -> Add(., const.one) -> Mul(u, .) -> Mul(., const.half)
  ffn/down/MatMul(g, layers.{i}.ffn.down.weight [F,H]); Add(., .bias)
  ffn/norm/Add(down, a); LayerNormalization(., layers.{i}.ffn.norm.weight, .bias) -> next x
The last layer's output is ``last_hidden_state``. Node names are ``<scope><Op>`` with a
``q_``/``k_``/``v_``/``scores_``/``context_``/``mask_`` prefix inside attention/core (e.g.
``/layers.0/attention/core/scores_MatMul``), and ``Mul_1`` for GELU's second Mul.

Weights come from `numpy.random.default_rng(config.seed)` in the order the nodes are made:
matrices ~ N(0, 1/fan_in) so activations stay O(1) through the stack, biases and LayerNorm
shifts ~ N(0, 0.02^2), LayerNorm scales 1 + N(0, 0.02^2), embeddings ~ N(0, 0.1^2).
"""

from __future__ import annotations

import math

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from farm.models.config import GENERATOR_VERSION, EncoderConfig

OPSET = 17
LN_EPSILON = 1e-12
MASK_NEG = -10000.0


class _Graph:
    """Accumulates nodes and initializers; the rng is drawn in node-creation order."""

    def __init__(self, config: EncoderConfig) -> None:
        self.config = config
        self.rng = np.random.default_rng(config.seed)
        self.nodes: list[onnx.NodeProto] = []
        self.inits: list[onnx.TensorProto] = []
        self.names: set[str] = set()

    def const(self, name: str, value: np.ndarray) -> str:
        self.inits.append(numpy_helper.from_array(value, name))
        return name

    def normal(self, name: str, shape: tuple[int, ...], std: float, mean: float = 0.0) -> str:
        data = self.rng.standard_normal(shape, dtype=np.float32) * np.float32(std)
        return self.const(name, (data + np.float32(mean)).astype(np.float32))

    def op(self, op_type: str, scope: str, inputs: list[str], tag: str = "", **attrs) -> str:
        base = name = f"{scope}{tag}{op_type}"
        suffix = 0
        while name in self.names:  # PyTorch-style: the second Mul of a scope is Mul_1
            suffix += 1
            name = f"{base}_{suffix}"
        self.names.add(name)
        out = f"{name}_output_0"
        self.nodes.append(helper.make_node(op_type, inputs, [out], name=name, **attrs))
        return out

    def linear(self, scope: str, prefix: str, x: str, fan_in: int, fan_out: int) -> str:
        w = self.normal(f"{prefix}.weight", (fan_in, fan_out), 1.0 / math.sqrt(fan_in))
        b = self.normal(f"{prefix}.bias", (fan_out,), 0.02)
        return self.op("Add", scope, [self.op("MatMul", scope, [x, w]), b])

    def layer_norm(self, scope: str, prefix: str, x: str) -> str:
        h = self.config.hidden
        gamma = self.normal(f"{prefix}.weight", (h,), 0.02, mean=1.0)
        beta = self.normal(f"{prefix}.bias", (h,), 0.02)
        return self.op("LayerNormalization", scope, [x, gamma, beta], axis=-1,
                       epsilon=LN_EPSILON)


def _embeddings(g: _Graph) -> str:
    c = g.config
    word = g.normal("embeddings.word.weight", (c.vocab, c.hidden), 0.1)
    pos = g.normal("embeddings.position.weight", (c.seq, c.hidden), 0.1)
    pos_ids = g.const("embeddings.position_ids", np.arange(c.seq, dtype=np.int64)[None, :])
    w = g.op("Gather", "/embeddings/word/", [word, "input_ids"])
    p = g.op("Gather", "/embeddings/position/", [pos, pos_ids])
    return g.layer_norm("/embeddings/norm/", "embeddings.norm", g.op("Add", "/embeddings/", [w, p]))


def _mask(g: _Graph) -> str:
    m = g.op("Cast", "/mask/", ["attention_mask"], to=TensorProto.FLOAT)
    m = g.op("Unsqueeze", "/mask/", [m, "const.mask_axes"])
    m = g.op("Sub", "/mask/", ["const.one", m])
    return g.op("Mul", "/mask/", [m, "const.mask_neg"])


def _attention(g: _Graph, i: int, x: str, mask: str) -> str:
    h = g.config.hidden
    base, core = f"/layers.{i}/attention/", f"/layers.{i}/attention/core/"
    heads: dict[str, str] = {}
    for part, perm in (("q", [0, 2, 1, 3]), ("k", [0, 2, 3, 1]), ("v", [0, 2, 1, 3])):
        proj = g.linear(f"{base}{part}/", f"layers.{i}.attention.{part}", x, h, h)
        r = g.op("Reshape", core, [proj, "const.shape_heads"], tag=f"{part}_")
        heads[part] = g.op("Transpose", core, [r], tag=f"{part}_", perm=perm)
    s = g.op("MatMul", core, [heads["q"], heads["k"]], tag="scores_")
    s = g.op("Div", core, [s, "const.sqrt_head_dim"])
    s = g.op("Add", core, [s, mask], tag="mask_")
    s = g.op("Softmax", core, [s], axis=-1)
    ctx = g.op("MatMul", core, [s, heads["v"]], tag="context_")
    ctx = g.op("Transpose", core, [ctx], perm=[0, 2, 1, 3])
    ctx = g.op("Reshape", core, [ctx, "const.shape_hidden"])
    out = g.linear(f"{base}out/", f"layers.{i}.attention.out", ctx, h, h)
    res = g.op("Add", f"{base}norm/", [out, x])
    return g.layer_norm(f"{base}norm/", f"layers.{i}.attention.norm", res)


def _ffn(g: _Graph, i: int, a: str) -> str:
    c, base = g.config, f"/layers.{i}/ffn/"
    u = g.linear(f"{base}up/", f"layers.{i}.ffn.up", a, c.hidden, c.ffn)
    gelu = f"{base}gelu/"
    e = g.op("Erf", gelu, [g.op("Div", gelu, [u, "const.sqrt2"])])
    e = g.op("Mul", gelu, [u, g.op("Add", gelu, [e, "const.one"])])
    e = g.op("Mul", gelu, [e, "const.half"])
    down = g.linear(f"{base}down/", f"layers.{i}.ffn.down", e, c.ffn, c.hidden)
    res = g.op("Add", f"{base}norm/", [down, a])
    return g.layer_norm(f"{base}norm/", f"layers.{i}.ffn.norm", res)


def build_encoder(config: EncoderConfig) -> onnx.ModelProto:
    """The fp32 encoder for `config`; identical bytes for an identical config."""
    c = config
    g = _Graph(c)
    f32 = np.float32
    g.const("const.one", np.array(1.0, f32))
    g.const("const.half", np.array(0.5, f32))
    g.const("const.sqrt2", np.array(math.sqrt(2.0), f32))
    g.const("const.sqrt_head_dim", np.array(math.sqrt(c.head_dim), f32))
    g.const("const.mask_neg", np.array(MASK_NEG, f32))
    g.const("const.mask_axes", np.array([1, 2], np.int64))
    g.const("const.shape_heads", np.array([1, c.seq, c.heads, c.head_dim], np.int64))
    g.const("const.shape_hidden", np.array([1, c.seq, c.hidden], np.int64))

    x = _embeddings(g)
    mask = _mask(g)
    for i in range(c.layers):
        x = _ffn(g, i, _attention(g, i, x, mask))
    # rename the last tensor to the public output name (a rename, not an Identity node)
    g.nodes[-1].output[0] = "last_hidden_state"

    graph = helper.make_graph(
        g.nodes, "farm_encoder",
        [helper.make_tensor_value_info("input_ids", TensorProto.INT64, [1, c.seq]),
         helper.make_tensor_value_info("attention_mask", TensorProto.INT64, [1, c.seq])],
        [helper.make_tensor_value_info("last_hidden_state", TensorProto.FLOAT,
                                       [1, c.seq, c.hidden])],
        initializer=g.inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)],
                              producer_name="farm", producer_version=str(GENERATOR_VERSION))
    model.ir_version = 8  # readable by onnxruntime >= 1.10 on older device Pythons
    helper.set_model_props(model, {"farm.config": c.canonical_json(),
                                   "farm.generator": str(GENERATOR_VERSION)})
    onnx.checker.check_model(model, full_check=True)
    return model
