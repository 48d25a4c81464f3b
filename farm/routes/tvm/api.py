"""The one place farm touches the TVM Python API (Apache TVM 0.27, tvm-ffi 0.1.14).

Every other module of farm calls the functions below and never imports `tvm`, so the next
TVM release (0.20-0.27 moved relay→relax, meta_schedule→s_tir.meta_schedule, tir→tirx,
contrib→support, nd→runtime.tensor) changes this file and `api_rules.py` only.
`import tvm` costs ~2 s and ~200 MB, so it happens lazily on the first call.

This file: facts (version, host CPU, ONNX ops) · compile (import, lower, schedule, export).
Split by job: tuning (MetaSchedule) is `api_tune.py`, RPC (tracker queries, sessions,
on-device timing) is `api_rpc.py`, so `farm/rpc` imports the RPC part only.
Errors surface as `BuildError` (build/tune) or `TransportError` (RPC) with the TVM message.
"""

from __future__ import annotations

import contextlib
import importlib
import importlib.metadata
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any

from farm.errors import BuildError

Progress = Callable[[str, float], None]


def _tvm() -> ModuleType:
    try:
        with _torch_hidden():
            return importlib.import_module("tvm")
    except ImportError as exc:
        raise BuildError(f"Apache TVM is not importable: {exc}",
                         hint="pip install 'apache-tvm==0.27.0.post1' "
                              "'apache-tvm-ffi==0.1.14.post1' (extra `farm[tvm]`)") from exc


@contextlib.contextmanager
def _torch_hidden() -> Iterator[None]:
    """tvm-ffi imports torch whenever it is installed, for a DLPack exchange farm never uses:
    3-4 s of `import tvm` on a host with the `export` extra. Hidden during TVM's own import
    (not for good: a later `import torch` in this process works as usual)."""
    if "tvm" in sys.modules or "torch" in sys.modules:
        yield
        return
    sys.modules["torch"] = None  # type: ignore[assignment]  # `import torch` -> ImportError
    try:
        yield
    finally:
        if "torch" in sys.modules and sys.modules["torch"] is None:
            del sys.modules["torch"]


# ---------------------------------------------------------------- facts
def tvm_version() -> str:
    """The installed TVM's version. Read from the wheel's metadata when there is one (the
    same string as `tvm.__version__`): a cached build's key needs the version, and
    `import tvm` alone cost 4-12 s of a bench whose every build was cached."""
    for dist in ("apache-tvm", "tvm"):
        with contextlib.suppress(importlib.metadata.PackageNotFoundError):
            return importlib.metadata.version(dist)
    return str(_tvm().__version__)


def host_cpu() -> str:
    """LLVM's name for this machine's CPU (e.g. znver4), for `mcpu` of the local target.

    Asked of LLVM once per machine and TVM version, then read from a small file under the
    build cache (`host_facts.cached`): like the version, it is part of every local build's
    key, and asking LLVM means importing TVM."""
    from farm.routes.tvm.host_facts import cached

    def ask() -> str:
        _tvm()
        from tvm.target import codegen
        return str(codegen.llvm_get_system_cpu())

    return cached("llvm-cpu", tvm_version(), ask)


def supported_onnx_ops() -> frozenset[str]:
    """ONNX op types the Relax ONNX frontend converts (any domain)."""
    _tvm()
    from tvm.relax.frontend.onnx import onnx_frontend
    return frozenset(onnx_frontend._get_convert_map())


def make_target(spec: dict[str, Any]) -> Any:
    """A `tvm.target.Target` from farm's dict form (strings with options are rejected in 0.27)."""
    try:
        return _tvm().target.Target(dict(spec))
    except Exception as exc:
        raise BuildError(f"TVM rejected target {spec}: {exc}") from exc


