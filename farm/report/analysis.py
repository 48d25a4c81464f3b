"""Derive every table of the triangle report from stored records, and nothing else.

Contract: `analyze(records, run_ids=(), runs=(), seed, n_boot)` -> `Report`;
`load_report(store, run_ids)` reads the records of those runs first. Every figure is
computed here from the records' raw fields (`samples_ms`, `ops`, `sizes`, `peak_*_kb`,
`build_flags`, `status*`): nothing is typed in, and the printers only format.

Tables (`Report.tables`, in order), one row per configuration (see `configs`) unless said:

* latency      – pooled samples: n, rounds, median, 95 % CI of the median (seeded two-level
                 bootstrap over rounds then samples, `farm.results.rounds`), p90, p99, mean,
                 CV, min; spread of the round medians; load and first-run time (median over
                 the records); the records' drift flags and noise warnings.
* memory       – peak VmHWM and PSS in KiB (largest over records), the runner's idle
                 baseline (runtime loaded, no model) and the increment over it, and how
                 it was read.
* size         – runtime, code, weights and total, in KiB (bytes / 1024) from `sizes`, for
                 measured configurations; the total only when all three parts are known.
                 Per route: ORT's weights are the model file (its library is the runtime);
                 custom's are the plan, its runtime the executor; TVM's library splits by
                 its ELF sections (`farm/routes/tvm/elf_sizes.py`): weights are the
                 constants Relax bound, in the form it kept them, code the rest.
* ops          – per-op ms per inference per category (`attention`, `fc`, `layernorm`,
                 `gelu`, `other`) from `ops.categories`; profiled total; the share of the
                 end-to-end median covered by the four named categories and by all
                 profiled time. Profiling runs are separate from the timed runs, so the
                 shares can exceed 100 % when profiling adds overhead: a row outside
                 ±20 % is flagged, with the profiled runs' own wall time (`opcheck`).
                 A named category with no node of its own (ReLU fused into the GEMM
                 epilogue) is None ("—"), not 0 (category_contents.fused_away).
* categories   – which op types each category held, per configuration (category_contents).
* fusion       – one row per fusion pair and block (see `fusion`): end-to-end judged over
                 the paired rounds (reduction, CI, rounds, p, verdict).
* availability – one row per (device, route): available (some configuration measured with
                 valid outputs), configurations valid / attempted, statuses, and why not
                 (the `status_detail` of every record that is not ok).
* build        – build_s and tune_s from `build_flags` and their sum.
* decision     – the decision matrix (see `decision`).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from farm import followup
from farm.errors import StoreError
from farm.report import opcheck
from farm.report.category_contents import categories_table, fused_away
from farm.report.configs import (
    CATEGORIES,
    NAMED_CATEGORIES,
    SIZE_PARTS,
    Config,
    group_records,
)
from farm.report.decision import Decision, build_cost, decisions, left_out, total_size
from farm.report.emulated import mark_emulated
from farm.report.fusion import FusionEffect, fusion_effects
from farm.report.isa_note import mark_isa
from farm.report.reference_note import mark_reference
from farm.report.tables import Column, ReportTable
from farm.results.backend import Store
from farm.results.noise import spread_pct, warnings_of
from farm.results.stats import DEFAULT_N_BOOT, DEFAULT_SEED
from farm.routes import ROUTES

ROUTE_ORDER = {name: i for i, name in enumerate(ROUTES)}  # the registry's order
KIB = 1024.0

_CONFIG_COLS = [Column("device", "device"), Column("route", "route"),
                Column("config", "config"), Column("variant", "variant"),
                Column("threads", "threads", "int")]


@dataclass
class Report:
    """Everything the printers need; `tables` is ordered as the report reads."""

    run_ids: list[str]
    runs: list[dict[str, Any]]
    configs: list[Config]
    fusion: list[FusionEffect]
    decisions: list[Decision]
    tables: dict[str, ReportTable] = field(default_factory=dict)

    @property
    def devices(self) -> list[str]:
        return list(dict.fromkeys(c.device for c in self.configs))

    @property
    def models(self) -> list[str]:
        return list(dict.fromkeys(c.model for c in self.configs if c.model))

    def meta(self) -> dict[str, Any]:
        return {"run_ids": self.run_ids, "devices": self.devices, "models": self.models,
                "runs": self.runs}


def _sort_key(c: Config) -> tuple[Any, ...]:
    return (c.device, c.model, c.variant, c.threads or 0, ROUTE_ORDER.get(c.route, 9),
            c.route, c.fusion is not False, c.label)


def _base(c: Config) -> dict[str, Any]:
    return {"device": c.device, "route": c.route, "config": c.label, "variant": c.variant,
            "threads": c.threads, "model": c.model}


def latency_table(configs: Sequence[Config]) -> ReportTable:
    cols = [*_CONFIG_COLS, Column("isa", "ISA level"), Column("status", "status"),
            Column("n", "n", "int"), Column("rounds", "rounds", "int"),
            Column("median_ms", "median ms", "ms"),
            Column("ci95_low_ms", "CI95 low ms", "ms"),
            Column("ci95_high_ms", "CI95 high ms", "ms"),
            Column("p90_ms", "p90 ms", "ms"), Column("p99_ms", "p99 ms", "ms"),
            Column("cv", "CV", "ratio"),
            Column("min_ms", "min ms", "ms"),
            Column("load_ms", "load ms", "ms"),
            Column("first_run_ms", "first run ms", "ms"),
            Column("spread_pct", "round spread %", "pct"),
            Column("drift", "drift / noise")]
    rows = []
    for c in configs:
        s = c.summary
        medians = list(s.round_medians) if s else []
        steals = [v for r in c.records for v in ((r.get("rounds") or {}).get("steal_pct") or [])]
        row = {**_base(c), "isa": c.isa, "status": c.status, "n": s.n if s else 0,
               "rounds": s.rounds if s else 0, "spread_pct": spread_pct(medians),
               "load_ms": c.median_of("load_ms"), "first_run_ms": c.median_of("first_run_ms"),
               # one column for what the machine did while it measured (a page of 1400 px
               # holds the table): frequency/thermal drift flags, then noise warnings
               "drift": "; ".join([*dict.fromkeys(
                   str(f) for r in c.records for f in (r.get("drift") or [])),
                   *warnings_of(medians, steals)]) or None}
        for key, attr in (("median_ms", "median"), ("ci95_low_ms", "ci95_low"),
                          ("ci95_high_ms", "ci95_high"), ("p90_ms", "p90"), ("p99_ms", "p99"),
                          ("mean_ms", "mean"), ("cv", "cv"), ("min_ms", "min")):
            row[key] = getattr(s, attr) if s else None
        rows.append(row)
    return ReportTable(
        "latency", "End-to-end latency per inference",
        "Steady-state samples pooled over the records of each configuration. median and "
        "p90/p99 by linear interpolation; 95% CI of the median by seeded two-level "
        "bootstrap (rounds, then samples within each round: rounds are the replicates); "
        "n = steady-state samples; round spread = max / min - 1 of the round medians; "
        "drift / noise: frequency or temperature drift flags, then round spread or CPU "
        "steal past their bounds; CV = stddev / mean (the mean is in the json rows); "
        "load and first run: median over the "
        "records (timed apart from the steady state); ISA level: what the route's "
        "kernels were allowed (farm/isa.py).", cols, rows)


def memory_table(configs: Sequence[Config]) -> ReportTable:
    cols = [*_CONFIG_COLS, Column("peak_vmhwm_kb", "peak VmHWM KiB", "kib"),
            Column("baseline_kb", "idle runner KiB", "kib"),
            Column("increment_kb", "model's own KiB", "kib"),
            Column("peak_pss_kb", "peak PSS KiB", "kib"),
            Column("memory_method", "method")]
    rows = [{**_base(c), "peak_vmhwm_kb": c.peak("peak_vmhwm_kb"),
             "baseline_kb": c.memory_baseline_kb(), "increment_kb": c.memory_increment_kb(),
             "peak_pss_kb": c.peak("peak_pss_kb"),
             "memory_method": next((r["memory_method"] for r in c.records
                                    if r.get("memory_method")), None)}
            for c in configs if c.measured]
    return ReportTable(
        "memory", "Peak memory of the route's own process",
        "VmHWM (peak resident set) and PSS read in the fresh child process that ran the "
        "route; KiB, largest value over the configuration's records. idle runner = the "
        "runner's VmHWM with its runtime loaded and no model or session (a Python process "
        "with numpy and onnxruntime for ORT, the C/C++ binary for TVM and custom); model's "
        "own = peak - idle runner, what the decision matrix ranks.", cols, rows)


def size_table(configs: Sequence[Config]) -> ReportTable:
    cols = [*_CONFIG_COLS[:3]] + [Column(f"{p}_kib", f"{p} KiB", "kib1") for p in SIZE_PARTS]
    cols.append(Column("total_kib", "total KiB", "kib1"))
    rows = []
    for c in configs:
        sizes = c.first_json("sizes")
        if not sizes or not c.measured:
            continue
        row = _base(c)
        for p in SIZE_PARTS:
            v = sizes.get(p)
            row[f"{p}_kib"] = float(v) / KIB if isinstance(v, (int, float)) else None
        total = total_size(c)
        row["total_kib"] = total / KIB if total is not None else None
        rows.append(row)
    return ReportTable(
        "size", "Binary size per route",
        "Bytes on the device / 1024: runtime (shared libraries, interpreter-side runtime), "
        "code (compiled kernels, executor), weights (model parameters); — = not recorded by "
        "the route, and then no total.", cols, rows)


def ops_table(configs: Sequence[Config]) -> ReportTable:
    cols = [*_CONFIG_COLS[:4]] + [Column(cat, f"{cat} ms", "ms") for cat in CATEGORIES]
    cols += [Column("profiled_ms", "profiled total ms", "ms"),
             Column("e2e_median_ms", "end-to-end median ms", "ms"),
             Column("named_share_pct", "4 categories % of e2e", "pct"),
             Column("profiled_share_pct", "profiled % of e2e", "pct"), *opcheck.COLUMNS]
    rows = []
    for c in configs:
        cats = c.categories_ms()
        if cats is None:
            continue
        row = {**_base(c), **fused_away(c, cats)}
        profiled = sum(cats.values())
        named = sum(cats[k] for k in NAMED_CATEGORIES)
        median = c.summary.median if c.summary else None
        row.update(profiled_ms=profiled, e2e_median_ms=median,
                   named_share_pct=named / median * 100 if median else None,
                   profiled_share_pct=profiled / median * 100 if median else None,
                   **opcheck.check_fields(c.records, profiled, median))
        rows.append(row)
    return ReportTable(
        "ops", "Per-op latency by category",
        "ms per inference of each op category: each op's median over the separate profiling "
        "runs, summed per category (averaged over records); shares are of the end-to-end "
        "median." + opcheck.CAPTION, cols, rows)


# What "fusion off" runs on each route, so a reduction is read against the right baseline:
# none of them is "no optimisation at all".
FUSION_OFF_MEANS = (
    "Fusion off means: custom — the same plan and kernels, each op run as separate steps with "
    "every intermediate in memory (GEMM, then bias add, then activation; residual Add, then "
    "LayerNorm/NoNorm; attention as Q·Kᵀ into a full [B,H,S,S] score tensor, scale, mask, "
    "softmax, ·V), one thread-pool job per step (fused, the row-local ops between two "
    "attentions are one job, each thread taking its rows through all of them: at more than "
    "one thread the reduction includes that schedule); the plan's own rewrites stay (Q and K "
    "in one GEMM, NoNorm folded into weights, int8 weights packed). ORT — "
    "graph_optimization_level DISABLE_ALL: no fusions, but also no constant folding or layout "
    "changes. TVM — no FuseOps/FuseTIR: every Relax op its own scheduled kernel (the same "
    "schedules, the same fast-math rewrites).")


def fusion_table(effects: Sequence[FusionEffect]) -> ReportTable:
    cols = [Column("device", "device"), Column("route", "route"),
            Column("variant", "variant"), Column("threads", "threads", "int"),
            Column("block", "block"), Column("off_config", "fusion off config"),
            Column("on_config", "fusion on config"), Column("off_ms", "off ms", "ms"),
            Column("on_ms", "on ms", "ms"), Column("reduction_pct", "reduction %", "spct"),
            Column("ci_low_pct", "95% CI low %", "spct"),
            Column("ci_high_pct", "95% CI high %", "spct"),
            Column("rounds", "rounds", "int"), Column("p_value", "p", "num"),
            Column("verdict", "verdict"), Column("method", "uncertainty")]
    rows = [{"device": e.device, "route": e.route, "variant": e.variant, "threads": e.threads,
             "model": e.model, "block": e.block, "off_config": e.off_label,
             "on_config": e.on_label, "off_ms": e.off_ms, "on_ms": e.on_ms,
             "reduction_pct": e.reduction_pct, "ci_low_pct": e.ci_low_pct,
             "ci_high_pct": e.ci_high_pct, "rounds": e.rounds or None, "p_value": e.p_value,
             "significant": e.significant, "verdict": e.verdict, "method": e.method}
            for e in effects]
    caption = ("reduction = (off - on) / off. End-to-end: judged over the rounds both ran "
               "in, paired: 1 - median of the per-round ratios on/off of round medians, 95% "
               "CI by seeded paired bootstrap of the rounds, verdict by Wilcoxon signed-rank "
               "(exact, alpha 0.05; 'not enough rounds to judge' below 6 shared rounds). "
               "attention = attention category, FFN = fc + gelu categories of one round's "
               "per-op profile: where the time went, not judged over rounds. "
               + FUSION_OFF_MEANS)
    if not rows:
        caption += (" No pair here: no configuration was measured both with fusion off "
                    "({'fusion': false} / ORT opt_level disable) and on.")
    return ReportTable("fusion", "Fusion effect (off → on)", caption, cols, rows)


def availability_table(configs: Sequence[Config]) -> ReportTable:
    cols = [Column("device", "device"), Column("route", "route"),
            Column("available", "available"), Column("valid", "valid configs", "int"),
            Column("attempted", "attempted configs", "int"), Column("statuses", "statuses"),
            Column("why_not", "why not")]
    by_route: dict[tuple[str, str], list[Config]] = {}
    for c in configs:
        by_route.setdefault((c.device, c.route), []).append(c)
    rows = []
    for (device, route), group in by_route.items():
        statuses: dict[str, int] = {}
        for c in group:
            for s in c.statuses:
                statuses[s] = statuses.get(s, 0) + 1
        details = list(dict.fromkeys(d for c in group for d in c.details))
        valid = sum(1 for c in group if c.valid)
        rows.append({"device": device, "route": route, "available": valid > 0,
                     "valid": valid, "attempted": len(group),
                     "statuses": ", ".join(f"{s}×{n}" for s, n in statuses.items()),
                     "why_not": "; ".join(details) or None})
    return ReportTable(
        "availability", "Route availability",
        "available = at least one configuration measured with valid outputs; why not = "
        "status detail of every record that is not ok.", cols, rows)


def build_table(configs: Sequence[Config]) -> ReportTable:
    cols = [*_CONFIG_COLS[:3], Column("build_s", "build s", "s"),
            Column("tune_s", "tune s", "s"), Column("total_s", "build + tune s", "s")]
    rows = [{**_base(c), "build_s": c.cost_s("build_s"), "tune_s": c.cost_s("tune_s"),
             "total_s": build_cost(c)} for c in configs]
    return ReportTable(
        "build", "Build and tuning time",
        "Wall-clock seconds the route's artifacts cost when first built and tuned (also when "
        "a bench found them cached), as recorded in build_flags (— = not recorded); ORT "
        "compiles nothing ahead of time (0 s): its graph optimisation is in load ms.",
        cols, rows)


def _margin_text(margin: float | None, unit: str) -> str | None:
    if margin is None:
        return None
    if unit == "pp":
        return f"{margin:.1f} pp"
    # past +100 % a ratio reads better ("801× slower" beats "+80000 %")
    return f"+{margin:.1f} %" if margin < 100 else f"{margin / 100 + 1:.1f}×"


def decision_table(rows_in: Sequence[Decision], left: Sequence[str] = ()) -> ReportTable:
    cols = [Column("device", "device"), Column("scope", "model / variant / threads"),
            Column("criterion", "criterion"), Column("statistic", "statistic"),
            Column("unit", "unit"), Column("winner", "winner"),
            Column("winner_value", "winner value", "num"), Column("runner_up", "runner-up"),
            Column("runner_up_value", "runner-up value", "num"),
            Column("margin", "margin"), Column("verdict", "verdict"), Column("note", "note")]
    rows = []
    for d in rows_in:
        margin = _margin_text(d.margin, d.margin_unit)
        rows.append({"device": d.device, "scope": d.scope, "criterion": d.criterion,
                     "statistic": d.statistic, "unit": d.unit, "winner": d.winner,
                     "winner_value": d.winner_value, "runner_up": d.runner_up,
                     "runner_up_value": d.runner_up_value, "margin": margin,
                     "margin_value": d.margin, "verdict": d.verdict, "note": d.note or None})
    caption = ("Per device: the winning route of each criterion and its margin over the "
               "runner-up (runner-up / winner - 1; coverage in percentage points). Fastest: "
               "judged over the rounds winner and runner-up shared (Wilcoxon signed-rank on "
               "paired round medians, alpha 0.05; 'not enough rounds to judge' below 6). "
               "Leanest: ranked on the memory the model adds to the idle runner (peak VmHWM "
               "- runtime loaded without a model), so a Python runtime is not set against a "
               "C binary; the note shows increment and total. Candidates: each route's "
               "fastest valid configuration with fusion on.")
    if left:
        caption += " Left out: " + "; ".join(left) + "."
    return ReportTable("decision", "Decision matrix", caption, cols, rows)


def load_report(store: Store, run_ids: Sequence[str], *, seed: int = DEFAULT_SEED,
                n_boot: int = DEFAULT_N_BOOT) -> Report:
    """The report of the given (already resolved) run ids, read from `store`."""
    if not run_ids:
        raise StoreError(f"no run given to report on from {store.where}",
                         hint=f"name a run id (see `{followup.command('results', 'list')}`) "
                              "or use --latest")
    records = store.records(run_id=list(run_ids))
    if not records:
        raise StoreError(f"runs {', '.join(run_ids)} have no records in {store.where}",
                         hint="the bench may have failed before measuring; see "
                              f"`{followup.command('results', 'list')}`")
    wanted = set(run_ids)
    runs = [{"run_id": r.run_id, "started_utc": r.started_utc, "finished_utc": r.finished_utc,
             "status": r.status, "command": r.command, "n_records": r.n_records}
            for r in store.runs() if r.run_id in wanted]
    return analyze(records, run_ids=run_ids, runs=runs, seed=seed, n_boot=n_boot)


def analyze(records: Iterable[Mapping[str, Any]], *, run_ids: Sequence[str] = (),
            runs: Sequence[Mapping[str, Any]] = (), seed: int = DEFAULT_SEED,
            n_boot: int = DEFAULT_N_BOOT) -> Report:
    configs = sorted(group_records(records), key=_sort_key)
    effects = fusion_effects(configs, seed=seed, n_boot=n_boot)
    decided = decisions(configs)
    report = Report(list(run_ids), [dict(r) for r in runs], configs, effects, decided)
    for table in (latency_table(configs), memory_table(configs), size_table(configs),
                  ops_table(configs), categories_table(configs), fusion_table(effects),
                  availability_table(configs), build_table(configs),
                  decision_table(decided, left_out(configs))):
        report.tables[table.name] = table
    mark_emulated(report)
    mark_isa(report)
    mark_reference(report)
    return report
