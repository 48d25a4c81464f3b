"""Corpus models (users' export patterns, small dims) through all three routes: on `local`
(real agent, ORT, TVM and the custom executor), `farm models check` as a user runs it, and
two files on the emulated aarch64 pixel7 of the lab."""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import onnx
import pytest
from onnx import TensorProto, helper

from farm.bench.config import BenchConfig, Policy
from farm.bench.runner import run_bench
from farm.inventory import load_inventory
from farm.inventory.builtin import local_device
from farm.results.store import ResultStore

REPO = Path(__file__).resolve().parent.parent
FAST = Policy(warmup_runs=1, warmup_min_s=0.0, min_runs=10, min_time_s=0.1, max_time_s=2.0)
ROUTES = ("ort", "tvm", "custom")

pytestmark = [pytest.mark.slow, pytest.mark.tvm]


@pytest.fixture(autouse=True)
def farm_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("FARM_HOME", str(tmp_path / "home"))
    return tmp_path / "home"


def bench(tmp_path: Path, model: str, routes: tuple[str, ...] = ROUTES, devices: Any = None,
          **kw: Any) -> dict[str, dict[str, Any]]:
    devs = devices or [dataclasses.replace(local_device(), workdir=str(tmp_path / "wd"))]
    config = BenchConfig(model=model, routes=routes, policy=FAST, pause_s=0.0, profile_runs=1,
                         **kw)
    with ResultStore(tmp_path / "r.sqlite") as store:
        result = run_bench(devs, config, store, "test")
        recs = store.records(result.run_id)
    return {f"{r['device']}/{r['route']}": r for r in recs}


@pytest.mark.parametrize("model", [
    "corpus:distilbert-opset14-dynamic@small",
    "corpus:distilbert-opset11-fixed+ortopt@small",
    "corpus:bert-opset14-fixed@small",  # custom: pooler Row -> FC (M = batch) -> Tanh
    "corpus:bert-opset14-dynamic+ortopt@small",
    "corpus:albert-opset14-fixed@small",  # custom: gelu_new fused into the FFN's FC
    "corpus:distilbert-opset14-fixed+q4@small",  # TVM: MatMulNBits dequantised
    "corpus:distilbert-opset18-dynamic@small",  # the dynamo pattern
])
def test_corpus_through_all_routes_on_local(tmp_path: Path, model: str) -> None:
    recs = bench(tmp_path, model, seq=24 if "dynamic" in model else None)
    ort, tvm, custom = (recs[f"local/{r}"] for r in ROUTES)
    quantised = "+q4" in model
    for r in (ort, tvm):
        assert r["status"] == "ok", r["status_detail"]
        assert r["accuracy"]["ok"]
        assert r["variant"] == ("int4" if quantised else "fp32")
        assert quantised or r["accuracy"]["max_abs_diff"] < 1e-3
    seq = 24 if "dynamic" in model else 16
    assert all(d == [1, seq] for d in tvm["build_flags"]["input_shapes"].values())
    assert "symbolic_dims" not in tvm["build_flags"]
    assert custom["status"] == "ok", custom["status_detail"]
    assert quantised or custom["accuracy"]["max_abs_diff"] < 1e-3


def test_roberta_position_ids_through_all_routes_on_local(tmp_path: Path) -> None:
    """custom computes RoBERTa's position ids from the ids' padding (lower_roberta.py); TVM
    runs the CumSum as its CPU scan kernel, a kernel without compute blocks that the weight
    repacking pass must leave alone (api._prepack_weights)."""
    recs = bench(tmp_path, "corpus:roberta-opset14-dynamic@small", seq=24)
    for r in recs.values():
        assert r["status"] == "ok", r["status_detail"]
    for route in ("tvm", "custom"):
        assert recs[f"local/{route}"]["accuracy"]["max_abs_diff"] < 1e-3


