"""TVM at its best on quantized variants: MatMulNBits dequantised at build time (nbits.py),
and every kernel of the int8 builds scheduled (unscheduled_count 0 on the sidecar).
Real quantizers, real ONNX Runtime and real TVM builds of the `tiny` encoder."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper

from farm.inventory.builtin import local_device
from farm.models import build_model
from farm.models.inputs import make_inputs
from farm.routes.tvm import nbits


def _matmul_model(k: int, n: int, bias: bool) -> onnx.ModelProto:
    rng = np.random.default_rng(3)
    w = helper.make_tensor("w", TensorProto.FLOAT, [k, n], rng.normal(0, 1, (k, n)).ravel())
    nodes = [helper.make_node("MatMul", ["x", "w"], ["y" if not bias else "p"], name="mm")]
    inits = [w]
    if bias:
        inits.append(helper.make_tensor("b", TensorProto.FLOAT, [n], rng.normal(0, 1, n)))
        nodes.append(helper.make_node("Add", ["p", "b"], ["y"], name="add"))
    graph = helper.make_graph(nodes, "mm", [helper.make_tensor_value_info(
        "x", TensorProto.FLOAT, [4, k])], [helper.make_tensor_value_info(
            "y", TensorProto.FLOAT, [4, n])], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def _fp32_compute(model: onnx.ModelProto) -> onnx.ModelProto:
    """The same weights on ORT's fp32-compute MatMulNBits path (accuracy_level 0)."""
    out = onnx.ModelProto()
    out.CopyFrom(model)
    for node in out.graph.node:
        for attr in node.attribute:
            if node.op_type == nbits.OP and attr.name == "accuracy_level":
                attr.i = 0
    return out


def _run(model: onnx.ModelProto, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return sess.run(None, feeds)


@pytest.mark.parametrize(("symmetric", "k", "block"), [(True, 64, 32), (False, 96, 32),
                                                       (False, 80, 16), (True, 40, 32)])
def test_dequantised_matmul_equals_ort_matmulnbits(symmetric: bool, k: int,
                                                   block: int) -> None:
    """ORT's own quantizer writes the node (zero points packed when asymmetric, K not a
    multiple of the block padded); the rewrite computes what ORT's fp32 path computes."""
    from onnxruntime.quantization.matmul_nbits_quantizer import MatMulNBitsQuantizer

    quant = MatMulNBitsQuantizer(_matmul_model(k, 48, bias=not symmetric), bits=4,
                                 block_size=block, is_symmetric=symmetric, accuracy_level=0)
    quant.process()
    q4 = quant.model.model
    assert any(n.op_type == nbits.OP for n in q4.graph.node)
    rewritten = nbits.dequantized(q4)
    assert rewritten is not None
    assert not any(n.op_type == nbits.OP for n in rewritten.graph.node)
    assert not any(o.domain == "com.microsoft" for o in rewritten.opset_import)
    feeds = {"x": np.random.default_rng(0).normal(0, 1, (4, k)).astype(np.float32)}
    want, got = _run(q4, feeds)[0], _run(rewritten, feeds)[0]
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-4)
    assert nbits.dequantized(_matmul_model(k, 48, bias=False)) is None


def test_non_constant_weight_is_named(tmp_path: Path) -> None:
    node = helper.make_node(nbits.OP, ["x", "w", "s"], ["y"], domain="com.microsoft",
                            name="q_proj", K=32, N=32, bits=4, block_size=32)
    graph = helper.make_graph([node], "g", [
        helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 32]),
        helper.make_tensor_value_info("w", TensorProto.UINT8, [32, 1, 16])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 32])],
        [helper.make_tensor("s", TensorProto.FLOAT, [32], [1.0] * 32)])
    from farm.errors import BuildError
    with pytest.raises(BuildError, match=r"q_proj.*'w' is not a constant"):
        nbits.dequantized(helper.make_model(graph))


def _tvm_outputs(lib: Path, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
    import tvm
    from tvm import relax

    vm = relax.VirtualMachine(tvm.runtime.load_module(str(lib)), tvm.cpu())
    result = vm["main"](*[tvm.runtime.tensor(v) for v in feeds.values()])
    items = [result] if isinstance(result, tvm.runtime.Tensor) else list(result)
    return [i.numpy() for i in items]


@pytest.mark.tvm
@pytest.mark.slow
def test_tvm_builds_int4_and_matches_ort_fp32_compute(farm_home: Path) -> None:
    from farm.routes.tvm.builder import build_tvm

    info = build_model("tiny", "int4")
    art = build_tvm(info.path, local_device())
    meta = json.loads(art.meta_path.read_text())
    assert meta["unscheduled_count"] == 0 == art.unscheduled_count, meta["schedule_counts"]
    assert any(v["category"] == "fc" for v in meta["kernels"].values())
    feeds = make_inputs(info)
    want = _run(_fp32_compute(onnx.load(str(info.path))), feeds)[0]
    got = _tvm_outputs(art.path, feeds)[0]
    np.testing.assert_allclose(got, want, atol=2e-4, rtol=1e-4)


@pytest.mark.tvm
@pytest.mark.slow
@pytest.mark.parametrize("variant", ["int8-dynamic", "int8-qdq"])
def test_int8_builds_leave_no_kernel_unscheduled(farm_home: Path, variant: str) -> None:
    """int8-dynamic's whole-tensor min/max and scalar scale/zero-point kernels used to stay
    naive loops (7 of 34 kernels on tiny); now every kernel has a rule, and the outputs are
    still ORT's (same quantized model, same int8 arithmetic: tolerance of one int8 step)."""
    from farm.routes.tvm.builder import artifact_summary, build_tvm

    info = build_model("tiny", variant)
    art = build_tvm(info.path, local_device())
    assert art.unscheduled_count == 0, art.schedule_sources
    assert artifact_summary(art)["unscheduled_count"] == 0
    sources = set(art.schedule_sources.values())
    if variant == "int8-dynamic":
        assert {"default:CpuFullReduction", "default:CpuScalar"} <= sources, sources
    else:  # QDQ MatMuls with constant weights imported as integer GEMMs (tvm/qdq.py)
        assert art.rewrites["qdq_integer_matmuls"] == 12, art.rewrites
        if "avx512vnni" in local_device().isa_features:
            assert "default:CpuMatmulVnni" in sources, sources
    feeds = make_inputs(info)
    want = _run(onnx.load(str(info.path)), feeds)[0]
    got = _tvm_outputs(art.path, feeds)[0]
    cosine = float(np.dot(got.ravel(), want.ravel()) /
                   (np.linalg.norm(got) * np.linalg.norm(want)))
    assert cosine > 0.999 and float(np.abs(got - want).mean()) < 0.02, cosine


@pytest.mark.tvm
@pytest.mark.slow
def test_int8_dynamic_cross_build_for_aarch64_leaves_none_unscheduled(farm_home: Path) -> None:
    """The new rules size their vectors from the target (NEON here), not the host."""
    from test_tvm_build import AARCH64

    from farm.routes.tvm.builder import build_tvm

    art = build_tvm(build_model("tiny", "int8-dynamic").path, AARCH64)
    assert art.unscheduled_count == 0, art.schedule_sources
    assert int.from_bytes(art.path.read_bytes()[18:20], "little") == 183  # EM_AARCH64
