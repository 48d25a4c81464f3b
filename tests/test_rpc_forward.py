"""A real tracker on the host and a TVM RPC server on lab1, joined only by SSH port forwards:
the tracker lists the server, a session runs the tiny encoder on lab1 and times it there,
the server listens on lab1's loopback only, and leaving the block leaves no server process
behind on lab1. The same through `farm deploy --rpc-server` stopped with Ctrl-C, and a
forwarder killed outright (its SSH connection drops) takes the device's server with it.

The tests share one tracker (`tracker`: starting one imports TVM twice, ~6 s here) and
tell their servers apart by key; the detached server's test stops a tracker of its own,
as `farm tracker stop` does."""

from __future__ import annotations

import os
import re
import select
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest

from farm.inventory import load_inventory
from farm.models.config import PRESETS
from farm.models.encoder import build_encoder
from farm.models.inputs import make_inputs
from farm.rpc import start_tracker, stop_tracker, tracker_session, tracker_status
from farm.rpc.forward_child import forwarded_rpc_server_process
from farm.rpc.procs import ServiceProcess, free_port

pytestmark = [pytest.mark.lab, pytest.mark.tvm, pytest.mark.slow]


@pytest.fixture(scope="module")
def tracker(farm_home: Path) -> Iterator[ServiceProcess]:
    """One tracker for the module; its state lives in the module's FARM_HOME (conftest)."""
    state = start_tracker(port=free_port())
    try:
        yield state
    finally:
        stop_tracker()


def _servers(key: str) -> list[dict[str, str]]:
    """The shared tracker's servers registered under `key`."""
    return [s for s in tracker_status()["servers"] if s["key"] == key]


def _rpc_processes(lab, name: str) -> list[str]:
    return [cmd for cmd in lab.processes(name).values()
            if "tvm.exec.rpc_server" in cmd or "popen_worker" in cmd]


def _listeners(lab, name: str, port: int) -> list[str]:
    out = lab.run_in(name, ["ss", "-Hltn"]).stdout
    return [line.split()[3] for line in out.splitlines()
            if re.search(rf":{port}$", line.split()[3])]


def test_forwarded_server_runs_a_session_on_lab1(lab, tmp_path: Path,
                                                 tracker: ServiceProcess) -> None:
    _netns_lab1(lab)
    from farm.routes.tvm.builder import build_tvm

    device = load_inventory(str(lab.inventory_path)).get("lab1")
    model = tmp_path / "tiny.onnx"
    onnx.save(build_encoder(PRESETS["tiny"]), str(model))
    feeds = make_inputs(model)
    expected = ort.InferenceSession(str(model), providers=["CPUExecutionProvider"]).run(
        None, feeds)[0]
    lib = build_tvm(model, device).path

    # the forwards run in a child: this process is a TVM client (see forward_child)
    with forwarded_rpc_server_process(device, "lab1-fwd", tracker_port=tracker.port,
                                      env={"TVM_NUM_THREADS": "1"}) as server:
        assert server.alive() and server.pgid > 0
        status = tracker_status()
        assert {"key": "lab1-fwd", "addr": f"127.0.0.1:{server.port}"} in status["servers"]
        assert status["queue"]["lab1-fwd"] == {"free": 1, "pending": 0}

        # on lab1: the server and the forward's end listen on loopback only
        assert _listeners(lab, "lab1", server.port) == [f"127.0.0.1:{server.port}"]
        assert _listeners(lab, "lab1", server.tracker_port) == \
            [f"127.0.0.1:{server.tracker_port}"]
        assert _rpc_processes(lab, "lab1")

        with tracker_session("lab1-fwd", port=tracker.port) as session:
            run = session.run_vm(lib, list(feeds.values()), number=2, repeat=2)
        assert len(run.times_ms) == 2 and all(t > 0 for t in run.times_ms)
        np.testing.assert_allclose(run.outputs[0], expected, atol=1e-4, rtol=1e-3)
    assert not server.alive()

    assert _wait_gone(lab, "lab1") == []
    assert _listeners(lab, "lab1", server.port) == []


def _wait_gone(lab, name: str, timeout_s: float = 15.0) -> list[str]:
    deadline = time.monotonic() + timeout_s
    while _rpc_processes(lab, name) and time.monotonic() < deadline:
        time.sleep(0.2)
    return _rpc_processes(lab, name)


def _netns_lab1(lab) -> None:
    lab.require("lab1")
    if lab.namespace("lab1") is None:
        pytest.skip("the forward needs a device with its own loopback (netns lab)")


def test_killed_forwarder_takes_the_device_server_with_it(lab,
                                                         tracker: ServiceProcess) -> None:
    _netns_lab1(lab)
    device = load_inventory(str(lab.inventory_path)).get("lab1")
    with forwarded_rpc_server_process(device, "lab1-kill",
                                      tracker_port=tracker.port) as server:
        assert _rpc_processes(lab, "lab1") and _servers("lab1-kill")
        os.kill(server.pid, signal.SIGKILL)  # no cleanup by the forwarder: the
        while server.alive():                # device-side watchdog must do it
            time.sleep(0.05)
        assert _wait_gone(lab, "lab1") == []
        deadline = time.monotonic() + 10
        while _servers("lab1-kill") and time.monotonic() < deadline:
            time.sleep(0.2)
        assert _servers("lab1-kill") == []


