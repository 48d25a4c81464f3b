"""Make the quantized variants of an fp32 model with onnxruntime's own quantizers.

`quantize(fp32_path, variant, out_path, calibration)` writes `out_path`. Variants (names in
config.VARIANTS):
- ``int8-dynamic``: `quantize_dynamic`, weight QInt8, MatMul only (embedding Gathers stay
  fp32; ORT's default would also quantize them, which only changes the table lookups).
- ``int8-qdq``: `quantize_static`, QDQ format, QUInt8 activations and QInt8 weights (U8S8,
  QDQ_OPTIONS says why), MinMax calibration over a fixed list of input feeds (`calibration`,
  deterministic), MatMul only, per-tensor. ORT turns the Q/DQ pairs around each MatMul into
  QLinearMatMul/MatMulInteger when graph optimisation is on; TVM imports them as u8 x s8
  integer GEMMs (build/tvm/qdq.py).
- ``int4``: `MatMulNBitsQuantizer(bits=4, block_size=128, is_symmetric=True,
  accuracy_level=4)` (INT4_OPTIONS says why): MatMuls with constant weights become
  MatMulNBits; activation×activation MatMuls (attention scores/context) stay fp32.
The quantizers are deterministic for a given onnxruntime version (checked by the tests).
Each quantized file carries the options its quantizer ran with as JSON in its metadata
(`farm.quantizer`: tool, options, onnxruntime version); the ORT runner reads them back onto
every ORT record (build_flags.quantizer). QUANTIZER_REVISION enters the cache key of
quantized files: bump it when the options or the metadata change.

Accuracy against fp32 (last_hidden_state, inputs seed 0, onnxruntime 1.32; outputs have std≈1):

    preset      variant        max|err|  mean|err|  cosine
    tiny        int8-dynamic   0.060     0.013      0.9999
    tiny        int8-qdq       0.475     0.026      0.9994
    tiny        int4           0.514     0.111      0.990
    mobilebert  int8-dynamic   0.046     0.008      0.9999
    mobilebert  int8-qdq       0.159     0.027      0.9984
    mobilebert  int4           0.364     0.058      0.9929

(int8-qdq with U8S8 since QUANTIZER_REVISION 4: MinMax's asymmetric uint8 grid is the int8
one shifted by 128, so the figures of the S8S8 file (0.158 / 0.027 / 0.9984) barely move;
int4 at block 128, level 4; at block 32 it was 0.461 / 0.095 / 0.993 and 0.261 / 0.048 /
0.9950. mobilebert: the real MobileBERT graph, corpus/mobilebert.py, outputs std 0.61; the rows
before it were measured on the BERT-shaped approximation that preset used to be, where int4
reached max 1.41 / cosine 0.90.) Random Gaussian weights quantize worse than trained ones
at 4 bits, and without normalisation the error stays in MobileBERT's residual stream. A
handful of elements carry the max error, so an element-wise atol is the wrong check for
quantized variants: compare mean error or cosine.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import numpy as np
import onnx

from farm.errors import BuildError

# 2: options recorded in the file's metadata (farm.quantizer); 3: int4 block 128, level 4;
# 4: int8-qdq activations QUInt8 (U8S8)
QUANTIZER_REVISION = "4"
QUANTIZER_METADATA = "farm.quantizer"  # read by agents/runners/ort_runner.py
# int4: block 128, accuracy_level 4 (int8 compute, MLAS's CompInt8 path: the only level that
# selects it, matmul_nbits.cc; level 1 runs as level 0). Measured 2026-12-04 on a 2-core Zen 4
# EPYC (AVX-512 VNNI, no AMX), ORT 1.32, mobilebert, farm's runner, median ms at 1 / 2 threads
# in uncontended alternating rounds: fp32 62.9-64.5 / 40.0-41.2; level 4 block 128 57.4-58.5 /
# 38.1-40.9 (the only set faster than fp32); level 0 block 32 (the previous choice, ORT's
# faster path on an AMX Xeon) 62.0-65.1 / 40.9-42.7; level 4 block 32 66.9-76.5 / 44.7-51.7;
# level 0 block 64/128 and asymmetric sets slower. Per-token cosine to fp32 0.9914 / 0.9929
# (min / mean; bounds 0.80 / 0.93). The custom route reads a 128-block as four Q4_0 blocks of
# the same scale (build/custom/weights.py), TVM dequantises any block (build/tvm/nbits.py).
INT4_OPTIONS = {"bits": 4, "block_size": 128, "is_symmetric": True, "accuracy_level": 4}
DYNAMIC_OPTIONS = {"op_types_to_quantize": ["MatMul"], "weight_type": "QInt8"}
# int8-qdq: activations QUInt8, weights QInt8 (U8S8): the pair ORT's x86-64 int8 kernels
# are built for (its quantization guide: MLAS runs U8S8 with VPMADDUBSW on AVX2/AVX-512, VNNI's
# vpdpbusd is u8 x s8 too). The guide calls S8S8 QDQ "the first choice", but on x86 ORT's QDQ
# MatMul fusion (QDQSelectorActionTransformer's MatMul selector) does not take int8
# activations unless `session.qdqisint8allowed=1` (a setting the headers describe for ARM), so
# an S8S8 file ran its MatMuls as DQ -> fp32 MatMul, and with that set MLAS has no fast S8S8
# GEMM here. Measured 2026-12-06 on the 2-core Zen 4 EPYC (AVX-512 VNNI), ORT 1.32, mobilebert,
# 1 thread, median ms, busy host: `farm bench --variant int8-qdq` in three runs interleaved
# with the S8S8 build: S8S8 54.8-67.1, U8S8 31.7-36.5 (fp32 60.9-63.1, int8-dynamic
# 26.2-27.3); an ORT-only loop: S8S8 with qdqisint8allowed=1 192-253; cosine to fp32
# 0.9984 for both. On arm64 ORT fuses S8S8 and U8S8 alike, so U8S8 is the set fast on both
# ISAs. Caveat (ORT's `session.x64quantprecision`): without VNNI, VPMADDUBSW can saturate U8S8
# sums. Activation zero points are asymmetric either way (uint8 0-154 on mobilebert): the
# custom route drops activation Q/DQ pairs (build/custom/qdq.py); TVM takes them as
# MatMulInteger's a_zero_point (build/tvm/qdq.py).
QDQ_OPTIONS = {"quant_format": "QDQ", "op_types_to_quantize": ["MatMul"],
               "activation_type": "QUInt8", "weight_type": "QInt8",
               "calibrate_method": "MinMax", "per_channel": False}


def record_options(path: Path, tool: str, options: dict[str, object]) -> None:
    """Write `tool` and `options` into the model file's metadata (farm.quantizer)."""
    import onnxruntime

    model = onnx.load(str(path))
    entry = json.dumps({"tool": tool, "options": options,
                        "onnxruntime": onnxruntime.__version__}, sort_keys=True)
    kept = [p for p in model.metadata_props if p.key != QUANTIZER_METADATA]
    del model.metadata_props[:]
    model.metadata_props.extend(kept)
    model.metadata_props.add(key=QUANTIZER_METADATA, value=entry)
    onnx.save_model(model, str(path))


