"""The encoder generator, its presets and variants, model checks and deterministic inputs."""

from __future__ import annotations

import dataclasses
import json
import math
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from farm.cli.main import main
from farm.errors import BuildError
from farm.models import (
    PRESETS,
    VARIANTS,
    EncoderConfig,
    build_encoder,
    build_model,
    ftns_module,
    make_inputs,
    resolve_model,
    write_inputs,
)

TINY = PRESETS["tiny"]


def _run(path: Path | str, feeds: dict[str, np.ndarray]) -> np.ndarray:
    sess = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    return sess.run(None, feeds)[0]


@pytest.fixture(scope="module")
def tiny_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("models")


def test_generator_is_deterministic_and_seeded() -> None:
    a = build_encoder(TINY).SerializeToString()
    assert a == build_encoder(TINY).SerializeToString()
    assert a != build_encoder(dataclasses.replace(TINY, seed=1)).SerializeToString()


def test_layer_op_pattern_matches_the_documented_contract() -> None:
    model = build_encoder(TINY)
    layer0 = [n.op_type for n in model.graph.node if n.name.startswith("/layers.0/")]
    proj = ["MatMul", "Add", "Reshape", "Transpose"]
    assert layer0 == [
        *proj, *proj, *proj,  # q, k, v: projection then head split
        "MatMul", "Div", "Add", "Softmax", "MatMul", "Transpose", "Reshape",
        "MatMul", "Add", "Add", "LayerNormalization",  # out projection, residual, norm
        "MatMul", "Add", "Div", "Erf", "Add", "Mul", "Mul",  # ffn up + exact GELU
        "MatMul", "Add", "Add", "LayerNormalization",  # ffn down, residual, norm
    ]
    names = {n.name for n in model.graph.node}
    for name in ("/layers.1/attention/core/scores_MatMul", "/layers.1/attention/core/Softmax",
                 "/layers.1/ffn/gelu/Mul_1", "/mask/Mul", "/embeddings/norm/LayerNormalization"):
        assert name in names
    perms = {n.name: list(n.attribute[0].ints) for n in model.graph.node
             if n.op_type == "Transpose" and n.name.startswith("/layers.0/")}
    assert perms["/layers.0/attention/core/k_Transpose"] == [0, 2, 3, 1]
    assert model.graph.output[0].name == "last_hidden_state"
    assert model.opset_import[0].version == 17


def _layer_norm(x: np.ndarray, g: np.ndarray, b: np.ndarray) -> np.ndarray:
    mu = x.mean(-1, keepdims=True)
    var = ((x - mu) ** 2).mean(-1, keepdims=True)
    return (x - mu) / np.sqrt(var + 1e-12) * g + b


def _reference(model: onnx.ModelProto, c: EncoderConfig, feeds: dict) -> np.ndarray:
    """The encoder written out in numpy from the docstring, with the model's weights."""
    from scipy.special import erf

    w = {i.name: numpy_helper.to_array(i).astype(np.float64) for i in model.graph.initializer}
    ids, mask = feeds["input_ids"][0], feeds["attention_mask"][0].astype(np.float64)
    x = w["embeddings.word.weight"][ids] + w["embeddings.position.weight"][np.arange(c.seq)]
    x = _layer_norm(x, w["embeddings.norm.weight"], w["embeddings.norm.bias"])
    add_mask = (1.0 - mask) * -10000.0
    for i in range(c.layers):
        p = f"layers.{i}."

        def lin(t: np.ndarray, name: str, p: str = p) -> np.ndarray:
            return t @ w[f"{p}{name}.weight"] + w[f"{p}{name}.bias"]

        heads = [lin(x, f"attention.{n}").reshape(c.seq, c.heads, c.head_dim).transpose(1, 0, 2)
                 for n in "qkv"]
        s = heads[0] @ heads[1].transpose(0, 2, 1) / math.sqrt(c.head_dim) + add_mask
        s = np.exp(s - s.max(-1, keepdims=True))
        ctx = (s / s.sum(-1, keepdims=True)) @ heads[2]
        ctx = ctx.transpose(1, 0, 2).reshape(c.seq, c.hidden)
        a = _layer_norm(lin(ctx, "attention.out") + x, w[p + "attention.norm.weight"],
                        w[p + "attention.norm.bias"])
        u = lin(a, "ffn.up")
        g = u * 0.5 * (1.0 + erf(u / math.sqrt(2.0)))
        x = _layer_norm(lin(g, "ffn.down") + a, w[p + "ffn.norm.weight"], w[p + "ffn.norm.bias"])
    return x[None].astype(np.float32)


def test_fp32_graph_computes_the_documented_encoder(tiny_dir: Path) -> None:
    info = build_model("tiny", "fp32", tiny_dir)
    feeds = make_inputs(info, seed=3)
    assert feeds["attention_mask"][0, -1] == 0  # padding is exercised
    got = _run(info.path, feeds)
    want = _reference(onnx.load(str(info.path)), TINY, feeds)
    assert got.shape == (1, TINY.seq, TINY.hidden)
    np.testing.assert_allclose(got, want, atol=2e-4, rtol=1e-3)
    assert 0.5 < float(got.std()) < 2.0  # weights keep activations O(1)