def test_deploy_rpc_server_cli_runs_until_ctrl_c(lab, tracker: ServiceProcess) -> None:
    _netns_lab1(lab)
    root = Path(__file__).resolve().parents[1]
    # this tree's farm first; the rest of the path as the suite set it (conftest.py)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(
        p for p in (str(root), os.environ.get("PYTHONPATH")) if p)}
    cli = subprocess.Popen([sys.executable, "-m", "farm.cli.main", "--inventory",
                            str(lab.inventory_path), "deploy", "--rpc-server", "--key",
                            "lab1-cli", "--device", "lab1"],
                           stderr=subprocess.PIPE, text=True, env=env, cwd=root)
    try:
        # ready = the CLI says so (the tracker can list the server a moment before the CLI
        # has finished setting up, and a Ctrl-C then is an interrupted start: exit 130)
        assert cli.stderr is not None
        said = ""
        deadline = time.monotonic() + 60
        while "Ctrl-C stops" not in " ".join(said.split()) and time.monotonic() < deadline:
            if select.select([cli.stderr], [], [], 1.0)[0]:
                chunk = os.read(cli.stderr.fileno(), 4096)  # unbuffered: select sees it all
                if not chunk:
                    break
                said += chunk.decode(errors="replace")
        assert "Ctrl-C stops" in " ".join(said.split()), said
        servers = _servers("lab1-cli")
        assert len(servers) == 1, said
        port = int(servers[0]["addr"].rsplit(":", 1)[1])
        assert _listeners(lab, "lab1", port) == [f"127.0.0.1:{port}"]
        cli.send_signal(signal.SIGINT)
        assert cli.wait(timeout=30) == 0
        assert _wait_gone(lab, "lab1") == []
    finally:
        if cli.poll() is None:
            cli.kill()
            cli.wait()


def test_a_device_python_without_tvm_is_a_clear_error(lab, tracker: ServiceProcess) -> None:
    import dataclasses

    from farm.errors import TransportError

    _netns_lab1(lab)
    device = dataclasses.replace(load_inventory(str(lab.inventory_path)).get("lab1"),
                                 python="/usr/bin/python3")
    with pytest.raises(TransportError, match=r"lab1.*exited.*No module named 'tvm'"), \
            forwarded_rpc_server_process(device, "lab1-none", tracker_port=tracker.port):
        pass
    assert _servers("lab1-none") == []


def test_detached_rpc_server_lives_until_tracker_stop(lab, tmp_path: Path,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    from farm.cli.main import main
    from farm.rpc.procs import ServiceProcess, group_alive
    from farm.rpc.tracker import tracker_dir

    _netns_lab1(lab)
    monkeypatch.setenv("FARM_HOME", str(tmp_path))
    start_tracker(port=free_port())
    try:
        assert main(["--inventory", str(lab.inventory_path), "deploy", "--rpc-server",
                     "--detach", "--key", "lab1-bg", "--device", "lab1"]) == 0
        (state_file,) = (tracker_dir() / "servers").glob("lab1-bg-forward-lab1.json")
        forwarder = ServiceProcess.load(state_file)
        assert forwarder is not None and group_alive(forwarder.pgid)
        # the CLI has returned: the server stays registered and listens on lab1's loopback
        time.sleep(2.5)  # past a TVM server's 2 s tracker ping period
        servers = tracker_status()["servers"]
        assert [s["key"] for s in servers] == ["lab1-bg"]
        port = int(servers[0]["addr"].rsplit(":", 1)[1])
        assert _listeners(lab, "lab1", port) == [f"127.0.0.1:{port}"]
        assert _rpc_processes(lab, "lab1")
    finally:
        stop_tracker()
    assert not group_alive(forwarder.pgid)
    assert _wait_gone(lab, "lab1") == []  # SIGTERM tore the device's server down too
    assert not state_file.exists()


def test_remote_tuning_measures_on_lab1_through_the_tracker(lab, tmp_path: Path,
                                                            monkeypatch: pytest.MonkeyPatch,
                                                            tracker: ServiceProcess) -> None:
    """`farm tune` for a tvm-rpc device: MetaSchedule's candidates are built here and measured
    on the device's RPC server (lab1, reached only through the SSH forwards)."""
    import json as json_mod

    from farm.routes.tvm.tune import tune_tvm

    _netns_lab1(lab)
    monkeypatch.setenv("FARM_HOME", str(tmp_path))  # its tuning database: the test's own
    model = tmp_path / "tiny.onnx"
    onnx.save(build_encoder(PRESETS["tiny"]), str(model))
    lab1 = load_inventory(str(lab.inventory_path)).get("lab1")
    inventory = tmp_path / "devices.yaml"
    inventory.write_text(f"""\
version: 1
devices:
  - name: lab1-rpc
    transport: tvm-rpc
    arch: {lab1.arch}
    features: [{", ".join(lab1.features)}]
    cores: 1
    key: lab1-tune
    tracker_host: 127.0.0.1
    tracker_port: {tracker.port}
""")
    device = load_inventory(str(inventory)).get("lab1-rpc")
    with forwarded_rpc_server_process(lab1, "lab1-tune", tracker_port=tracker.port):
        result = tune_tvm(model, device, trials=4, batch=4, ops=("matmul1",))
    assert result.measured == 4 and set(result.seeded) == set(result.tasks)
    records = [json_mod.loads(line) for line in
               (result.database / "database_tuning_record.json").read_text().splitlines()]
    # every stored record carries real run times from the device (errors are not stored)
    run_secs = [float(s) for r in records for s in r[1][1]]
    assert run_secs and all(0 < s < 1 for s in run_secs)
    assert _wait_gone(lab, "lab1") == []
