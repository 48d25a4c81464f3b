"""One device's part of a bench, run in its own thread: lease → deploy → agent → routes.

Life cycle: `DeviceRun(device, prepared, run_id, store, emit, stop)`; `run()` never raises:
it ends with `status` one of ok | partial (a route failed, the device went on) | failed
(the device was lost or never reached; `detail` says why) | interrupted, and every finished
route's record already in the store. `abort()` (from the UI thread on Ctrl-C) closes the
agent session, which makes the agent kill its runner and exit.

Routes run in `interleaved_order` (seeded), with `pause_s` between them; device state is
read before and after each. After a route's last repeat its outputs are fetched and
compared with the reference (a mismatch makes the record `invalid` with the numbers,
whatever its timings) and, for information only, with the routes finished before it.
A runner failure fails that route only; a lost agent or link fails the device
(remaining routes get `failed` records naming the failure). A `tvm-rpc` device has no
agent: `farm.bench.rpc_run` runs its TVM routes through tracker sessions, with the same
records, output checks and failure rules.
"""

from __future__ import annotations

import contextlib
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from farm.bench.config import BenchConfig, base_route, fusion_flags, route_key_of
from farm.bench.lease import DeviceLease
from farm.bench.prepare import Prepared, agent_artifact, device_bundle
from farm.bench.quant_rule import compare_quantised
from farm.bench.records import RouteOutcome, make_record
from farm.bench.routes import RoutePlan, plan_route
from farm.bench.rpc_run import run_rpc_device
from farm.bench.stats import compare_outputs, drift_flags, interleaved_order
from farm.build.models import ftns_module
from farm.deploy import deploy_device
from farm.errors import BuildError, DeployError, FarmError
from farm.inventory.device import Device
from farm.protocol.session import AgentSession, RouteFailed
from farm.results.schema import FAILED, INVALID, OK, PARTIAL, UNAVAILABLE
from farm.results.store import ResultStore
from farm.transports import Transport, open_transport

Emit = Callable[[dict[str, Any]], None]


# record statuses that mean "this route was measured (or cannot run) on this device"
KEPT = (OK, INVALID, PARTIAL, UNAVAILABLE)


class Interrupted(Exception):
    """The bench was stopped (Ctrl-C); not a device failure."""


def state_summary(state: dict[str, Any] | None) -> dict[str, Any]:
    """The two numbers the live view shows: max CPU frequency (MHz) and max temperature."""
    state = state or {}
    freqs = [v for v in (state.get("freq_khz") or {}).values() if isinstance(v, int | float)]
    temps = [v for v in (state.get("thermal_c") or {}).values() if isinstance(v, int | float)]
    return {"freq_mhz": max(freqs) / 1000 if freqs else None,
            "temp_c": max(temps) if temps else None}


