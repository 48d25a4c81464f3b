"""Corpus models at bench size through every route on `local`: route x file, with status,
median, VmHWM and agreement with the reference.

    python benchmarks/real_exports.py [--families mobilebert,bert] [--exports opset14-dynamic,...]
        [--tools none,ortopt,qdynamic] [--names NAME,...] [--small] [--min-time 1]
        [--rounds 3] [--isa avx2] [--profile 3] [--json OUT]

Files: `corpus:{family}-{export}{+tool}` (farm/models/corpus; the issue-28 encoders, e.g.
`--names mpnet-opset18-dynamic,deberta-opset18-dynamic+qdynamic`, are real exports of
random-init Hugging Face models, hf_encoders.py; bench size = 6 layers,
hidden 384, 12 heads, seq 128, vocab 30522, random weights; MobileBERT at its own size, the
`mobilebert` preset's, fixed axes only). One `run_bench` per file on `local` at 1 thread,
`--rounds` interleaved rounds, routes ort, tvm, custom (untuned TVM); `--device NAME
--inventory FILE` runs the files on another device (the lab's emulated aarch64 `pixel7`).
Printed per file and route: status, median ms, the spread of its round medians, VmHWM MiB,
and the accuracy rule's verdict against the reference (ORT on the fp32 file, or on the same
pre-quantised file), the 1-min load average after the file; with `--profile N`, custom's
per-category ms (where a miss comes from: `fallback` is the generic kernels' share); then
the targets of issue #11 it can check: TVM dynamic / fixed axes median <= 1.2, custom <=
min(ORT, TVM) on fp32 files and <= 0.9 x on quantised ones (issue 28).
`--isa LEVEL` caps custom and TVM (FARM_ISA); ORT
cannot be capped and runs at the CPU's own level.
Timings are one run on whatever the machine is doing: say how loaded it was.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import shutil
import statistics
import sys
import tempfile
from pathlib import Path
from typing import Any

from farm.bench.config import BenchConfig, Policy
from farm.bench.runner import run_bench
from farm.inventory import Device, load_inventory
from farm.inventory.builtin import local_device
from farm.models.corpus import hf_names
from farm.models.corpus import names as corpus_names
from farm.results.store import ResultStore

ROUTES = ("ort", "tvm", "custom")


def run_file(model: str, work: Path, policy: Policy, rounds: int, profile_runs: int,
             device: Device | None = None) -> dict[str, dict[str, Any]]:
    # `local` works in the file's own directory; an inventory device in its own workdir
    dev = device or dataclasses.replace(local_device(), workdir=str(work / "wd"))
    # rounds interleave the routes (the bench's seeded order), so a busy moment of a shared
    # machine hits them alike; the median pools the rounds' samples
    config = BenchConfig(model=model, routes=ROUTES, policy=policy, pause_s=0.5,
                         profile_runs=profile_runs, threads=1, repeats=rounds)
    with ResultStore(work / "r.sqlite") as store:
        result = run_bench([dev], config, store, "real_exports")
        recs = store.records(result.run_id)
    out = {}
    for r in recs:
        acc = r.get("accuracy") or {}
        rm = r.get("round_medians_ms") or []
        out[r["route"]] = {"status": r["status"], "median_ms": r["median_ms"],
                           "round_medians_ms": rm,
                           "spread": (max(rm) / min(rm) - 1) if rm and min(rm) > 0 else None,
                           "categories": ((r.get("ops") or {}).get("categories") or {}),
                           "isa": r.get("isa"),
                           "vmhwm_mib": (r["peak_vmhwm_kb"] or 0) / 1024,
                           "agreement": acc.get("detail"), "variant": r["variant"],
                           "detail": r["status_detail"]}
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    # MobileBERT first: the seed article's model (fixed axes, opset 14/17, no +ortopt)
    ap.add_argument("--families", default="mobilebert,bert,distilbert,roberta,albert")
    ap.add_argument("--exports", default="opset14-fixed,opset14-dynamic,opset11-dynamic,"
                                         "opset17-dynamic")
    ap.add_argument("--tools", default="none,ortopt,qdynamic,qdq,q4")
    ap.add_argument("--small", action="store_true", help="test dims instead of bench size")
    ap.add_argument("--names", help="corpus names (comma-separated) instead of the product "
                                    "of --families, --exports and --tools")
    ap.add_argument("--min-time", type=float, default=1.0, help="seconds per route and round")
    ap.add_argument("--rounds", "--repeats", type=int, default=3, dest="rounds",
                    help="interleaved rounds per file")
    ap.add_argument("--isa", help="cap custom and TVM at this ISA level (FARM_ISA); ORT is "
                                  "not capped")
    ap.add_argument("--profile", type=int, default=0, metavar="N",
                    help="profiled runs per key after the timed ones (per-category ms)")
    ap.add_argument("--json", metavar="OUT")
    ap.add_argument("--device", metavar="NAME", help="an inventory device instead of `local` "
                    "(the lab's emulated aarch64 `pixel7`: `farm lab up`, then --inventory "
                    "with the lab's inventory; use --small there, qemu-user is slow)")
    ap.add_argument("--inventory", metavar="FILE", help="devices.yaml holding --device")
    args = ap.parse_args()
    device = load_inventory(args.inventory).get(args.device) if args.device else None
    policy = Policy(warmup_runs=3, warmup_min_s=0.3, min_runs=10, min_time_s=args.min_time,
                    max_time_s=max(10.0, 4 * args.min_time))
    suffix = "@small" if args.small else ""
    if args.isa:
        os.environ["FARM_ISA"] = args.isa  # local_device() reads it
    print(f"device: {args.device or 'local'}; host cpu: {_cpu_name()}; "
          f"isa cap: {args.isa or 'none'}; 1 thread; "
          f"{args.rounds} rounds x min {args.min_time} s", flush=True)
    # combinations a family's exporter does not write are left out
    exported = set(corpus_names(suffix)) | set(hf_names(suffix))
    rows: dict[str, dict[str, Any]] = {}
    with tempfile.TemporaryDirectory(prefix="real-exports-") as tmp:
        os.environ.setdefault("FARM_HOME", str(Path(tmp) / "home"))
        if args.names:
            wanted = [f"{n}{suffix}" for n in args.names.split(",")]
            unknown = [n for n in wanted if n not in exported]
            if unknown:
                ap.error(f"not corpus names: {', '.join(unknown)}")
        else:
            wanted = [f"{fam}-{export}{'' if tool == 'none' else '+' + tool}{suffix}"
                      for fam in args.families.split(",") for export in args.exports.split(",")
                      for tool in args.tools.split(",")]
            wanted = [n for n in wanted if n in exported]
        for name in wanted:
            work = Path(tmp) / name.replace("+", "_")
            work.mkdir(parents=True)
            try:
                rows[name] = run_file(f"corpus:{name}", work, policy, args.rounds, args.profile,
                                      device)
            except Exception as exc:
                rows[name] = {"error": {"status": "error", "detail": str(exc)[:200]}}
            # a file's builds and work dir are ~300 MB at bench size: 168 of them filled /tmp
            shutil.rmtree(work, ignore_errors=True)
            for route, r in rows[name].items():
                med = f"{r['median_ms']:.2f}" if r.get("median_ms") else "-"
                spread = f"±{r['spread'] * 100:.0f}%" if r.get("spread") is not None else ""
                print(f"{name:44s} {route:7s} {r['status']:12s} {med:>9s} ms {spread:>5s} "
                      f"{r.get('vmhwm_mib', 0):7.1f} MiB  "
                      f"{(r.get('agreement') or r.get('detail') or '')[:90]}", flush=True)
                if r.get("categories"):
                    print("    " + ", ".join(f"{k} {v:.2f}" for k, v in r["categories"].items()
                                             if v), flush=True)
            load = os.getloadavg()[0]
            for r in rows[name].values():
                r["load1"] = load
            print(f"{name:44s} load1 {load:.2f}", flush=True)
    _targets(rows, speed=not (device and device.emulated))
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1))
    return 0


def _cpu_name() -> str:
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("model name"):
            return line.split(":", 1)[1].strip()
    return "unknown"


def _med(rows: dict[str, dict[str, Any]], name: str, route: str) -> float | None:
    r = rows.get(name, {}).get(route) or {}
    return r.get("median_ms") if r.get("status") == "ok" else None


def _targets(rows: dict[str, dict[str, Any]], speed: bool = True) -> None:
    print("\ntargets:")
    if not speed:  # qemu-user's latencies say nothing about the CPU it stands for
        print("  speed: not judged on an emulated device (timings under qemu-user)")
    dyn_ratios: list[float] = []
    custom_ratios: list[float] = []
    for name in rows if speed else ():  # not judged: no per-file ratios, no summaries
        if "-dynamic" in name:
            fixed = name.replace("-dynamic", "-fixed")
            a, b = _med(rows, name, "tvm"), _med(rows, fixed, "tvm")
            if a and b:
                dyn_ratios.append(a / b)
                print(f"  TVM dynamic/fixed {name}: {a / b:.2f} (target <= 1.2)")
        c, o, t = (_med(rows, name, r) for r in ("custom", "ort", "tvm"))
        best = min(x for x in (o, t) if x) if (o or t) else None
        if c and best:
            # issue 28: a quantised file's target is 0.9 (the executor's int8 GEMM)
            target = 0.9 if "+q" in name else 1.0
            custom_ratios.append(c / best / target)
            print(f"  custom / min(ort, tvm) {name}: {c / best:.2f} (target <= {target})")
    valid = sum(1 for r in rows.values() for x in r.values() if x.get("status") == "ok")
    total = sum(len(r) for r in rows.values())
    print(f"  valid (file, route) pairs: {valid} of {total}")
    # the summary a reader checks first: the worst file decides each target
    if dyn_ratios:
        print(f"  TVM dynamic/fixed: {sum(r <= 1.2 for r in dyn_ratios)} of {len(dyn_ratios)} "
              f"pairs <= 1.2; median {statistics.median(dyn_ratios):.2f}, "
              f"range {min(dyn_ratios):.2f}-{max(dyn_ratios):.2f}")
    if custom_ratios:  # each ratio over its file's target: <= 1.0 meets it
        print(f"  custom / min(ort, tvm) over target: {sum(r <= 1.0 for r in custom_ratios)} of "
              f"{len(custom_ratios)} files meet it; median {statistics.median(custom_ratios):.2f}, "
              f"range {min(custom_ratios):.2f}-{max(custom_ratios):.2f}")


if __name__ == "__main__":
    sys.exit(main())
