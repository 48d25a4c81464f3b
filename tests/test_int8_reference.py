"""The exact integer reference of an int8 file (farm/models/exact_int8.py) and the judgement
built on it (farm/bench/int8_reference.py): where ORT's int8 GEMM saturates (x86 without
VNNI: VPMADDUBSW adds pairs of u8 x s8 products into int16), a route that computes the file
exactly is judged against the file, not against ORT, and ORT's own deviation is reported.

This host may have VNNI, so ORT's saturating path is modelled in numpy (`_vpmaddubsw`: the
pairs of adjacent k's summed with int16 saturation) on weights chosen so that saturation
flips the sign of every output: judged against that, the exact outputs are invalid."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from farm.bench import int8_reference as ref8
from farm.bench.quant_rule import judge_against_reference
from farm.models.exact_int8 import ExactUnavailable, exact_outputs, ort_int8_exact

M, K, N = 4, 64, 8


def _weights() -> np.ndarray:
    """Per column, k-pairs of (+127, +127) then (-100, -100): an exact pair of sums at
    activation 255 is 64770 - 51000 > 0, a saturated one 32767 - 51000 < 0."""
    w = np.empty((K, N), np.int8)
    for k in range(0, K, 4):
        w[k:k + 2], w[k + 2:k + 4] = 127, -100
    return w


def _file(tmp: Path, contrib: bool = False) -> Path:
    """y = DynamicQuantizeLinear(x) . W (MatMulInteger, as quantize_dynamic writes it);
    `contrib` adds a com.microsoft op the reference evaluator lacks."""
    inits = [numpy_helper.from_array(_weights(), "w"),
             numpy_helper.from_array(np.array(0, np.int8), "w_zp"),
             numpy_helper.from_array(np.array(0.01, np.float32), "w_s")]
    nodes = [helper.make_node("DynamicQuantizeLinear", ["x"], ["q", "q_s", "q_zp"]),
             helper.make_node("MatMulInteger", ["q", "w", "q_zp", "w_zp"], ["acc"]),
             helper.make_node("Cast", ["acc"], ["accf"], to=TensorProto.FLOAT),
             helper.make_node("Mul", ["q_s", "w_s"], ["s"]),
             helper.make_node("Mul", ["accf", "s"], ["y0" if contrib else "y"])]
    if contrib:
        nodes.append(helper.make_node("FastGelu", ["y0"], ["y"], domain="com.microsoft"))
    graph = helper.make_graph(nodes, "int8", [helper.make_tensor_value_info(
        "x", TensorProto.FLOAT, [M, K])], [helper.make_tensor_value_info(
            "y", TensorProto.FLOAT, [M, N])], inits)
    opsets = [helper.make_opsetid("", 17)] + ([helper.make_opsetid("com.microsoft", 1)]
                                             if contrib else [])
    path = tmp / ("contrib.onnx" if contrib else "int8.onnx")
    onnx.save(helper.make_model(graph, opset_imports=opsets), str(path))
    return path


def _feeds() -> dict[str, np.ndarray]:
    # all positive: DynamicQuantizeLinear's zero point is 0 and the largest value is 255
    x = np.full((M, K), 3.0, np.float32)
    x[:, ::7] = 2.0  # not all equal, still far above the pair limit
    return {"x": x}


def _quantised(x: np.ndarray) -> tuple[np.ndarray, float]:
    scale = float(x.max()) / 255  # zero point 0 (see _feeds)
    return np.clip(np.rint(x / scale), 0, 255).astype(np.int64), scale


def _vpmaddubsw(q: np.ndarray, w: np.ndarray) -> np.ndarray:
    """A model of ORT's non-VNNI x86 U8S8 GEMM: adjacent k pairs summed in int16."""
    prod = q[:, :, None] * w.astype(np.int64)[None, :, :]
    pairs = np.clip(prod[:, 0::2] + prod[:, 1::2], -32768, 32767)
    return pairs.sum(axis=1)


def test_exact_outputs_are_the_integer_sums(tmp_path: Path) -> None:
    q, scale = _quantised(_feeds()["x"])
    want = (q @ _weights().astype(np.int64)).astype(np.float32) * np.float32(scale * 0.01)
    got = exact_outputs(_file(tmp_path), _feeds())["y"]
    np.testing.assert_allclose(got, want, rtol=1e-6)
    assert (got > 0).all() and (_vpmaddubsw(q, _weights()) < 0).all()  # saturation flips


def test_a_route_more_exact_than_a_saturating_ort_is_not_invalid(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path, feeds = _file(tmp_path), _feeds()
    q, scale = _quantised(feeds["x"])
    ort_like = {"y": _vpmaddubsw(q, _weights()).astype(np.float32) * np.float32(scale * 0.01)}
    monkeypatch.setattr(ref8, "_host_saturates", lambda: True)
    ref = ref8.int8_reference(path, feeds, ort_like, "int8-dynamic", same_file=True)
    assert ref.judges and ref.exact is not None
    assert "same int8-dynamic file" in ref.label and "VPMADDUBSW" in ref.why
    assert ref.ort_deviation is not None and ref.ort_deviation["cosine_min"] < 0
    route = {"y": ref.exact["y"] * np.float32(1 + 1e-6)}  # a route that is exact
    kw = {"same_file": True, "reference_label": "x"}
    assert judge_against_reference(route, ref.exact, "int8-dynamic", **kw).ok
    # what the old rule did with it: judged against ORT's run, the exact route was invalid
    assert not judge_against_reference(route, ort_like, "int8-dynamic", **kw).ok


def test_a_file_the_evaluator_cannot_run_leaves_ort_judging_and_says_so(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = _file(tmp_path, contrib=True)
    with pytest.raises(ExactUnavailable, match="FastGelu"):
        exact_outputs(path, _feeds())
    monkeypatch.setattr(ref8, "_host_saturates", lambda: True)
    ref = ref8.int8_reference(path, _feeds(), {"y": np.zeros((M, N), np.float32)},
                              "int8-dynamic", same_file=True)
    assert not ref.judges and ref.exact is None and ref.ort_deviation is None
    assert "ORT on the host judges" in ref.why and "may be judged invalid" in ref.why


def test_where_ort_int8_is_exact() -> None:
    assert not ort_int8_exact("x86_64", ("avx2", "fma"))              # Zen 3
    assert ort_int8_exact("x86_64", ("avx2", "avx512f", "avx512vnni"))  # Zen 4, Ice Lake
    assert ort_int8_exact("x86_64", ("avx2", "avxvnni"))                # Alder Lake
    assert ort_int8_exact("aarch64", ("neon",))


def test_report_says_which_reference_judged_and_why() -> None:
    from farm.report.analysis import analyze

    accuracy = {"ok": True, "reference": "exact integer reference of the same int8-dynamic "
                "file (numpy: int32 sums)", "reference_why": "the file's own arithmetic",
                "ort_host_deviation": {"cosine_min": 0.75, "max_abs_diff": 9.7}}
    records = [{"record_id": route, "run_id": "r", "device": "zen3", "route": route,
                "model": "m", "variant": "int8-dynamic", "threads": 1, "status": "ok",
                "samples_ms": [1.0, 1.2], "build_flags": {"route": route},
                "accuracy": accuracy} for route in ("ort", "custom")]
    caption = analyze(records).tables["availability"].caption
    assert "m int8-dynamic: judged against exact integer reference" in caption
    assert "the file's own arithmetic" in caption and "max abs diff 9.7" in caption
