"""What ONNX Runtime's profiler adds to each node's time, at 1 and 2 intra-op threads.

Why: the triangle report's ORT per-op total was ~190 % of the end-to-end median on
mobilebert at 2 threads. This script measures, per model and thread count:

* e2e: median wall time of `session.run` WITHOUT profiling (what the bench times);
* run: median of ORT's own `model_run` durations in a profiled session;
* nodes: median over runs of the sum of the `*_kernel_time` node durations (the per-op total
  the report sums);
* per node: (nodes - e2e) / node count, µs: what each node's window holds beyond the
  kernel's unprofiled share of the run.

Models: an N-node Add chain on a small tensor (the kernels cost ~nothing, so what is left is
the profiler's own bookkeeping) and any preset (`--model mobilebert`).

    python benchmarks/ort_profile_overhead.py --model mobilebert --threads 1,2 --runs 20

One run on a machine shared with other jobs: figures are noisy; compare ratios, not µs.
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper


def add_chain(n: int, path: Path) -> Path:
    nodes = [helper.make_node("Add", [f"t{i}", "one"], [f"t{i + 1}"], name=f"add{i}")
             for i in range(n)]
    graph = helper.make_graph(
        nodes, "chain", [helper.make_tensor_value_info("t0", TensorProto.FLOAT, [1, 64])],
        [helper.make_tensor_value_info(f"t{n}", TensorProto.FLOAT, [1, 64])],
        [helper.make_tensor("one", TensorProto.FLOAT, [1], [1.0])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save(model, path)
    return path


def feeds_for(sess: ort.InferenceSession) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(0)
    out = {}
    for i in sess.get_inputs():
        shape = [d if isinstance(d, int) else 1 for d in i.shape]
        if "int" in i.type:
            out[i.name] = rng.integers(0, 100, size=shape).astype(np.int64)
        else:
            out[i.name] = rng.standard_normal(shape).astype(np.float32)
    return out


def options(threads: int, prefix: str | None = None) -> ort.SessionOptions:
    so = ort.SessionOptions()
    so.intra_op_num_threads = threads
    so.inter_op_num_threads = 1
    so.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    so.log_severity_level = 3
    if prefix:
        so.enable_profiling = True
        so.profile_file_prefix = prefix
    return so


def measure(model: Path, threads: int, runs: int) -> dict[str, float]:
    sess = ort.InferenceSession(str(model), options(threads), providers=["CPUExecutionProvider"])
    feeds = feeds_for(sess)
    for _ in range(3):
        sess.run(None, feeds)
    e2e = []
    for _ in range(runs):
        t0 = time.perf_counter()
        sess.run(None, feeds)
        e2e.append((time.perf_counter() - t0) * 1e3)
    del sess  # its idle thread pool must not compete with the profiled one (as in the runner)
    with tempfile.TemporaryDirectory() as tmp:
        prof = ort.InferenceSession(str(model), options(threads, f"{tmp}/p"),
                                    providers=["CPUExecutionProvider"])
        for _ in range(runs + 1):
            prof.run(None, feeds)
        events = json.loads(Path(prof.end_profiling()).read_text())
    windows = sorted((e["ts"], e["ts"] + e["dur"]) for e in events
                     if e.get("cat") == "Session" and e.get("name") == "model_run")[1:]
    sums = [0.0] * len(windows)
    count = 0
    for e in events:
        if e.get("cat") != "Node" or not e["name"].endswith("_kernel_time"):
            continue
        for i, (lo, hi) in enumerate(windows):
            if lo <= e["ts"] <= hi:
                sums[i] += e["dur"] / 1e3
                count += i == 0
                break
    e2e_ms = statistics.median(e2e)
    nodes_ms = statistics.median(sums)
    return {"threads": threads, "nodes": count, "e2e_ms": e2e_ms,
            "run_ms": statistics.median((hi - lo) / 1e3 for lo, hi in windows),
            "nodes_ms": nodes_ms, "nodes_pct_of_e2e": nodes_ms / e2e_ms * 100,
            "extra_us_per_node": (nodes_ms - e2e_ms) * 1e3 / max(count, 1)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", action="append", help="preset or .onnx (repeatable)")
    parser.add_argument("--chain", type=int, default=400, help="Add-chain length (0: none)")
    parser.add_argument("--threads", default="1,2")
    parser.add_argument("--runs", type=int, default=20)
    args = parser.parse_args()
    models: list[tuple[str, Path]] = []
    tmp = Path(tempfile.mkdtemp(prefix="ort-overhead-"))
    if args.chain:
        models.append((f"add-chain-{args.chain}", add_chain(args.chain, tmp / "chain.onnx")))
    for spec in args.model or []:
        from farm.models import resolve_model
        models.append((spec, Path(resolve_model(spec, "fp32").path)))
    print("model                threads nodes   e2e ms   run ms  nodes ms  nodes/e2e  "
          "extra µs/node")
    for name, path in models:
        for threads in (int(t) for t in args.threads.split(",")):
            m = measure(path, threads, args.runs)
            print(f"{name:<20} {threads:>7} {m['nodes']:>5} {m['e2e_ms']:>8.3f} "
                  f"{m['run_ms']:>8.3f} {m['nodes_ms']:>9.3f} {m['nodes_pct_of_e2e']:>9.0f}% "
                  f"{m['extra_us_per_node']:>13.1f}")


if __name__ == "__main__":
    main()