# ---------------------------------------------------------------- compile
def _u8s8_matmul_integer() -> Any:
    """An ONNX `MatMulInteger` converter that keeps the 8-bit operands 8-bit.

    TVM's own converter widens A, B to int32 and subtracts the zero points before the matmul,
    so the GEMM runs on int32 (vpmulld, ~7x slower than ORT's u8 x s8 here) and no int8
    dot-product instruction can ever be used. For what `quantize_dynamic` writes (A uint8
    with a scalar zero point za, B a constant int8 weight with zero point 0) this emits

        matmul(A, B, out_dtype=int32) - za * colsum(B)

    (the zero point moves out of the K loop: sum_k (a - za) b = sum_k a b - za sum_k b),
    a u8 x s8 -> i32 GEMM that `api_rules.CpuMatmulVnni` tensorizes with vpdpbusd (AVX2 without
    VNNI: `CpuMatmulPmaddwd`, vpmaddwd). Anything
    else (non-zero weight zero point, per-row za, non-constant B) keeps TVM's converter."""
    import numpy as np
    from tvm import relax
    from tvm.relax.frontend.onnx import onnx_frontend as front
    constant = _tvm().ir.expr.Constant

    class MatMulIntegerU8S8(front.OnnxOpConverter):
        @classmethod
        def _impl_v10(cls, bb: Any, inputs: Any, attr: Any, params: Any) -> Any:
            a, b = inputs[0], inputs[1]
            za = inputs[2] if len(inputs) > 2 else None
            zb = inputs[3] if len(inputs) > 3 else None
            a_ty = bb.normalize(a).ty
            fits = (isinstance(b, constant) and b.ty.dtype.dtype == "int8"
                    and len(b.ty.shape) == 2 and a_ty.dtype.dtype == "uint8"
                    and (zb is None or (isinstance(zb, constant)
                                        and not np.any(zb.value.numpy())))
                    and (za is None or len(bb.normalize(za).ty.shape) == 0))
            if not fits:
                return front.MatMulInteger._impl_v10(bb, inputs, attr, params)
            out = relax.op.matmul(a, b, out_dtype="int32")
            if za is None:
                return out
            colsum = relax.const(b.value.numpy().astype(np.int32).sum(axis=0), "int32")
            return relax.op.subtract(
                out, relax.op.multiply(relax.op.astype(za, "int32"), colsum))

    return MatMulIntegerU8S8


@contextlib.contextmanager
def _farm_converters() -> Iterator[None]:
    """TVM's ONNX converter table with farm's `MatMulInteger` (see `_u8s8_matmul_integer`)
    while one model imports; the frontend reads the table through the module function."""
    from tvm.relax.frontend.onnx import onnx_frontend as front
    original = front._get_convert_map
    matmul_integer = _u8s8_matmul_integer()

    def convert_map() -> dict[str, Any]:
        return {**original(), "MatMulInteger": matmul_integer}

    front._get_convert_map = convert_map
    try:
        yield
    finally:
        front._get_convert_map = original


def import_onnx(model_path: Path) -> Any:
    """Relax IRModule of an ONNX file, weights bound as constants."""
    import onnx
    _tvm()
    from tvm.relax.frontend.onnx import from_onnx

    from farm.models.frontend.capture import quiet_stdout

    try:
        # the importer prints IR to fd 1: keep `--output json` pure
        with quiet_stdout(), _farm_converters():
            return from_onnx(onnx.load(str(model_path)), keep_params_in_input=False)
    except Exception as exc:
        raise BuildError(f"TVM could not import {model_path}: {exc}".splitlines()[0],
                         hint="check the model with `farm models check`; TVM takes fp32, "
                              "int8-dynamic and int8-qdq encoder variants") from exc


def lower_to_kernels(mod: Any, target: Any, *, fusion: bool) -> Any:
    """Legalize Relax ops to TIR kernels (and fuse them unless `fusion` is off).

    The same lowering feeds the build and the tuner, so tuned kernels match built ones.
    """
    tvm = _tvm()
    from tvm import relax
    # FastMathTransform: erf/exp/softmax/tanh as vectorisable polynomials (as ORT's MLAS
    # does); LLVM has no vector erf/exp, so the exact ops become one libm call per element
    passes = [relax.backend.DispatchSampling(), relax.backend.DispatchSortScan(),
              relax.transform.FastMathTransform(), relax.transform.LegalizeOps(),
              relax.transform.AnnotateTIROpPattern(), relax.transform.FoldConstant()]
    if fusion:
        passes += [relax.transform.FuseOps(), relax.transform.FuseTIR()]
    with target:
        return tvm.transform.Sequential(passes)(mod)


