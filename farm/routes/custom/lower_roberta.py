"""Lowering of RoBERTa's position ids (used by lower_ops.py / lower.py).

`create_position_ids_from_input_ids` as the TorchScript exporter writes it:
`Not(Equal(ids, pad)) -> Cast(int32) -> CumSum(axis 1) -> Cast -> Mul(mask) -> Cast(int64) ->
Add(pad)`, then `Gather(position table, .)`. The ids depend on the input, so nothing folds:
the chain becomes one embedding term whose row the executor computes per token,
`pad + (non-pad tokens up to and including this one)` for a non-pad token, else `pad`
(EMBED p[4 + i] = pad + 1, plan.h).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from onnx import NodeProto

from farm.routes.custom.lowering import LowererApi
from farm.routes.custom.values import Const, Input


@dataclass(frozen=True)
class PadPositions:
    """An embedding term's source: RoBERTa's position of each token of input `slot`."""

    slot: int
    pad: int


@dataclass(frozen=True)
class IdsCmp:
    """ids == pad (`equal`) or ids != pad, of input `slot`."""

    slot: int
    pad: int
    equal: bool


@dataclass(frozen=True)
class IdsCount:
    """Stage of the position chain: `cumsum` (running count of non-pad ids), `masked`
    (times the non-pad mask), `positions` (+ pad: the ids the position table is read at)."""

    slot: int
    pad: int
    stage: str


def _int_scalar(v: Any) -> int | None:
    if isinstance(v, Const) and v.arr.size == 1 and float(v.arr.reshape(-1)[0]).is_integer():
        return int(v.arr.reshape(-1)[0])
    return None


def op_Equal(self: LowererApi, node: NodeProto, ins: list[Any]) -> Any:
    for x, c in ((ins[0], ins[1]), (ins[1], ins[0])):
        if isinstance(x, Input) and (pad := _int_scalar(c)) is not None:
            return IdsCmp(x.slot, pad, True)
    raise self.fail("Equal is supported only as ids == padding id (RoBERTa's position ids)")


def op_Not(self: LowererApi, node: NodeProto, ins: list[Any]) -> Any:
    x = ins[0]
    if isinstance(x, IdsCmp):
        return IdsCmp(x.slot, x.pad, not x.equal)
    raise self.fail("Not is supported only in RoBERTa's position ids")


def op_CumSum(self: LowererApi, node: NodeProto, ins: list[Any]) -> Any:
    x, axis = ins[0], _int_scalar(ins[1])
    rev = any(a.name in ("reverse", "exclusive") and a.i for a in node.attribute)
    if isinstance(x, IdsCmp) and not x.equal and axis in (1, -1) and not rev:
        return IdsCount(x.slot, x.pad, "cumsum")
    raise self.fail("CumSum is supported only in RoBERTa's position ids (over the sequence)")


def cast_pattern(ins: list[Any]) -> Any:
    return ins[0] if isinstance(ins[0], (IdsCmp, IdsCount)) else None


def mul_pattern(ins: list[Any]) -> Any:
    for a, b in ((ins[0], ins[1]), (ins[1], ins[0])):
        if (isinstance(a, IdsCount) and a.stage == "cumsum" and isinstance(b, IdsCmp)
                and not b.equal and (a.slot, a.pad) == (b.slot, b.pad)):
            return IdsCount(a.slot, a.pad, "masked")
    return None


def add_pattern(ins: list[Any]) -> Any:
    for a, b in ((ins[0], ins[1]), (ins[1], ins[0])):
        if isinstance(a, IdsCount) and a.stage == "masked" and _int_scalar(b) == a.pad:
            return IdsCount(a.slot, a.pad, "positions")
    return None


def gather_source(idx: Any) -> PadPositions | None:
    """The embedding source for `Gather(table, idx)`, if idx is RoBERTa's position ids."""
    if isinstance(idx, IdsCount) and idx.stage == "positions":
        return PadPositions(idx.slot, idx.pad)
    return None
