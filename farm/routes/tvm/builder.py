"""`build_tvm`: ONNX model + device -> a content-addressed TVM shared library (+ sidecar).

Artifacts live in `.farm/artifacts/tvm/<key>/` as `model.so`, `model.so.json` and
`model.kernels.so` (the kernels alone, for per-kernel timing over TVM RPC). The key
is sha256 over: model sha256, target spec (canonical JSON), the ISA cap (farm/isa.py; the
spec's `-attr`s carry it too), TVM version, tuning-database hash, fusion flag, and the source
of farm's TVM modules (the default schedules are code). A key
that exists is reused without compiling. The sidecar is what the device-side runner reads:
output names, and per kernel its category (attention/fc/layernorm/gelu/other), schedule
source (tuning-db, default:<Rule>, none), op name, call sites per inference (`calls`),
parameter shapes and dtypes (`args`, null when not static) and the mean and std of the
weights its first call passes (`constants`, by parameter position); `unscheduled_count` is
the number of kernels left with schedule `none` (naive loops; every variant builds with 0).

The file is rewritten before import (rewrites.py): MatMulNBits (the int4 variant) is
dequantised (nbits.py) and runs as fp32 MatMuls; static QDQ MatMuls with constant int8
weights become MatMulInteger (qdq.py), u8 x s8 GEMMs like int8-dynamic's. The counts are in
the sidecar (`rewrites`) and on records (`build_flags.tvm_rewrites`). Any other operator the
TVM ONNX frontend lacks is a BuildError naming it before any compilation starts.
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
import shutil
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import onnx

from farm import artifacts
from farm.categories import tvm_category
from farm.errors import BuildError
from farm.inventory.device import Device
from farm.paths import build_cache_dir
from farm.routes.tvm import api, nbits, rewrites
from farm.routes.tvm.target import cross_compiler, spec_json, target_spec
from farm.routes.tvm.tuning_db import database_hash, default_database_dir
from farm.source_key import source_digest

TVM_VARIANTS = "fp32, int8-dynamic, int8-qdq, int4"
KERNELS_LIB = "model.kernels.so"


@dataclass(frozen=True)
class TvmArtifact:
    path: Path                          # the shared library
    key: str                            # content address (sha256 hex)
    target: dict[str, Any]              # the TVM dict target it was compiled for
    schedule_sources: dict[str, str]    # kernel -> tuning-db | default:<Rule> | none
    build_s: float                      # compile time (0.0 when served from the cache)
    size_bytes: int
    meta_path: Path | None = None       # sidecar JSON read by the runner
    cached: bool = False
    kernels_path: Path | None = None    # the kernels alone (api.export_kernel_library)
    rewrites: dict[str, int] = field(default_factory=dict)  # rewrites.py's counts

    @property
    def schedule_counts(self) -> dict[str, int]:
        """How many kernels each schedule source covers (records and sidecar show it)."""
        return dict(Counter(self.schedule_sources.values()))

    @property
    def unscheduled_count(self) -> int:
        """Kernels no rule or tuning record scheduled (naive loop nests): target 0."""
        return unscheduled_count(self.schedule_sources)


def unscheduled_count(schedule_sources: dict[str, str]) -> int:
    return sum(1 for source in schedule_sources.values() if source == "none")


def kernel_category(name: str, has_weight: bool) -> str:
    """Category of a TVM kernel from its (fused) name: the one TVM rule of farm.categories."""
    return tvm_category(name, has_weight)


def check_operators(model: onnx.ModelProto, model_path: Path) -> None:
    # MatMulNBits is rewritten before import (rewrites.py)
    supported = api.supported_onnx_ops() | {nbits.OP}
    first: dict[str, str] = {}
    for n in model.graph.node:
        if n.op_type not in supported:
            first.setdefault(n.op_type, n.name)
    if first:
        named = ", ".join(f"node {name!r} ({op})" for op, name in sorted(first.items()))
        raise BuildError(
            f"{model_path.name}: TVM {api.tvm_version()}'s ONNX frontend does not support "
            f"{named}; the TVM route cannot build this model",
            hint=f"`farm models check {model_path}` shows what each route takes; TVM takes "
                 f"the {TVM_VARIANTS} variants; the other routes still run this one")


def _sha256(path: Path) -> str:
    return artifacts.sha256_file(path)


def _code_hash() -> str:
    """The builder's code and every project module it imports (farm.source_key): a change
    in any of them is a new library."""
    return source_digest("farm.routes.tvm.builder")[:16]


def artifact_key(model_sha: str, spec: dict[str, Any], tvm_version: str, db_hash: str | None,
                 fusion: bool, isa: str | None = None) -> str:
    parts = {"model": model_sha, "target": spec_json(spec), "tvm": tvm_version,
             "tuning_db": db_hash, "fusion": fusion, "code": _code_hash()}
    if isa is not None:  # uncapped keys stay what they were
        parts["isa"] = isa
    return hashlib.sha256(json.dumps(parts, sort_keys=True).encode()).hexdigest()


def _load_cached(meta_path: Path, lib: Path) -> TvmArtifact:
    meta = json.loads(meta_path.read_text())
    return TvmArtifact(lib, meta["key"], meta["target"],
                       {k: v["schedule"] for k, v in meta["kernels"].items()},
                       0.0, lib.stat().st_size, meta_path, cached=True,
                       kernels_path=lib.with_name(KERNELS_LIB),
                       rewrites=meta.get("rewrites") or {})


def build_tvm(model_path: str | Path, device: Device, *, fusion: bool = True,
              tuning_db: str | Path | None = None, use_tuning: bool = True,
              progress: Callable[[str, float], None] | None = None) -> TvmArtifact:
    """Compile `model_path` for `device`; reuse the cached artifact when the key matches.

    `tuning_db`: a MetaSchedule database directory; None looks up the one `farm tune` keeps
    for this model and target. `use_tuning=False` ignores any database (the default build).
    `progress(stage, fraction)` is called as the build advances.
    """
    model_path = Path(model_path)
    if not model_path.is_file():
        raise BuildError(f"model {model_path} does not exist", hint="build it with `farm models`")
    report = progress or (lambda _stage, _fraction: None)
    report("check", 0.0)
    model = onnx.load(str(model_path), load_external_data=False)
    spec = target_spec(device, api.host_cpu() if device.is_local else None)
    model_sha = _sha256(model_path)
    db_dir: Path | None = None
    if use_tuning:
        db_dir = Path(tuning_db) if tuning_db else default_database_dir(model_sha, spec)
        if tuning_db and not db_dir.is_dir():
            raise BuildError(f"tuning database {db_dir} does not exist")
        if database_hash(db_dir) is None:
            db_dir = None
    key = artifact_key(model_sha, spec, api.tvm_version(),
                       database_hash(db_dir) if db_dir else None, fusion, device.isa)
    out_dir = build_cache_dir() / "artifacts" / "tvm" / key[:24]
    lib, meta_path = out_dir / "model.so", out_dir / "model.so.json"
    if lib.is_file() and meta_path.is_file() and (out_dir / KERNELS_LIB).is_file():
        report("cached", 1.0)
        return _register(_load_cached(meta_path, lib), device, model_sha)

    # only now: a cached key was built, so its operators were checked; asking TVM's frontend
    # which ops it has imports TVM (seconds), which a cached build must not pay
    check_operators(model, model_path)
    started = time.monotonic()
    report("import", 0.1)
    with rewrites.importable(model_path) as (importable, rewrite_counts):
        mod = api.import_onnx(importable)
    target = api.make_target(spec)
    compiled = api.compile_model(mod, target, fusion=fusion, database_dir=db_dir,
                                 progress=report)
    report("export", 0.8)
    tmp_dir = out_dir.with_name(out_dir.name + f".tmp{os.getpid()}")
    shutil.rmtree(tmp_dir, ignore_errors=True)
    tmp_dir.mkdir(parents=True)
    api.export_library(compiled, tmp_dir / "model.so",
                       cross_cc=cross_compiler(device, _host_arch()))
    api.export_kernel_library(compiled, tmp_dir / KERNELS_LIB,
                              cross_cc=cross_compiler(device, _host_arch()))
    build_s = time.monotonic() - started
    kernels = {name: {"schedule": info["schedule"], "op": info["op"],
                      "category": kernel_category(name, info["has_weight"]),
                      "calls": info["calls"], "args": info.get("args"),
                      "constants": info.get("constants") or {}}
               for name, info in sorted(compiled.kernels.items())}
    meta = {"version": 1, "key": key, "target": spec, "isa": device.isa_level,
            "tvm": api.tvm_version(),
            "model": model_path.name, "model_sha256": model_sha, "fusion": fusion,
            "tuning_db": str(db_dir) if db_dir else None, "build_s": round(build_s, 3),
            "outputs": [o.name for o in model.graph.output],
            "schedule_counts": dict(Counter(k["schedule"] for k in kernels.values())),
            "unscheduled_count": unscheduled_count({k: v["schedule"]
                                                    for k, v in kernels.items()}),
            "rewrites": rewrite_counts, "kernels": kernels}
    (tmp_dir / "model.so.json").write_text(json.dumps(meta, indent=1))
    shutil.rmtree(out_dir, ignore_errors=True)
    tmp_dir.replace(out_dir)
    report("done", 1.0)
    artifact = TvmArtifact(lib, key, spec, {k: v["schedule"] for k, v in kernels.items()},
                           build_s, lib.stat().st_size, meta_path,
                           kernels_path=lib.with_name(KERNELS_LIB), rewrites=rewrite_counts)
    return _register(artifact, device, model_sha)


def _host_arch() -> str:
    machine = platform.machine()
    return "aarch64" if machine in ("arm64", "aarch64") else machine


def _register(artifact: TvmArtifact, device: Device, model_sha: str) -> TvmArtifact:
    """List the library and its sidecar for `farm deploy` (sidecar named `<lib remote>.json`)."""
    lib = artifacts.register(artifacts.make_artifact(
        "tvm-lib", artifact.path, "artifacts", target=device.arch,
        name=f"tvm-{artifact.key[:12]}.so", source=model_sha))
    if artifact.meta_path is not None:
        artifacts.register(artifacts.make_artifact(
            "tvm-meta", artifact.meta_path, "artifacts", target=device.arch,
            name=Path(lib.remote).name + ".json", content_name=False, source=model_sha))
    return artifact


def artifact_summary(artifact: TvmArtifact) -> dict[str, Any]:
    """JSON-able description (for `farm build --output json` and records)."""
    data = asdict(artifact)
    data["path"], data["meta_path"] = str(artifact.path), str(artifact.meta_path)
    data["kernels_path"] = str(artifact.kernels_path)
    data["schedule_counts"] = artifact.schedule_counts
    data["unscheduled_count"] = artifact.unscheduled_count
    return data
