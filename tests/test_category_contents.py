"""The categories table and the "—" for a category fused away (ReLU in the GEMM epilogue)."""

from __future__ import annotations

from farm.report.category_contents import categories_table, category_ops, fused_away
from farm.report.configs import Config


def _config(route: str, nodes: list[dict]) -> Config:
    cats: dict[str, float] = {"attention": 0.0, "fc": 0.0, "layernorm": 0.0, "gelu": 0.0,
                              "other": 0.0}
    for n in nodes:
        cats[n["category"]] += n["ms"]
    rec = {"ops": {"categories": cats, "nodes": nodes}}
    return Config("local", route, "mobilebert-fp32", "fp32", 1, {}, (rec,))


FUSED = [{"name": "/l0/ffn/up", "op": "FC", "category": "fc", "ms": 2.0},
         {"name": "/l0/norm", "op": "NoNorm", "category": "layernorm", "ms": 0.2},
         {"name": "/l0/attention/", "op": "Attention", "category": "attention", "ms": 1.0},
         {"name": "/emb", "op": "Trigram", "category": "other", "ms": 0.1}]
UNFUSED = [*FUSED, {"name": "/l0/ffn/up/relu", "op": "FC", "category": "gelu", "ms": 0.3}]


def test_fused_relu_is_a_dash_not_zero() -> None:
    fused = _config("custom", FUSED)
    cats = fused.categories_ms()
    assert cats is not None and cats["gelu"] == 0.0
    shown = fused_away(fused, cats)
    assert shown["gelu"] is None and shown["layernorm"] == 0.2 and shown["other"] == 0.1
    unfused = _config("custom", UNFUSED)
    assert fused_away(unfused, unfused.categories_ms() or {})["gelu"] == 0.3


def test_table_says_what_each_category_holds() -> None:
    table = categories_table([_config("custom", FUSED), _config("ort", UNFUSED)])
    first, second = table.rows
    assert first["layernorm"] == "NoNorm" and first["other"] == "Trigram"
    assert first["gelu"] is None and first["note"].startswith("gelu — no op of its own")
    assert second["gelu"] == "FC" and second["note"] is None
    assert category_ops(_config("tvm", []))["fc"] == []
    assert categories_table([_config("tvm", [])]).rows == []  # nothing profiled, no row


def test_mobilebert_nodes_land_in_the_seed_rows() -> None:
    """Every node of the real graph, categorized as ORT reports it unfused: NoNorm (and the
    residual Add before it) is layernorm, ReLU is gelu, projections fc, the core attention."""
    from farm.categories import categorize
    from farm.models.corpus.mobilebert import build_mobilebert
    from farm.models.corpus.mobilebert_config import MobileBertConfig

    model = build_mobilebert(MobileBertConfig(layers=1, hidden=64, embedding=32, bottleneck=32,
                                              heads=2, intermediate=64, seq=8, vocab=64,
                                              max_positions=8))
    got = {n.name: categorize("ort", n.op_type, n.name) for n in model.graph.node
           if n.op_type != "Constant"}
    for name, cat in got.items():
        if "/LayerNorm/" in name or name.endswith(("/output/Add", "/bottleneck/Add")):
            assert cat == "layernorm", name
        elif name.endswith("/Relu"):
            assert cat == "gelu", name
        elif "/dense/" in name or "/query/" in name or "/key/" in name or "/value/" in name:
            assert cat == "fc", name
        elif "/attention/self/" in name:
            assert cat == "attention", name
    assert sorted(set(got.values())) == ["attention", "fc", "gelu", "layernorm", "other"]
