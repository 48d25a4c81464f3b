"""Host-side preparation of one route for one device: build what it needs, name the files.

`plan_route(route, device, prepared) -> RoutePlan`: the artifacts to deploy for the route
(beyond the agent, runners, model and inputs that every bench deploys), the file the
runner request names as `"model"`, route options, and build facts for the record.

* ort – nothing to build: the ONNX model itself, CPU execution provider, all graph
  optimisations.
* tvm – `farm.build.tvm.build_tvm` compiles the model for the device's target (cached by
  content), deployed as `artifacts/<sha12>-tvm-<key12>.so` plus its sidecar `<lib>.json`;
  the runtime-only runner (`build_runner(arch)`) goes to `runners/tvm-<arch>/`.
* custom – `farm.build.custom` compiles the model into a plan (cached by model and
  compiler source) deployed as `artifacts/<sha12>-<name>.plan`; the static executor for
  the device's arch goes to `runners/custom-<arch>/fk_exec`; the request names the plan
  and `options.fused` (0 for the unfused key).
* `<route>-unfused` keys: ORT with `opt_level: disable`, TVM built with fusion off, the
  executor run with every op separate (`fused: 0`) on the same plan.

A build that cannot be made (e.g. an operator TVM's frontend lacks) raises BuildError; the
bench records the route `unavailable` with that message. Builds are serialised: two devices
of the same target would otherwise compile the same cache entry at once.
"""

from __future__ import annotations

import json
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from farm.bench.config import base_route, is_unfused
from farm.bench.model_front import build_path, front_flags
from farm.bench.prepare import Prepared
from farm.build.registry import Artifact, make_artifact
from farm.inventory.device import Device
from farm.paths import state_dir

BUILD_LOCK = threading.Lock()
ORT_OPTIONS = {"provider": "CPUExecutionProvider", "opt_level": "all"}


@dataclass(frozen=True)
class RoutePlan:
    route: str
    model_remote: str                      # relative to the device work dir
    artifacts: tuple[Artifact, ...] = ()
    options: dict[str, Any] = field(default_factory=dict)
    build_flags: dict[str, Any] = field(default_factory=dict)
    sizes: dict[str, int] = field(default_factory=dict)  # runtime, code, weights (bytes)


def plan_route(route_key: str, device: Device, prepared: Prepared) -> RoutePlan:
    """Plan a route key (`ort`, `tvm-unfused`, …; see `farm.bench.config`)."""
    route, fused = base_route(route_key), not is_unfused(route_key)
    if route == "tvm":
        with BUILD_LOCK:
            return _plan_tvm(device, prepared, fused)
    if route == "custom":
        with BUILD_LOCK:
            return _plan_custom(device, prepared, fused)
    options = {**ORT_OPTIONS, "opt_level": "all" if fused else "disable"}
    # ORT compiles nothing ahead of time: its graph optimisation happens at load (load_ms)
    return RoutePlan("ort", prepared.model_artifact.remote, options=options,
                     build_flags={"provider": options["provider"], "build_s": 0.0,
                                  **front_flags(prepared, "ort")},
                     sizes={"code": 0, "weights": prepared.model_artifact.size})


def weight_bytes(model_path: Path) -> int:
    """Bytes of the model's initializers (its weights), as stored in the ONNX file."""
    import onnx

    model = onnx.load(str(model_path), load_external_data=False)
    return sum(len(t.raw_data) or onnx.numpy_helper.to_array(t).nbytes
               for t in model.graph.initializer)


def _plan_tvm(device: Device, prepared: Prepared, fused: bool) -> RoutePlan:
    from farm.build.tvm.builder import build_tvm
    from farm.build.tvm.runner_build import build_runner

    art = build_tvm(build_path(prepared, "tvm"), device, fusion=fused)
    lib = make_artifact("tvm-lib", art.path, "artifacts", target=device.arch,
                        name=f"tvm-{art.key[:12]}.so")
    items = [lib]
    if art.meta_path is not None:
        items.append(make_artifact("tvm-meta", art.meta_path, "artifacts", target=device.arch,
                                   name=Path(lib.remote).name + ".json", content_name=False))
    bundle = build_runner(device.arch)
    items += [make_artifact("runner", f, f"runners/tvm-{device.arch}", target=device.arch,
                            content_name=False) for f in (bundle.binary, *bundle.libs)]
    counts: dict[str, int] = {}
    for source in art.schedule_sources.values():
        counts[source] = counts.get(source, 0) + 1
    # Relax binds the weights as constants inside the library: split its size honestly
    weights = min(weight_bytes(prepared.model.path), art.size_bytes)
    runtime = sum(f.stat().st_size for f in (bundle.binary, *bundle.libs))
    return RoutePlan("tvm", lib.remote, tuple(items),
                     build_flags={"tvm_key": art.key[:12], "target": art.target,
                                  "schedule_counts": counts,
                                  "build_s": original_build_s(art), "build_cached": art.cached,
                                  **front_flags(prepared, "tvm")},
                     sizes={"runtime": runtime, "code": art.size_bytes - weights,
                            "weights": weights})


def original_build_s(art: Any) -> float:
    """What the artifact cost to build, also when this bench found it in the cache."""
    if art.cached and art.meta_path is not None:
        return float(json.loads(Path(art.meta_path).read_text()).get("build_s") or 0.0)
    return float(art.build_s)


def _plan_custom(device: Device, prepared: Prepared, fused: bool) -> RoutePlan:
    """The plan (weights in kernel layout, fusion decided) and the static executor."""
    from farm.build.custom import build_executor
    from farm.build.custom.cache import cached_plan
    from farm.build.custom.executor_build import compile_seconds

    plan_path, info = cached_plan(build_path(prepared))
    # one executor per arch and bench: the fused and unfused keys must run the same binary
    memo = prepared.extra.setdefault("custom_executor", {})
    if device.arch not in memo:
        memo[device.arch] = build_executor(device.arch, state_dir() / "artifacts" / "custom")
    executor = memo[device.arch]
    # what plan and executor cost when first built, also on a cache hit (as for TVM)
    build_s = info.get("compile_s", 0.0) + compile_seconds(executor)
    plan = make_artifact("plan", plan_path, "artifacts", target="any")
    binary = make_artifact("executor", executor, f"runners/custom-{device.arch}",
                           target=device.arch, name="fk_exec", content_name=False)
    return RoutePlan("custom", plan.remote, (plan, binary), options={"fused": int(fused)},
                     build_flags={"plan_ops": info["n_ops"], "plan_key": plan.sha256[:12],
                                  "build_s": round(build_s, 3),
                                  **front_flags(prepared, "custom")},
                     sizes={"runtime": binary.size, "code": 0, "weights": plan.size})
