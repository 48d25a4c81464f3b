"""Every route at its best on `local`, end to end, through the bench itself (issue #14).

    .venv/bin/python benchmarks/triangle_best.py [--model mobilebert]
        [--variants fp32,int8-dynamic,...] [--threads 1,2] [--repeats 3] [--min-time 2]
        [--json OUT]

For each variant and thread count one `farm bench` run (`run_bench`, the agent and the route
runners exactly as `farm bench --device local --routes ort,tvm,custom` runs them) with
`--repeats` interleaved rounds in the bench's seeded order, so a busy moment of a shared
machine hits the three routes alike; a route's median pools its rounds' samples. Every
figure below is computed from the stored records of this one invocation. Printed:
- per variant x threads: ORT, TVM, custom medians and status; custom / min(ORT, TVM)
  (target <= 0.9 at 1 thread and at all threads);
- each route's speed-up from 1 thread to all threads (custom target >= 1.8);
- ORT int4 / ORT fp32 (target < 1: ORT's 4-bit build as ORT runs it fastest here);
- TVM int8 / ORT int8 (target <= 1.2; this is the build `bench` uses: tuned when a
  `farm tune` record exists, else the default schedules) and every TVM build's count of
  kernels left without a schedule (target 0), from the records' build flags;
- each route's peak VmHWM.
A quantised route is valid by the bench's own rule (against ORT fp32 for a preset). This is a
measurement, not a test: on a shared 2-vCPU VM, figures at 2 threads swing with what else runs.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from pathlib import Path
from typing import Any

from farm import isa
from farm.bench.config import BenchConfig, Policy
from farm.bench.runner import run_bench
from farm.inventory.builtin import local_device
from farm.report.isa_note import cap_line
from farm.results.provenance import host_cpu_info
from farm.results.store import ResultStore

ROUTES = ("ort", "tvm", "custom")
TARGET_CUSTOM = 0.9
TARGET_SPEEDUP = 1.8
TARGET_TVM_INT8 = 1.2


def measure(model: str, variant: str, threads: int, args: argparse.Namespace,
            store: ResultStore) -> dict[str, dict[str, Any]]:
    policy = Policy(warmup_runs=3, warmup_min_s=0.5, min_runs=10, min_time_s=args.min_time,
                    max_time_s=max(10.0, 4 * args.min_time))
    config = BenchConfig(model=model, variant=variant, routes=ROUTES, threads=threads,
                         policy=policy, pause_s=0.5, repeats=args.repeats, profile_runs=0)
    result = run_bench([local_device()], config, store, ["triangle_best.py", variant])
    out = {}
    for r in store.records(result.run_id):
        flags = r.get("build_flags") or {}
        out[r["route"]] = {
            "status": r["status"], "detail": (r.get("status_detail") or "")[:120],
            "median_ms": r["median_ms"], "n": r["n"],
            "vmhwm_mib": round((r.get("peak_vmhwm_kb") or 0) / 1024, 1),
            "unscheduled": flags.get("unscheduled_count"),
            "tuned": "tuning-db" in (flags.get("schedule_counts") or {}),
            "run_id": result.run_id}
    return out


def ratio(a: float | None, b: float | None) -> float | None:
    return a / b if a and b else None


def fmt(x: float | None, spec: str = ".2f") -> str:
    return format(x, spec) if x is not None else "-"


def verdict(x: float | None, target: float, higher: bool = False) -> str:
    if x is None:
        return "n/a"
    return "ok" if (x >= target if higher else x <= target) else "MISS"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="mobilebert")
    ap.add_argument("--variants", default="fp32,int8-dynamic,int8-qdq,int4")
    ap.add_argument("--threads", default=f"1,{os.cpu_count() or 1}")
    ap.add_argument("--repeats", type=int, default=3, help="interleaved rounds per bench")
    ap.add_argument("--min-time", type=float, default=2.0, help="seconds per route and round")
    ap.add_argument("--json", metavar="OUT")
    ap.add_argument("--isa", metavar="LEVEL",
                    help="cap custom and TVM at this ISA level (sets $FARM_ISA; farm/isa.py)")
    args = ap.parse_args()
    if args.isa:  # every fk_exec, kernel_bench and bench config of the run reads it
        os.environ["FARM_ISA"] = args.isa
    variants = args.variants.split(",")
    threads = sorted({int(t) for t in args.threads.split(",")})
    rows: dict[str, dict[int, dict[str, dict[str, Any]]]] = {}
    with tempfile.TemporaryDirectory(prefix="triangle-best-") as tmp:
        store_path = Path(os.environ.get("FARM_HOME", tmp)) / "triangle_best.sqlite"
        with ResultStore(store_path) as store:
            for variant in variants:
                for t in threads:
                    rows.setdefault(variant, {})[t] = got = measure(args.model, variant, t,
                                                                    args, store)
                    print(f"{variant:13s} {t} thr: " + "  ".join(
                        f"{r} {fmt(got.get(r, {}).get('median_ms'))} ms "
                        f"{got.get(r, {}).get('status', '?')}" for r in ROUTES), flush=True)
    print(f"\n{args.model}, local ({os.cpu_count()} cpus); medians in ms, "
          f"{args.repeats} interleaved rounds of >= {args.min_time} s per route")
    print(cap_line(local_device(), isa.requested(), host_cpu_info()["model"]))
    print(f"{'variant':13s} {'thr':>3} {'ort':>8} {'tvm':>8} {'custom':>8}  "
          f"{'custom/min(ort,tvm)':>20}")
    for variant, by_t in rows.items():
        for t, got in by_t.items():
            med = {r: got.get(r, {}).get("median_ms") if got.get(r, {}).get("status") == "ok"
                   else None for r in ROUTES}
            best = min((m for r, m in med.items() if r != "custom" and m), default=None)
            rc = ratio(med["custom"], best)
            print(f"{variant:13s} {t:>3} {fmt(med['ort']):>8} {fmt(med['tvm']):>8} "
                  f"{fmt(med['custom']):>8}  {fmt(rc):>8} (<= {TARGET_CUSTOM}) "
                  f"{verdict(rc, TARGET_CUSTOM)}")
    if len(threads) > 1:
        lo, hi = threads[0], threads[-1]
        print(f"\nspeed-up {lo} -> {hi} threads (median at {lo} / median at {hi}):")
        for variant, by_t in rows.items():
            parts = []
            for r in ROUTES:
                s = ratio(by_t[lo].get(r, {}).get("median_ms"),
                          by_t[hi].get(r, {}).get("median_ms"))
                tail = f" (>= {TARGET_SPEEDUP}) {verdict(s, TARGET_SPEEDUP, True)}" \
                    if r == "custom" else ""
                parts.append(f"{r} {fmt(s)}{tail}")
            print(f"  {variant:13s} " + "   ".join(parts))
    for t in threads:
        if "int4" in rows and "fp32" in rows:
            r = ratio(rows["int4"][t].get("ort", {}).get("median_ms"),
                      rows["fp32"][t].get("ort", {}).get("median_ms"))
            print(f"ORT int4 / ORT fp32, {t} thr: {fmt(r)} (< 1) {verdict(r, 0.9999)}")
        for q in ("int8-dynamic", "int8-qdq"):
            if q in rows:
                got = rows[q][t]
                r = ratio(got.get("tvm", {}).get("median_ms"), got.get("ort", {}).get("median_ms"))
                tuned = "tuned" if got.get("tvm", {}).get("tuned") else "default schedules"
                print(f"TVM {q} / ORT {q}, {t} thr ({tuned}): {fmt(r)} (<= {TARGET_TVM_INT8}) "
                      f"{verdict(r, TARGET_TVM_INT8)}")
    print("\nTVM kernels without a schedule (target 0): " + ", ".join(
        f"{v} {by_t[threads[0]].get('tvm', {}).get('unscheduled')}" for v, by_t in rows.items()))
    print("peak VmHWM MiB (ort / tvm / custom), 1 thread: " + ", ".join(
        f"{v} " + " / ".join(fmt(by_t[threads[0]].get(r, {}).get("vmhwm_mib"), ".0f")
                             for r in ROUTES) for v, by_t in rows.items()))
    bad = [(v, t, r, g["status"], g["detail"]) for v, by_t in rows.items()
           for t, got in by_t.items() for r, g in got.items() if g["status"] != "ok"]
    for v, t, r, status, detail in bad:
        print(f"  NOT OK: {v} {t} thr {r}: {status} {detail}")
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1))
    return 0 if not bad else 1


if __name__ == "__main__":
    sys.exit(main())
