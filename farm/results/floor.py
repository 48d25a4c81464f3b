"""A device's noise floor: how far two identical runs' medians land apart, measured.

`farm devices calibrate NAME` (farm.bench.calibrate) runs A/A pairs of a reference
workload; this module turns their records into a `Floor` and keeps it in the result store
(`meta` key `noise_floor:<device>`, JSON), where `farm compare`, the gate and the pytest
plugin read it. A change between two runs inside the floor is "within noise (±x %)":
the device moves that much with nothing changed, whatever a test over rounds says.

Contract:
* `pair_changes(base, new)` -> {key: {"p10": %, "median": %, "p90": %}}: per
  configuration key of the gate (device, route, model, variant, threads, config) the
  relative change of each `QUANTILES` statistic of NEW's pooled samples against BASE's, in
  percent (a floor calibrated before p10 existed has none: the gate says so).
* `floor_of(device, pairs, ...)` -> `Floor`: floor_pct per metric = the spread of that
  metric over EVERY calibration run of a key, max / min - 1 (the largest over keys), with
  the pairs' own changes, the run ids, the load and the CPU steal the runs saw. Why the
  spread of all runs and not the largest pair change: on a shared host a run is either
  mostly quiet or mostly contended (a neighbour's job spans it), so run medians are
  bimodal; 2k runs show both modes more often than k pairs do, and a later A/A pair that
  lands one run in each mode is then inside the floor instead of a false alarm.
* `save_floor(store, floor)`, `load_floor(store, device)`, `load_floors(store, devices)`.
Every figure is recomputable from the named runs' samples.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from farm.results.keys import config_key, group_by

META_PREFIX = "noise_floor:"
# the statistics a floor is kept for and the gate can judge, as percentiles of samples.
# p10 is the quiet level: on a shared host a disturbance (a neighbour on the sibling
# hyperthread, the hypervisor) only ever adds time, often to whole rounds, so a low
# percentile tracks the code's own cost while the median follows the neighbours
QUANTILES = {"p10": 10.0, "median": 50.0, "p90": 90.0}
METRICS = tuple(QUANTILES)
KEY_FIELDS = ("device", "route", "model", "variant", "threads", "config")


@dataclass(frozen=True)
class Floor:
    device: str
    floor_pct: dict[str, float]  # metric -> spread (max / min - 1) of the A/A runs, %
    pairs: list[dict[str, Any]]  # {"base", "new", "changes": {key text: {metric: %}}}
    workload: dict[str, Any]  # model, routes, rounds of the reference bench
    load1: dict[str, float | None] = field(default_factory=dict)  # mean and max seen
    steal_pct: dict[str, float | None] = field(default_factory=dict)
    measured_utc: str = ""

    def pct(self, metric: str = "median") -> float | None:
        value = self.floor_pct.get(metric)
        return float(value) if value is not None else None

    def describe(self) -> str:
        load, steal = self.load1.get("max"), self.steal_pct.get("max")
        kept = ", ".join(f"±{self.floor_pct[m]:.1f} % ({m})" for m in METRICS
                         if self.floor_pct.get(m) is not None)
        return (f"{kept} over {len(self.pairs)} A/A "
                f"pair(s) of {self.workload.get('model')} "
                f"{','.join(self.workload.get('routes') or [])}"
                + (f"; load up to {load:.2f}" if load is not None else "")
                + (f", CPU steal up to {steal:.1f} %" if steal is not None else ""))


def _metric(recs: Sequence[Mapping[str, Any]], q: float) -> float | None:
    samples = [float(v) for r in recs for v in (r.get("samples_ms") or [])]
    return float(np.percentile(samples, q)) if samples else None


def _key(rec: dict[str, Any]) -> tuple[Any, ...]:
    return config_key(rec, KEY_FIELDS)


def pair_changes(base: Sequence[Mapping[str, Any]], new: Sequence[Mapping[str, Any]]
                 ) -> dict[str, dict[str, float]]:
    groups_b = group_by([dict(r) for r in base], _key)
    groups_n = group_by([dict(r) for r in new], _key)
    out: dict[str, dict[str, float]] = {}
    for k in sorted(set(groups_b) & set(groups_n), key=str):
        changes = {}
        for metric, q in QUANTILES.items():
            b, n = _metric(groups_b[k], q), _metric(groups_n[k], q)
            if b and n is not None:
                changes[metric] = (n / b - 1.0) * 100.0
        if changes:
            out["/".join("" if v is None else str(v) for v in k)] = changes
    return out


def _seen(records: Iterable[Mapping[str, Any]], name: str) -> dict[str, float | None]:
    values = [float(v) for r in records for v in ((r.get("rounds") or {}).get(name) or [])
              if isinstance(v, (int, float))]
    if not values:
        return {"mean": None, "max": None}
    return {"mean": round(float(np.mean(values)), 3), "max": round(max(values), 3)}


def floor_of(device: str, pairs: Sequence[tuple[str, str, Sequence[Mapping[str, Any]],
                                                Sequence[Mapping[str, Any]]]],
             workload: Mapping[str, Any], measured_utc: str) -> Floor:
    """`pairs`: (base run id, new run id, base records, new records) of A/A runs."""
    kept, runs = [], []
    for base_id, new_id, base, new in pairs:
        kept.append({"base": base_id, "new": new_id, "changes": pair_changes(base, new)})
        runs += [base, new]
    if not any(p["changes"] for p in kept):
        raise ValueError(f"device {device}: no A/A pair measured a configuration on both "
                         "sides; no floor")
    spread = dict.fromkeys(METRICS, 0.0)
    for metric, q in QUANTILES.items():
        per_key: dict[tuple[Any, ...], list[float]] = {}
        for run in runs:  # each run's metric per key, over all runs of the calibration
            for k, recs in group_by([dict(r) for r in run], _key).items():
                value = _metric(recs, q)
                if value:
                    per_key.setdefault(k, []).append(value)
        for values in per_key.values():
            spread[metric] = max(spread[metric], (max(values) / min(values) - 1.0) * 100.0)
    records = [r for run in runs for r in run]
    return Floor(device, {m: round(v, 2) for m, v in spread.items()}, kept, dict(workload),
                 _seen(records, "load1"), _seen(records, "steal_pct"), measured_utc)


def save_floor(store: Any, floor: Floor) -> None:
    store.set_meta(META_PREFIX + floor.device, json.dumps(asdict(floor)))


def _parse(text: str) -> Floor | None:
    try:
        data = json.loads(text)
        return Floor(**data)
    except (TypeError, ValueError):
        return None  # a floor this farm cannot read is no floor, not a crash


def load_floors(store: Any, devices: Iterable[str] | None = None) -> dict[str, Floor]:
    items = store.meta_items(META_PREFIX)
    wanted = set(devices) if devices is not None else set(items)
    return {d: f for d, text in items.items()
            if d in wanted and (f := _parse(text)) is not None}


def load_floor(store: Any, device: str) -> Floor | None:
    return load_floors(store, [device]).get(device)


def within(change_pct: float | None, floor: Floor | None, metric: str = "median") -> bool:
    """A change inside the device's floor: two identical runs move this much."""
    pct = floor.pct(metric) if floor is not None else None
    return change_pct is not None and pct is not None and abs(change_pct) <= pct


def noise_verdict(floor: Floor, metric: str = "median") -> str:
    return f"within noise (±{floor.pct(metric) or 0.0:.1f} %)"
