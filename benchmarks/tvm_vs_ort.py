"""TVM (default build, tuned build) vs ONNX Runtime on `local`, end to end, in one run.

    .venv/bin/python benchmarks/tvm_vs_ort.py --model mini --threads 1 2 \
        --trials 160 --time-budget 600 --out bench-tvm-vs-ort.json
    .venv/bin/python benchmarks/tvm_vs_ort.py --model mobilebert --variant int8-dynamic \
        --variant int4 --time-budget 600     # each variant tuned with its own budget

Every configuration runs in a fresh process through its route runner (the same JSON-lines
contract the agent uses): ORT via agents/runners/ort_runner.py (graph optimisations ALL),
TVM via the runtime-only C++ runner. Reported: median (of interleaved rounds' medians) and
p10/p90 of the steady-state samples, TVM/ORT ratios, peak RSS of each runner, the tuning
time, each build's kernels left unscheduled (target 0), and each TVM build's largest output
difference from ORT (fp32: beyond --atol it exits; a quantized variant is judged by the
bench's own rule for that variant, farm.bench.accuracy.compare_outputs, and marked INVALID).
Targets from issues 4 and 14: default build ≤ 3× ORT, tuned (≤ 10 min of tuning) ≤ 1.2× ORT,
int8 included; int4 builds (MatMulNBits dequantised at build time) and runs valid.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from farm.bench.accuracy import compare_outputs  # noqa: E402
from farm.inventory.builtin import local_device  # noqa: E402
from farm.models import resolve_model  # noqa: E402
from farm.models.inputs import ftns_module, make_inputs  # noqa: E402
from farm.routes.tvm.builder import build_tvm  # noqa: E402
from farm.routes.tvm.runner_build import build_runner  # noqa: E402
from farm.routes.tvm.tune import tune_tvm  # noqa: E402

POLICY = {"warmup_runs": 5, "warmup_min_s": 1.0, "min_runs": 30, "min_time_s": 5.0,
          "max_time_s": 30.0}


def run_runner(argv: list[str], request: dict, work: Path) -> tuple[list[float], dict]:
    req = work / f"req-{time.monotonic_ns()}.json"
    req.write_text(json.dumps(request))
    proc = subprocess.run([*argv, "--request", str(req)], capture_output=True, text=True,
                          timeout=600, check=False)
    events = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]
    if proc.returncode != 0 or events[-1]["ev"] != "done":
        raise SystemExit(f"runner {argv} failed:\n{proc.stdout[-2000:]}\n{proc.stderr[-2000:]}")
    samples = [ms for e in events if e["ev"] == "samples" for ms in e["ms"]]
    memory = next(e for e in events if e["ev"] == "memory")
    ops = next((e for e in events if e["ev"] == "ops"), None)
    return samples, {"vmhwm_mb": round(memory["vmhwm_kb"] / 1024, 1),
                     "categories": ops["categories"] if ops else None}


def output_diff(expected: dict, path: Path, atol: float, variant: str,
                fp32: dict | None = None) -> tuple[float, bool]:
    """(largest |TVM - ORT| over the outputs of the last run, valid); fp32 exits when beyond
    tolerance (a faster schedule that computes something else is no result). A quantized
    variant is valid as the bench judges a preset's: against ORT's fp32 outputs (`fp32`) by
    the variant's relative-RMS/cosine rule; the difference shown stays the one from ORT on the
    same file."""
    got = ftns_module().read(str(path))
    if variant != "fp32":
        diff = compare_outputs(got, expected, variant, reference="ort")
        result = compare_outputs(got, fp32, variant, reference="ort fp32", against_fp32=True)
        return float(diff.max_abs_diff or 0.0), result.ok
    worst = 0.0
    for name, want in expected.items():
        if name not in got or got[name].shape != want.shape:
            raise SystemExit(f"{path.name}: output {name!r} missing or of another shape")
        diff = np.abs(got[name].astype(np.float64) - want)
        worst = max(worst, float(diff.max()))
        if not np.all(diff <= atol + 1e-3 * np.abs(want)):
            raise SystemExit(f"{path.name}: output {name!r} differs from ORT's by up to "
                             f"{diff.max():.3g} (tolerance {atol} + 1e-3 * |ORT|)")
    return worst, True


def fp32_outputs(model: str, inputs: Path) -> dict:
    """ORT's outputs on the fp32 build of `model`: the reference the bench judges by."""
    import onnxruntime

    path = resolve_model(model, "fp32").path
    sess = onnxruntime.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    feeds = ftns_module().read(str(inputs))
    names = [o.name for o in sess.get_outputs()]
    return dict(zip(names, sess.run(names, {i.name: feeds[i.name] for i in sess.get_inputs()}),
                    strict=True))


