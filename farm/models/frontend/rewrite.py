"""Hand-written encoder rewrites into the canonical op set (none of onnxscript, onnxslim or
onnxsim fuses these; see docs/real-models.md).

- `fuse_layernorm`: `ReduceMean Sub Pow(2) ReduceMean Add(eps) Sqrt Div [Mul(g)] [Add(b)]`
  (torch's decomposed LayerNorm, opset < 17) -> `LayerNormalization(axis=-1, epsilon)`. Runs
  BEFORE onnxscript's rules, which may drop the `Add(var, eps)` of a tiny epsilon.
- `fuse_gelu_tanh`: `0.5*x*(1+tanh(sqrt(2/pi)*(x+0.044715*x^3)))` -> com.microsoft FastGelu
  is NOT used (TVM cannot import it); the chain is left as it is (TVM runs it, custom names it).
- `gemm_to_matmul`: `Gemm(x, W, b, transB)` with constant W -> `MatMul(x, W') + Add(b)`.
- `where_mask_to_additive`: `Where(Expand(Reshape(Equal(mask, 0))), c, scores)` -> `scores +
  (1 - Cast(mask)) * NEG` on the [B,1,1,S] mask (same softmax for 0/1 masks).
- `move_query_scale`: `MatMul(Div|Mul(q, a), [Mul(k, b)])` -> `Mul(MatMul(q, k), a*b)`, also
  through quantize_static's activation Q/DQ pair (the pair's scale takes the factor).
- `fold_3d_transpose`, `fuse_transposes`, `sdpa_mask_to_additive`: the dynamo/SDPA pattern
  (Kᵀ as a Reshape-Transpose-Reshape through 3-D, then two Transposes; the mask Expanded to
  [B,1,S,S] and applied by `Where(Cast(inv, bool))`).
- `keep_mask_to_additive`: transformers 5.x's masking_utils mask (a boolean keep mask read
  by a constant-index GatherND, And-ed with an all-true constant, `Where(keep, 0, min)`)
  -> the additive mask, and the SDPA softmax's `Where(IsNaN(p), 0, p)` guard dropped;
  `drop_noop_reshapes`: a Reshape to the shape its input already has.
- `dequantize_gathered_tables`: quantize_dynamic's default int8 embedding tables
  (`DequantizeLinear(Gather(table_q, ids))`) -> an fp32 table, the same numbers.
"""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto

from farm.models.frontend.graph import Graph, attr

MASK_NEG = -1e9  # finite: scores + NEG never reaches -inf, so a fully padded row stays finite


def _masking_fill(v: float | None) -> bool:
    """A Where's fill value that masks a score out: -1e4 and below (exporters write
    finfo(float32).min, -inf or -1e4-ish constants), never a value a real score takes."""
    return not (v is None or v > -1e4)


def _last_axis(g: Graph, node: onnx.NodeProto, rank_hint: int | None = None) -> bool:
    axes = attr(node, "axes")
    if axes is None and len(node.input) > 1:
        c = g.const(node.input[1])
        axes = None if c is None else [int(v) for v in c.reshape(-1)]
    return axes is not None and len(axes) == 1 and (axes[0] == -1 or axes[0] == rank_hint)


