"""TVM on static QDQ files (farm/routes/tvm/qdq.py): each `MatMul(DQ(Q(x)), DQ(Wq))` with a
constant int8 weight becomes `MatMulInteger(x as uint8, Wq) * (sx * sw)` before import.
The rewrite is exact (integer sums equal a numpy reference, uint8 and int8 activations,
saturation included; per-tensor and per-column weight scales); ORT's own quantizer's files
(QUInt8 and QInt8 activations) are rewritten wherever a weight is constant and compute what
the source file computes; what does not qualify keeps TVM's path. One TVM build of a small
file with a uint8 and an int8 activation (~15 s of CPU): VNNI kernels with vpdpbusd where the
target has VNNI (FARM_ISA can cap it away), no unscheduled kernel, outputs equal to the
exact integer sums.

Files are evaluated exactly by ONNX's numpy reference evaluator (farm/models/exact_int8.py).
ORT is compared only where its int8 GEMM is exact: on x86 without VNNI its U8S8 path
(VPMADDUBSW) saturates pairwise int16 sums and was seen 9.7 off these sums on a Zen 3."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from farm.inventory.builtin import local_device
from farm.models.exact_int8 import exact_outputs, ort_int8_exact
from farm.routes.tvm.qdq import integer_matmuls

M, K = 16, 64


def _const(name: str, value: np.ndarray) -> onnx.TensorProto:
    return numpy_helper.from_array(value, name)


def _qdq_file(acts: tuple[str, ...], per_column: tuple[bool, ...], n: int = 48,
              attention: bool = False) -> onnx.ModelProto:
    """x [1, M, K] -> y_i = MatMul(DQ(Q(x, sx, zx_i)), DQ(W_i, sw_i)) per activation type
    (uint8 zero point 131, int8 zero point -9: both non-zero, as MinMax calibrates them);
    `attention` adds an activation x activation MatMul of the first pair (not rewritable)."""
    rng = np.random.default_rng(11)
    inits = [_const("sx", np.array(0.021, np.float32))]
    nodes, outputs = [], []
    for i, (act, column) in enumerate(zip(acts, per_column, strict=True)):
        zp = np.array(131, np.uint8) if act == "uint8" else np.array(-9, np.int8)
        w = rng.integers(-128, 128, size=(K, n), dtype=np.int8)
        sw = (rng.uniform(0.5, 2.0, n) * 1e-2).astype(np.float32) if column \
            else np.array(0.0123, np.float32)
        inits += [_const(f"zx{i}", zp), _const(f"w{i}", w), _const(f"sw{i}", sw),
                  _const(f"zw{i}", np.zeros(sw.shape, np.int8))]
        nodes += [
            helper.make_node("QuantizeLinear", ["x", "sx", f"zx{i}"], [f"xq{i}"], name=f"q{i}"),
            helper.make_node("DequantizeLinear", [f"xq{i}", "sx", f"zx{i}"], [f"xd{i}"],
                             name=f"dq{i}"),
            helper.make_node("DequantizeLinear", [f"w{i}", f"sw{i}", f"zw{i}"], [f"wd{i}"],
                             name=f"wdq{i}", axis=1),
            helper.make_node("MatMul", [f"xd{i}", f"wd{i}"], [f"y{i}"], name=f"mm{i}"),
        ]
        outputs.append(helper.make_tensor_value_info(f"y{i}", TensorProto.FLOAT, [1, M, n]))
    if attention:
        nodes += [helper.make_node("Transpose", ["xd0"], ["xt"], perm=[0, 2, 1]),
                  helper.make_node("MatMul", ["xd0", "xt"], ["scores"], name="mm_scores")]
        outputs.append(helper.make_tensor_value_info("scores", TensorProto.FLOAT, [1, M, M]))
    graph = helper.make_graph(nodes, "qdq_matmuls", [helper.make_tensor_value_info(
        "x", TensorProto.FLOAT, [1, M, K])], outputs, inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def _x(seed: int = 1) -> np.ndarray:
    # spread wider than the quantisation range (~[-2.7, 2.6]): both ends saturate
    return np.random.default_rng(seed).normal(0.0, 1.5, size=(1, M, K)).astype(np.float32)


def _ort_exact_here() -> bool:
    host = local_device()  # the CPU's own features: FARM_ISA does not cap ORT
    return ort_int8_exact(host.arch, host.features)


def _exact(model: onnx.ModelProto, feeds: dict[str, np.ndarray], where: Path) -> list[np.ndarray]:
    path = where / "exact.onnx"
    onnx.save(model, str(path))
    return list(exact_outputs(path, feeds).values())


def _run(model: onnx.ModelProto, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = 1
    return ort.InferenceSession(model.SerializeToString(), opts,
                                providers=["CPUExecutionProvider"]).run(None, feeds)


def _reference(model: onnx.ModelProto, x: np.ndarray, i: int) -> np.ndarray:
    """y_i in integers: (Q(x) - zx) @ W in int64 (ONNX's round-half-even and saturation),
    times sx * sw, the way the rewrite orders it."""
    consts = {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}
    sx, zx, w, sw = (consts[k] for k in ("sx", f"zx{i}", f"w{i}", f"sw{i}"))
    info = np.iinfo(zx.dtype)
    q = np.clip(np.rint(x / sx) + int(zx), info.min, info.max).astype(np.int64)
    acc = (q - int(zx)) @ w.astype(np.int64)
    return acc.astype(np.float32) * (np.float32(sx) * sw).astype(np.float32)


@pytest.mark.parametrize("per_column", [False, True])
def test_rewrite_is_exact_for_uint8_and_int8_activations(per_column: bool,
                                                         tmp_path: Path) -> None:
    model = _qdq_file(("uint8", "int8"), (per_column, per_column), attention=True)
    rewrite = integer_matmuls(model)
    assert rewrite is not None and (rewrite.rewritten, rewrite.kept) == (2, 1)
    ops = [n.op_type for n in rewrite.model.graph.node]
    assert ops.count("MatMulInteger") == 2 and ops.count("MatMul") == 1  # the scores stay
    # the weights' DequantizeLinear nodes and their scale/zero point are gone
    assert not {"sw0", "sw1", "zw0", "zw1"} & {t.name for t in rewrite.model.graph.initializer}
    onnx.checker.check_model(rewrite.model, full_check=True)
    x = _x()
    got = _exact(rewrite.model, {"x": x}, tmp_path)
    saturated = 0
    for i in (0, 1):
        want = _reference(model, x, i)
        np.testing.assert_allclose(got[i], want, rtol=1e-6, atol=0)
        saturated += int(np.sum(np.abs(x / 0.021) > 127))
    assert saturated  # the saturating end of the int8 range was exercised
    # the QDQ file's own semantics (fp32 sums of the same products): what the rewrite keeps
    source = _exact(model, {"x": x}, tmp_path)
    for a, b in zip(got, source, strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-5 * float(np.abs(b).max()))
    if _ort_exact_here():  # ORT's integer GEMM runs the rewritten file exactly here
        for i, a in enumerate(_run(rewrite.model, {"x": x})[:2]):
            np.testing.assert_allclose(a, _reference(model, x, i), rtol=1e-6, atol=0)


def test_int8_activation_quantised_as_uint8_is_the_int8_one_plus_128() -> None:
    """What the int8 path rests on: Q(x, s, z + 128) to uint8 == Q(x, s, z) to int8 + 128,
    rounding and saturation included, as ORT computes QuantizeLinear."""
    x = np.concatenate([_x(2).ravel(), np.array([0.5, 1.5, -2.5, -0.5, 1e6, -1e6],
                                                np.float32) * 0.021]).reshape(1, 1, -1)
    s = np.array(0.021, np.float32)

    def quantised(zp: np.ndarray) -> np.ndarray:
        node = helper.make_node("QuantizeLinear", ["x", "s", "z"], ["q"])
        dtype = TensorProto.UINT8 if zp.dtype == np.uint8 else TensorProto.INT8
        graph = helper.make_graph([node], "q", [helper.make_tensor_value_info(
            "x", TensorProto.FLOAT, list(x.shape))], [helper.make_tensor_value_info(
                "q", dtype, list(x.shape))], [_const("s", s), _const("z", zp)])
        return _run(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]),
                    {"x": x})[0]

    for z in (-128, -9, 0, 26, 127):
        as_u8 = quantised(np.array(z + 128, np.uint8)).astype(np.int16)
        as_s8 = quantised(np.array(z, np.int8)).astype(np.int16)
        np.testing.assert_array_equal(as_u8, as_s8 + 128)


@pytest.mark.parametrize("activation", ["QUInt8", "QInt8"])
def test_ort_quantizer_files_are_rewritten_and_compute_the_same(tmp_path: Path,
                                                               activation: str) -> None:
    """Files from ORT's own quantize_static (what int8-qdq and users' files are): every MatMul
    with a constant weight becomes MatMulInteger, the attention-like one stays."""
    from onnxruntime.quantization import CalibrationMethod, QuantFormat, QuantType

    from farm.models.quantize import _FeedReader, _quiet_quantizers

    rng = np.random.default_rng(5)
    inits = [_const("w_in", rng.normal(0, 0.2, (K, 32)).astype(np.float32)),
             _const("b_in", rng.normal(0, 0.1, 32).astype(np.float32)),
             _const("w_out", rng.normal(0, 0.2, (32, K)).astype(np.float32))]
    nodes = [helper.make_node("MatMul", ["x", "w_in"], ["h0"], name="fc_in"),
             helper.make_node("Add", ["h0", "b_in"], ["h1"], name="bias"),
             helper.make_node("Relu", ["h1"], ["h"], name="relu"),
             helper.make_node("Transpose", ["h"], ["ht"], perm=[0, 2, 1], name="t"),
             helper.make_node("MatMul", ["h", "ht"], ["scores"], name="scores"),
             helper.make_node("MatMul", ["scores", "h"], ["ctx"], name="context"),
             helper.make_node("MatMul", ["ctx", "w_out"], ["y"], name="fc_out")]
    graph = helper.make_graph(nodes, "mlp", [helper.make_tensor_value_info(
        "x", TensorProto.FLOAT, [1, M, K])], [helper.make_tensor_value_info(
            "y", TensorProto.FLOAT, [1, M, K])], inits)
    fp32 = tmp_path / "fp32.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(fp32))
    feeds = [{"x": _x(s)} for s in range(4)]
    qdq = tmp_path / "qdq.onnx"
    from onnxruntime.quantization import quantize_static

    with _quiet_quantizers():
        quantize_static(fp32, qdq, _FeedReader(feeds),  # type: ignore[arg-type]
                        quant_format=QuantFormat.QDQ, op_types_to_quantize=["MatMul"],
                        activation_type=getattr(QuantType, activation),
                        weight_type=QuantType.QInt8, calibrate_method=CalibrationMethod.MinMax)
    model = onnx.load(str(qdq))
    rewrite = integer_matmuls(model)
    assert rewrite is not None and (rewrite.rewritten, rewrite.kept) == (2, 2)
    want, got = _run(model, feeds[0])[0], _run(rewrite.model, feeds[0])[0]
    # equal here (ORT 1.32: max diff 0); a sum rounded differently elsewhere could flip a
    # requantised intermediate by one step, so: one output step at most, equal almost
    # everywhere
    step = float(np.abs(want).max()) / 127
    assert float(np.abs(got - want).max()) <= step
    assert float(np.mean(np.isclose(got, want, rtol=1e-5, atol=1e-6))) > 0.95


def test_what_does_not_qualify_is_left_alone() -> None:
    assert integer_matmuls(_qdq_file((), ())) is None  # no DequantizeLinear at all
    model = _qdq_file(("uint8",), (False,))
    consts = {t.name: t for t in model.graph.initializer}
    consts["zw0"].CopyFrom(_const("zw0", np.array(3, np.int8)))  # a non-zero weight zero point
    assert integer_matmuls(model) is None
    model = _qdq_file(("uint8",), (False,))
    dq = next(n for n in model.graph.node if n.name == "dq0")
    dq.input[1] = "sx_other"  # the activation's Q and DQ disagree on the scale
    model.graph.initializer.append(_const("sx_other", np.array(0.5, np.float32)))
    assert integer_matmuls(model) is None


@pytest.mark.tvm
def test_tvm_build_runs_qdq_matmuls_on_vnni_and_matches_ort(farm_home: Path) -> None:
    from test_tvm_nbits import _tvm_outputs

    from farm.routes.tvm.builder import build_tvm

    device = local_device()
    vnni = "avx512vnni" in device.isa_features
    rule = ("default:CpuMatmulVnni" if vnni else  # x86 without VNNI: the exact vpmaddwd rule
            "default:CpuMatmulPmaddwd" if device.arch == "x86_64" else "default:CpuMatmul")
    path = farm_home / "qdq_matmuls.onnx"
    model = _qdq_file(("uint8", "int8"), (False, True))
    onnx.save(model, str(path))
    artifact = build_tvm(path, device)

    assert artifact.rewrites == {"qdq_integer_matmuls": 2, "qdq_matmuls_kept": 0}
    assert artifact.unscheduled_count == 0, artifact.schedule_sources
    gemms = sorted(src for name, src in artifact.schedule_sources.items() if "matmul" in name)
    assert gemms == [rule] * 2, gemms
    if rule != "default:CpuMatmul" and shutil.which("objdump"):
        asm = subprocess.run(["objdump", "-d", str(artifact.kernels_path)], check=True,
                             capture_output=True, text=True).stdout
        assert ("vpdpbusd" if vnni else "vpmaddwd") in asm
    feeds = {"x": _x(3)}
    orts = _run(model, feeds)
    for i, got in enumerate(_tvm_outputs(artifact.path, feeds)):
        np.testing.assert_allclose(got, _reference(model, feeds["x"], i), rtol=1e-6, atol=0)
        if _ort_exact_here():
            # ORT: the uint8 one as an integer GEMM, the int8 one as fp32 sums (x86 leaves
            # it unfused); both equal the exact integer sums up to fp32 rounding
            want = orts[i]
            np.testing.assert_allclose(got, want, rtol=1e-5,
                                       atol=1e-5 * float(np.abs(want).max()))
