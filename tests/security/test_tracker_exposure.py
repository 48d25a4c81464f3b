"""The TVM RPC tracker binds loopback only: it answers on 127.0.0.1 here, but from inside a
lab device's network namespace it cannot be reached, neither at the host's bridge address
nor at the namespace's own loopback. A control listener on 0.0.0.0 IS reachable from the
same namespace, so the check can tell the difference. A public bind is refused unless
explicitly allowed (TVM RPC has no authentication)."""

from __future__ import annotations

import socket
import sys
from pathlib import Path

import pytest

from farm.cli.main import main as farm_main
from farm.rpc.procs import free_port, port_open
from farm.rpc.tracker import stop_tracker, tracker_state

pytestmark = [pytest.mark.lab, pytest.mark.tvm, pytest.mark.slow]

PROBE = ("import socket, sys\n"
         "try:\n"
         "    socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=3).close()\n"
         "    print('open')\n"
         "except OSError as exc:\n"
         "    print('closed', exc)\n")


def reachable_from(lab, device: str, host: str, port: int) -> bool:
    out = lab.run_in(device, [sys.executable, "-c", PROBE, host, str(port)]).stdout
    assert out.startswith(("open", "closed")), out
    return out.startswith("open")


def bridge_address(lab) -> str:
    # the host side of the lab subnet: the device's address with .1 at the end
    return lab.device("lab1").address.rsplit(".", 1)[0] + ".1"


def test_tracker_is_not_reachable_from_a_device_namespace(
        lab, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    if lab.namespace("lab1") is None:
        pytest.skip("needs the network-namespace lab")
    monkeypatch.setenv("FARM_HOME", str(tmp_path / "home"))
    port = free_port()
    host_ip = bridge_address(lab)
    control = socket.create_server(("0.0.0.0", free_port()))
    try:
        assert reachable_from(lab, "lab1", host_ip, control.getsockname()[1])  # control
        assert farm_main(["tracker", "start", "--port", str(port)]) == 0
        state = tracker_state()
        assert state is not None and (state.host, state.port) == ("127.0.0.1", port)
        assert port_open("127.0.0.1", port)
        assert not port_open(host_ip, port)  # not even via the bridge from the host
        assert not reachable_from(lab, "lab1", host_ip, port)
        assert not reachable_from(lab, "lab1", "127.0.0.1", port)
    finally:
        control.close()
        stop_tracker()


def test_public_bind_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("FARM_HOME", str(tmp_path / "home"))
    assert farm_main(["tracker", "start", "--host", "0.0.0.0", "--port", str(free_port())]) == 2
    assert "no authentication" in capsys.readouterr().err
    assert tracker_state() is None
