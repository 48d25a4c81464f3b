"""QDQ models through the int8 kernels: the plan keeps a static-QDQ model's int8 weights
(qdq.py) instead of folding them to fp32, and the executor's result stays as close to ORT
(running the same QDQ model) as its int8-dynamic result does, natively and under qemu."""

from __future__ import annotations

import numpy as np
import pytest
from fkhelpers import ort_outputs, run_exec
from test_custom_executor import TOL

from farm.routes.custom.compile import compile_plan


def _qdq_plan(tiny, tmp_path):
    model = tiny("int8-qdq")
    plan = tmp_path / "qdq.plan"
    info = compile_plan(model, plan)
    return model, plan, info


def test_qdq_weights_stay_int8(tiny, tmp_path) -> None:
    _model, _plan, info = _qdq_plan(tiny, tmp_path)
    assert info.weight_types == {"int8": info.op_counts["FC"]}, info.weight_types
    # an explicit quant= still decides (q4_0 re-quantises the dequantised weights)
    q4 = compile_plan(tiny("int8-qdq"), tmp_path / "q4.plan", quant="q4_0")
    assert set(q4.weight_types) == {"q4_0"}


@pytest.mark.parametrize("threads", [1, 2])
def test_qdq_model_matches_ort_and_the_fp32_reference(tiny, tmp_path, exe_x86,
                                                      threads) -> None:
    model, plan, _ = _qdq_plan(tiny, tmp_path)
    res = run_exec(exe_x86, plan, model, tmp_path, "--threads", str(threads))
    assert res.rc == 0, res.stderr
    got, want = res.output(), ort_outputs(model)
    # int8 differs by design (per-row dynamic activations vs ORT's calibrated per-tensor
    # ones); ORT's static QDQ output is itself up to 0.47 from the fp32 model's on tiny
    # (quantize.py), so a few elements differ by that much whatever we do (0.47 when the
    # plan folded the weights to fp32): the mean is the bound
    assert np.abs(got - want).mean() <= TOL["int8-dynamic"][1]
    # and no less accurate than ORT's static QDQ arithmetic against the fp32 model
    ref = ort_outputs(tiny("fp32"))
    ours, theirs = np.abs(got - ref).mean(), np.abs(want - ref).mean()
    assert ours <= 1.5 * theirs + 1e-3, (ours, theirs)


@pytest.mark.aarch64
def test_qdq_under_qemu(tiny, tmp_path, exe_arm) -> None:
    model, plan, _ = _qdq_plan(tiny, tmp_path)
    res = run_exec(exe_arm, plan, model, tmp_path, "--threads", "2")
    assert res.rc == 0, res.stderr
    assert np.abs(res.output() - ort_outputs(model)).mean() <= TOL["int8-dynamic"][1]
