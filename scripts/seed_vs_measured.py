#!/usr/bin/env python3
"""Write docs/seed-vs-measured.md from stored `farm triangle` runs of MobileBERT.

    python scripts/seed_vs_measured.py [--store FILE] [--run RUN ...] [--emulated-run RUN ...]
                                       [--model mobilebert] [--variant int8-dynamic]
                                       [--device local] [--emulated-device pixel7]
                                       [--out docs/seed-vs-measured.md]

Without --run, the latest run in the store with records of the model/variant on --device is
used (likewise --emulated-run on --emulated-device). Every measured figure comes from the
stored records through farm.report.analysis (the same numbers `farm report` prints); the
reading is generated from them. The seed column holds the seed article's own figures
(`SEED`, `SEED_CLAIMS`: iPhone 14 Pro / Apple A16, MobileBERT-uncased INT8, seq 128; hard-coded
in the article's example program, not measured by a published harness), each cited as "the
seed article"; a figure the article does not state reads "not stated".
"""

from __future__ import annotations

import argparse
import platform
import shlex
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from farm.report.analysis import Report, load_report
from farm.report.category_contents import categories_table
from farm.report.tables import Column, ReportTable, cell, table_md
from farm.results.store import ResultStore, default_store_path

ROUTES = ("ort", "tvm", "custom")
CATS = ("attention", "fc", "layernorm", "gelu")
# The seed article's figures, keyed like the rows below ("e2e/ort", "op/custom/fc", ...), as
# the text its column shows. Its per-op figures are µs per operator instance (it says neither
# how many instances a model has nor how they were timed); its sizes and memory are MB.
SEED_SOURCE = "the seed article"
SEED_SETTING = "iPhone 14 Pro (Apple A16, 6 GB), MobileBERT-uncased INT8, sequence length 128"
SEED: dict[str, str] = {
    "e2e/ort": "24.7 ms", "e2e/tvm": "28.5 ms", "e2e/custom": "21.3 ms",
    "op/tvm/attention": "320 µs / op", "op/tvm/fc": "85 µs / op",
    "op/tvm/layernorm": "12 µs / op", "op/tvm/gelu": "45 µs / op",
    "op/ort/attention": "290 µs / op", "op/ort/fc": "72 µs / op",
    "op/ort/layernorm": "8 µs / op (CoreML/ANE)", "op/ort/gelu": "50 µs / op (CPU fallback)",
    "op/custom/attention": "250 µs / op", "op/custom/fc": "65 µs / op (Q4 unpack fused)",
    "op/custom/layernorm": "10 µs / op", "op/custom/gelu": "38 µs / op (lookup table)",
    "size/tvm": "4.2 MB", "size/ort": "6.8 MB", "size/custom": "1.8 MB",
    "mem/tvm": "180 MB", "mem/ort": "165 MB", "mem/custom": "155 MB",
    # attention block: unfused 320 µs; TVM MatMul+Scale+Softmax 210 µs; custom's hand
    # fusion (Q4 unpack + MatMul + BiasAdd + GELU) 155 µs
    "fusion-attention/tvm": "+34.4 % (320 → 210 µs)",
    "fusion-attention/custom": "+51.6 % (320 → 155 µs)",
    "decision/fastest": "custom (21.3 ms)", "decision/smallest": "custom (1.8 MB)",
    "decision/leanest": "custom (155 MB)",
    "decision/coverage": "tvm (very high) > ort (high) > custom (low)",
}
# its claims in words: custom faster than ORT / TVM end to end by this fraction
SEED_CLAIMS = {"ort": 0.138, "tvm": 0.253}
NOT_STATED = "not stated"


def _latest_run(store: ResultStore, device: str, model: str) -> list[str]:
    recs = [r for r in store.records(device=device) if str(r.get("model") or "") == model]
    return [recs[-1]["run_id"]] if recs else []


