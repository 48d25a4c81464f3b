"""Build or resolve the model a bench runs: `build_model`, `resolve_model`, `ModelInfo`.

- `build_model(preset_or_config, variant="fp32", out_dir=None) -> ModelInfo`: generate the
  encoder (encoder.py) and, for a quantized variant, quantize the cached fp32 build
  (quantize.py). Files are cached under `out_dir` (default `state_dir()/"models"`) as
  `<name>-<variant>-<key12>.onnx`, key = sha256 of everything that determines the bytes
  (generator version, config, variant, onnxruntime version for quantized variants); a hit
  costs one hash of the file.
- `resolve_model(spec, variant="fp32", out_dir=None) -> ModelInfo`: a preset name,
  `corpus:NAME` (farm/models/corpus, generated and cached), or a path to any `.onnx`
  file (checked by check.py; a quantized variant of a file is made and cached keyed by the
  file's sha256; a file with external data is first inlined into one cached file).
`ModelInfo.sha256` is the sha256 of the model file's bytes (what deploy names it by).
"""

from __future__ import annotations

import hashlib
import os
import threading
from pathlib import Path

import onnx

from farm.artifacts import sha256_file as file_sha256
from farm.errors import BuildError
from farm.models.check import check_model_file
from farm.models.config import (
    GENERATOR_VERSION,
    PRESETS,
    EncoderConfig,
    ModelConfig,
    check_variant,
    preset,
)
from farm.models.corpus.mobilebert import build_mobilebert
from farm.models.corpus.mobilebert_config import MobileBertConfig
from farm.models.encoder import build_encoder
from farm.models.info import ModelInfo
from farm.models.inputs import CALIBRATION_SEEDS, make_inputs
from farm.models.quantize import QUANTIZER_REVISION, quantize
from farm.paths import state_dir


def _ort_version() -> str:
    import onnxruntime

    return onnxruntime.__version__


def _key(*parts: str) -> str:
    return hashlib.sha256("\0".join(parts).encode()).hexdigest()[:12]


def _default_dir(out_dir: Path | str | None) -> Path:
    path = Path(out_dir) if out_dir is not None else state_dir() / "models"
    path.mkdir(parents=True, exist_ok=True)
    return path


def _write_atomic(model: onnx.ModelProto, path: Path) -> None:
    # unique per writer: parallel benches may build the same model at the same moment
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{threading.get_ident()}.tmp")
    tmp.write_bytes(model.SerializeToString())
    tmp.replace(path)


def _quantized(src: Path, variant: str, dst: Path) -> None:
    calibration = None
    if variant == "int8-qdq":
        calibration = [make_inputs(src, seed) for seed in CALIBRATION_SEEDS]
    quantize(src, variant, dst, calibration)


def _generate(config: ModelConfig) -> onnx.ModelProto:
    if isinstance(config, MobileBertConfig):
        return build_mobilebert(config)
    return build_encoder(config)


def build_model(preset_or_config: str | ModelConfig, variant: str = "fp32",
                out_dir: Path | str | None = None, *, name: str | None = None) -> ModelInfo:
    """`name` labels a custom config's files (default: the matching preset, else "encoder",
    or "mobilebert" for a MobileBertConfig)."""
    check_variant(variant)
    if isinstance(preset_or_config, (EncoderConfig, MobileBertConfig)):
        config = preset_or_config
        default = "mobilebert" if isinstance(config, MobileBertConfig) else "encoder"
        name = name or next((n for n, c in PRESETS.items() if c == config), default)
    else:
        name, config = preset_or_config, preset(preset_or_config)
    out = _default_dir(out_dir)
    fp32_key = _key(str(GENERATOR_VERSION), config.canonical_json(), "fp32")
    fp32_path = out / f"{name}-fp32-{fp32_key}.onnx"
    if not fp32_path.exists():
        _write_atomic(_generate(config), fp32_path)
    path = fp32_path
    if variant != "fp32":
        key = _key(fp32_key, variant, _ort_version(), QUANTIZER_REVISION)
        path = out / f"{name}-{variant}-{key}.onnx"
        if not path.exists():
            _quantized(fp32_path, variant, path)
    preset_name = name if name in PRESETS else None
    return ModelInfo(path, file_sha256(path), preset_name, variant, config)


PROTOBUF_LIMIT = 2**31 - 1  # one ONNX protobuf cannot hold more


def _inline_external_data(path: Path, out_dir: Path | str | None) -> Path:
    """A file whose weights live in external data (torch's dynamo exporter writes
    FILE.onnx.data next to FILE.onnx by default) -> one self-contained copy, cached under
    `inlined/<key>/FILE.onnx` (same stem, so the model keeps its name). Every route deploys
    and hashes ONE file; the .data file would be left behind and ORT on the device would
    fail to load the graph. Key: the sha256 of the graph file and of every data file."""
    from onnx.external_data_helper import ExternalDataInfo, uses_external_data

    graph_only = onnx.load(str(path), load_external_data=False)
    locations = sorted({ExternalDataInfo(t).location for t in graph_only.graph.initializer
                        if uses_external_data(t)})
    if not locations:
        return path
    digest = hashlib.sha256(file_sha256(path).encode())
    for loc in locations:
        data = path.parent / loc
        if not data.is_file():
            raise BuildError(f"{path}: external data file {loc} is missing",
                             hint="keep the .onnx.data file the exporter wrote next to the "
                                  ".onnx file")
        digest.update(file_sha256(data).encode())
    dst = _default_dir(out_dir) / "inlined" / digest.hexdigest()[:12] / path.name
    if dst.exists():
        return dst
    model = onnx.load(str(path))
    if model.ByteSize() > PROTOBUF_LIMIT:
        raise BuildError(f"{path}: {model.ByteSize()} bytes with its external data; one ONNX "
                         "file holds at most 2 GiB", hint="farm deploys one self-contained "
                         "file per model: export a smaller model")
    dst.parent.mkdir(parents=True, exist_ok=True)
    _write_atomic(model, dst)
    return dst


def resolve_model(spec: str | Path, variant: str = "fp32",
                  out_dir: Path | str | None = None) -> ModelInfo:
    """A preset name or a path to an .onnx file -> a checked, built ModelInfo."""
    check_variant(variant)
    if isinstance(spec, str) and spec in PRESETS:
        return build_model(spec, variant, out_dir)
    if isinstance(spec, str) and spec.startswith("corpus:"):
        from farm.models.corpus import corpus_model

        spec = corpus_model(spec.removeprefix("corpus:"), _default_dir(out_dir) / "corpus")
    path = Path(spec)
    if not path.exists() and path.suffix != ".onnx":
        raise BuildError(
            f"model {str(spec)!r} is neither a preset nor an existing file",
            hint=f"use one of {', '.join(PRESETS)} or a path to an .onnx file",
        )
    check_model_file(path)
    path = _inline_external_data(path, out_dir)
    sha = file_sha256(path)
    if variant == "fp32":
        return ModelInfo(path.resolve(), sha, None, variant, None)
    out = _default_dir(out_dir)
    key = _key(sha, variant, _ort_version(), QUANTIZER_REVISION)
    dst = out / f"{path.stem}-{variant}-{key}.onnx"
    if not dst.exists():
        _quantized(path, variant, dst)
    return ModelInfo(dst, file_sha256(dst), None, variant, None)
