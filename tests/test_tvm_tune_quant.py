"""`farm tune` on the quantized variants: a tiny real MetaSchedule run (4 candidates, local
measurements) on int8-dynamic and int4 (MatMulNBits dequantised as the build does) gives
tuning records that the next default build (what `bench` builds) uses, with no kernel left
unscheduled and outputs still ORT's. About 1 minute each here."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest

from farm.inventory.builtin import local_device
from farm.models import build_model
from farm.models.inputs import make_inputs

pytestmark = [pytest.mark.tvm, pytest.mark.slow]


@pytest.mark.parametrize("variant", ["int8-dynamic", "int4"])
def test_tuning_a_quantized_variant_feeds_the_default_build(
        variant: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from test_tvm_nbits import _fp32_compute, _run, _tvm_outputs

    from farm.routes.tvm.builder import build_tvm
    from farm.routes.tvm.tune import tune_tvm

    monkeypatch.setenv("FARM_HOME", str(tmp_path))
    info = build_model("tiny", variant)
    device = local_device()
    before = build_tvm(info.path, device)
    result = tune_tvm(info.path, device, trials=4, batch=4, ops=("matmul2",))
    assert result.measured == 4 and result.tasks and set(result.seeded) == set(result.tasks)
    after = build_tvm(info.path, device)  # no database argument: as `farm bench` builds
    assert after.key != before.key
    from_db = {k for k, v in after.schedule_sources.items() if v.startswith("tuning-db")}
    assert {k.removesuffix("_prepacked") for k in from_db} == set(result.tasks)
    assert after.unscheduled_count == 0, after.schedule_sources
    if variant == "int8-dynamic" and device.arch == "x86_64":
        # the seeded default of the u8 x s8 GEMMs is the VNNI schedule (the exact vpmaddwd
        # one without VNNI), recognised as such
        rule = "CpuMatmulVnni" if "avx512vnni" in device.isa_features else "CpuMatmulPmaddwd"
        assert f"tuning-db:default:{rule}" in after.schedule_sources.values()
    feeds = make_inputs(info)
    model = onnx.load(str(info.path))
    want = _run(_fp32_compute(model) if variant == "int4" else model, feeds)[0]
    got = _tvm_outputs(after.path, feeds)[0]
    assert float(np.abs(got - want).mean()) < (1e-4 if variant == "int4" else 0.02)
