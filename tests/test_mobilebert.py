"""The real MobileBERT generator: size against the published figure, op pattern, and ORT's
output of the graph against a numpy forward written from Hugging Face's modeling code."""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest

from farm.models import PRESETS, build_model, make_inputs
from farm.models.corpus.mobilebert import build_mobilebert, describe, mobilebert_weights
from farm.models.corpus.mobilebert_config import PUBLISHED_PARAMS, MobileBertConfig

# small enough for a fast suite, every structural feature kept (4 FFNs, 2 layers, K % 32 == 0)
SMALL = MobileBertConfig(layers=2, hidden=64, embedding=32, bottleneck=32, heads=2,
                         intermediate=64, seq=16, vocab=512, max_positions=64)


def _reference(c: MobileBertConfig, w: dict[str, np.ndarray], feeds: dict) -> np.ndarray:
    """MobileBertModel.forward (no pooler) in numpy, from modeling_mobilebert.py."""
    ids, mask, types = feeds["input_ids"][0], feeds["attention_mask"][0], feeds["token_type_ids"][0]
    s = ids.shape[0]

    def lin(p: str, x: np.ndarray) -> np.ndarray:
        return x @ w[f"{p}.weight"].T + w[f"{p}.bias"]

    def no_norm(p: str, x: np.ndarray) -> np.ndarray:
        return x * w[f"{p}.LayerNorm.weight"] + w[f"{p}.LayerNorm.bias"]

    e = w["embeddings.word_embeddings.weight"][ids]                   # [S, E]
    zero = np.zeros((1, e.shape[1]), np.float32)
    tri = np.concatenate([np.concatenate([e[1:], zero]), e, np.concatenate([zero, e[:-1]])], 1)
    x = lin("embeddings.embedding_transformation", tri)
    x = (x + w["embeddings.position_embeddings.weight"][:s]
         + w["embeddings.token_type_embeddings.weight"][types])
    x = no_norm("embeddings", x)
    add_mask = (1.0 - mask.astype(np.float32)) * np.finfo(np.float32).min
    n, d = c.heads, c.head_dim
    for i in range(c.layers):
        p = f"encoder.layer.{i}"
        layer_input = no_norm(f"{p}.bottleneck.input", lin(f"{p}.bottleneck.input.dense", x))
        shared = no_norm(f"{p}.bottleneck.attention", lin(f"{p}.bottleneck.attention.dense", x))
        q = lin(f"{p}.attention.self.query", shared).reshape(s, n, d).transpose(1, 0, 2)
        k = lin(f"{p}.attention.self.key", shared).reshape(s, n, d).transpose(1, 0, 2)
        v = lin(f"{p}.attention.self.value", x).reshape(s, n, d).transpose(1, 0, 2)
        sc = q @ k.transpose(0, 2, 1) / np.sqrt(d) + add_mask
        pr = np.exp(sc - sc.max(-1, keepdims=True))
        pr /= pr.sum(-1, keepdims=True)
        ctx = (pr @ v).transpose(1, 0, 2).reshape(s, n * d)
        a = no_norm(f"{p}.attention.output", lin(f"{p}.attention.output.dense", ctx) + layer_input)
        for j in range(c.ffns - 1):
            f = f"{p}.ffn.{j}"
            up = np.maximum(lin(f"{f}.intermediate.dense", a), 0)
            a = no_norm(f"{f}.output", lin(f"{f}.output.dense", up) + a)
        up = np.maximum(lin(f"{p}.intermediate.dense", a), 0)
        o = no_norm(f"{p}.output", lin(f"{p}.output.dense", up) + a)
        x = no_norm(f"{p}.output.bottleneck", lin(f"{p}.output.bottleneck.dense", o) + x)
    return x[None]


def _ort(model, feeds: dict) -> np.ndarray:
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return sess.run(None, feeds)[0]


def test_parameter_count_and_macs_match_the_published_model(capsys) -> None:
    c = PRESETS["mobilebert"]
    assert isinstance(c, MobileBertConfig)
    assert (c.layers, c.hidden, c.embedding, c.bottleneck, c.heads, c.intermediate, c.ffns,
            c.vocab) == (24, 512, 128, 128, 4, 512, 4, 30522)
    line = describe(c)
    print(line)
    assert "24.582 M parameters" in line and "published 24.6 M" in line and "2.693 GMACs" in line
    assert abs(c.params() / PUBLISHED_PARAMS - 1) < 0.02
    # the count is the generator's own weights, not a formula that could drift from them
    w = mobilebert_weights(SMALL)
    assert sum(a.size for a in w.values()) == SMALL.params()
    assert 2.6e9 < c.macs() < 2.8e9


