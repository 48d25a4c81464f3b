"""Group stored records into measured configurations, the unit every report table is about.

Contract:

* A *configuration* is (device, route, model, variant, threads, config flags). The config
  flags are the record's `build_flags` minus the keys that describe what a build cost,
  where it lives or what was observed rather than what was asked for (`is_cost_key` in
  `farm.results.config_flags`, e.g.
  `*_s`, `*_utc`, `*_sha256`, `*_hash`, `*_path`, `artifact*`, `*_version`, `*_count`,
  `*_providers`, `*_available`, `route`, `python`, `nodes`).
  Records of one configuration in the given runs are pooled: their raw `samples_ms` are
  concatenated in write order, their rounds too, and every statistic is recomputed from
  the pool with `farm.results.stats.summarize` (seed and n_boot from the first record's
  policy, the records' method: a one-record configuration reproduces the stored CI
  exactly). `rounds()` keys each round median by (run id, round index): two configurations
  of one bench ran in the same rounds, and verdicts pair them by that key.
* `fusion_of(flags)` -> True (fused: `{"fusion": true}`, ORT `graph_optimization` or `opt_level`
  "all"/"enable_all"), False (`{"fusion": false}`, ORT "disable"/"disable_all"), None
  (no fusion flag, or a partial level such as ORT "basic"/"extended": neither side of a
  fusion pair).
* Memory of a pooled configuration: the largest VmHWM / PSS over its records (a peak);
  `memory_increment_kb()`: VmHWM less the runner's idle baseline (`memory_baseline_kb`:
  runtime loaded, no model), what the model costs on top of the runtime, per record and
  per round;
  sizes, ops and build costs: from the first record that has them (they describe the same
  artifact). Per-op category times of several records are averaged.
"""

from __future__ import annotations

import json
import statistics as pystats
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

from farm.results.config_flags import (  # noqa: F401  (re-exported)
    _OFF_LEVELS,
    _ON_LEVELS,
    config_flags,
    config_label,
    fusion_flag_names,
    fusion_of,
    is_cost_key,
)
from farm.results.emulation import is_emulated
from farm.results.rounds import METHOD_LEGACY, record_sizes, split_rounds
from farm.results.stats import Summary, summarize
from farm.results.validate import stats_params

CATEGORIES = ("attention", "fc", "layernorm", "gelu", "other", "fallback")
NAMED_CATEGORIES = CATEGORIES[:4]
SIZE_PARTS = ("runtime", "code", "weights")
MEASURED_STATUSES = ("ok", "invalid", "partial")  # records that carry samples



def _num(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value)