class _FeedReader:
    """A CalibrationDataReader over a fixed list of feeds (duck-typed: get_next/rewind)."""

    def __init__(self, feeds: list[dict[str, np.ndarray]]) -> None:
        self._feeds = feeds
        self._it: Iterator[dict[str, np.ndarray]] = iter(feeds)

    def get_next(self) -> dict[str, np.ndarray] | None:
        return next(self._it, None)

    def rewind(self) -> None:
        self._it = iter(self._feeds)


def _int8_dynamic(src: Path, dst: Path) -> None:
    from onnxruntime.quantization import QuantType, quantize_dynamic

    quantize_dynamic(src, dst, op_types_to_quantize=["MatMul"], weight_type=QuantType.QInt8)
    record_options(dst, "quantize_dynamic", DYNAMIC_OPTIONS)


def _int8_qdq(src: Path, dst: Path, calibration: list[dict[str, np.ndarray]]) -> None:
    from onnxruntime.quantization import (
        CalibrationMethod,
        QuantFormat,
        QuantType,
        quantize_static,
    )

    if not calibration:
        raise BuildError("int8-qdq quantization: no calibration feeds were given")
    quantize_static(
        src, dst, _FeedReader(calibration),  # type: ignore[arg-type]
        quant_format=QuantFormat.QDQ,
        op_types_to_quantize=["MatMul"],
        activation_type=QuantType.QUInt8,
        weight_type=QuantType.QInt8,
        calibrate_method=CalibrationMethod.MinMax,
    )
    record_options(dst, "quantize_static", {**QDQ_OPTIONS, "calibration_feeds": len(calibration)})


def _int4(src: Path, dst: Path) -> None:
    try:
        from onnxruntime.quantization.matmul_nbits_quantizer import MatMulNBitsQuantizer
    except ImportError as exc:  # onnx_ir missing, or an onnxruntime without the quantizer
        raise BuildError(
            f"int4 quantization needs onnxruntime's MatMulNBitsQuantizer: {exc}",
            hint="pip install 'onnxruntime>=1.18' onnx_ir",
        ) from exc
    quant = MatMulNBitsQuantizer(onnx.load(str(src)), **INT4_OPTIONS)  # type: ignore[arg-type]
    quant.process()
    onnx.save_model(quant.model.model, str(dst))
    record_options(dst, "MatMulNBitsQuantizer", INT4_OPTIONS)


@contextmanager
def _quiet_quantizers() -> Iterator[None]:
    """The quantizers log every skipped node (INFO) and a pre-processing advice (root WARNING)."""
    root = logging.getLogger()
    nbits = logging.getLogger("onnxruntime.quantization.matmul_nbits_quantizer")
    saved = root.level, nbits.level
    root.setLevel(logging.ERROR)
    nbits.setLevel(logging.ERROR)
    try:
        yield
    finally:
        root.setLevel(saved[0])
        nbits.setLevel(saved[1])


def quantize(src: Path, variant: str, dst: Path,
             calibration: list[dict[str, np.ndarray]] | None = None) -> None:
    """Write the `variant` of fp32 model `src` to `dst` (atomically: a temp file, then rename)."""
    dst.parent.mkdir(parents=True, exist_ok=True)
    with _quiet_quantizers(), tempfile.TemporaryDirectory(dir=dst.parent, prefix=".quant-") as tmp:
        out = Path(tmp) / dst.name
        # the quantizers write side files next to their input (<src>-inferred.onnx): give
        # them a private copy so parallel builds of one source do not collide
        private = Path(tmp) / f"src-{src.name}"
        try:
            os.link(src, private)
        except OSError:  # another file system
            shutil.copyfile(src, private)
        try:
            if variant == "int8-dynamic":
                _int8_dynamic(private, out)
            elif variant == "int8-qdq":
                _int8_qdq(private, out, calibration or [])
            elif variant == "int4":
                _int4(private, out)
            else:
                raise BuildError(f"no quantizer for variant {variant!r}")
        except BuildError:
            raise
        except Exception as exc:  # the quantizers raise anything from ValueError to KeyError
            raise BuildError(
                f"{variant} quantization of {src} failed: {type(exc).__name__}: {exc}",
                hint="check that the model is a float32 ONNX model that onnxruntime can load",
            ) from exc
        out.replace(dst)