def fuse_layernorm(g: Graph) -> int:
    done = 0
    for mean in [n for n in g.nodes if n.op_type == "ReduceMean"]:
        if id(mean) in g.dead or not _last_axis(g, mean, 2) or attr(mean, "keepdims", 1) != 1:
            continue
        x = mean.input[0]
        subs = [u for u in g.users(mean.output[0]) if u.op_type == "Sub" and u.input[0] == x
                and u.input[1] == mean.output[0]]
        if len(subs) != 1:
            continue
        sub = subs[0]
        xc = sub.output[0]
        pows = [u for u in g.users(xc) if u.op_type == "Pow" and g.scalar(u.input[1]) == 2.0]
        divs = [u for u in g.users(xc) if u.op_type == "Div" and u.input[0] == xc]
        if len(pows) != 1 or len(divs) != 1 or len(g.users(xc)) != 2:
            continue
        var = next((u for u in g.users(pows[0].output[0]) if u.op_type == "ReduceMean"), None)
        if var is None or not _last_axis(g, var, 2):
            continue
        add = next((u for u in g.users(var.output[0]) if u.op_type == "Add"), None)
        eps = None if add is None else g.scalar(g.other(add, var.output[0]))
        sqrt = None if add is None else next(
            (u for u in g.users(add.output[0]) if u.op_type == "Sqrt"), None)
        div = divs[0]
        if eps is None or sqrt is None or div.input[1] != sqrt.output[0]:
            continue
        chain = [mean, sub, pows[0], var, add, sqrt, div]
        out = div.output[0]
        width = None
        gamma = beta = None
        mul = g.users(out)
        if len(mul) == 1 and mul[0].op_type == "Mul":
            gamma = g.const(g.other(mul[0], out))
            if gamma is not None:
                chain.append(mul[0])
                out = mul[0].output[0]
                badd = g.users(out)
                if len(badd) == 1 and badd[0].op_type == "Add":
                    beta = g.const(g.other(badd[0], out))
                    if beta is not None:
                        chain.append(badd[0])
                        out = badd[0].output[0]
        width = (gamma if gamma is not None else beta)
        if width is None:
            continue  # a bare normalisation without affine: rare, left decomposed
        h = width.size
        gamma = np.ones(h, np.float32) if gamma is None else gamma.reshape(-1).astype(np.float32)
        beta = np.zeros(h, np.float32) if beta is None else beta.reshape(-1).astype(np.float32)
        scope = mean.name.rsplit("/", 1)[0] if "/" in mean.name else mean.name
        g.kill(*chain)
        g.add("LayerNormalization", [x, g.add_const(f"{scope}.gamma", gamma),
                                     g.add_const(f"{scope}.beta", beta)], [out],
              name=f"{scope}/LayerNormalization", axis=-1, epsilon=float(eps))
        done += 1
    return done


def gemm_to_matmul(g: Graph) -> int:
    done = 0
    for n in [n for n in g.nodes if n.op_type == "Gemm"]:
        w = g.const(n.input[1])
        if w is None or attr(n, "transA", 0) or attr(n, "alpha", 1.0) != 1.0:
            continue
        if attr(n, "transB", 0):
            w = w.T
        scope = n.name.rsplit("/", 1)[0]
        g.kill(n)
        bias = g.const(n.input[2]) if len(n.input) > 2 and n.input[2] else None
        mm_out = n.output[0] if bias is None else g.fresh(f"{scope}/MatMul")
        g.add("MatMul", [n.input[0], g.add_const(f"{scope}.weight.T",
                                                 np.ascontiguousarray(w))], [mm_out],
              name=f"{scope}/MatMul")
        if bias is not None:
            b = bias * np.float32(attr(n, "beta", 1.0))
            g.add("Add", [mm_out, g.add_const(f"{scope}.bias", b.astype(np.float32))],
                  [n.output[0]], name=f"{scope}/Add")
        done += 1
    return done


def _additive_mask(g: Graph, mask_input: str, scope: str) -> str:
    m = g.add("Cast", [mask_input], name=f"{scope}/mask_Cast", to=TensorProto.FLOAT).output[0]
    m = g.add("Unsqueeze", [m, g.add_const("mask_axes", np.array([1, 2], np.int64))],
              name=f"{scope}/mask_Unsqueeze").output[0]
    m = g.add("Sub", [g.add_const("one", np.array(1.0, np.float32)), m],
              name=f"{scope}/mask_Sub").output[0]
    return g.add("Mul", [m, g.add_const("mask_neg", np.array(MASK_NEG, np.float32))],
                 name=f"{scope}/mask_Mul").output[0]


