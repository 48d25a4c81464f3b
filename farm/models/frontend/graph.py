"""A small editable view of an ONNX graph for the hand-written rewrites (rewrite.py, contrib.py).

`Graph(model)` indexes producers, consumers and constants (initializers); rewrites add nodes
and initializers through it and mark nodes dead; `commit()` writes the node list back in
topological order. Also: Constant nodes -> initializers, and the opset upgrade to 17 (the
canonical op set uses opset-17 LayerNormalization).
"""

from __future__ import annotations

import itertools

import numpy as np
import onnx
from onnx import helper, numpy_helper

from farm.errors import BuildError

CANONICAL_OPSET = 17
MS = "com.microsoft"


def attr(node: onnx.NodeProto, name: str, default=None):
    for a in node.attribute:
        if a.name == name:
            return helper.get_attribute_value(a)
    return default


class Graph:
    def __init__(self, model: onnx.ModelProto) -> None:
        self.model = model
        self.g = model.graph
        self.nodes: list[onnx.NodeProto] = list(self.g.node)
        self.consts: dict[str, np.ndarray] = {
            i.name: numpy_helper.to_array(i) for i in self.g.initializer}
        self.dead: set[int] = set()
        self._ids = itertools.count()
        self.reindex()

    def reindex(self) -> None:
        self.producer: dict[str, onnx.NodeProto] = {}
        self.consumers: dict[str, list[onnx.NodeProto]] = {}
        for n in self.nodes:
            if id(n) in self.dead:
                continue
            for o in n.output:
                self.producer[o] = n
            for i in n.input:
                self.consumers.setdefault(i, []).append(n)

    # -- reading ----------------------------------------------------------------------
    def const(self, name: str) -> np.ndarray | None:
        return self.consts.get(name)

    def scalar(self, name: str) -> float | None:
        c = self.consts.get(name)
        return float(c.reshape(-1)[0]) if c is not None and c.size == 1 else None

    def src(self, name: str, op: str) -> onnx.NodeProto | None:
        n = self.producer.get(name)
        return n if n is not None and n.op_type == op and id(n) not in self.dead else None

    def users(self, name: str) -> list[onnx.NodeProto]:
        return [n for n in self.consumers.get(name, []) if id(n) not in self.dead]

    def other(self, node: onnx.NodeProto, name: str) -> str:
        """The input of a binary node that is not `name`."""
        a, b = node.input[0], node.input[1]
        return b if a == name else a

    def is_output(self, name: str) -> bool:
        return any(o.name == name for o in self.g.output)

    # -- writing ----------------------------------------------------------------------
    def fresh(self, hint: str) -> str:
        return f"{hint}__farm{next(self._ids)}"

    def add_const(self, hint: str, value: np.ndarray) -> str:
        name = self.fresh(hint)
        self.consts[name] = np.asarray(value)
        self.g.initializer.append(numpy_helper.from_array(np.asarray(value), name))
        return name

    def add(self, op: str, inputs: list[str], outputs: list[str] | None = None, *,
            name: str, domain: str = "", **attrs) -> onnx.NodeProto:
        outs = outputs or [self.fresh(name)]
        node = helper.make_node(op, inputs, outs, name=name, domain=domain or None, **attrs)
        self.nodes.append(node)
        for o in outs:
            self.producer[o] = node
        for i in inputs:
            self.consumers.setdefault(i, []).append(node)
        return node

    def kill(self, *nodes: onnx.NodeProto) -> None:
        self.dead.update(id(n) for n in nodes)

    def commit(self) -> None:
        alive = [n for n in self.nodes if id(n) not in self.dead]
        known = {i.name for i in self.g.input} | set(self.consts) | {""}
        # an If/Loop reads what its branches name from the outer graph too: it must come
        # after those producers, and initializers only its branches read must stay
        deps = {id(n): [*n.input, *sorted(outer_refs(n))] for n in alive}
        order, pending = [], alive
        while pending:
            ready = [n for n in pending if all(i in known for i in deps[id(n)])]
            if not ready:
                n = pending[0]
                raise BuildError(f"front-end: node {n.name!r} ({n.op_type}) reads a tensor "
                                 "nothing produces after rewriting (a front-end bug)")
            ids = {id(n) for n in ready}
            order += ready
            for n in ready:
                known.update(n.output)
            pending = [n for n in pending if id(n) not in ids]
        used = {i for n in order for i in deps[id(n)]} | {o.name for o in self.g.output}
        inits = [i for i in self.g.initializer if i.name in used]
        del self.g.node[:]
        self.g.node.extend(order)
        del self.g.initializer[:]
        self.g.initializer.extend(inits)
        self.nodes, self.dead = list(self.g.node), set()
        self.consts = {k: v for k, v in self.consts.items() if k in used}
        self.reindex()


