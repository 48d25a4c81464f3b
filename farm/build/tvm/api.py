"""The one place farm touches the TVM Python API (Apache TVM 0.27, tvm-ffi 0.1.14).

Every other module of farm calls the functions below and never imports `tvm`, so the next
TVM release (0.20-0.27 moved relay→relax, meta_schedule→s_tir.meta_schedule, tir→tirx,
contrib→support, nd→runtime.tensor) changes this file and `api_rules.py` only.
`import tvm` costs ~2 s and ~200 MB, so it happens lazily on the first call.

Sections: facts (version, host CPU, ONNX ops) · compile (import, lower, schedule, export) ·
tuning (MetaSchedule) · RPC (tracker queries, sessions, on-device timing).
Errors surface as `BuildError` (build/tune) or `TransportError` (RPC) with the TVM message.
"""

from __future__ import annotations

import contextlib
import importlib
import logging
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any

from farm.errors import BuildError, TransportError

Progress = Callable[[str, float], None]


def _tvm() -> ModuleType:
    try:
        return importlib.import_module("tvm")
    except ImportError as exc:
        raise BuildError(f"Apache TVM is not importable: {exc}",
                         hint="pip install 'apache-tvm==0.27.0.post1' "
                              "'apache-tvm-ffi==0.1.14.post1' (extra `farm[tvm]`)") from exc


# ---------------------------------------------------------------- facts
def tvm_version() -> str:
    return str(_tvm().__version__)


def host_cpu() -> str:
    """LLVM's name for this machine's CPU (e.g. znver4), for `mcpu` of the local target."""
    _tvm()
    from tvm.target import codegen
    return str(codegen.llvm_get_system_cpu())


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
def import_onnx(model_path: Path) -> Any:
    """Relax IRModule of an ONNX file, weights bound as constants."""
    import onnx
    _tvm()
    from tvm.relax.frontend.onnx import from_onnx

    from farm.build.models.frontend.capture import quiet_stdout

    try:
        # the importer prints IR to fd 1: keep `--output json` pure
        with quiet_stdout():
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
    (None, "none"). Rules: farm's CpuMatmul, dlight's GEMV and Reduction, farm's CpuInjective."""
    from tvm.s_tir import dlight

    from farm.build.tvm import api_rules
    rules = [api_rules.CpuMatmul(), dlight.cpu.GEMV(), dlight.cpu.Reduction(),
             api_rules.CpuInjective()]
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
    split = relax.transform.SplitLayoutRewritePreproc()(mod)
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
                # (as the tuner lowers it: weights in their ONNX layout), measured, so the
                # default wins where tuning found nothing faster; it is then built with its
                # weights repacked
                seeded = _default_schedule(original, target)[0] if weights else sch
                same = seeded is not None and tvm_ffi.structural_equal(
                    seeded.mod["main"].body, func.body)
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


# ---------------------------------------------------------------- RPC
def _check_tracker_listens(host: str, port: int) -> None:
    """Fail within seconds on a dead tracker: tvm.rpc.connect_tracker retries one for 60 s."""
    import socket
    try:
        socket.create_connection((host, port), timeout=3).close()
    except OSError as exc:
        raise TransportError(f"TVM RPC tracker {host}:{port} is not reachable: {exc}",
                             hint="farm tracker start / farm tracker status") from exc


def tracker_summary(host: str, port: int) -> dict[str, Any]:
    """The tracker's {"server_info": [...], "queue_info": {...}}."""
    _check_tracker_listens(host, port)
    _tvm()
    from tvm import rpc
    try:
        tracker = rpc.connect_tracker(host, port)
        try:
            return dict(tracker.summary())
        finally:
            tracker.close()
    except Exception as exc:
        raise TransportError(f"TVM RPC tracker {host}:{port} did not answer: {exc}",
                             hint="farm tracker start / farm tracker status") from exc


def rpc_request(host: str, port: int, key: str, *, priority: int = 1,
                session_timeout: float = 0) -> Any:
    """A session on a server registered under `key`; blocks while every such server is busy
    (the tracker queues requests by priority, so sessions never collide)."""
    _check_tracker_listens(host, port)
    _tvm()
    from tvm import rpc
    try:
        return rpc.connect_tracker(host, port).request(
            key, priority=priority, session_timeout=session_timeout)
    except Exception as exc:
        raise TransportError(f"no TVM RPC session for key {key!r} from {host}:{port}: {exc}",
                             hint="is an RPC server registered? farm tracker status") from exc


