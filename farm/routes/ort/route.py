"""ort – nothing to build: the user's own ONNX file, CPU execution provider, all graph
optimisations (the unfused key: `opt_level: disable`); ORT binds shapes at run time."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from farm import artifacts
from farm.inventory.device import Device
from farm.routes.check import failure
from farm.routes.spec import ModelForms, PlanInput, Progress, Route, RoutePlan, Verdict, source_file

ORT_OPTIONS = {"provider": "CPUExecutionProvider", "opt_level": "all"}


def plan(device: Device, given: PlanInput, fused: bool) -> RoutePlan:
    options = {**ORT_OPTIONS, "opt_level": "all" if fused else "disable"}
    # ORT compiles nothing ahead of time: its graph optimisation happens at load (load_ms)
    return RoutePlan("ort", given.model_artifact.remote, options=options,
                     build_flags={"provider": options["provider"], "build_s": 0.0},
                     sizes={"code": 0, "weights": given.model_artifact.size})


def build(model_path: Path, device: Device, fused: bool,
          report: Progress) -> tuple[str, list[str], dict[str, Any]]:
    artifacts.register(artifacts.make_artifact(
        "model", model_path, "models", source=artifacts.sha256_file(model_path)))
    return "nothing to compile: ONNX Runtime loads the model", [str(model_path)], {}


def check(forms: ModelForms) -> Verdict:
    """Whether onnxruntime on the host loads the user's file."""
    import onnxruntime as ort

    opts = ort.SessionOptions()
    opts.log_severity_level = 3
    try:
        ort.InferenceSession(str(forms.source), opts, providers=["CPUExecutionProvider"])
    except Exception as exc:  # ORT raises its own untyped errors
        return failure("load", exc)
    return {"ok": True, "stage": "load", "reason": f"onnxruntime {ort.__version__} loads it"}


ROUTE = Route("ort", label="ONNX Runtime", plan=plan, build=build, check=check,
              model_input=source_file,
              fusion_flag="opt_level", fusion_values=("all", "disable"), serial_build=False,
              agent={"runners": ["runners/ort_runner.py"], "modules": ["onnxruntime"]},
              runner_files=("agents/runners/ort_runner.py", "agents/ftns.py", "farm/categories.py"),
              artifact_kinds=("model",),
              record_keys=("provider", "opt_level", "ort_version", "node_count",
                           "node_providers", "session_options", "session_config",
                           "quantizer"))
