"""The agent backend (`farm.bench.backend`): a device reached over a transport (local, ssh)
running `agents/farm_agent.py`.

open = the host-side lease on the device (`farm.bench.lease`); plan = `plan_route`; start =
wait until no other controller's agent holds the device (`farm.bench.device_lock`), deploy
the agent, runners, model, inputs and the plans' artifacts in one bundle, then start the
agent session, whose hello says which routes the device can run (an agent refusing with
"device busy" — another controller got in first — is retried the same way); both waits
share the `--lock-wait` budget with the host-side lease, and a device still held after it
is `LeaseBusy`; a repeat = one
`run_route` request (fresh runner process) with the files to verify; outputs = the
runner's FTNS file fetched back over the transport.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np

from farm.bench import device_lock
from farm.bench.backend import Emit, OutputsUnavailable, RouteError
from farm.bench.config import BenchConfig
from farm.bench.lease import DeviceLease
from farm.bench.plan import plan_route
from farm.bench.prepare import Prepared, agent_artifact, device_bundle
from farm.bench.records import RouteOutcome
from farm.deploy import deploy_device
from farm.errors import AgentError, DeployError, FarmError
from farm.inventory.device import Device
from farm.models import ftns_module
from farm.protocol.session import AgentSession, RouteFailed
from farm.protocol.untrusted import outputs_cap
from farm.routes import RouteKey, RoutePlan
from farm.transports import Transport, open_transport


class AgentBackend:
    """See module docstring; one per device and bench."""

    def __init__(self, device: Device, prepared: Prepared, run_id: str, emit: Emit,
                 stop: threading.Event | None = None) -> None:
        self.device = device
        self.stop = stop  # set on Ctrl-C: a deploy in flight keeps what it finished
        self.prepared = prepared
        self.config: BenchConfig = prepared.config
        self.run_id = run_id
        self.emit = emit
        self.session: AgentSession | None = None
        self.transport: Transport | None = None
        self.hello: dict[str, Any] | None = None
        self.plans: dict[RouteKey, RoutePlan] = {}
        self._lease: DeviceLease | None = None
        self._tmp: Path | None = None  # made by the first outputs(), removed by close()
        self._lock_deadline = 0.0  # monotonic end of the --lock-wait budget (set by open)

    def unavailable(self, route_keys: list[RouteKey]) -> dict[RouteKey, str]:
        return {}  # the agent's hello says, after start()

    def open(self) -> None:
        self.emit("phase", phase="lease")
        self._lock_deadline = time.monotonic() + self.config.lock_wait_s
        lease = DeviceLease(self.device.name, self.run_id)
        lease.acquire(self.config.lock_wait_s, stop=self.stop, on_wait=self._waiting)
        self._lease = lease

    def _waiting(self, who: str) -> None:
        left = max(0.0, self._lock_deadline - time.monotonic())
        self.emit("warning", message=f"device busy, waiting up to {left:.0f} s more "
                                     f"(--lock-wait): {who}")

    def plan(self, route_key: RouteKey) -> RoutePlan:
        self.plans[route_key] = plan_route(route_key, self.device, self.prepared)
        return self.plans[route_key]

    def start(self, plans: dict[RouteKey, RoutePlan]) -> dict[RouteKey, str]:
        bundle = device_bundle(self.device, self.prepared, plans.values())
        # one SSH connection per device: the deploy's, kept for the agent session
        self.transport = open_transport(self.device)
        self.emit("phase", phase="lease")  # the device side of it: another controller's agent
        waiter = device_lock.Waiter(self.device, self._lock_deadline, self.stop, self._waiting)
        device_lock.wait_free(self.transport, self.device, waiter)
        self.emit("phase", phase="deploy")
        result = deploy_device(self.device, bundle, transport=self.transport, stop=self.stop)
        if not result.ok:
            raise DeployError(result.error or "deploy failed")
        agent = agent_artifact(bundle)
        self.emit("phase", phase="agent")
        while True:
            self.session = AgentSession(
                self.transport, f"{self.device.workdir}/{agent.remote}",
                expected_sha256=agent.sha256,
                # what a waiting controller is shown
                holder=f"farm bench {self.run_id} (pid {os.getpid()} on {socket.gethostname()})",
                dead_after_s=self.config.link_timeout_s,
                idle_timeout_s=self.config.link_timeout_s,
                ping_interval_s=min(3.0, self.config.link_timeout_s / 5))
            try:
                self.hello = self.session.start()
                break
            except AgentError as exc:
                if device_lock.BUSY_WORDS not in exc.message:
                    raise
                waiter.pause(device_lock.holder_of_refusal(exc.message))
        missing: dict[str, str] = {}
        for route in plans:
            cap = self._capability(route)
            if not cap.get("ok"):
                missing[route] = cap.get("reason") or "not available"
        return missing

    def _capability(self, route_key: RouteKey) -> dict[str, Any]:
        routes = (self.hello or {}).get("routes") or {}
        return routes.get(route_key.route) or {"ok": False,
                                                     "reason": "agent does not know it"}

    def state(self) -> dict[str, Any] | None:
        assert self.session is not None
        return self.session.state()

    # -- one repeat ----------------------------------------------------------------------
    def request(self, route: RouteKey) -> dict[str, Any]:
        wd, p, plan = self.device.workdir, self.prepared, self.plans[route]
        return {"route": route.route, "model": f"{wd}/{plan.model_remote}",
                "inputs": f"{wd}/{p.inputs_artifact.remote}",
                "outputs": f"{wd}/out/{self.run_id}/{route}.ftns",
                "threads": self.config.threads, "options": dict(plan.options),
                "policy": self.config.policy.as_request(),
                "profile_runs": self.config.profile_runs}

    def verify(self, route: RouteKey) -> dict[RouteKey, str]:
        """The files the agent checks before the run: inputs, model and route artifacts."""
        plan, p = self.plans[route], self.prepared
        files = [p.inputs_artifact, p.model_artifact, *plan.artifacts]
        return {a.remote: a.sha256 for a in files
                if a.kind != "runner" and (a.kind != "model" or a.remote == plan.model_remote)}

    def run_repeat(self, route: RouteKey, out: RouteOutcome, index: int, total: int, *,
                   last: bool) -> None:
        assert self.session is not None
        runner = self._capability(route)["runner"]
        started = None
        base = len(out.samples_ms)
        try:
            for ev in self.session.run_route(runner, self.request(route),
                                             verify=self.verify(route),
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
        except RouteFailed as exc:
            raise RouteError(f"{exc.message} | {exc.stderr_tail.strip()[-300:]}") from exc

    def outputs(self, route: RouteKey, out: RouteOutcome) -> dict[str, np.ndarray]:
        if not out.outputs_file:
            raise OutputsUnavailable("the route reported no outputs, so its results cannot "
                                     "be trusted")
        assert self.transport is not None
        if self._tmp is None:
            self._tmp = Path(tempfile.mkdtemp(prefix=f"farm-{self.device.name}-"))
        local = self._tmp / f"{route}.ftns"
        # the device named the file (EventGuard: inside the run's output dir); the host picks
        # where it lands and how much it takes
        cap = outputs_cap(sum(a.nbytes for a in self.prepared.reference.values()))
        try:
            self.transport.get(out.outputs_file, local, max_bytes=cap)
            return dict(ftns_module().read(str(local)))
        except (FarmError, ValueError, OSError) as exc:
            # a lost link shows up again at the next request and fails the device there
            raise OutputsUnavailable(f"outputs {out.outputs_file} could not be checked: "
                                     f"{exc}") from exc

    # -- end -----------------------------------------------------------------------------
    def abort(self) -> None:
        """From another thread (Ctrl-C): end the agent session now, which makes the agent
        kill its runner and exit."""
        if self.session is not None:
            with contextlib.suppress(Exception):
                self.session.close()
        if self.transport is not None:
            with contextlib.suppress(Exception):
                self.transport.close()

    def close(self) -> None:
        self.abort()
        if self._lease is not None:
            self._lease.release()
            self._lease = None
        # the host-side copies of the routes' outputs were checked already (and are not a
        # result): each bench left ~1 MB per device in the temp dir until this went
        if self._tmp is not None:
            shutil.rmtree(self._tmp, ignore_errors=True)
            self._tmp = None
