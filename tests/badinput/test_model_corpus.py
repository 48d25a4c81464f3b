"""Bad models: not ONNX, empty, random bytes, truncated, an unsupported operator, a wrong
input shape, an input farm cannot feed, an absurd input size. `farm bench --model FILE`
refuses each before any device is touched, naming the file and the problem, and the result
store holds no run and no record afterwards. The custom route's plan compiler refuses an
operator it does not implement, naming the node."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from farm.errors import BuildError
from farm.models import build_model
from farm.routes.custom.compile import compile_plan

from .conftest import store_contents

OPSET = [helper.make_opsetid("", 17)]


def _graph_model(nodes: list[onnx.NodeProto], inputs: list[onnx.ValueInfoProto],
                 outputs: list[onnx.ValueInfoProto], inits: list[onnx.TensorProto] | None = None,
                 opsets: list[onnx.OperatorSetIdProto] | None = None) -> onnx.ModelProto:
    graph = helper.make_graph(nodes, "bad", inputs, outputs, initializer=inits or [])
    return helper.make_model(graph, opset_imports=opsets or OPSET)


def _f32(name: str, shape: list[int]) -> onnx.ValueInfoProto:
    return helper.make_tensor_value_info(name, TensorProto.FLOAT, shape)


def tiny_bytes(home: Path) -> bytes:
    return build_model("tiny", "fp32", home / "models").path.read_bytes()


def make_case(name: str, home: Path, out: Path) -> Path:
    path = out / f"{name}.onnx"
    if name == "not_onnx":
        path.write_text("<html>404 not found</html>\n" * 20)
    elif name == "empty":
        path.write_bytes(b"")
    elif name == "random_bytes":
        path.write_bytes(np.random.default_rng(1).integers(0, 256, 4096, np.uint8).tobytes())
    elif name == "truncated":
        good = tiny_bytes(home)
        path.write_bytes(good[: len(good) * 2 // 3])
    elif name == "unsupported_operator":
        onnx.save(_graph_model([helper.make_node("FrobnicateV9", ["x"], ["y"],
                                                 domain="com.example.farm")],
                               [_f32("x", [1, 4])], [_f32("y", [1, 4])],
                               opsets=[*OPSET, helper.make_opsetid("com.example.farm", 1)]),
                  path)
    elif name == "wrong_input_shape":
        shape = numpy_helper.from_array(np.array([4, 4], np.int64), "shape")
        onnx.save(_graph_model([helper.make_node("Reshape", ["x", "shape"], ["y"])],
                               [_f32("x", [1, 6])], [_f32("y", [4, 4])], [shape]), path)
    elif name == "string_input":
        onnx.save(_graph_model([helper.make_node("Identity", ["x"], ["y"])],
                               [helper.make_tensor_value_info("x", TensorProto.STRING, [1])],
                               [helper.make_tensor_value_info("y", TensorProto.STRING, [1])]),
                  path)
    elif name == "absurd_input_size":
        onnx.save(_graph_model([helper.make_node("Abs", ["x"], ["y"])],
                               [_f32("x", [1, 1 << 40])], [_f32("y", [1, 1 << 40])]), path)
    else:
        raise AssertionError(name)
    return path


CASES = [
    ("not_onnx", "not an ONNX model"),
    ("empty", "is empty"),
    ("random_bytes", "not an ONNX model"),
    ("truncated", "truncated"),
    ("unsupported_operator", "FrobnicateV9"),
    ("wrong_input_shape", "reshaped"),
    ("string_input", "STRING"),
]


def bench_argv(model: Path, store: Path) -> list[str]:
    return ["bench", "--model", str(model), "--routes", "ort", "--store", str(store), "--runs", "1",
            "--min-time", "0", "--warmup", "0", "--warmup-time", "0", "--profile-runs", "0",
            "--pause", "0", "--output", "json"]


@pytest.mark.parametrize(("name", "needle"), CASES, ids=[c[0] for c in CASES])
def test_bench_refuses_bad_model_and_stores_nothing(name: str, needle: str, farm_home: Path,
                                                    tmp_path: Path, farm: Callable) -> None:
    model = make_case(name, farm_home, tmp_path)
    store = tmp_path / "r.sqlite"
    result = farm(bench_argv(model, store))
    assert result.code == 1, result
    assert "farm: error:" in result.err and needle in result.err, result.err
    assert str(model) in result.err  # names the file
    assert "hint:" in result.err and "Traceback" not in result.err
    assert store_contents(store) == (0, 0)
    assert result.out.strip() in ("", "[]")  # no records printed as if measured
    assert not Path(os.environ["FARM_LOCAL_WORKDIR"]).exists()  # no device was touched


def test_absurd_input_size_is_a_clear_error(farm_home: Path, tmp_path: Path,
                                             farm: Callable) -> None:
    model = make_case("absurd_input_size", farm_home, tmp_path)
    store = tmp_path / "r.sqlite"
    result = farm(bench_argv(model, store))
    assert result.code == 1 and "farm: error:" in result.err and "x" in result.err
    assert store_contents(store) == (0, 0)


def test_plan_compiler_names_an_unsupported_operator(farm_home: Path, tmp_path: Path) -> None:
    model = onnx.load_model_from_string(tiny_bytes(farm_home))
    victim = next(n for n in model.graph.node if n.op_type in ("Erf", "Tanh", "Sqrt", "Div"))
    victim.op_type = "Softplus" if victim.op_type != "Softplus" else "Erf"
    victim.name = victim.name or "victim"
    path = tmp_path / "softplus.onnx"
    onnx.save(model, path)
    with pytest.raises(BuildError) as info:
        compile_plan(path, tmp_path / "out.plan")
    assert "Softplus" in str(info.value) and victim.name in str(info.value), str(info.value)
    assert not (tmp_path / "out.plan").exists()