def _default_schedule(func: Any, target: Any) -> tuple[Any, str]:
    """(schedule, "default:<Rule>") from the first default rule that takes `func`, or
    (None, "none"). Rules: farm's CpuMatmulVnni (u8 x s8 GEMMs on VNNI), CpuMatmulPmaddwd
    (the same on AVX2 without VNNI) and CpuMatmul,
    dlight's GEMV, farm's CpuRowSoftmax, dlight's Reduction, farm's CpuInjective,
    CpuFullReduction and CpuScalar (api_rules.rules_after)."""
    from tvm.s_tir import dlight

    from farm.routes.tvm import api_rules
    rules = [api_rules.CpuMatmulVnni(), api_rules.CpuMatmulPmaddwd(), api_rules.CpuMatmul(),
             dlight.cpu.GEMV(), api_rules.CpuRowSoftmax(), dlight.cpu.Reduction(),
             api_rules.CpuInjective(), *api_rules.rules_after()]
    for rule in rules:
        try:
            sch = rule.apply(func, target, False)
        except Exception:  # a rule that trips on an odd kernel must not fail the build
            sch = None
        if sch is not None:
            return (sch[0] if isinstance(sch, list) else sch), f"default:{type(rule).__name__}"
    return None, "none"


def _prepack_weights(mod: Any, kernels: dict[str, dict[str, Any]]) -> Any:
    """Run the weight-repacking blocks of scheduled kernels at build time: split each into
    its own kernel (kernel `K` becomes `K_prepacked` plus `K_weight_prepack`), fold those
    over the constant weights, and drop the folded kernels. `kernels` follows the renames."""
    tvm = _tvm()
    from tvm import relax
    # the pass checks every PrimFunc for a compute block, and a kernel written without
    # blocks (the CPU scan of CumSum, RoBERTa's position ids) fails that check: such kernels
    # never repack weights, so they sit the pass out
    blockless = {gv: f for gv, f in mod.functions_items() if _blockless(f)}
    if blockless:
        mod = _without(mod, blockless)
    split = relax.transform.SplitLayoutRewritePreproc()(mod)
    for gv, func in blockless.items():
        mod[gv] = func
        split[gv] = func
    if len(split.functions_items()) == len(mod.functions_items()):
        return mod  # nothing repacked
    mod = tvm.transform.Sequential([relax.transform.FoldConstant(),
                                    relax.transform.DeadCodeElimination()])(split)
    calls = _kernel_calls(mod)
    for name, call in calls.items():
        base = name.removesuffix("_prepacked")
        if name not in kernels and base in kernels:
            call.pop("weight_positions", None)
            kernels[name] = {**kernels.pop(base), **call, "op": name}
    leftover = [n for n in calls if n.endswith("_weight_prepack")]
    if leftover:
        raise BuildError(f"weight repacking did not fold to constants: {', '.join(leftover)}")
    return mod


def _blockless(func: Any) -> bool:
    """A PrimFunc whose outer block has no child block (a kernel written as plain loops, e.g.
    TVM's CPU scan `cumsum_generic`; its outer block is not named "root")."""
    tvm = _tvm()
    from tvm import s_tir
    if not isinstance(func, tvm.tirx.PrimFunc) or not isinstance(func.body, s_tir.SBlockRealize):
        return False
    try:
        sch = s_tir.Schedule(func)
        return not sch.get_child_blocks(sch.get_sblock(func.body.block.name_hint))
    except Exception:  # not one the schedule can read: the pass sees it as before
        return False


def _without(mod: Any, gvs: dict[Any, Any]) -> Any:
    """`mod` without the functions `gvs` names (the Relax calls to them stay as they are)."""
    tvm = _tvm()
    out = tvm.IRModule({g: f for g, f in mod.functions_items() if g not in gvs},
                       attrs=mod.attrs)
    for name, infos in mod.global_infos.items():
        out.update_global_info(name, infos)
    return out


