"""How latency moved over time: the data of `farm report history` (from either store).

Contract: `load_history(store, models=…, devices=…, routes=…, variants=…) -> History`.
A series is one model x device x route key (`ort`, `tvm-unfused`, …) x variant x threads;
its points are that configuration's measured records (status ok or partial, with samples)
in time order, each with its median and the bootstrap 95 % CI of the median as stored
(computed from the raw samples when the record was written, `farm.results.stats`), its run
id and the farm commit that measured it (`farm_commit`, host provenance). `changes` are
the steps between consecutive points of a series, largest relative change first; a step
is `clear` when the two CIs do not overlap (a hint, not a test: the gate,
`farm compare --max-slowdown`, runs the Mann-Whitney test on the raw samples). Emulated
devices' series are kept and marked (their latency is not ranked anywhere else either).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from farm.errors import StoreError
from farm.results.backend import Store
from farm.routes import key_of_record

MEASURED = ("ok", "partial")


@dataclass(frozen=True)
class Point:
    run_id: str
    record_id: str
    when: str  # UTC, ISO 8601
    commit: str
    median_ms: float
    ci_low_ms: float
    ci_high_ms: float
    n: int

    @property
    def label(self) -> str:
        return f"{self.run_id} @ {self.commit[:10]}"


@dataclass
class Series:
    model: str
    device: str
    route: str
    variant: str
    threads: int
    emulated: bool = False
    points: list[Point] = field(default_factory=list)

    @property
    def key(self) -> tuple[str, str, str, str, int]:
        return (self.model, self.device, self.route, self.variant, self.threads)

    @property
    def name(self) -> str:
        return (f"{self.model} · {self.device}{' (emulated)' if self.emulated else ''} · "
                f"{self.route} · {self.variant} · {self.threads} thr")


@dataclass(frozen=True)
class Change:
    series: Series
    before: Point
    after: Point

    @property
    def pct(self) -> float:
        return (self.after.median_ms / self.before.median_ms - 1.0) * 100.0

    @property
    def clear(self) -> bool:
        """The two CIs of the median do not overlap."""
        return (self.after.ci_low_ms > self.before.ci_high_ms
                or self.after.ci_high_ms < self.before.ci_low_ms)


@dataclass
class History:
    where: str
    series: list[Series]
    filters: dict[str, list[str]]

    @property
    def changes(self) -> list[Change]:
        steps = [Change(s, a, b) for s in self.series
                 for a, b in zip(s.points, s.points[1:], strict=False)]
        return sorted(steps, key=lambda c: -abs(c.pct))


def _point(rec: dict[str, Any]) -> Point:
    median = float(rec["median_ms"])
    return Point(str(rec["run_id"]), str(rec["record_id"]), str(rec["created_utc"]),
                 str(rec.get("farm_commit") or "unknown"), median,
                 float(rec["ci95_low_ms"] if rec["ci95_low_ms"] is not None else median),
                 float(rec["ci95_high_ms"] if rec["ci95_high_ms"] is not None else median),
                 int(rec["n"] or 0))


def load_history(store: Store, *, models: Sequence[str] = (), devices: Sequence[str] = (),
                 routes: Sequence[str] = (), variants: Sequence[str] = ()) -> History:
    filters: dict[str, Any] = {"status": list(MEASURED)}
    for name, values in (("model", models), ("device", devices), ("variant", variants)):
        if values:
            filters[name] = list(values)
    by_key: dict[tuple[str, str, str, str, int], Series] = {}
    for rec in store.records(**filters):
        if rec["median_ms"] is None or not rec["samples_ms"]:
            continue
        route = str(key_of_record(rec))
        if routes and route not in routes and rec["route"] not in routes:
            continue
        key = (str(rec["model"]), str(rec["device"]), route, str(rec["variant"]),
               int(rec["threads"] or 1))
        series = by_key.setdefault(key, Series(*key))
        series.emulated = series.emulated or bool(rec.get("emulated"))
        series.points.append(_point(rec))
    if not by_key:
        asked = {k: v for k, v in (("model", models), ("device", devices), ("route", routes),
                                   ("variant", variants)) if v}
        raise StoreError(f"no measured records in {store.where}"
                         + (f" for {asked}" if asked else ""),
                         hint="see `farm results list`; --model/--device/--route/--variant "
                              "take the names stored in the records")
    for series in by_key.values():
        series.points.sort(key=lambda p: (p.when, p.record_id))
    ordered = sorted(by_key.values(), key=lambda s: s.key)
    return History(store.where, ordered, {"model": list(models), "device": list(devices),
                                          "route": list(routes), "variant": list(variants)})
