"""Lowering of the BERT-family parts around the encoder (used by lower_ops.py / lower.py).

- BERT/RoBERTa/ALBERT's pooler, `Gather(hidden, 0, axis=1) -> MatMul -> Add(b) -> Tanh`:
  the Gather becomes an OP_ROW (one row per sequence, so the FC after it runs with M = batch)
  and the Tanh a row pass after that FC (ACT_TANH).
- ALBERT's `gelu_new` as torch exports it, `0.5*x*(1+tanh(sqrt(2/pi)*(x+0.044715*x^3)))` with
  the cube as `Pow(x, 3)` (TorchScript) or `Mul(x, Mul(x, x))` (our expansion of ORT's
  FastGelu): a `GeluTanhPart` walks the chain and the last Mul fuses it into the FC before it
  (ACT_GELU_TANH), or a standalone Gelu op (p0 = GELU_TANH) if x is not an FC's output.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from onnx import NodeProto

from farm.routes.custom.lowering import LowererApi
from farm.routes.custom.plan_format import ACT_GELU_TANH, ACT_NONE, ACT_TANH, OP_ROW
from farm.routes.custom.values import ACTIVATIONS, Act, Const, Gelu, Lin

SQRT_2_OVER_PI = math.sqrt(2.0 / math.pi)


@dataclass(frozen=True)
class GeluTanhPart:
    """Stage of the tanh GELU chain on tensor `u` (its ONNX name): sq (x*x), cube, cubek
    (0.044715*x^3), inner (x + ...), scaled (sqrt(2/pi)*...), tanh, tanh1 (1 + tanh)."""

    u: str
    stage: str


@dataclass(frozen=True)
class Half:
    """0.5 * u, waiting for the `(1 + tanh(...))` factor of the tanh GELU."""

    u: str


def _close(c: Any, want: float, rtol: float = 1e-4) -> bool:
    return (isinstance(c, Const) and c.arr.size == 1
            and abs(float(c.arr.reshape(-1)[0]) - want) <= rtol * abs(want))


def _other(node: NodeProto, ins: list[Any], value: Any) -> tuple[Any, str]:
    """The operand of a binary node that is not `value`, with its ONNX name."""
    i = 1 if ins[0] is value else 0
    return ins[i], node.input[i]


def row_gather(self: LowererApi, node: NodeProto, ins: list[Any], activations: tuple) -> Any:
    """`Gather(hidden [B, S, H], scalar index, axis=1)`: one token's row per sequence."""
    x, idx = ins
    axis = next((a.i for a in node.attribute if a.name == "axis"), 0)
    if not isinstance(x, activations) or not isinstance(idx, Const) or axis not in (1, -2):
        return None
    if idx.arr.ndim != 0:
        raise self.fail("a row Gather needs a scalar index (the pooler's [CLS] row)")
    xv = self.act(x)
    out = self.emit(OP_ROW, node.name, [xv], self.ir.cols[xv], params=[int(idx.arr)])
    self.ir.seq_values.add(out)
    return Act(out)


def op_Tanh(self: LowererApi, node: NodeProto, ins: list[Any]) -> Any:
    x = ins[0]
    if isinstance(x, GeluTanhPart) and x.stage == "scaled":
        return GeluTanhPart(x.u, "tanh")
    if isinstance(x, Lin) and x.act == ACT_NONE:
        return Lin(x.x, x.fc, x.bias, ACT_TANH, x.name)  # the pooler: a pass after the FC
    raise self.fail("Tanh is supported after a MatMul (+ bias) and inside the tanh GELU")


def op_Pow(self: LowererApi, node: NodeProto, ins: list[Any]) -> Any:
    if isinstance(ins[0], ACTIVATIONS) and _close(ins[1], 3.0, 0.0):
        return GeluTanhPart(node.input[0], "cube")
    raise self.fail("Pow is supported only as the cube of the tanh GELU")


def mul_pattern(self: LowererApi, node: NodeProto, ins: list[Any], activations: tuple) -> Any:
    """A Mul of the tanh GELU chain, or None."""
    a, b = ins
    if isinstance(a, activations) and node.input[0] == node.input[1]:
        return GeluTanhPart(node.input[0], "sq")
    for part in (a, b):
        if not isinstance(part, GeluTanhPart):
            continue
        other, name = _other(node, ins, part)
        if part.stage == "sq" and name == part.u:
            return GeluTanhPart(part.u, "cube")
        if part.stage == "cube" and _close(other, 0.044715):
            return GeluTanhPart(part.u, "cubek")
        if part.stage == "inner" and _close(other, SQRT_2_OVER_PI):
            return GeluTanhPart(part.u, "scaled")
        if part.stage == "tanh1" and isinstance(other, Half) and other.u == part.u:
            return _gelu_tanh_of(self, part.u)
    for x, c in ((a, b), (b, a)):
        if isinstance(x, activations) and _close(c, 0.5, 0.0):
            return Half(node.input[0] if x is a else node.input[1])
    return None


def add_pattern(self: LowererApi, node: NodeProto, ins: list[Any]) -> Any:
    """An Add of the tanh GELU chain, or None."""
    for part in ins:
        if not isinstance(part, GeluTanhPart):
            continue
        other, name = _other(node, ins, part)
        if part.stage == "cubek" and name == part.u:
            return GeluTanhPart(part.u, "inner")
        if part.stage == "tanh" and _close(other, 1.0, 0.0):
            return GeluTanhPart(part.u, "tanh1")
    return None


def _gelu_tanh_of(self: LowererApi, u: str) -> Any:
    src = self.get(u)
    if isinstance(src, Lin) and src.act == ACT_NONE:
        return Lin(src.x, src.fc, src.bias, ACT_GELU_TANH, src.name)
    return Gelu(u, tanh=True)

