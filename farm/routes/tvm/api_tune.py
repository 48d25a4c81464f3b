"""MetaSchedule tuning through TVM's Python API (split from `api.py`, whose lazy-import rule
it keeps). Errors surface as `BuildError` with the TVM message.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from farm.errors import BuildError
from farm.routes.tvm.api import _default_schedule, _kernel_calls, _tvm, lower_to_kernels


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


# Files of frames that are no module's: importlib's frozen bootstrap and the code TVMScript's
# evaluator compiles (see _tensor_intrinsics_imported)
_MODULELESS_FILES = ("<frozen importlib._bootstrap>", "<frozen importlib._bootstrap_external>",
                     "<ast>")


def _tensor_intrinsics_imported() -> None:
    """`import tvm.s_tir.tensor_intrin` (MetaSchedule's TuneContext does it on creation) in
    seconds instead of 50-170 s. That package parses ~500 TVMScript functions and the parser
    calls `inspect.stack()` for each; for a frame whose file exists nowhere (the frozen import
    machinery, `<ast>`) `inspect.getmodule` rescans every loaded module, thousands in a
    process that also imported ORT, onnxscript or torch. Those files belong to no module, so
    naming them in inspect's file -> module cache (under a name no module has) gives the
    same answer, None, without the scan; the entries are removed afterwards."""
    import inspect
    import sys

    if "tvm.s_tir.tensor_intrin" in sys.modules:
        return
    added = [f for f in _MODULELESS_FILES if f not in inspect.modulesbyfile]
    for name in added:
        inspect.modulesbyfile[name] = "<no module>"
    try:
        import tvm.s_tir.tensor_intrin  # noqa: F401
    finally:
        for name in added:
            inspect.modulesbyfile.pop(name, None)


def _sibling_key(name: str, func: Any) -> tuple[Any, ...]:
    """Kernels equal but for literals: the name without its numbering plus the parameters'
    shapes and dtypes. int8-dynamic MobileBERT has 363 matmul tasks (each layer's weight
    scale is a float literal inside its kernel, so each is its own task) but 7 such keys;
    literals do not change a kernel's speed, so one measurement serves the group."""
    import re
    params = tuple((tuple(int(d) for d in getattr(p, "shape", ()) or ()), str(p.dtype))
                   for p in func.params)
    return re.sub(r"\d+", "", name), params


def _seed_defaults(tasks: list[Any], target: Any, database: Any, builder: Any, runner: Any,
                   work_dir: Path, deadline: float | None = None,
                   weights: dict[str, list[int]] | None = None) -> list[str]:
    """Measure each task's default schedule with the tuning builder/runner and commit it as
    a tuning record, so the database's best is never worse than the untuned default build
    (a few dozen trials per task often are). Done once per task per database; one
    measurement per group of sibling kernels (`_sibling_key`), each member getting its own
    record (its own trace) with that time. Stops at `deadline` (time.monotonic()); the
    rest are seeded by the next run. `weights`: kernel -> parameter positions that are
    constant weights; the default schedule then reads them repacked as the build does (the
    builder drops the repacking block and the runner passes the repacked shapes, so the
    time is the kernel's as built; the int8 VNNI GEMM exists only with its weight
    repacked)."""
    import json

    from tvm.s_tir import meta_schedule as ms
    from tvm.s_tir.meta_schedule.arg_info import ArgInfo
    from tvm.s_tir.meta_schedule.builder import BuilderInput
    from tvm.s_tir.meta_schedule.runner import RunnerInput

    marker = work_dir / "farm_seeded.json"
    done = set(json.loads(marker.read_text())) if marker.is_file() else set()
    seeded = []
    measured: dict[tuple[Any, ...], Any] = {}  # sibling key -> run_secs
    for task in tasks:
        if task.task_name in done:
            continue
        if deadline is not None and time.monotonic() > deadline:
            break
        mod = task.dispatched[0]
        func = mod["main"]
        if weights and weights.get(task.task_name):
            func = func.with_attr("layout_free_buffers", weights[task.task_name])
        sch, _source = _default_schedule(func, target)
        if sch is None:
            continue
        args_info = ArgInfo.from_entry_func(sch.mod, remove_preproc=True)
        key = _sibling_key(task.task_name, mod["main"])
        if key not in measured:
            (built,) = builder.build([BuilderInput(sch.mod, target)])
            if built.error_msg:
                continue
            (future,) = runner.run([RunnerInput(built.artifact_path, "cpu", args_info)])
            result = future.result()
            if result.error_msg:
                continue
            measured[key] = result.run_secs
        workload = database.commit_workload(mod)
        database.commit_tuning_record(ms.database.TuningRecord(
            sch.trace, workload, measured[key], target, args_info))
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

    _tvm()
    from tvm.ir.utils import derived_object  # moved out of meta_schedule.utils
    from tvm.s_tir import meta_schedule as ms

    _tensor_intrinsics_imported()

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
    from farm.routes.tvm.api_rules import register_intrinsics  # imports TVM: lazily
    register_intrinsics()
    weights = {name: sorted(info["weight_positions"])
               for name, info in _kernel_calls(lowered).items() if info["weight_positions"]}
    seeded = _seed_defaults(tasks, target, database, builder, runner, work_dir,
                            None if time_budget_s is None else started + time_budget_s,
                            weights)
    try:
        if time_budget_s is not None and time.monotonic() - started > time_budget_s:
            raise _BudgetSpent(BUDGET_MARK)  # the budget went on seeding
        with _unnamed_handlers_detached(ms_logger):
            ms.relax_integration.tune_relax(
                lowered, {}, target, str(work_dir), max_trials_global=trials,
                num_trials_per_iter=min(batch, trials), op_names=op_names, builder=builder,
                runner=runner, database=database,
                # the generic LLVM space: for a target with +avx512vnni MetaSchedule's
                # default adds MultiLevelTilingWithIntrin(dot_16x4_vnni), whose candidates
                # all fail here (the weight is not in the intrinsic's [N/16, K/4, 16, 4]
                # layout, and the intrinsic's LLVM call no longer verifies); the int8 GEMMs'
                # VNNI schedule comes from the seeded default (api_rules.CpuMatmulVnni)
                space=ms.space_generator.PostOrderApply(
                    sch_rules=ms.schedule_rule.ScheduleRule.create("llvm"),
                    postprocs=ms.postproc.Postproc.create("llvm"),
                    mutator_probs=ms.mutator.Mutator.create("llvm")),
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
