"""The bench's use of the model front-end (farm/models/frontend): which variant a user's
file really is, and what its outputs are judged against.

- `front_for(config, model) -> Canonical | None`: a user's .onnx file goes through the
  front-end (bound shapes, canonical op set); the generated presets are canonical already.
- `effective_variant(config, canonical)`: a file that is already quantised (detected) is
  recorded as that variant, not as fp32.
- `reference_plan(config, model, canonical) -> (path, label, kind)`: `--reference FILE.onnx`
  (kind "fp32"), else ORT on the same file for a pre-quantised file (kind "same-file"),
  else the fp32 build (kind "fp32").
Which form each route builds from is the route's own (`Route.model_input`, used by
`farm.bench.plan`).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from farm.errors import UsageError
from farm.models.check import load_checked
from farm.models.frontend import Canonical, ShapeSpec, canonicalize

if TYPE_CHECKING:
    from farm.bench.config import BenchConfig
    from farm.models import ModelInfo


def spec_of(config: BenchConfig) -> ShapeSpec:
    return ShapeSpec({n: tuple(d) for n, d in config.shapes}, config.batch, config.seq)


def front_for(config: BenchConfig, model: ModelInfo) -> Canonical | None:
    spec = spec_of(config)
    if model.preset is not None:
        if spec.shapes or spec.batch not in (None, 1):
            raise UsageError("the generated presets have batch 1 and fixed input names",
                             hint="use --seq N with a preset; --shape/--batch with a file")
        return None
    return canonicalize(model.path, spec)


def effective_variant(config: BenchConfig, canonical: Canonical | None) -> str:
    if canonical is not None and config.variant == "fp32":
        return canonical.quantisation
    return config.variant


def reference_plan(config: BenchConfig, model_path: Path, fp32_path: Path,
                   canonical: Canonical | None) -> tuple[Path, str, str]:
    if config.reference:
        ref = Path(config.reference)
        if not ref.exists():
            raise UsageError(f"--reference {ref}: no such file",
                             hint="give the fp32 .onnx file the quantised model came from")
        load_checked(ref)  # ORT would read any file whole first: judged like --model
        return ref, f"onnxruntime on the host ({ref.name}, fp32 reference)", "fp32"
    if canonical is not None and canonical.quantisation != "fp32" and config.variant == "fp32":
        return model_path, (f"onnxruntime on the host (the same {canonical.quantisation} "
                            "file)"), "same-file"
    return fp32_path, f"onnxruntime fp32 on the host ({fp32_path.stem})", "fp32"
