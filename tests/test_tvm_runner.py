"""The runtime-only TVM runner (agents/runners/tvm_runner.{py,cc}) in a deploy-like layout:
`runners/tvm_runner.py` + `runners/tvm-<arch>/{tvm_runner,libtvm_*.so}`. Runs the tiny
encoder natively and, cross-compiled, under qemu-aarch64; outputs are checked against ORT."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest

from farm.inventory.builtin import local_device
from farm.inventory.device import Device
from farm.models.config import PRESETS
from farm.models.encoder import build_encoder
from farm.models.inputs import ftns_module, make_inputs
from farm.paths import REPO_ROOT, agents_dir

pytestmark = [pytest.mark.tvm, pytest.mark.slow]
POLICY = {"warmup_runs": 2, "warmup_min_s": 0.0, "min_runs": 5, "min_time_s": 0.0,
          "max_time_s": 20.0}


@pytest.fixture(scope="module")
def tiny(farm_home: Path) -> tuple[Path, Path, np.ndarray]:
    """Model, its FTNS inputs, and ORT's output for them."""
    model = farm_home / "tiny.onnx"
    onnx.save(build_encoder(PRESETS["tiny"]), str(model))
    feeds = make_inputs(model, seed=0)
    inputs = farm_home / "inputs.ftns"
    ftns_module().write(str(inputs), feeds)
    sess = ort.InferenceSession(str(model), providers=["CPUExecutionProvider"])
    return model, inputs, sess.run(None, feeds)[0]


def deploy_like(bundle_dir: Path, lib: Path, meta: Path, arch: str, workdir: Path) -> Path:
    runners = workdir / "runners"
    shutil.copytree(bundle_dir, runners / f"tvm-{arch}")
    shutil.copy2(agents_dir() / "runners" / "tvm_runner.py", runners / "tvm_runner.py")
    (workdir / "artifacts").mkdir()
    shutil.copy2(lib, workdir / "artifacts" / "m.so")
    shutil.copy2(meta, workdir / "artifacts" / "m.so.json")
    return runners


def request(workdir: Path, inputs: Path, profile_runs: int = 2) -> Path:
    req = {"route": "tvm", "model": str(workdir / "artifacts" / "m.so"), "inputs": str(inputs),
           "outputs": str(workdir / "out.ftns"), "threads": 2, "options": {}, "policy": POLICY,
           "profile_runs": profile_runs}
    path = workdir / "request.json"
    path.write_text(json.dumps(req))
    return path


def check_events(lines: list[str], out: Path, expected: np.ndarray, atol: float) -> dict:
    events = [json.loads(line) for line in lines if line.strip()]
    kinds = [e["ev"] for e in events]
    assert kinds[-1] == "done", events[-1]
    assert kinds[:4] == ["loaded", "info", "first", "warmup"]
    assert {"samples", "outputs", "ops", "memory"} <= set(kinds)
    by = {e["ev"]: e for e in events}
    samples = [ms for e in events if e["ev"] == "samples" for ms in e["ms"]]
    assert len(samples) >= POLICY["min_runs"] and all(ms > 0 for ms in samples)
    got = ftns_module().read(str(out))
    (name, value), = got.items()
    assert name == "last_hidden_state"
    np.testing.assert_allclose(value, expected, atol=atol, rtol=1e-3)
    ops = by["ops"]
    assert set(ops["categories"]) == {"attention", "fc", "layernorm", "gelu", "other"}
    assert ops["categories"]["fc"] > 0 and ops["categories"]["attention"] > 0
    assert ops["categories"]["layernorm"] > 0
    assert abs(sum(ops["categories"].values()) - ops["total_ms"]) < 1e-6
    assert all(n["schedule"] != "?" for n in ops["nodes"])
    assert "libtvm_runtime" in by["info"]["runtime"]
    return by