def test_pre_quantised_file_verdicts_do_not_depend_on_route_order(tmp_path: Path) -> None:
    model = "corpus:distilbert-opset14-dynamic+qdynamic@small"
    verdicts = []
    for i, routes in enumerate((ROUTES, tuple(reversed(ROUTES)))):
        recs = bench(tmp_path / str(i), model, routes)
        verdicts.append({k.split("/")[1]: (r["status"], r["variant"]) for k, r in recs.items()})
        for r in recs.values():
            assert r["variant"] == "int8-dynamic"  # detected, not taken as fp32
            assert "per-token cosine" in r["accuracy"]["rule"], r["accuracy"]
            assert "same int8-dynamic file" in r["accuracy"]["reference"]
    assert verdicts[0] == verdicts[1]
    assert {s for s, _ in verdicts[0].values()} == {"ok"}, verdicts


def test_quantize_dynamic_defaults_through_all_routes(tmp_path: Path) -> None:
    """quantize_dynamic as a user calls it, op types unset: the embedding tables come out int8
    too (`DequantizeLinear(Gather(table_q, ids))`), which custom refused until the front-end
    dequantized the tables (rewrite.dequantize_gathered_tables)."""
    from onnxruntime.quantization import QuantType, quantize_dynamic

    from farm.models.corpus import corpus_model
    from farm.models.frontend import canonicalize, make_spec

    src = corpus_model("bert-opset14-fixed@small", tmp_path / "corpus")
    path = tmp_path / "bert-qdynamic-defaults.onnx"
    quantize_dynamic(src, path, weight_type=QuantType.QInt8)
    tables = [n for n in onnx.load(str(path)).graph.node if n.op_type == "DequantizeLinear"]
    assert len(tables) == 3, [n.name for n in tables]  # word, position, token type
    canon = canonicalize(path, make_spec([], None, None), tmp_path / "canon")
    assert canon.rewrites.get("dequantize:Gather") == 3, canon.rewrites
    recs = bench(tmp_path, str(path))
    for r in recs.values():
        assert r["status"] == "ok", (r["route"], r["status_detail"])
        assert r["variant"] == "int8-dynamic" and r["accuracy"]["ok"], r["accuracy"]


def farm_cli(*args: str, env_home: Path) -> subprocess.CompletedProcess[str]:
    # this tree's farm first; the rest of the path as the suite set it (conftest.py)
    env = {**os.environ, "FARM_HOME": str(env_home),
           "PYTHONPATH": os.pathsep.join(
               p for p in (str(REPO), os.environ.get("PYTHONPATH")) if p)}
    return subprocess.run([sys.executable, "-m", "farm.cli.main", *args], env=env,
                          capture_output=True, text=True, timeout=600)


# a covering subset of corpus.names("@small") (every family, opset, axes and tool at least
# once, each tool on fixed and dynamic axes); benchmarks/check_corpus.py checks all 168 names
CHECKED = ["bert-opset11-dynamic", "bert-opset14-fixed+qdynamic", "bert-opset17-dynamic+q4",
           "bert-opset18-fixed+qdq", "distilbert-opset11-fixed+ortopt",
           "distilbert-opset14-dynamic+qdq", "distilbert-opset17-fixed+q4",
           "distilbert-opset18-dynamic+qdynamic", "roberta-opset11-fixed+qdq",
           "roberta-opset14-dynamic+ortopt", "roberta-opset18-fixed", "albert-opset11-fixed+q4",
           "albert-opset17-dynamic", "albert-opset18-dynamic+ortopt",
           "mobilebert-opset17-fixed+qdq", "mobilebert-opset14-fixed+q4"]


@pytest.mark.parametrize("name", CHECKED)
def test_models_check_verdict_per_corpus_file(name: str, tmp_path: Path) -> None:
    """Every route takes every corpus file (benchmarks/check_corpus.py lists none that
    may stop); the in-process check `farm models check` prints."""
    from farm.models.corpus import corpus_model, names
    from farm.routes import ROUTES
    from farm.routes.check import check_file

    assert f"{name}@small" in names("@small")  # a file the corpus generates
    routes = check_file(corpus_model(f"{name}@small", tmp_path / "c"), ROUTES)["routes"]
    assert {r: v["ok"] for r, v in routes.items()} == dict.fromkeys(ROUTES, True), routes


