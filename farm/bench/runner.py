"""Run a bench over many devices in parallel; one device failing never stops the others.

Life cycle: `Bench(devices, config, store, command)` → `start(emit)` (prepares the model,
inputs and reference on the host, opens a run in the store, starts one `DeviceRun` thread
per device) → the caller consumes events until `running()` is false, calling
`interrupt()` on Ctrl-C → `finish()` closes the run in the store and returns a
`BenchResult` (run status and exit code: 0 ok, 3 some device failed or a route failed,
130 interrupted, 1 no run stored: every device was busy past `--lock-wait`, a refusal
stores no run).

Writes go through one `Keeper` (`farm.results.keeper`): when the host's disk fills up
mid-run, records go to the spill file beside the store, or stay in memory
(`BenchResult.unsaved`, for the CLI to print); `BenchResult.records` has them all.

Resume (`resume_run`): the run's stored config is used again (`resume_plan`), routes with
a kept record (ok, invalid, partial, unavailable) are skipped, the others run again and
their old `failed` records are marked superseded; a route cut after some of its rounds
(a `partial` record whose `rounds.done` < `rounds.planned`) runs only its missing rounds
(`farm.bench.device_run`); a device that now completes its share gets its `partial`
records back to `ok`. The run keeps its id; superseded records stay in the store as
history but are not in `BenchResult.records`.

Events are plain dicts {"t", "device", "event", ...} pushed through `emit` from worker
threads; views (`farm.views.live`) turn them into a picture, or into jsonl.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from farm.bench.config import BenchConfig
from farm.bench.device_run import DeviceRun, library_output
from farm.bench.prepare import prepare
from farm.errors import (
    EXIT_ERROR,
    EXIT_INTERRUPTED,
    EXIT_OK,
    EXIT_PARTIAL,
    StoreError,
    StoreUnavailable,
)
from farm.inventory.capped import cap_all
from farm.inventory.device import Device
from farm.libout import capture
from farm.results.backend import Store
from farm.results.keeper import MEMORY, Keeper
from farm.results.schema import is_superseded

Emit = Callable[[dict[str, Any]], None]


@dataclass
class BenchResult:
    run_id: str                          # "" when no run was stored
    status: str                          # ok | partial | failed | interrupted (run status)
    devices: dict[str, tuple[str, str]]  # name -> (status, detail)
    records: list[dict[str, Any]] = field(default_factory=list)
    refused: bool = False  # every device was busy past --lock-wait: no run was stored
    # what the host's disk refused (farm.results.keeper): its messages, the records kept
    # in the spill file and those written nowhere, and whether the run's end was stored
    disk_problems: list[str] = field(default_factory=list)
    spilled: list[dict[str, Any]] = field(default_factory=list)
    unsaved: list[dict[str, Any]] = field(default_factory=list)
    spill_file: str = ""
    spill_back: str = ""  # how the spill file reaches the store (`Store.spill_back`)
    end_unsaved: bool = False

    @property
    def exit_code(self) -> int:
        if self.status == "interrupted":
            return EXIT_INTERRUPTED
        if self.refused:
            return EXIT_ERROR
        return EXIT_OK if self.status == "ok" else EXIT_PARTIAL

    def failures(self) -> list[str]:
        return [f"{name}: {status}: {detail}" for name, (status, detail) in
                sorted(self.devices.items()) if status not in ("ok",)]


class Bench:
    """See module docstring."""

    def __init__(self, devices: Sequence[Device], config: BenchConfig, store: Store,
                 command: str | Sequence[str], resume_run: str | None = None) -> None:
        # checked before anything is stored: a cap above a device's level is a usage error
        self.devices = cap_all(devices, config.isa)
        self.config = config
        self.store = store
        self.keeper = Keeper(store)
        self.command = command
        self.resume_run = resume_run
        self.stop = threading.Event()
        self.runs: list[DeviceRun] = []
        self.threads: list[threading.Thread] = []
        self.run_id = ""

    def start(self, emit: Emit) -> str:
        self.store.require_sound()  # never write into a damaged store (farm results recover)
        emit({"t": time.time(), "device": None, "event": "phase", "phase": "prepare",
              "model": self.config.model, "variant": self.config.variant})
        with capture("model build") as cap:  # the front-end's and quantizer's chatter
            prepared = prepare(self.config)
        library_output(emit, None, cap)
        prior: list[dict[str, Any]] = []
        if self.resume_run:
            self.run_id = self.resume_run
            prior = self.store.records(self.run_id)
            check_resumable(self.store, self.run_id, prepared.model.sha256)
            self.store.claim_run(self.run_id)  # running again, under this process
        else:
            self.run_id = self.store.start_run(self.command, meta={
                "devices": [d.name for d in self.devices], "model": prepared.model_label,
                "model_hash": prepared.model.sha256, "routes": [str(k) for k in self.config.routes],
                "policy": self.config.record_policy(), "threads": self.config.threads,
                "config": self.config.to_meta()})
        emit({"t": time.time(), "device": None, "event": "run", "run_id": self.run_id,
              "devices": [d.name for d in self.devices],
              "routes": [str(k) for k in self.config.routes],
              "routes_default": self.config.routes_default, "model": prepared.model_label})
        for device in self.devices:
            mine = [r for r in prior if r["device"] == device.name]
            run = DeviceRun(device, prepared, self.run_id, self.keeper, emit, self.stop,
                            prior=mine)
            thread = threading.Thread(target=run.run, name=f"bench-{device.name}", daemon=True)
            self.runs.append(run)
            self.threads.append(thread)
            thread.start()
        return self.run_id

    def running(self) -> bool:
        return any(t.is_alive() for t in self.threads)

    def wait(self, timeout: float | None = None) -> bool:
        deadline = None if timeout is None else time.monotonic() + timeout
        for thread in self.threads:
            left = None if deadline is None else max(0.0, deadline - time.monotonic())
            thread.join(left)
        return not self.running()

    def interrupt(self) -> None:
        """Stop every device now: no new route starts, running agents are closed."""
        self.stop.set()
        for run in self.runs:
            run.abort()

    def _stored(self, run_id: str) -> list[dict[str, Any]]:
        """The run's records as stored; when the store cannot be read now (its server
        went away), what this bench wrote into it (the keeper holds the rest)."""
        try:
            return self.store.records(run_id)
        except StoreUnavailable as exc:
            if str(exc) not in self.keeper.problems:
                self.keeper.problems.append(str(exc))
            pending = {r["record_id"] for r in self.keeper.pending(run_id)}
            return [r for run in self.runs for r in run.written
                    if r["record_id"] not in pending]

    def finish(self) -> BenchResult:
        devices = {r.device.name: (r.status, r.detail) for r in self.runs}
        statuses = {s for s, _ in devices.values()}
        if self.stop.is_set():
            status = "interrupted"
        elif statuses <= {"ok"}:
            status = "ok"
        elif statuses <= {"failed"}:
            status = "failed"
        else:
            status = "partial"
        keeper, refused, end = self.keeper, False, None
        if status == "ok" and keeper.unsaved():
            status = "partial"  # measured, but some records are in no store or file
        if self.run_id and not self.resume_run and self.runs \
                and all(r.refused for r in self.runs) and not keeper.pending(self.run_id):
            with contextlib.suppress(StoreError):  # a full disk: it stays, found interrupted
                refused = self.store.discard_run(self.run_id)
        run_id = "" if refused else self.run_id
        if run_id:
            end = keeper.keep_finish(run_id, status)
        # a record a resume replaced is history (its id is in the new record's detail or
        # rounds), not a result or a failure of this run
        records = [r for r in self._stored(run_id) + keeper.pending(run_id)
                   if not is_superseded(r)] if run_id else []
        return BenchResult(run_id, status, devices, records, refused=refused,
                           disk_problems=list(keeper.problems), spilled=keeper.spilled(),
                           unsaved=keeper.unsaved(), spill_file=str(keeper.spill_file),
                           spill_back=self.store.spill_back,
                           end_unsaved=end == MEMORY)


def resume_plan(store: Store, run: str) -> tuple[str, BenchConfig, list[str]]:
    """(run id, its config, its devices) for `farm bench --resume RUN`."""
    run_id = store.resolve_run(run)
    info = next(r for r in store.runs() if r.run_id == run_id)
    if "config" not in info.meta:
        raise StoreError(f"run {run_id} was not started by `farm bench` (no config in its "
                         "meta); it cannot be resumed")
    if info.status == "ok":
        raise StoreError(f"run {run_id} finished ok: nothing to resume",
                         hint="start a new bench instead")
    return run_id, BenchConfig.from_meta(info.meta["config"]), list(info.meta["devices"])


def check_resumable(store: Store, run_id: str, model_hash: str) -> None:
    info = next(r for r in store.runs() if r.run_id == run_id)
    if info.meta.get("model_hash") != model_hash:
        raise StoreError(
            f"run {run_id} measured model {info.meta.get('model_hash', '?')[:12]}, the model "
            f"built now is {model_hash[:12]}: resuming would mix two models in one run",
            hint="start a new bench")


def run_bench(devices: Sequence[Device], config: BenchConfig, store: Store,
              command: str | Sequence[str], emit: Emit | None = None,
              resume_run: str | None = None) -> BenchResult:
    """Run a whole bench without a UI (tests, scripts); Ctrl-C stops it cleanly."""
    bench = Bench(devices, config, store, command, resume_run)
    sink = emit or (lambda _event: None)
    try:
        bench.start(sink)
        while not bench.wait(0.2):
            pass
    except KeyboardInterrupt:
        bench.interrupt()
        bench.wait(30.0)
    return bench.finish()
