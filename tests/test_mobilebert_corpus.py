"""MobileBERT as a corpus model (`corpus:mobilebert-opset{14|17}-fixed[+tool][@small]`): the
file a user would export goes through the model front-end like any other file. Its canonical
form keeps what the custom lowering needs (trigram input, NoNorm, ReLU epilogue, shared Q/K)
and lowers to the same plan as the preset; on `local` ORT runs the file, TVM and custom build
the canonical one, and all three records are valid; `farm models check` agrees."""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import onnxruntime as ort
import pytest

from farm.errors import BuildError
from farm.models import PRESETS, build_model
from farm.models.corpus import corpus_model, names, parse
from farm.models.corpus.mobilebert import build_mobilebert
from farm.models.corpus.mobilebert_export import SMALL
from farm.models.frontend import canonicalize
from farm.models.inputs import make_inputs
from farm.routes.custom.compile import compile_plan

REPO = Path(__file__).resolve().parent.parent
ROUTES = ("ort", "tvm", "custom")
TOOLS = {"": ("fp32", "fp32"), "+qdynamic": ("int8-dynamic", "int8"),
         "+qdq": ("int8-qdq", "int8"), "+q4": ("int4", "q4_0")}  # variant, custom weight type


@pytest.fixture(autouse=True)
def farm_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("FARM_HOME", str(tmp_path / "home"))
    return tmp_path / "home"


def run(path: Path, feeds: dict[str, np.ndarray]) -> np.ndarray:
    opts = ort.SessionOptions()
    opts.log_severity_level = 3
    sess = ort.InferenceSession(str(path), opts, providers=["CPUExecutionProvider"])
    return sess.run(None, feeds)[0]


def test_names_parse_and_unreproduced_exports_are_refused() -> None:
    family, opset, dynamic, tools, config = parse("mobilebert-opset14-fixed+qdq@small")
    assert (family, opset, dynamic, tools, config) == ("mobilebert", 14, False, ["qdq"], SMALL)
    assert parse("mobilebert-opset17-fixed")[4] == PRESETS["mobilebert"]  # bench size
    for bad in ("mobilebert-opset14-dynamic", "mobilebert-opset11-fixed",
                "mobilebert-opset18-fixed@small", "mobilebert-opset17-fixed+ortopt@small"):
        with pytest.raises(BuildError, match="MobileBERT is reproduced at opset 14 or 17"):
            parse(bad)
    assert "mobilebert-opset14-fixed+q4@small" in names()


def test_opset14_file_is_the_generator_graph(tmp_path: Path) -> None:
    p14 = corpus_model("mobilebert-opset14-fixed@small", tmp_path)
    p17 = corpus_model("mobilebert-opset17-fixed@small", tmp_path)
    m14, m17 = onnx.load(str(p14)), onnx.load(str(p17))
    assert [o.version for o in m14.opset_import] == [14]
    assert m17.SerializeToString() == build_mobilebert(SMALL).SerializeToString()
    feeds = make_inputs(p14, 1)
    np.testing.assert_array_equal(run(p14, feeds), run(p17, feeds))


@pytest.mark.parametrize("tool", list(TOOLS))
def test_canonical_file_lowers_to_the_presets_plan(tool: str, tmp_path: Path) -> None:
    variant, wtype = TOOLS[tool]
    src = corpus_model(f"mobilebert-opset14-fixed{tool}@small", tmp_path / "c")
    canon = canonicalize(src, None, tmp_path / "canon")
    assert canon.quantisation == variant
    assert canon.input_shapes == {n: [1, SMALL.seq] for n in
                                  ("input_ids", "attention_mask", "token_type_ids")}
    assert canon.symbolic_left == []
    feeds = make_inputs(src, 3)
    np.testing.assert_allclose(run(canon.path, feeds), run(src, feeds),
                               atol=1e-4 if variant == "fp32" else 1e-3, rtol=1e-4)
    got = compile_plan(canon.path, tmp_path / "canon.plan")
    # the preset is the same generator without the front-end: the same plan must come out
    # (trigram op, NoNorm folded into GEMMs, ReLU epilogues, Q and K merged per layer)
    want = compile_plan(build_model(SMALL, variant, tmp_path / "m").path, tmp_path / "p.plan")
    assert got.op_counts == want.op_counts
    assert got.op_counts["Trigram"] == 1 and got.merged_qkv == SMALL.layers
    assert got.weight_types == {wtype: got.op_counts["FC"]}


def _bench(tmp_path: Path, model: str) -> dict[str, dict[str, Any]]:
    from farm.bench.config import BenchConfig, Policy
    from farm.bench.runner import run_bench
    from farm.inventory.builtin import local_device
    from farm.results.store import ResultStore

    policy = Policy(warmup_runs=1, warmup_min_s=0.0, min_runs=10, min_time_s=0.1,
                    max_time_s=2.0)
    dev = dataclasses.replace(local_device(), workdir=str(tmp_path / "wd"))
    config = BenchConfig(model=model, routes=ROUTES, policy=policy, pause_s=0.0,
                         profile_runs=1)
    with ResultStore(tmp_path / "r.sqlite") as store:
        result = run_bench([dev], config, store, "test")
        return {r["route"]: r for r in store.records(result.run_id)}


@pytest.mark.slow
@pytest.mark.tvm
@pytest.mark.parametrize("tool", ["", "+qdynamic"])
def test_three_valid_routes_on_local(tmp_path: Path, tool: str) -> None:
    recs = _bench(tmp_path, f"corpus:mobilebert-opset14-fixed{tool}@small")
    assert set(recs) == set(ROUTES)
    for route, r in recs.items():
        assert r["status"] == "ok", (route, r["status_detail"])
        assert r["accuracy"]["ok"], (route, r["accuracy"])
        assert r["variant"] == TOOLS[tool][0]
    if not tool:
        for route in ("tvm", "custom"):
            assert recs[route]["accuracy"]["max_abs_diff"] < 1e-3, recs[route]["accuracy"]
    assert recs["tvm"]["build_flags"]["input_shapes"]["input_ids"] == [1, SMALL.seq]
    assert "symbolic_dims" not in recs["tvm"]["build_flags"]


@pytest.mark.slow
@pytest.mark.tvm
def test_models_check_says_every_route_takes_it(tmp_path: Path, farm_home: Path) -> None:
    src = corpus_model("mobilebert-opset14-fixed@small", tmp_path / "c")
    # this tree's farm first; the rest of the path as the suite set it (conftest.py)
    env = {**os.environ, "FARM_HOME": str(farm_home),
           "PYTHONPATH": os.pathsep.join(
               p for p in (str(REPO), os.environ.get("PYTHONPATH")) if p)}
    done = subprocess.run([sys.executable, "-m", "farm.cli.main", "models", "check", str(src),
                           "--output", "json"], env=env, capture_output=True, text=True,
                          timeout=600)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    report = json.loads(done.stdout)
    assert {k: v["ok"] for k, v in report["routes"].items()} == dict.fromkeys(ROUTES, True)
    assert report["quantisation"] == "fp32"
    assert report["macs"] == SMALL.macs()  # the file's matmuls are the architecture's
