"""MobileBERT's shape: `MobileBertConfig`, its parameter count and MACs (stdlib only).

Defaults are `google/mobilebert-uncased` as configured in Hugging Face transformers
(src/transformers/models/mobilebert/configuration_mobilebert.py): vocab 30522, embedding
128 with trigram input, hidden 512, 24 layers, 4 heads, intermediate 512, ReLU, intra
bottleneck 128 (true_hidden_size), use_bottleneck_attention False,
key_query_shared_bottleneck True, 4 feed-forward networks per layer, NoNorm, 512 positions,
2 token types. `seq` is the fixed sequence length of the exported graph (the article's 128).

Published size: about 24.6 M parameters without the pooler (PUBLISHED_PARAMS); `params()`
counts the architecture (all 512 position rows), not the ONNX file, which holds only the
`seq` position rows torch's constant folding keeps.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, fields

from farm.errors import BuildError

# Bump when the generated graph changes (op pattern, naming, weight init): it keys the cache.
MOBILEBERT_GENERATOR_VERSION = 2
PUBLISHED_PARAMS = 24.6e6  # google/mobilebert-uncased without the pooler


@dataclass(frozen=True)
class MobileBertConfig:
    """MobileBERT hyper-parameters; validated on construction."""

    layers: int = 24
    hidden: int = 512
    embedding: int = 128
    bottleneck: int = 128
    heads: int = 4
    intermediate: int = 512
    ffns: int = 4
    seq: int = 128
    vocab: int = 30522
    max_positions: int = 512
    type_vocab: int = 2
    seed: int = 0

    def __post_init__(self) -> None:
        for f in fields(self):
            value = getattr(self, f.name)
            if not isinstance(value, int) or isinstance(value, bool):
                raise BuildError(f"mobilebert config: {f.name} must be an int, got {value!r}")
            if f.name != "seed" and value < 1:
                raise BuildError(f"mobilebert config: {f.name} must be >= 1, got {value}")
        if self.bottleneck % self.heads:
            raise BuildError(
                f"mobilebert config: bottleneck {self.bottleneck} is not divisible by heads "
                f"{self.heads}", hint="attention runs at the bottleneck width: pick heads "
                "so that bottleneck / heads is an integer head size")
        if self.seq > self.max_positions:
            raise BuildError(f"mobilebert config: seq {self.seq} exceeds max_positions "
                             f"{self.max_positions}")

    @property
    def head_dim(self) -> int:
        return self.bottleneck // self.heads

    @property
    def ffn(self) -> int:
        """Width of each feed-forward network (the `models` listing's column)."""
        return self.intermediate

    def params(self) -> int:
        """Parameters of MobileBertModel without the pooler (HF state dict, all positions)."""
        h, e, b, f = self.hidden, self.embedding, self.bottleneck, self.intermediate

        def lin(i: int, o: int) -> int:
            return i * o + o

        emb = (self.vocab * e + self.max_positions * h + self.type_vocab * h
               + lin(3 * e, h) + 2 * h)
        per_layer = (
            2 * (lin(h, b) + 2 * b)                 # bottleneck input + shared q/k input
            + 2 * lin(b, b) + lin(h, b)              # query, key (from b), value (from h)
            + lin(b, b) + 2 * b                      # attention output dense + NoNorm
            + self.ffns * (lin(b, f) + lin(f, b) + 2 * b)  # 3 FFNLayers + intermediate/output
            + lin(b, h) + 2 * h                      # output bottleneck + NoNorm
        )
        return emb + self.layers * per_layer

    def macs(self) -> int:
        """Multiply-accumulates of one inference (batch 1, `seq` tokens), matmuls only."""
        h, e, b, f, s = self.hidden, self.embedding, self.bottleneck, self.intermediate, self.seq
        per_layer = s * (3 * h * b + 3 * b * b + self.ffns * 2 * b * f + b * h) + 2 * s * s * b
        return s * 3 * e * h + self.layers * per_layer

    def canonical_json(self) -> str:
        return json.dumps({"arch": "mobilebert", "generator": MOBILEBERT_GENERATOR_VERSION,
                           **asdict(self)}, sort_keys=True, separators=(",", ":"))

    def to_dict(self) -> dict[str, int | str]:
        return {"arch": "mobilebert", **asdict(self)}