def where_mask_to_additive(g: Graph) -> int:
    """DistilBERT's masked_fill: the condition must come from Equal(graph input, 0)."""
    inputs = {i.name for i in g.g.input}
    done = 0
    for w in [n for n in g.nodes if n.op_type == "Where"]:
        cond, fill, scores = w.input
        v = g.scalar(fill)
        node = g.producer.get(cond)
        while node is not None and node.op_type in ("Expand", "Reshape", "Unsqueeze", "Cast"):
            node = g.producer.get(node.input[0])
        if not _masking_fill(v) or node is None or node.op_type != "Equal":
            continue
        src, zero = node.input
        if src not in inputs or g.scalar(zero) != 0.0:
            continue
        scope = w.name.rsplit("/", 1)[0]
        g.kill(w)
        g.add("Add", [scores, _additive_mask(g, src, scope)], [w.output[0]],
              name=f"{scope}/mask_Add")
        done += 1
    return done


def _qdq_pair(g: Graph, name: str) -> tuple[onnx.NodeProto, onnx.NodeProto] | None:
    """(QuantizeLinear, DequantizeLinear) producing `name` with one per-tensor (scalar) scale
    and nothing else reading between them: an activation Q/DQ of quantize_static."""
    dq = g.src(name, "DequantizeLinear")
    q = g.src(dq.input[0], "QuantizeLinear") if dq is not None else None
    if q is None or dq is None or len(g.users(q.output[0])) != 1 or len(g.users(name)) != 1:
        return None
    s_q, s_dq = g.scalar(q.input[1]), g.scalar(dq.input[1])
    if s_q is None or s_q != s_dq or s_q <= 0 or q.input[2:] != dq.input[2:]:
        return None
    return q, dq


def _rescale_qdq(g: Graph, q: onnx.NodeProto, dq: onnx.NodeProto, x: str, c: float) -> None:
    """Replace `DQ(Q(x * c, s))` by `DQ(Q(x, s / c))`, which is `1/c` times it exactly
    (round(x*c/s) == round(x/(s/c)), c > 0): the caller multiplies c back in later."""
    scale = g.add_const("qdq_scale", np.array(g.scalar(q.input[1]) / c, np.float32))
    g.kill(q, dq)
    nq = g.add("QuantizeLinear", [x, scale, *q.input[2:]], name=q.name)
    nq.attribute.extend(q.attribute)
    ndq = g.add("DequantizeLinear", [nq.output[0], scale, *dq.input[2:]], [dq.output[0]],
                name=dq.name)
    ndq.attribute.extend(dq.attribute)


def move_query_scale(g: Graph) -> int:
    """`MatMul(q * a | q / a, k [* b])` -> `MatMul(q, k) * (a*b)`: DistilBERT scales q, torch's
    SDPA (dynamo export) scales q and Kᵀ by sqrt(scale) each. Through an activation Q/DQ pair
    (quantize_static's file: `MatMul(DQ(Q(q / a)), k)`) the pair's scale takes the factor,
    `DQ(Q(q, s*a))`, so the quantised values are the same."""
    done = 0
    for mm in [n for n in g.nodes if n.op_type == "MatMul"]:
        wq = g.src(mm.input[1], "DequantizeLinear")
        if g.const(mm.input[1]) is not None or (wq is not None and
                                                 g.const(wq.input[0]) is not None):
            continue  # a projection (fp32 or int8 weight), not Q·Kᵀ
        factor, ins, dead, requant = 1.0, list(mm.input), [], []
        for side in (0, 1):
            pair = _qdq_pair(g, ins[side])
            node = g.producer.get(pair[0].input[0] if pair else ins[side])
            if node is None or node.op_type not in ("Div", "Mul") or id(node) in g.dead:
                continue
            c = g.scalar(node.input[1])
            if c is None or c == 0 or len(g.users(node.output[0])) != 1:
                continue
            if node.op_type == "Mul" and side == 0 and g.const(node.input[0]) is not None:
                continue
            mul = c if node.op_type == "Mul" else 1.0 / c
            if pair is not None and mul < 0:
                continue  # a negative factor would flip the quantisation scale's sign
            factor *= mul
            if pair is not None:
                requant.append((*pair, node.input[0], mul))
            else:
                ins[side] = node.input[0]
            dead.append(node)
        if not dead:
            continue
        scope = mm.name.rsplit("/", 1)[0]
        g.kill(mm, *dead)
        for q, dq, x, mul in requant:
            _rescale_qdq(g, q, dq, x, mul)
        raw = g.add("MatMul", ins, name=mm.name).output[0]
        g.add("Mul", [raw, g.add_const(f"{scope}.scale", np.array(factor, np.float32))],
              [mm.output[0]], name=f"{scope}/scale_Mul")
        done += 1
    return done


