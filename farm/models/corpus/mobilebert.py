"""Generate the real MobileBERT graph as `torch.onnx.export` writes HF's `MobileBertModel`.

`mobilebert_weights(config) -> dict[name, ndarray]`: deterministic weights under the Hugging
Face state-dict names (Linear weights [out, in], as torch stores them).
`build_mobilebert(config) -> onnx.ModelProto`: the fp32 graph, opset 17, fixed shape
[1, seq], constants folded the way torch's `do_constant_folding=True` folds them.

Sources read (huggingface/transformers, src/transformers/models/mobilebert/):
configuration_mobilebert.py for the defaults (see mobilebert_config.py) and
modeling_mobilebert.py for the forward pass:

- MobileBertEmbeddings with trigram_input: the word embeddings [1,S,E] become
  ``cat([pad(x[:, 1:], right by 1), x, pad(x[:, :-1], left by 1)], dim=2)`` — token i sees
  the embeddings of tokens i+1, i, i-1 (zeros past either end) — then
  ``embedding_transformation`` (Linear 3E -> H), ``+ position_embeddings + token_type_
  embeddings``, then NoNorm (``x * weight + bias``, no statistics).
- Each MobileBertLayer (true_hidden_size = intra_bottleneck B): ``bottleneck.input``
  (Linear H->B + NoNorm) is the residual ``layer_input``; ``bottleneck.attention`` (Linear
  H->B + NoNorm) is the shared input of query AND key (key_query_shared_bottleneck); value
  reads the layer's H-wide hidden state (use_bottleneck_attention False). Self-attention at
  width B (heads of B/N), ``attention.output``: dense B->B, NoNorm(dense + layer_input).
  Then ffns-1 FFNLayers (dense B->F, ReLU, dense F->B, NoNorm(out + in)), the final
  intermediate (B->F, ReLU) and ``output`` (dense F->B, NoNorm(out + attention-side input),
  then ``output.bottleneck``: dense B->H, NoNorm(out + the layer's H-wide input)).
- MobileBertModel's extended mask: ``mask[:, None, None, :]`` cast to float,
  ``(1.0 - m) * finfo(float32).min``. No pooler (the published 24.6 M excludes it).

Op pattern (what torch's TorchScript exporter writes for the code above, read from its
symbolic functions; node names are module scopes, ``<scope>/<Op>`` then ``_1``, ``_2`` for
repeats in one scope; outputs ``<node>_output_0``):
- nn.Linear on a 3-D input: ``MatMul(x, W^T)`` with W^T a folded initializer
  ``onnx::MatMul_<n>``, then ``Add(bias, .)`` (bias first, as torch writes it).
- ``x[:, 1:]`` / ``x[:, :-1]``: Slice with Constant starts/ends/axes/steps; F.pad: Pad with a
  folded ``onnx::Pad_<n>`` pads initializer and a Constant value; torch.cat: Concat(axis=2).
- Python scalars are Constant nodes; shapes computed from ``x.size()`` fold to int64
  initializers ``onnx::Reshape_<n>``; ``key.transpose(-1, -2)`` after the head permute is
  merged by torch's peephole pass into one Transpose(perm=[0, 2, 3, 1]).
- ``position_embeddings(position_ids[:, :S])``: both inputs are constants, so constant
  folding turns the Gather into one [1, S, H] initializer added to the transformed
  embeddings; token types come from the ``token_type_ids`` input (Gather kept).
- ReLU is ``Relu`` under ``/intermediate_act_fn/``; NoNorm is ``Mul(x, weight)`` then
  ``Add(., bias)`` under ``/LayerNorm/``.

Inputs ``input_ids``, ``attention_mask``, ``token_type_ids`` int64 [1, S]; output
``last_hidden_state`` float32 [1, S, H].

Weights come from `numpy.random.default_rng(config.seed)` in state-dict order. Trained
MobileBERT keeps activations O(1) through 24 un-normalised layers; random weights only do
when the residual branches are damped, so branch outputs (attention output, FFN output and
output-bottleneck dense layers) get std BRANCH_GAIN/sqrt(fan_in), every other Linear
1/sqrt(fan_in), biases N(0, 0.02^2), NoNorm weights 1 + N(0, 0.02^2), biases N(0, 0.02^2),
embeddings N(0, 0.5^2) (word) and N(0, 0.1^2) (position, token type). BRANCH_GAIN = 0.1:
without normalisation every branch's quantization noise stays in the residual stream, and
two int8 routes (ORT's per-tensor uint8 activations, the custom executor's per-row int8)
must still agree element-wise at the bench's int8 tolerance (5e-2 + 5e-2 |ref|) after 24
layers. Measured at full size, int8-dynamic, seed 0 (output std 0.61 / 0.89 / 1.79):
gain 0.1 custom-vs-ORT max |diff| 0.036, 0 elements over; 0.2: 0.077, 0.05 % over;
0.3: 0.257, 8.9 % over.
"""

