"""Models to benchmark: a generated BERT-shaped encoder (presets, variants) or any .onnx file.

Public API (see the modules for the contracts):
- `build_model(preset_or_config, variant, out_dir) -> ModelInfo`   (build.py)
- `resolve_model(spec, variant, out_dir) -> ModelInfo`              (build.py)
- `make_inputs(model, seed) -> dict[str, ndarray]`, `write_inputs(model, seed, out_dir)`
- `EncoderConfig`, `PRESETS`, `VARIANTS`                            (config.py)
- `build_encoder(config) -> onnx.ModelProto` and the op-pattern contract (encoder.py)
"""

from __future__ import annotations

import importlib
from typing import Any

from farm.models.config import PRESETS, VARIANTS, EncoderConfig

# onnx costs ~2 s to import: the CLI lists presets without it, the rest loads on first use
_LAZY = {
    "ModelInfo": "info", "build_model": "build", "file_sha256": "build",
    "resolve_model": "build", "check_model_file": "check", "build_encoder": "encoder",
    "ftns_module": "inputs", "make_inputs": "inputs", "write_inputs": "inputs",
}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(importlib.import_module(f"farm.models.{_LAZY[name]}"), name)
    raise AttributeError(f"module 'farm.models' has no attribute {name!r}")

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
