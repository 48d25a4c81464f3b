"""The bench scheduler: one device's part of a bench, run in its own thread.

Life cycle: `DeviceRun(device, prepared, run_id, keeper, emit, stop)`; `run()` never
raises: it ends with `status` one of ok | partial (a route failed, the device went on) |
failed (the device was lost or never reached; `detail` says why) | interrupted, and every
finished route's record already in the store (or kept by `farm.results.keeper` when the
host's disk refused it). A device another bench holds past `--lock-wait` (`LeaseBusy`)
is `refused`: failed, with no record at all (a refusal stores nothing). `abort()` (from
the UI thread on Ctrl-C) ends the backend's running repeat (the agent kills its runner and
exits).

The scheduler owns the order of things; a backend (`farm.bench.backend`: the agent over a
transport, or TVM RPC for a `tvm-rpc` device) does the device's side, a `Recorder`
(`farm.bench.recorder`) the records. Steps: keys the backend can never run are recorded
`unavailable`; the backend is opened (lease / tracker key); each key left is planned (a
BuildError makes it `unavailable`); the backend starts (deploy + agent) and names keys the
device cannot run; then the repeats run in `interleaved_order` (seeded), with `pause_s`
between them, device state read before and after each. After a key's last repeat its
outputs are judged against the reference (a mismatch makes the record `invalid`, whatever
its timings) and, for information only, against the keys finished before it. A RouteError
fails that key only; a lost device (FarmError) fails the device: remaining keys get
`failed` records naming it.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

from farm.bench.agent_backend import AgentBackend
from farm.bench.backend import Backend, Emit, Interrupted, OutputsUnavailable, RouteError
from farm.bench.config import BenchConfig
from farm.bench.lease import LeaseBusy
from farm.bench.prepare import Prepared
from farm.bench.recorder import Recorder
from farm.bench.records import RouteOutcome
from farm.bench.rpc_backend import RpcBackend
from farm.errors import BuildError, FarmError
from farm.inventory.device import Device
from farm.libout import Capture, capture
from farm.results.emulation import record_emulated
from farm.results.keeper import Keeper
from farm.results.noise import round_facts
from farm.results.schema import FAILED, INVALID, OK, PARTIAL, UNAVAILABLE, unfinished_rounds
from farm.results.stats import interleaved_order
from farm.routes import RouteKey, RoutePlan, key_of_record

__all__ = ["KEPT", "DeviceRun", "Interrupted", "library_output", "state_summary"]

# record statuses that mean "this route was measured (or cannot run) on this device"
KEPT = (OK, INVALID, PARTIAL, UNAVAILABLE)


def state_summary(state: dict[str, Any] | None) -> dict[str, Any]:
    """The two numbers the live view shows: max CPU frequency (MHz) and max temperature."""
    state = state or {}
    freqs = [v for v in (state.get("freq_khz") or {}).values() if isinstance(v, int | float)]
    temps = [v for v in (state.get("thermal_c") or {}).values() if isinstance(v, int | float)]
    return {"freq_mhz": max(freqs) / 1000 if freqs else None,
            "temp_c": max(temps) if temps else None}


def remaining_order(order: list[RouteKey], left: dict[RouteKey, int]) -> list[RouteKey]:
    """The seeded order less the rounds a resumed key already ran (its first ones), so a
    resume runs each key's missing rounds in the places the whole run would have."""
    skip = {r: order.count(r) - n for r, n in left.items()}
    kept = []
    for route in order:
        if skip.get(route, 0) > 0:
            skip[route] -= 1
        else:
            kept.append(route)
    return kept


def _one_line(exc: FarmError) -> str:
    """The whole message, hint included: the next step must reach the summary."""
    return " — ".join(line.strip() for line in str(exc).splitlines() if line.strip())


def library_output(emit: Callable[[dict[str, Any]], None], device: str | None, cap: Capture
                   ) -> None:
    """One event naming a step's captured library output (`farm.libout`), when it had any:
    the step lines and the live view show its one-line summary."""
    summary = cap.summary()
    if summary is not None:
        emit({"t": time.time(), "device": device, "event": "library_output",
              "step": cap.step, "lines": len(cap.lines), "path": str(cap.path),
              "summary": summary})