@dataclass(frozen=True)
class Config:
    """One measured configuration and the records pooled into it."""

    device: str
    route: str
    model: str
    variant: str
    threads: int | None
    flags: dict[str, Any]
    records: tuple[dict[str, Any], ...] = field(repr=False)

    # -- identity ------------------------------------------------------------------------
    @property
    def emulated(self) -> bool:
        """Measured under an emulator: its latency is not the device's (never ranked)."""
        return any(is_emulated(r) for r in self.records)

    @property
    def label(self) -> str:
        return config_label(self.flags)

    @property
    def isa(self) -> str | None:
        """The ISA level the configuration ran at (the records' `isa`; a capped route's cap
        is also its `isa` config flag, so one configuration has one level)."""
        return next((str(r["isa"]) for r in self.records if r.get("isa")), None)

    @property
    def fusion(self) -> bool | None:
        return fusion_of(self.flags, self.route)

    @property
    def key(self) -> tuple[Any, ...]:
        return (self.device, self.route, self.model, self.variant, self.threads,
                json.dumps(self.flags, sort_keys=True, default=str))

    @property
    def block_key(self) -> tuple[Any, ...]:
        """The key without the fusion flags: two configs with equal block keys and opposite
        fusion form a fusion pair."""
        rest = {k: v for k, v in self.flags.items()
                if k not in fusion_flag_names(self.route)}
        return (self.device, self.route, self.model, self.variant, self.threads,
                json.dumps(rest, sort_keys=True, default=str))

    # -- status --------------------------------------------------------------------------
    @property
    def statuses(self) -> list[str]:
        return [str(r.get("status")) for r in self.records]

    @property
    def status(self) -> str:
        """"ok" when all records agree on ok, else e.g. "ok×2, failed×1"."""
        counts: dict[str, int] = {}
        for s in self.statuses:
            counts[s] = counts.get(s, 0) + 1
        if len(counts) == 1:
            return next(iter(counts))
        return ", ".join(f"{s}×{n}" for s, n in counts.items())

    @property
    def details(self) -> list[str]:
        seen: list[str] = []
        for r in self.records:
            detail = r.get("status_detail")
            if detail and r.get("status") != "ok" and detail not in seen:
                seen.append(str(detail))
        return seen

    @property
    def measured(self) -> bool:
        return bool(self.samples_ms)

    @property
    def valid(self) -> bool:
        """Measured and no record says its outputs mismatched."""
        return self.measured and all(r.get("status") != "invalid" for r in self.records)

    # -- measurements --------------------------------------------------------------------
    @cached_property
    def samples_ms(self) -> list[float]:
        out: list[float] = []
        for r in self.records:
            if r.get("status") in MEASURED_STATUSES and r.get("samples_ms"):
                out.extend(float(v) for v in r["samples_ms"])
        return out

    @property
    def stats_params(self) -> tuple[int, int]:
        return stats_params(self.records[0])

    def _measured_records(self) -> list[dict[str, Any]]:
        return [r for r in self.records
                if r.get("status") in MEASURED_STATUSES and r.get("samples_ms")]

    @cached_property
    def round_sizes(self) -> list[int]:
        """Samples per round over the pooled records (a record without sizes: one round)."""
        return [len(x) for r in self._measured_records()
                for x in split_rounds(r["samples_ms"], record_sizes(r))]

    @cached_property
    def summary(self) -> Summary | None:
        samples = self.samples_ms
        if not samples:
            return None
        seed, n_boot = self.stats_params
        legacy = all(r.get("ci_method") is None for r in self._measured_records())
        return summarize(samples, seed=seed, n_boot=n_boot, sizes=self.round_sizes,
                         method=METHOD_LEGACY if legacy else None)

    def rounds(self) -> dict[tuple[str, int], float]:
        """(run id, round index) -> that round's median: the key paired verdicts align on."""
        out: dict[tuple[str, int], float] = {}
        for r in self._measured_records():
            run = str(r.get("run_id"))
            start = sum(1 for key in out if key[0] == run)  # a run's records go on counting
            for i, x in enumerate(split_rounds(r["samples_ms"], record_sizes(r))):
                out[(run, start + i)] = float(pystats.median(x.tolist()))
        return out

    def memory_baseline_kb(self) -> float | None:
        return self.peak("memory_baseline_kb")

    def memory_increment_kb(self) -> float | None:
        """Peak VmHWM less the idle baseline of the same record (largest over records)."""
        values = [float(r["peak_vmhwm_kb"]) - float(r["memory_baseline_kb"])
                  for r in self.records if _num(r.get("peak_vmhwm_kb")) is not None
                  and _num(r.get("memory_baseline_kb")) is not None]
        return max(values) if values else None

    def round_increments(self) -> dict[tuple[str, int], float]:
        """(run id, round index) -> that round's VmHWM less its baseline."""
        out: dict[tuple[str, int], float] = {}
        for r in self.records:
            rounds = r.get("rounds") or {}
            peaks, bases = rounds.get("vmhwm_kb") or [], rounds.get("baseline_kb") or []
            for i, (peak, base) in enumerate(zip(peaks, bases, strict=False)):
                if _num(peak) is not None and _num(base) is not None:
                    out[(str(r.get("run_id")), i)] = float(peak) - float(base)
        return out

    def _values(self, name: str) -> list[float]:
        return [v for v in (_num(r.get(name)) for r in self.records) if v is not None]

    def peak(self, name: str) -> float | None:
        values = self._values(name)
        return max(values) if values else None

    def median_of(self, name: str) -> float | None:
        values = self._values(name)
        return float(pystats.median(values)) if values else None

    def first_json(self, name: str) -> dict[str, Any] | None:
        for r in self.records:
            if isinstance(r.get(name), Mapping) and r[name]:
                return dict(r[name])
        return None

    def cost_s(self, key: str) -> float | None:
        for r in self.records:
            value = _num((r.get("build_flags") or {}).get(key))
            if value is not None:
                return value
        return None

    def categories_ms(self) -> dict[str, float] | None:
        """Per-op category ms (per inference), averaged over the records that have them."""
        per_record = [r["ops"]["categories"] for r in self.records
                      if isinstance(r.get("ops"), Mapping)
                      and isinstance(r["ops"].get("categories"), Mapping)
                      and r["ops"]["categories"]]
        if not per_record:
            return None
        return {c: sum(float(cats.get(c) or 0.0) for cats in per_record) / len(per_record)
                for c in CATEGORIES}

    def category_runs(self) -> list[dict[str, float]]:
        """Per-profile-run category times when the runner kept them (`ops.category_runs`:
        a list of {category: ms}); empty when only the averages were stored."""
        runs: list[dict[str, float]] = []
        for r in self.records:
            ops = r.get("ops")
            if isinstance(ops, Mapping) and isinstance(ops.get("category_runs"), list):
                runs += [{c: float(run.get(c) or 0.0) for c in CATEGORIES}
                         for run in ops["category_runs"] if isinstance(run, Mapping)]
        return runs


def group_records(records: Iterable[Mapping[str, Any]]) -> list[Config]:
    """Configurations in first-seen order, each with its records in write order."""
    groups: dict[tuple[Any, ...], list[dict[str, Any]]] = {}
    for rec in records:
        r = dict(rec)
        flags = config_flags(r.get("build_flags"))
        key = (str(r.get("device")), str(r.get("route")), str(r.get("model") or ""),
               str(r.get("variant") or ""), r.get("threads"),
               json.dumps(flags, sort_keys=True, default=str))
        groups.setdefault(key, []).append(r)
    out = []
    for (device, route, model, variant, threads, flags_json), recs in groups.items():
        out.append(Config(device, route, model, variant, threads, json.loads(flags_json),
                          tuple(recs)))
    return out