from __future__ import annotations

import math

import numpy as np

from farm.models.corpus.mobilebert_config import (
    MOBILEBERT_GENERATOR_VERSION,
    MobileBertConfig,
)

OPSET = 17
BRANCH_GAIN = 0.1  # damping of the residual branches' output layers (see module docstring)


def _linears(c: MobileBertConfig) -> list[tuple[str, int, int, bool]]:
    """(prefix, in, out, branch output?) of every Linear in state-dict order."""
    h, e, b, f = c.hidden, c.embedding, c.bottleneck, c.intermediate
    out: list[tuple[str, int, int, bool]] = [("embeddings.embedding_transformation", 3 * e, h,
                                              False)]
    for i in range(c.layers):
        p = f"encoder.layer.{i}"
        out += [(f"{p}.attention.self.query", b, b, False),
                (f"{p}.attention.self.key", b, b, False),
                (f"{p}.attention.self.value", h, b, False),
                (f"{p}.attention.output.dense", b, b, True),
                (f"{p}.intermediate.dense", b, f, False), (f"{p}.output.dense", f, b, True),
                (f"{p}.output.bottleneck.dense", b, h, True),
                (f"{p}.bottleneck.input.dense", h, b, False),
                (f"{p}.bottleneck.attention.dense", h, b, False)]
        for j in range(c.ffns - 1):
            out += [(f"{p}.ffn.{j}.intermediate.dense", b, f, False),
                    (f"{p}.ffn.{j}.output.dense", f, b, True)]
    return out


def _norms(c: MobileBertConfig) -> list[tuple[str, int]]:
    out = [("embeddings.LayerNorm", c.hidden)]
    for i in range(c.layers):
        p = f"encoder.layer.{i}"
        out += [(f"{p}.attention.output.LayerNorm", c.bottleneck),
                (f"{p}.output.LayerNorm", c.bottleneck),
                (f"{p}.output.bottleneck.LayerNorm", c.hidden),
                (f"{p}.bottleneck.input.LayerNorm", c.bottleneck),
                (f"{p}.bottleneck.attention.LayerNorm", c.bottleneck)]
        out += [(f"{p}.ffn.{j}.output.LayerNorm", c.bottleneck) for j in range(c.ffns - 1)]
    return out


def mobilebert_weights(c: MobileBertConfig) -> dict[str, np.ndarray]:
    """All parameters of MobileBertModel (no pooler) under their HF state-dict names."""
    rng = np.random.default_rng(c.seed)

    def normal(shape: tuple[int, ...], std: float, mean: float = 0.0) -> np.ndarray:
        return (rng.standard_normal(shape, dtype=np.float32) * np.float32(std)
                + np.float32(mean)).astype(np.float32)

    w = {"embeddings.word_embeddings.weight": normal((c.vocab, c.embedding), 0.5),
         "embeddings.position_embeddings.weight": normal((c.max_positions, c.hidden), 0.1),
         "embeddings.token_type_embeddings.weight": normal((c.type_vocab, c.hidden), 0.1)}
    for prefix, fan_in, fan_out, branch in _linears(c):
        gain = BRANCH_GAIN if branch else 1.0
        w[f"{prefix}.weight"] = normal((fan_out, fan_in), gain / math.sqrt(fan_in))
        w[f"{prefix}.bias"] = normal((fan_out,), 0.02)
    for prefix, n in _norms(c):
        w[f"{prefix}.weight"] = normal((n,), 0.02, mean=1.0)
        w[f"{prefix}.bias"] = normal((n,), 0.02)
    return w