@dataclass
class Compiled:
    executable: Any
    # kernel (global symbol) -> {"schedule": source, "op": name, "has_weight": bool,
    #   "calls": per inference, "constants": {position: [mean, std]},
    #   "args": [[shape, dtype], ...] | None}
    kernels: dict[str, dict[str, Any]] = field(default_factory=dict)


def _kernel_calls(mod: Any) -> dict[str, dict[str, Any]]:
    """Kernel name -> {"has_weight": any call site passes a constant (a weight),
    "weight_positions": argument positions where every call site passes a constant,
    "calls": call sites per inference (Relax functions are straight-line code),
    "constants": {argument position: [mean, std]} of the first call site's constants}."""
    import numpy as np

    tvm = _tvm()
    from tvm import relax
    calls: dict[str, dict[str, Any]] = {}
    call_tir = tvm.ir.Op.get("relax.call_tir")
    constant = tvm.ir.expr.Constant  # relax.Constant moved to tvm.ir in 0.27

    def visit(expr: Any) -> None:
        if isinstance(expr, relax.Call) and expr.op.same_as(call_tir) and \
                isinstance(expr.args[0], relax.GlobalVar):
            args = expr.args[1].fields if isinstance(expr.args[1], relax.Tuple) else []
            info = calls.setdefault(expr.args[0].name_hint,
                                    {"has_weight": False, "calls": 0, "constants": None})
            info["has_weight"] = info["has_weight"] or any(isinstance(a, constant) for a in args)
            positions = {i for i, a in enumerate(args) if isinstance(a, constant)}
            info["weight_positions"] = positions if not info["calls"] else \
                info["weight_positions"] & positions
            info["calls"] += 1
            if info["constants"] is None:
                # value ranges for timing a kernel alone on realistic data (its transcendental
                # math, e.g. erf, runs slower on large arguments)
                values = {i: a.value.numpy() for i, a in enumerate(args)  # 0.27: .value
                          if isinstance(a, constant) and hasattr(a.value, "numpy")}
                info["constants"] = {
                    str(i): [float(v.mean()), float(v.std())] for i, v in values.items()
                    if v.size and np.issubdtype(v.dtype, np.floating)}

    for _gv, func in mod.functions_items():
        if isinstance(func, relax.Function):
            relax.analysis.post_order_visit(func, visit)
    return calls


def _kernel_signature(func: Any) -> list[list[Any]] | None:
    """[[shape, dtype], ...] of a PrimFunc's parameters (inputs, then outputs), or None when
    one is not a buffer of static shape (such a kernel cannot be called on its own)."""
    from tvm.tirx import IntImm
    args = []
    for param in func.params:
        # 0.27 (tirx): a buffer parameter is a Var of BufferType with shape and dtype; a
        # scalar (a symbolic size) has no shape
        shape = getattr(param, "shape", None)
        if shape is None or not all(isinstance(d, IntImm) for d in shape):
            return None
        args.append([[int(d) for d in shape], str(param.dtype)])
    return args