def _rows(table: ReportTable, **match: Any) -> list[dict[str, Any]]:
    return [r for r in table.rows if all(r.get(k) == v for k, v in match.items())]


def _primary(rows: list[dict[str, Any]]) -> dict[str, Any] | None:
    """The fused (default) configuration's row of a route (the unfused one is the baseline)."""
    fused = [r for r in rows if not any(w in str(r.get("config"))
                                        for w in ("unfused", "fusion=off", "disable"))]
    return (fused or rows or [None])[0]


def _fmt(table: ReportTable, key: str, row: dict[str, Any] | None) -> str:
    return "—" if row is None else cell(table.column(key), row.get(key))


def side_by_side(report: Report, device: str) -> tuple[ReportTable, dict[str, Any]]:
    t = report.tables
    cols = [Column("metric", "metric"), Column("seed", "seed article"),
            Column("measured", f"measured on {device}"), Column("how", "statistic / source")]
    rows: list[dict[str, Any]] = []
    facts: dict[str, Any] = {}

    def add(key: str, label: str, value: str, how: str) -> None:
        rows.append({"metric": label, "seed": SEED.get(key, NOT_STATED), "measured": value,
                     "how": how})

    for route in ROUTES:
        lat = _primary(_rows(t["latency"], device=device, route=route))
        facts[f"e2e/{route}"] = lat.get("median_ms") if lat else None
        lo, hi = _fmt(t["latency"], "ci95_low_ms", lat), _fmt(t["latency"], "ci95_high_ms", lat)
        ci = f" [{lo}, {hi}]" if lat and lat.get("median_ms") is not None else ""
        add(f"e2e/{route}", f"end-to-end {route} (ms)",
            _fmt(t["latency"], "median_ms", lat) + ci,
            "median of pooled samples [95 % bootstrap CI]")
    for route in ROUTES:
        ops = _primary(_rows(t["ops"], device=device, route=route))
        for cat in CATS:
            facts[f"op/{route}/{cat}"] = ops.get(cat) if ops else None
            add(f"op/{route}/{cat}", f"{route} per-op {cat} (ms)", _fmt(t["ops"], cat, ops),
                "each op's median over profiling runs, summed per category")
    for route in ROUTES:
        size = _primary(_rows(t["size"], device=device, route=route))
        add(f"size/{route}", f"{route} binary size (KiB)", _fmt(t["size"], "total_kib", size),
            "runtime + code + weights")
        mem = _primary(_rows(t["memory"], device=device, route=route))
        add(f"mem/{route}", f"{route} peak memory (KiB)", _fmt(t["memory"], "peak_vmhwm_kb", mem),
            "peak VmHWM of the route's process")
    for route in ROUTES:
        fus = _rows(t["fusion"], device=device, route=route)
        for block, key in (("end-to-end", "fusion"), ("attention", "fusion-attention")):
            row = next((r for r in fus if r.get("block") == block), None)
            if row is not None:
                facts[f"{key}/{route}"] = row
            add(f"{key}/{route}", f"{route} fusion effect ({block})",
                _fmt(t["fusion"], "reduction_pct", row) + (
                    f" ({row['verdict']})" if row else ""),
                "reduction fused vs unfused, % (end-to-end: medians; attention: the "
                "attention category of the per-op profile)")
    for row in _rows(t["decision"], device=device):
        facts.setdefault("decisions", []).append(row)
        add(f"decision/{str(row.get('criterion')).replace(' ', '-')}",
            f"decision: {row.get('criterion')}",
            f"{row.get('winner') or '—'} ({row.get('verdict')})", str(row.get("statistic") or ""))
    return ReportTable("seed-vs-measured", "Seed article vs measured",
                       "", cols, rows), facts


def order(values: dict[str, float]) -> str:
    """Routes from the fastest: "custom < ort < tvm"."""
    return " < ".join(sorted(values, key=values.__getitem__))


