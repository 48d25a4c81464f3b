"""The generic fallback's data movement (lower_generic.py makes these its methods): one
strided-copy kernel (FK_GEN_COPY) serves Reshape, Squeeze, Unsqueeze, Flatten, Identity,
Transpose, Slice, Expand, Tile, Concat (one copy per input into its slab of the output), Pad
(constant) and Split (one copy per output)."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import onnx

from farm.routes.custom.generic_meta import COPY, RANK, Flat, attr, bcast, cstrides, norm_axis
from farm.routes.custom.values import Act, Const


def copy(self: Any, name: str, dims: list[int], src: tuple[int, np.ndarray | None], src_off: int,
          src_strides: list[int], out_shape: tuple[int, ...], dst_off: int = 0,
          dst_strides: list[int] | None = None, mods: list[int] | None = None,
          base: tuple[int, np.ndarray | None] | None = None, fill: float | None = None
          ) -> Act | Flat:
    r = len(dims)
    if r > RANK:
        raise self.low.fail(f"rank {r} (the fallback handles {RANK})")
    if r == 0:
        dims, src_strides, dst_strides = [1], [0], [0]
        r = 1
    meta = [r, *dims, src_off, *src_strides, *(mods or [0] * r), dst_off,
            *(dst_strides if dst_strides is not None else cstrides(tuple(dims))),
            max(1, math.prod(out_shape))]
    ops = [base if base is not None else (-1, None), src]
    return self.emit(name, COPY, meta, ops, out_shape, p1=int(fill is not None),
                     floats=(float(fill or 0.0),))

def reshape_node(self: Any, node: onnx.NodeProto) -> Act | Flat:
    out = self.shape(node.output[0])
    x = node.input[0]
    v = self.low.vals.get(x)
    if isinstance(v, Flat) and not _token_like(self, out):
        return v  # same bytes, same buffer kind: an alias
    n = max(1, math.prod(out))
    return copy(self, node.name, [n], self.operand(x), 0, [1], out)

def _token_like(self: Any, shape: tuple[int, ...]) -> bool:
    return (len(shape) >= 2 and math.prod(shape[:-1]) == self.B * self.S) or \
        (len(shape) == 2 and shape[0] == self.B)

def _Identity(self: Any, node: onnx.NodeProto) -> list[Any]:
    return [reshape_node(self, node)]

def _Transpose(self: Any, node: onnx.NodeProto) -> list[Any]:
    x = node.input[0]
    xs = self.shape(x)
    perm = attr(node, "perm") or list(range(len(xs)))[::-1]
    st = cstrides(xs)
    out = tuple(xs[p] for p in perm)
    return [copy(self, node.name, list(out), self.operand(x), 0, [st[p] for p in perm], out)]

def _Slice(self: Any, node: onnx.NodeProto) -> list[Any]:
    x = node.input[0]
    xs = self.shape(x)
    starts, ends = self._const_in(node, 1), self._const_in(node, 2)
    axes = self._const_in(node, 3)
    steps = self._const_in(node, 4)
    axes_l = [int(a) for a in (axes if axes is not None else range(len(starts)))]  # type: ignore[arg-type]
    st = cstrides(xs)
    begin, step = [0] * len(xs), [1] * len(xs)
    dims = list(xs)
    for i, a in enumerate(axes_l):
        a = norm_axis(a, len(xs))
        s = int(steps[i]) if steps is not None else 1  # type: ignore[index]
        b, e, s2 = slice(int(starts[i]), int(ends[i]), s).indices(xs[a])  # type: ignore[index]
        begin[a], step[a], dims[a] = b, s2, len(range(b, e, s2))
    out = self.shape(node.output[0])
    if math.prod(dims) == 0:
        return [Const(np.zeros(out, np.float32))]
    off = sum(b * s for b, s in zip(begin, st, strict=True))
    return [copy(self, node.name, dims, self.operand(x), off,
                       [s * k for s, k in zip(st, step, strict=True)], out)]

def _Expand(self: Any, node: onnx.NodeProto) -> list[Any]:
    x, out = node.input[0], self.shape(node.output[0])
    return [copy(self, node.name, list(out), self.operand(x), 0, bcast(self.shape(x), out),
                       out)]

def _Tile(self: Any, node: onnx.NodeProto) -> list[Any]:
    x, out = node.input[0], self.shape(node.output[0])
    xs = self.shape(x)
    return [copy(self, node.name, list(out), self.operand(x), 0, cstrides(xs), out,
                       mods=list(xs))]

def _Concat(self: Any, node: onnx.NodeProto) -> list[Any]:
    out = self.shape(node.output[0])
    axis = norm_axis(attr(node, "axis", 0), len(out))
    ost = cstrides(out)
    prev: Act | Flat | None = None
    at = 0
    for i, x in enumerate(n for n in node.input if n):
        xs = self.shape(x)
        if math.prod(xs) == 0:
            continue
        base = None if prev is None else (prev.value, None)
        prev = copy(self, f"{node.name}/{i}", list(xs), self.operand(x), 0, cstrides(xs), out,
                          dst_off=at * ost[axis], dst_strides=ost, base=base)
        at += xs[axis]
    if prev is None:
        raise self.low.fail("Concat of empty tensors")
    return [prev]

def _Pad(self: Any, node: onnx.NodeProto) -> list[Any]:
    if attr(node, "mode", b"constant") not in (b"constant", "constant"):
        raise self.low.fail("only constant Pad has a fallback kernel")
    x, out = node.input[0], self.shape(node.output[0])
    xs = self.shape(x)
    pads = [int(p) for p in self._const_in(node, 1)]  # type: ignore[union-attr]
    axes = self._const_in(node, 3)
    begin = [0] * len(xs)
    for i, a in enumerate([int(a) for a in axes] if axes is not None else range(len(xs))):
        begin[norm_axis(a, len(xs))] = pads[i]
    if any(b < 0 for b in begin) or any(o < s for o, s in zip(out, xs, strict=True)):
        raise self.low.fail("negative Pad has no fallback kernel")
    cv = self._const_in(node, 2)
    ost = cstrides(out)
    fill = float(cv.reshape(-1)[0]) if cv is not None and cv.size else 0.0
    return [copy(self, node.name, list(xs), self.operand(x), 0, cstrides(xs), out,
                       dst_off=sum(b * s for b, s in zip(begin, ost, strict=True)),
                       dst_strides=ost, fill=fill)]

def _Split(self: Any, node: onnx.NodeProto) -> list[Any]:
    x = node.input[0]
    xs = self.shape(x)
    axis = norm_axis(attr(node, "axis", 0), len(xs))
    st = cstrides(xs)
    outs, at = [], 0
    for o in node.output:
        os_ = self.shape(o)
        outs.append(copy(self, f"{node.name}/{o}", list(os_), self.operand(x), at * st[axis],
                               st, os_))
        at += os_[axis]
    return outs
