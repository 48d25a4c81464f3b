"""The model front-end on the generated corpus (small dims): shapes bound, canonical op set,
outputs equal to ORT's run of the source file, and the custom lowerer taking the result."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper

from farm.errors import BuildError, UsageError
from farm.models.check import check_model_file
from farm.models.corpus import corpus_model
from farm.models.frontend import canonicalize, detect_quantisation, make_spec, quiet_stdout
from farm.models.frontend.graph import MS
from farm.models.inputs import make_inputs
from farm.routes.custom.lower import lower

# a spread of export patterns: opset 11/14/17, fixed/dynamic, and ORT's optimizer
CANON = ["bert-opset14-dynamic", "bert-opset11-fixed", "distilbert-opset14-dynamic",
         "roberta-opset17-dynamic", "albert-opset14-fixed", "bert-opset14-dynamic+ortopt",
         "distilbert-opset14-fixed+ortopt", "albert-opset17-dynamic+ortopt",
         "bert-opset18-dynamic", "distilbert-opset18-fixed",
         # quantize_static's Q/DQ pairs around the query scale and the SDPA mask's scores
         "distilbert-opset14-fixed+qdq", "bert-opset18-dynamic+qdq"]
NOT_CANONICAL = {"ReduceMean", "Pow", "Sqrt", "Constant", "Shape", "Concat", "Where", "Expand",
                 "Gemm", "Slice"}


@pytest.fixture(scope="module")
def corpus_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("corpus")


@pytest.fixture(autouse=True)
def farm_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FARM_HOME", str(tmp_path / "home"))


def run(path: Path, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
    opts = ort.SessionOptions()
    opts.log_severity_level = 3
    return ort.InferenceSession(str(path), opts, providers=["CPUExecutionProvider"]).run(
        None, feeds)


@pytest.mark.parametrize("name", CANON)
def test_canonical_form_matches_the_source(name: str, corpus_dir: Path, tmp_path: Path) -> None:
    src = corpus_model(f"{name}@small", corpus_dir)
    seq = 12 if "dynamic" in name else 16  # a fixed export keeps its own dims
    canon = canonicalize(src, make_spec(seq=12 if "dynamic" in name else None), tmp_path)
    model = onnx.load(str(canon.path))
    ops = {n.op_type for n in model.graph.node}
    # ALBERT's tanh GELU (gelu_new) keeps its Pow(x, 3): no canonical op for it yet
    assert not ops & (NOT_CANONICAL - ({"Pow"} if "albert" in name else set())), ops
    assert not [n for n in model.graph.node if n.domain == MS]
    assert "LayerNormalization" in ops
    assert all(d == [1, seq] for d in canon.input_shapes.values())
    assert canon.symbolic_left == []
    feeds = make_inputs(src, 3, canon.input_shapes)
    for a, b in zip(run(src, feeds), run(canon.path, feeds), strict=True):
        np.testing.assert_allclose(b, a, atol=1e-4, rtol=1e-4)


def test_layernorm_epsilon_survives(corpus_dir: Path, tmp_path: Path) -> None:
    """onnxscript's rules may drop Add(var, eps): the fusion runs first and keeps eps."""
    canon = canonicalize(corpus_model("bert-opset14-fixed@small", corpus_dir), None, tmp_path)
    eps = {a.f for n in onnx.load(str(canon.path)).graph.node
           if n.op_type == "LayerNormalization" for a in n.attribute if a.name == "epsilon"}
    assert len(eps) == 1 and eps.pop() == pytest.approx(1e-12)