def _faster(e2e: dict[str, float], than: str) -> str:
    """How much faster custom is than `than` end to end, as the article states its claims."""
    if "custom" not in e2e or than not in e2e:
        return "not measured"
    gain = (e2e[than] - e2e["custom"]) / e2e[than]
    return f"{gain:.1%} faster" if gain >= 0 else f"{-gain:.1%} slower"


def reading(facts: dict[str, Any], device: str) -> list[str]:
    seed_e2e = {r: float(SEED[f"e2e/{r}"].split()[0]) for r in ROUTES}
    out = [f"The seed column is {SEED_SOURCE} ({SEED_SETTING}); the measurement is a "
           f"different device, so absolute times do not compare, only orders and ratios."]
    e2e = {r: v for r in ROUTES if (v := facts.get(f"e2e/{r}")) is not None}
    if e2e:
        best = min(e2e, key=e2e.__getitem__)
        others = ", ".join(f"{r} {v / e2e[best]:.2f}×" for r, v in e2e.items() if r != best)
        out.append(f"On {device}, {best} has the lowest median ({e2e[best]:.1f} ms)"
                   + (f"; relative to it: {others}." if others else "."))
        agree = "the same order" if order(e2e) == order(seed_e2e) else "a different order"
        out.append(f"End-to-end order: the seed article {order(seed_e2e)} "
                   f"({', '.join(f'{r} {v:g} ms' for r, v in seed_e2e.items())}); measured "
                   f"{order(e2e)}: {agree}.")
        for than, claim in SEED_CLAIMS.items():
            out.append(f"The seed article: custom {claim:.1%} faster than {than} end to end; "
                       f"measured: {_faster(e2e, than)}.")
    seed_order = {r: " > ".join(sorted(CATS, key=lambda c, r=r: -float(
        SEED[f"op/{r}/{c}"].split()[0]))) for r in ROUTES}
    out.append("Per-op rows: the seed article gives µs per operator instance, the measurement "
               "ms per inference summed over every op of a category, so only the order of "
               "the categories within a route compares (the seed article, per instance: "
               + "; ".join(f"{r} {o}" for r, o in seed_order.items()) + ").")
    for route in ROUTES:
        cats = {c: facts.get(f"op/{route}/{c}") for c in CATS}
        known = {c: v for c, v in cats.items() if v is not None}
        if known:
            top = max(known, key=known.__getitem__)
            fused = [c for c, v in cats.items() if v is None]
            line = f"{route}: most profiled time in {top} ({known[top]:.1f} ms)"
            if fused:
                line += f"; {', '.join(fused)} shown as — (no op of its own: fused into another)"
            out.append(line + ".")
    for route in ("tvm", "custom"):
        row = facts.get(f"fusion-attention/{route}")
        if row is not None and row.get("reduction_pct") is not None:
            out.append(f"Fusion, attention: the seed article {SEED[f'fusion-attention/{route}']}"
                       f" for {route}; measured {row['reduction_pct']:+.1f} % "
                       f"({row.get('verdict')}).")
    out.append("MobileBERT has no LayerNorm and no GELU: the seed's LayerNorm row holds NoNorm "
               "(x·γ + β, with the residual Add before it) and its GELU row holds ReLU; the "
               "categories table below names the op types each row held per route.")
    for d in facts.get("decisions", []):
        out.append(f"Decision '{d.get('criterion')}': {d.get('winner') or 'none'} — "
                   f"{d.get('verdict')}.")
    return out


