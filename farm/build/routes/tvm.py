"""tvm – `farm.build.tvm.build_tvm` compiles the model for the device's target (cached by
content), deployed as `artifacts/<sha12>-tvm-<key12>.so` plus its sidecar `<lib>.json`;
the runtime-only runner (`build_runner(arch)`) goes to `runners/tvm-<arch>/`. The unfused
key builds with FuseOps/FuseTIR off."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from farm.build.registry import make_artifact
from farm.build.routes.spec import PlanInput, Progress, Route, RoutePlan
from farm.inventory.device import Device


def original_build_s(art: Any) -> float:
    """What the artifact cost to build, also when this bench found it in the cache."""
    if art.cached and art.meta_path is not None:
        return float(json.loads(Path(art.meta_path).read_text()).get("build_s") or 0.0)
    return float(art.build_s)


def tvm_facts(art: Any) -> tuple[dict[str, Any], dict[str, int]]:
    """(build_flags, {code, weights} bytes) of a TVM library, for the agent and RPC paths."""
    # Relax binds the weights as constants inside the library, in the form TVM keeps them
    # (a 4-bit file's weights dequantised to fp32): read the split from the library's
    # sections. File size minus the ONNX initializers' bytes gave 0 KiB of code on most
    # bench-size builds (fp32 and 4-bit) and 22 KiB for ALBERT's 182.
    from farm.build.tvm.elf_sizes import code_and_constants

    code, weights = code_and_constants(Path(art.path))
    flags = {"tvm_key": art.key[:12], "target": art.target,
             "schedule_counts": art.schedule_counts,
             "unscheduled_count": art.unscheduled_count, "tvm_rewrites": art.rewrites,
             "build_s": original_build_s(art), "build_cached": art.cached}
    return flags, {"code": code, "weights": weights}


def plan(device: Device, given: PlanInput, fused: bool) -> RoutePlan:
    from farm.build.tvm.builder import build_tvm
    from farm.build.tvm.runner_build import build_runner

    art = build_tvm(given.model_path, device, fusion=fused)
    lib = make_artifact("tvm-lib", art.path, "artifacts", target=device.arch,
                        name=f"tvm-{art.key[:12]}.so")
    items = [lib]
    if art.meta_path is not None:
        items.append(make_artifact("tvm-meta", art.meta_path, "artifacts", target=device.arch,
                                   name=Path(lib.remote).name + ".json", content_name=False))
    bundle = build_runner(device.arch)
    items += [make_artifact("runner", f, f"runners/tvm-{device.arch}", target=device.arch,
                            content_name=False) for f in (bundle.binary, *bundle.libs)]
    flags, sizes = tvm_facts(art)
    runtime = sum(f.stat().st_size for f in (bundle.binary, *bundle.libs))
    return RoutePlan("tvm", lib.remote, tuple(items), build_flags=flags,
                     sizes={"runtime": runtime, **sizes})


def build(model_path: Path, device: Device, fused: bool,
          report: Progress) -> tuple[str, list[str], dict[str, Any]]:
    from farm.build.tvm import build_runner, build_tvm

    art = build_tvm(model_path, device, fusion=fused, progress=report)
    runner = build_runner(device.arch)
    return (f"{art.path} ({'cached' if art.cached else 'built'})",
            [str(art.path), str(runner.binary)],
            {"schedule_sources": art.schedule_counts, "size_bytes": art.size_bytes})


ROUTE = Route("tvm", label="TVM", plan=plan, build=build,
              agent={"runners": ["runners/tvm_runner.py"],
                    "requires": ["runners/tvm-{arch}/tvm_runner"]},
              runner_files=("agents/runners/tvm_runner.py",),
              artifact_kinds=("tvm-lib", "tvm-meta"))
