"""A tiny real MetaSchedule run (4 candidates + the measured default schedules, local
measurements) changes the built artifact: new key, kernels from the tuning database, output
still equal to ORT's; a second run resumes on the same database. About 2-3 minutes here."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest

from farm.inventory.builtin import local_device
from farm.models.config import PRESETS
from farm.models.encoder import build_encoder
from farm.models.inputs import ftns_module, make_inputs

pytestmark = [pytest.mark.tvm, pytest.mark.slow]


def test_tiny_tuning_run_changes_the_artifact(tmp_path: Path,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    from farm.routes.tvm.builder import build_tvm
    from farm.routes.tvm.runner_build import build_runner
    from farm.routes.tvm.tune import tune_tvm

    monkeypatch.setenv("FARM_HOME", str(tmp_path))
    model = tmp_path / "tiny.onnx"
    onnx.save(build_encoder(PRESETS["tiny"]), str(model))
    device = local_device()
    before = build_tvm(model, device)
    assert "tuning-db" not in before.schedule_sources.values()

    seen: list[int] = []
    result = tune_tvm(model, device, trials=4, batch=4, ops=("matmul1",),
                      progress=lambda done, _total: seen.append(done))
    assert result.measured == 4 and seen[-1] == 4 and not result.budget_spent
    assert set(result.tasks) == {"fused_matmul1_divide_add3", "matmul1"}
    assert set(result.seeded) == set(result.tasks)  # default schedules measured first
    records = (result.database / "database_tuning_record.json").read_text().splitlines()
    assert len(records) >= 2

    after = build_tvm(model, device)
    assert after.key != before.key and not after.cached
    from_db = {k: v for k, v in after.schedule_sources.items() if v.startswith("tuning-db")}
    assert set(from_db) == set(result.tasks), after.schedule_sources
    # each is either a tuned record or the measured default, whichever was faster
    assert all(v in ("tuning-db", "tuning-db:default:CpuMatmul") for v in from_db.values())
    # use_tuning=False still gives the default build (same key as before)
    assert build_tvm(model, device, use_tuning=False).key == before.key

    # the tuned library computes the same thing
    feeds = make_inputs(model)
    inputs = tmp_path / "in.ftns"
    ftns_module().write(str(inputs), feeds)
    req = tmp_path / "req.json"
    req.write_text(json.dumps({
        "model": str(after.path), "inputs": str(inputs), "outputs": str(tmp_path / "o.ftns"),
        "threads": 1, "policy": {"warmup_runs": 0, "min_runs": 1, "max_time_s": 10},
        "profile_runs": 0}))
    proc = subprocess.run([str(build_runner().binary), "--request", str(req)],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    expected = ort.InferenceSession(str(model), providers=["CPUExecutionProvider"]).run(
        None, feeds)[0]
    got = ftns_module().read(str(tmp_path / "o.ftns"))["last_hidden_state"]
    np.testing.assert_allclose(got, expected, atol=1e-4, rtol=1e-3)

    # resumable: a second run on the same database adds to the totals
    again = tune_tvm(model, device, trials=4, batch=4, ops=("matmul1",), time_budget_s=0.0)
    assert again.database == result.database and again.budget_spent
    assert again.seeded == ()  # seeded once per database
    assert again.total_trials == result.total_trials + again.measured
