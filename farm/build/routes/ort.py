"""ort – nothing to build: the ONNX model itself, CPU execution provider, all graph
optimisations (the unfused key: `opt_level: disable`)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from farm.build import registry
from farm.build.routes.spec import PlanInput, Progress, Route, RoutePlan
from farm.inventory.device import Device

ORT_OPTIONS = {"provider": "CPUExecutionProvider", "opt_level": "all"}


def plan(device: Device, given: PlanInput, fused: bool) -> RoutePlan:
    options = {**ORT_OPTIONS, "opt_level": "all" if fused else "disable"}
    # ORT compiles nothing ahead of time: its graph optimisation happens at load (load_ms)
    return RoutePlan("ort", given.model_artifact.remote, options=options,
                     build_flags={"provider": options["provider"], "build_s": 0.0},
                     sizes={"code": 0, "weights": given.model_artifact.size})


def build(model_path: Path, device: Device, fused: bool,
          report: Progress) -> tuple[str, list[str], dict[str, Any]]:
    registry.register(registry.make_artifact(
        "model", model_path, "models", source=registry.sha256_file(model_path)))
    return "nothing to compile: ONNX Runtime loads the model", [str(model_path)], {}


ROUTE = Route("ort", label="ONNX Runtime", plan=plan, build=build,
              fusion_flag="opt_level", fusion_values=("all", "disable"), serial_build=False,
              agent={"runners": ["runners/ort_runner.py"], "modules": ["onnxruntime"]},
              runner_files=("agents/runners/ort_runner.py", "agents/ftns.py", "farm/categories.py"),
              artifact_kinds=("model",))
