"""custom – `farm.routes.custom` compiles the model into a plan (cached by model and
compiler source) deployed as `artifacts/<sha12>-<name>.plan`; the static executor for the
device's arch goes to `runners/custom-<arch>/fk_exec`; the request names the plan,
`options.fused` (0 for the unfused key: every op separate, on the same plan) and
`options.isa_cap` (the device's ISA cap, farm/isa.py, or "native"). Plan and executor do not
depend on the cap (the executor picks its kernel table at run time), so neither key has it."""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

from farm import artifacts
from farm.artifacts import make_artifact
from farm.errors import FarmError
from farm.inventory.device import Device
from farm.paths import build_cache_dir
from farm.routes.check import failure
from farm.routes.spec import ModelForms, PlanInput, Progress, Route, RoutePlan, Verdict


def plan(device: Device, given: PlanInput, fused: bool) -> RoutePlan:
    """The plan (weights in kernel layout, fusion decided) and the static executor."""
    from farm.routes.custom.cache import cached_plan
    from farm.routes.custom.executor_build import build_executor, compile_seconds

    plan_path, info = cached_plan(given.model_path)
    # one executor per arch and bench: the fused and unfused keys must run the same binary
    memo = given.memo.setdefault("custom_executor", {})
    if device.arch not in memo:
        memo[device.arch] = build_executor(device.arch, build_cache_dir() / "artifacts" / "custom")
    executor = memo[device.arch]
    # what plan and executor cost when first built, also on a cache hit (as for TVM)
    build_s = info.get("compile_s", 0.0) + compile_seconds(executor)
    plan_file = make_artifact("plan", plan_path, "artifacts", target="any")
    binary = make_artifact("executor", executor, f"runners/custom-{device.arch}",
                           target=device.arch, name="fk_exec", content_name=False)
    # the cap travels in the request, always: an fk_exec that inherited $FARM_ISA must not
    # cap a bench that asked for none
    return RoutePlan("custom", plan_file.remote, (plan_file, binary),
                     options={"fused": int(fused), "isa_cap": device.isa or "native"},
                     build_flags={"plan_ops": info["n_ops"], "plan_key": plan_file.sha256[:12],
                                  # a fact (_count), not a configuration flag
                                  "plan_fallback_count": len(info.get("fallback", [])),
                                  "build_s": round(build_s, 3)},
                     sizes={"runtime": binary.size, "code": 0, "weights": plan_file.size})


def build(model_path: Path, device: Device, fused: bool,
          report: Progress) -> tuple[str, list[str], dict[str, Any]]:
    from farm.routes.custom.cache import cached_plan
    from farm.routes.custom.executor_build import build_executor

    report("plan", 0.2)
    plan_path, facts = cached_plan(model_path)
    report("executor", 0.6)
    executor = build_executor(device.arch, build_cache_dir() / "artifacts" / "custom")
    artifacts.register(artifacts.make_artifact(
        "plan", plan_path, "artifacts", source=artifacts.sha256_file(model_path)))
    artifacts.register(artifacts.make_artifact(
        "executor", executor, f"runners/custom-{device.arch}", target=device.arch,
        name="fk_exec", content_name=False))
    report("done", 1.0)
    return f"plan {plan_path.name}, executor {executor.name}", \
        [str(plan_path), str(executor)], facts


def check(forms: ModelForms) -> Verdict:
    """Whether the lowerer takes the canonical file (op by op, naming the first node no
    kernel, fused or fallback, can run), and which nodes run as fallback kernels."""
    import onnx

    from farm.routes.custom.lower import lower
    from farm.routes.custom.passes import drop_dead

    try:
        ir = lower(onnx.load(str(forms.canonical_path())))
    except FarmError as exc:
        return failure("lower", exc)
    drop_dead(ir)
    verdict: Verdict = {"ok": True, "stage": "lower", "reason": f"{len(ir.ops)} executor ops"}
    if ir.fallback:
        ops = Counter(op for _, op, _ in ir.fallback)
        verdict["reason"] += (f", {len(ir.fallback)} nodes on fallback kernels ("
                              + ", ".join(f"{n} {o}" for o, n in ops.most_common()) + ")")
        verdict["fallback"] = [{"node": n, "op": o, "why": w} for n, o, w in ir.fallback]
    return verdict


ROUTE = Route("custom", label="custom executor", plan=plan, build=build, check=check,
              agent={"runners": ["runners/custom-{arch}/fk_exec"],
                     # the executor picks its kernels at run time: the least it needs
                     "cpu_features": {"aarch64": ["neon"], "x86_64": []}},
              runner_files=(),
              artifact_kinds=("plan", "executor"),
              # the executor's kernel table: what really ran under the ISA level
              record_keys=("plan", "kernels"),
              isa_capped=True)
