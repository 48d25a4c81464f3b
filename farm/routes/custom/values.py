"""What an ONNX tensor is, symbolically, while the plan compiler walks the graph.

Lowering keeps a value pending (`Lin`, `Sum`, `Embed`, attention parts, GELU parts) until a
consumer shows whether it can be fused (a bias Add into the GEMM, the GELU chain into its
epilogue, an Add into the following LayerNorm as residual); any other consumer materialises
it as an executor op writing an activation (`Act`).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from farm.routes.custom.ir import FcWeights


@dataclass(frozen=True)
class Const:
    arr: np.ndarray


@dataclass(frozen=True)
class Input:
    slot: int


@dataclass(frozen=True)
class MaskFn:
    """Elementwise function of an int mask input, known by its values at mask 0 and 1."""

    slot: int
    v0: float
    v1: float
    # DeBERTa's m_i * m_j: the value masks key j where m_j is 0, and a query row where m_i is
    # 0 gets the uniform softmax (lower_deberta.py)
    outer: bool = False


@dataclass(frozen=True)
class Act:
    """A materialised activation [tokens, cols] (virtual value id)."""

    value: int


@dataclass(frozen=True)
class Embed:
    terms: tuple[tuple[np.ndarray, int], ...]  # (table [rows, H], source)
    name: str
    base: object = None  # a pending Lin (or Act) the rows are added to (MobileBERT)


@dataclass(frozen=True)
class Shift:
    """A one-table Embed read `offset` tokens ahead (x[:, 1:] -> +1, x[:, :-1] -> -1);
    `padded` once Pad restored the sequence length with zero rows on the right side."""

    embed: Embed
    offset: int
    padded: bool


@dataclass(frozen=True)
class Affine:
    """(a (+ b)) * gamma, waiting for the Add of NoNorm's bias (a, b value ids; b may be -1)."""

    a: int
    b: int
    gamma: np.ndarray
    name: str


@dataclass(frozen=True)
class Lin:
    x: int  # input value id
    fc: FcWeights
    bias: np.ndarray | None
    act: int
    name: str


@dataclass(frozen=True)
class Sum:
    a: int
    b: int
    name: str


@dataclass(frozen=True)
class Split:
    value: int
    heads: int
    dim: int


@dataclass(frozen=True)
class Heads:
    value: int
    heads: int
    dim: int
    transposed: bool  # K laid out as [N, D, S]
    scale: float = 1.0  # SDPA's exports multiply Q and Kᵀ each by sqrt(1/sqrt(d))
    rank3: bool = False  # viewed as [B*N, S, D] (DeBERTa), Kᵀ then by Transpose [0, 2, 1]


@dataclass(frozen=True)
class Scores:
    q: Heads
    k: Heads
    scale: float
    mask: MaskFn | None
    name: str
    # an additive bias [heads, S, S] on the scaled scores (MPNet's relative position bias,
    # a constant at the bound sequence length)
    bias: np.ndarray | None = field(default=None, compare=False)
    # DeBERTa's relative terms (lower_deberta.RelTerm), added after the scale
    rel: tuple = field(default=(), compare=False)


@dataclass(frozen=True)
class Probs:
    scores: Scores


@dataclass(frozen=True)
class Context:
    probs: Probs
    v: Heads
    merged: bool  # after the Transpose back to [B, S, N, D]


@dataclass(frozen=True)
class GeluPart:
    """Stage of the erf GELU chain on tensor `u` (the ONNX name): div, erf, erf1, then mul
    (x * (1 + erf), TorchScript's order) or half (0.5 * (1 + erf), torchlib's order)."""

    u: str
    stage: str


@dataclass(frozen=True)
class Gelu:
    u: str
    tanh: bool = False  # gelu_new (lower_pooler.py), else the erf GELU


@dataclass(frozen=True)
class DynQuant:
    """One output of DynamicQuantizeLinear(x): part is q, scale or zp."""

    value: int
    part: str


@dataclass(frozen=True)
class IntMatMul:
    x: int
    fc: FcWeights
    name: str


@dataclass(frozen=True)
class FakeQuant:
    """QuantizeLinear of an activation, waiting for its DequantizeLinear (QDQ models)."""

    inner: object


@dataclass(frozen=True)
class ScaleProd:
    x: int
    scale: np.ndarray


# the value kinds that hold an activation (a tensor computed from the input)
ACTIVATIONS = (Act, Embed, Lin, Sum, Gelu, Affine)
