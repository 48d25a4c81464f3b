"""The regression gate: `farm compare BASE NEW --max-slowdown 5%` exits 4 on a regression.

Contract: `gate_records(base, new, max_slowdown=0.05, metric="p10", alpha=0.05)` ->
`GateResult` with one `GateRow` per key (device, route, model, variant, threads, config),
where config is the label of the record's configuration flags (fusion on/off never pooled).
Records of one key in one run are pooled (their rounds added up). For each key measured
on both sides:

* `slowdown` = metric(NEW) / metric(BASE) - 1, metric = p10 (the default), median or p90
  of the pooled steady-state samples (linear interpolation). p10 by default because on a
  shared host disturbances only add time, to whole rounds at once: identical runs' medians
  land tens of percent apart while their p10s agree within a few (benchmarks/aa_noise.py
  measures both);
* `p_value`: Mann-Whitney U, ONE-sided (H1: NEW's rounds tend to be slower), exact, on the
  metric of each ROUND (`farm.results.rounds.unpaired_test`): rounds are the replicates,
  the thousands of samples of one round share its machine state; None when the rounds are
  too few to ever reach alpha (3 vs 3 at 0.05);
* `floor_pct`: the device's noise floor for the metric (`farm devices calibrate`,
  `farm.results.floor`): two identical runs on this device move that much;
* verdict `regression` only when slowdown > max_slowdown AND slowdown > floor AND the
  rounds say so (p < alpha). Otherwise, first that applies: "not slower"; "within noise
  (±x %)" (inside the floor); "within limit"; "not enough rounds to judge"; "slower, not
  significant"; or "only in base" / "only in new" / "not measured" when there is nothing
  to test. Without a calibrated floor the limit and the rounds decide alone (the row's
  note says so).
* An emulated side (`farm.results.emulation`) is "not compared: emulated": its latency is
  the emulator's, so it neither fails nor passes anything.

`GateResult.exit_code` is `EXIT_REGRESSION` (4) when any row is a regression, else 0.
`format_gate(result, fmt)` prints md (a PR comment: verdict line + table), json, jsonl, csv;
`render_gate(result)` a rich table laid out for the terminal (`farm.results.layout`).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, fields
from typing import Any

import numpy as np
from rich.text import Text

from farm.results import textout
from farm.results.emulation import NOT_COMPARED, WHY, device_label, is_emulated
from farm.results.floor import METRICS, QUANTILES, Floor, load_floors, noise_verdict, within
from farm.results.keys import config_key, group_by, sort_key
from farm.results.layout import Col, FitTable
from farm.results.noise import noise_warnings
from farm.results.rounds import NOT_ENOUGH, records_rounds, unpaired_test

EXIT_REGRESSION = 4
DEFAULT_METRIC = "p10"  # the quiet level (floor.QUANTILES says why); median and p90 on ask
REGRESSION = "regression"
SLOWER_NOT_SIGNIFICANT = "slower, not significant"
WITHIN_LIMIT = "within limit"
NOT_SLOWER = "not slower"
ONLY_BASE, ONLY_NEW, NOT_MEASURED = "only in base", "only in new", "not measured"
KEY_FIELDS = ("device", "route", "model", "variant", "threads", "config")


def parse_slowdown(text: str) -> float:
    """'5%', '5' or '12.5 %' -> 0.05 / 0.05 / 0.125 (a percentage; ValueError otherwise)."""
    match = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*%?\s*", str(text))
    if not match:
        raise ValueError(f"--max-slowdown {text!r} is not a percentage; write e.g. 5%")
    return float(match.group(1)) / 100.0


@dataclass(frozen=True)
class GateRow:
    device: str
    route: str
    model: str
    variant: str | None
    threads: int | None
    config: str
    emulated: bool
    n_base: int
    n_new: int
    rounds_base: int
    rounds_new: int
    base_ms: float | None
    new_ms: float | None
    slowdown_pct: float | None
    p_value: float | None
    floor_pct: float | None
    verdict: str
    note: str

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


GATE_FIELDS = tuple(f.name for f in fields(GateRow))


@dataclass(frozen=True)
class GateResult:
    base: str
    new: str
    max_slowdown: float
    metric: str
    alpha: float
    rows: tuple[GateRow, ...]

    @property
    def regressions(self) -> list[GateRow]:
        return [r for r in self.rows if r.verdict == REGRESSION]

    @property
    def passed(self) -> bool:
        return not self.regressions

    @property
    def exit_code(self) -> int:
        return 0 if self.passed else EXIT_REGRESSION

    def rule(self) -> str:
        return (f"regression = {self.metric} more than {self.max_slowdown:.1%} slower AND "
                f"beyond the device's noise floor AND Mann-Whitney U one-sided p < "
                f"{self.alpha} on the rounds' {self.metric}s")


def key_of(rec: dict[str, Any]) -> tuple[Any, ...]:
    """The gate key of a record: (device, route, model, variant, threads, config)."""
    return config_key(rec, KEY_FIELDS)


def _judge(base: list[np.ndarray], new: list[np.ndarray], limit: float, metric: str,
           alpha: float, floor: Floor | None) -> dict[str, Any]:
    q = QUANTILES[metric]
    base_ms = float(np.percentile(np.concatenate(base), q))
    new_ms = float(np.percentile(np.concatenate(new), q))
    slowdown = new_ms / base_ms - 1.0 if base_ms > 0 else None
    pct = None if slowdown is None else slowdown * 100.0
    test = unpaired_test([float(np.percentile(r, q)) for r in base],
                         [float(np.percentile(r, q)) for r in new], alpha=alpha,
                         alternative="greater")
    if slowdown is None or slowdown <= 0:
        verdict = NOT_SLOWER
    elif floor is not None and within(pct, floor, metric):
        verdict = noise_verdict(floor, metric)
    elif slowdown <= limit:
        verdict = WITHIN_LIMIT
    elif not test.judged:
        verdict = NOT_ENOUGH
    else:
        verdict = REGRESSION if test.significant(alpha) else SLOWER_NOT_SIGNIFICANT
    return {"base_ms": base_ms, "new_ms": new_ms, "p_value": test.p_value,
            "verdict": verdict, "slowdown_pct": pct}


def gate_records(base: Sequence[dict[str, Any]], new: Sequence[dict[str, Any]], *,
                 max_slowdown: float = 0.05, metric: str = DEFAULT_METRIC, alpha: float = 0.05,
                 base_run: str = "base", new_run: str = "new",
                 floors: Mapping[str, Floor] | None = None) -> GateResult:
    """Gate NEW against BASE per key; `floors`: device -> its noise floor."""
    if metric not in METRICS:
        raise ValueError(f"metric {metric!r}: use one of {', '.join(METRICS)}")
    groups_b, groups_n = group_by(base, key_of), group_by(new, key_of)
    rows = []
    for key in sorted(set(groups_b) | set(groups_n), key=sort_key):
        recs_b, recs_n = groups_b.get(key, []), groups_n.get(key, [])
        sb, sn = records_rounds(recs_b), records_rounds(recs_n)
        floor = (floors or {}).get(str(key[0]))
        notes = [] if not sb or not sn else (
            [f"no noise floor for {key[0]}: `farm devices calibrate {key[0]}` measures it"]
            if floor is None else
            [f"{key[0]}'s noise floor has no {metric}: `farm devices calibrate {key[0]}` "
             "again keeps it"] if floor.pct(metric) is None else [])
        if len(recs_b) > 1 or len(recs_n) > 1:
            notes.append(f"pools {len(recs_b)} base / {len(recs_n)} new records")
        if any(r.get("status") == "invalid" for r in recs_b + recs_n):
            notes.append("outputs invalid on a side")
        notes += [f"{side} noisy: {w}" for side, recs in (("base", recs_b), ("new", recs_n))
                  for r in recs for w in noise_warnings(r)]
        hashes = ({r.get("model_hash") for r in recs_b}, {r.get("model_hash") for r in recs_n})
        if recs_b and recs_n and hashes[0] != hashes[1]:
            notes.append("model file changed")
        result: dict[str, Any] = dict.fromkeys(
            ("base_ms", "new_ms", "slowdown_pct", "p_value"))
        emulated = any(is_emulated(r) for r in recs_b + recs_n)
        if not recs_n:
            result["verdict"] = ONLY_BASE
        elif not recs_b:
            result["verdict"] = ONLY_NEW
        elif not sb or not sn:
            result["verdict"] = NOT_MEASURED
            notes += [f"{r.get('status')}: {r.get('status_detail') or 'no samples'}"
                      for r in recs_b + recs_n if not r.get("samples_ms")]
            result["floor_pct"] = None
        elif emulated:
            result["verdict"] = NOT_COMPARED
            notes.insert(0, WHY)
        else:
            result = _judge(sb, sn, max_slowdown, metric, alpha, floor)
        result.setdefault("floor_pct", floor.pct(metric) if floor is not None else None)
        rows.append(GateRow(*key, emulated=emulated, n_base=sum(r.size for r in sb),
                            n_new=sum(r.size for r in sn), rounds_base=len(sb),
                            rounds_new=len(sn), note="; ".join(notes), **result))
    return GateResult(base_run, new_run, max_slowdown, metric, alpha, tuple(rows))


def gate_runs(store: Any, base: str, new: str, **kwargs: Any) -> GateResult:
    """Resolve BASE and NEW (run id, prefix, `latest` or a tag, which may name several
    runs: their records are pooled per key) in a store and gate them."""
    from farm.results import tags

    base_ids, new_ids = tags.resolve_runs(store, base), tags.resolve_runs(store, new)
    recs_b, recs_n = store.records(base_ids), store.records(new_ids)
    floors = load_floors(store, {str(r.get("device")) for r in recs_b + recs_n})
    return gate_records(recs_b, recs_n, base_run=",".join(base_ids),
                        new_run=",".join(new_ids), floors=floors, **kwargs)


# -- printers ------------------------------------------------------------------------------
_MD_COLUMNS = (("device", "device"), ("route", "route"), ("model", "model"),
               ("variant", "variant"), ("threads", "thr"), ("config", "config"),
               ("rounds_base", "rounds base"), ("rounds_new", "rounds new"),
               ("base_ms", "base ms"), ("new_ms", "new ms"), ("slowdown_pct", "slowdown"),
               ("floor_pct", "noise floor"), ("p_value", "p"),
               ("verdict", "verdict"), ("note", "note"))


def _cell(row: GateRow, key: str) -> str:
    value = getattr(row, key)
    if key == "device":
        return device_label(row.device, row.emulated)
    if value is None:
        return "—" if key in ("base_ms", "new_ms", "slowdown_pct", "p_value",
                              "floor_pct") else ""
    if key == "slowdown_pct":
        return f"{value:+.1f} %"
    if key == "floor_pct":
        return f"±{value:.1f} %"
    if key == "p_value":
        return f"{value:.3g}"
    if key in ("base_ms", "new_ms"):
        return f"{value:.3f}"
    if key == "verdict" and value == REGRESSION:
        return "**REGRESSION**"
    return str(value)


def headline(result: GateResult) -> str:
    n = len(result.regressions)
    state = "PASS" if result.passed else f"FAIL: {n} regression{'s' if n != 1 else ''}"
    return (f"farm gate {state} — NEW {result.new} vs BASE {result.base}; "
            f"{result.rule()}")


def format_gate(result: GateResult, fmt: str) -> str:
    """md / csv / json / jsonl through the one format switch (`farm.results.textout`)."""
    rows = [r.as_dict() for r in result.rows]
    if fmt in ("json", "jsonl", "csv"):
        doc = {"base": result.base, "new": result.new,
               "max_slowdown_pct": result.max_slowdown * 100.0,
               "metric": result.metric, "alpha": result.alpha,
               "test": "Mann-Whitney U, one-sided (new slower), exact, on the metric of "
                       "each round",
               "passed": result.passed, "regressions": len(result.regressions),
               "exit_code": result.exit_code}
        return textout.pick(fmt, rows, [textout.Field(k) for k in GATE_FIELDS], doc=doc)
    if fmt == "md":
        shown = [{k: _cell(r, k) for k, _ in _MD_COLUMNS} for r in result.rows]
        fields = [textout.Field(k, label, numeric=k in _MD_NUMERIC) for k, label in _MD_COLUMNS]
        return f"**{headline(result)}**\n\n" + textout.md_table(shown, fields)
    raise ValueError(f"unknown output format {fmt!r}; use table, md, json, jsonl or csv")


_MD_NUMERIC = {"threads", "rounds_base", "rounds_new", "base_ms", "new_ms", "slowdown_pct",
               "floor_pct", "p_value"}


_STYLE = {REGRESSION: "bold red", SLOWER_NOT_SIGNIFICANT: "yellow", WITHIN_LIMIT: "",
          NOT_SLOWER: "green", NOT_COMPARED: "yellow", NOT_ENOUGH: "yellow"}


# layout of the rich table (farm.results.layout), as `farm compare`'s: numbers whole, a long
# configuration a numbered note under the table
_LAYOUT = {"device": Col("device", "whole", keep=True),
           "route": Col("route", "whole", keep=True),
           "model": Col("model", "wrap", cap=20, drop=2),
           "variant": Col("variant", "whole", drop=3),
           "threads": Col("thr", drop=4), "config": Col("config", "note", keep=True, cap=24),
           "rounds_base": Col("rounds base", drop=2), "rounds_new": Col("rounds new", drop=2),
           "base_ms": Col("base ms", drop=-1), "new_ms": Col("new ms", drop=-1),
           "floor_pct": Col("noise floor", drop=1), "p_value": Col("p", drop=-1),
           "slowdown_pct": Col("slowdown", keep=True), "verdict": Col("verdict", "wrap", keep=True),
           "note": Col("note", "wrap", cap=40, drop=5)}


def render_gate(result: GateResult, full: bool = False) -> FitTable:
    rows = [[Text(_cell(r, k).strip("*"),
                  style=_STYLE.get(r.verdict, "dim") if k == "verdict" else "")
             for k, _ in _MD_COLUMNS] for r in result.rows]
    return FitTable([_LAYOUT.get(k, Col(label)) for k, label in _MD_COLUMNS], rows,
                    title=headline(result), title_justify="left", full=full,
                    caption=f"slowdown = {result.metric} NEW / {result.metric} BASE - 1 of "
                            "steady-state latency; noise floor = spread of A/A runs "
                            "(max / min - 1, `farm devices calibrate`); p = Mann-Whitney U "
                            f"one-sided, exact, on each round's {result.metric}")
