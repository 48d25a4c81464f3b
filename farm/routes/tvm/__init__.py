"""The TVM route: targets, compilation, default schedules, tuning, the runner, the RPC
path (api_rpc.py), and the route's description (route.py).

Public (import from the module named):
- `build_tvm(model_path, device, *, fusion=True, tuning_db=None, use_tuning=True,
  progress=None) -> TvmArtifact` (builder.py)
- `tune_tvm(model_path, device, *, trials, time_budget_s=None, ops=("matmul",),
  progress=None) -> TuneResult` (tune.py)
- `build_runner(arch=None) -> RunnerBundle`: the runtime-only C++ runner (runner_build.py)
- `target_spec(device) -> dict`, `kernel_category(name, has_weight) -> str`
Only `api.py` (and its private `api_rules.py`) import TVM; importing this package does not.
"""