def test_small_graph_matches_the_numpy_reference() -> None:
    model = build_mobilebert(SMALL)
    rng = np.random.default_rng(3)
    feeds = {"input_ids": rng.integers(0, SMALL.vocab, (1, SMALL.seq)),
             "attention_mask": np.ones((1, SMALL.seq), np.int64),
             "token_type_ids": rng.integers(0, 2, (1, SMALL.seq))}
    feeds["attention_mask"][0, -3:] = 0
    ref = _reference(SMALL, mobilebert_weights(SMALL), feeds)
    out = _ort(model, feeds)
    assert out.shape == (1, SMALL.seq, SMALL.hidden)
    np.testing.assert_allclose(out, ref, atol=2e-5, rtol=1e-4)
    # the trigram order matters: swapping the i+1 and i-1 thirds changes the output
    w = mobilebert_weights(SMALL)
    e = SMALL.embedding
    t = w["embeddings.embedding_transformation.weight"]
    w["embeddings.embedding_transformation.weight"] = np.concatenate(
        [t[:, 2 * e:], t[:, e:2 * e], t[:, :e]], axis=1)
    assert not np.allclose(_reference(SMALL, w, feeds), out, atol=1e-3)


def test_op_pattern_is_torch_exports() -> None:
    model = build_mobilebert(SMALL)
    names = [n.name for n in model.graph.node]
    ops = {n.name: n.op_type for n in model.graph.node}
    for name, op in (("/embeddings/word_embeddings/Gather", "Gather"),
                     ("/embeddings/Concat", "Concat"), ("/embeddings/Pad_1", "Pad"),
                     ("/embeddings/embedding_transformation/MatMul", "MatMul"),
                     ("/embeddings/LayerNorm/Mul", "Mul"),
                     ("/encoder/layer.1/bottleneck/attention/dense/MatMul", "MatMul"),
                     ("/encoder/layer.0/attention/self/Softmax", "Softmax"),
                     ("/encoder/layer.0/ffn.2/intermediate/intermediate_act_fn/Relu", "Relu"),
                     ("/encoder/layer.1/output/bottleneck/LayerNorm/Add", "Add")):
        assert ops.get(name) == op, name
    assert "LayerNormalization" not in ops.values() and "Erf" not in ops.values()
    layer0 = [ops[n] for n in names if n.startswith("/encoder/layer.0/ffn.0/")]
    assert layer0 == ["MatMul", "Add", "Relu", "MatMul", "Add", "Add", "Mul", "Add"]
    bias_add = next(n for n in model.graph.node
                    if n.name == "/encoder/layer.0/attention/self/query/Add")
    assert bias_add.input[0] == "encoder.layer.0.attention.self.query.bias"  # bias first, as torch
    assert [i.name for i in model.graph.input] == ["input_ids", "attention_mask", "token_type_ids"]
    assert model.graph.output[0].name == "last_hidden_state"


def test_preset_builds_through_build_model_with_inputs(tmp_path) -> None:
    info = build_model(SMALL, "fp32", tmp_path)
    assert info.name.startswith("mobilebert") or info.path.name.startswith("mobilebert")
    feeds = make_inputs(info, 0)
    assert set(feeds) == {"input_ids", "attention_mask", "token_type_ids"}
    assert feeds["input_ids"].shape == (1, SMALL.seq) and not feeds["token_type_ids"].any()
    ref = _reference(SMALL, mobilebert_weights(SMALL), feeds)
    sess = ort.InferenceSession(str(info.path), providers=["CPUExecutionProvider"])
    np.testing.assert_allclose(sess.run(None, feeds)[0], ref, atol=2e-5, rtol=1e-4)


@pytest.mark.slow
def test_full_size_graph_matches_the_numpy_reference(tmp_path) -> None:
    info = build_model("mobilebert", "fp32", tmp_path)
    feeds = make_inputs(info, 0)
    ref = _reference(PRESETS["mobilebert"], mobilebert_weights(PRESETS["mobilebert"]), feeds)
    sess = ort.InferenceSession(str(info.path), providers=["CPUExecutionProvider"])
    out = sess.run(None, feeds)[0]
    assert out.shape == (1, 128, 512)
    np.testing.assert_allclose(out, ref, atol=1e-3, rtol=1e-3)
