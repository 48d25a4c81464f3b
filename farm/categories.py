"""Op → category mapping for per-op profiles, one table per route.

Categories: ``attention``, ``fc``, ``layernorm``, ``gelu``, ``other`` and ``fallback``
(CATEGORIES): ``fallback`` is the custom executor's generic fallback kernels (ONNX ops its
fused patterns do not cover, farm/routes/custom/lower_generic.py); the other routes never
charge it.
`categorize(route, op, name="", input_shapes=None) -> str` decides in this order:

1. **Fixed op table** (ORT_OPS, CUSTOM_OPS): op types whose meaning does not depend on where
   they sit. Fused ORT nodes are charged to their main computation: ``Attention`` and
   ``MultiHeadAttention`` → attention (ORT's ``Attention`` also contains the Q/K/V
   projection GEMM, so at fusion levels that create it, fc time moves into attention: compare
   fc+attention across optimisation levels); ``SkipLayerNormalization`` → layernorm (it absorbs
   the residual Add and often the preceding bias Add); ``BiasGelu``/``FastGelu``/``Gelu`` →
   gelu (absorbing the FFN bias Add); ``EmbedLayerNormalization`` → layernorm (absorbs the
   embedding Gathers). Quantize/dequantize conversions (``QuantizeLinear``,
   ``DequantizeLinear``, ``DynamicQuantizeLinear``) are always ``other``: they are the price of
   the quantized format, not part of one layer.
2. **Name scope** (SCOPE_HINTS, substrings of the node name) for the generic ops (Add, Mul,
   Div, Reshape, Transpose, MatMul, ...): the generator in farm/models/encoder.py puts
   every node under a scope, e.g. ``/layers.0/attention/core/`` (attention), ``/ffn/gelu/``
   (gelu), ``/attention/q/`` (fc: projection MatMul and its bias Add), ``/attention/norm/``
   (layernorm: residual Add + LayerNormalization). HF/PyTorch export scopes
   (``/attention/self/``, ``/intermediate_act_fn/``, ``/LayerNorm/``) are covered as well.
   ORT keeps the original name for unfused nodes and for ``<name>/MatMulAddFusion``-style
   fusions, so scopes survive optimisation; fused nodes named ``SkipLayerNormalization_token_N``
   are handled by step 1.
3. **Shape pattern** for matrix products (MATMUL_LIKE) outside a known scope: a product of two
   activations (at least two inputs of rank >= 3 in the profile's ``input_type_shape``, e.g.
   Q·Kᵀ [1,N,S,D]×[1,N,D,S]) is attention; a product with a weight (rank-2 or initializer) is
   fc. ORT's profile lists only non-initializer inputs, so a projection shows one input.
4. Anything else is ``other`` (Gather embeddings, Cast, Reshape outside a scope, ...).

MobileBERT (farm/models/corpus/mobilebert.py) has no LayerNormalization and no GELU:
its NoNorm (``x * weight + bias`` under ``/LayerNorm/``, with the residual Add before it in
``/output/``) is charged to ``layernorm`` and its ReLU to ``gelu``, in every route, so the
seed's LayerNorm and GELU rows hold its normalisation and activation; the report's
categories table names the op types each row held (farm/report/category_contents.py).

TVM (`tvm_category`, used by the TVM build for its kernel sidecar and by `categorize`):
kernel names are fused PrimFunc names like ``fused_matmul_add``. A kernel holding a matrix
product (TVM_MATMUL_MARKERS) is fc when one operand is a weight and attention when both are
activations (Q·Kᵀ, P·V; decided by `has_weight`, else by input shapes, else attention
only when a softmax is fused in), whatever
else is fused into it (so a GELU fused into the FFN GEMM counts as fc, as in the custom
executor); otherwise the first matching TVM_SUBSTRINGS marker wins.
Custom executor (CUSTOM_OPS): the executor's own op names, exact match, then substrings.

This module is stdlib-only and Python 3.8-compatible: deploy ships it next to the route
runners (the ORT runner imports it on the device), so the device and the host categorize
with the same table.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

CATEGORIES = ("attention", "fc", "layernorm", "gelu", "other", "fallback")

ORT_OPS: dict[str, str] = {
    # attention (fused and unfused parts that are never anything else)
    "Attention": "attention",
    "MultiHeadAttention": "attention",
    "GroupQueryAttention": "attention",
    "PackedAttention": "attention",
    "PackedMultiHeadAttention": "attention",
    "QAttention": "attention",
    "DecoderMaskedMultiHeadAttention": "attention",
    "SparseAttention": "attention",
    "Softmax": "attention",
    # fc: products with a constant weight, whatever the quantization
    "Gemm": "fc",
    "FusedGemm": "fc",
    "QGemm": "fc",
    "MatMulNBits": "fc",
    "MatMulBnb4": "fc",
    "DynamicQuantizeMatMul": "fc",
    "MatMulIntegerToFloat": "fc",
    # layernorm
    "LayerNormalization": "layernorm",
    "SkipLayerNormalization": "layernorm",
    "SimplifiedLayerNormalization": "layernorm",
    "SkipSimplifiedLayerNormalization": "layernorm",
    "EmbedLayerNormalization": "layernorm",
    "QEmbedLayerNormalization": "layernorm",
    "RMSNormalization": "layernorm",
    # gelu
    "Gelu": "gelu",
    "FastGelu": "gelu",
    "BiasGelu": "gelu",
    "QuickGelu": "gelu",
    "Erf": "gelu",
    # quantization format conversions
    "QuantizeLinear": "other",
    "DequantizeLinear": "other",
    "DynamicQuantizeLinear": "other",
}

# ops that multiply matrices and may be either a projection (fc) or attention's Q·Kᵀ / P·V
MATMUL_LIKE = frozenset({"MatMul", "FusedMatMul", "QLinearMatMul", "MatMulInteger"})

# (substring of the node name, category); first match wins, so specific scopes come first
SCOPE_HINTS: tuple[tuple[str, str], ...] = (
    # farm encoder (farm/models/encoder.py)
    ("/attention/core/", "attention"),
    ("/mask/", "attention"),
    ("/gelu/", "gelu"),
    ("/norm/", "layernorm"),
    ("/attention/q/", "fc"),
    ("/attention/k/", "fc"),
    ("/attention/v/", "fc"),
    ("/attention/out/", "fc"),
    ("/ffn/up/", "fc"),
    ("/ffn/down/", "fc"),
    # HF transformers exported by torch.onnx
    ("/intermediate_act_fn/", "gelu"),
    ("/LayerNorm/", "layernorm"),
    ("/output/Add", "layernorm"),  # the residual Add feeding an output block's (No)Norm
    ("/bottleneck/Add", "layernorm"),  # the same in MobileBERT's output bottleneck
    ("/query/", "fc"),
    ("/key/", "fc"),
    ("/value/", "fc"),
    ("/dense/", "fc"),
    ("/attention/self/", "attention"),
    # DistilBERT / ALBERT module names (torch.onnx export scopes)
    ("/sa_layer_norm/", "layernorm"),
    ("/output_layer_norm/", "layernorm"),
    ("/ffn/activation/", "gelu"),
    ("/q_lin/", "fc"),
    ("/k_lin/", "fc"),
    ("/v_lin/", "fc"),
    ("/out_lin/", "fc"),
    ("/ffn/lin1/", "fc"),
    ("/ffn/lin2/", "fc"),
    ("/embedding_hidden_mapping_in/", "fc"),
    ("/transformer/layer.", "attention"),  # what is left of a DistilBERT layer: its attention
)

TVM_SUBSTRINGS: tuple[tuple[str, str], ...] = (
    ("softmax", "attention"),
    ("layer_norm", "layernorm"),
    ("rms_norm", "layernorm"),
    ("gelu", "gelu"),
    ("erf", "gelu"),
    ("tanh", "gelu"),  # tanh GELU (gelu_new, FastGelu expanded); before `power` below
    # a LayerNorm TVM imported decomposed (opset < 17 without the front-end, or unfused):
    # mean / subtract / power / mean / add / sqrt / divide / multiply / add kernels
    ("variance", "layernorm"),
    ("rsqrt", "layernorm"),
    ("sqrt", "layernorm"),
    ("mean", "layernorm"),
    ("power", "layernorm"),
    ("relu", "gelu"),  # MobileBERT's activation, when not fused into its GEMM
)
TVM_MATMUL_MARKERS = ("matmul", "dense", "gemm")

# custom executor op names (kernels/ and its plan); exact names first, then substrings
# the executor's op names (kernels/runtime, lower-cased): Embed, FC (GEMM with its fused
# bias/GELU epilogue: a fused GELU is charged to fc, the unfused run reports it as gelu),
# LayerNorm (with the fused residual add), Gelu, Add, Attention
CUSTOM_OPS: dict[str, str] = {
    "embed": "other",
    "fc": "fc",
    "add": "other",
    "linear": "fc",
    "matmul": "fc",
    "matmul_q8": "fc",
    "matmul_q4": "fc",
    "attention": "attention",
    "softmax": "attention",
    "layernorm": "layernorm",
    "add_layernorm": "layernorm",
    "gelu": "gelu",
    "bias_gelu": "gelu",
    "nonorm": "layernorm",  # MobileBERT's NoNorm with its residual Add
    "relu": "gelu",
    "trigram": "other",     # MobileBERT's trigram embedding input
}
CUSTOM_SUBSTRINGS: tuple[tuple[str, str], ...] = (
    ("attn", "attention"),
    ("softmax", "attention"),
    ("norm", "layernorm"),
    ("gelu", "gelu"),
    ("relu", "gelu"),
    ("matmul", "fc"),
    ("gemm", "fc"),
    ("linear", "fc"),
)

def _matmul_by_shape(input_shapes: Sequence[Sequence[int]] | None) -> str:
    if input_shapes is None:
        return "fc"
    activations = sum(1 for shape in input_shapes if len(shape) >= 3)
    return "attention" if activations >= 2 else "fc"


def _ort(op: str, name: str, input_shapes: Sequence[Sequence[int]] | None) -> str:
    if op in ORT_OPS:
        return ORT_OPS[op]
    for scope, category in SCOPE_HINTS:
        if scope in name:
            return category
    if op in MATMUL_LIKE:
        return _matmul_by_shape(input_shapes)
    return "other"


def tvm_category(name: str, has_weight: bool | None = None,
                 input_shapes: Sequence[Sequence[int]] | None = None) -> str:
    """Category of a TVM kernel from its (fused) name (see the module docstring)."""
    lowered = name.lower()
    if any(marker in lowered for marker in TVM_MATMUL_MARKERS):
        if has_weight is not None:
            return "fc" if has_weight else "attention"
        if input_shapes is not None:
            return _matmul_by_shape(input_shapes)
        return "attention" if "softmax" in lowered else "fc"  # name only: Q·Kᵀ+softmax
    for marker, category in TVM_SUBSTRINGS:
        if marker in lowered:
            return category
    return "other"


def _custom(op: str, input_shapes: Sequence[Sequence[int]] | None) -> str:
    lowered = op.lower()
    if lowered in CUSTOM_OPS:
        return CUSTOM_OPS[lowered]
    for marker, category in CUSTOM_SUBSTRINGS:
        if marker in lowered:
            if category == "fc" and input_shapes is not None:
                return _matmul_by_shape(input_shapes)
            return category
    return "other"


def categorize(route: str, op: str, name: str = "",
               input_shapes: Sequence[Sequence[int]] | None = None) -> str:
    """Category of one profiled node (see the module docstring for the rules)."""
    table = TABLES.get(route)
    if table is None:
        raise ValueError(f"no op-category table for route {route!r} "
                         f"(known: {', '.join(TABLES)})")
    return table(op, name, input_shapes)


# route -> its rule (op, node name, input shapes) -> category; a new route adds one here
TABLES: dict[str, Callable[[str, str, Sequence[Sequence[int]] | None], str]] = {
    "ort": _ort,
    "tvm": lambda op, name, shapes: tvm_category(op or name, input_shapes=shapes),
    "custom": lambda op, name, shapes: _custom(op or name, shapes),
}
