"""Encoder shapes: the `EncoderConfig` dataclass, the named presets and the variant names.

A config fully determines the fp32 graph (with `seed`, the weights too), so its canonical
JSON is part of the model cache key.

Presets
-------
- ``tiny``: 2 layers, hidden 64, 2 heads, FFN 256, seq 32, vocab 512. Builds and runs in
  milliseconds; what the tests use.
- ``mini``: 2 layers, hidden 256, 4 heads, FFN 1024, seq 128, vocab 30522: the synthetic
  encoder the shared TVM/ORT notes were timed on.
- ``mobilebert``: MobileBERT-uncased at seq 128, *in shape*: 24 layers, 4 heads, vocab 30522,
  hidden 128, FFN 2048. Approximation, chosen so every preset has the same op pattern:
  MobileBERT runs attention and its FFNs at its 128-wide bottleneck size, so hidden = 128
  (head dim 32); its four stacked 128→512→128 FFNs per layer are folded into one
  128→2048→128 FFN with the same MACs. Left out: the 512↔128 bottleneck projections around
  each layer (~18 % of its MACs), the trigram embedding convolution, and NoNorm (MobileBERT's
  elementwise affine instead of LayerNormalization). ≈ 18 M parameters (MobileBERT: 25 M).
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, fields

from farm.errors import BuildError

# Bump when the generated graph changes (op pattern, naming, weight init): it keys the cache.
GENERATOR_VERSION = 1

VARIANTS: dict[str, str] = {
    "fp32": "float32 weights and activations (the reference)",
    "int8-dynamic": "quantize_dynamic, QInt8 weights, activations quantized at run time",
    "int8-qdq": "quantize_static QDQ, QInt8 weights and activations, MinMax calibration",
    "int4": "MatMulNBits 4-bit weights, block 32, symmetric (activations fp32)",
}


@dataclass(frozen=True)
class EncoderConfig:
    """Shape of a BERT-style encoder; validated on construction."""

    layers: int = 2
    hidden: int = 64
    heads: int = 2
    ffn: int = 256
    seq: int = 128
    vocab: int = 30522
    seed: int = 0

    def __post_init__(self) -> None:
        for f in fields(self):
            value = getattr(self, f.name)
            if not isinstance(value, int) or isinstance(value, bool):
                raise BuildError(f"encoder config: {f.name} must be an int, got {value!r}")
            if f.name != "seed" and value < 1:
                raise BuildError(f"encoder config: {f.name} must be >= 1, got {value}")
        if self.hidden % self.heads:
            raise BuildError(
                f"encoder config: hidden {self.hidden} is not divisible by heads {self.heads}",
                hint="pick heads so that hidden / heads is an integer head size",
            )

    @property
    def head_dim(self) -> int:
        return self.hidden // self.heads

    def params(self) -> int:
        """Parameter count of the fp32 graph (embeddings, weights, biases, norms)."""
        h, f = self.hidden, self.ffn
        per_layer = 4 * (h * h + h) + (h * f + f) + (f * h + h) + 2 * 2 * h
        return self.vocab * h + self.seq * h + 2 * h + self.layers * per_layer

    def macs(self) -> int:
        """Multiply-accumulates of one inference (batch 1), matmuls only."""
        h, f, s = self.hidden, self.ffn, self.seq
        per_layer = s * (4 * h * h + 2 * h * f) + 2 * s * s * h
        return self.layers * per_layer

    def canonical_json(self) -> str:
        return json.dumps(asdict(self), sort_keys=True, separators=(",", ":"))

    def to_dict(self) -> dict[str, int]:
        return asdict(self)


PRESETS: dict[str, EncoderConfig] = {
    "tiny": EncoderConfig(layers=2, hidden=64, heads=2, ffn=256, seq=32, vocab=512),
    "mini": EncoderConfig(layers=2, hidden=256, heads=4, ffn=1024, seq=128, vocab=30522),
    "mobilebert": EncoderConfig(layers=24, hidden=128, heads=4, ffn=2048, seq=128, vocab=30522),
}


def preset(name: str) -> EncoderConfig:
    try:
        return PRESETS[name]
    except KeyError:
        raise BuildError(
            f"unknown model preset {name!r}",
            hint=f"use one of {', '.join(PRESETS)} or a path to an .onnx file",
        ) from None


def check_variant(variant: str) -> str:
    if variant not in VARIANTS:
        raise BuildError(
            f"unknown model variant {variant!r}", hint=f"use one of {', '.join(VARIANTS)}"
        )
    return variant