class _Export:
    """Nodes and initializers named the way torch's exporter names them."""

    def __init__(self, weights: dict[str, np.ndarray]) -> None:
        from onnx import numpy_helper

        self._np = numpy_helper
        self.w = weights
        self.nodes: list = []
        self.inits: list = []
        self.used: set[str] = set()
        self.names: set[str] = set()
        self.counter = 0

    def param(self, name: str) -> str:
        """A parameter used as is (a bias, a NoNorm vector, an embedding table)."""
        if name not in self.used:
            self.used.add(name)
            self.inits.append(self._np.from_array(self.w[name], name))
        return name

    def folded(self, consumer: str, value: np.ndarray) -> str:
        self.counter += 1
        name = f"onnx::{consumer}_{self.counter}"
        self.inits.append(self._np.from_array(value, name))
        return name

    def op(self, op_type: str, scope: str, inputs: list[str], **attrs) -> str:
        from onnx import helper

        base = name = f"{scope}/{op_type}"
        n = 0
        while name in self.names:
            n += 1
            name = f"{base}_{n}"
        self.names.add(name)
        out = f"{name}_output_0"
        self.nodes.append(helper.make_node(op_type, inputs, [out], name=name, **attrs))
        return out

    def constant(self, scope: str, value: np.ndarray) -> str:
        from onnx import numpy_helper

        return self.op("Constant", scope, [], value=numpy_helper.from_array(value))

    def linear(self, scope: str, prefix: str, x: str) -> str:
        wt = np.ascontiguousarray(self.w[f"{prefix}.weight"].T)
        mm = self.op("MatMul", scope, [x, self.folded("MatMul", wt)])
        return self.op("Add", scope, [self.param(f"{prefix}.bias"), mm])

    def no_norm(self, scope: str, prefix: str, x: str) -> str:
        m = self.op("Mul", scope, [x, self.param(f"{prefix}.weight")])
        return self.op("Add", scope, [m, self.param(f"{prefix}.bias")])


def _embeddings(g: _Export, c: MobileBertConfig) -> str:
    s, i64 = "/embeddings", np.int64
    x = g.op("Gather", f"{s}/word_embeddings",
             [g.param("embeddings.word_embeddings.weight"), "input_ids"])
    one, big = np.array([1], i64), np.array([np.iinfo(np.int64).max], i64)

    def slice_(starts: np.ndarray, ends: np.ndarray) -> str:
        return g.op("Slice", s, [x, g.constant(s, starts), g.constant(s, ends),
                                 g.constant(s, one), g.constant(s, one)])

    zero = g.constant(s, np.array(0.0, np.float32))
    # ONNX pads [b0, b1, b2, e0, e1, e2]: token i+1 (pad the end), token i-1 (pad the start)
    nxt = g.op("Pad", s, [slice_(one, big), g.folded("Pad", np.array([0, 0, 0, 0, 1, 0], i64)),
                          zero], mode="constant")
    prv = g.op("Pad", s, [slice_(np.array([0], i64), np.array([-1], i64)),
                          g.folded("Pad", np.array([0, 1, 0, 0, 0, 0], i64)), zero],
               mode="constant")
    tri = g.op("Concat", s, [nxt, x, prv], axis=2)
    y = g.linear(f"{s}/embedding_transformation", "embeddings.embedding_transformation", tri)
    pos = g.w["embeddings.position_embeddings.weight"][None, : c.seq]
    y = g.op("Add", s, [y, g.folded("Add", np.ascontiguousarray(pos))])
    tt = g.op("Gather", f"{s}/token_type_embeddings",
              [g.param("embeddings.token_type_embeddings.weight"), "token_type_ids"])
    y = g.op("Add", s, [y, tt])
    return g.no_norm(f"{s}/LayerNorm", "embeddings.LayerNorm", y)


def _mask(g: _Export) -> str:
    m = g.op("Unsqueeze", "", ["attention_mask", g.constant("", np.array([1], np.int64))])
    m = g.op("Unsqueeze", "", [m, g.constant("", np.array([2], np.int64))])
    from onnx import TensorProto

    m = g.op("Cast", "", [m], to=TensorProto.FLOAT)
    m = g.op("Sub", "", [g.constant("", np.array(1.0, np.float32)), m])
    return g.op("Mul", "", [m, g.constant("", np.array(np.finfo(np.float32).min, np.float32))])


def _self_attention(g: _Export, c: MobileBertConfig, p: str, s: str, qk_in: str, v_in: str,
                    mask: str) -> str:
    heads = g.folded("Reshape", np.array([1, c.seq, c.heads, c.head_dim], np.int64))
    parts = {}
    for part, x in (("query", qk_in), ("key", qk_in), ("value", v_in)):
        y = g.linear(f"{s}/{part}", f"{p}.{part}", x)
        y = g.op("Reshape", s, [y, heads])
        parts[part] = g.op("Transpose", s, [y],
                           perm=[0, 2, 3, 1] if part == "key" else [0, 2, 1, 3])
    sc = g.op("MatMul", s, [parts["query"], parts["key"]])
    sc = g.op("Div", s, [sc, g.constant(s, np.array(math.sqrt(c.head_dim), np.float32))])
    sc = g.op("Add", s, [sc, mask])
    pr = g.op("Softmax", s, [sc], axis=-1)
    ctx = g.op("MatMul", s, [pr, parts["value"]])
    ctx = g.op("Transpose", s, [ctx], perm=[0, 2, 1, 3])
    return g.op("Reshape", s, [ctx, g.folded("Reshape", np.array([1, c.seq, c.bottleneck],
                                                                  np.int64))])