def emulated_section(report: Report, device: str) -> list[str]:
    t = report.tables
    host = platform.machine()
    lines = []
    cols = [Column("route", "route"), Column("config", "config"), Column("status", "status"),
            Column("valid", "outputs agree"), Column("cosine", "cosine vs reference"),
            Column("median", "median ms (emulated, not comparable)")]
    rows = []
    for c in report.configs:
        if c.device != device:
            continue
        rec = c.records[-1]
        acc = rec.get("accuracy") or {}
        arch = str(rec.get("arch") or "?")
        lat = _rows(t["latency"], device=device, route=c.route, config=c.label)
        rows.append({"route": c.route, "config": c.label, "status": rec.get("status"),
                     "valid": acc.get("ok") if acc else None,
                     "cosine": f"{acc['cosine']:.4f}" if acc.get("cosine") is not None else None,
                     "median": (_fmt(t["latency"], "median_ms", lat[0]) if lat else "—")
                     + (f" ({arch} under qemu on {host})" if arch != host else "")})
    lines.append(table_md(ReportTable("emulated", f"Validity on {device}", (
        f"{device} is the lab's aarch64 device, emulated by qemu-user on this {host} host: it "
        "proves the cross-built routes run and agree; its times say nothing about a phone."),
        cols, rows)))
    return lines


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--store", type=Path, default=None)
    ap.add_argument("--run", action="append", default=[])
    ap.add_argument("--emulated-run", action="append", default=[])
    ap.add_argument("--model", default="mobilebert")
    ap.add_argument("--variant", default="int8-dynamic")
    ap.add_argument("--device", default="local")
    ap.add_argument("--emulated-device", default="pixel7")
    ap.add_argument("--out", type=Path, default=Path("docs/seed-vs-measured.md"))
    args = ap.parse_args(argv)
    store = ResultStore(args.store or default_store_path(), create=False)
    model = f"{args.model}-{args.variant}"
    runs = [store.resolve_run(r) for r in args.run] or _latest_run(store, args.device, model)
    if not runs:
        sys.exit(f"no run of {model} on {args.device} in {store.path}: run "
                 f"`farm triangle --device {args.device} --model {args.model} --variant "
                 f"{args.variant}` first")
    report = load_report(store, runs)
    table, facts = side_by_side(report, args.device)
    cmds = sorted({r["command"] for r in report.runs})
    cpu = next((c.records[0].get("cpu_info") or {} for c in report.configs
                if c.device == args.device), {})
    where = (f"Device `{args.device}`: {cpu.get('model', '?')}, {cpu.get('cores', '?')} cores, "
             f"features {', '.join(cpu.get('features') or []) or '?'}; one thread; the machine "
             "was shared with other work while measuring, so figures carry that noise.")
    given = argv if argv is not None else sys.argv[1:]
    this = " ".join(shlex.quote(a) for a in ["scripts/seed_vs_measured.py", *given])
    doc = [f"# Seed article vs measured: MobileBERT {args.variant.upper()}, seq 128", "",
           f"Written by `python {this}` "
           f"from the result store (runs {', '.join(runs)}), recorded by: "
           + "; ".join(f"`{c}`" for c in cmds) + ".", "",
           f"Seed column: {SEED_SOURCE}, {SEED_SETTING}; its figures are hard-coded in "
           "its example program, not measured by a published harness. A figure it does not "
           f"state reads \"{NOT_STATED}\".", "",
           where, "", table_md(table), "", "## Reading", ""]
    doc += [f"- {line}" for line in reading(facts, args.device)]
    cat_rows = [r for r in categories_table(report.configs).rows if r["device"] == args.device]
    ct = categories_table(report.configs)
    ct.rows = cat_rows
    doc += ["", table_md(ct), ""]
    emu_runs = [store.resolve_run(r) for r in args.emulated_run] or _latest_run(
        store, args.emulated_device, model)
    doc += [f"## The emulated aarch64 device ({args.emulated_device})", ""]
    if emu_runs:
        emu = load_report(store, emu_runs)
        doc.append(f"Runs {', '.join(emu_runs)}: " + "; ".join(
            f"`{r['command']}`" for r in emu.runs) + ".")
        doc += ["", *emulated_section(emu, args.emulated_device)]
    else:
        doc.append(f"No stored run of {model} on {args.emulated_device}.")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text("\n".join(doc) + "\n")
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