def _static_shape(g: Graph, name: str) -> list[int] | None:
    """The inferred static shape of `name` (value_info or a graph input), else None."""
    for v in [*g.g.value_info, *g.g.input]:
        if v.name == name and v.type.tensor_type.HasField("shape"):
            dims = [d.dim_value if d.HasField("dim_value") else -1
                    for d in v.type.tensor_type.shape.dim]
            return dims if all(d > 0 for d in dims) else None
    return None


def fold_3d_transpose(g: Graph) -> int:
    """torchlib's `aten_scaled_dot_product_attention` (torch 2.9+ dynamo export) writes Kᵀ of
    the [B,H,S,D] heads as `Reshape([-1,S,D]) Transpose([0,2,1]) Reshape([B,H,D,S])`; that is
    `Transpose(k, [0,1,3,2])`, which `fuse_transposes` then merges with the head split's.
    Needs the shapes onnxscript inferred (value_info): the 3-D detour is only a swap of the
    last two axes when the outer Reshapes keep the leading two dims."""
    done = 0
    for r2 in [n for n in g.nodes if n.op_type == "Reshape"]:
        t = g.src(r2.input[0], "Transpose")
        r1 = None if t is None else g.src(t.input[0], "Reshape")
        if r1 is None or [int(p) for p in attr(t, "perm") or []] != [0, 2, 1]:
            continue
        x, mid, out = (_static_shape(g, n) for n in (r1.input[0], r1.output[0], r2.output[0]))
        if x is None or mid is None or out is None or len(x) != 4:
            continue
        b, h, s, d = x
        if mid != [b * h, s, d] or out != [b, h, d, s] or len(g.users(r1.output[0])) != 1 \
                or len(g.users(t.output[0])) != 1:
            continue
        g.kill(r1, t, r2)
        g.add("Transpose", [r1.input[0]], [r2.output[0]], name=r2.name, perm=[0, 1, 3, 2])
        done += 1
    return done


def fuse_transposes(g: Graph) -> int:
    """`Transpose(Transpose(x, p1), p2)` -> `Transpose(x, p1[p2])` (SDPA's Kᵀ of the heads)."""
    done = 0
    for n in [n for n in g.nodes if n.op_type == "Transpose"]:
        inner = g.src(n.input[0], "Transpose")
        p1, p2 = attr(inner, "perm") if inner is not None else None, attr(n, "perm")
        if inner is None or p1 is None or p2 is None or len(g.users(inner.output[0])) != 1:
            continue
        g.kill(n, inner)
        g.add("Transpose", [inner.input[0]], [n.output[0]], name=n.name,
              perm=[int(p1[i]) for i in p2])
        done += 1
    return done


_MASK_PATH = {"Sub", "Mul", "Add", "Div", "Cast", "Where", "Not", "Expand"}


def _reaches_scores_only(g: Graph, name: str, seen: set[str]) -> bool:
    """Every path from `name` goes through elementwise mask ops into Add(scores, .)."""
    if name in seen:  # reached again through another path: already being checked
        return True
    users = g.users(name)
    if not users or g.is_output(name):
        return False
    seen.add(name)
    for u in users:
        if u.op_type == "Add":
            pair = _qdq_pair(g, g.other(u, name))  # the scores through a Q/DQ pair (QDQ file)
            other = g.producer.get(pair[0].input[0] if pair else g.other(u, name))
            if other is not None and other.op_type in ("MatMul", "Mul", "Div"):
                continue
        if u.op_type not in _MASK_PATH or not _reaches_scores_only(g, u.output[0], seen):
            return False
    return True