class DeviceRun:
    """See module docstring."""

    def __init__(self, device: Device, prepared: Prepared, run_id: str, store: ResultStore,
                 emit: Emit, stop: threading.Event,
                 prior: list[dict[str, Any]] | None = None) -> None:
        self.device = device
        self.prepared = prepared
        self.config: BenchConfig = prepared.config
        self.run_id = run_id
        self.store = store
        self._emit = emit
        self.stop = stop
        self.session: AgentSession | None = None
        self.transport: Transport | None = None
        self.hello: dict[str, Any] | None = None
        self.status = "pending"
        self.detail = ""
        self.written: list[dict[str, Any]] = []  # stored records of this device
        self._outputs: dict[str, dict[str, np.ndarray]] = {}
        self._tmp = Path(tempfile.mkdtemp(prefix=f"farm-{device.name}-"))
        # resume: what an earlier attempt of this run already kept for this device
        self.prior = prior or []
        self.kept = {route_key_of(r) for r in self.prior if r["status"] in KEPT}
        self.plans: dict[str, RoutePlan] = {}

    def emit(self, event: str, **fields: Any) -> None:
        self._emit({"t": time.time(), "device": self.device.name, "event": event, **fields})

    # -- the whole device ----------------------------------------------------------------
    def run(self) -> None:
        done: set[str] = set(self.kept)
        current: list[str | None] = [None]
        try:
            if self.device.transport == "tvm-rpc":
                # no shell and no agent there: the TVM routes run through tracker sessions
                # (the tracker queues clients, so no lease is taken)
                run_rpc_device(self, done, current)
            if not set(self.config.routes) <= done:
                lease = DeviceLease(self.device.name, self.run_id)
                self.emit("phase", phase="lease")
                with lease.hold(self.config.lock_wait_s):
                    self.check_stop()
                    self._run_leased(done, current)
            self.status = PARTIAL if any(r["status"] == FAILED for r in self.written) else OK
            if self.status == OK:
                self._restore_partial()
        except Interrupted:
            self.status, self.detail = "interrupted", "stopped by Ctrl-C"
        except FarmError as exc:
            if self.stop.is_set():
                self.status, self.detail = "interrupted", "stopped by Ctrl-C"
            else:
                self._device_failed(exc, done, current[0])
        except Exception as exc:  # a bug must fail this device, not the whole bench
            self._device_failed(exc, done, current[0])
        finally:
            self.close()
            self.emit("device_done", status=self.status, detail=self.detail)

    def check_stop(self) -> None:
        if self.stop.is_set():
            raise Interrupted

    def _run_leased(self, done: set[str], current: list[str | None]) -> None:
        self.emit("phase", phase="build")
        for route in self.config.routes:
            if route in done:
                continue
            try:
                self.plans[route] = plan_route(route, self.device, self.prepared)
                left = self.plans[route].build_flags.get("symbolic_dims")
                if left:  # never silently slow: TVM's fallback schedules on unknown dims
                    self.emit("warning", route=route, message=(
                        f"{route}: {len(left)} tensor(s) keep a symbolic dim (e.g. {left[0]});"
                        " TVM uses slow generic schedules: bind them with --shape"))
            except BuildError as exc:
                self.store_route(route, UNAVAILABLE, f"cannot build the {route} route for "
                                 f"{self.device.arch}: {exc}")
                done.add(route)
            self.check_stop()
        bundle = device_bundle(self.device, self.prepared)
        have = {a.remote for a in bundle}
        for plan in self.plans.values():
            bundle += [a for a in plan.artifacts if a.remote not in have]
            have.update(a.remote for a in plan.artifacts)
        self.emit("phase", phase="deploy")
        result = deploy_device(self.device, bundle)
        if not result.ok:
            raise DeployError(result.error or "deploy failed")
        self.check_stop()
        agent = agent_artifact(bundle)
        self.emit("phase", phase="agent")
        self.transport = open_transport(self.device)
        self.session = AgentSession(
            self.transport, f"{self.device.workdir}/{agent.remote}",
            expected_sha256=agent.sha256, holder=f"farm bench {self.run_id}",
            dead_after_s=self.config.link_timeout_s, idle_timeout_s=self.config.link_timeout_s,
            ping_interval_s=min(3.0, self.config.link_timeout_s / 5))
        self.hello = self.session.start()
        routes = self.hello["routes"]
        available = []
        for route in self.config.routes:
            if route in done:
                continue
            cap = routes.get(base_route(route)) or {"ok": False,
                                                    "reason": "agent does not know it"}
            if cap.get("ok"):
                available.append(route)
            else:
                self.store_route(route, UNAVAILABLE, cap.get("reason") or "not available")
                done.add(route)
        order = interleaved_order(available, self.config.repeats, self.config.seed)
        left = {r: self.config.repeats for r in available}
        outcomes = {r: RouteOutcome(r) for r in available}
        self.emit("phase", phase="running", total=len(order))
        for index, route in enumerate(order):
            if route in done:
                continue
            self.check_stop()
            if index and self.config.pause_s and self.stop.wait(self.config.pause_s):
                raise Interrupted
            current[0] = route
            try:
                self._run_route(route, routes[base_route(route)]["runner"], outcomes[route], index,
                                len(order))
            except RouteFailed as exc:
                if self.stop.is_set():  # cancelled by Ctrl-C, not a failure of the route
                    raise Interrupted from None
                self.store_route(route, FAILED,
                                 f"{exc.message} | {exc.stderr_tail.strip()[-300:]}",
                                 outcomes[route])
                done.add(route)
                current[0] = None
                continue
            left[route] -= 1
            if not left[route]:
                self._finish_route(route, outcomes[route])
                done.add(route)
            current[0] = None

    # -- one route -----------------------------------------------------------------------
    def request(self, route: str) -> dict[str, Any]:
        wd, p, plan = self.device.workdir, self.prepared, self.plans[route]
        return {"route": base_route(route), "model": f"{wd}/{plan.model_remote}",
                "inputs": f"{wd}/{p.inputs_artifact.remote}",
                "outputs": f"{wd}/out/{self.run_id}/{route}.ftns",
                "threads": self.config.threads, "options": dict(plan.options),
                "policy": self.config.policy.as_request(),
                "profile_runs": self.config.profile_runs}

    def verify(self, route: str) -> dict[str, str]:
        """The files the agent checks before the run: inputs, model and route artifacts."""
        plan, p = self.plans[route], self.prepared
        files = [p.inputs_artifact, p.model_artifact, *plan.artifacts]
        return {a.remote: a.sha256 for a in files
                if a.kind != "runner" and (a.kind != "model" or a.remote == plan.model_remote)}

    def _run_route(self, route: str, runner: str, out: RouteOutcome, index: int,
                   total: int) -> None:
        assert self.session is not None
        before = self.session.state()
        out.state_before = out.state_before or before
        self.emit("route_start", route=route, index=index, total=total,
                  **state_summary(before))
        started = None
        base = len(out.samples_ms)
        for ev in self.session.run_route(runner, self.request(route), verify=self.verify(route),
                                         timeout_s=self.config.timeout_s()):
            out.absorb(ev)
            if ev["ev"] == "warmup":
                started = time.monotonic()  # the measuring phase starts now
            if ev["ev"] == "samples":
                started = started or time.monotonic()
                mine = out.samples_ms[base:]
                median, p90 = np.percentile(mine, [50, 90]) if mine else (None, None)
                self.emit("samples", route=route, n=len(mine), median_ms=float(median),
                          p90_ms=float(p90), progress=self.config.policy.progress(
                              len(mine), time.monotonic() - started))
            elif ev["ev"] in ("loaded", "first", "warmup"):
                self.emit("stage", route=route, stage=ev["ev"])
        out.state_after = self.session.state()
        self.emit("state", **state_summary(out.state_after))

    def _finish_route(self, route: str, out: RouteOutcome) -> None:
        accuracy, problem = self._check_outputs(route, out)
        status = OK if problem is None else INVALID
        self.store_route(route, status, problem, out, accuracy)

    def _check_outputs(self, route: str,
                       out: RouteOutcome) -> tuple[dict[str, Any] | None, str | None]:
        if not out.outputs_file:
            return None, "the route reported no outputs, so its results cannot be trusted"
        assert self.transport is not None
        local = self._tmp / f"{route}.ftns"
        try:
            self.transport.get(out.outputs_file, local)
            outputs = dict(ftns_module().read(str(local)))
        except (FarmError, ValueError, OSError) as exc:
            # a lost link shows up again at the next request and fails the device there
            return None, f"outputs {out.outputs_file} could not be checked: {exc}"
        return self.judge_outputs(route, outputs)

    def judge_outputs(self, route: str, outputs: dict[str, np.ndarray]
                      ) -> tuple[dict[str, Any] | None, str | None]:
        """(accuracy, problem or None) of a route's outputs against the fp32 reference and
        the routes this device finished before; every path (agent, RPC) judges here."""
        p = self.prepared
        # validity comes from the reference alone, so it never depends on the order routes
        # ran in; peers are compared for information (`cross_routes`). A quantized model is
        # held to a whole-tensor bound against fp32, or to the per-token cosine rule against
        # ORT's run of the same pre-quantised file (farm/bench/quant_rule.py)
        if p.extra.get("reference_kind") == "same-file" and self.config.variant != "fp32":
            ref = compare_quantised(outputs, p.reference, self.config.variant,
                                    reference_label=p.reference_label)
        else:
            ref = compare_outputs(outputs, p.reference, self.config.variant,
                                  reference=p.reference_label, against_fp32=True)
        accuracy: dict[str, Any] = {**ref.as_json(), "cross_routes": []}
        problems = [] if ref.ok else [f"outputs differ from {p.reference_label}: {ref.detail}"
                                      f" (max abs diff {ref.max_abs_diff})"]
        for peer, peer_outputs in self._outputs.items():
            cross = compare_outputs(outputs, peer_outputs, self.config.variant,
                                    reference=f"route {peer} on {self.device.name}")
            accuracy["cross_routes"].append({"route": peer, **cross.as_json()})
        self._outputs[route] = outputs
        return accuracy, "; ".join(problems) or None

    def store_route(self, route: str, status: str, detail: str | None,
                    out: RouteOutcome | None = None,
                    accuracy: dict[str, Any] | None = None) -> None:
        drift = None
        if out is not None and (out.state_before or out.state_after):
            drift = drift_flags(out.state_before, out.state_after)
        flags = {**fusion_flags(route),
                 **(self.plans[route].build_flags if route in self.plans else {})}
        record = make_record(
            run_id=self.run_id, device=self.device, hello=self.hello, route=base_route(route),
            config=self.config, model_label=self.prepared.model_label,
            model_hash=self.prepared.model.sha256, status=status, detail=detail, outcome=out,
            accuracy=accuracy, drift=drift,
            build_flags=flags, sizes=self._sizes(route, out))
        stored = self.store.add(record)
        self.written.append(stored)
        old = [r for r in self.prior if route_key_of(r) == route and r["status"] == FAILED]
        if old:  # resume: the earlier failure of this route is history now
            self.store.set_status([r["record_id"] for r in old], FAILED,
                                  f"superseded by record {stored['record_id']} (--resume): "
                                  f"{old[0]['status_detail']}")
        self.emit("route_done", route=route, status=status, detail=detail,
                  n=stored["n"], median_ms=stored["median_ms"], p90_ms=stored["p90_ms"],
                  drift=list(drift or []))

    def _sizes(self, route: str, out: RouteOutcome | None) -> dict[str, Any]:
        """Bytes the route needs on the device: runtime + compiled code + model weights
        (the host knows its build outputs; a runner may report its runtime as measured on
        the device, which then wins)."""
        plan = self.plans.get(route)
        sizes = dict(plan.sizes) if plan and plan.sizes else {}
        if out is not None and isinstance(out.info.get("runtime_bytes"), int):
            sizes["runtime"] = out.info["runtime_bytes"]
        sizes.setdefault("weights", self.prepared.model_artifact.size)
        return sizes

    # -- failure and end -----------------------------------------------------------------
    def _device_failed(self, exc: BaseException, done: set[str], current: str | None) -> None:
        self.status = "failed"
        # the whole message, hint included: the next step must reach the summary
        self.detail = f"{type(exc).__name__}: {exc}" if not isinstance(exc, FarmError) \
            else " — ".join(line.strip() for line in str(exc).splitlines() if line.strip())
        for route in self.config.routes:
            if route in done:
                continue
            why = (f"device lost during this route: {self.detail}" if route == current
                   else f"not run: device failed before this route: {self.detail}")
            with contextlib.suppress(FarmError):
                self.store_route(route, FAILED, why)
        # measured routes stay, re-marked: the device did not finish its share of the run
        # (an invalid record keeps its status: wrong outputs matter more)
        finished = [r["record_id"] for r in self.written if r["status"] == OK]
        if finished:
            with contextlib.suppress(FarmError):
                self.store.set_status(finished, PARTIAL, "finished before the device failed: "
                                      f"{self.detail}")

    def _restore_partial(self) -> None:
        """Resume completed this device's share: its kept `partial` records are whole."""
        ids = [r["record_id"] for r in self.prior if r["status"] == PARTIAL]
        if ids:
            self.store.set_status(ids, OK, None)

    def close(self) -> None:
        if self.session is not None:
            with contextlib.suppress(Exception):
                self.session.close()
        if self.transport is not None:
            with contextlib.suppress(Exception):
                self.transport.close()

    def abort(self) -> None:
        """Called from another thread (Ctrl-C): end the agent session now."""
        self.close()