@dataclass
class RemoteVM:
    """A model library loaded into a Relax VM in one RPC session, its inputs on the device.
    Valid while the session lives; `remote_vm_outputs` and `remote_vm_time` may be called
    any number of times (the library is uploaded and loaded once)."""

    vm: Any
    dev: Any
    args: list[Any]
    phases: dict[str, float] = field(default_factory=dict)  # upload_s, load_s


def _upload(remote: Any, lib_path: Path) -> str:
    import uuid

    # a fresh remote name per upload: re-uploading over a library the session process has
    # loaded crashes it (seen: kShutdown on the second run in one session)
    remote_name = f"{uuid.uuid4().hex[:12]}-{lib_path.name}"
    remote.upload(str(lib_path), target=remote_name)
    return remote_name


def remote_vm_load(remote: Any, lib_path: Path, inputs: list[Any]) -> RemoteVM:
    """Upload `lib_path`, load it into a VM on the session's CPU and copy `inputs` there."""
    import time

    tvm = _tvm()
    from tvm import relax
    phases: dict[str, float] = {}
    started = time.monotonic()
    remote_name = _upload(remote, lib_path)
    phases["upload_s"] = time.monotonic() - started
    started = time.monotonic()
    dev = remote.cpu()
    vm = relax.VirtualMachine(remote.load_module(remote_name), dev)
    args = [tvm.runtime.tensor(a, dev) for a in inputs]
    phases["load_s"] = time.monotonic() - started
    return RemoteVM(vm, dev, args, phases)


def remote_vm_outputs(loaded: RemoteVM) -> list[Any]:
    """Run `main` once on the device; its outputs as numpy arrays."""
    tvm = _tvm()
    result = loaded.vm["main"](*loaded.args)
    items = [result] if isinstance(result, tvm.runtime.Tensor) else list(result)
    return [item.numpy() for item in items]


def remote_vm_time(loaded: RemoteVM, *, number: int, repeat: int,
                   min_repeat_ms: int = 0) -> list[float]:
    """`main` timed ON the device by `time_evaluator`: ms per repeat (mean of `number`)."""
    timer = loaded.vm.time_evaluator("main", loaded.dev, number=number, repeat=repeat,
                                     min_repeat_ms=min_repeat_ms)
    return [t * 1000.0 for t in timer(*loaded.args).results]


def remote_kernel_times(remote: Any, kernels_lib: Path, kernels: dict[str, dict[str, Any]],
                        *, repeat: int, min_repeat_ms: int) -> dict[str, list[float]]:
    """Time each kernel of `kernels_lib` (`export_kernel_library`) alone ON the device:
    kernel -> ms per call, one mean per repeat. `kernels` gives each kernel's sidecar entry:
    `args` ([shape, dtype] per parameter) and `constants` ({position: [mean, std]} of the
    weights its call passes). Each parameter gets a fresh device tensor: a weight drawn with
    its real mean and std, any other float N(0, 1) (activations are unit-scale after a
    LayerNorm), integers 0 (always a valid index: a gather with an out-of-range one may
    crash the device). Data matters to transcendental kernels (erf, exp): farm's tiny
    encoder's fused FFN kernel took 0.03 ms on zeros and 0.13 ms on U(-1, 1).

    Over RPC this is the only per-kernel timer TVM 0.27 offers: the Relax VM profiler is
    gone, and `set_instrument` needs a function, which RPC cannot pass to the remote.
    """
    import numpy as np

    tvm = _tvm()
    module = remote.load_module(_upload(remote, kernels_lib))
    dev = remote.cpu()
    rng = np.random.default_rng(0)
    times: dict[str, list[float]] = {}
    for name, info in kernels.items():
        weights = info.get("constants") or {}
        arrays = []
        for i, (shape, dtype) in enumerate(info["args"]):
            if np.dtype(dtype).kind != "f":
                arrays.append(np.zeros(shape, dtype))
                continue
            mean, std = weights.get(str(i), (0.0, 1.0))
            arrays.append(rng.normal(mean, std, shape).astype(dtype))
        args = [tvm.runtime.tensor(a, dev) for a in arrays]
        timer = module.time_evaluator(name, dev, number=1, repeat=repeat,
                                      min_repeat_ms=min_repeat_ms)
        times[name] = [t * 1000.0 for t in timer(*args).results]
    return times


