"""tvm – `farm.routes.tvm.builder.build_tvm` compiles the front-end's canonical file (a 4-bit file's
MatMulNBits dequantised: TVM has no importer for it) for the device's target (cached by
content), deployed as `artifacts/<sha12>-tvm-<key12>.so` plus its sidecar `<lib>.json`;
the runtime-only runner (`build_runner(arch)`) goes to `runners/tvm-<arch>/`. The unfused
key builds with FuseOps/FuseTIR off. Devices reached through a TVM tracker get the same
library through `rpc_plan` (no agent: the RPC app on the device runs it)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from farm.artifacts import make_artifact
from farm.errors import FarmError
from farm.inventory.device import Device
from farm.routes.check import failure
from farm.routes.spec import ModelForms, PlanInput, Progress, Route, RoutePlan, Verdict


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
    from farm.routes.tvm.elf_sizes import code_and_constants

    code, weights = code_and_constants(Path(art.path))
    flags = {"tvm_key": art.key[:12], "target": art.target,
             "schedule_counts": art.schedule_counts,
             "unscheduled_count": art.unscheduled_count, "tvm_rewrites": art.rewrites,
             "build_s": original_build_s(art), "build_cached": art.cached}
    return flags, {"code": code, "weights": weights}


def plan(device: Device, given: PlanInput, fused: bool) -> RoutePlan:
    from farm.routes.tvm.builder import build_tvm
    from farm.routes.tvm.runner_build import build_runner

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
    from farm.routes.tvm.builder import build_tvm
    from farm.routes.tvm.runner_build import build_runner

    art = build_tvm(model_path, device, fusion=fused, progress=report)
    runner = build_runner(device.arch)
    return (f"{art.path} ({'cached' if art.cached else 'built'})",
            [str(art.path), str(runner.binary)],
            {"schedule_sources": art.schedule_counts, "size_bytes": art.size_bytes})


def rpc_plan(device: Device, given: PlanInput, fused: bool) -> RoutePlan:
    """The same library for a device behind a TVM tracker: the runtime is the RPC app's,
    already on the device (not counted); the sidecar and the kernels-only library serve
    the per-op profile."""
    from farm.routes.tvm.builder import build_tvm

    art = build_tvm(given.model_path, device, fusion=fused)
    flags, sizes = tvm_facts(art)
    return RoutePlan("tvm", str(art.path), (), build_flags=flags,
                     options={"meta": str(art.meta_path), "kernels": str(art.kernels_path)},
                     sizes=sizes)


def model_input(forms: ModelForms) -> Path:
    return forms.dequantized_path() if forms.quantisation == "int4" else forms.canonical_path()


def check(forms: ModelForms) -> Verdict:
    """Whether TVM's ONNX importer takes the file the route would build from."""
    import onnx

    from farm.routes.tvm import api, rewrites
    from farm.routes.tvm.builder import check_operators

    path = model_input(forms)
    try:
        check_operators(onnx.load(str(path)), path)
        with rewrites.importable(path) as (importable, _):  # as build_tvm imports it
            api.import_onnx(importable)  # captures the importer's stdout itself
    except FarmError as exc:
        return failure("import", exc)
    verdict: Verdict = {"ok": True, "stage": "import",
                        "reason": f"TVM {api.tvm_version()} imports it"}
    left = forms.canonical.symbolic_left if forms.canonical is not None else ()
    if left:
        verdict["warning"] = (f"{len(left)} tensor(s) keep a symbolic dim: "
                              "TVM falls back to slow generic schedules; bind them with --shape")
    return verdict


ROUTE = Route("tvm", label="TVM", plan=plan, build=build, check=check,
              model_input=model_input, rpc_plan=rpc_plan,
              agent={"runners": ["runners/tvm_runner.py"],
                     "requires": ["runners/tvm-{arch}/tvm_runner"]},
              runner_files=("agents/runners/tvm_runner.py",),
              artifact_kinds=("tvm-lib", "tvm-meta"),
              record_keys=("runtime", "schedules", "rpc_sessions"),
              isa_capped=True)
