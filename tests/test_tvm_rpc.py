"""A real TVM RPC tracker and server on loopback: status, a session that uploads the tiny
encoder's library and times it with time_evaluator, two sessions queueing on one server, and
a stop that leaves no process of the group behind."""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest

from farm.errors import UsageError
from farm.inventory.builtin import local_device
from farm.models.config import PRESETS
from farm.models.encoder import build_encoder
from farm.models.inputs import make_inputs
from farm.rpc import (
    start_rpc_server,
    start_tracker,
    stop_tracker,
    tracker_session,
    tracker_state,
    tracker_status,
)
from farm.rpc.procs import free_port, group_alive

pytestmark = [pytest.mark.tvm, pytest.mark.slow]


@pytest.fixture(scope="module")
def tracker(farm_home: Path):
    port = free_port()
    state = start_tracker(port=port)
    server = start_rpc_server("loop", tracker_port=port,
                              env={**os.environ, "TVM_NUM_THREADS": "1"})
    yield state, server
    stop_tracker()
    assert not group_alive(state.pgid) and not group_alive(server.pgid)


@pytest.fixture(scope="module")
def tiny_lib(farm_home: Path):
    from farm.routes.tvm.builder import build_tvm

    model = farm_home / "tiny.onnx"
    onnx.save(build_encoder(PRESETS["tiny"]), str(model))
    feeds = make_inputs(model)
    expected = ort.InferenceSession(str(model), providers=["CPUExecutionProvider"]).run(
        None, feeds)[0]
    return build_tvm(model, local_device()).path, list(feeds.values()), expected


def test_tracker_refuses_a_public_bind() -> None:
    with pytest.raises(UsageError, match="authentication"):
        start_tracker(host="0.0.0.0", port=free_port())


def test_status_lists_the_server_and_its_free_slot(tracker) -> None:
    state, server = tracker
    entry = {"key": "loop", "addr": f"127.0.0.1:{server.port}"}
    free_slot = {"free": 1, "pending": 0}
    # a TVM server registers in two messages (its info, then its free slot: `put`), and
    # re-registers after each of its connections ends; on a loaded machine status can fall
    # between them (CI once saw the server listed with no queue entry yet), so wait for both
    deadline = time.monotonic() + 15
    status = tracker_status()
    while ((entry not in status["servers"] or status["queue"].get("loop") != free_slot)
           and time.monotonic() < deadline):
        time.sleep(0.5)
        status = tracker_status()
    assert status["port"] == state.port and status["started_pid"] == state.pid
    assert status["pid"] != state.pid  # TVM's popen_worker child holds the port
    assert entry in status["servers"]
    assert status["queue"].get("loop") == free_slot, status["queue"]
    assert tracker_state() == state
    assert start_tracker(port=state.port) == state  # idempotent


def test_session_runs_and_times_on_the_device(tracker, tiny_lib) -> None:
    lib, inputs, expected = tiny_lib
    with tracker_session("loop", port=tracker[0].port) as session:
        run = session.run_vm(lib, inputs, number=3, repeat=2)
    assert len(run.times_ms) == 2 and all(t > 0 for t in run.times_ms)
    np.testing.assert_allclose(run.outputs[0], expected, atol=1e-4, rtol=1e-3)
    assert run.phases["upload_s"] >= 0 and run.phases["load_s"] >= 0


def test_two_sessions_on_one_key_queue_instead_of_colliding(tracker, tiny_lib) -> None:
    lib, inputs, _ = tiny_lib
    port = tracker[0].port
    spans: dict[str, tuple[float, float]] = {}
    pending_seen: list[int] = []

    granted = threading.Event()

    def user(name: str, hold_s: float) -> None:
        with tracker_session("loop", port=port) as session:
            start = time.monotonic()
            granted.set()
            session.run_vm(lib, inputs, number=1, repeat=1)
            time.sleep(hold_s)
            spans[name] = (start, time.monotonic())

    first = threading.Thread(target=user, args=("first", 2.0))
    first.start()
    # the first user holds the server before the second asks (the tracker's free count can
    # read 0 while a server re-registers, so wait for the grant itself)
    assert granted.wait(30)
    second = threading.Thread(target=user, args=("second", 0.0))
    second.start()
    time.sleep(0.8)
    pending_seen.append(tracker_status()["queue"]["loop"]["pending"])
    first.join(60)
    second.join(60)
    assert set(spans) == {"first", "second"}
    assert spans["second"][0] >= spans["first"][1] - 0.05  # waited for the first to finish
    assert pending_seen == [1]


def _group_members(pgid: int) -> list[int]:
    members = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if os.getpgid(int(entry.name)) == pgid:
                    members.append(int(entry.name))
            except ProcessLookupError:
                continue
    return members


def test_stop_kills_the_whole_group_including_popen_workers(tmp_path: Path,
                                                            monkeypatch: pytest.MonkeyPatch
                                                            ) -> None:
    monkeypatch.setenv("FARM_HOME", str(tmp_path))
    state = start_tracker(port=free_port())
    # TVM's tracker forks a popen_worker child: the group has more than the parent
    deadline = time.monotonic() + 10
    while len(_group_members(state.pgid)) < 2 and time.monotonic() < deadline:
        time.sleep(0.1)
    assert len(_group_members(state.pgid)) >= 2
    assert stop_tracker() is True
    assert _group_members(state.pgid) == []
    assert tracker_state() is None and stop_tracker() is False


def test_a_dead_tracker_is_a_transport_error_within_seconds() -> None:
    from farm.errors import TransportError
    from farm.routes.tvm import api_rpc as api

    port = free_port()  # nothing listens there
    started = time.monotonic()
    with pytest.raises(TransportError, match=f"127.0.0.1:{port}"):
        api.rpc_request("127.0.0.1", port, "nobody")
    with pytest.raises(TransportError, match=f"127.0.0.1:{port}"):
        api.tracker_summary("127.0.0.1", port)
    assert time.monotonic() - started < 10


def test_two_runs_in_one_session(tracker, tiny_lib) -> None:
    lib, inputs, expected = tiny_lib
    with tracker_session("loop", port=tracker[0].port) as session:
        for _ in range(2):  # the second upload must not replace the loaded library
            run = session.run_vm(lib, inputs, number=1, repeat=2)
            np.testing.assert_allclose(run.outputs[0], expected, atol=1e-4, rtol=1e-3)


def test_a_started_server_stays_listed(tracker, monkeypatch: pytest.MonkeyPatch) -> None:
    """Readiness must not be probed by a bare TCP connect: a TVM server treats a connection
    without RPC magic as a broken link, drops its tracker registration and re-registers, so a
    `status` right after `serve` could list nothing (a CI failure of session 1). The module's
    tracker serves (a tracker start of its own costs two TVM imports)."""
    import farm.rpc.procs as procs

    state, _ = tracker
    probed: list[int] = []
    real_port_open = procs.port_open

    def spying_port_open(host: str, port: int) -> bool:
        probed.append(port)
        return real_port_open(host, port)

    monkeypatch.setattr(procs, "port_open", spying_port_open)
    server = start_rpc_server("steady", tracker_port=state.port)
    try:
        assert server.port not in probed  # the window is milliseconds: sampling alone misses it
        listed = []
        deadline = time.monotonic() + 4  # two of the server's 2 s tracker ping periods
        while time.monotonic() < deadline:
            listed.append(any(s["key"] == "steady" and s["addr"].endswith(f":{server.port}")
                              for s in tracker_status()["servers"]))
            time.sleep(0.05)
        assert all(listed), f"unlisted in {listed.count(False)} of {len(listed)} samples"
    finally:
        server.stop()
