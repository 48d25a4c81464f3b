"""The TVM route's build side: targets, compilation, default schedules, tuning, the runner.

Public:
- `build_tvm(model_path, device, *, fusion=True, tuning_db=None, use_tuning=True,
  progress=None) -> TvmArtifact` (builder.py)
- `tune_tvm(model_path, device, *, trials, time_budget_s=None, ops=("matmul",),
  progress=None) -> TuneResult` (tune.py)
- `build_runner(arch=None) -> RunnerBundle`: the runtime-only C++ runner (runner_build.py)
- `target_spec(device) -> dict`, `kernel_category(name, has_weight) -> str`
Only `api.py` (and its private `api_rules.py`) import TVM; importing this package does not.
"""

from __future__ import annotations

from farm.build.tvm.builder import TvmArtifact, artifact_summary, build_tvm, kernel_category
from farm.build.tvm.runner_build import RunnerBundle, build_runner
from farm.build.tvm.target import target_spec
from farm.build.tvm.tune import TuneResult, tune_tvm

__all__ = ["RunnerBundle", "TuneResult", "TvmArtifact", "artifact_summary", "build_runner",
           "build_tvm", "kernel_category", "target_spec", "tune_tvm"]
