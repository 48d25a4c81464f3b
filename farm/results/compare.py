"""Compare two runs, configuration by configuration, and say whether B differs from A.

Contract: `compare_records(records_a, records_b)` -> one `Comparison` per key
(device, route, variant, threads, config) found in either run, sorted by key, where config
is the label of the record's configuration flags (`farm.results.config_flags`), so e.g.
fusion-on and fusion-off records of one triangle are never pooled together:

* `ratio` = median(B) / median(A) of the pooled steady-state samples (< 1: B is faster);
* `ratio_ci_low/high`: 95% CI of that ratio from the two-level bootstrap of each run
  (rounds, then samples within each round; seeded; `farm.results.rounds`);
* `rounds_a/b`: the rounds of each side, the replicates the test counts: samples of one
  round share the machine's state and are not independent;
* `p_value`: Mann-Whitney U, two-sided, exact, on the round medians of A and B
  (`rounds.unpaired_test`); None when the rounds are too few to ever reach alpha;
* `floor_pct`: the device's noise floor (`farm devices calibrate`, `farm.results.floor`);
* `verdict`, first that applies: "only in A" / "only in B" / "not measured" (a side has no
  samples) / "not compared: emulated" (an emulator's latency is not the device's) /
  "within noise (±x %)" (|ratio - 1| inside the floor: identical runs move that much) /
  "not enough rounds to judge" / "faster" or "slower" (B relative to A) when p < alpha
  (0.05) / "no significant difference".

Several records of one key in one run are pooled (their rounds added up). `note` says what
the reader should know: different models, invalid outputs, drift flags, pooling, noise.
`format_comparisons` / `render_comparisons` print the result (table|json|jsonl|csv|md).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, fields
from typing import Any

import numpy as np
from rich.text import Text

from farm.results import textout
from farm.results.emulation import NOT_COMPARED, WHY, device_label, is_emulated
from farm.results.floor import Floor, load_floors, noise_verdict, within
from farm.results.keys import KEY_FIELDS, config_key, group_by, sort_key
from farm.results.layout import Col, FitTable
from farm.results.noise import noise_warnings
from farm.results.rounds import (
    NOT_ENOUGH,
    UNPAIRED_TEST,
    hierarchical_medians,
    records_rounds,
    unpaired_test,
)
from farm.results.stats import DEFAULT_N_BOOT, DEFAULT_SEED
from farm.results.textout import Field

ALPHA = 0.05
FASTER, SLOWER, SAME = "faster", "slower", "no significant difference"
ONLY_A, ONLY_B, NOT_MEASURED = "only in A", "only in B", "not measured"
__all__ = ["KEY_FIELDS", "Comparison", "compare_records", "compare_runs", "config_key",
           "format_comparisons", "group_by", "render_comparisons", "sort_key"]


@dataclass(frozen=True)
class Comparison:
    device: str
    route: str
    variant: str | None
    threads: int | None
    config: str
    n_a: int
    n_b: int
    rounds_a: int
    rounds_b: int
    median_a_ms: float | None
    median_b_ms: float | None
    ratio: float | None
    ratio_ci_low: float | None
    ratio_ci_high: float | None
    p_value: float | None
    floor_pct: float | None
    verdict: str
    note: str
    emulated: bool = False

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def _side(recs: list[dict[str, Any]], name: str) -> tuple[list[np.ndarray], list[str]]:
    """The rounds of one side and the notes about it."""
    notes: list[str] = []
    for r in recs:
        if r.get("status") == "invalid":
            notes.append(f"{name} outputs invalid")
        if r.get("drift"):
            notes.append(f"{name} drift: {len(r['drift'])} flag(s)")
        notes += [f"{name} noisy: {w}" for w in noise_warnings(r)]
    if len(recs) > 1:
        notes.append(f"{name} pools {len(recs)} records")
    rounds = records_rounds(recs)
    if not rounds:
        why = "; ".join(f"{r.get('status')}: {r.get('status_detail') or 'no samples'}"
                        for r in recs)
        notes.append(f"{name} not measured ({why})")
    return rounds, notes


def ratio_ci(a: list[np.ndarray], b: list[np.ndarray], *, seed: int = DEFAULT_SEED,
             n_boot: int = DEFAULT_N_BOOT) -> tuple[float, float] | None:
    """95% CI of median(b) / median(a), each side's median from the two-level bootstrap
    of its rounds; None if a median can be 0."""
    rng = np.random.default_rng(seed)
    ma = hierarchical_medians(a, rng, n_boot)
    mb = hierarchical_medians(b, rng, n_boot)
    if np.any(ma <= 0):
        return None
    low, high = np.percentile(mb / ma, [2.5, 97.5])
    return float(low), float(high)


def _test(a: list[np.ndarray], b: list[np.ndarray], alpha: float, seed: int, n_boot: int,
          floor: Floor | None) -> dict[str, Any]:
    med_a, med_b = float(np.median(np.concatenate(a))), float(np.median(np.concatenate(b)))
    ratio = med_b / med_a if med_a > 0 else None
    ci = ratio_ci(a, b, seed=seed, n_boot=n_boot)
    test = unpaired_test([float(np.median(r)) for r in a], [float(np.median(r)) for r in b],
                         alpha=alpha)
    change = None if ratio is None else (ratio - 1.0) * 100.0
    if floor is not None and within(change, floor):
        verdict = noise_verdict(floor)
    elif not test.judged:
        verdict = NOT_ENOUGH
    elif test.significant(alpha) and ratio is not None and ratio != 1.0:
        verdict = SLOWER if ratio > 1.0 else FASTER
    else:
        verdict = SAME
    return {"median_a_ms": med_a, "median_b_ms": med_b, "ratio": ratio,
            "ratio_ci_low": ci[0] if ci else None, "ratio_ci_high": ci[1] if ci else None,
            "p_value": test.p_value, "verdict": verdict}


def compare_records(
    records_a: Sequence[dict[str, Any]], records_b: Sequence[dict[str, Any]], *,
    alpha: float = ALPHA, seed: int = DEFAULT_SEED, n_boot: int = DEFAULT_N_BOOT,
    floors: Mapping[str, Floor] | None = None,
) -> list[Comparison]:
    """Compare run A with run B per (device, route, variant, threads, config); `floors`:
    device -> its noise floor (`farm.results.floor`), when calibrated."""
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
        floor = (floors or {}).get(str(key[0]))
        if not recs_b:
            result["verdict"] = ONLY_A
        elif not recs_a:
            result["verdict"] = ONLY_B
        elif not a or not b:
            result["verdict"] = NOT_MEASURED
        else:
            result = _test(a, b, alpha, seed, n_boot, floor)
            if floor is None:  # the reader should know nothing guards against run-to-run
                notes.append(f"no noise floor for {key[0]}: `farm devices calibrate "
                             f"{key[0]}` measures it")
        emulated = any(is_emulated(r) for r in recs_a + recs_b)
        if emulated and result["verdict"] not in (ONLY_A, ONLY_B, NOT_MEASURED):
            # medians shown for the record, but no ratio, test or verdict on them
            result.update(ratio=None, ratio_ci_low=None, ratio_ci_high=None, p_value=None,
                          verdict=NOT_COMPARED)
            notes.insert(0, WHY)
        out.append(Comparison(*key, n_a=sum(r.size for r in a), n_b=sum(r.size for r in b),
                              rounds_a=len(a), rounds_b=len(b),
                              floor_pct=floor.pct() if floor is not None else None,
                              note="; ".join(notes), emulated=emulated, **result))
    return out


COMPARISON_FIELDS = tuple(f.name for f in fields(Comparison))
_NUMERIC = {"threads", "n_a", "n_b", "rounds_a", "rounds_b", "median_a_ms", "median_b_ms",
            "ratio", "ratio_ci_low", "ratio_ci_high", "p_value", "floor_pct"}


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
                  NOT_ENOUGH: "yellow",
                  NOT_COMPARED: "yellow"}


# layout of the rich table (farm.results.layout): numbers whole, the configuration (it tells
# ORT's fused and unfused rows apart) kept, as a numbered note under the table when long
# (ORT's is ~90 characters), notes wrap
_LAYOUT = [Col("device", "whole", keep=True), Col("route", "whole", keep=True),
           Col("variant", "whole", drop=3), Col("threads", drop=4),
           Col("config", "note", keep=True, cap=24), Col("rounds A/B", drop=2),
           Col("n A", drop=2), Col("n B", drop=2),
           Col("median A ms", drop=-1), Col("median B ms", drop=-1),
           Col("ratio B/A", keep=True), Col("95% CI of ratio", drop=1), Col("p", drop=-1),
           Col("verdict", "wrap", keep=True),
           Col("note", "wrap", cap=40, drop=5)]


def render_comparisons(comps: Sequence[Comparison], run_a: str, run_b: str, *,
                       alpha: float = ALPHA, full: bool = False) -> FitTable:
    """Rich table laid out for the width it is printed at; the caption names the statistic,
    the test and the noise floor. `full`: no column left out (`--columns all`)."""
    rows = []
    for c in comps:
        ci = ("" if c.ratio_ci_low is None or c.ratio_ci_high is None
              else f"[{c.ratio_ci_low:.3f}, {c.ratio_ci_high:.3f}]")
        cells = [device_label(c.device, c.emulated), c.route, _cell(c.variant, "variant"),
                 _cell(c.threads, "threads"), c.config, f"{c.rounds_a}/{c.rounds_b}",
                 str(c.n_a), str(c.n_b), _cell(c.median_a_ms, "m"), _cell(c.median_b_ms, "m"),
                 _cell(c.ratio, "ratio"), ci, _cell(c.p_value, "p_value")]
        rows.append([*(Text(x) for x in cells),
                     Text(c.verdict, style=_VERDICT_STYLE.get(c.verdict, "dim")),
                     Text(c.note)])
    return FitTable(
        _LAYOUT, rows, title=f"B = {run_b}  vs  A = {run_a}",
        caption=(f"ratio = median B / median A of steady-state latency (< 1: B faster), "
                 f"95% CI by two-level bootstrap (rounds, then samples); p = "
                 f"{UNPAIRED_TEST}, two-sided, alpha {alpha}; within noise = inside the "
                 f"device's floor from `farm devices calibrate` (±%, A/A runs)"),
        full=full)


def compare_runs(store: Any, run_a: str, run_b: str, *, alpha: float = ALPHA
                 ) -> tuple[str, str, list[Comparison]]:
    """Resolve two run ids (prefix or "latest") in a `ResultStore` and compare them, with
    the noise floors the store keeps for their devices."""
    a, b = store.resolve_run(run_a), store.resolve_run(run_b)
    recs_a, recs_b = store.records(a), store.records(b)
    floors = load_floors(store, {str(r.get("device")) for r in recs_a + recs_b})
    return a, b, compare_records(recs_a, recs_b, alpha=alpha, floors=floors)