def test_param_count_matches_initializers() -> None:
    model = build_encoder(TINY)
    n = sum(int(np.prod(i.dims)) for i in model.graph.initializer
            if not i.name.startswith(("const.", "embeddings.position_ids")))
    assert n == TINY.params()


@pytest.mark.parametrize("variant,marker_op,max_mean_err", [
    ("int8-dynamic", "MatMulInteger", 0.05),
    ("int8-qdq", "QuantizeLinear", 0.15),
    ("int4", "MatMulNBits", 0.15),
])
def test_quantized_variants_build_run_and_stay_close(
        tiny_dir: Path, variant: str, marker_op: str, max_mean_err: float) -> None:
    ref_info = build_model("tiny", "fp32", tiny_dir)
    info = build_model("tiny", variant, tiny_dir)
    assert info.variant == variant and info.preset == "tiny"
    ops = {n.op_type for n in onnx.load(str(info.path)).graph.node}
    assert marker_op in ops
    feeds = make_inputs(ref_info, seed=0)
    got, want = _run(info.path, feeds), _run(ref_info.path, feeds)
    err = np.abs(got - want)
    assert 0 < float(err.mean()) < max_mean_err  # quantized (not identical), still close
    cosine = float((got * want).sum() / np.linalg.norm(got) / np.linalg.norm(want))
    assert cosine > 0.99


def test_int8_qdq_is_u8s8_as_recorded(tiny_dir: Path) -> None:
    """ORT's x86 QDQ MatMul fusion takes uint8 activations only (quantize.QDQ_OPTIONS):
    activations uint8 with calibrated (non-zero) zero points, weights int8, and the file's
    metadata says so."""
    from farm.models.quantize import QDQ_OPTIONS, QUANTIZER_METADATA

    model = onnx.load(str(build_model("tiny", "int8-qdq", tiny_dir).path))
    consts = {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}
    q_zps = [consts[n.input[2]] for n in model.graph.node if n.op_type == "QuantizeLinear"]
    assert q_zps and {z.dtype for z in q_zps} == {np.dtype(np.uint8)}
    assert any(int(z) != 0 for z in q_zps)
    weights = [consts[n.input[0]] for n in model.graph.node
               if n.op_type == "DequantizeLinear" and n.input[0] in consts]
    assert weights and {w.dtype for w in weights} == {np.dtype(np.int8)}
    meta = json.loads(next(p.value for p in model.metadata_props
                           if p.key == QUANTIZER_METADATA))
    assert meta["options"]["activation_type"] == QDQ_OPTIONS["activation_type"] == "QUInt8"


def test_build_is_cached_and_quantizers_are_deterministic(tmp_path: Path, tiny_dir: Path) -> None:
    first = build_model("tiny", "int8-qdq", tiny_dir)
    mtime = first.path.stat().st_mtime_ns
    again = build_model("tiny", "int8-qdq", tiny_dir)
    assert again == first and again.path.stat().st_mtime_ns == mtime
    fresh = build_model("tiny", "int8-qdq", tmp_path)
    assert fresh.sha256 == first.sha256 and fresh.path != first.path


def test_config_change_gets_its_own_file(tiny_dir: Path) -> None:
    a = build_model("tiny", "fp32", tiny_dir)
    b = build_model(dataclasses.replace(TINY, seq=16), "fp32", tiny_dir, name="tiny-s16")
    assert a.path != b.path and b.path.name.startswith("tiny-s16-fp32-")
    assert onnx.load(str(b.path)).graph.input[0].type.tensor_type.shape.dim[1].dim_value == 16


def test_resolve_model_accepts_presets_and_onnx_paths(tiny_dir: Path) -> None:
    built = build_model("tiny", "fp32", tiny_dir)
    assert resolve_model("tiny", "fp32", tiny_dir) == built
    from_path = resolve_model(str(built.path), "fp32", tiny_dir)
    assert from_path.preset is None and from_path.sha256 == built.sha256
    quant = resolve_model(built.path, "int8-dynamic", tiny_dir)
    assert quant.path.name.startswith(built.path.stem + "-int8-dynamic-")


def test_unknown_preset_and_variant_are_build_errors(tiny_dir: Path) -> None:
    with pytest.raises(BuildError, match="neither a preset nor an existing file"):
        resolve_model("bert-huge", "fp32", tiny_dir)
    with pytest.raises(BuildError, match="unknown model variant"):
        build_model("tiny", "int3", tiny_dir)
    with pytest.raises(BuildError, match="not divisible"):
        EncoderConfig(hidden=65, heads=2)


def _save(model: onnx.ModelProto, path: Path) -> Path:
    path.write_bytes(model.SerializeToString())
    return path