def test_models_check_names_the_stopping_node(tmp_path: Path, farm_home: Path) -> None:
    from farm.models.corpus import corpus_model

    src = corpus_model("bert-opset14-dynamic+ortopt@small", tmp_path / "c")
    done = farm_cli("models", "check", str(src), "--seq", "20", "--output", "json",
                    env_home=farm_home)
    report = json.loads(done.stdout)  # stdout is only JSON, whatever TVM's importer printed
    assert done.returncode == 0, done.stderr
    assert report["bound_shapes"]["input_ids"] == [1, 20]
    # custom takes BERT's pooler now (Row -> FC -> Tanh); the Frobnicate file below still stops
    assert all(report["routes"][r]["ok"] for r in ROUTES), report["routes"]
    assert report["macs"] > 0 and report["params"] > 0
    assert report["front_end"]["expand:Attention"] == 2
    # an op no route takes: every route says where it stops; its output declares no shape
    node = helper.make_node("Frobnicate", ["input_ids"], ["y"], name="frob", domain="my.ops")
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info(
        "input_ids", TensorProto.INT64, [1, 4])], [helper.make_tensor_value_info(
            "y", TensorProto.FLOAT, None)])
    bad = tmp_path / "bad.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17),
                                                      helper.make_opsetid("my.ops", 1)]),
              str(bad))
    done = farm_cli("models", "check", str(bad), "--output", "json", env_home=farm_home)
    report = json.loads(done.stdout)
    assert done.returncode == 1
    assert report["inputs"][0]["shape"] == [1, 4]
    assert report["outputs"][0]["shape"] is None  # unknown, not a scalar's []
    table = farm_cli("models", "check", str(bad), env_home=farm_home).stdout
    assert "unknown" in table and "frob" in table
    assert not any(v["ok"] for v in report["routes"].values())
    assert "Frobnicate" in report["routes"]["ort"]["reason"]
    for route in ("tvm", "custom"):
        assert report["routes"][route]["node"] == "frob", report["routes"][route]
        assert report["routes"][route]["op"] == "Frobnicate"


@pytest.mark.lab
@pytest.mark.aarch64
def test_two_corpus_files_on_the_emulated_pixel7(lab: Any, tmp_path: Path) -> None:
    if "pixel7" not in lab.devices:
        pytest.skip("the lab has no emulated aarch64 device here")
    pixel7 = [load_inventory(str(lab.inventory_path)).get("pixel7")]
    for model in ("corpus:distilbert-opset14-dynamic@small",
                  "corpus:distilbert-opset14-fixed+qdynamic@small"):
        recs = bench(tmp_path / model.split(":")[1], model, devices=pixel7,
                     seq=16 if "dynamic" in model else None)
        for route in ROUTES:
            r = recs[f"pixel7/{route}"]
            assert r["status"] == "ok", (model, route, r["status_detail"])
            assert r["arch"] == "aarch64"


def test_bench_json_output_stays_json_through_tvm_import(tmp_path: Path, farm_home: Path) -> None:
    """TVM's ONNX importer prints IR to fd 1; `--output json` must still be only JSON."""
    done = farm_cli("bench", "--model", "corpus:bert-opset11-dynamic+ortopt@small", "--seq", "8",
                    "--routes", "ort,tvm", "--runs", "3", "--min-time", "0", "--warmup", "0",
                    "--warmup-time", "0", "--profile-runs", "0", "--pause", "0",
                    "--store", str(tmp_path / "r.sqlite"), "--output", "json",
                    env_home=farm_home)
    assert done.returncode == 0, done.stderr[-2000:]
    records = json.loads(done.stdout)["records"]
    assert {r["route"]: r["status"] for r in records} == {"ort": "ok", "tvm": "ok"}
    tvm = next(r for r in records if r["route"] == "tvm")
    assert tvm["build_flags"]["input_shapes"]["input_ids"] == [1, 8]


def test_pre_quantised_file_against_a_given_fp32_reference(tmp_path: Path) -> None:
    from farm.models.corpus import corpus_model

    fp32 = corpus_model("distilbert-opset14-fixed@small", tmp_path / "c")
    recs = bench(tmp_path, "corpus:distilbert-opset14-fixed+qdynamic@small", ("ort", "custom"),
                 reference=str(fp32))
    for r in recs.values():
        assert r["status"] == "ok", r["status_detail"]
        assert r["variant"] == "int8-dynamic"
        assert r["accuracy"]["rule"] == "quantized-vs-fp32"
        assert fp32.name in r["accuracy"]["reference"] and r["accuracy"]["cosine"] > 0.99
