"""Models to benchmark: a generated BERT-shaped encoder (presets, variants) or any .onnx file.

Public API (see the modules for the contracts):
- `build_model(preset_or_config, variant, out_dir) -> ModelInfo`   (build.py)
- `resolve_model(spec, variant, out_dir) -> ModelInfo`              (build.py)
- `make_inputs(model, seed) -> dict[str, ndarray]`, `write_inputs(model, seed, out_dir)`
- `EncoderConfig`, `PRESETS`, `VARIANTS`                            (config.py)
- `build_encoder(config) -> onnx.ModelProto` and the op-pattern contract (encoder.py)
"""

from __future__ import annotations

from farm.build.models.build import ModelInfo, build_model, file_sha256, resolve_model
from farm.build.models.check import check_model_file
from farm.build.models.config import PRESETS, VARIANTS, EncoderConfig
from farm.build.models.encoder import build_encoder
from farm.build.models.inputs import ftns_module, make_inputs, write_inputs

__all__ = [
    "PRESETS",
    "VARIANTS",
    "EncoderConfig",
    "ModelInfo",
    "build_encoder",
    "build_model",
    "check_model_file",
    "file_sha256",
    "ftns_module",
    "make_inputs",
    "resolve_model",
    "write_inputs",
]