def test_custom_lowers_the_corpus_and_names_the_node_it_cannot(corpus_dir: Path,
                                                               tmp_path: Path) -> None:
    for tool in ("", "+qdynamic", "+q4", "+ortopt"):
        src = corpus_model(f"distilbert-opset14-dynamic{tool}@small", corpus_dir)
        ir = lower(onnx.load(str(canonicalize(src, None, tmp_path).path)))
        assert any(op.name for op in ir.ops)
    for family in ("bert", "albert", "roberta"):  # pooler, gelu_new, position ids
        src = corpus_model(f"{family}-opset14-dynamic@small", corpus_dir)
        ir = lower(onnx.load(str(canonicalize(src, None, tmp_path).path)))
        assert sum(op.name == "/pooler/Gather" for op in ir.ops) == 1, family
    bert = onnx.load(str(canonicalize(corpus_model("bert-opset14-dynamic@small", corpus_dir),
                                      None, tmp_path).path))
    gather = next(n for n in bert.graph.node if n.name == "/pooler/Gather")
    gather.attribute[0].i = 2  # a column gather is no pooler: a fallback kernel takes it
    # and the graph no longer adds up; the fallback's shape probe (ORT) says where
    with pytest.raises(BuildError, match=r"binding the fallback ops' shapes .*"
                                         r"'/pooler/dense/MatMul'.*dimension mismatch"):
        lower(bert)


def test_quantisation_is_detected(corpus_dir: Path) -> None:
    for tool, variant in (("", "fp32"), ("+qdynamic", "int8-dynamic"), ("+qdq", "int8-qdq"),
                          ("+q4", "int4")):
        path = corpus_model(f"distilbert-opset14-fixed{tool}@small", corpus_dir)
        assert detect_quantisation(onnx.load(str(path))) == variant


def test_files_ort_loads_are_accepted_and_others_refused(corpus_dir: Path,
                                                         tmp_path: Path) -> None:
    # ORT's optimizer writes LayerNormalization at opset 14: the ONNX checker refuses it
    opt = corpus_model("distilbert-opset14-dynamic+ortopt@small", corpus_dir)
    with pytest.raises(onnx.checker.ValidationError):
        onnx.checker.check_model(onnx.load(str(opt)))
    check_model_file(opt)
    node = helper.make_node("Frobnicate", ["x"], ["y"], name="frob", domain="my.ops")
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info(
        "x", TensorProto.FLOAT, [1, 4])], [helper.make_tensor_value_info(
            "y", TensorProto.FLOAT, [1, 4])])
    bad = tmp_path / "bad.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17),
                                                      helper.make_opsetid("my.ops", 1)]),
              str(bad))
    with pytest.raises(BuildError, match=r"onnxruntime .* cannot load it: .*Frobnicate"):
        check_model_file(bad)


def test_shape_options_are_validated(corpus_dir: Path, tmp_path: Path) -> None:
    with pytest.raises(UsageError, match="NAME=D0"):
        make_spec(["input_ids=1,x"])
    src = corpus_model("bert-opset14-dynamic@small", corpus_dir)
    with pytest.raises(UsageError, match="does not have"):
        canonicalize(src, make_spec(["pixels=1,3"]), tmp_path)
    with pytest.raises(UsageError, match="3 dims given"):
        canonicalize(src, make_spec(["input_ids=1,2,3"]), tmp_path)
    fixed = corpus_model("bert-opset14-fixed@small", corpus_dir)
    with pytest.raises(UsageError, match="fixed at 16"):
        canonicalize(fixed, make_spec(seq=12), tmp_path)
    canon = canonicalize(src, make_spec(["input_ids=2,8", "attention_mask=2,8",
                                         "token_type_ids=2,8"]), tmp_path)
    assert canon.input_shapes["input_ids"] == [2, 8]
    assert canon.symbolic_inputs["input_ids"] == ["batch", "sequence"]


def test_quiet_stdout_captures_c_level_writes(capfd: pytest.CaptureFixture[str]) -> None:
    with quiet_stdout() as got:
        os.write(1, b"IR dump from C\n")  # what TVM's C++ importer does
    assert "IR dump from C" in got.text
    assert "IR dump" not in capfd.readouterr().out


def test_int4_file_dequantised_for_tvm(corpus_dir: Path, tmp_path: Path) -> None:
    from farm.bench.quant_rule import per_token_cosine

    src = corpus_model("distilbert-opset14-fixed+q4@small", corpus_dir)
    canon = canonicalize(src, None, tmp_path, dequantize=True)
    ops = {n.op_type for n in onnx.load(str(canon.path)).graph.node}
    assert "MatMulNBits" not in ops and canon.rewrites["dequantize:MatMulNBits"] == 12
    feeds = make_inputs(src, 0, canon.input_shapes)
    (a, *_), (b, *_) = run(src, feeds), run(canon.path, feeds)
    # ORT's int4 (accuracy_level 4) quantises activations too: close, not equal
    assert per_token_cosine(b, a).min() > 0.999