def _residual_out(g: _Export, s: str, p: str, x: str, residual: str) -> str:
    """dense, then NoNorm(dense + residual): attention.output, FFNOutput, output(.bottleneck)."""
    y = g.linear(f"{s}/dense", f"{p}.dense", x)
    return g.no_norm(f"{s}/LayerNorm", f"{p}.LayerNorm", g.op("Add", s, [y, residual]))


def _ffn_up(g: _Export, s: str, p: str, x: str) -> str:
    y = g.linear(f"{s}/dense", f"{p}.dense", x)
    return g.op("Relu", f"{s}/intermediate_act_fn", [y])


def _layer(g: _Export, c: MobileBertConfig, i: int, hidden: str, mask: str) -> str:
    s, p = f"/encoder/layer.{i}", f"encoder.layer.{i}"
    bi, ba = f"{s}/bottleneck/input", f"{s}/bottleneck/attention"
    layer_input = g.no_norm(f"{bi}/LayerNorm", f"{p}.bottleneck.input.LayerNorm",
                            g.linear(f"{bi}/dense", f"{p}.bottleneck.input.dense", hidden))
    shared = g.no_norm(f"{ba}/LayerNorm", f"{p}.bottleneck.attention.LayerNorm",
                       g.linear(f"{ba}/dense", f"{p}.bottleneck.attention.dense", hidden))
    ctx = _self_attention(g, c, f"{p}.attention.self", f"{s}/attention/self", shared, hidden,
                          mask)
    x = _residual_out(g, f"{s}/attention/output", f"{p}.attention.output", ctx, layer_input)
    for j in range(c.ffns - 1):
        fs, fp = f"{s}/ffn.{j}", f"{p}.ffn.{j}"
        up = _ffn_up(g, f"{fs}/intermediate", f"{fp}.intermediate", x)
        x = _residual_out(g, f"{fs}/output", f"{fp}.output", up, x)
    up = _ffn_up(g, f"{s}/intermediate", f"{p}.intermediate", x)
    x = _residual_out(g, f"{s}/output", f"{p}.output", up, x)
    return _residual_out(g, f"{s}/output/bottleneck", f"{p}.output.bottleneck", x, hidden)


def build_mobilebert(config: MobileBertConfig):  # -> onnx.ModelProto (onnx imported lazily)
    """The fp32 MobileBERT graph for `config`; identical bytes for an identical config."""
    import onnx
    from onnx import TensorProto, helper

    c = config
    g = _Export(mobilebert_weights(c))
    x = _embeddings(g, c)
    mask = _mask(g)
    for i in range(c.layers):
        x = _layer(g, c, i, x, mask)
    g.nodes[-1].output[0] = "last_hidden_state"  # torch names the graph output, no Identity
    ids = [helper.make_tensor_value_info(n, TensorProto.INT64, [1, c.seq])
           for n in ("input_ids", "attention_mask", "token_type_ids")]
    graph = helper.make_graph(
        g.nodes, "main_graph", ids,
        [helper.make_tensor_value_info("last_hidden_state", TensorProto.FLOAT,
                                       [1, c.seq, c.hidden])],
        initializer=g.inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)],
                              producer_name="farm", producer_version=str(
                                  MOBILEBERT_GENERATOR_VERSION))
    model.ir_version = 8  # readable by onnxruntime >= 1.10 on older device Pythons
    helper.set_model_props(model, {"farm.config": c.canonical_json(),
                                   "farm.generator": f"mobilebert-{MOBILEBERT_GENERATOR_VERSION}"})
    onnx.checker.check_model(model, full_check=True)
    return model


def describe(config: MobileBertConfig) -> str:
    """Parameter count next to the published figure, and MACs (one line)."""
    from farm.models.corpus.mobilebert_config import PUBLISHED_PARAMS

    p = config.params()
    return (f"mobilebert: {p / 1e6:.3f} M parameters without the pooler (published "
            f"{PUBLISHED_PARAMS / 1e6:.1f} M, {p / PUBLISHED_PARAMS - 1:+.2%}), "
            f"{config.macs() / 1e9:.3f} GMACs at seq {config.seq}")


if __name__ == "__main__":  # python -m farm.models.corpus.mobilebert
    print(describe(MobileBertConfig()))
