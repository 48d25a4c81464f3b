"""The TVM-RPC backend (`farm.bench.backend`): a `tvm-rpc` device's TVM route keys
through tracker sessions.

Such a device (typically a phone running TVM's RPC app) runs only TVM's RPC server: no
shell, no agent. So `tvm` and `tvm-unfused` run through `farm.rpc.tracker_session`; every
other route key is `unavailable`, naming the transport. The scheduler
(`farm.bench.device_run`) drives it like the agent backend: same order, records, output
checks and failure rules. open = the tracker key is registered (no lease: the tracker
queues clients).

Per route key, the library comes from `build_tvm` for the device's target (cached by
content). Each repeat (`interleaved_order`, `pause_s` between) is one tracker session, so
other clients of the device get it between repeats. In the session the library is uploaded
and loaded once, `main` runs once for the outputs, then:

1. probe (only in the key's first repeat): `time_evaluator(number=1, repeat=1)` times one
   inference on the device, which sizes step 2.
2. measure: `time_evaluator(number=1, repeat=W + N)` times W + N repeats ON the device.
   The first W repeats are the warm-up (`warmup_runs`, `warmup_min_s`) and are dropped;
   the N after are the samples (`min_runs`, `min_time_s`, capped by `max_time_s`).
   `number` is 1, so a sample is one inference as on every other route; build_flags
   record it (`{"rpc": true, "number": 1, ...}`).
3. profile (only in the key's last repeat, when `profile_runs` > 0, after its samples):
   each kernel timed alone on the device (`farm.bench.rpc_profile`, which says why not
   in-graph), stored in the record's `ops` with a `method` saying how.

Not available over RPC, and left empty rather than guessed: device state (so no drift),
peak memory, the first inference's time. `load_ms` is the host's clock around
load_module + input copies, RPC round trips included. A dead tracker or a key no server
registers raises TransportError, which fails this device alone; an error inside a session
(TVM error on the device, session timeout) fails that route only, except in the profile,
whose failure is recorded in `ops.error` while the samples stand.
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from farm.bench.backend import Emit, RouteError, last_line
from farm.bench.config import BenchConfig
from farm.bench.plan import plan_rpc, rpc_routes
from farm.bench.prepare import Prepared
from farm.bench.records import RouteOutcome
from farm.errors import FarmError, TransportError
from farm.inventory.device import Device
from farm.models import ftns_module
from farm.routes import RouteKey, RoutePlan

if TYPE_CHECKING:
    from farm.rpc.session import Session

NUMBER = 1                     # inferences per time_evaluator repeat (= per sample)
MAX_REPEATS = 100_000          # a sanity cap on one session's repeats
REGISTER_GRACE_S = 10.0        # a server re-registers with the tracker after each session


class RpcBackend:
    """See module docstring; one per device and bench."""

    hello = None  # nothing to say about itself: no agent

    def __init__(self, device: Device, prepared: Prepared, emit: Emit,
                 check_stop: Callable[[], None]) -> None:
        self.device = device
        self.prepared = prepared
        self.config: BenchConfig = prepared.config
        self.emit = emit
        self.check_stop = check_stop
        self.plans: dict[RouteKey, RoutePlan] = {}
        self._inputs: list[np.ndarray] = []
        self._output_names: list[str] = []
        self._estimates: dict[RouteKey, float] = {}
        self._outputs: dict[RouteKey, list[Any]] = {}

    def unavailable(self, route_keys: list[RouteKey]) -> dict[RouteKey, str]:
        d, rpc = self.device, rpc_routes()
        return {r: f"not available on transport {d.transport}: {d.name} runs only TVM's "
                   f"RPC server (no shell, no agent), so only the routes with an RPC path "
                   f"({', '.join(rpc)}) run there, through tracker sessions"
                for r in route_keys if r.route not in rpc}

    def open(self) -> None:
        if not self.device.key:
            raise TransportError(f"device {self.device.name!r} (transport tvm-rpc) has no "
                                 "tracker key", hint=f"add `key:` to its entry in "
                                 f"{self.device.source}")
        _wait_registered(self)  # before any build: a dead tracker fails the device in seconds

    def plan(self, route_key: RouteKey) -> RoutePlan:
        plan = plan_rpc(route_key, self.device, self.prepared)
        plan.build_flags.update({"rpc": True, "number": NUMBER, "tracker_key": self.device.key,
                                 "timer": "time_evaluator on the device",
                                 "device_state": "no device state over TVM RPC"})
        self.plans[route_key] = plan
        return plan

    def start(self, plans: dict[RouteKey, RoutePlan]) -> dict[RouteKey, str]:
        self._inputs, self._output_names = _graph_io(self)
        return {}

    def state(self) -> dict[str, Any] | None:
        return None  # no device state over TVM RPC

    def run_repeat(self, route: RouteKey, out: RouteOutcome, index: int, total: int, *,
                   last: bool) -> None:
        _wait_registered(self)
        try:
            self._outputs[route] = _measure(
                self, route, self._inputs, out, self._estimates,
                profile=last and self.config.profile_runs > 0)
        except FarmError:
            raise  # no session (tracker or server gone): the device is lost
        except Exception as exc:  # TVM raises its own errors from the device
            self.check_stop()
            raise RouteError(f"TVM RPC session on key {self.device.key!r} failed: "
                             f"{type(exc).__name__}: {last_line(exc)} (a session process "
                             "that died on the device shows as kShutdown: see the RPC "
                             "server's log)") from exc

    def outputs(self, route: RouteKey, out: RouteOutcome) -> dict[str, np.ndarray]:
        return dict(zip(self._output_names, self._outputs[route], strict=False))

    def abort(self) -> None:
        pass  # a tracker session ends with its `with` block; Ctrl-C stops between repeats

    def close(self) -> None:
        pass


def _graph_io(run: RpcBackend) -> tuple[list[np.ndarray], list[str]]:
    """The bench's input tensors in graph input order, and the graph's output names (the
    VM takes positional arguments and returns outputs in graph order)."""
    import onnx

    graph = onnx.load(str(run.prepared.model.path), load_external_data=False).graph
    initializers = {t.name for t in graph.initializer}
    feeds = dict(ftns_module().read(run.prepared.inputs_artifact.local))
    inputs = [np.asarray(feeds[i.name]) for i in graph.input if i.name not in initializers]
    return inputs, [o.name for o in graph.output]


def _wait_registered(run: RpcBackend) -> None:
    """Fail fast when no server holds the key: the tracker would queue the request forever."""
    from farm.rpc import tracker_status

    device = run.device
    deadline = time.monotonic() + REGISTER_GRACE_S
    while True:
        status = tracker_status(device.tracker_host, device.tracker_port)
        if any(s["key"] == device.key for s in status["servers"]):
            return
        if time.monotonic() > deadline:
            raise TransportError(
                f"no TVM RPC server is registered under key {device.key!r} at the tracker "
                f"{device.tracker_host}:{device.tracker_port} (device {device.name})",
                hint="start the RPC app on the device; `farm tracker status` lists the keys")
        run.check_stop()
        time.sleep(0.5)


def _repeats(run: RpcBackend, estimate_ms: float) -> tuple[int, int]:
    """(warm-up repeats, sample repeats) the policy asks for at `estimate_ms` a repeat."""
    p = run.config.policy
    per = max(estimate_ms, 1e-3)
    warm = max(p.warmup_runs, math.ceil(p.warmup_min_s * 1000 / per))
    n = max(p.min_runs, math.ceil(p.min_time_s * 1000 / per))
    n = max(1, min(n, math.floor(p.max_time_s * 1000 / per), MAX_REPEATS))
    return min(warm, MAX_REPEATS), n


def _measure(run: RpcBackend, route: RouteKey, inputs: list[np.ndarray], out: RouteOutcome,
             estimates: dict[RouteKey, float], *, profile: bool) -> list[Any]:
    """One repeat of `route` in one tracker session; samples appended to `out`, and with
    `profile` the per-op profile (after the samples) put in `out.ops`."""
    from farm.rpc import tracker_session

    device, plan = run.device, run.plans[route]
    with tracker_session(device.key or "", host=device.tracker_host, port=device.tracker_port,
                         session_timeout=run.config.timeout_s()) as session:
        loaded = session.load_vm(Path(plan.model_remote), inputs)
        outputs = loaded.outputs()
        probed = route not in estimates
        if probed:
            estimates[route] = loaded.time(number=NUMBER, repeat=1)[0]
            run.emit("stage", route=route, stage="loaded")
        warm, n = _repeats(run, estimates[route])
        times_ms = loaded.time(number=NUMBER, repeat=warm + n)
        profile_s = None
        if profile:
            started = time.monotonic()
            out.ops = _profile(run, route, session)
            profile_s = time.monotonic() - started
    out.samples_ms.extend(times_ms[warm:])
    # the outputs run, time_evaluator's untimed call, W; the probe's two calls before them
    out.warmup_runs += 2 + warm + (2 if probed else 0)
    if out.load_ms is None:
        out.load_ms = loaded.phases.get("load_s", 0.0) * 1000
    sessions = out.info.setdefault("rpc_sessions", [])
    sessions.append({"queued_s": round(session.queued_s, 3), "warmup_repeats": warm,
                     "probe": probed,
                     **{k: round(v, 3) for k, v in loaded.phases.items()},
                     **({"profile_s": round(profile_s, 3)} if profile_s is not None else {})})
    median, p90 = np.percentile(out.samples_ms, [50, 90])
    run.emit("samples", route=route, n=len(out.samples_ms), median_ms=float(median),
             p90_ms=float(p90), progress=1.0)
    return outputs


def _profile(run: RpcBackend, route: RouteKey, session: Session) -> dict[str, Any]:
    """The route's per-op profile from its kernels timed one by one on the device
    (`farm.bench.rpc_profile`); a failure is recorded in place of the times."""
    from farm.bench import rpc_profile

    options = run.plans[route].options
    meta = json.loads(Path(options["meta"]).read_text())
    kernels, unprofiled = rpc_profile.timed_kernels(meta)
    try:
        times = session.time_kernels(Path(options["kernels"]),
                                     kernels, repeat=run.config.profile_runs,
                                     min_repeat_ms=rpc_profile.MIN_REPEAT_MS)
    except Exception as exc:  # TVM error on the device: the timed samples still stand
        return {"categories": {}, "method": rpc_profile.METHOD, "error":
                f"per-kernel timing failed: {type(exc).__name__}: {last_line(exc)}"}
    return rpc_profile.ops_record(meta, times, unprofiled)
