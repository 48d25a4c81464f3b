"""Compare two runs, configuration by configuration, and say whether B differs from A.

Contract: `compare_records(records_a, records_b)` -> one `Comparison` per key
(device, route, variant, threads, config) found in either run, sorted by key, where config
is the label of the record's configuration flags (`farm.results.config_flags`), so e.g.
fusion-on and fusion-off records of one triangle are never pooled together:

* `ratio` = median(B) / median(A) of the raw steady-state samples (< 1: B is faster);
* `ratio_ci_low/high`: 95% percentile-bootstrap CI of that ratio (each run resampled
  independently, seeded; see `farm.results.stats`);
* `p_value`: Mann-Whitney U, two-sided (scipy.stats.mannwhitneyu, its default method:
  exact for small samples without ties, else normal approximation with tie correction)
  on the raw samples of A and B; the direction is the test's (U of A vs n_a*n_b/2);
* `verdict`: "faster" / "slower" (B relative to A) when p < alpha (0.05), otherwise
  "no significant difference"; "only in A", "only in B" or "not measured" (a side has no
  samples: failed, unavailable) when there is nothing to test; "not compared: emulated"
  when a side was measured under an emulator (its latency is not the device's).

Several records of one key in one run (repeats) are pooled. `note` says what the reader
should know: different models, invalid outputs, drift flags, pooling.
`format_comparisons` / `render_comparisons` print the result (table|json|jsonl|csv|md).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, fields
from typing import Any

import numpy as np
from rich.text import Text
from scipy.stats import mannwhitneyu

from farm.results import textout
from farm.results.config_flags import config_flags, config_label
from farm.results.emulation import NOT_COMPARED, WHY, device_label, is_emulated
from farm.results.layout import Col, FitTable
from farm.results.stats import DEFAULT_N_BOOT, DEFAULT_SEED, bootstrap_medians
from farm.results.textout import Field

ALPHA = 0.05
FASTER, SLOWER, SAME = "faster", "slower", "no significant difference"
ONLY_A, ONLY_B, NOT_MEASURED = "only in A", "only in B", "not measured"
KEY_FIELDS = ("device", "route", "variant", "threads", "config")


@dataclass(frozen=True)
class Comparison:
    device: str
    route: str
    variant: str | None
    threads: int | None
    config: str
    n_a: int
    n_b: int
    median_a_ms: float | None
    median_b_ms: float | None
    ratio: float | None
    ratio_ci_low: float | None
    ratio_ci_high: float | None
    p_value: float | None
    verdict: str
    note: str
    emulated: bool = False

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def config_key(rec: dict[str, Any], fields: Sequence[str] = KEY_FIELDS) -> tuple[Any, ...]:
    """(the record's values of `fields` but the last, its configuration label): the key
    two runs' records are paired by (`farm compare`; the gate adds the model)."""
    config = config_label(config_flags(rec.get("build_flags")))
    return (*(rec.get(k) for k in fields[:-1]), config)


def sort_key(key: tuple[Any, ...]) -> tuple[str, ...]:
    return tuple("" if v is None else f"{v:08d}" if isinstance(v, int) else str(v)
                 for v in key)


def group_by(records: Sequence[dict[str, Any]],
             key: Callable[[dict[str, Any]], tuple[Any, ...]] = config_key,
             ) -> dict[tuple[Any, ...], list[dict[str, Any]]]:
    out: dict[tuple[Any, ...], list[dict[str, Any]]] = {}
    for rec in records:
        out.setdefault(key(rec), []).append(rec)
    return out


def _side(recs: list[dict[str, Any]], name: str) -> tuple[list[float], list[str]]:
    samples: list[float] = []
    notes: list[str] = []
    for r in recs:
        samples += [float(v) for v in (r.get("samples_ms") or [])]
        if r.get("status") == "invalid":
            notes.append(f"{name} outputs invalid")
        if r.get("drift"):
            notes.append(f"{name} drift: {len(r['drift'])} flag(s)")
    if len(recs) > 1:
        notes.append(f"{name} pools {len(recs)} records")
    if not samples:
        why = "; ".join(f"{r.get('status')}: {r.get('status_detail') or 'no samples'}"
                        for r in recs)
        notes.append(f"{name} not measured ({why})")
    return samples, notes


def ratio_ci(a: Sequence[float], b: Sequence[float], *, seed: int = DEFAULT_SEED,
             n_boot: int = DEFAULT_N_BOOT) -> tuple[float, float] | None:
    """95% percentile-bootstrap CI of median(b) / median(a); None if a median can be 0."""
    rng = np.random.default_rng(seed)
    ma = bootstrap_medians(a, rng, n_boot)
    mb = bootstrap_medians(b, rng, n_boot)
    if np.any(ma <= 0):
        return None
    low, high = np.percentile(mb / ma, [2.5, 97.5])
    return float(low), float(high)


def _test(a: list[float], b: list[float], alpha: float, seed: int, n_boot: int
          ) -> dict[str, Any]:
    med_a, med_b = float(np.median(a)), float(np.median(b))
    ratio = med_b / med_a if med_a > 0 else None
    ci = ratio_ci(a, b, seed=seed, n_boot=n_boot)
    test = mannwhitneyu(a, b, alternative="two-sided")
    p = float(test.pvalue)
    if math.isnan(p):  # every sample of both runs equal: no evidence of a difference
        p = 1.0
    # the direction comes from the test itself: U of A above n_a*n_b/2 means A's
    # samples tend to be the larger (slower) ones
    a_slower = float(test.statistic) > len(a) * len(b) / 2
    verdict = (FASTER if a_slower else SLOWER) if p < alpha else SAME
    return {"median_a_ms": med_a, "median_b_ms": med_b, "ratio": ratio,
            "ratio_ci_low": ci[0] if ci else None, "ratio_ci_high": ci[1] if ci else None,
            "p_value": p, "verdict": verdict}


def compare_records(
    records_a: Sequence[dict[str, Any]], records_b: Sequence[dict[str, Any]], *,
    alpha: float = ALPHA, seed: int = DEFAULT_SEED, n_boot: int = DEFAULT_N_BOOT,
) -> list[Comparison]:
    """Compare run A with run B per (device, route, variant, threads, config)."""
    groups_a, groups_b = group_by(records_a), group_by(records_b)
    out: list[Comparison] = []
    for key in sorted(set(groups_a) | set(groups_b), key=sort_key):
        recs_a, recs_b = groups_a.get(key, []), groups_b.get(key, [])
        a, notes_a = _side(recs_a, "A") if recs_a else ([], [])
        b, notes_b = _side(recs_b, "B") if recs_b else ([], [])
        notes = notes_a + notes_b
        models_a = {(r.get("model"), r.get("model_hash")) for r in recs_a}
        models_b = {(r.get("model"), r.get("model_hash")) for r in recs_b}
        if recs_a and recs_b and models_a != models_b:
            notes.insert(0, "models differ: "
                         f"{sorted(str(m[0]) for m in models_a)} vs "
                         f"{sorted(str(m[0]) for m in models_b)}")
        result: dict[str, Any] = dict.fromkeys(
            ("median_a_ms", "median_b_ms", "ratio", "ratio_ci_low", "ratio_ci_high",
             "p_value"))
        if not recs_b:
            result["verdict"] = ONLY_A
        elif not recs_a:
            result["verdict"] = ONLY_B
        elif not a or not b:
            result["verdict"] = NOT_MEASURED
        else:
            result = _test(a, b, alpha, seed, n_boot)
        emulated = any(is_emulated(r) for r in recs_a + recs_b)
        if emulated and result["verdict"] not in (ONLY_A, ONLY_B, NOT_MEASURED):
            # medians shown for the record, but no ratio, test or verdict on them
            result.update(ratio=None, ratio_ci_low=None, ratio_ci_high=None, p_value=None,
                          verdict=NOT_COMPARED)
            notes.insert(0, WHY)
        out.append(Comparison(*key, n_a=len(a), n_b=len(b), note="; ".join(notes),
                              emulated=emulated, **result))
    return out


COMPARISON_FIELDS = tuple(f.name for f in fields(Comparison))
_NUMERIC = {"threads", "n_a", "n_b", "median_a_ms", "median_b_ms", "ratio",
            "ratio_ci_low", "ratio_ci_high", "p_value"}


def _cell(value: Any, name: str) -> str:
    if value is None:
        return ""
    if name == "p_value":
        return f"{value:.3g}"
    if name == "ratio":
        return f"{value:.3f}x"
    if isinstance(value, float):
        return f"{value:.3f}"
    return str(value)


def format_comparisons(comps: Sequence[Comparison], fmt: str, *, alpha: float = ALPHA
                       ) -> str:
    """md/csv: one row per configuration, the statistics named by their field; json/jsonl
    the same fields raw (through the one format switch, `farm.results.textout`)."""
    fields = [Field(k, numeric=k in _NUMERIC, text=lambda v, k=k: _cell(v, k))
              for k in COMPARISON_FIELDS]
    try:
        rows = [c.as_dict() for c in comps]
        if fmt == "md":
            for r in rows:
                r["device"] = device_label(r["device"], r["emulated"])
        return textout.pick(fmt, rows, fields,
                            doc={"alpha": alpha}, rows_key="comparisons")
    except ValueError:
        raise ValueError(f"unknown output format {fmt!r}; use table, json, jsonl, csv or md"
                         ) from None


_VERDICT_STYLE = {FASTER: "green", SLOWER: "red", SAME: "", NOT_MEASURED: "yellow",
                  NOT_COMPARED: "yellow"}


# layout of the rich table (farm.results.layout): numbers whole, the configuration (it tells
# ORT's fused and unfused rows apart) kept, as a numbered note under the table when long
# (ORT's is ~90 characters), notes wrap
_LAYOUT = [Col("device", "whole", keep=True), Col("route", "whole", keep=True),
           Col("variant", "whole", drop=3), Col("threads", drop=4),
           Col("config", "note", keep=True, cap=24), Col("n A", drop=2), Col("n B", drop=2),
           Col("median A ms", drop=-1), Col("median B ms", drop=-1),
           Col("ratio B/A", keep=True), Col("95% CI of ratio", drop=1), Col("p", drop=-1),
           Col("verdict", "wrap", keep=True),
           Col("note", "wrap", cap=40, drop=5)]


def render_comparisons(comps: Sequence[Comparison], run_a: str, run_b: str, *,
                       alpha: float = ALPHA, full: bool = False) -> FitTable:
    """Rich table laid out for the width it is printed at; the caption names the statistic
    and the test. `full`: no column left out (`--columns all`)."""
    rows = []
    for c in comps:
        ci = ("" if c.ratio_ci_low is None or c.ratio_ci_high is None
              else f"[{c.ratio_ci_low:.3f}, {c.ratio_ci_high:.3f}]")
        cells = [device_label(c.device, c.emulated), c.route, _cell(c.variant, "variant"),
                 _cell(c.threads, "threads"), c.config,
                 str(c.n_a), str(c.n_b), _cell(c.median_a_ms, "m"), _cell(c.median_b_ms, "m"),
                 _cell(c.ratio, "ratio"), ci, _cell(c.p_value, "p_value")]
        rows.append([*(Text(x) for x in cells),
                     Text(c.verdict, style=_VERDICT_STYLE.get(c.verdict, "dim")),
                     Text(c.note)])
    return FitTable(
        _LAYOUT, rows, title=f"B = {run_b}  vs  A = {run_a}",
        caption=(f"ratio = median B / median A of steady-state latency (< 1: B faster), "
                 f"95% CI by bootstrap; p = Mann-Whitney U two-sided on raw samples, "
                 f"alpha {alpha}"),
        full=full)


def compare_runs(store: Any, run_a: str, run_b: str, *, alpha: float = ALPHA
                 ) -> tuple[str, str, list[Comparison]]:
    """Resolve two run ids (prefix or "latest") in a `ResultStore` and compare them."""
    a, b = store.resolve_run(run_a), store.resolve_run(run_b)
    return a, b, compare_records(store.records(a), store.records(b), alpha=alpha)
