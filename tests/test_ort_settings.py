"""ORT at its best, and saying so: the runner records the session options it read back from
the timed session, the config entries it carries (the faster intra-op setting by default, a
request's own entries instead), and the options the model's quantizer ran with (from the
file's metadata). Real ORT sessions through the real runner."""

from __future__ import annotations

import json
from pathlib import Path

import onnx
import pytest
from test_ort_runner import by_kind, run_runner

from farm.models import ModelInfo, build_model, write_inputs
from farm.models.quantize import INT4_OPTIONS, QUANTIZER_METADATA


@pytest.fixture(scope="module")
def tiny_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("ort-settings")


def _info(events: list[dict]) -> dict:
    return by_kind(events)["info"][0]


def test_session_options_read_back_and_default_config(tmp_path: Path, tiny_dir: Path) -> None:
    model = build_model("tiny", "fp32", tiny_dir)
    rc, events, stderr = run_runner(tmp_path, model.path, write_inputs(model, 0, tiny_dir),
                                    threads=2, options={"opt_level": "basic"})
    assert rc == 0, stderr
    info = _info(events)
    options = info["session_options"]
    assert options["intra_op_num_threads"] == 2 and options["inter_op_num_threads"] == 1
    assert "BASIC" in options["graph_optimization_level"]
    assert "SEQUENTIAL" in options["execution_mode"]
    assert info["session_config"] == {"session.intra_op.allow_spinning": "1"}
    assert info["quantizer"] is None  # an fp32 file names no quantizer


def test_request_config_replaces_the_default(tmp_path: Path, tiny_dir: Path) -> None:
    model = build_model("tiny", "fp32", tiny_dir)
    inputs = write_inputs(model, 0, tiny_dir)
    rc, events, stderr = run_runner(tmp_path, model.path, inputs,
                                    options={"session_config": {}})
    assert rc == 0, stderr
    assert _info(events)["session_config"] == {}
    rc, events, _ = run_runner(tmp_path, model.path, inputs,
                               options={"session_config": {"session.dynamic_block_base": "4"}})
    assert rc == 0 and _info(events)["session_config"] == {"session.dynamic_block_base": "4"}
    rc, events, _ = run_runner(tmp_path, model.path, inputs, options={"session_config": "x"})
    assert rc == 1 and "session_config" in by_kind(events)["error"][0]["message"]


@pytest.mark.parametrize(("variant", "tool"), [("int4", "MatMulNBitsQuantizer"),
                                               ("int8-dynamic", "quantize_dynamic"),
                                               ("int8-qdq", "quantize_static")])
def test_quantizer_options_travel_in_the_file_onto_the_record(
        tmp_path: Path, tiny_dir: Path, variant: str, tool: str) -> None:
    model: ModelInfo = build_model("tiny", variant, tiny_dir)
    meta = {p.key: p.value for p in onnx.load(str(model.path)).metadata_props}
    written = json.loads(meta[QUANTIZER_METADATA])
    assert written["tool"] == tool and written["onnxruntime"]
    rc, events, stderr = run_runner(tmp_path, model.path, write_inputs(model, 0, tiny_dir))
    assert rc == 0, stderr
    assert _info(events)["quantizer"] == written
    if variant == "int4":
        assert written["options"] == INT4_OPTIONS
        nodes = [n for n in onnx.load(str(model.path)).graph.node if n.op_type == "MatMulNBits"]
        # the file is what it says (an absent accuracy_level is ORT's default, 0)
        levels = {next((a.i for a in n.attribute if a.name == "accuracy_level"), 0)
                  for n in nodes}
        assert nodes and levels == {INT4_OPTIONS["accuracy_level"]}
