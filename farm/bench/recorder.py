"""What a device's finished (or failed) route becomes in the store: output judgement,
sizes, drift, the record itself, and the bookkeeping of a resumed run.

Life cycle: one `Recorder` per device and bench, fed by the scheduler
(`farm.bench.device_run`); every stored record is also announced through `emit`
(`route_done`). It never talks to a device: the backend fetched the outputs already.
It writes through the bench's `Keeper` (`farm.results.keeper`): a record the host's disk
refuses goes to the spill file, or stays in memory for the CLI to print, and a `warning`
event says where it went.
"""

from __future__ import annotations

import contextlib
from typing import Any

import numpy as np

from farm import followup
from farm.bench.accuracy import compare_outputs
from farm.bench.backend import Emit
from farm.bench.config import BenchConfig
from farm.bench.int8_reference import deviation
from farm.bench.plan import isa_flags
from farm.bench.prepare import Prepared
from farm.bench.quant_rule import judge_against_reference
from farm.bench.records import RouteOutcome, make_record
from farm.errors import FarmError
from farm.inventory.device import Device
from farm.results.keeper import MEMORY, SPILL, Keeper
from farm.results.noise import noise_warnings
from farm.results.schema import (
    FAILED,
    OK,
    PARTIAL,
    SUPERSEDED,
    UNAVAILABLE,
    is_superseded,
    unfinished_rounds,
)
from farm.results.stats import drift_flags
from farm.routes import ROUTES, RouteKey, RoutePlan, key_of_record