def test_a_dim_left_symbolic_is_flagged_and_shown(tmp_path: Path) -> None:
    """NonZero's output size depends on the data: no binding makes it static."""
    import io

    from rich.console import Console

    from farm.views.live import BenchState, apply, render

    node = helper.make_node("NonZero", ["input_ids"], ["idx"], name="nz")
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info(
        "input_ids", TensorProto.INT64, ["batch", "sequence"])], [
        helper.make_tensor_value_info("idx", TensorProto.INT64, None)])
    src = tmp_path / "nz.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(src))
    canon = canonicalize(src, make_spec(seq=8), tmp_path)
    assert canon.input_shapes == {"input_ids": [1, 8]}
    assert canon.symbolic_left == ["idx"] and canon.flags()["symbolic_dims"] == ["idx"]
    state = BenchState()
    for event in ({"event": "run", "device": None, "run_id": "r", "devices": ["local"],
                   "routes": ["tvm"]},
                  {"event": "warning", "device": "local", "route": "tvm",
                   "message": "tvm: 1 tensor(s) keep a symbolic dim (e.g. idx)"}):
        apply(state, event)
    console = Console(file=io.StringIO(), force_terminal=True, color_system=None, width=200)
    console.print(render(state))
    assert "warning: tvm: 1 tensor(s) keep a symbolic dim" in console.file.getvalue()


def test_if_branches_reading_the_outer_graph_keep_their_producers(tmp_path: Path) -> None:
    """ORT's quantize_dynamic writes DeBERTa's shape-conditioned If before the nodes its
    branches read from the outer graph: the front-end orders the If after them and keeps an
    initializer only a branch reads (else onnxscript inlines the branch onto a dangling name:
    "reads a tensor nothing produces")."""
    f32 = TensorProto.FLOAT
    then = helper.make_graph([helper.make_node("Add", ["c", "w"], ["t"], name="then/add")],
                             "then", [], [helper.make_tensor_value_info("t", f32, None)])
    other = helper.make_graph([helper.make_node("Identity", ["c"], ["e"], name="else/id")],
                              "else", [], [helper.make_tensor_value_info("e", f32, None)])
    chain = [helper.make_node("Cast", ["input_ids"], ["c0"], to=f32, name="cast")] + [
        helper.make_node("Neg", [f"c{i}"], [f"c{i + 1}" if i < 3 else "c"], name=f"neg{i}")
        for i in range(4)]  # c is ready only after the If's condition, in a naive order
    nodes = [helper.make_node("If", ["cond"], ["picked"], name="if", then_branch=then,
                              else_branch=other),
             helper.make_node("Shape", ["input_ids"], ["shape"], name="shape"),
             helper.make_node("Gather", ["shape", "one"], ["seq"], axis=0, name="seq"),
             helper.make_node("Equal", ["seq", "eight"], ["cond"], name="cond"),
             *chain, helper.make_node("Mul", ["picked", "two"], ["y"], name="out")]
    inits = [helper.make_tensor("one", TensorProto.INT64, [], [1]),
             helper.make_tensor("eight", TensorProto.INT64, [], [8]),
             helper.make_tensor("two", f32, [], [2.0]),
             helper.make_tensor("w", f32, [8], [float(i) for i in range(8)])]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info(
        "input_ids", TensorProto.INT64, ["batch", "sequence"])],
        [helper.make_tensor_value_info("y", f32, None)], inits)
    src = tmp_path / "if.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(src))
    canon = canonicalize(src, make_spec(seq=8), tmp_path)
    ids = {"input_ids": np.arange(8, dtype=np.int64).reshape(1, 8)}
    want = ort.InferenceSession(str(src), providers=["CPUExecutionProvider"]).run(None, ids)
    got = ort.InferenceSession(str(canon.path), providers=["CPUExecutionProvider"]).run(None, ids)
    np.testing.assert_allclose(got[0], want[0])
    assert want[0].tolist() == [[2 * (i + i) for i in range(8)]]  # the then branch: c + w


