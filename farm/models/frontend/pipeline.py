"""The front-end pipeline: an ONNX file as a user exported it -> the canonical file TVM and
custom build from (ORT keeps running the original file).

Steps, in order (each says why it is where it is):
1. load without the ONNX checker (a file with contrib-domain ops that ORT loads is valid
   input; the checker refuses e.g. LayerNormalization at opset 14 written by ORT's optimizer);
2. bind the input shapes (shapes.py): everything after sees static dims;
3. Constant nodes -> initializers, opset upgraded to 17 (graph.py);
4. com.microsoft ops expanded (contrib.py), then torch's decomposed LayerNorm fused
   (rewrite.py) BEFORE onnxscript: its default rules can drop LayerNorm's `Add(var, eps)`;
5. ORT's symbolic shape inference (knows contrib ops), then onnxscript's optimizer
   (constant folding incl. the Shape/Gather/Concat chains of dynamic exports, dead code):
   the maintained generic pass, chosen over onnxslim/onnxsim (docs/real-models.md);
6. encoder rewrites needing folded constants (and, for SDPA's 3-D Kᵀ, onnxscript's inferred
   shapes): Gemm -> MatMul+Add, Where masks (also transformers 5.x's masking_utils ones)
   -> additive, query scale moved after Q·Kᵀ, Transposes merged, no-op Reshapes dropped;
   then onnxscript once more;
7. ONNX shape inference; tensors whose shape is still unknown are reported (`symbolic`).
`canonicalize(src, spec, out_dir)` caches the result by (source sha256, shapes, front-end code).
"""

from __future__ import annotations

import hashlib
import json
import os
import threading
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import onnx

from farm.errors import BuildError
from farm.models.frontend import contrib, graph, rewrite, shapes
from farm.models.frontend.quant import detect_quantisation
from farm.paths import build_cache_dir


@dataclass(frozen=True)
class Canonical:
    path: Path                               # the canonical .onnx file
    source: Path
    input_shapes: dict[str, list[int]]       # bound dims per input
    symbolic_inputs: dict[str, list[Any]]    # the source's symbolic input dims, before binding
    symbolic_left: list[str]                 # tensors still without a static shape
    quantisation: str                        # detected variant of the source
    rewrites: dict[str, int] = field(default_factory=dict)

    def flags(self) -> dict[str, Any]:
        """What a record's build_flags carry about the front-end."""
        out: dict[str, Any] = {"input_shapes": self.input_shapes}
        if self.symbolic_left:
            out["symbolic_dims"] = self.symbolic_left[:8]
        return out

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        data["path"], data["source"] = str(self.path), str(self.source)
        return data


def _code_hash() -> str:
    digest = hashlib.sha256()
    for p in sorted(Path(__file__).parent.glob("*.py")):
        digest.update(p.read_bytes())
    return digest.hexdigest()[:16]


def _batch_seq(bound: dict[str, list[int]]) -> tuple[int, int]:
    for dims in bound.values():
        if len(dims) == 2:
            return dims[0], dims[1]
    return 1, next(iter(bound.values()), [1, 1])[-1]


def _onnxscript(model: onnx.ModelProto) -> onnx.ModelProto:
    import onnxscript.optimizer

    try:
        return onnxscript.optimizer.optimize(model, num_iterations=2)
    except Exception as exc:  # onnxscript raises from many layers; name the step
        raise BuildError(f"front-end: onnxscript's optimizer failed: {type(exc).__name__}: "
                         f"{str(exc).splitlines()[0] if str(exc) else ''}",
                         hint="`farm models check FILE` shows which routes still take it") from exc


def _symbolic_shapes(model: onnx.ModelProto) -> onnx.ModelProto:
    """ORT's symbolic shape inference: unlike onnx's it knows the com.microsoft ops left in
    the graph (MatMulNBits), so the Shape chains behind them fold too.

    Its `infer_shapes` entry point saves `sym_shape_infer_temp.onnx` into the CURRENT
    directory whenever a shape stays unknown; the same loop is run here without that save
    (private API: any failure leaves the model as it was, onnxscript's inference still runs).
    """
    if not any(n.domain == graph.MS for n in model.graph.node):
        return model  # onnx's own inference (inside onnxscript) knows every op
    from onnxruntime.tools.symbolic_shape_infer import SymbolicShapeInference

    try:
        ssi = SymbolicShapeInference(2**31 - 1, True, False, 0)
        ssi._preprocess(model)
        while ssi.run_:
            ssi._infer_impl()
        ssi._update_output_from_vi()
        return ssi.out_mp_
    except Exception:
        return model


