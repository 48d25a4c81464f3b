"""The ONNX file TVM imports: farm's build-time rewrites of what TVM 0.27 imports badly.

- nbits.py: `MatMulNBits` (the int4 variant) dequantised to fp32 MatMuls (the frontend has
  no MatMulNBits);
- qdq.py: static QDQ MatMuls with constant int8 weights as `MatMulInteger` (u8 x s8, VNNI)
  instead of fp32 GEMMs on fake-quantised values.

`importable(path)` yields (a file TVM can import, what was rewritten): the rewrite in a
temporary directory, or `path` itself when nothing applies. build_tvm, `farm tune` and
`farm models check` import through it, so tuning records and verdicts match the build.
The counts go to the build's sidecar (`rewrites`) and records (`build_flags.tvm_rewrites`).
"""

from __future__ import annotations

import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import onnx

from farm.routes.tvm import nbits, qdq


def rewritten(model: onnx.ModelProto) -> tuple[onnx.ModelProto | None, dict[str, int]]:
    """(the rewritten model or None when nothing applies, counts by rewrite)."""
    counts: dict[str, int] = {}
    out = None
    dequantized = nbits.dequantized(model)
    if dequantized is not None:
        counts["nbits_dequantized"] = sum(n.op_type == nbits.OP for n in model.graph.node)
        out = model = dequantized
    integer = qdq.integer_matmuls(model)
    if integer is not None:
        counts["qdq_integer_matmuls"] = integer.rewritten
        counts["qdq_matmuls_kept"] = integer.kept
        out = integer.model
    return out, counts


@contextmanager
def importable(model_path: Path) -> Iterator[tuple[Path, dict[str, int]]]:
    """(`model_path` or its rewrite, counts) while the context lasts."""
    model, counts = rewritten(onnx.load(str(model_path)))
    if model is None:
        yield model_path, counts
        return
    with tempfile.TemporaryDirectory(prefix="farm-tvm-onnx-") as tmp:
        path = Path(tmp) / model_path.name
        onnx.save(model, str(path))
        yield path, counts
