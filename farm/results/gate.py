"""The regression gate: `farm compare BASE NEW --max-slowdown 5%` exits 4 on a regression.

Contract: `gate_records(base, new, max_slowdown=0.05, metric="median", alpha=0.05)` ->
`GateResult` with one `GateRow` per key (device, route, model, variant, threads, config),
where config is the label of the record's configuration flags (fusion on/off never pooled).
Records of one key in one run are pooled (repeats). For each key measured on both sides:

* `slowdown` = metric(NEW) / metric(BASE) - 1, metric = median or p90 of the raw
  steady-state samples (linear interpolation, `farm.results.stats.summarize`);
* `p_value`: Mann-Whitney U, ONE-sided (H1: NEW's samples tend to be larger), scipy's
  default method, on the raw samples: the gate asks one question, "is NEW slower?";
* verdict `regression` only when slowdown > max_slowdown AND p < alpha: a large but noisy
  difference ("slower, not significant") or a significant but small one ("within limit")
  never fails a build. Otherwise "not slower", or "only in base" / "only in new" /
  "not measured" when there is nothing to test.
* An emulated side (`farm.results.emulation`) is "not compared: emulated": its latency is
  the emulator's, so it neither fails nor passes anything.

`GateResult.exit_code` is `EXIT_REGRESSION` (4) when any row is a regression, else 0.
`format_gate(result, fmt)` prints md (a PR comment: verdict line + table), json, jsonl, csv;
`render_gate(result)` a rich table laid out for the terminal (`farm.results.layout`).
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from dataclasses import asdict, dataclass, fields
from typing import Any

from rich.text import Text
from scipy.stats import mannwhitneyu

from farm.results import textout
from farm.results.compare import config_key, group_by, sort_key
from farm.results.emulation import NOT_COMPARED, WHY, device_label, is_emulated
from farm.results.layout import Col, FitTable

# the one import of the statistics module (it moves below the store: change this line only)
from farm.results.stats import summarize

EXIT_REGRESSION = 4
METRICS = ("median", "p90")
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
    base_ms: float | None
    new_ms: float | None
    slowdown_pct: float | None
    p_value: float | None
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
                f"Mann-Whitney U one-sided p < {self.alpha} on the raw samples")


def key_of(rec: dict[str, Any]) -> tuple[Any, ...]:
    """The gate key of a record: (device, route, model, variant, threads, config)."""
    return config_key(rec, KEY_FIELDS)


def _samples(recs: list[dict[str, Any]]) -> list[float]:
    return [float(v) for r in recs for v in (r.get("samples_ms") or [])]


def _metric(samples: list[float], metric: str) -> float:
    summary = summarize(samples, n_boot=1)  # the CI is not used: keep it cheap
    return summary.median if metric == "median" else summary.p90


def _judge(base: list[float], new: list[float], limit: float, metric: str, alpha: float
           ) -> dict[str, Any]:
    base_ms, new_ms = _metric(base, metric), _metric(new, metric)
    slowdown = new_ms / base_ms - 1.0 if base_ms > 0 else None
    p = float(mannwhitneyu(new, base, alternative="greater").pvalue)
    if math.isnan(p):  # every sample of both sides equal: no evidence
        p = 1.0
    if slowdown is None or slowdown <= 0:
        verdict = NOT_SLOWER
    elif slowdown > limit:
        verdict = REGRESSION if p < alpha else SLOWER_NOT_SIGNIFICANT
    else:
        verdict = WITHIN_LIMIT
    return {"base_ms": base_ms, "new_ms": new_ms, "p_value": p, "verdict": verdict,
            "slowdown_pct": None if slowdown is None else slowdown * 100.0}


def gate_records(base: Sequence[dict[str, Any]], new: Sequence[dict[str, Any]], *,
                 max_slowdown: float = 0.05, metric: str = "median", alpha: float = 0.05,
                 base_run: str = "base", new_run: str = "new") -> GateResult:
    if metric not in METRICS:
        raise ValueError(f"metric {metric!r}: use one of {', '.join(METRICS)}")
    groups_b, groups_n = group_by(base, key_of), group_by(new, key_of)
    rows = []
    for key in sorted(set(groups_b) | set(groups_n), key=sort_key):
        recs_b, recs_n = groups_b.get(key, []), groups_n.get(key, [])
        sb, sn = _samples(recs_b), _samples(recs_n)
        notes = []
        if len(recs_b) > 1 or len(recs_n) > 1:
            notes.append(f"pools {len(recs_b)} base / {len(recs_n)} new records")
        if any(r.get("status") == "invalid" for r in recs_b + recs_n):
            notes.append("outputs invalid on a side")
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
        elif emulated:
            result["verdict"] = NOT_COMPARED
            notes.insert(0, WHY)
        else:
            result = _judge(sb, sn, max_slowdown, metric, alpha)
        rows.append(GateRow(*key, emulated=emulated, n_base=len(sb), n_new=len(sn),
                            note="; ".join(notes), **result))
    return GateResult(base_run, new_run, max_slowdown, metric, alpha, tuple(rows))


def gate_runs(store: Any, base: str, new: str, **kwargs: Any) -> GateResult:
    """Resolve BASE and NEW (run id, prefix, `latest` or a tag, which may name several
    runs: their records are pooled per key) in a store and gate them."""
    from farm.results import tags

    base_ids, new_ids = tags.resolve_runs(store, base), tags.resolve_runs(store, new)
    return gate_records(store.records(base_ids), store.records(new_ids),
                        base_run=",".join(base_ids), new_run=",".join(new_ids), **kwargs)


# -- printers ------------------------------------------------------------------------------
_MD_COLUMNS = (("device", "device"), ("route", "route"), ("model", "model"),
               ("variant", "variant"), ("threads", "thr"), ("config", "config"),
               ("n_base", "n base"), ("n_new", "n new"), ("base_ms", "base ms"),
               ("new_ms", "new ms"), ("slowdown_pct", "slowdown"), ("p_value", "p"),
               ("verdict", "verdict"), ("note", "note"))


def _cell(row: GateRow, key: str) -> str:
    value = getattr(row, key)
    if key == "device":
        return device_label(row.device, row.emulated)
    if value is None:
        return "—" if key in ("base_ms", "new_ms", "slowdown_pct", "p_value") else ""
    if key == "slowdown_pct":
        return f"{value:+.1f} %"
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
               "test": "Mann-Whitney U, one-sided (new slower)",
               "passed": result.passed, "regressions": len(result.regressions),
               "exit_code": result.exit_code}
        return textout.pick(fmt, rows, [textout.Field(k) for k in GATE_FIELDS], doc=doc)
    if fmt == "md":
        shown = [{k: _cell(r, k) for k, _ in _MD_COLUMNS} for r in result.rows]
        fields = [textout.Field(k, label, numeric=k in _MD_NUMERIC) for k, label in _MD_COLUMNS]
        return f"**{headline(result)}**\n\n" + textout.md_table(shown, fields)
    raise ValueError(f"unknown output format {fmt!r}; use table, md, json, jsonl or csv")


_MD_NUMERIC = {"threads", "n_base", "n_new", "base_ms", "new_ms", "slowdown_pct", "p_value"}


_STYLE = {REGRESSION: "bold red", SLOWER_NOT_SIGNIFICANT: "yellow", WITHIN_LIMIT: "",
          NOT_SLOWER: "green", NOT_COMPARED: "yellow"}


# layout of the rich table (farm.results.layout), as `farm compare`'s: numbers whole, a long
# configuration a numbered note under the table
_LAYOUT = {"device": Col("device", "whole", keep=True),
           "route": Col("route", "whole", keep=True),
           "model": Col("model", "wrap", cap=20, drop=2),
           "variant": Col("variant", "whole", drop=3),
           "threads": Col("thr", drop=4), "config": Col("config", "note", keep=True, cap=24),
           "n_base": Col("n base", drop=2), "n_new": Col("n new", drop=2),
           "base_ms": Col("base ms", drop=-1), "new_ms": Col("new ms", drop=-1),
           "p_value": Col("p", drop=-1),
           "slowdown_pct": Col("slowdown", keep=True), "verdict": Col("verdict", "wrap", keep=True),
           "note": Col("note", "wrap", cap=40, drop=5)}


def render_gate(result: GateResult, full: bool = False) -> FitTable:
    rows = [[Text(_cell(r, k).strip("*"),
                  style=_STYLE.get(r.verdict, "dim") if k == "verdict" else "")
             for k, _ in _MD_COLUMNS] for r in result.rows]
    return FitTable([_LAYOUT.get(k, Col(label)) for k, label in _MD_COLUMNS], rows,
                    title=headline(result), title_justify="left", full=full,
                    caption=f"slowdown = {result.metric} NEW / {result.metric} BASE - 1 of "
                            "steady-state latency; p = Mann-Whitney U one-sided on raw samples")
