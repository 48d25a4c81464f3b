"""`farm tracker start|serve|status|stop` and `farm tune` argument handling, through the real
CLI entry point (tracker on loopback)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from farm.cli.main import main
from farm.rpc.procs import free_port, group_alive
from farm.rpc.tracker import tracker_state


def test_tune_rejects_zero_trials_and_unknown_devices(tmp_path: Path,
                                                      monkeypatch: pytest.MonkeyPatch,
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("FARM_HOME", str(tmp_path))
    monkeypatch.delenv("FARM_INVENTORY", raising=False)
    monkeypatch.chdir(tmp_path)  # no ./devices.yaml: built-in `local` only
    assert main(["tune", "--device", "nope", "--model", "tiny", "--trials", "4"]) == 1
    assert "no device named 'nope'" in capsys.readouterr().err
    assert main(["tune", "--device", "local", "--model", "tiny", "--trials", "0"]) == 2
    assert "--trials" in capsys.readouterr().err


@pytest.mark.tvm
@pytest.mark.slow
def test_tracker_cli_lifecycle(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                               capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("FARM_HOME", str(tmp_path))
    port = free_port()
    try:
        assert main(["tracker", "start", "--port", str(port)]) == 0
        state = tracker_state()
        assert state is not None and state.port == port and state.host == "127.0.0.1"
        assert (tmp_path / "tracker" / "tracker.json").is_file()
        assert main(["tracker", "serve", "--key", "cli-key"]) == 0
        capsys.readouterr()
        assert main(["tracker", "status", "--output", "json"]) == 0
        status = json.loads(capsys.readouterr().out)
        assert [s["key"] for s in status["servers"]] == ["cli-key"]
        assert status["queue"]["cli-key"] == {"free": 1, "pending": 0}
        assert main(["tracker", "status"]) == 0
        assert "cli-key" in capsys.readouterr().out
        assert main(["tracker", "start", "--host", "0.0.0.0", "--port", str(port + 2)]) == 2
    finally:
        assert main(["tracker", "stop"]) == 0
    assert not group_alive(state.pgid)
    assert main(["tracker", "status"]) == 1  # nothing running: an error with a hint
    assert "farm tracker start" in capsys.readouterr().err
