"""`farm models check`: what a model file is and which routes will build it, decided by the
real steps (front-end canonicalisation, then each route's own `Route.check`: an ORT session,
the custom lowerer, TVM's importer), not by a list of op names.

`check_file(path, spec) -> dict` (JSON-able; BuildError for a file `farm.models.check.
load_checked` refuses, as a bench would): inputs/outputs with their shapes, the bound
shapes, detected quantisation, params, MACs (matrix products of the canonical graph at the
bound shapes), and per route {ok, stage, node, op, reason}.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
import onnx

from farm.errors import FarmError
from farm.models.check import load_checked
from farm.models.frontend import ShapeSpec, canonicalize, detect_quantisation
from farm.routes.spec import ModelForms, Route, Verdict, source_file

_NODE = re.compile(r"node '([^']*)' \(([^),]+)")


def _io(values: Any) -> list[dict[str, Any]]:
    out = []
    for vi in values:
        t = vi.type.tensor_type
        dims = [d.dim_value if d.HasField("dim_value") else (d.dim_param or "?")
                for d in t.shape.dim]
        # no shape at all (an output the exporter left undeclared) is unknown, not a scalar
        out.append({"name": vi.name, "dtype": onnx.TensorProto.DataType.Name(t.elem_type),
                    "shape": dims if t.HasField("shape") else None})
    return out


def _params(model: onnx.ModelProto) -> int:
    return int(sum(int(np.prod(i.dims)) if i.dims else 1 for i in model.graph.initializer))


def _shape_of(model: onnx.ModelProto) -> dict[str, list[int]]:
    shapes: dict[str, list[int]] = {}
    for vi in [*model.graph.input, *model.graph.value_info, *model.graph.output]:
        dims = vi.type.tensor_type.shape.dim
        if dims and all(d.HasField("dim_value") for d in dims):
            shapes[vi.name] = [d.dim_value for d in dims]
    for i in model.graph.initializer:
        shapes[i.name] = list(i.dims)
    return shapes


def macs(model: onnx.ModelProto) -> int | None:
    """Multiply-accumulates of the matrix products (MatMul/MatMulInteger/Gemm/MatMulNBits)."""
    shapes = _shape_of(model)
    total = 0
    for n in model.graph.node:
        if n.op_type in ("MatMul", "MatMulInteger", "Gemm"):
            a, out = shapes.get(n.input[0]), shapes.get(n.output[0])
            if not a or not out:
                return None
            k = a[-2] if n.op_type == "Gemm" and any(
                at.name == "transA" and at.i for at in n.attribute) else a[-1]
            total += int(np.prod(out)) * k
        elif n.op_type == "MatMulNBits":
            out = shapes.get(n.output[0])
            k = next((at.i for at in n.attribute if at.name == "K"), None)
            if not out or k is None:
                return None
            total += int(np.prod(out)) * k
    return total


def failure(stage: str, exc: BaseException) -> Verdict:
    """A route's verdict for a step that raised: the stage, the node and op it names."""
    text = getattr(exc, "message", None) or str(exc)
    first = text.strip().splitlines()[0] if text.strip() else type(exc).__name__
    m = _NODE.search(first)
    return {"ok": False, "stage": stage, "node": m.group(1) if m else None,
            "op": m.group(2) if m else None, "reason": first}


def check_file(path: str | Path, routes: Mapping[str, Route],
               spec: ShapeSpec | None = None) -> dict[str, Any]:
    """The report of `farm models check` for `path` over `routes` (the registry's)."""
    path = Path(path)
    # the file-level judgement a bench makes too (an empty, cut, oversized, cyclic or
    # non-ONNX file is refused the same way, before any route looks at it)
    source = load_checked(path)
    report: dict[str, Any] = {
        "file": str(path), "inputs": _io([i for i in source.graph.input
                                          if i.name not in {t.name for t in
                                                            source.graph.initializer}]),
        "outputs": _io(source.graph.output), "quantisation": detect_quantisation(source),
        "params": _params(source), "opsets": {o.domain or "ai.onnx": o.version
                                              for o in source.opset_import},
    }
    verdicts: dict[str, Verdict] = {}
    source_only = ModelForms(path, None, spec)
    # routes that run the user's own file are judged without the front-end, which they do
    # not need
    for name, route in routes.items():
        if route.model_input is source_file:
            verdicts[name] = route.check(source_only)
    try:
        canon = canonicalize(path, spec)
    except FarmError as exc:
        fail = failure("front-end", exc)
        verdicts.update({name: fail for name in routes if name not in verdicts})
        report.update(bound_shapes=None, macs=None, routes=verdicts)
        return report
    report["bound_shapes"] = canon.input_shapes
    report["front_end"] = canon.rewrites
    report["macs"] = macs(onnx.load(str(canon.path)))
    forms = ModelForms(path, canon, spec)
    for name, route in routes.items():
        if name not in verdicts:
            verdicts[name] = route.check(forms)
    report["routes"] = {name: verdicts[name] for name in routes}  # in report order
    return report
