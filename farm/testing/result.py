"""What a test gets back from `farm_bench(...)` and asserts on.

`FarmResult` wraps the stored record of one route on one device: `median_ms`, `p90_ms`,
`n`, `rounds`, `samples_ms`, `emulated`, `record`, and `no_slower_than(ref, "5%")`, which
gates this record against the records of the same device x route x model x variant x
threads x config in the run(s) `ref` names (a tag such as `main`, a run id or `latest`),
with the rule of `farm compare --max-slowdown` (`farm.results.gate`: over rounds, beyond
the device's noise floor when the store holds one). It returns a `GateCheck`:
true unless the gate finds a regression; its repr is the verdict with the figures, so a
failing `assert` explains itself. An emulated record is never gated ("not compared").
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from farm.results import gate, tags
from farm.results.emulation import device_label, is_emulated
from farm.results.floor import load_floors
from farm.results.open_store import open_store


@dataclass(frozen=True)
class GateCheck:
    ref: str
    limit: float
    metric: str
    row: gate.GateRow | None  # None: the ref runs hold no record of this key

    @property
    def verdict(self) -> str:
        return self.row.verdict if self.row else "no baseline"

    @property
    def passed(self) -> bool:
        return self.verdict != gate.REGRESSION

    def __bool__(self) -> bool:
        return self.passed

    def text(self) -> str:
        head = f"vs {self.ref} ({self.metric}, limit +{self.limit:.1%}): {self.verdict}"
        r = self.row
        if r is None or r.slowdown_pct is None:
            return head + (f" ({r.note})" if r is not None and r.note else "")
        p = "p —" if r.p_value is None else f"p {r.p_value:.3g}"
        floor = "no noise floor" if r.floor_pct is None else f"floor ±{r.floor_pct:.1f} %"
        return (f"{head}, {r.base_ms:.3f} -> {r.new_ms:.3f} ms ({r.slowdown_pct:+.1f} %, "
                f"{p} over {r.rounds_base}/{r.rounds_new} rounds, {floor})")

    def __repr__(self) -> str:
        return f"<farm gate {self.text()}>"


@dataclass
class FarmResult:
    record: dict[str, Any]
    store_path: str | Path
    checks: list[GateCheck] = field(default_factory=list)

    @property
    def median_ms(self) -> float | None:
        return self.record.get("median_ms")

    @property
    def p90_ms(self) -> float | None:
        return self.record.get("p90_ms")

    @property
    def n(self) -> int:
        return int(self.record.get("n") or 0)

    @property
    def rounds(self) -> int:
        return len(self.record.get("round_medians_ms") or [])

    @property
    def samples_ms(self) -> list[float]:
        return list(self.record.get("samples_ms") or [])

    @property
    def emulated(self) -> bool:
        return is_emulated(self.record)

    @property
    def run_id(self) -> str:
        return str(self.record["run_id"])

    def label(self) -> str:
        r = self.record
        return (f"{device_label(str(r['device']), self.emulated)} {r['route']} {r['model']} "
                f"{r.get('threads')} thr")

    def no_slower_than(self, ref: str, limit: str | float = "5%", *,
                       metric: str = gate.DEFAULT_METRIC,
                       alpha: float = 0.05) -> GateCheck:
        """Gate this record against the same configuration in the run(s) `ref` names."""
        max_slowdown = gate.parse_slowdown(limit) if isinstance(limit, str) else float(limit)
        with open_store(self.store_path, create=False) as store:
            base = store.records(run_id=tags.resolve_runs(store, ref))
            floors = load_floors(store, [str(self.record["device"])])
        result = gate.gate_records(base, [self.record], max_slowdown=max_slowdown,
                                   metric=metric, alpha=alpha, base_run=ref,
                                   new_run=self.run_id, floors=floors)
        mine = gate.key_of(self.record)
        row = next((r for r in result.rows
                    if tuple(getattr(r, k) for k in gate.KEY_FIELDS) == mine), None)
        if row is not None and row.verdict == gate.ONLY_NEW:
            row = None
        check = GateCheck(ref, max_slowdown, metric, row)
        self.checks.append(check)
        return check