def test_runner_local_matches_ort_and_reports_runtime_only_memory(tiny, tmp_path: Path) -> None:
    from farm.artifacts import for_target
    from farm.routes.tvm.builder import build_tvm
    from farm.routes.tvm.runner_build import build_runner

    model, inputs, expected = tiny
    art = build_tvm(model, local_device())
    bundle = build_runner()
    remotes = {a.remote for a in for_target(bundle.arch)}
    assert {f"runners/tvm-{bundle.arch}/{name}"
            for name in ("tvm_runner", "libtvm_runtime.so", "libtvm_ffi.so")} <= remotes
    runners = deploy_like(bundle.directory, art.path, art.meta_path, bundle.arch, tmp_path)
    req = request(tmp_path, inputs)
    proc = subprocess.run([sys.executable, str(runners / "tvm_runner.py"), "--request",
                           str(req)], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    by = check_events(proc.stdout.splitlines(), tmp_path / "out.ftns", expected, atol=1e-4)
    # the compiler library alone is ~250 MB; Python + import tvm peaks at ~220 MB
    assert 0 < by["memory"]["vmhwm_kb"] < 80_000, by["memory"]


def test_runner_reports_a_missing_binary_as_an_error_event(tmp_path: Path) -> None:
    shutil.copy2(agents_dir() / "runners" / "tvm_runner.py", tmp_path / "tvm_runner.py")
    proc = subprocess.run([sys.executable, str(tmp_path / "tvm_runner.py"), "--request", "x"],
                          capture_output=True, text=True, timeout=30)
    assert proc.returncode == 1
    event = json.loads(proc.stdout.strip())
    assert event["ev"] == "error" and "not deployed" in event["message"]


def test_runner_bad_request_is_an_error_event(tmp_path: Path) -> None:
    from farm.routes.tvm.runner_build import build_runner

    bundle = build_runner()
    bad = tmp_path / "req.json"
    bad.write_text(json.dumps({"model": str(tmp_path / "missing.so"), "inputs": "x",
                               "outputs": "y"}))
    proc = subprocess.run([str(bundle.binary), "--request", str(bad)], capture_output=True,
                          text=True, timeout=60)
    assert proc.returncode == 1
    event = json.loads(proc.stdout.strip().splitlines()[-1])
    assert event["ev"] == "error" and "missing.so" in event["message"]


def _aarch64_sysroot() -> Path | None:
    """The lab's sysroot (scripts/make_sysroot.sh), else the cross toolchain's libraries."""
    candidates = [os.environ.get("FARM_SYSROOT"), str(REPO_ROOT / ".farm" / "sysroot-aarch64"),
                  "/usr/aarch64-linux-gnu"]
    for candidate in filter(None, candidates):
        root = Path(candidate)
        if any((root / d / "libstdc++.so.6").exists()
               for d in ("lib", "usr/lib/aarch64-linux-gnu", "lib/aarch64-linux-gnu")):
            return root
    return None


@pytest.mark.aarch64
@pytest.mark.skipif(shutil.which("qemu-aarch64") is None, reason="needs qemu-user")
def test_runner_aarch64_under_qemu_matches_ort(tiny, tmp_path: Path) -> None:
    from farm.routes.tvm.builder import build_tvm
    from farm.routes.tvm.runner_build import build_runner

    sysroot = _aarch64_sysroot()
    if sysroot is None:
        pytest.skip("no aarch64 sysroot with libstdc++ (apt-get install g++-aarch64-linux-gnu)")
    model, inputs, expected = tiny
    device = Device(name="qemu", transport="ssh", arch="aarch64", triple="aarch64-linux-gnu",
                    features=("neon", "dotprod"), cores=2, host="127.0.0.1")
    art = build_tvm(model, device)
    bundle = build_runner("aarch64")
    runners = deploy_like(bundle.directory, art.path, art.meta_path, "aarch64", tmp_path)
    req = request(tmp_path, inputs, profile_runs=1)
    proc = subprocess.run(["qemu-aarch64", "-L", str(sysroot),
                           str(runners / "tvm-aarch64" / "tvm_runner"), "--request", str(req)],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    check_events(proc.stdout.splitlines(), tmp_path / "out.ftns", expected, atol=1e-4)
