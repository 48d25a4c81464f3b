"""Which maintained library does the front-end's generic passes: onnxscript vs onnxslim vs
onnxsim on corpus files (inputs bound first, as the front-end does).

    python benchmarks/frontend_libs.py [--small] [--files bert-opset14-dynamic,...]

Per library and file: seconds, ok/error, what is left of the dynamic-shape plumbing
(Shape/Gather/Concat/Constant nodes), Gemm nodes (the custom lowerer wants MatMul+Add),
LayerNormalization nodes (none of them fuses torch's decomposed chain), and the largest
output difference against ORT on the source. onnxslim and onnxsim are not farm
dependencies: run this in an environment that has them (the script skips a missing one).
"""

from __future__ import annotations

import argparse
import importlib
import tempfile
import time
from collections import Counter
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort

from farm.models.corpus import corpus_model
from farm.models.frontend.shapes import ShapeSpec, bind
from farm.models.inputs import make_inputs

PLUMBING = ("Shape", "Gather", "Concat", "Constant", "Unsqueeze", "Slice")


def _onnxscript(m: onnx.ModelProto) -> onnx.ModelProto:
    import onnxscript.optimizer

    return onnxscript.optimizer.optimize(m)


def _onnxslim(m: onnx.ModelProto) -> onnx.ModelProto:
    return importlib.import_module("onnxslim").slim(m)


def _onnxsim(m: onnx.ModelProto) -> onnx.ModelProto:
    out, ok = importlib.import_module("onnxsim").simplify(m)
    if not ok:
        raise RuntimeError("onnxsim's own check failed")
    return out


LIBS = {"onnxscript": ("onnxscript", _onnxscript), "onnxslim": ("onnxslim", _onnxslim),
        "onnxsim": ("onnxsim", _onnxsim)}


def _run(model: onnx.ModelProto, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
    opts = ort.SessionOptions()
    opts.log_severity_level = 3
    return ort.InferenceSession(model.SerializeToString(), opts,
                                providers=["CPUExecutionProvider"]).run(None, feeds)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--files", default="bert-opset14-dynamic,distilbert-opset11-dynamic,"
                                       "bert-opset14-dynamic+ortopt,"
                                       "distilbert-opset14-dynamic+ortopt")
    ap.add_argument("--small", action="store_true")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        for name in args.files.split(","):
            src = corpus_model(name + ("@small" if args.small else ""), Path(tmp))
            model = onnx.load(str(src))
            bound = bind(model, ShapeSpec())
            feeds = make_inputs(src, 0, bound)
            want = _run(onnx.load(str(src)), feeds)
            for lib, (module, fn) in LIBS.items():
                try:
                    importlib.import_module(module)
                except ImportError:
                    print(f"{name:40s} {lib:10s} not installed")
                    continue
                copy = onnx.ModelProto()
                copy.CopyFrom(model)
                started = time.perf_counter()
                try:
                    out = fn(copy)
                except Exception as exc:
                    print(f"{name:40s} {lib:10s} FAILED {time.perf_counter() - started:6.1f} s"
                          f": {type(exc).__name__}: {str(exc).splitlines()[0][:90]}")
                    continue
                secs = time.perf_counter() - started
                ops = Counter(n.op_type for n in out.graph.node)
                got = _run(out, feeds)
                diff = max(float(np.abs(a - b).max()) for a, b in zip(want, got, strict=True))
                print(f"{name:40s} {lib:10s} ok {secs:6.1f} s  plumbing "
                      f"{sum(ops[o] for o in PLUMBING):3d}  Gemm {ops['Gemm']:2d}  "
                      f"LayerNorm {ops['LayerNormalization']:2d}  ReduceMean "
                      f"{ops['ReduceMean']:2d}  max diff {diff:.2e}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
