"""Refuse a model file we cannot run, with an error that names the problem.

`load_checked(path) -> onnx.ModelProto` (graph without external data loaded) is the file's
judgement every command shares (`farm bench`, `build`, `tune`, `deploy` through
`resolve_model`, and `farm models check`, so an empty file is judged the same by all):
BuildError for what `farm.models.sniff` refuses before reading (missing, not a regular
file, empty, over the size bound, not ONNX by its structure, truncated), a protobuf parse
error, a graph without nodes, opset, inputs or outputs, inputs of a dtype FTNS cannot
carry, nodes reading tensors nothing produces (a truncated or broken file), a graph with a
cycle (named: `a (Add) -> b (Relu) -> a`) and nodes out of topological order.

`check_model_file(path, load_in_ort=True)` adds what a bench needs: the onnx checker, and
(optionally) onnxruntime loading it (unknown op, bad opset). A file the ONNX checker refuses
but onnxruntime loads (contrib-domain ops) is accepted: ORT runs it and the front-end
canonicalises it for the other routes. `farm models check` asks each route instead.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import onnx
from google.protobuf.message import DecodeError
from onnx import TensorProto

from farm.errors import BuildError
from farm.models.sniff import HINT, sniff_model_file

# ONNX elem types an FTNS file can carry (see docs/ARCHITECTURE.md)
FTNS_TYPES = {
    TensorProto.FLOAT: "float32",
    TensorProto.INT64: "int64",
    TensorProto.INT32: "int32",
    TensorProto.INT8: "int8",
    TensorProto.UINT8: "uint8",
}
_HINT = HINT


def graph_inputs(model: onnx.ModelProto) -> list[onnx.ValueInfoProto]:
    """Real inputs: graph inputs that are not initializers (old exporters list both)."""
    inits = {i.name for i in model.graph.initializer}
    return [i for i in model.graph.input if i.name not in inits]


def _load(path: Path) -> onnx.ModelProto:
    sniff_model_file(path)  # size, bound and structure before the whole file is read
    data = path.read_bytes()
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


def _label(node: onnx.NodeProto) -> str:
    return f"{node.name or '?'} ({node.op_type})"


def _check_dataflow(path: Path, model: onnx.ModelProto) -> None:
    """Every node input is produced somewhere (a truncated file loses initializers), the
    graph has no cycle, and nodes come in topological order (ONNX requires it)."""
    g = model.graph
    known = {i.name for i in g.input} | {i.name for i in g.initializer}
    known |= {i.name for i in g.sparse_initializer}
    known.add("")  # optional inputs are empty strings
    producer = {out: i for i, node in enumerate(g.node) for out in node.output}
    for node in g.node:
        missing = [name for name in node.input if name not in known and name not in producer]
        if missing:
            raise BuildError(
                f"{path}: node {node.name or node.op_type!r} ({node.op_type}) uses undefined "
                f"tensor(s) {', '.join(missing)}: the file is truncated or the graph is broken",
                hint=_HINT,
            )
    undefined = [o.name for o in g.output if o.name not in known and o.name not in producer]
    if undefined:
        raise BuildError(f"{path}: graph outputs {', '.join(undefined)} are never produced",
                         hint=_HINT)
    cycle = _cycle(g.node, producer, known)
    if cycle:
        raise BuildError(f"{path}: the graph has a cycle: "
                         + " -> ".join(_label(g.node[i]) for i in cycle),
                         hint="a node's output feeds back into its own input; ONNX graphs "
                              "are acyclic (loops are Loop/Scan nodes): fix the exporter")
    done = set(known)
    for node in g.node:
        late = [name for name in node.input if name not in done]
        if late:
            maker = g.node[producer[late[0]]]
            raise BuildError(f"{path}: node {_label(node)} reads {late[0]!r} before node "
                             f"{_label(maker)} produces it: the nodes are not in "
                             "topological order, which ONNX requires", hint=_HINT)
        done.update(node.output)


def _cycle(nodes: Sequence[onnx.NodeProto], producer: dict[str, int],
           known: set[str]) -> list[int]:
    """Node indices of one cycle, closed (first == last), or [] for an acyclic graph."""
    preds = [{producer[i] for i in n.input if i not in known and i in producer}
             for n in nodes]
    waiting = [len(p) for p in preds]
    users: dict[int, list[int]] = {}
    for i, p in enumerate(preds):
        for j in p:
            users.setdefault(j, []).append(i)
    ready = [i for i, n in enumerate(waiting) if n == 0]
    while ready:  # Kahn: what is left unordered lies on or behind a cycle
        i = ready.pop()
        for u in users.get(i, []):
            waiting[u] -= 1
            if waiting[u] == 0:
                ready.append(u)
    left = {i for i, n in enumerate(waiting) if n > 0}
    if not left:
        return []
    # every node left has a predecessor left: walk back until one repeats
    path, seen, i = [], {}, min(left)
    while i not in seen:
        seen[i] = len(path)
        path.append(i)
        i = min(j for j in preds[i] if j in left)
    loop = path[seen[i]:][::-1]  # producer before consumer
    return [*loop, loop[0]]


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


def load_checked(path: str | Path) -> onnx.ModelProto:
    """The file-level judgement every command shares (see the module docstring)."""
    path = Path(path)
    model = _load(path)
    _check_io(path, model)
    _check_dataflow(path, model)
    return model


def check_model_file(path: Path, *, load_in_ort: bool = True) -> onnx.ModelProto:
    path = Path(path)
    model = load_checked(path)
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
