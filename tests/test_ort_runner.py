"""agents/runners/ort_runner.py run for real as a child process, and the category tables."""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import onnxruntime as ort
import pytest

from farm import categories
from farm.categories import CATEGORIES, categorize
from farm.models import ModelInfo, build_model, ftns_module, make_inputs, write_inputs
from farm.paths import agents_dir

RUNNER = agents_dir() / "runners" / "ort_runner.py"
FAST_POLICY = {"warmup_runs": 2, "warmup_min_s": 0.0, "min_runs": 5, "min_time_s": 0.0,
               "max_time_s": 10.0}


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> tuple[ModelInfo, Path]:
    d = tmp_path_factory.mktemp("ort")
    info = build_model("tiny", "fp32", d)
    return info, write_inputs(info, 0, d)


def run_runner(tmp_path: Path, model: Path, inputs: Path | None, **overrides: Any
               ) -> tuple[int, list[dict[str, Any]], str]:
    request: dict[str, Any] = {
        "route": "ort", "model": str(model), "inputs": str(inputs) if inputs else None,
        "outputs": str(tmp_path / "out" / "outputs.ftns"), "threads": 1, "options": {},
        "policy": FAST_POLICY, "profile_runs": 2,
    }
    request.update(overrides)
    req = tmp_path / "request.json"
    req.write_text(json.dumps(request))
    proc = subprocess.run([sys.executable, str(RUNNER), "--request", str(req)],
                          capture_output=True, text=True, timeout=120)
    events = [json.loads(line) for line in proc.stdout.splitlines()]
    return proc.returncode, events, proc.stderr


