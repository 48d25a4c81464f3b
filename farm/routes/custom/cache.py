"""Content-addressed cache of compiled plans: one plan per (model bytes, compiler source).

`cached_plan(model_path) -> (plan_path, facts)`; facts keep what the compile cost
(`compile_s`), also when later calls find the plan in the cache. A changed plan compiler
(the compiler or any project module it imports) or a changed model gives a new key; an unchanged one
costs two hashes.
"""

from __future__ import annotations

import hashlib
import json
import time
from pathlib import Path
from typing import Any

from farm.artifacts import sha256_file
from farm.paths import build_cache_dir
from farm.source_key import source_digest


def _compiler_hash() -> str:
    """The plan compiler and every project module it imports (farm.source_key)."""
    return source_digest("farm.routes.custom.compile")


def cached_plan(model_path: Path, *, quant: str | None = None) -> tuple[Path, dict[str, Any]]:
    from farm.routes.custom.compile import compile_plan

    key = hashlib.sha256(f"{sha256_file(model_path)}:{quant}:{_compiler_hash()}".encode())
    out_dir = build_cache_dir() / "artifacts" / "custom"
    plan_path = out_dir / f"{key.hexdigest()[:16]}-{Path(model_path).stem}.plan"
    facts_path = plan_path.with_suffix(".json")
    if plan_path.is_file() and facts_path.is_file():
        return plan_path, json.loads(facts_path.read_text())
    started = time.perf_counter()
    info = compile_plan(model_path, plan_path, quant=quant)
    facts = {"compile_s": round(time.perf_counter() - started, 3), "n_ops": info.n_ops,
             "op_counts": info.op_counts, "size_bytes": info.size_bytes,
             "weight_types": info.weight_types, "merged_qkv": info.merged_qkv,
             "folded_norms": info.folded_norms,
             # nodes on the generic fallback kernels (lower_generic.py): [node, op]
             "fallback": [list(f) for f in info.fallback]}
    facts_path.write_text(json.dumps(facts))
    return plan_path, facts