def _one_node_model(inp_type: int = TensorProto.FLOAT, op: str = "Relu",
                    domain: str = "") -> onnx.ModelProto:
    node = helper.make_node(op, ["x"], ["y"], domain=domain)
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", inp_type, [2])],
                              [helper.make_tensor_value_info("y", inp_type, [2])])
    opsets = [helper.make_opsetid("", 17)] + ([helper.make_opsetid(domain, 1)] if domain else [])
    return helper.make_model(graph, opset_imports=opsets)


def test_bad_models_get_errors_naming_the_problem(tmp_path: Path, tiny_dir: Path) -> None:
    cases: list[tuple[Path, str]] = []
    text = tmp_path / "notes.onnx"
    text.write_text("this is not a model\n" * 10)
    cases.append((text, "not an ONNX model"))
    good = build_model("tiny", "fp32", tiny_dir).path.read_bytes()
    cut = tmp_path / "cut.onnx"
    cut.write_bytes(good[: len(good) // 2])
    cases.append((cut, "truncated"))
    cases.append((tmp_path / "absent.onnx", "does not exist"))
    const = helper.make_graph(
        [helper.make_node("Constant", [], ["y"], value=numpy_helper.from_array(
            np.ones(2, np.float32)))], "g", [],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])])
    cases.append((_save(helper.make_model(const), tmp_path / "noin.onnx"), "has no inputs"))
    cases.append((_save(_one_node_model(TensorProto.FLOAT16, "Abs"), tmp_path / "f16.onnx"),
                  "FLOAT16"))
    cases.append((_save(_one_node_model(op="NoSuchOp", domain="farm.test"),
                        tmp_path / "unknown.onnx"), "onnxruntime"))
    for path, needle in cases:
        with pytest.raises(BuildError, match=needle) as exc:
            resolve_model(str(path), "fp32", tiny_dir)
        assert str(path) in str(exc.value)


def test_make_inputs_is_deterministic_and_in_range(tiny_dir: Path, tmp_path: Path) -> None:
    info = build_model("tiny", "fp32", tiny_dir)
    a, b, c = make_inputs(info, 7), make_inputs(info, 7), make_inputs(info, 8)
    assert all(np.array_equal(a[k], b[k]) for k in a)
    assert not np.array_equal(a["input_ids"], c["input_ids"])
    assert a["input_ids"].dtype == np.int64 and a["input_ids"].shape == (1, TINY.seq)
    assert a["input_ids"].min() >= 0 and a["input_ids"].max() < TINY.vocab
    assert a["attention_mask"].sum() == TINY.seq - TINY.seq // 8
    path = write_inputs(info, 7, tmp_path)
    assert path == write_inputs(info, 7, tmp_path)  # content-addressed
    back = ftns_module().read(str(path))
    assert list(back) == ["input_ids", "attention_mask"]
    assert all(np.array_equal(back[k], a[k]) for k in a)


def test_presets_are_sane() -> None:
    mb = PRESETS["mobilebert"]  # the real architecture now (tests/test_mobilebert.py)
    assert (mb.layers, mb.hidden, mb.heads, mb.seq) == (24, 512, 4, 128)
    assert 24e6 < mb.params() < 25e6  # MobileBERT-uncased: 24.6 M without the pooler
    assert PRESETS["tiny"].params() < 200_000
    assert set(VARIANTS) == {"fp32", "int8-dynamic", "int8-qdq", "int4"}


def test_cli_models_list_and_build(monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
                                   capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("FARM_HOME", str(tmp_path))
    assert main(["models", "list", "--output", "json"]) == 0
    listing = json.loads(capsys.readouterr().out)
    assert listing["presets"]["tiny"]["params"] == TINY.params()
    assert main(["models", "build", "tiny", "--variant", "int4", "--output", "json"]) == 0
    built = json.loads(capsys.readouterr().out)
    assert built[0]["variant"] == "int4" and Path(built[0]["path"]).is_file()
    assert Path(built[0]["path"]).parent == tmp_path / "models"
    assert main(["models", "build", "nope"]) == 1
    assert "neither a preset" in capsys.readouterr().err


@pytest.mark.slow
def test_mobilebert_fp32_builds_and_runs(tmp_path: Path) -> None:
    info = build_model("mobilebert", "fp32", tmp_path)
    out = _run(info.path, make_inputs(info, 0))
    assert out.shape == (1, 128, 512) and np.isfinite(out).all()


def test_parallel_builds_of_one_model_do_not_collide(tmp_path: Path) -> None:
    from concurrent.futures import ThreadPoolExecutor

    variants = ["fp32", "int8-dynamic", "int8-dynamic", "int4", "int4"]
    with ThreadPoolExecutor(4) as pool:
        infos = list(pool.map(lambda v: build_model("tiny", v, tmp_path), variants))
    assert len({(i.variant, i.sha256) for i in infos}) == 3
    assert sorted(p.name.split("-")[1] for p in tmp_path.iterdir()) == ["fp32", "int4", "int8"]
