"""TVM int8 GEMMs on AVX-512 VNNI (and on AVX2 without it): an ONNX `MatMulInteger` as
`quantize_dynamic` writes it (DynamicQuantizeLinear'd uint8 activation x constant int8
weight, then the dequantising Mul) builds to a kernel scheduled by `CpuMatmulVnni` whose
machine code uses vpdpbusd (at avx2: `CpuMatmulPmaddwd`, exact vpmaddwd), with
outputs equal to ORT's and no unscheduled kernel; a shape the intrinsic cannot take (K not
a multiple of 4) and a weight with a non-zero zero point keep the generic path and stay
exact; a row softmax gets `CpuRowSoftmax`. One build of three small matmuls and a softmax
(~15 s of CPU). VNNI is expected where the target has it: the host's features, less what
FARM_ISA caps away; outputs are judged against the file's exact integer arithmetic
(farm/models/exact_int8.py), ORT's only where its int8 GEMM is exact."""

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

pytestmark = pytest.mark.tvm


def _int8_matmuls_model(m: int, n: int) -> onnx.ModelProto:
    """Three quantized matmuls: y0 (K 64, weight zero point 0: VNNI), y1 (K 30: not a
    multiple of the intrinsic's 4), y2 (K 64, weight zero point 3: TVM's int32 path), and
    p = softmax(x0)."""
    rng = np.random.default_rng(7)
    inits, nodes, outputs = [], [], []
    for i, (x, k, zp) in enumerate((("x0", 64, 0), ("x1", 30, 0), ("x0", 64, 3))):
        inits += [numpy_helper.from_array(rng.integers(-127, 128, size=(k, n), dtype=np.int8),
                                          f"w{i}"),
                  numpy_helper.from_array(np.array(zp, np.int8), f"w{i}_zp"),
                  numpy_helper.from_array(np.array(0.0123 * (i + 1), np.float32), f"w{i}_s")]
        nodes += [
            helper.make_node("DynamicQuantizeLinear", [x], [f"q{i}", f"q{i}_s", f"q{i}_zp"]),
            helper.make_node("MatMulInteger", [f"q{i}", f"w{i}", f"q{i}_zp", f"w{i}_zp"],
                             [f"acc{i}"]),
            helper.make_node("Cast", [f"acc{i}"], [f"accf{i}"], to=TensorProto.FLOAT),
            helper.make_node("Mul", [f"q{i}_s", f"w{i}_s"], [f"s{i}"]),
            helper.make_node("Mul", [f"accf{i}", f"s{i}"], [f"y{i}"]),
        ]
        outputs.append(helper.make_tensor_value_info(f"y{i}", TensorProto.FLOAT, [1, m, n]))
    # and a softmax over rows of 64, the attention softmax `CpuRowSoftmax` schedules
    nodes.append(helper.make_node("Softmax", ["x0"], ["p"], axis=-1))
    outputs.append(helper.make_tensor_value_info("p", TensorProto.FLOAT, [1, m, 64]))
    inputs = [helper.make_tensor_value_info(x, TensorProto.FLOAT, [1, m, k])
              for x, k in (("x0", 64), ("x1", 30))]
    graph = helper.make_graph(nodes, "int8_matmuls", inputs, outputs, inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


@pytest.mark.parametrize("cap", [None, "avx2"])
def test_int8_matmul_uses_vnni_where_it_can_and_matches_ort(
        farm_home: Path, monkeypatch: pytest.MonkeyPatch, cap: str | None) -> None:
    """As the host is (None) and capped at avx2 (no VNNI on any x86 host that runs farm):
    there y0 and y1 (K 30 is a multiple of 2) take `CpuMatmulPmaddwd`'s exact vpmaddwd."""
    from test_tvm_nbits import _tvm_outputs

    from farm.routes.tvm.builder import build_tvm

    if cap:
        monkeypatch.setenv("FARM_ISA", cap)
    device = local_device()
    vnni = "avx512vnni" in device.isa_features  # FARM_ISA=avx2 takes it away
    pmaddwd = not vnni and device.arch == "x86_64"
    path = farm_home / "int8_matmuls.onnx"
    onnx.save(_int8_matmuls_model(16, 48), str(path))
    artifact = build_tvm(path, device)

    assert artifact.unscheduled_count == 0, artifact.schedule_sources
    gemms = sorted(src for name, src in artifact.schedule_sources.items() if "matmul" in name)
    # y2 (weight zero point 3) on the generic register-tiled rule; y1 too with VNNI (K 30)
    assert gemms == (["default:CpuMatmul"] * 2 + ["default:CpuMatmulVnni"] if vnni
                     else ["default:CpuMatmul"] + ["default:CpuMatmulPmaddwd"] * 2 if pmaddwd
                     else ["default:CpuMatmul"] * 3), artifact.schedule_sources
    assert "default:CpuRowSoftmax" in artifact.schedule_sources.values()
    if (vnni or pmaddwd) and shutil.which("objdump"):
        asm = subprocess.run(["objdump", "-d", str(artifact.kernels_path)], check=True,
                             capture_output=True, text=True).stdout
        assert ("vpdpbusd" if vnni else "vpmaddwd") in asm
    rng = np.random.default_rng(1)
    feeds = {"x0": rng.normal(0.2, 1.0, size=(1, 16, 64)).astype(np.float32),
             "x1": rng.normal(-0.1, 2.0, size=(1, 16, 30)).astype(np.float32)}
    # judged against the file's exact integer arithmetic (numpy): ORT is no exact int8
    # engine on x86 without VNNI (its U8S8 GEMM saturates), so it is checked only where it is
    exact = list(exact_outputs(path, feeds).values())
    orts = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"]).run(None, feeds)
    host = local_device()
    for got, want, theirs in zip(_tvm_outputs(artifact.path, feeds), exact, orts, strict=True):
        # the same integer arithmetic: equal up to float rounding of the final scale
        np.testing.assert_allclose(got, want, rtol=1e-5,
                                   atol=1e-5 * float(np.abs(want).max()))
        if ort_int8_exact(host.arch, host.features):  # the CPU's own features: ORT is uncapped
            np.testing.assert_allclose(theirs, want, rtol=1e-5,
                                       atol=1e-5 * float(np.abs(want).max()))
