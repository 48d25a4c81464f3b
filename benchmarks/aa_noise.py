"""Does `farm compare --max-slowdown 5%` false-alarm on identical runs, and does it catch a
real slowdown? Issue 32's check, in one bounded invocation on the `local` device.

    python benchmarks/aa_noise.py [--pairs 10] [--models tiny,mobilebert]
        [--mobilebert-seq 32] [--calibration-pairs 3] [--budget-min 24] [--json OUT]

Per model (tiny, and the real MobileBERT at `--mobilebert-seq`, 32 by default so the whole
script stays well under 30 minutes on 2 cores; 128 is the preset's):
1. two ONNX files under the same name: the model, and a variant with ~10 % more time
   (tiny: FFN 256 -> 384; mobilebert: 24 -> 27 layers), each measured ~+10 % with ORT
   here (26 layers, the earlier variant, measured only +7 %: ORT's time per MobileBERT
   layer is ~0.5 ms of ~21 ms at seq 32); the script prints the planted change it measured;
2. `farm devices calibrate local` with that model as the reference workload: the floor;
3. `--pairs` times: bench the model (A), bench it again (A'), bench the variant (B), each
   a `farm bench` of its own run (ort, the bench's default rounds and policy, no profile);
   `farm compare A A' --max-slowdown 5%` exiting 4 is a false alarm, `farm compare A' B
   --max-slowdown 5%` exiting 4 is a catch, each judged on the gate's default statistic
   (p10, the quiet level) and again with `--metric median` for contrast. Every other
   iteration a CPU hog (one process spinning, bounded by its own deadline) runs beside the
   three benches.
It prints both rates per model and overall, each model's floor with the load and steal
the calibration saw, and stops by itself after `--budget-min` minutes, whatever is left.
Everything goes into a temporary store (or `--keep DIR`), so the figures are traceable.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
import onnx

from farm.bench.calibrate import calibrate
from farm.bench.config import DEFAULT_ROUNDS, BenchConfig, Policy
from farm.bench.runner import run_bench
from farm.cli.main import main as farm
from farm.inventory.builtin import local_device
from farm.models.config import EncoderConfig
from farm.models.corpus.mobilebert import build_mobilebert
from farm.models.corpus.mobilebert_config import MobileBertConfig
from farm.models.encoder import build_encoder
from farm.results.store import ResultStore

HOG = ("import time, sys\n"
       "end = time.monotonic() + float(sys.argv[1])\n"
       "while time.monotonic() < end:\n"
       "    sum(i * i for i in range(10000))\n")


def write_models(work: Path, name: str, seq: int) -> tuple[Path, Path]:
    """(base, slow): the same file name in two directories, so records name one model."""
    if name == "tiny":
        base = build_encoder(EncoderConfig(layers=2, hidden=64, heads=2, ffn=256, seq=32,
                                           vocab=512))
        slow = build_encoder(EncoderConfig(layers=2, hidden=64, heads=2, ffn=384, seq=32,
                                           vocab=512))
    else:
        base = build_mobilebert(MobileBertConfig(seq=seq))
        slow = build_mobilebert(MobileBertConfig(seq=seq, layers=27))
    paths = []
    for kind, model in (("base", base), ("slow", slow)):
        path = work / kind / f"{name}.onnx"
        path.parent.mkdir(parents=True, exist_ok=True)
        onnx.save(model, str(path))
        paths.append(path)
    return paths[0], paths[1]


def config_for(model: Path) -> BenchConfig:
    return BenchConfig(model=str(model), routes=("ort",), repeats=DEFAULT_ROUNDS,
                       policy=Policy.for_rounds(DEFAULT_ROUNDS), profile_runs=0)


# the gate's default statistic first (what a user gets), then the median for contrast
METRICS = ("p10", "median")


def gate(store: Path, base: str, new: str, metric: str) -> dict[str, Any]:
    """`farm compare BASE NEW --max-slowdown 5% --metric M` as a user runs it: exit code
    and row."""
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        code = farm(["compare", base, new, "--max-slowdown", "5%", "--output", "json",
                     "--metric", metric, "--store", str(store)])
    doc = json.loads(out.getvalue())
    (row,) = doc["rows"]
    return {"exit": code, "verdict": row["verdict"], "slowdown_pct": row["slowdown_pct"],
            "p": row["p_value"], "floor_pct": row["floor_pct"]}


def bench(device: Any, config: BenchConfig, store_path: Path, label: str) -> str:
    with ResultStore(store_path) as store:
        result = run_bench([device], config, store, ["aa_noise", label])
    if result.status != "ok":
        raise SystemExit(f"bench {label} ended {result.status}: {result.failures()}")
    return result.run_id


def run_model(name: str, args: argparse.Namespace, work: Path, store_path: Path,
              deadline: float) -> dict[str, Any]:
    device = local_device()
    base, slow = write_models(work / name, name, args.mobilebert_seq)
    cfg_base, cfg_slow = config_for(base), config_for(slow)
    with ResultStore(store_path) as store:
        floor = calibrate(device, store, cfg_base, pairs=args.calibration_pairs,
                          say=lambda line: print(f"  {line}", flush=True))
    print(f"{name}: noise floor {floor.describe()}", flush=True)
    rows = []
    for i in range(args.pairs):
        if time.monotonic() > deadline:
            print(f"{name}: budget spent after {i} pair(s)", flush=True)
            break
        hog = None
        if i % 2 == 1:  # bounded: it ends by itself even if this script is killed
            hog = subprocess.Popen([sys.executable, "-c", HOG, "240"])
        try:
            a = bench(device, cfg_base, store_path, f"{name} {i} A")
            a2 = bench(device, cfg_base, store_path, f"{name} {i} A'")
            b = bench(device, cfg_slow, store_path, f"{name} {i} B")
        finally:
            if hog is not None:
                hog.kill()
                hog.wait()
        row: dict[str, Any] = {"pair": i, "hog": hog is not None, "runs": [a, a2, b]}
        for metric in METRICS:
            same, caught = gate(store_path, a, a2, metric), gate(store_path, a2, b, metric)
            row[metric] = {"aa": same, "ab": caught}
            print(f"{name} pair {i + 1}{' (hog)' if hog else ''} {metric:>6}: A/A "
                  f"{same['slowdown_pct']:+.1f} % -> {same['verdict']} (exit {same['exit']}); "
                  f"slow variant {caught['slowdown_pct']:+.1f} % -> {caught['verdict']} "
                  f"(exit {caught['exit']})", flush=True)
        rows.append(row)
    return {"model": name, "floor": floor.floor_pct, "floor_load1": floor.load1,
            "floor_steal_pct": floor.steal_pct, "pairs": rows}


def rates(rows: list[dict[str, Any]], metric: str) -> tuple[int, int, int]:
    false_alarms = sum(r[metric]["aa"]["exit"] == 4 for r in rows)
    caught = sum(r[metric]["ab"]["exit"] == 4 for r in rows)
    return false_alarms, caught, len(rows)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--pairs", type=int, default=10)
    ap.add_argument("--models", default="tiny,mobilebert")
    ap.add_argument("--mobilebert-seq", type=int, default=32)
    ap.add_argument("--calibration-pairs", type=int, default=3)
    ap.add_argument("--budget-min", type=float, default=24.0)
    ap.add_argument("--keep", metavar="DIR", help="keep the models and the store here")
    ap.add_argument("--json", metavar="OUT")
    args = ap.parse_args()
    started = time.monotonic()
    deadline = started + args.budget_min * 60.0
    with tempfile.TemporaryDirectory(prefix="aa-noise-") as tmp:
        work = Path(args.keep) if args.keep else Path(tmp)
        work.mkdir(parents=True, exist_ok=True)
        store_path = work / "aa.sqlite"
        results = [run_model(name.strip(), args, work, store_path, deadline)
                   for name in args.models.split(",") if name.strip()]
    print(f"\nfarm compare --max-slowdown 5% on local, {DEFAULT_ROUNDS} rounds a run, "
          f"{(time.monotonic() - started) / 60:.1f} min:")
    for metric in METRICS:
        total = [0, 0, 0]
        print(f" --metric {metric}{' (the default)' if metric == METRICS[0] else ''}:")
        for res in results:
            fa, caught, n = rates(res["pairs"], metric)
            planted = [r[metric]["ab"]["slowdown_pct"] for r in res["pairs"]]
            total = [total[0] + fa, total[1] + caught, total[2] + n]
            print(f"  {res['model']:<10} floor ±{res['floor'][metric]:.1f} % (calibration "
                  f"load up to {res['floor_load1']['max']}, steal up to "
                  f"{res['floor_steal_pct']['max']} %): false alarms {fa}/{n}, slowdown "
                  f"caught {caught}/{n} (the planted change measured: median "
                  f"{np.median(planted):+.1f} %, {min(planted):+.1f} to {max(planted):+.1f})")
        print(f"  overall    false alarms {total[0]}/{total[2]}, slowdown caught "
              f"{total[1]}/{total[2]}")
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