def _signature(path: Path) -> tuple[list[tuple[str, tuple[tuple[int, ...], ...]]], list[tuple]]:
    """A graph up to node names and order: (op, output shapes) of every node, and the
    initializers' (dtype, shape)."""
    model = onnx.shape_inference.infer_shapes(onnx.load(str(path)))
    shapes = {v.name: tuple(d.dim_value if d.HasField("dim_value") else -1
                            for d in v.type.tensor_type.shape.dim)
              for v in [*model.graph.value_info, *model.graph.output]}
    nodes = sorted((n.op_type, tuple(shapes.get(o, ()) for o in n.output))
                   for n in model.graph.node)
    inits = sorted((t.data_type, tuple(t.dims)) for t in model.graph.initializer)
    return nodes, inits


@pytest.mark.parametrize("family", ["bert-opset14", "distilbert-opset14", "roberta-opset14",
                                    "albert-opset14", "bert-opset11", "bert-opset18"])
def test_dynamic_axes_canonicalise_to_the_fixed_graph(family: str, corpus_dir: Path,
                                                      tmp_path: Path) -> None:
    """Bound, a dynamic-axes export is the fixed export's graph (same ops with the same
    shapes and weights; only node names and order differ): what TVM and custom build from
    it cannot be slower for the axes being dynamic (issue 11: dynamic within 1.2x of fixed)."""
    fixed = canonicalize(corpus_model(f"{family}-fixed@small", corpus_dir), make_spec(),
                         tmp_path / "f")
    dynamic = canonicalize(corpus_model(f"{family}-dynamic@small", corpus_dir),
                           make_spec(seq=16), tmp_path / "d")
    assert dynamic.symbolic_left == [] and dynamic.input_shapes == fixed.input_shapes
    got, want = _signature(dynamic.path), _signature(fixed.path)
    assert not [s for op, outs in got[0] for s in outs if -1 in s], "a dim stayed unknown"
    assert got == want


@pytest.mark.parametrize("zero_is_constant", [True, False])
def test_gathered_int8_table_is_dequantized_only_when_constant(zero_is_constant: bool,
                                                              tmp_path: Path) -> None:
    """quantize_dynamic's default embedding form, `DequantizeLinear(Gather(table_q, ids), s,
    z)`: with constant s and z the table is dequantized at build time (same outputs in ORT);
    with a z the graph computes, it is left alone (and nothing crashes)."""
    from farm.models.frontend import graph, rewrite

    table = np.arange(-40, 40, dtype=np.int8).reshape(10, 8)
    inits = [onnx.numpy_helper.from_array(table, "table_q"),
             onnx.numpy_helper.from_array(np.array(0.05, np.float32), "s")]
    inputs = [helper.make_tensor_value_info("ids", TensorProto.INT64, [1, 4])]
    if zero_is_constant:
        inits.append(onnx.numpy_helper.from_array(np.array(3, np.int8), "z"))
    else:
        inputs.append(helper.make_tensor_value_info("z", TensorProto.INT8, []))
    nodes = [helper.make_node("Gather", ["table_q", "ids"], ["rows_q"], name="emb"),
             helper.make_node("DequantizeLinear", ["rows_q", "s", "z"], ["rows"], name="dq")]
    model = helper.make_model(
        helper.make_graph(nodes, "g", inputs,
                          [helper.make_tensor_value_info("rows", TensorProto.FLOAT, [1, 4, 8])],
                          inits), opset_imports=[helper.make_opsetid("", 17)])
    src = tmp_path / "src.onnx"
    onnx.save(model, str(src))
    g = graph.Graph(model)
    assert rewrite.dequantize_gathered_tables(g) == int(zero_is_constant)
    g.commit()
    assert [n.op_type for n in model.graph.node] == (
        ["Gather"] if zero_is_constant else ["Gather", "DequantizeLinear"])
    out = tmp_path / "out.onnx"
    onnx.save(model, str(out))
    feeds = {"ids": np.array([[0, 9, 3, 3]], np.int64)}
    if not zero_is_constant:
        feeds["z"] = np.array(3, np.int8)
    np.testing.assert_array_equal(run(out, feeds)[0], run(src, feeds)[0])
