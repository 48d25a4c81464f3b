"""The TVM route's build side: targets, compilation, default schedules, tuning databases.

Public: `build_tvm(model_path, device, *, fusion, tuning_db, use_tuning, progress)`
-> `TvmArtifact`; `target_spec(device)`; `build_runner(arch)` -> runtime-only runner.
Only `api.py` (and its private `api_rules.py`) import TVM.
"""

from __future__ import annotations

from farm.build.tvm.builder import TvmArtifact, build_tvm, kernel_category
from farm.build.tvm.target import target_spec

__all__ = ["TvmArtifact", "build_tvm", "kernel_category", "target_spec"]