def canonical_model(model: onnx.ModelProto, spec: shapes.ShapeSpec, *,
                    dequantize: bool = False
                    ) -> tuple[onnx.ModelProto, dict[str, list[int]], dict[str, int]]:
    """The in-memory pipeline (steps 2-7); returns (model, bound shapes, rewrite counts).
    `dequantize`: MatMulNBits -> fp32 MatMul (the TVM route's form of an int4 file)."""
    m = onnx.ModelProto()
    m.CopyFrom(model)
    bound = shapes.bind(m, spec)
    graph.constants_to_initializers(m)
    graph.upgrade_opset(m)
    g = graph.Graph(m)
    counts = {f"expand:{k}": v for k, v in contrib.expand_contrib(g, *_batch_seq(bound)).items()}
    g.commit()
    counts["layernorm"] = rewrite.fuse_layernorm(g)
    g.commit()
    m = _symbolic_shapes(m)
    m = _onnxscript(m)
    g = graph.Graph(m)
    counts["gemm"] = rewrite.gemm_to_matmul(g)
    counts["dequantize:Gather"] = rewrite.dequantize_gathered_tables(g)
    counts["where_mask"] = rewrite.where_mask_to_additive(g)
    counts["query_scale"] = rewrite.move_query_scale(g)
    counts["transpose_3d"] = rewrite.fold_3d_transpose(g)
    counts["transposes"] = rewrite.fuse_transposes(g)
    counts["keep_mask"] = rewrite.keep_mask_to_additive(g)  # reads shapes an Expand's drop loses
    counts["sdpa_mask"] = rewrite.sdpa_mask_to_additive(g)
    if dequantize:
        counts["dequantize:MatMulNBits"] = rewrite.dequantize_nbits(g)
    g.commit()
    del m.graph.value_info[:]  # shapes inferred before the rewrites (e.g. a dropped Expand)
    m = _onnxscript(m)
    # no-op Reshapes are seen only now: downstream of a mask that was Expanded to a computed
    # shape, nothing had a static shape before the mask rewrites
    g = graph.Graph(m)
    counts["noop_reshape"] = rewrite.drop_noop_reshapes(g)
    if counts["noop_reshape"]:
        g.commit()
        del m.graph.value_info[:]
        m = _onnxscript(m)
    try:
        m = onnx.shape_inference.infer_shapes(m, data_prop=True)
    except Exception as exc:
        counts["shape_inference_failed"] = 1
        del exc
    return m, bound, {k: v for k, v in counts.items() if v}


def canonicalize(src: str | Path, spec: shapes.ShapeSpec | None = None,
                 out_dir: Path | None = None, *, dequantize: bool = False) -> Canonical:
    from farm.models.build import file_sha256

    src = Path(src)
    spec = spec or shapes.ShapeSpec()
    key = hashlib.sha256(f"{file_sha256(src)}:{spec.key()}:{dequantize}:{_code_hash()}"
                         .encode()).hexdigest()
    out = (out_dir or build_cache_dir() / "models" / "canonical")
    out.mkdir(parents=True, exist_ok=True)
    path = out / f"{src.stem}-canon-{key[:12]}.onnx"
    meta = path.with_suffix(".json")
    if path.is_file() and meta.is_file():
        data = json.loads(meta.read_text())
        return Canonical(path, src, data["input_shapes"], data["symbolic_inputs"],
                         data["symbolic_left"], data["quantisation"], data["rewrites"])
    try:
        model = onnx.load(str(src))
    except Exception as exc:
        raise BuildError(f"{src}: cannot be read as ONNX: {exc}") from exc
    sym = shapes.symbolic_inputs(model)
    canon, bound, counts = canonical_model(model, spec, dequantize=dequantize)
    result = Canonical(path, src, bound, sym, shapes.symbolic_left(canon),
                       detect_quantisation(model), counts)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{threading.get_ident()}")
    tmp.write_bytes(canon.SerializeToString())
    tmp.replace(path)
    d = result.to_json()
    meta.write_text(json.dumps({k: d[k] for k in ("input_shapes", "symbolic_inputs",
                                                  "symbolic_left", "quantisation",
                                                  "rewrites")}))
    return result
