"""Input shapes: `--shape NAME=D0,D1,...` (repeatable), `--batch N`, `--seq N`, and binding them.

`ShapeSpec` is what the user asked for; `bind(model, spec)` writes concrete dims into the
graph inputs (in place) and returns {input: dims}. A dim is taken, in order, from an explicit
`--shape` of that input, the model's own fixed dim, `--batch` for dim 0, `--seq` for dim 1,
else the default of `farm.models.inputs` (batch 1, sequence from the model's farm config
or 128) — the same dims the generated input tensors have, so every route runs one shape.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

import onnx

from farm.errors import UsageError
from farm.models.check import graph_inputs

DEFAULT_BATCH = 1


@dataclass(frozen=True)
class ShapeSpec:
    shapes: dict[str, tuple[int, ...]] = field(default_factory=dict)
    batch: int | None = None
    seq: int | None = None

    @property
    def empty(self) -> bool:
        return not self.shapes and self.batch is None and self.seq is None

    def key(self) -> str:
        """Canonical text (cache keys, BenchConfig meta)."""
        return json.dumps({"shapes": {k: list(v) for k, v in sorted(self.shapes.items())},
                           "batch": self.batch, "seq": self.seq}, sort_keys=True)


def parse_shape(text: str) -> tuple[str, tuple[int, ...]]:
    name, sep, dims = text.partition("=")
    try:
        values = tuple(int(d) for d in dims.split(",")) if dims else ()
    except ValueError:
        values = ()
    if not sep or not name or not values or min(values) < 1:
        raise UsageError(f"--shape {text!r}: expected NAME=D0,D1,... with positive integers",
                         hint="e.g. --shape input_ids=1,128")
    return name, values


def make_spec(shapes: Iterable[str] | None = None, batch: int | None = None,
              seq: int | None = None) -> ShapeSpec:
    parsed = dict(parse_shape(s) for s in (shapes or ()))
    for flag, value in (("--batch", batch), ("--seq", seq)):
        if value is not None and value < 1:
            raise UsageError(f"{flag} must be >= 1, got {value}")
    return ShapeSpec(parsed, batch, seq)


def spec_from_meta(shapes: Sequence[Sequence[object]] | dict | None, batch: int | None,
                   seq: int | None) -> ShapeSpec:
    items = shapes.items() if isinstance(shapes, dict) else (shapes or ())
    return ShapeSpec({str(k): tuple(int(d) for d in v) for k, v in items},  # type: ignore[union-attr]
                     batch, seq)


def _default_seq(model: onnx.ModelProto) -> int:
    from farm.models.inputs import _seq_from_model

    return _seq_from_model(model)


def bind(model: onnx.ModelProto, spec: ShapeSpec) -> dict[str, list[int]]:
    """Write concrete input dims into `model` (in place); returns {input name: dims}."""
    inputs = graph_inputs(model)
    names = {vi.name for vi in inputs}
    unknown = sorted(set(spec.shapes) - names)
    if unknown:
        raise UsageError(f"--shape names input(s) {', '.join(unknown)} the model does not have",
                         hint=f"its inputs: {', '.join(sorted(names))}")
    seq = spec.seq or _default_seq(model)
    bound: dict[str, list[int]] = {}
    for vi in inputs:
        dims = vi.type.tensor_type.shape.dim
        want = spec.shapes.get(vi.name)
        if want is not None and len(want) != len(dims):
            raise UsageError(f"--shape {vi.name}: {len(want)} dims given, the input has "
                             f"{len(dims)}", hint="give one value per dimension")
        values = []
        for i, d in enumerate(dims):
            if want is not None:
                v = want[i]
                if d.HasField("dim_value") and d.dim_value != v:
                    raise UsageError(f"--shape {vi.name}: dim {i} is fixed at {d.dim_value} "
                                     f"in the model, not {v}")
            elif d.HasField("dim_value"):
                v = d.dim_value
                asked = spec.batch if i == 0 else spec.seq if i == 1 else None
                if asked is not None and asked != v:
                    flag = "--batch" if i == 0 else "--seq"
                    raise UsageError(f"{flag} {asked}: input {vi.name!r} has dim {i} fixed at "
                                     f"{v} in the model", hint="re-export with dynamic axes, "
                                     f"or drop {flag}")
            elif i == 0:
                v = spec.batch or DEFAULT_BATCH
            else:
                v = seq
            d.Clear()
            d.dim_value = v
            values.append(v)
        bound[vi.name] = values
    # stale inner shapes would contradict the bound inputs: shape inference redoes them
    del model.graph.value_info[:]
    for out in model.graph.output:
        for d in out.type.tensor_type.shape.dim:
            if d.HasField("dim_param"):
                d.Clear()
    return bound


def symbolic_inputs(model: onnx.ModelProto) -> dict[str, list[str | int]]:
    """Inputs with a dim that is not a number ({name: dims}), before binding."""
    out: dict[str, list[str | int]] = {}
    for vi in graph_inputs(model):
        dims = [d.dim_value if d.HasField("dim_value") else (d.dim_param or "?")
                for d in vi.type.tensor_type.shape.dim]
        if any(isinstance(d, str) for d in dims):
            out[vi.name] = dims
    return out


def symbolic_left(model: onnx.ModelProto) -> list[str]:
    """Tensors of the (canonical) graph whose inferred shape still has an unknown dim."""
    left = []
    for vi in [*model.graph.output, *model.graph.value_info]:
        t = vi.type.tensor_type
        if t.HasField("shape") and any(not d.HasField("dim_value") for d in t.shape.dim):
            left.append(vi.name)
    return left
