"""Per-op categories on corpus models: TVM kernels of torch's decomposed LayerNorm and GELU
chains (imported without the front-end) and of the front-end's canonical form, and ORT node
scopes of the DistilBERT/ALBERT exports and ORT's fused com.microsoft ops."""

from __future__ import annotations

from pathlib import Path

import onnx
import pytest

from farm.categories import categorize, tvm_category
from farm.models.corpus import corpus_model
from farm.models.frontend import canonicalize
from farm.models.frontend.shapes import ShapeSpec, bind

MARKED = ("mean", "sqrt", "erf", "tanh", "layer_norm", "softmax", "matmul")


@pytest.fixture(autouse=True)
def farm_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FARM_HOME", str(tmp_path / "home"))


def kernels(path: Path) -> list[str]:
    from farm.routes.tvm import api

    mod = api.lower_to_kernels(api.import_onnx(path), api.make_target({"kind": "llvm"}),
                               fusion=True)
    return [gv.name_hint for gv, f in mod.functions.items() if type(f).__name__ == "PrimFunc"]


@pytest.mark.tvm
@pytest.mark.parametrize("name", ["bert-opset14-fixed", "albert-opset11-fixed",
                                  "bert-opset17-fixed+ortopt"])
def test_tvm_kernels_of_decomposed_and_canonical_graphs(name: str, tmp_path: Path) -> None:
    src = corpus_model(f"{name}@small", tmp_path / "c")
    raw = onnx.load(str(src))
    bind(raw, ShapeSpec())
    onnx.save(raw, str(tmp_path / "bound.onnx"))
    paths = [canonicalize(src, None, tmp_path).path]
    if "ortopt" not in name:  # TVM cannot import the com.microsoft ops themselves
        paths.append(tmp_path / "bound.onnx")
    for path in paths:
        names = kernels(path)
        cats = {n: tvm_category(n) for n in names}
        # a GELU fused into the FFN GEMM's kernel is fc (as in the custom executor)
        assert {"fc", "attention", "layernorm"} <= set(cats.values()), (path, cats)
        wrong = {n: c for n, c in cats.items() if c == "other" and any(m in n for m in MARKED)}
        assert not wrong, (path, wrong)


@pytest.mark.parametrize("op, name, want", [
    ("ReduceMean", "/transformer/layer.0/sa_layer_norm/ReduceMean", "layernorm"),
    ("Pow", "/transformer/layer.1/output_layer_norm/Pow", "layernorm"),
    ("Erf", "/transformer/layer.0/ffn/activation/Erf", "gelu"),
    ("Div", "/transformer/layer.0/ffn/activation/Div", "gelu"),
    ("MatMul", "/transformer/layer.0/attention/q_lin/MatMul", "fc"),
    ("Add", "/transformer/layer.0/ffn/lin2/Add", "fc"),
    ("Where", "/transformer/layer.0/attention/Where", "attention"),
    ("Tanh", "/encoder/layer.0/intermediate/intermediate_act_fn/Tanh", "gelu"),
    ("MatMul", "/encoder/embedding_hidden_mapping_in/MatMul", "fc"),
    ("SkipLayerNormalization", "SkipLayerNorm_AddBias_0", "layernorm"),
    ("BiasGelu", "Gelu_AddBias_0", "gelu"),
    ("FastGelu", "FastGelu_AddBias_0", "gelu"),
    ("EmbedLayerNormalization", "EmbedLayerNormalization_0", "layernorm"),
    ("Attention", "Attention_0", "attention"),
])
def test_ort_nodes_of_the_corpus_exports(op: str, name: str, want: str) -> None:
    assert categorize("ort", op, name) == want
