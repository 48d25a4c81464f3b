"""Per-op profile of a `tvm-rpc` device: each TVM kernel timed alone on the device.

Over TVM RPC, TVM 0.27 has no in-graph per-kernel timer: the Relax VM profiler
(`VirtualMachine(..., profile=True)`, `vm.profile`, `profile_rpc`) was removed, and the
VM's `set_instrument` hook (what the SSH route's runtime-only runner uses) needs a function,
which an RPC session cannot pass to the remote ("Cannot pass type ffi.Function as an
argument to the remote"). So the profile is built from the kernels one by one:

* `farm.routes.tvm` exports the kernels alone (`model.kernels.so`) and lists in the sidecar
  each kernel's parameter shapes/dtypes (`args`), call sites per inference (`calls`) and
  its weights' mean and std (`constants`);
* `Session.time_kernels` uploads that library and times each kernel ON the device with
  `time_evaluator` (`repeat` = the bench's `profile_runs`, each repeat at least
  `MIN_REPEAT_MS`), on fresh inputs of the graph's shapes: weights drawn with their real
  mean and std, other floats N(0, 1), integers 0;
* per inference, a kernel costs its median (over repeats) ms per call × its calls; the
  category is the sidecar's, i.e. the SSH TVM route's mapping
  (`farm.routes.tvm.builder.kernel_category`).

The result has the shape of the route runners' `ops` event (categories, total_ms, nodes)
plus `method` (how the times were obtained), `category_runs` (one {category: ms} per
repeat) and `unprofiled` (kernels with no static signature, not timed). What it leaves out
compared with an in-graph profile: VM builtins (allocation, shape checks), the cache state
a kernel finds inside the graph, and the graph's own activations (synthetic ones change the
time of transcendental math such as erf: see `api_rpc.remote_kernel_times`).
"""

from __future__ import annotations

import statistics
from typing import Any

from farm.categories import CATEGORIES

MIN_REPEAT_MS = 5  # µs kernels repeat until a repeat lasts this long (timer resolution)
METHOD = ("per-kernel time_evaluator on the device over TVM RPC: each kernel alone from a "
          "kernels-only library, on synthetic inputs of the graph's shapes (weights with "
          "their real mean/std, activations N(0,1)); median ms per call x calls "
          "per inference. In-graph timing is not possible over RPC in TVM 0.27 (no VM "
          "profiler; set_instrument cannot take a function over RPC); VM builtins and "
          "in-graph cache effects are not included")


def timed_kernels(meta: dict[str, Any]) -> tuple[dict[str, dict[str, Any]], list[str]]:
    """(sidecar entries of the kernels the model calls that can be timed alone, names of the
    called kernels that cannot: a parameter without a static shape) from a TVM sidecar."""
    timed: dict[str, dict[str, Any]] = {}
    unprofiled: list[str] = []
    for name, info in meta.get("kernels", {}).items():
        if not info.get("calls"):
            continue
        if info.get("args") is None:
            unprofiled.append(name)
        else:
            timed[name] = info
    return timed, unprofiled


def ops_record(meta: dict[str, Any], times: dict[str, list[float]],
               unprofiled: list[str]) -> dict[str, Any]:
    """The record's `ops` from per-kernel ms per call (one mean per repeat)."""
    kernels = meta.get("kernels", {})
    repeats = min((len(t) for t in times.values()), default=0)
    categories = dict.fromkeys(CATEGORIES, 0.0)
    runs = [dict.fromkeys(CATEGORIES, 0.0) for _ in range(repeats)]
    nodes = []
    for name, per_call in times.items():
        info = kernels.get(name, {})
        calls = int(info.get("calls") or 0)
        category = info.get("category") if info.get("category") in CATEGORIES else "other"
        ms = statistics.median(per_call) * calls  # a preempted repeat moves a mean only
        categories[category] += ms
        for run, t in zip(runs, per_call, strict=False):
            run[category] += t * calls
        nodes.append({"name": name, "op": info.get("op", name), "category": category,
                      "ms": ms, "calls": calls, "ms_per_call": ms / calls if calls else 0.0,
                      "schedule": info.get("schedule", "?")})
    return {"categories": categories, "total_ms": sum(categories.values()), "nodes": nodes,
            "category_runs": runs, "method": METHOD, "unprofiled": sorted(unprofiled)}
