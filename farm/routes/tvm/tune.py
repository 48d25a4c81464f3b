"""`tune_tvm`: MetaSchedule tuning of a model's kernels for a device, into the database
`build_tvm` applies (`.farm/tuning/<id>/`, see tuning_db.py).

Measurements: on this machine for the `local` device; for any other device through the TVM
RPC tracker (the device's `tracker_host`/`tracker_port`/`key`), the libraries being
cross-compiled here when the arch differs. Budgets are explicit: `trials` candidates per
run (≈1 min per 16 here), measured in batches of `batch`, optionally cut by
`time_budget_s` (checked after each batch). Re-running adds trials, warm-
started from the stored records; `state.json` keeps the totals. Before the first tuning
of a kernel its default schedule is measured and stored too, so a short tuning run can only
make a kernel faster (the build takes the database's best record per kernel).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from farm import artifacts
from farm.errors import BuildError, UsageError
from farm.inventory.device import Device
from farm.routes.tvm import api, api_tune, rewrites
from farm.routes.tvm.target import cross_compiler, target_spec
from farm.routes.tvm.tuning_db import default_database_dir, read_state, write_state

DEFAULT_OPS = ("matmul",)  # untuned time is ~98 % matmul; other kernels have default rules


@dataclass(frozen=True)
class TuneResult:
    database: Path
    measured: int           # candidates measured in this run
    seconds: float          # this run
    total_trials: int       # all runs on this database
    total_seconds: float
    tasks: tuple[str, ...]
    budget_spent: bool      # stopped by time_budget_s before `trials`
    seeded: tuple[str, ...]  # tasks whose default schedule was measured into the database


def tune_tvm(model_path: str | Path, device: Device, *, trials: int, batch: int = 16,
             time_budget_s: float | None = None, ops: tuple[str, ...] | None = DEFAULT_OPS,
             progress: Callable[[int, int], None] | None = None) -> TuneResult:
    if trials < 1:
        raise UsageError("--trials must be at least 1")
    model_path = Path(model_path)
    if not model_path.is_file():
        raise BuildError(f"model {model_path} does not exist")
    rpc = None
    if not device.is_local:
        if not device.key:
            raise UsageError(f"device {device.name!r} has no TVM RPC tracker key to measure on",
                             hint="give it `key:` in devices.yaml and register an RPC server "
                                  "for it (farm tracker serve / farm deploy)")
        rpc = (device.tracker_host, device.tracker_port, device.key)
    spec = target_spec(device, api.host_cpu() if device.is_local else None)
    db_dir = default_database_dir(artifacts.sha256_file(model_path), spec)
    state = read_state(db_dir)
    started = time.time()
    with rewrites.importable(model_path) as (importable, _):  # as build_tvm imports it
        mod = api.import_onnx(importable)
    outcome = api_tune.tune_model(mod, api.make_target(spec), db_dir,
                             trials=trials, batch=batch, time_budget_s=time_budget_s,
                             op_names=list(ops) if ops else None, rpc=rpc,
                             cross_cc=cross_compiler(device, _host_arch()),
                             progress=progress)
    state["trials"] += outcome["measured"]
    state["seconds"] = round(state["seconds"] + outcome["seconds"], 3)
    state["runs"].append({"started": started, "measured": outcome["measured"],
                          "seconds": round(outcome["seconds"], 3), "device": device.name,
                          "model": model_path.name, "target": spec})
    write_state(db_dir, state)
    return TuneResult(db_dir, outcome["measured"], outcome["seconds"], state["trials"],
                      state["seconds"], tuple(outcome["tasks"]), outcome["budget_spent"],
                      tuple(outcome["seeded"]))


def _host_arch() -> str:
    import platform
    machine = platform.machine()
    return "aarch64" if machine in ("arm64", "aarch64") else machine