class DeviceRun:
    """See module docstring."""

    def __init__(self, device: Device, prepared: Prepared, run_id: str, keeper: Keeper,
                 emit: Emit, stop: threading.Event,
                 prior: list[dict[str, Any]] | None = None) -> None:
        self.device = device
        self._emit = emit
        self.stop = stop
        self.status = "pending"
        self.detail = ""
        self.refused = False  # never got the device (LeaseBusy): nothing stored for it
        self.recorder = Recorder(device, prepared, run_id, keeper, self.emit, prior)
        self.backend: Backend = (
            # no shell and no agent there: the TVM routes run through tracker sessions
            RpcBackend(device, prepared, self.emit, self.check_stop)
            if device.kind.tracker
            else AgentBackend(device, prepared, run_id, self.emit, self.stop))
        # resume: route keys an earlier attempt of this run already kept for this device,
        # and those whose first rounds it kept in a partial record (only the rest runs)
        prior = self.recorder.prior
        self.done: set[RouteKey] = {key_of_record(r) for r in prior
                                    if r["status"] in KEPT and not unfinished_rounds(r)}
        self.outcomes: dict[RouteKey, RouteOutcome] = {
            key_of_record(r): RouteOutcome.resumed(key_of_record(r), r)
            for r in prior if unfinished_rounds(r)}
        self.current: RouteKey | None = None  # the key whose repeat is running
        self.plans: dict[RouteKey, RoutePlan] = {}

    @property
    def config(self) -> BenchConfig:
        return self.backend.config

    @property
    def written(self) -> list[dict[str, Any]]:
        return self.recorder.written

    @property
    def hello(self) -> dict[str, Any] | None:
        """What the device said about itself (None before the agent started)."""
        return self.backend.hello

    def emit(self, event: str, **fields: Any) -> None:
        # events are JSON: a route key travels as its text (`tvm-unfused`)
        fields = {k: str(v) if isinstance(v, RouteKey) else v for k, v in fields.items()}
        self._emit({"t": time.time(), "device": self.device.name, "event": event, **fields})

    def check_stop(self) -> None:
        if self.stop.is_set():
            raise Interrupted

    # -- the whole device ----------------------------------------------------------------
    def run(self) -> None:
        try:
            self._schedule()
            self.status = PARTIAL if any(r["status"] == FAILED for r in self.written) else OK
            if self.status == OK:
                self.recorder.restore_partial()
        except Interrupted:
            self.status, self.detail = "interrupted", "stopped by Ctrl-C"
        except LeaseBusy as exc:
            self.refused = True
            if self.stop.is_set():
                self.status, self.detail = "interrupted", "stopped by Ctrl-C"
            else:
                self.status, self.detail = "failed", _one_line(exc)
        except FarmError as exc:
            if self.stop.is_set():
                self.status, self.detail = "interrupted", "stopped by Ctrl-C"
            else:
                self._device_failed(exc)
        except Exception as exc:  # a bug must fail this device, not the whole bench
            self._device_failed(exc)
        finally:
            self.close()
            self.emit("device_done", status=self.status, detail=self.detail)

    def _unavailable(self, reasons: dict[RouteKey, str]) -> None:
        for route, why in reasons.items():
            self._store(route, UNAVAILABLE, why)
            self.done.add(route)

    def _left(self) -> list[RouteKey]:
        return [r for r in self.config.routes if r not in self.done]

    def _schedule(self) -> None:
        backend = self.backend
        self._unavailable(backend.unavailable(self._left()))
        if not self._left():
            return
        backend.open()
        self.check_stop()
        self.emit("phase", phase="build")
        # what TVM, onnxscript and numpy print while building goes to a log (farm.libout)
        with capture("build", where=self.device.name) as cap:
            for route in self._left():
                self._plan(route)
                self.check_stop()
        library_output(self._emit, self.device.name, cap)
        missing = backend.start({r: self.plans[r] for r in self._left()})
        self.recorder.hello = backend.hello
        self.check_stop()
        self._unavailable({r: missing[r] for r in self._left() if r in missing})
        available = self._left()
        outcomes = self.outcomes
        for route in available:
            outcomes.setdefault(route, RouteOutcome(route))
        left = {r: self.config.repeats - len(outcomes[r].round_sizes) for r in available}
        order = remaining_order(interleaved_order(available, self.config.repeats,
                                                  self.config.seed), left)
        emulated = record_emulated(self.device.emulated, (backend.hello or {}).get("cpu"))
        self.emit("phase", phase="running", total=len(order), emulated=bool(emulated))
        for index, route in enumerate(order):
            if route in self.done:
                continue
            self.check_stop()
            if index and self.config.pause_s and self.stop.wait(self.config.pause_s):
                raise Interrupted
            self.current = route
            out = outcomes[route]
            try:
                facts = self._repeat(route, out, index, len(order), last=left[route] == 1)
            except RouteError as exc:
                if self.stop.is_set():  # cancelled by Ctrl-C, not a failure of the route
                    raise Interrupted from None
                self._store(route, FAILED, str(exc), out, stopped=str(exc))
                self.done.add(route)
                self.current = None
                continue
            out.end_round(facts)
            left[route] -= 1
            if not left[route]:
                self._finish_route(route, out)
                self.done.add(route)
            self.current = None

    def _plan(self, route: RouteKey) -> None:
        started = time.monotonic()
        # what is building, for the live view's elapsed time and a log's durations
        self.emit("build", route=route, state="start")
        try:
            self.plans[route] = self.backend.plan(route)
            self.emit("build", route=route, state="done",
                      seconds=round(time.monotonic() - started, 3))
            left = self.plans[route].build_flags.get("symbolic_dims")
            if left:  # never silently slow: TVM's fallback schedules on unknown dims
                self.emit("warning", route=route, message=(
                    f"{route}: {len(left)} tensor(s) keep a symbolic dim (e.g. {left[0]});"
                    " TVM uses slow generic schedules: bind them with --shape"))
        except BuildError as exc:
            self.emit("build", route=route, state="failed",
                      seconds=round(time.monotonic() - started, 3))
            self._unavailable({route: f"cannot build the {route} route for "
                                      f"{self.device.arch}: {exc}"})

    def _repeat(self, route: RouteKey, out: RouteOutcome, index: int, total: int, *,
                last: bool) -> dict[str, Any]:
        """One round of `route`; returns what the device state says about it (steal and
        load, `farm.results.noise.round_facts`)."""
        before = self.backend.state()
        out.state_before = out.state_before or before
        self.emit("route_start", route=route, index=index, total=total,
                  **state_summary(before))
        self.backend.run_repeat(route, out, index, total, last=last)
        after = self.backend.state()
        facts = round_facts(before, after)
        if after is not None:
            out.state_after = after
            self.emit("state", **state_summary(after), steal_pct=facts["steal_pct"],
                      load1=facts["load1"])
        return facts

    def _finish_route(self, route: RouteKey, out: RouteOutcome) -> None:
        try:
            accuracy, problem = self.recorder.judge_outputs(
                route, self.backend.outputs(route, out))
        except OutputsUnavailable as exc:
            accuracy, problem = None, str(exc)
        self._store(route, OK if problem is None else INVALID, problem, out, accuracy)

    def _store(self, route: RouteKey, status: str, detail: str | None,
               out: RouteOutcome | None = None, accuracy: dict[str, Any] | None = None,
               stopped: str | None = None) -> None:
        self.recorder.store_route(route, status, detail, out, accuracy, self.plans.get(route),
                                  stopped)

    # -- failure and end -----------------------------------------------------------------
    def _device_failed(self, exc: BaseException) -> None:
        self.status = "failed"
        self.detail = f"{type(exc).__name__}: {exc}" if not isinstance(exc, FarmError) \
            else _one_line(exc)
        self.recorder.device_failed(self.detail, self._left(), self.current, self.outcomes,
                                    self.plans)

    def close(self) -> None:
        self.backend.close()

    def abort(self) -> None:
        """Called from another thread (Ctrl-C): end the backend's running repeat now."""
        self.backend.abort()