# ---------------------------------------------------------------- tuning
def _shared_library_export(cross_cc: str | None) -> Callable[[Any], str]:
    """MetaSchedule export step producing a ready .so (its default .tar needs a linker on
    the device); runs in MetaSchedule's builder worker processes (pickled by cloudpickle)."""

    def export(mod: Any) -> str:
        import os
        import tempfile

        from tvm.support import cc
        path = os.path.join(tempfile.mkdtemp(), "tvm_tmp_mod.so")
        kwargs = {"fcompile": cc.cross_compiler(cross_cc)} if cross_cc else {}
        mod.export_library(path, **kwargs)
        return path

    return export


def _build_without_intrinsics(mod: Any, target: Any, _params: Any) -> Any:
    """MetaSchedule's default build minus `import tvm.s_tir.tensor_intrin`, which takes
    30-80 s on a loaded 2-core host and is paid by every builder worker of every batch;
    fp32 CPU kernels use no tensor intrinsics (a candidate that does fails to build and is
    skipped)."""
    import tvm
    from tvm.s_tir.transform import RemoveWeightLayoutRewriteBlock
    mod = RemoveWeightLayoutRewriteBlock(skip_tensor_rewrite=True)(mod)
    return tvm.compile(mod, target=target)


def _seed_defaults(tasks: list[Any], target: Any, database: Any, builder: Any, runner: Any,
                   work_dir: Path) -> list[str]:
    """Measure each task's default schedule with the tuning builder/runner and commit it as
    a tuning record, so the database's best is never worse than the untuned default build
    (a few dozen trials per task often are). Done once per task per database."""
    import json

    from tvm.s_tir import meta_schedule as ms
    from tvm.s_tir.meta_schedule.arg_info import ArgInfo
    from tvm.s_tir.meta_schedule.builder import BuilderInput
    from tvm.s_tir.meta_schedule.runner import RunnerInput

    marker = work_dir / "farm_seeded.json"
    done = set(json.loads(marker.read_text())) if marker.is_file() else set()
    seeded = []
    for task in tasks:
        if task.task_name in done:
            continue
        mod = task.dispatched[0]
        sch, _source = _default_schedule(mod["main"], target)
        if sch is None:
            continue
        args_info = ArgInfo.from_prim_func(mod["main"])
        (built,) = builder.build([BuilderInput(sch.mod, target)])
        if built.error_msg:
            continue
        (future,) = runner.run([RunnerInput(built.artifact_path, "cpu", args_info)])
        result = future.result()
        if result.error_msg:
            continue
        workload = database.commit_workload(mod)
        database.commit_tuning_record(ms.database.TuningRecord(
            sch.trace, workload, result.run_secs, target, args_info))
        seeded.append(task.task_name)
    marker.write_text(json.dumps(sorted(done | set(seeded))))
    return seeded


BUDGET_MARK = "farm: tuning time budget spent"


class _BudgetSpent(Exception):
    pass


@contextlib.contextmanager
def _unnamed_handlers_detached(logger: logging.Logger) -> Iterator[None]:
    """MetaSchedule rebuilds its logging config from the names of its logger's handlers and
    fails on an unnamed one (pytest's capture handlers, an application's own): detach those
    while it tunes, then put them back."""
    unnamed = [h for h in logger.handlers if h.get_name() is None]
    for handler in unnamed:
        logger.removeHandler(handler)
    try:
        yield
    finally:
        for handler in unnamed:
            logger.addHandler(handler)