def summarize(rounds: list[list[float]], extra: dict) -> dict:
    medians = [float(np.median(r)) for r in rounds]
    samples = [ms for r in rounds for ms in r]
    return {"median_ms": float(np.median(medians)), "round_medians_ms": medians,
            "p10_ms": float(np.percentile(samples, 10)),
            "p90_ms": float(np.percentile(samples, 90)), "runs": len(samples), **extra}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", default="mini")
    parser.add_argument("--variant", action="append",
                        help="fp32 | int8-dynamic | int8-qdq | int4; repeatable (default fp32)")
    parser.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--trials", type=int, default=160)
    parser.add_argument("--time-budget", type=float, default=600.0)
    parser.add_argument("--skip-tune", action="store_true")
    parser.add_argument("--rounds", type=int, default=3,
                        help="interleaved rounds per configuration (default 3)")
    parser.add_argument("--atol", type=float, default=1e-4,
                        help="tolerance of TVM's outputs against ORT's (plus 1e-3 relative)")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()

    reports = [run_variant(args, variant) for variant in args.variant or ["fp32"]]
    if args.out:
        args.out.write_text(json.dumps(reports, indent=2))
    return 0


def run_variant(args: argparse.Namespace, variant: str) -> dict:
    device = local_device()
    model = resolve_model(args.model, variant)
    work = Path(tempfile.mkdtemp(prefix="tvm-vs-ort-"))
    inputs = work / "inputs.ftns"
    ftns_module().write(str(inputs), make_inputs(model.path))
    runner = build_runner()
    ort_argv = [sys.executable, str(REPO / "agents" / "runners" / "ort_runner.py")]

    builds = {"tvm-default": build_tvm(model.path, device, use_tuning=False)}
    tuning = None
    if not args.skip_tune:
        started = time.monotonic()
        result = tune_tvm(model.path, device, trials=args.trials,
                          time_budget_s=args.time_budget,
                          progress=lambda d, t: print(f"  tuning {d}/{t}", file=sys.stderr))
        tuning = {"measured": result.measured, "seconds": round(time.monotonic() - started, 1),
                  "database_total_trials": result.total_trials,
                  "database_total_seconds": result.total_seconds,
                  "budget_spent": result.budget_spent}
        builds["tvm-tuned"] = build_tvm(model.path, device)

    # rounds interleave the configurations, so load from other processes on a shared host
    # hits them alike; the figure is the median of the per-round medians
    rows = []
    for threads in args.threads:
        base = {"inputs": str(inputs), "threads": threads, "policy": POLICY, "profile_runs": 1}
        configs = {"ort": (ort_argv, {**base, "route": "ort", "model": str(model.path),
                                      "options": {"opt_level": "all"}})}
        for name, art in builds.items():
            configs[name] = ([str(runner.binary)], {**base, "route": "tvm",
                                                    "model": str(art.path), "options": {}})
        samples: dict[str, list[list[float]]] = {name: [] for name in configs}
        extra: dict[str, dict] = {}
        for _ in range(args.rounds):
            for name, (argv, request) in configs.items():
                got, extra[name] = run_runner(
                    argv, {**request, "outputs": str(work / f"{name}.ftns")}, work)
                samples[name].append(got)
        ort_median = summarize(samples["ort"], {})["median_ms"]
        expected = ftns_module().read(str(work / "ort.ftns"))
        fp32 = None if variant == "fp32" else fp32_outputs(args.model, inputs)
        for name in configs:
            row = summarize(samples[name], extra[name])
            row["max_abs_diff"], row["valid"] = output_diff(
                expected, work / f"{name}.ftns", args.atol, variant, fp32)
            rows.append({"config": name, "threads": threads, **row,
                         "ratio": round(row["median_ms"] / ort_median, 2)})
    print(f"\nmodel {model.name} ({model.path.name}), host {device.description}")
    print("unscheduled kernels: " + ", ".join(f"{n} {a.unscheduled_count} of "
                                              f"{len(a.schedule_sources)}"
                                              for n, a in builds.items()))
    print(f"{'config':<12} {'thr':>3} {'median ms':>10} {'p10':>8} {'p90':>8} "
          f"{'x ORT':>6} {'peak MB':>8} {'|d ORT|':>8}")
    for r in rows:
        print(f"{r['config']:<12} {r['threads']:>3} {r['median_ms']:>10.2f} {r['p10_ms']:>8.2f} "
              f"{r['p90_ms']:>8.2f} {r['ratio']:>6.2f} {r['vmhwm_mb']:>8.1f} "
              f"{r['max_abs_diff']:>8.1e}{'' if r['valid'] else ' INVALID'}")
    if tuning:
        print(f"tuning: {tuning['measured']} candidates in {tuning['seconds']} s")
    sys.stdout.flush()
    return {"model": model.name, "variant": variant, "rows": rows, "tuning": tuning,
            "unscheduled": {n: a.unscheduled_count for n, a in builds.items()},
            "schedules": {n: dict(__import__("collections").Counter(
                a.schedule_sources.values())) for n, a in builds.items()}}


if __name__ == "__main__":
    sys.exit(main())