def sdpa_mask_to_additive(g: Graph) -> int:
    """transformers' SDPA mask: `Expand` (to [B,1,S,S]; the Add with the scores broadcasts
    anyway) dropped, and `Where(Cast(inv, bool), c, inv)` of a 0/1 `inv` -> `inv * NEG`."""
    done = 0
    for n in [n for n in g.nodes if n.op_type == "Expand"]:
        if _reaches_scores_only(g, n.output[0], set()):
            g.kill(n)
            g.add("Identity", [n.input[0]], [n.output[0]], name=n.name)
            done += 1
    for w in [n for n in g.nodes if n.op_type == "Where"]:
        cast = g.src(w.input[0], "Cast")
        v = g.scalar(w.input[1])
        if cast is None or not _masking_fill(v) or cast.input[0] != w.input[2]:
            continue
        g.kill(w)
        g.add("Mul", [w.input[2], g.add_const("mask_neg", np.array(MASK_NEG, np.float32))],
              [w.output[0]], name=w.name.rsplit("/", 1)[0] + "/mask_Mul")
        done += 1
    return done


def _keep_mask_source(g: Graph, name: str) -> tuple[str, list[int]] | None:
    """(graph input, 4-D shape) when `name` is that input's padding mask as a boolean "keep"
    mask: walked back through ops that only broadcast it (Expand, And with an all-true
    constant, Identity) or read it in order (Reshape, Unsqueeze, a Gather or GatherND whose
    constant indices read every element in order) to `Cast(input, bool)`. The shape is the
    one nearest `name` with only broadcasts after it, so its axes are the mask's.
    transformers 5.x's masking_utils writes this with vmap'd index functions (GatherND in
    dynamo files, Flatten + Gather in TorchScript ones); with the shapes bound, it is the
    [B,1,1,S] mask broadcast to [B,1,S,S]."""
    inputs = {i.name for i in g.g.input}
    cur, dims = name, None
    node = g.producer.get(cur)
    while node is not None and id(node) not in g.dead:
        op, nxt = node.op_type, node.input[0] if node.input else ""
        if dims is None:
            dims = _static_shape(g, cur)
            if dims is not None and len(dims) != 4:
                return None
            if dims is None and op not in ("Expand", "And", "Identity"):
                return None  # a re-layout whose result's axes are unknown
        if op == "Cast":
            ok = attr(node, "to") == TensorProto.BOOL and nxt in inputs and dims is not None
            return (nxt, dims) if ok else None
        if op == "And":
            nxt = next((b for a, b in (node.input, node.input[::-1]) if _all_true(g, a)), "")
        elif op == "Gather":  # TorchScript's form of the GatherND below, on the flat mask
            idx, shape = g.const(node.input[1]), _static_shape(g, nxt)
            if idx is None or shape is None or attr(node, "axis", 0) != 0 \
                    or any(d != 1 for d in shape[1:]) \
                    or not np.array_equal(idx.reshape(-1), np.arange(shape[0])):
                return None
        elif op == "GatherND":
            idx, shape = g.const(node.input[1]), _static_shape(g, nxt)
            if idx is None or shape is None or attr(node, "batch_dims", 0) != 0 \
                    or idx.shape[-1] != len(shape) or idx.size // len(shape) != np.prod(shape):
                return None
            flat = np.ravel_multi_index(tuple(idx.reshape(-1, len(shape)).T), shape,
                                        mode="clip")
            if not np.array_equal(flat, np.arange(flat.size)):
                return None
        elif op not in ("Expand", "Unsqueeze", "Reshape", "Identity"):
            return None
        cur = nxt
        node = g.producer.get(cur)
    return None


