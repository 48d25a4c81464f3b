"""`farm build`'s work: build each route's artifacts for one target and register them,
so `farm deploy` pushes them. The bench builds the same things itself through the same
functions (`farm.build.tvm.build_tvm`, `farm.build.custom`), cached by content, so a
`farm build` before a bench makes the bench's build step a cache hit.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

from farm.build import registry
from farm.errors import BuildError, UsageError
from farm.inventory.builtin import local_device
from farm.inventory.device import Device
from farm.paths import state_dir

# features assumed for a bare `--target TRIPLE` (no inventory device to read them from)
_BASE_FEATURES = {"aarch64": ("neon",), "x86_64": ("avx2", "fma")}

Progress = Callable[[str, float], None]


@dataclass
class BuiltRoute:
    route: str
    ok: bool
    detail: str
    seconds: float
    artifacts: list[str] = field(default_factory=list)
    facts: dict[str, Any] = field(default_factory=dict)


def device_for_target(triple: str) -> Device:
    """A build-only device for `--target TRIPLE` (the host itself when the arch matches)."""
    arch = triple.split("-", 1)[0]
    if arch not in _BASE_FEATURES:
        raise UsageError(f"unsupported target triple {triple!r}",
                         hint="use aarch64-linux-gnu, aarch64-linux-android or x86_64-linux-gnu")
    host = local_device()
    if arch == host.arch:
        return replace(host, name=f"target:{triple}", triple=triple)
    return replace(host, name=f"target:{triple}", transport="ssh", arch=arch, triple=triple,
                   features=_BASE_FEATURES[arch], host="build-only")


def build_route(route: str, model_path: Any, device: Device, *, fusion: bool = True,
                progress: Progress | None = None) -> BuiltRoute:
    """Build one route for one device; a BuildError becomes a failed BuiltRoute."""
    started = time.perf_counter()
    report = progress or (lambda _stage, _fraction: None)
    try:
        if route == "tvm":
            from farm.build.tvm import build_runner, build_tvm

            art = build_tvm(model_path, device, fusion=fusion, progress=report)
            runner = build_runner(device.arch)
            return BuiltRoute("tvm", True, f"{art.path} ({'cached' if art.cached else 'built'})",
                              time.perf_counter() - started, [str(art.path), str(runner.binary)],
                              {"schedule_sources": art.schedule_counts,
                               "size_bytes": art.size_bytes})
        if route == "custom":
            from farm.build.custom import build_executor
            from farm.build.custom.cache import cached_plan

            report("plan", 0.2)
            plan_path, facts = cached_plan(model_path)
            report("executor", 0.6)
            executor = build_executor(device.arch, state_dir() / "artifacts" / "custom")
            registry.register(registry.make_artifact(
                "plan", plan_path, "artifacts", source=registry.sha256_file(model_path)))
            registry.register(registry.make_artifact(
                "executor", executor, f"runners/custom-{device.arch}", target=device.arch,
                name="fk_exec", content_name=False))
            report("done", 1.0)
            return BuiltRoute("custom", True, f"plan {plan_path.name}, executor {executor.name}",
                              time.perf_counter() - started, [str(plan_path), str(executor)],
                              facts)
        if route == "ort":
            registry.register(registry.make_artifact(
                "model", model_path, "models", source=registry.sha256_file(model_path)))
            return BuiltRoute("ort", True, "nothing to compile: ONNX Runtime loads the model",
                              time.perf_counter() - started, [str(model_path)])
        raise UsageError(f"unknown route {route!r}", hint="use ort, tvm or custom")
    except BuildError as exc:
        return BuiltRoute(route, False, str(exc), time.perf_counter() - started)
