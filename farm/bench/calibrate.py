"""`farm devices calibrate NAME`: measure a device's noise floor with A/A runs.

A pair is two identical benches of a reference workload (default: `tiny` on the `ort`
route, the bench's default rounds and policy), one after the other, each a run in the
store like any `farm bench`. How far their medians (and p90s) land apart is what the
device does with nothing changed; `farm.results.floor` keeps the largest such move, with
the load and CPU steal the runs saw, in the store's meta table, where `farm compare`, the
gate and the pytest plugin read it.

Bounded: `pairs` pairs (default 3) of benches whose own policy bounds them (max time per
round, route timeout); a failed bench stops the calibration with its reason, and nothing
is saved (an incomplete floor would look like a quiet device).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from farm.bench.config import DEFAULT_ROUNDS, BenchConfig, Policy
from farm.bench.runner import run_bench
from farm.errors import FarmError
from farm.inventory.device import Device
from farm.results.backend import Store
from farm.results.floor import Floor, floor_of, save_floor
from farm.results.provenance import utc_now

DEFAULT_PAIRS = 3
DEFAULT_WORKLOAD = ("tiny", ("ort",))


def reference_config(model: str = DEFAULT_WORKLOAD[0],
                     routes: Sequence[str] = DEFAULT_WORKLOAD[1],
                     rounds: int = DEFAULT_ROUNDS, threads: int = 1) -> BenchConfig:
    """The bench an A/A run repeats: what `farm bench` would run, without profiling (the
    profile is not timed; it would only lengthen the calibration)."""
    return BenchConfig(model=model, routes=tuple(routes), repeats=rounds, threads=threads,
                       policy=Policy.for_rounds(rounds), profile_runs=0)


def calibrate(device: Device, store: Store, config: BenchConfig, *,
              pairs: int = DEFAULT_PAIRS, say: Callable[[str], None] = lambda _line: None
              ) -> Floor:
    if pairs < 1:
        raise FarmError("calibrate needs at least one A/A pair")
    done = []
    for i in range(pairs):
        runs = []
        for side in ("A", "B"):
            result = run_bench([device], config, store,
                               ["farm", "devices", "calibrate", device.name,
                                f"pair {i + 1}/{pairs} {side}"])
            if result.status != "ok" or not result.records:
                raise FarmError(f"calibration of {device.name}: bench {i + 1}{side} ended "
                                f"{result.status}: {'; '.join(result.failures()) or 'no record'}",
                                hint=f"`farm devices check {device.name}`, then calibrate again")
            runs.append(result)
            medians = ", ".join(f"{r['route']} {r['median_ms']:.4g} ms"
                                for r in result.records if r.get("median_ms") is not None)
            say(f"{device.name}: A/A pair {i + 1}/{pairs} {side}: run {result.run_id}: {medians}")
        done.append((runs[0].run_id, runs[1].run_id, runs[0].records, runs[1].records))
    floor = floor_of(device.name, done,
                     {"model": config.model, "variant": config.variant,
                      "routes": [str(k) for k in config.routes], "rounds": config.repeats,
                      "threads": config.threads}, utc_now())
    save_floor(store, floor)
    return floor
