"""The TVM RPC tracker killed (SIGKILL, its whole process group) while a session is open.

A session already granted talks to its RPC server directly, so it goes on working; a new
session request fails within seconds (TVM alone retries for 60 s) with a TransportError
naming the tracker address and `farm tracker start`; `farm tracker status` says no tracker
runs (exit 1) and `farm tracker stop` still stops the orphaned RPC server, so no TVM
process is left behind.
"""

from __future__ import annotations

import contextlib
import os
import signal
import time
from pathlib import Path

import pytest

from farm.cli.main import main as farm_main
from farm.errors import TransportError
from farm.rpc import start_rpc_server, start_tracker, stop_tracker, tracker_session
from farm.rpc.procs import free_port, group_alive
from farm.rpc.tracker import tracker_state, tracker_status

pytestmark = [pytest.mark.tvm, pytest.mark.slow]


def _wait(predicate, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.1)


def _dead(pid: int, pgid: int) -> bool:
    # the tracker is our child: reap it, or its zombie keeps the group "alive"
    with contextlib.suppress(ChildProcessError):
        os.waitpid(pid, os.WNOHANG)
    return not group_alive(pgid)


def test_9_tracker_killed_during_a_session(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                           capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("FARM_HOME", str(tmp_path / "home"))
    port = free_port()
    tracker = start_tracker(port=port)
    server = start_rpc_server("fault", tracker_port=port,
                              env={**os.environ, "TVM_NUM_THREADS": "1"})
    try:
        _wait(lambda: any(s["key"] == "fault" for s in tracker_status()["servers"]), 30,
              "the RPC server to register")
        with tracker_session("fault", port=port) as session:
            os.killpg(tracker.pgid, signal.SIGKILL)
            _wait(lambda: _dead(tracker.pid, tracker.pgid), 10, "the tracker to die")
            blob = bytearray(os.urandom(4096))
            session.remote.upload(blob, "fault.bin")  # the granted session still works
            assert bytes(session.remote.download("fault.bin")) == bytes(blob)
        assert tracker_state() is None  # the dead tracker's record is dropped
        capsys.readouterr()
        assert farm_main(["tracker", "status"]) == 1
        assert "no tracker is running" in capsys.readouterr().err
        assert group_alive(server.pgid)  # the server outlived its tracker...
    finally:
        stop_tracker()
    _wait(lambda: _dead(server.pid, server.pgid), 10, "the orphaned RPC server to stop")


def test_9_session_request_to_a_dead_tracker_fails_fast() -> None:
    port = free_port()  # nothing listens there: a tracker that died
    started = time.monotonic()
    with pytest.raises(TransportError) as info, tracker_session("fault", port=port):
        pass
    assert time.monotonic() - started < 10  # TVM alone would retry for 60 s
    assert f"127.0.0.1:{port}" in str(info.value) and "farm tracker start" in str(info.value)