def tune_model(mod: Any, target: Any, work_dir: Path, *, trials: int, batch: int = 16,
               time_budget_s: float | None = None, op_names: list[str] | None = None,
               rpc: tuple[str, int, str] | None = None, cross_cc: str | None = None,
               progress: Callable[[int, int], None] | None = None) -> dict[str, Any]:
    """MetaSchedule over the kernels `compile_model` would build, records in `work_dir`.

    Measurements run here (`rpc` None) or on the device holding tracker key `rpc[2]`.
    The JSON database in `work_dir` is appended as each candidate is measured, so an
    interrupted run keeps its records and the next run starts from them.
    `time_budget_s` ends tuning once exceeded, checked after each measured batch of `batch`
    candidates (so it can overshoot by one batch).
    """
    import time

    _tvm()
    from tvm.ir.utils import derived_object  # moved out of meta_schedule.utils
    from tvm.s_tir import meta_schedule as ms

    # MetaSchedule's console handler takes the level set beforehand: keep the console to
    # warnings (the progress callback reports), the full log still goes to work_dir/logs
    ms_logger = logging.getLogger("tvm.s_tir.meta_schedule")
    if ms_logger.level == logging.NOTSET:
        ms_logger.setLevel(logging.WARNING)
    lowered = lower_to_kernels(mod, target, fusion=True)
    started = time.monotonic()
    measured = [0]

    @derived_object
    class _BudgetAndProgress(ms.measure_callback.PyMeasureCallback):
        def apply(self, _scheduler: Any, _task_id: int, _cands: Any, _builds: Any,
                  runs: Any) -> None:
            measured[0] += len(runs)
            if progress:
                progress(measured[0], trials)
            if time_budget_s is not None and time.monotonic() - started > time_budget_s:
                # MetaSchedule has no time budget; terminating tasks from a callback trips
                # a scheduler check, so abort between batches (every record measured so far
                # is already committed to the database)
                raise _BudgetSpent(BUDGET_MARK)

    # several repeats of >= 20 ms each: single short measurements on a shared host pick
    # schedules by noise (the cost is a few seconds per batch)
    evaluator = ms.runner.EvaluatorConfig(number=3, repeat=3, min_repeat_ms=20)
    runner: Any = ms.runner.LocalRunner(timeout_sec=120, evaluator_config=evaluator)
    if rpc is not None:
        runner = ms.runner.RPCRunner(ms.runner.RPCConfig(
            tracker_host=rpc[0], tracker_port=rpc[1], tracker_key=rpc[2],
            session_timeout_sec=120), evaluator_config=evaluator)
    # few workers and a long timeout: each worker imports TVM, and on a loaded 2-core host
    # MetaSchedule's defaults (one per core, 30 s) time out before anything builds
    workers = max(1, min(2, int(target.attrs.get("num-cores", 1))))
    builder = ms.builder.LocalBuilder(f_build=_build_without_intrinsics,
                                      f_export=_shared_library_export(cross_cc),
                                      max_workers=workers, timeout_sec=180)
    work_dir.mkdir(parents=True, exist_ok=True)
    database = ms.database.JSONDatabase(work_dir=str(work_dir))
    tasks = [t for t in ms.relax_integration.extract_tasks(lowered, target)
             if not op_names or any(o in t.task_name for o in op_names)]
    seeded = _seed_defaults(tasks, target, database, builder, runner, work_dir)
    try:
        with _unnamed_handlers_detached(ms_logger):
            ms.relax_integration.tune_relax(
                lowered, {}, target, str(work_dir), max_trials_global=trials,
                num_trials_per_iter=min(batch, trials), op_names=op_names, builder=builder,
                runner=runner, database=database,
                # a population sized to the batch: the default 512 spends ~30 s of search per
                # batch here, longer than measuring a batch of 16
                strategy=ms.search_strategy.EvolutionarySearch(
                    population_size=min(512, max(64, 8 * batch)),
                    init_min_unmeasured=min(50, 4 * batch), genetic_num_iters=3),
                measure_callbacks=[*ms.measure_callback.MeasureCallback.create("default"),
                                   _BudgetAndProgress()])
        budget_spent = False
    except Exception as exc:
        if BUDGET_MARK not in str(exc):
            raise BuildError(f"MetaSchedule tuning in {work_dir} failed: "
                             f"{str(exc).strip().splitlines()[-1]}") from exc
        budget_spent = True
    return {"measured": measured[0], "seconds": time.monotonic() - started,
            "budget_spent": budget_spent, "seeded": seeded,
            "tasks": [t.task_name for t in tasks]}
