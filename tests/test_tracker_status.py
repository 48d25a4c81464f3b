"""`farm tracker status` names the process that serves the port (issue 33): TVM's tracker
listens in its `popen_worker` child, so after a kill -9 of the process farm started, status
named that dead pid with rc 0; and a recorded tracker none of whose processes listens any
more is an error, not a status."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from farm.cli.main import main as farm_main
from farm.errors import TransportError
from farm.rpc.procs import ServiceProcess, free_port
from farm.rpc.tracker import _state_path, start_tracker, stop_tracker, tracker_status


def _reap(pid: int) -> None:
    with contextlib.suppress(ChildProcessError):
        os.waitpid(pid, os.WNOHANG)


def _stat(pid: int) -> list[str]:
    """/proc/PID/stat after the command name: [state, ppid, pgid, ...] ([] when gone)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return []


def _running(pid: int) -> bool:
    stat = _stat(pid)
    return bool(stat) and stat[0] != "Z"


def _children(pid: int) -> list[int]:
    return [int(d.name) for d in Path("/proc").iterdir()
            if d.name.isdigit() and _stat(int(d.name))[1:2] == [str(pid)]]


def test_a_recorded_tracker_that_no_longer_listens_is_an_error(farm_home: Path, capsys) -> None:
    # a process group that is alive but listens on nothing: the tracker's state file names it
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"],
                            start_new_session=True)
    try:
        port = free_port()
        ServiceProcess("tvm rpc tracker", proc.pid, proc.pid, "127.0.0.1", port,
                       str(farm_home / "t.log")).save(_state_path())
        with pytest.raises(TransportError, match="no longer listens"):
            tracker_status()
        capsys.readouterr()
        assert farm_main(["tracker", "status"]) == 1
        err = capsys.readouterr().err
        assert "no longer listens" in err and "farm tracker stop" in err
    finally:
        proc.kill()
        proc.wait()
        _state_path().unlink(missing_ok=True)


@pytest.mark.tvm
@pytest.mark.slow
def test_status_names_the_serving_process_after_the_started_one_is_killed(
        farm_home: Path, capsys) -> None:
    state = start_tracker(port=free_port())
    try:
        (serving,) = _children(state.pid)  # TVM's popen_worker: it holds the port
        status = tracker_status()
        assert status["pid"] == serving, status
        assert status["started_pid"] == state.pid and status["started_alive"]
        os.kill(state.pid, signal.SIGKILL)
        deadline = time.monotonic() + 10
        while _running(state.pid) and time.monotonic() < deadline:
            _reap(state.pid)
            time.sleep(0.05)
        _reap(state.pid)
        capsys.readouterr()
        assert farm_main(["tracker", "status"]) == 0  # the worker still serves
        first = capsys.readouterr().out.splitlines()[0]
        assert first == (f"tracker 127.0.0.1:{state.port} (pid {serving}; pid {state.pid} "
                         "it was started as is gone)"), first
        os.kill(serving, signal.SIGKILL)  # now nothing serves
        deadline = time.monotonic() + 10
        while _running(serving) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert farm_main(["tracker", "status"]) == 1
        assert "tracker" in capsys.readouterr().err
    finally:
        stop_tracker()