def by_kind(events: list[dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    out: dict[str, list[dict[str, Any]]] = {}
    for e in events:
        out.setdefault(e["ev"], []).append(e)
    return out


def test_end_to_end_events_outputs_and_categories(tmp_path: Path, tiny: tuple) -> None:
    info, inputs = tiny
    rc, events, stderr = run_runner(tmp_path, info.path, inputs)
    assert rc == 0, stderr
    kinds = [e["ev"] for e in events]
    assert kinds[:3] == ["loaded", "first", "warmup"] and kinds[-1] == "done"
    assert kinds[-2] == "info" and "error" not in kinds
    ev = by_kind(events)
    assert ev["warmup"][0]["runs"] >= 2
    samples = [ms for e in ev["samples"] for ms in e["ms"]]
    assert len(samples) >= 5 and all(0 < ms < 1000 for ms in samples)

    ops = ev["ops"][0]
    assert set(ops["categories"]) == set(CATEGORIES)
    assert sum(ops["categories"].values()) == pytest.approx(ops["total_ms"], rel=1e-6)
    assert 0 < ops["total_ms"] <= ops["run_ms"] * 1.05  # kernels fit inside ORT's run time
    assert ops["runs"] == 2
    assert sum(n["ms"] for n in ops["nodes"]) == pytest.approx(ops["total_ms"], rel=1e-6)
    assert {n["provider"] for n in ops["nodes"]} == {"CPUExecutionProvider"}
    by_name = {n["name"]: n for n in ops["nodes"]}
    assert by_name["/layers.0/attention/core/Softmax"]["category"] == "attention"
    for cat in ("attention", "fc", "layernorm", "gelu", "other"):
        assert ops["categories"][cat] > 0, cat

    info_ev = ev["info"][0]
    assert info_ev["node_count"] == len(ops["nodes"])
    assert info_ev["opt_level"] == "all" and info_ev["ort_version"] == ort.__version__
    assert "CPUExecutionProvider" in info_ev["providers_available"]
    mem = ev["memory"][0]
    assert mem["vmhwm_kb"] > 10_000 and mem["pss_kb"] and "VmHWM" in mem["method"]

    out_file = ev["outputs"][0]["file"]
    got = ftns_module().read(out_file)["last_hidden_state"]
    sess = ort.InferenceSession(str(info.path), providers=["CPUExecutionProvider"])
    want = sess.run(None, make_inputs(info, 0))[0]
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def test_unfused_graph_keeps_generator_scopes(tmp_path: Path, tiny: tuple) -> None:
    info, inputs = tiny
    rc, events, stderr = run_runner(tmp_path, info.path, inputs,
                                    options={"opt_level": "disable"}, profile_runs=1)
    assert rc == 0, stderr
    nodes = {n["name"]: n for n in by_kind(events)["ops"][0]["nodes"]}
    assert nodes["/layers.1/ffn/gelu/Erf"]["category"] == "gelu"
    assert nodes["/layers.1/attention/core/scores_MatMul"]["category"] == "attention"
    assert nodes["/layers.1/attention/q/MatMul"]["category"] == "fc"
    assert nodes["/layers.1/attention/norm/Add"]["category"] == "layernorm"
    assert {n["op"] for n in nodes.values()} >= {"Erf", "LayerNormalization", "Softmax"}
    assert by_kind(events)["info"][0]["node_count"] == len(nodes)


def test_quantized_model_runs_and_categorizes(tmp_path: Path, tiny: tuple) -> None:
    info = build_model("tiny", "int8-dynamic", tiny[0].path.parent)
    rc, events, stderr = run_runner(tmp_path, info.path, tiny[1])
    assert rc == 0, stderr
    ops = by_kind(events)["ops"][0]
    assert ops["categories"]["fc"] > 0
    assert {"DynamicQuantizeMatMul", "MatMulIntegerToFloat"} & {n["op"] for n in ops["nodes"]}


def test_policy_max_time_caps_the_measurement(tmp_path: Path, tiny: tuple) -> None:
    info, inputs = tiny
    policy = {"warmup_runs": 1, "warmup_min_s": 0.0, "min_runs": 10**9, "min_time_s": 0.0,
              "max_time_s": 0.3}
    rc, events, _ = run_runner(tmp_path, info.path, inputs, policy=policy, profile_runs=0,
                               outputs=None)
    assert rc == 0
    ev = by_kind(events)
    samples = [ms for e in ev["samples"] for ms in e["ms"]]
    assert 1 <= len(samples) < 10**9 and sum(samples) < 300 + 50
    assert "ops" not in ev and "outputs" not in ev  # profile_runs 0, outputs null
    assert ev["info"][0]["node_count"] > 0  # the provider check still ran


def test_missing_provider_fails_loudly(tmp_path: Path, tiny: tuple) -> None:
    info, inputs = tiny
    rc, events, _ = run_runner(tmp_path, info.path, inputs,
                               options={"provider": "NoSuchExecutionProvider"})
    assert rc == 1 and events[-1]["ev"] == "error"
    assert "NoSuchExecutionProvider is not available" in events[-1]["message"]
    assert "done" not in [e["ev"] for e in events]


@pytest.mark.skipif("AzureExecutionProvider" not in ort.get_available_providers(),
                    reason="needs an extra provider whose nodes fall back to CPU")
def test_silent_fallback_to_cpu_is_an_error(tmp_path: Path, tiny: tuple) -> None:
    # the Azure EP takes no nodes, so ORT places every node on its CPU fallback
    info, inputs = tiny
    opts = {"provider": "AzureExecutionProvider"}
    rc, events, _ = run_runner(tmp_path, info.path, inputs, options=opts, profile_runs=1)
    assert rc == 1 and events[-1]["ev"] == "error"
    assert "loaded" not in [e["ev"] for e in events]  # refused at load time, before timing
    assert "did not run on the requested AzureExecutionProvider" in events[-1]["message"]
    assert "CPUExecutionProvider ran them" in events[-1]["message"]
    rc, events, _ = run_runner(tmp_path, info.path, inputs, profile_runs=1,
                               options={**opts, "allow_fallback": True})
    assert rc == 0 and events[-1]["ev"] == "done"
    assert by_kind(events)["info"][0]["node_providers"] == {
        "CPUExecutionProvider": len(by_kind(events)["ops"][0]["nodes"])}


def test_bad_requests_are_error_events(tmp_path: Path, tiny: tuple) -> None:
    info, inputs = tiny
    rc, events, _ = run_runner(tmp_path, tmp_path / "absent.onnx", inputs)
    assert rc == 1 and "could not load" in events[-1]["message"]
    rc, events, _ = run_runner(tmp_path, info.path, inputs, options={"opt_level": "max"})
    assert rc == 1 and "opt_level 'max'" in events[-1]["message"]
    wrong = tmp_path / "wrong.ftns"
    ftns_module().write(str(wrong), {"x": np.ones(2, np.float32)})
    rc, events, _ = run_runner(tmp_path, info.path, wrong)
    assert rc == 1 and "lack input_ids" in events[-1]["message"]
    floats = tmp_path / "floats.ftns"
    ftns_module().write(str(floats), {"input_ids": np.ones((1, 32), np.float32),
                                      "attention_mask": np.ones((1, 32), np.int64)})
    rc, events, _ = run_runner(tmp_path, info.path, floats)
    assert rc == 1 and "input_ids" in events[-1]["message"] and "float32" in events[-1]["message"]


def test_int32_inputs_are_widened_to_the_model_type(tmp_path: Path, tiny: tuple) -> None:
    info, _ = tiny
    feeds = make_inputs(info, 0)
    narrow = tmp_path / "i32.ftns"
    ftns_module().write(str(narrow), {k: v.astype(np.int32) for k, v in feeds.items()})
    rc, events, stderr = run_runner(tmp_path, info.path, narrow, profile_runs=0)
    assert rc == 0, stderr
    got = ftns_module().read(by_kind(events)["outputs"][0]["file"])["last_hidden_state"]
    sess = ort.InferenceSession(str(info.path), providers=["CPUExecutionProvider"])
    np.testing.assert_allclose(got, sess.run(None, feeds)[0], rtol=1e-5, atol=1e-5)


def test_runner_files_parse_as_python38() -> None:
    for path in (RUNNER, Path(categories.__file__)):
        source = path.read_text()
        ast.parse(source, feature_version=(3, 8))
        assert "removesuffix" not in source and "removeprefix" not in source


@pytest.mark.parametrize("op,name,shapes,want", [
    ("SkipLayerNormalization", "SkipLayerNormalization_token_3", None, "layernorm"),
    ("Attention", "Attention_0", None, "attention"),
    ("BiasGelu", "BiasGelu", None, "gelu"),
    ("MatMulNBits", "/layers.0/attention/q/MatMul_Q4", None, "fc"),
    ("QuantizeLinear", "/layers.0/attention/core/Softmax_output_0_QuantizeLinear", None,
     "other"),
    ("Add", "/layers.0/attention/q/Add", None, "fc"),
    ("Reshape", "gemm_input_reshape_token_21", None, "other"),
    ("FusedMatMul", "x", [[1, 2, 32, 32], [1, 2, 32, 32]], "attention"),
    ("MatMul", "x", [[1, 32, 64]], "fc"),
    ("QLinearMatMul", "y", [[1, 2, 8, 8], [], [], [1, 2, 8, 8]], "attention"),
    ("Transpose", "/bert/encoder/layer.0/attention/self/Transpose", None, "attention"),
    ("MatMul", "/bert/encoder/layer.0/attention/self/query/MatMul", None, "fc"),
])
def test_ort_categories(op: str, name: str, shapes: list | None, want: str) -> None:
    assert categorize("ort", op, name, shapes) == want


def test_tvm_and_custom_tables() -> None:
    assert categorize("tvm", "fused_matmul_add") == "fc"
    assert categorize("tvm", "fused_matmul3_divide_add_softmax") == "attention"
    assert categorize("tvm", "fused_layer_norm1") == "layernorm"
    assert categorize("tvm", "fused_erf_multiply") == "gelu"
    assert categorize("tvm", "fused_matmul4", input_shapes=[[1, 4, 8, 8], [1, 4, 8, 8]]) \
        == "attention"
    assert categorize("tvm", "reshape2") == "other"
    assert categorize("custom", "linear") == "fc"
    assert categorize("custom", "attn_scores") == "attention"
    with pytest.raises(ValueError, match="no op-category table"):
        categorize("tflite", "CONV_2D")


def _aarch64_python() -> list[str] | None:
    """argv prefix for the emulated device's Python, when its sysroot is already built."""
    import shutil

    from farm.lab.sysroot import sysroot_path

    root = sysroot_path()
    python = root / "usr" / "bin" / "python3.11"
    if not python.is_file() or not (root / "opt" / "site" / "onnxruntime").is_dir() \
            or shutil.which("qemu-aarch64") is None:
        return None
    return ["env", f"QEMU_LD_PREFIX={root}", "QEMU_CPU=cortex-a76",
            f"PYTHONPATH={root / 'opt' / 'site'}", "qemu-aarch64", str(python)]


@pytest.mark.aarch64
@pytest.mark.slow
def test_runner_on_emulated_aarch64_matches_host(tmp_path: Path, tiny: tuple) -> None:
    prefix = _aarch64_python()
    if prefix is None:
        pytest.skip("no aarch64 sysroot with onnxruntime (farm lab builds it)")
    info, inputs = tiny
    request = {"route": "ort", "model": str(info.path), "inputs": str(inputs),
               "outputs": str(tmp_path / "a64.ftns"), "threads": 1, "options": {},
               "policy": {**FAST_POLICY, "min_runs": 3}, "profile_runs": 1}
    req = tmp_path / "request.json"
    req.write_text(json.dumps(request))
    proc = subprocess.run([*prefix, str(RUNNER), "--request", str(req)], capture_output=True,
                          text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    events = by_kind([json.loads(line) for line in proc.stdout.splitlines()])
    assert "done" in events and events["ops"][0]["total_ms"] > 0
    got = ftns_module().read(str(tmp_path / "a64.ftns"))["last_hidden_state"]
    sess = ort.InferenceSession(str(info.path), providers=["CPUExecutionProvider"])
    want = sess.run(None, make_inputs(info, 0))[0]
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)  # same model, other ISA


def test_per_node_time_is_the_median_over_profiled_runs() -> None:
    """One profiled run preempted on a busy device (here 5 ms on one Add) must not move the
    per-op table: the runner keeps each node's median over the runs, not its mean."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("ort_runner_under_test", RUNNER)
    assert spec is not None and spec.loader is not None
    runner = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(runner)

    def event(name: str, op: str, us: float) -> dict[str, Any]:
        return {"name": name + runner.KERNEL_SUFFIX, "dur": us,
                "args": {"op_name": op, "provider": "CPUExecutionProvider"}}

    per_run = [[event("/l0/norm/Add", "Add", us), event("/l0/up/MatMul", "MatMul", 10.0)]
               for us in (2.0, 5000.0, 3.0)]
    nodes = {n["name"]: n["ms"] for n in runner.summarize_nodes(categories, per_run)}
    assert nodes == {"/l0/norm/Add": pytest.approx(0.003), "/l0/up/MatMul": pytest.approx(0.010)}


def test_one_tvm_rule_for_the_sidecar_and_the_tables() -> None:
    """The TVM build's kernel categories (the sidecar the runner reads) and `categorize` are
    one rule: a GELU fused into the FFN GEMM is fc (as in the custom executor), a product of
    two activations is attention."""
    from farm.routes.tvm.builder import kernel_category

    for name, has_weight, want in [("fused_matmul_add_erf_multiply", True, "fc"),
                                   ("fused_matmul3_divide_add_softmax", False, "attention"),
                                   ("fused_matmul5", False, "attention"),
                                   ("fused_layer_norm1", False, "layernorm"),
                                   ("fused_tanh_multiply", False, "gelu")]:
        assert kernel_category(name, has_weight) == want
        shapes = [[1, 128, 64], [64, 256]] if has_weight else [[1, 4, 8, 8], [1, 4, 8, 8]]
        assert categorize("tvm", name, input_shapes=shapes) == want