def compile_model(mod: Any, target: Any, *, fusion: bool, database_dir: Path | None,
                  progress: Progress | None = None) -> Compiled:
    """Compile a Relax module with farm's CPU pipeline; record each kernel's schedule source.

    Schedule sources: `tuning-db` (a MetaSchedule-tuned record), `tuning-db:default:<Rule>`
    (the database's best is the default schedule `farm tune` seeded and measured),
    `default:<Rule>` (farm's CpuMatmul/CpuInjective, dlight's GEMV/Reduction; untuned),
    `none` (naive loops).
    """
    tvm = _tvm()
    import tvm_ffi
    from tvm import relax, tirx
    from tvm.relax.backend.cpu_generic import pipeline as cpu

    kernels: dict[str, dict[str, Any]] = {}

    def schedule(mod: Any) -> Any:
        from farm.routes.tvm import api_rules
        api_rules.register_intrinsics()  # tuning records name farm's tensor intrinsics
        for name, call in _kernel_calls(mod).items():
            kernels[name] = {"schedule": "none", "op": name, **call}
        originals = {gv.name_hint: f for gv, f in mod.functions_items()
                     if isinstance(f, tirx.PrimFunc)}
        if database_dir is not None:
            mod = relax.transform.MetaScheduleApplyDatabase(str(database_dir))(mod)
        updates = {}
        for gv, func in mod.functions_items():
            if not isinstance(func, tirx.PrimFunc):
                continue
            info = kernels.setdefault(gv.name_hint, {"op": gv.name_hint, "has_weight": False,
                                                     "calls": 0, "constants": None})
            original = originals.get(gv.name_hint, func)
            weights = sorted(info.pop("weight_positions", None) or ())
            # constant weights the default GEMM rule may repack at build time
            sch, source = _default_schedule(
                original.with_attr("layout_free_buffers", weights) if weights else original,
                target)
            if func.attrs is not None and "tirx.is_scheduled" in func.attrs:
                # the database's best record; `farm tune` seeds it with the default schedule
                # (with the weights repacked, as built; older databases: in their ONNX
                # layout), measured, so the default wins where tuning found nothing faster;
                # it is then built with its weights repacked
                unpacked = _default_schedule(original, target)[0] if weights else None
                same = any(s is not None and tvm_ffi.structural_equal(s.mod["main"].body,
                                                                      func.body)
                           for s in (sch, unpacked))
                info["schedule"] = f"tuning-db:{source}" if same else "tuning-db"
                if not same:
                    continue
            else:
                info["schedule"] = source
            if sch is not None:
                updates[gv] = sch.mod["main"].with_attr("tirx.is_scheduled", True)
        for gv, func in updates.items():
            mod[gv] = func
        mod = _prepack_weights(mod, kernels)
        for gv, func in mod.functions_items():
            if isinstance(func, tirx.PrimFunc) and gv.name_hint in kernels:
                kernels[gv.name_hint]["args"] = _kernel_signature(func)
        return mod

    @tvm.transform.module_pass(opt_level=0)
    def pipeline(mod: Any, _ctx: Any) -> Any:
        with target:
            mod = lower_to_kernels(mod, target, fusion=fusion)
            if progress:
                progress("schedule", 0.4)
            mod = schedule(mod)
            if progress:
                progress("codegen", 0.6)
            return tvm.transform.Sequential(cpu.dataflow_lower_passes(target)
                                            + cpu.finalize_passes(target))(mod)

    try:
        executable = tvm.compile(mod, target, relax_pipeline=pipeline)
    except Exception as exc:
        raise BuildError(f"TVM compilation failed for target {target}: "
                         f"{str(exc).strip().splitlines()[-1]}") from exc
    return Compiled(executable, kernels)


def export_library(compiled: Compiled, path: Path, *, cross_cc: str | None) -> None:
    """Write a shared library natively, or through `cross_cc` (e.g. aarch64-linux-gnu-gcc)."""
    _tvm()
    from tvm.support import cc
    kwargs = {"fcompile": cc.cross_compiler(cross_cc)} if cross_cc else {}
    try:
        compiled.executable.export_library(str(path), **kwargs)
    except Exception as exc:
        raise BuildError(f"exporting {path} failed: {str(exc).strip().splitlines()[-1]}",
                         hint=f"is {cross_cc or 'the host compiler'} installed?") from exc


def export_kernel_library(compiled: Compiled, path: Path, *, cross_cc: str | None) -> None:
    """Write the compiled kernels alone (no VM, no weights) as a shared library whose root
    module serves each kernel by name, so `time_evaluator` can time one kernel over RPC
    (in the model library the kernels sit in an import it does not search)."""
    _tvm()
    from tvm.support import cc
    kwargs = {"fcompile": cc.cross_compiler(cross_cc)} if cross_cc else {}
    try:
        (kernels,) = compiled.executable.mod.imports
        kernels.export_library(str(path), **kwargs)
    except Exception as exc:
        raise BuildError(f"exporting the kernel library {path} failed: "
                         f"{str(exc).strip().splitlines()[-1]}",
                         hint=f"is {cross_cc or 'the host compiler'} installed?") from exc
