"""Turn what one route produced on one device into a record of `farm.results.schema`.

`RouteOutcome` collects the runner's events (see the route-runner contract); `make_record`
fills every schema field the bench knows (statistics are left to the store, which computes
them from `samples_ms` with the seed in `policy`, so they are always recomputable).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from farm.bench.config import BenchConfig
from farm.inventory.device import Device
from farm.results.emulation import record_emulated
from farm.results.schema import empty_record
from farm.routes import ROUTES

# what the record's `rounds` keeps per round, beside `sizes`
ROUND_FACT_KEYS = ("steal_pct", "busy_pct", "load1", "vmhwm_kb", "baseline_kb")


@dataclass
class RouteOutcome:
    """Everything one route run reported (several repeats append to the same outcome)."""

    route: str
    samples_ms: list[float] = field(default_factory=list)
    load_ms: float | None = None
    first_ms: float | None = None
    warmup_runs: int = 0
    ops: dict[str, Any] | None = None
    memory: dict[str, Any] = field(default_factory=dict)
    info: dict[str, Any] = field(default_factory=dict)
    outputs_file: str | None = None
    state_before: dict[str, Any] | None = None
    state_after: dict[str, Any] | None = None
    round_sizes: list[int] = field(default_factory=list)  # samples of each finished repeat
    # per finished round: steal/busy/load (`farm.results.noise.round_facts`) and memory
    round_facts: list[dict[str, Any]] = field(default_factory=list)
    resumed_from: dict[str, Any] | None = None  # the partial record a --resume continues
    _round_memory: dict[str, Any] = field(default_factory=dict, repr=False)

    @classmethod
    def resumed(cls, route: str, record: dict[str, Any]) -> RouteOutcome:
        """The outcome so far of a route whose earlier rounds are in a `partial` record."""
        rounds = record.get("rounds") or {}
        sizes = [int(n) for n in rounds.get("sizes") or []]
        kept = [k for k in ROUND_FACT_KEYS
                if isinstance(rounds.get(k), list) and len(rounds[k]) == len(sizes)]
        facts = [{k: rounds[k][i] for k in kept} for i in range(len(sizes))]
        return cls(route, samples_ms=list(record.get("samples_ms") or [])[:sum(sizes)],
                   round_facts=facts,
                   load_ms=record.get("load_ms"), first_ms=record.get("first_run_ms"),
                   warmup_runs=int(record.get("warmup_runs") or 0),
                   state_before=record.get("state_before"), round_sizes=sizes,
                   memory={k: record.get(f) for k, f in (("vmhwm_kb", "peak_vmhwm_kb"),
                                                         ("pss_kb", "peak_pss_kb"),
                                                         ("method", "memory_method"),
                                                         ("baseline_kb", "memory_baseline_kb"))
                           if record.get(f) is not None},
                   resumed_from=record)

    def end_round(self, facts: dict[str, Any] | None = None) -> None:
        """A repeat finished: its samples count as a round; `facts` is what the device
        state said about it (steal, load), the round's memory readings are added."""
        self.round_sizes.append(len(self.samples_ms) - sum(self.round_sizes))
        mem = self._round_memory
        self.round_facts.append({**(facts or {}), "vmhwm_kb": mem.get("vmhwm_kb"),
                                 "baseline_kb": mem.get("baseline_kb")})
        self._round_memory = {}

    def drop_unfinished_round(self) -> None:
        """The device dropped mid-repeat: keep only the samples of finished rounds."""
        del self.samples_ms[sum(self.round_sizes):]

    def rounds(self, planned: int, stopped: str | None = None) -> dict[str, Any]:
        """The record's `rounds` field: per-round lists sit beside `sizes`, in round order."""
        per_round = {k: [f.get(k) for f in self.round_facts] for k in ROUND_FACT_KEYS} \
            if len(self.round_facts) == len(self.round_sizes) else {}
        return {"planned": planned, "done": len(self.round_sizes),
                "sizes": list(self.round_sizes), **per_round, "stopped": stopped,
                "resumed_from": (self.resumed_from or {}).get("record_id")}

    def absorb(self, ev: dict[str, Any]) -> None:
        """Apply one runner event."""
        kind = ev["ev"]
        if kind == "loaded":
            self.load_ms = float(ev["load_ms"]) if self.load_ms is None else self.load_ms
        elif kind == "first":
            self.first_ms = float(ev["ms"]) if self.first_ms is None else self.first_ms
        elif kind == "warmup":
            self.warmup_runs += int(ev["runs"])
        elif kind == "samples":
            self.samples_ms.extend(float(x) for x in ev["ms"])
        elif kind == "ops":
            self.ops = {k: v for k, v in ev.items() if k != "ev"}
        elif kind == "memory":
            self._round_memory = {k: v for k, v in ev.items() if k != "ev"}
            # several repeats: keep the highest peak, it is the honest one
            old = self.memory.get("vmhwm_kb") or 0
            if (ev.get("vmhwm_kb") or 0) >= old:
                self.memory = {k: v for k, v in ev.items() if k != "ev"}
        elif kind == "outputs":
            self.outputs_file = str(ev["file"])
        elif kind == "info":
            self.info.update({k: v for k, v in ev.items() if k != "ev"})


def make_record(*, run_id: str, device: Device, hello: dict[str, Any] | None, route: str,
                config: BenchConfig, model_label: str, model_hash: str | None,
                status: str, detail: str | None = None, outcome: RouteOutcome | None = None,
                accuracy: dict[str, Any] | None = None, drift: list[str] | None = None,
                sizes: dict[str, Any] | None = None,
                build_flags: dict[str, Any] | None = None,
                rounds: dict[str, Any] | None = None) -> dict[str, Any]:
    """One record of `route` (a route name); of the runner's facts (its `info` event) the
    record keeps those the route names (`Route.record_keys`) in build_flags."""
    hello = hello or {}
    out = outcome or RouteOutcome(route)
    spec = ROUTES.get(route)
    record_keys = spec.record_keys if spec is not None else ()
    build_flags = {"route": route, **(build_flags or {}),
                   **{k: out.info[k] for k in record_keys if k in out.info}}
    return empty_record(
        run_id=run_id,
        agent_hash=hello.get("agent_sha256"),
        device=device.name,
        transport=device.transport,
        arch=(hello.get("cpu") or {}).get("arch") or device.arch,
        triple=device.triple,
        cpu_info=hello.get("cpu") or {"features": list(device.features), "cores": device.cores},
        route=route,
        model=model_label,
        variant=config.variant,
        model_hash=model_hash,
        build_flags=build_flags,
        threads=config.threads,
        status=status,
        status_detail=detail,
        load_ms=out.load_ms,
        first_run_ms=out.first_ms,
        warmup_runs=out.warmup_runs if outcome else None,
        samples_ms=list(out.samples_ms) if out.samples_ms else None,
        ops=out.ops,
        peak_vmhwm_kb=out.memory.get("vmhwm_kb"),
        peak_pss_kb=out.memory.get("pss_kb"),
        memory_method=out.memory.get("method"),
        memory_baseline_kb=out.memory.get("baseline_kb"),
        state_before=out.state_before,
        state_after=out.state_after,
        drift=drift,
        accuracy=accuracy,
        sizes=sizes,
        policy=config.record_policy(),
        rounds=rounds,
        emulated=record_emulated(device.emulated, hello.get("cpu")),
        isa=device.isa_level if spec is not None and spec.isa_capped else device.level,
    )