def _all_true(g: Graph, name: str) -> bool:
    """`name` is a boolean tensor of constants that are all true (also when TorchScript left it
    as ConstantOfShape / And / Expand of constants)."""
    c = g.const(name)
    if c is not None:
        return c.dtype == bool and bool(c.all())
    node = g.producer.get(name)
    if node is None or id(node) in g.dead:
        return False
    if node.op_type == "ConstantOfShape":
        value = attr(node, "value")
        return g.const(node.input[0]) is not None and value is not None \
            and onnx.numpy_helper.to_array(value).dtype == bool \
            and bool(onnx.numpy_helper.to_array(value).all())
    if node.op_type == "And":
        return all(_all_true(g, i) for i in node.input)
    if node.op_type == "Expand":
        return _all_true(g, node.input[0]) and g.const(node.input[1]) is not None
    return False


def keep_mask_to_additive(g: Graph) -> int:
    """transformers 5.x's bidirectional mask: `Where(keep, 0, min)` of a boolean keep mask
    built by masking_utils (see `_keep_mask_source`) -> the additive `(1 - mask) * NEG` on
    the [B,1,1,S] mask, as the 4.x exports write it. torch's SDPA decomposition then guards
    the softmax, `Where(IsNaN(p), 0, p)`, for rows where every score was -inf: with a finite
    NEG no row is (a fully padded row becomes uniform instead of zeros; only an all-zero
    attention_mask has one), so the guard after a softmax of these scores goes too."""
    done = 0
    for w in [n for n in g.nodes if n.op_type == "Where"]:
        keep, fill = g.scalar(w.input[1]), g.scalar(w.input[2])
        if id(w) in g.dead or keep != 0.0 or not _masking_fill(fill):
            continue
        found = _keep_mask_source(g, w.input[0])
        src, dims = found if found is not None else ("", [])
        src_dims = _static_shape(g, src) if src else None
        if src_dims is None or len(src_dims) != 2 \
                or [dims[0], dims[1], dims[3]] != [src_dims[0], 1, src_dims[1]] \
                or not _reaches_scores_only(g, w.output[0], set()):
            continue
        scope = w.name.rsplit("/", 1)[0]
        g.kill(w)
        g.add("Identity", [_additive_mask(g, src, scope)], [w.output[0]],
              name=f"{scope}/mask_Identity")
        for add in g.users(w.output[0]):
            for sm in g.users(add.output[0]):
                if sm.op_type == "Softmax":
                    _drop_nan_guard(g, sm.output[0])
        done += 1
    return done


def _drop_nan_guard(g: Graph, probs: str) -> None:
    for isnan in [u for u in g.users(probs) if u.op_type == "IsNaN"]:
        guards = g.users(isnan.output[0])
        if not guards or any(u.op_type != "Where" or u.input[0] != isnan.output[0]
                             or u.input[2] != probs or g.scalar(u.input[1]) != 0.0
                             for u in guards):
            continue
        g.kill(isnan, *guards)
        for guard in guards:
            g.add("Identity", [probs], [guard.output[0]], name=guard.name)


def drop_noop_reshapes(g: Graph) -> int:
    """`Reshape(x, shape)` whose constant shape, its 0s and -1 resolved, is x's own static
    shape -> Identity (transformers 5.x's TorchScript attention reshapes its [B,H,S,D]
    context to `[B, -1, S, D]` before the Transpose back)."""
    done = 0
    for n in [n for n in g.nodes if n.op_type == "Reshape"]:
        shape, dims = g.const(n.input[1]), _static_shape(g, n.input[0])
        if shape is None or dims is None or shape.size != len(dims) or g.is_output(n.output[0]):
            continue
        want = [int(d) for d in shape.reshape(-1)]
        if not attr(n, "allowzero", 0):
            want = [dims[i] if d == 0 else d for i, d in enumerate(want)]
        if want.count(-1) == 1:
            rest = int(np.prod([d for d in want if d != -1]))
            want[want.index(-1)] = int(np.prod(dims)) // rest if rest else -1
        if want != dims:
            continue
        g.kill(n)
        g.add("Identity", [n.input[0]], [n.output[0]], name=n.name)
        done += 1
    return done


