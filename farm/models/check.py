"""Refuse a model file we cannot run, with an error that names the problem.

`check_model_file(path, load_in_ort=True) -> onnx.ModelProto` (graph without external data
loaded) raises BuildError for: a missing file, a file that is not ONNX protobuf, a truncated
file (protobuf parse error, or nodes whose inputs are no longer defined anywhere), a graph
without inputs or outputs, inputs of a dtype FTNS cannot carry, an onnx checker failure, and
(optionally) a model onnxruntime refuses to load (unknown op, bad opset). A file the ONNX
checker refuses but onnxruntime loads (contrib-domain ops) is accepted: ORT runs it and the
front-end canonicalises it for the other routes.
"""

from __future__ import annotations

from pathlib import Path

import onnx
from google.protobuf.message import DecodeError
from onnx import TensorProto

from farm.errors import BuildError

# ONNX elem types an FTNS file can carry (see docs/ARCHITECTURE.md)
FTNS_TYPES = {
    TensorProto.FLOAT: "float32",
    TensorProto.INT64: "int64",
    TensorProto.INT32: "int32",
    TensorProto.INT8: "int8",
    TensorProto.UINT8: "uint8",
}
_HINT = "pass a preset name (farm models list) or a valid .onnx file"


def graph_inputs(model: onnx.ModelProto) -> list[onnx.ValueInfoProto]:
    """Real inputs: graph inputs that are not initializers (old exporters list both)."""
    inits = {i.name for i in model.graph.initializer}
    return [i for i in model.graph.input if i.name not in inits]


def _load(path: Path) -> onnx.ModelProto:
    if not path.is_file():
        raise BuildError(f"model file {path} does not exist", hint=_HINT)
    data = path.read_bytes()
    if not data:
        raise BuildError(f"model file {path} is empty", hint=_HINT)
    try:
        model = onnx.load_model_from_string(data)
    except (DecodeError, RuntimeError, ValueError) as exc:
        raise BuildError(
            f"{path} is not an ONNX model or is truncated ({len(data)} bytes): "
            f"protobuf parse failed: {exc}", hint=_HINT,
        ) from exc
    if not model.graph.node or not model.opset_import:
        raise BuildError(f"{path} is not an ONNX model: it has no graph nodes or no opset",
                         hint=_HINT)
    return model


def _check_dataflow(path: Path, model: onnx.ModelProto) -> None:
    """Every node input must be produced somewhere; a truncated file loses initializers."""
    g = model.graph
    known = {i.name for i in g.input} | {i.name for i in g.initializer}
    known |= {i.name for i in g.sparse_initializer}
    known.add("")  # optional inputs are empty strings
    for node in g.node:
        missing = [name for name in node.input if name not in known]
        if missing:
            raise BuildError(
                f"{path}: node {node.name or node.op_type!r} ({node.op_type}) uses undefined "
                f"tensor(s) {', '.join(missing)}: the file is truncated or the graph is broken",
                hint=_HINT,
            )
        known.update(node.output)
    undefined = [o.name for o in g.output if o.name not in known]
    if undefined:
        raise BuildError(f"{path}: graph outputs {', '.join(undefined)} are never produced",
                         hint=_HINT)


def _check_io(path: Path, model: onnx.ModelProto) -> None:
    inputs = graph_inputs(model)
    if not inputs:
        raise BuildError(f"{path}: the model has no inputs (nothing to feed)", hint=_HINT)
    if not model.graph.output:
        raise BuildError(f"{path}: the model has no outputs", hint=_HINT)
    for vi in inputs:
        elem = vi.type.tensor_type.elem_type
        if not vi.type.HasField("tensor_type") or elem not in FTNS_TYPES:
            kind = TensorProto.DataType.Name(elem) if elem else vi.type.WhichOneof("value")
            raise BuildError(
                f"{path}: input {vi.name!r} has type {kind}, which farm cannot feed "
                f"(supported: {', '.join(FTNS_TYPES.values())} tensors)", hint=_HINT,
            )


def _check_ort(path: Path) -> None:
    import onnxruntime as ort

    opts = ort.SessionOptions()
    opts.log_severity_level = 3
    try:
        ort.InferenceSession(str(path), opts, providers=["CPUExecutionProvider"])
    except Exception as exc:  # ORT raises its own Fail/InvalidGraph/NotImplemented types
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise BuildError(f"{path}: onnxruntime {ort.__version__} cannot load it: {first}",
                         hint=_HINT) from exc


def check_model_file(path: Path, *, load_in_ort: bool = True) -> onnx.ModelProto:
    path = Path(path)
    model = _load(path)
    _check_io(path, model)
    _check_dataflow(path, model)
    try:
        onnx.checker.check_model(model)
    except onnx.checker.ValidationError as exc:
        # ORT is the authority on what runs: its transformer optimizer writes files the
        # checker refuses (e.g. LayerNormalization at opset 14, com.microsoft ops)
        first = str(exc).strip().splitlines()[0]
        if not load_in_ort:
            raise BuildError(f"{path}: the ONNX checker rejects it: {first}",
                             hint=_HINT) from exc
        try:
            _check_ort(path)
        except BuildError as ort_exc:
            raise BuildError(f"{path}: no route can load it: the ONNX checker rejects it "
                             f"({first}) and {ort_exc.message}", hint=_HINT) from exc
        return model
    if load_in_ort:
        _check_ort(path)
    return model
