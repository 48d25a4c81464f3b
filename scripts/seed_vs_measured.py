#!/usr/bin/env python3
"""Write docs/seed-vs-measured.md from stored `farm triangle` runs of MobileBERT.

    python scripts/seed_vs_measured.py [--store FILE] [--run RUN ...] [--emulated-run RUN ...]
                                       [--model mobilebert] [--variant int8-dynamic]
                                       [--device local] [--emulated-device pixel7]
                                       [--out docs/seed-vs-measured.md]

Without --run, the latest run in the store with records of the model/variant on --device is
used (likewise --emulated-run on --emulated-device). Every measured figure comes from the
stored records through farm.report.analysis (the same numbers `farm report` prints); the
reading is generated from them. The seed article's own figures are not in this repository
(nor in its issues or shared notes), so the "seed" column states that instead of holding
numbers typed from memory: SEED below is where they go, with their source, once available.
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
# The article's figures, keyed like the rows below ("e2e/ort", "op/custom/fc", ...), each a
# (value, unit, source) tuple. Empty: they are not in the repository (see module docstring).
SEED: dict[str, tuple[float, str, str]] = {}
NOT_IN_REPO = "not in repo"


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
        seed = SEED.get(key)
        rows.append({"metric": label, "seed": f"{seed[0]:g} {seed[1]}" if seed else NOT_IN_REPO,
                     "measured": value, "how": how})

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
        e2e = next((r for r in fus if r.get("block") in ("end-to-end", "e2e", "total")), None)
        e2e = e2e or (fus[0] if fus else None)
        if e2e is not None:
            facts[f"fusion/{route}"] = e2e
        add(f"fusion/{route}", f"{route} fusion effect ({e2e.get('block') if e2e else 'e2e'})",
            _fmt(t["fusion"], "reduction_pct", e2e) + (
                f" (significant: {_fmt(t['fusion'], 'significant', e2e)})" if e2e else ""),
            "median reduction fused vs unfused, %")
    for row in _rows(t["decision"], device=device):
        facts.setdefault("decisions", []).append(row)
        add(f"decision/{row.get('criterion')}", f"decision: {row.get('criterion')}",
            f"{row.get('winner') or '—'} ({row.get('verdict')})", str(row.get("statistic") or ""))
    return ReportTable("seed-vs-measured", "Seed article vs measured",
                       "", cols, rows), facts


def reading(facts: dict[str, Any], device: str) -> list[str]:
    out = ["The article's figures are not in the repository, so agreement is not judged "
           "number by number; what follows is what the measurement says."]
    e2e = {r: v for r in ROUTES if (v := facts.get(f"e2e/{r}")) is not None}
    if e2e:
        best = min(e2e, key=e2e.__getitem__)
        others = ", ".join(f"{r} {v / e2e[best]:.2f}×" for r, v in e2e.items() if r != best)
        out.append(f"On {device}, {best} has the lowest median ({e2e[best]:.1f} ms)"
                   + (f"; relative to it: {others}." if others else "."))
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
           "**The seed article's figures are not in this repository** (nor its issues or "
           "shared notes): the seed column says so rather than holding numbers typed from "
           "memory. Add them to `SEED` in the script, with their source, to fill it.", "",
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
