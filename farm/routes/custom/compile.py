"""`compile_plan`: lower an ONNX model, run the passes and write the plan file (see the
package docstring)."""


from __future__ import annotations

import os
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import onnx

from farm.errors import BuildError
from farm.routes.custom.executor_build import build_executor, build_kernel_test
from farm.routes.custom.ir import finalize
from farm.routes.custom.lower import lower
from farm.routes.custom.passes import allocate, drop_dead, fold_residual_norms, merge_qkv
from farm.routes.custom.plan_format import OP_NAMES, serialize

__all__ = ["PlanInfo", "build_executor", "build_kernel_test", "compile_plan"]


@dataclass(frozen=True)
class PlanInfo:
    path: Path
    size_bytes: int
    n_ops: int
    op_counts: dict[str, int]
    weight_types: dict[str, int]  # FC count per weight type (fp32/int8/q4_0)
    buffers: int
    features: tuple[str, ...]
    merged_qkv: int
    folded_norms: int  # NoNorms after a residual run as their FC's epilogue (passes.py)
    fallback: tuple[tuple[str, str], ...] = ()  # (node, op) lowered by the generic fallback


def compile_plan(onnx_path: str | os.PathLike[str], out_path: str | os.PathLike[str], *,
                 quant: str | None = None, gelu: str = "erf", fuse_qkv: bool = True,
                 features: tuple[str, ...] = ()) -> PlanInfo:
    if gelu not in ("erf", "table"):
        raise BuildError(f"unknown gelu mode {gelu!r}", hint="use 'erf' or 'table'")
    try:
        model = onnx.load(str(onnx_path))
    except Exception as exc:
        raise BuildError(f"cannot load ONNX model {onnx_path}: {exc}") from exc
    ir = lower(model, quant=quant, gelu=gelu)
    drop_dead(ir)
    merged = merge_qkv(ir) if fuse_qkv else 0
    folded = fold_residual_norms(ir)
    assign, cols = allocate(ir)
    plan = finalize(ir, assign, cols, set(features))
    data = serialize(plan)
    out = Path(out_path)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(out.name + ".tmp")
    tmp.write_bytes(data)
    tmp.replace(out)
    wnames = {0: "fp32", 1: "int8", 2: "q4_0"}
    return PlanInfo(
        path=out, size_bytes=len(data), n_ops=len(plan.ops),
        op_counts=dict(Counter(OP_NAMES[o.kind] for o in plan.ops)),
        weight_types=dict(Counter(wnames[o.params[0]] for o in plan.ops if o.kind == 3)),
        buffers=len(plan.bufs), features=tuple(sorted(features)), merged_qkv=merged,
        folded_norms=folded, fallback=tuple((n, o) for n, o, _ in ir.fallback))