def outer_refs(node: onnx.NodeProto) -> set[str]:
    """Names the node's subgraphs (If branches, Loop bodies, nested) read from the outer
    scope: what they use and do not define themselves."""
    out: set[str] = set()
    for a in node.attribute:
        for sub in [a.g] if a.type == onnx.AttributeProto.GRAPH else list(a.graphs):
            defined = ({i.name for i in sub.input} | {i.name for i in sub.initializer}
                       | {o for n in sub.node for o in n.output})
            used = {i for n in sub.node for i in n.input} | {o.name for o in sub.output}
            used |= {r for n in sub.node for r in outer_refs(n)}
            out |= used - defined - {""}
    return out


def constants_to_initializers(model: onnx.ModelProto) -> None:
    """Constant nodes, and Identity nodes of an initializer, become initializers.

    The Identity case: torch's TorchScript exporter writes ONE initializer per distinct
    value and `Identity(init) -> <param name>` for every other parameter with the same bytes
    (tied weights; every zero bias and unit LayerNorm scale of a freshly initialised model).
    The rewrites read parameters as constants, so those must be initializers too.
    """
    keep = []
    inits = {i.name: i for i in model.graph.initializer}
    outputs = {o.name for o in model.graph.output}
    for n in model.graph.node:
        if n.op_type == "Constant" and n.domain in ("", "ai.onnx"):
            a = n.attribute[0]
            if a.name == "value":
                t = onnx.TensorProto()
                t.CopyFrom(a.t)
            else:
                t = numpy_helper.from_array(np.asarray(helper.get_attribute_value(a)))
            t.name = n.output[0]
            model.graph.initializer.append(t)
            inits[t.name] = t
        elif (n.op_type == "Identity" and n.domain in ("", "ai.onnx") and n.input[0] in inits
              and n.output[0] not in outputs):
            t = onnx.TensorProto()
            t.CopyFrom(inits[n.input[0]])
            t.name = n.output[0]
            model.graph.initializer.append(t)
            inits[t.name] = t
        else:
            keep.append(n)
    del model.graph.node[:]
    model.graph.node.extend(keep)


def _axes_to_input(g: Graph, n: onnx.NodeProto, name: str = "axes") -> None:
    value = attr(n, name)
    if value is None:
        return
    for a in list(n.attribute):
        if a.name == name:
            n.attribute.remove(a)
    if len(n.input) == 1:
        n.input.append(g.add_const(f"{n.name}_{name}", np.array(value, np.int64)))
    else:
        n.input.insert(1, g.add_const(f"{n.name}_{name}", np.array(value, np.int64)))


def upgrade_opset(model: onnx.ModelProto) -> None:
    """Raise the default-domain opset to 17, rewriting the ops whose form changed (11/14->17).

    Unsqueeze/Squeeze/ReduceSum/Split took `axes`/`split` as attributes before 13; Softmax
    before 13 flattened from `axis` on, the same as opset 13's only when it is the last axis.
    """
    ops = {o.domain: o.version for o in model.opset_import}
    version = ops.get("", ops.get("ai.onnx", CANONICAL_OPSET))
    if version > CANONICAL_OPSET:
        return
    g = Graph(model)
    if version < 13:
        for n in g.nodes:
            if n.op_type in ("Unsqueeze", "Squeeze", "ReduceSum"):
                _axes_to_input(g, n)
            elif n.op_type == "Split":
                _axes_to_input(g, n, "split")
            elif n.op_type in ("Softmax", "LogSoftmax") and attr(n, "axis", 1) not in (-1, 3):
                raise BuildError(f"front-end: node {n.name!r} ({n.op_type}) at opset {version} "
                                 f"flattens from axis {attr(n, 'axis', 1)}; only the last axis "
                                 "of a 4-D tensor is upgraded to opset 17",
                                 hint="export the model at opset 13 or later")
    for o in model.opset_import:
        if o.domain in ("", "ai.onnx"):
            o.version = CANONICAL_OPSET
    if model.ir_version < 8:
        model.ir_version = 8