def dequantize_gathered_tables(g: Graph) -> int:
    """`DequantizeLinear(Gather(table_q, ids), s, z)` with a constant int8/uint8 table and a
    per-tensor scale -> `Gather((table_q - z) * s, ids)`: quantize_dynamic's default
    (op_types_to_quantize unset) quantizes the embedding tables too. Dequantizing elementwise
    commutes with the lookup, so the result is the same numbers; TVM and custom then read an
    fp32 table (the lookup is a copy of S rows: nothing to gain from int8 there)."""
    done = 0
    for dq in [n for n in g.nodes if n.op_type == "DequantizeLinear"]:
        gather = g.src(dq.input[0], "Gather")
        table = None if gather is None else g.const(gather.input[0])
        scale = g.const(dq.input[1])
        zero = g.const(dq.input[2]) if len(dq.input) > 2 and dq.input[2] else np.zeros((), np.int8)
        if gather is None or table is None or table.dtype not in (np.int8, np.uint8) \
                or scale is None or scale.size != 1 or zero is None or zero.size != 1 \
                or len(g.users(gather.output[0])) != 1:
            continue
        fp32 = ((table.astype(np.float32) - np.float32(zero.reshape(-1)[0]))
                * np.float32(scale.reshape(-1)[0])).astype(np.float32)
        g.kill(dq, gather)
        g.add("Gather", [g.add_const(f"{gather.input[0]}.dequantized", fp32), gather.input[1]],
              [dq.output[0]], name=gather.name, axis=int(attr(gather, "axis", 0)))
        done += 1
    return done


def dequantize_nbits(g: Graph) -> int:
    """`MatMulNBits` (4-bit, constant weights) -> `MatMul` with the dequantised fp32 weights
    (+ `Add` of its bias), for TVM, whose ONNX importer has no MatMulNBits: TVM then runs
    the int4 file's weights in fp32 (what ORT's accuracy_level 0 computes)."""
    done = 0
    for n in [n for n in g.nodes if n.op_type == "MatMulNBits"]:
        blob, scales = g.const(n.input[1]), g.const(n.input[2])
        zp = g.const(n.input[3]) if len(n.input) > 3 and n.input[3] else None
        k, nn = int(attr(n, "K", 0)), int(attr(n, "N", 0))
        bits, block = int(attr(n, "bits", 4)), int(attr(n, "block_size", 32))
        if blob is None or scales is None or bits != 4 or (len(n.input) > 4 and n.input[4]):
            continue
        nb = (k + block - 1) // block
        raw = blob.astype(np.uint8).reshape(nn, nb, block // 2)
        q = np.empty((nn, nb, block), np.float32)
        q[:, :, 0::2] = raw & 0x0F
        q[:, :, 1::2] = raw >> 4
        if zp is None:
            zero = np.full((nn, nb, 1), 8.0, np.float32)
        else:
            z = zp.astype(np.uint8).reshape(nn, -1)
            zero = np.stack([z & 0x0F, z >> 4], axis=2).reshape(nn, -1)[:, :nb, None]
        w = ((q - zero) * scales.astype(np.float32).reshape(nn, nb, 1)).reshape(nn, -1)[:, :k]
        bias = g.const(n.input[5]) if len(n.input) > 5 and n.input[5] else None
        scope = n.name.rsplit("/", 1)[0] if "/" in n.name else n.name
        g.kill(n)
        out = n.output[0] if bias is None else g.fresh(f"{scope}/MatMul")
        g.add("MatMul", [n.input[0], g.add_const(f"{scope}.weight.T",
                                                 np.ascontiguousarray(w.T))], [out],
              name=f"{scope}/MatMul")
        if bias is not None:
            g.add("Add", [out, n.input[5]], [n.output[0]], name=f"{scope}/Add")
        done += 1
    return done