class Recorder:
    """See module docstring."""

    def __init__(self, device: Device, prepared: Prepared, run_id: str, keeper: Keeper,
                 emit: Emit, prior: list[dict[str, Any]] | None = None) -> None:
        self.device = device
        self.prepared = prepared
        self.config: BenchConfig = prepared.config
        self.run_id = run_id
        self.keeper = keeper
        self.emit = emit
        self.hello: dict[str, Any] | None = None  # the device's hello, once it said it
        self.written: list[dict[str, Any]] = []  # stored records of this device
        # resume: what an earlier attempt of this run already stored for this device
        self.prior = prior or []
        self._outputs: dict[RouteKey, dict[str, np.ndarray]] = {}

    def judge_outputs(self, route: RouteKey, outputs: dict[str, np.ndarray]
                      ) -> tuple[dict[str, Any] | None, str | None]:
        """(accuracy, problem or None) of a route's outputs against the reference; the
        routes this device finished before are compared for information (`cross_routes`).
        Every backend's outputs are judged here."""
        p = self.prepared
        # validity comes from the reference alone, so it never depends on the order routes
        # ran in. A quantized model is held to a whole-tensor bound against fp32, or to the
        # per-token cosine rule against ORT's run of the same pre-quantised file
        # (farm/bench/quant_rule.py)
        ref = judge_against_reference(outputs, p.reference, self.config.variant,
                                      same_file=p.extra.get("reference_kind") == "same-file",
                                      reference_label=p.reference_label)
        accuracy: dict[str, Any] = {**ref.as_json(), "cross_routes": []}
        int8 = p.extra.get("int8")
        if int8 is not None:  # which reference judged an int8 model, and why
            accuracy["reference_why"] = int8.why
            if int8.ort_deviation is not None:
                accuracy["ort_host_deviation"] = int8.ort_deviation
            if int8.exact is not None and not int8.judges:
                accuracy["exact_int8_deviation"] = deviation(outputs, int8.exact)
        problems = [] if ref.ok else [f"outputs differ from {p.reference_label}: {ref.detail}"
                                      f" (max abs diff {ref.max_abs_diff})"]
        for peer, peer_outputs in self._outputs.items():
            cross = compare_outputs(outputs, peer_outputs, self.config.variant,
                                    reference=f"route {peer} on {self.device.name}")
            accuracy["cross_routes"].append({"route": str(peer), **cross.as_json()})
        self._outputs[route] = outputs
        return accuracy, "; ".join(problems) or None

    def store_route(self, route: RouteKey, status: str, detail: str | None,
                    out: RouteOutcome | None = None, accuracy: dict[str, Any] | None = None,
                    plan: RoutePlan | None = None, stopped: str | None = None
                    ) -> dict[str, Any]:
        drift = None
        if out is not None and (out.state_before or out.state_after):
            drift = drift_flags(out.state_before, out.state_after)
        spec = ROUTES[route.route]
        # the cap also on a route that never got a plan (unavailable, failed to build)
        flags = {**spec.fusion_flags(route.fused), **isa_flags(self.device, spec),
                 **(plan.build_flags if plan else {})}
        record = make_record(
            run_id=self.run_id, device=self.device, hello=self.hello, route=route.route,
            config=self.config, model_label=self.prepared.model_label,
            model_hash=self.prepared.model.sha256, status=status, detail=detail, outcome=out,
            accuracy=accuracy, drift=drift,
            build_flags=flags, sizes=self._sizes(plan, out),
            rounds=out.rounds(self.config.repeats, stopped) if out is not None else None)
        stored, where = self.keeper.keep(record)
        if where in (SPILL, MEMORY):
            self._tell_kept(route, where)
        self.written.append(stored)
        old = [r for r in self.prior if key_of_record(r) == route and not is_superseded(r)
               and (r["status"] == FAILED or unfinished_rounds(r))]
        if old:  # resume: the earlier failure or unfinished rounds are history now
            self.keeper.keep_status([r["record_id"] for r in old], FAILED,
                                  f"{SUPERSEDED} {stored['record_id']} (--resume): "
                                  f"{old[0]['status_detail']}")
        # without --routes a route this device cannot run was not asked for by name: it is
        # skipped (recorded unavailable, as when named, so coverage still counts it)
        skipped = self.config.routes_default and status == UNAVAILABLE
        self.emit("route_done", route=route, status=status, detail=detail,
                  n=stored["n"], median_ms=stored["median_ms"], p90_ms=stored["p90_ms"],
                  drift=list(drift or []), skipped=skipped,
                  rounds=len(stored["round_medians_ms"] or []), noise=noise_warnings(stored))
        return stored

    def _tell_kept(self, route: RouteKey, where: str) -> None:
        problem = (self.keeper.problems[-1].splitlines()[0] if self.keeper.problems
                   else "the disk refused it")  # its hint is printed with the problems
        place = (f"kept in {self.keeper.spill_file} ({self.keeper.store.spill_back}); "
                 "the bench goes on" if where == SPILL else
                 "written nowhere: printed as JSON on stdout at the end of the bench")
        self.emit("warning", route=route, message=f"{route}: record not stored: {problem}; "
                                                   f"{place}")

    def _sizes(self, plan: RoutePlan | None, out: RouteOutcome | None) -> dict[str, Any]:
        """Bytes the route needs on the device: runtime + compiled code + model weights
        (the host knows its build outputs; a runner may report its runtime as measured on
        the device, which then wins)."""
        sizes = dict(plan.sizes) if plan and plan.sizes else {}
        if out is not None and isinstance(out.info.get("runtime_bytes"), int):
            sizes["runtime"] = out.info["runtime_bytes"]
        sizes.setdefault("weights", self.prepared.model_artifact.size)
        return sizes

    def device_failed(self, detail: str, missing: list[RouteKey], current: RouteKey | None,
                      outcomes: dict[RouteKey, RouteOutcome],
                      plans: dict[RouteKey, RoutePlan]) -> None:
        """The device was lost: a key in `missing` with finished rounds keeps them in a
        `partial` record (a resume runs the rest), every other one gets a `failed` record;
        the routes measured before it are re-marked `partial`."""
        resume = followup.command("bench", "--resume", self.run_id)
        for route in missing:
            out = outcomes.get(route)
            with contextlib.suppress(FarmError):
                if out is not None and out.round_sizes:
                    out.drop_unfinished_round()
                    done, planned = len(out.round_sizes), self.config.repeats
                    self.store_route(route, PARTIAL,
                                     f"{done} of {planned} rounds finished before the device "
                                     f"failed: {detail} (`{resume}` runs the rest)",
                                     out, plan=plans.get(route), stopped=detail)
                    continue
                why = (f"device lost during this route: {detail}" if route == current
                       else f"not run: device failed before this route: {detail}")
                self.store_route(route, FAILED, why)
        # measured routes stay, re-marked: the device did not finish its share of the run
        # (an invalid record keeps its status: wrong outputs matter more)
        finished = [r["record_id"] for r in self.written if r["status"] == OK]
        # (a resume brings them back to ok when the device finishes its share)
        if finished:
            with contextlib.suppress(FarmError):
                self.keeper.keep_status(finished, PARTIAL, "finished before the device "
                                        f"failed: {detail}")

    def restore_partial(self) -> None:
        """Resume completed this device's share: its kept `partial` records are whole."""
        ids = [r["record_id"] for r in self.prior
               if r["status"] == PARTIAL and not unfinished_rounds(r)]
        if ids:
            self.keeper.keep_status(ids, OK, None)
