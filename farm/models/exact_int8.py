"""The exact integer reference of an int8 ONNX file: the file's own arithmetic, in numpy.

`exact_outputs(model_path, feeds) -> {output name: array}` runs the file with ONNX's
reference evaluator (`onnx.reference`, numpy only), its integer GEMMs exact: MatMulInteger
sums the products in float64 (every partial sum of int8 x int8 products stays an integer
below 2^53, so float64 BLAS adds them exactly, where numpy's int32 matmul has no BLAS and
takes ~10x longer) and returns int32 as ONNX defines. A QDQ file's MatMul multiplies the
dequantised values in fp32, the file's own semantics. ExactUnavailable (with the reason)
when the evaluator cannot run the file (a com.microsoft op of an optimised export).

Why the bench needs it: ONNX Runtime is not an exact int8 engine everywhere. On x86 without
VNNI, MLAS's U8S8 GEMM multiplies with VPMADDUBSW, whose pairwise int16 sums saturate (seen:
outputs off by up to 9.7 on a small QDQ MatMul on an AVX2 Zen 3), so a route that computes
the file exactly would "mismatch" ORT there. `ort_int8_exact(arch, features)` says where ORT's
int8 GEMM is exact (x86 with AVX-512 VNNI, AVX-VNNI or AMX; AArch64, whose dot products
widen to int32): the feature list must be the CPU's own, never a capped one (FARM_ISA cannot
cap ORT).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import numpy as np

from farm.errors import FarmError

# what makes ORT's x86 U8S8 GEMM use an instruction that sums into int32 (vpdpbusd, tiles)
_X86_EXACT = frozenset({"avx512vnni", "avxvnni", "amx-int8"})


class ExactUnavailable(FarmError):
    """The reference evaluator cannot run this file."""


def ort_int8_exact(arch: str, features: tuple[str, ...] | list[str]) -> bool:
    """Whether ORT's int8 GEMM on a CPU with `features` sums exactly (see module doc)."""
    return arch != "x86_64" or bool(_X86_EXACT & set(features))


def _ops() -> list[type]:
    from onnx.reference.op_run import OpRun
    from onnx.reference.ops.op_dequantize_linear import _CommonDequantizeLinear

    class MatMulInteger(OpRun):  # type: ignore[misc]
        op_domain = ""

        def _run(self, a: Any, b: Any, a_zero_point: Any = None,
                 b_zero_point: Any = None) -> tuple[np.ndarray]:
            x = a.astype(np.float64)
            if a_zero_point is not None:  # scalar, or one per row of A
                zp = np.asarray(a_zero_point, np.float64)
                x -= zp.reshape(-1, 1) if zp.ndim == 1 and zp.size > 1 else zp
            w = b.astype(np.float64)
            if b_zero_point is not None:  # scalar, or one per column of B
                w -= np.asarray(b_zero_point, np.float64)
            if w.ndim == 2:  # numpy's stacked matmul skips BLAS: ~5x slower on [1, S, K]
                out = (x.reshape(-1, x.shape[-1]) @ w).reshape(*x.shape[:-1], w.shape[1])
            else:
                out = np.matmul(x, w)
            return (out.astype(np.int32),)

    # the evaluator registers DequantizeLinear from opset 19 on; 13-18 compute the same
    # (per tensor or per axis), and the quantizers write opset 17 files. Its attributes are
    # passed by the newest schema's names, whatever the file's opset.
    class DequantizeLinear(_CommonDequantizeLinear):  # type: ignore[misc]
        op_domain = ""

        def _run(self, *args: Any, axis: int = 1, block_size: int = 0,
                 output_dtype: Any = None) -> Any:
            return super()._run(*args, axis=axis, block_size=block_size,
                                output_dtype=output_dtype)

    return [MatMulInteger, DequantizeLinear]


def exact_outputs(model_path: Path, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Run in a child process with one BLAS thread: OpenBLAS's default (a thread per core)
    made MobileBERT's 361 integer GEMMs take 12 s instead of 0.5 s on a 2-vCPU host that
    other jobs share, and the evaluator's arrays leave with the child."""
    with tempfile.TemporaryDirectory(prefix="farm-exact-") as tmp:
        given, got = Path(tmp) / "feeds.npz", Path(tmp) / "outputs.npz"
        np.savez(given, **feeds)
        env = {**os.environ, "OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1",
               "PYTHONPATH": os.pathsep.join(
                   [str(Path(__file__).resolve().parents[2]),
                    *filter(None, [os.environ.get("PYTHONPATH")])])}
        proc = subprocess.run([sys.executable, "-m", __name__, str(model_path), str(given),
                               str(got)], capture_output=True, text=True, env=env,
                              check=False)
        if proc.returncode != 0:
            last = (proc.stderr.strip().splitlines() or ["no message"])[-1]
            raise ExactUnavailable(last if proc.returncode == 3 else
                                   f"the exact integer reference of {model_path.name} failed: "
                                   f"{last}")
        with np.load(got) as data:
            names = json.loads(str(data["__names__"]))
            return {n: np.array(data[f"o{i}"]) for i, n in enumerate(names)}


def _evaluate(model_path: Path, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    import onnx
    from onnx.reference import ReferenceEvaluator

    model = onnx.load(str(model_path))
    try:
        evaluator = ReferenceEvaluator(model, new_ops=_ops())
        names = [o.name for o in model.graph.output]
        values = evaluator.run(names, dict(feeds))
    except Exception as exc:  # the evaluator raises plain errors for what it lacks
        raise ExactUnavailable(f"the exact integer reference cannot run {model_path.name}: "
                               f"{type(exc).__name__}: {str(exc)[:200]}") from exc
    return {n: np.asarray(v) for n, v in zip(names, values, strict=True)}


def _main(argv: list[str]) -> None:
    model, given, out = (Path(a) for a in argv)
    with np.load(given) as data:
        feeds = {k: np.array(data[k]) for k in data.files}
    outputs = _evaluate(model, feeds)
    arrays = {f"o{i}": v for i, v in enumerate(outputs.values())}
    np.savez(out, __names__=np.array(json.dumps(list(outputs))), **arrays)


if __name__ == "__main__":
    try:
        _main(sys.argv[1:])
    except ExactUnavailable as exc:  # one line for the parent, no traceback
        print(exc.message, file=sys.stderr)
        sys.exit(3)
