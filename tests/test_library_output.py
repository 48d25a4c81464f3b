"""Library output stays off the terminal (issue 29): what TVM, the front-end (onnx, onnx_ir,
under onnxscript) and numpy print during a step goes to a log under `.farm/logs/`, named in one
line; farm's own lines keep stdout and stderr, also when another thread writes them while a
step captures.

Each case runs farm in a child process (file descriptors 1 and 2 are the child's own, as in
a terminal), with a real front-end run and a real TVM build whose chatter reaches stderr
without the capture (the control case shows it does)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

REPO = Path(__file__).resolve().parent.parent
FAST = ["--runs", "3", "--min-time", "0", "--warmup", "0", "--warmup-time", "0",
        "--profile-runs", "0", "--pause", "0", "--rounds", "1"]
CHATTER = "divide by zero encountered"


def _env(home: Path) -> dict[str, str]:
    # a build cache of its own: the step must really run (not find the suite's build)
    env = {**os.environ, "FARM_HOME": str(home), "FARM_LOCAL_WORKDIR": str(home / "wd"),
           "FARM_BUILD_CACHE": str(home / "cache"),
           "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])}
    env.pop("FARM_INVENTORY", None)
    env.pop("COLUMNS", None)
    return env


def _farm(home: Path, *argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "farm.cli.main", *argv], cwd=home,
                          env=_env(home), capture_output=True, text=True, timeout=600)


def _div_by_zero_model(path: Path) -> Path:
    """min(x, 1 / 0): valid ONNX (ORT runs it), and the front-end's constant folding (onnx's
    reference evaluator, under onnxscript's optimizer) makes numpy warn 'divide by zero' on
    stderr. (The If whose branches read an outer value, which made onnx_ir log 'cannot be
    found in any scope' 66 times per DeBERTa bench, no longer prints: the front-end orders
    If nodes after the values their branches read, tests/test_frontend.py.)"""
    def const(name: str, value: float) -> onnx.NodeProto:
        return helper.make_node("Constant", [], [name], value=numpy_helper.from_array(
            np.full((1, 4), value, dtype=np.float32)))

    graph = helper.make_graph(
        [const("one", 1.0), const("zero", 0.0), helper.make_node("Div", ["one", "zero"], ["inf"]),
         helper.make_node("Min", ["x", "inf"], ["y"])], "div_by_zero",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save(model, str(path))
    return path


def _pow_model(path: Path) -> Path:
    """x ** 3 after a MatMul: TVM's compiler warns `Detected pow(x, y) where y >= 3` (GPT-2's
    tanh GELU printed it 25 times per build)."""
    weight = numpy_helper.from_array(
        np.random.default_rng(3).standard_normal((8, 8)).astype(np.float32), "W")
    three = numpy_helper.from_array(np.array(3.0, dtype=np.float32), "three")
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "W"], ["h"]),
         helper.make_node("Pow", ["h", "three"], ["y"])], "pow",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4, 8])], [weight, three])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save(model, str(path))
    return path


def _logs(home: Path) -> list[Path]:
    return sorted((home / "logs").glob("*.log"))


def _outside_summary(text: str) -> str:
    """Output without the one line that names the log (it quotes the commonest message)."""
    return "\n".join(line for line in text.splitlines() if "library output" not in line)


def test_front_end_chatter_goes_to_a_log_named_in_one_line(tmp_path: Path) -> None:
    model = _div_by_zero_model(tmp_path / "div.onnx")
    # control: the same front-end run without farm's CLI prints onnx_ir's lines on stderr
    control = subprocess.run(
        [sys.executable, "-c", "import sys; from farm.models.frontend import canonicalize, "
         "make_spec; canonicalize(sys.argv[1], make_spec((), None, None))", str(model)],
        cwd=tmp_path, env=_env(tmp_path / "control"), capture_output=True, text=True,
        timeout=300)
    assert control.returncode == 0, control.stderr[-2000:]
    assert CHATTER in control.stderr

    home = tmp_path / "home"
    home.mkdir()
    done = _farm(home, "bench", "--model", str(model), "--routes", "ort", *FAST)
    assert done.returncode == 0, done.stderr[-3000:]
    assert CHATTER not in done.stderr and CHATTER not in _outside_summary(done.stdout)
    named = [line for line in done.stdout.splitlines() if "library output" in line]
    assert len(named) == 1 and named[0].startswith("farm: model build: ")
    (log,) = _logs(home)
    assert str(log.relative_to(home)) in named[0]
    assert CHATTER in log.read_text()


@pytest.mark.tvm
def test_tvm_build_chatter_goes_to_a_log_and_farm_keeps_stderr(tmp_path: Path) -> None:
    model = _pow_model(tmp_path / "pow.onnx")
    home = tmp_path / "home"
    home.mkdir()
    done = _farm(home, "bench", "--model", str(model), "--routes", "tvm", *FAST)
    assert done.returncode == 0, done.stderr[-3000:]
    for chatter in ("Detected pow", "Warning:", "/project/"):
        assert chatter not in done.stderr and chatter not in _outside_summary(done.stdout)
    # farm's own lines are still there: the summary on stderr, the steps on stdout
    assert "farm: run " in done.stderr and "local: tvm ok" in done.stdout
    named = [line for line in done.stdout.splitlines() if "library output" in line]
    assert len(named) == 1 and named[0].startswith("local: build: ")
    assert "Detected pow(x, y)" in named[0]
    (log,) = _logs(home)
    assert "Detected pow(x, y) where y >= 3" in log.read_text()


ROUTER_CHILD = r"""
import os, sys, threading, time, warnings
from farm import libout
libout.install()
stop = threading.Event()

def farm_lines():  # another thread: the UI loop printing farm's own lines meanwhile
    while not stop.is_set():
        print("farm: own line", file=sys.stderr, flush=True)
        time.sleep(0.01)

ui = threading.Thread(target=farm_lines)
ui.start()
with libout.capture("build", where="local") as cap:
    os.write(2, b"[12:00:00] /project/src/op.cc:1: Warning: native chatter\n")
    os.write(1, b"native stdout chatter\n")
    print("python chatter", file=sys.stderr)
    warnings.warn("numpy-like overflow", RuntimeWarning)
    time.sleep(0.1)
stop.set()
ui.join()
print("SUMMARY", cap.summary(), file=sys.stderr)
libout.uninstall()
print("after: back on stderr", file=sys.stderr)
"""


def test_capture_keeps_other_threads_on_the_terminal(tmp_path: Path) -> None:
    done = subprocess.run([sys.executable, "-c", ROUTER_CHILD], cwd=tmp_path,
                          env=_env(tmp_path), capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    for chatter in ("native stdout chatter", "python chatter", "overflow"):
        assert chatter not in done.stderr and chatter not in done.stdout
    assert "native chatter" not in _outside_summary(done.stderr)
    assert done.stderr.count("farm: own line") >= 5
    assert "SUMMARY build: " in done.stderr and " lines of library output" in done.stderr
    assert "after: back on stderr" in done.stderr
    (log,) = _logs(tmp_path)
    text = log.read_text()
    assert "build-local" in log.name
    for chatter in ("native chatter", "native stdout chatter", "python chatter", "overflow"):
        assert chatter in text
    assert "own line" not in text
