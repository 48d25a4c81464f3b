"""The model front-end: one path from a user's ONNX file to what every route builds.

- `make_spec(shapes, batch, seq) -> ShapeSpec` and `bind` (shapes.py): `--shape/--batch/--seq`.
- `canonicalize(src, spec, out_dir) -> Canonical` (pipeline.py): bound shapes, canonical op set
  (LayerNormalization, erf GELU chain, MatMul+Add, constant Reshape/Transpose, Softmax, Gather,
  additive mask ops, quant ops), cached; ORT runs the source file, TVM and custom the canonical.
- `detect_quantisation(model) -> variant` (quant.py); `quiet_stdout()` (capture.py).
"""

from __future__ import annotations

from farm.models.frontend.capture import quiet_stdout
from farm.models.frontend.pipeline import Canonical, canonical_model, canonicalize
from farm.models.frontend.quant import detect_quantisation
from farm.models.frontend.shapes import ShapeSpec, make_spec, spec_from_meta

__all__ = ["Canonical", "ShapeSpec", "canonical_model", "canonicalize", "detect_quantisation",
           "make_spec", "quiet_stdout", "spec_from_meta"]
