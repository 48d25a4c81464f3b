"""Endpoints that are not a working sshd, on loopback (issue 33, item 4): a refused port
fails in about a second (one retry, not the whole 20 s budget), a port that speaks HTTP is
"answers but is not SSH", one that accepts and never speaks says so (not paramiko's "No
existing session"), one that closes without a word says that, and paramiko's own log
records (13 tracebacks per attempt) never reach the terminal."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

import farm.transports.ssh as ssh
from farm.errors import TransportError
from farm.inventory import load_inventory
from farm.transports.ssh import SSHTransport

REPO = Path(__file__).resolve().parents[1]
HTTP_REPLY = b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"


class Endpoint:
    """A loopback TCP server that does one thing with every connection; `port` is where."""

    def __init__(self, behaviour: str, port: int = 0, delay_s: float = 0.0) -> None:
        self.behaviour = behaviour
        self._sock = socket.socket()
        self._sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._sock.bind(("127.0.0.1", port))
        self.port = self._sock.getsockname()[1]
        self._held: list[socket.socket] = []
        self._stop = threading.Event()
        self._delay = delay_s
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        if self._delay and self._stop.wait(self._delay):
            return
        self._sock.listen(8)
        self._sock.settimeout(0.1)
        while not self._stop.is_set():
            try:
                conn, _ = self._sock.accept()
            except TimeoutError:
                continue
            if self.behaviour == "http":  # what an HTTP server says to an SSH client
                conn.settimeout(2)
                try:
                    conn.recv(256)
                    conn.sendall(HTTP_REPLY)
                except OSError:
                    pass
                conn.close()
            elif self.behaviour == "close":
                conn.close()
            else:  # "silent": accept, keep, never speak
                self._held.append(conn)

    def close(self) -> None:
        self._stop.set()
        self._thread.join(5)
        for conn in self._held:
            conn.close()
        self._sock.close()


@pytest.fixture
def endpoint() -> Iterator[Callable[..., Endpoint]]:
    made: list[Endpoint] = []

    def make(behaviour: str, port: int = 0, delay_s: float = 0.0) -> Endpoint:
        made.append(Endpoint(behaviour, port, delay_s))
        return made[-1]

    yield make
    for server in made:
        server.close()


def closed_port() -> int:
    """A loopback port nothing listens on (bound, never listened, closed)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def inventory(tmp_path: Path, ports: dict[str, int]) -> Path:
    (tmp_path / "known_hosts").write_text("")
    lines = ["version: 1", "defaults:", f"  known_hosts: {tmp_path / 'known_hosts'}",
             "devices:"]
    for name, port in ports.items():
        lines += [f"  - name: {name}", "    transport: ssh", "    host: 127.0.0.1",
                  f"    port: {port}", "    arch: x86_64", f"    workdir: /tmp/farm-{name}"]
    path = tmp_path / "devices.yaml"
    path.write_text("\n".join(lines) + "\n")
    return path


def connect_error(tmp_path: Path, port: int) -> tuple[str, float]:
    device = load_inventory(str(inventory(tmp_path, {"dev": port}))).get("dev")
    started = time.monotonic()
    with pytest.raises(TransportError) as info:
        SSHTransport(device).run(["true"])
    return str(info.value), time.monotonic() - started


def test_refused_port_fails_in_about_a_second_not_the_whole_budget(tmp_path) -> None:
    message, took = connect_error(tmp_path, closed_port())
    assert "connection refused" in message and "nothing listens on port" in message, message
    assert took < 5.0, f"a refused port took {took:.1f} s to fail"  # was 20 s of retries


def test_a_refusal_is_retried_once(tmp_path, endpoint) -> None:
    # refused at first, then something listens (a device whose sshd is coming up): the one
    # retry reaches it; what it finds there is named (here: not SSH)
    port = closed_port()
    endpoint("http", port=port, delay_s=0.4)
    message, took = connect_error(tmp_path, port)
    assert f"port {port} answers but is not SSH" in message, message
    assert took < 5.0


def test_http_port_is_named_not_ssh_in_one_line(tmp_path, endpoint) -> None:
    server = endpoint("http")
    message, took = connect_error(tmp_path, server.port)
    first = message.splitlines()[0]
    assert first.endswith(f"port {server.port} answers but is not SSH "
                          "(it said 'HTTP/1.1 400 Bad Request')"), message
    assert took < 5.0


def test_silent_port_is_named_not_no_existing_session(tmp_path, endpoint, monkeypatch) -> None:
    monkeypatch.setattr(ssh, "CONNECT_TIMEOUT_S", 1.5)
    server = endpoint("silent")
    message, took = connect_error(tmp_path, server.port)
    assert "No existing session" not in message
    assert f"port {server.port} accepted the connection but said nothing" in message, message
    assert took < 6.0  # not retried: waiting again would only double the wait


def test_port_closing_without_a_word_is_named(tmp_path, endpoint) -> None:
    server = endpoint("close")
    message, _ = connect_error(tmp_path, server.port)
    assert "closed it without a word" in message, message


def test_devices_check_prints_one_line_per_bad_endpoint_and_no_paramiko_log(
        tmp_path, endpoint) -> None:
    http = endpoint("http")
    inv = inventory(tmp_path, {"web": http.port, "nothing": closed_port()})
    env = {**os.environ, "FARM_HOME": str(tmp_path / "home")}
    env.pop("FARM_SSH_LOG", None)
    started = time.monotonic()
    proc = subprocess.run(
        [sys.executable, "-m", "farm.cli.main", "--inventory", str(inv), "devices", "check",
         "--all", "--output", "json"],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=120)
    took = time.monotonic() - started
    assert proc.returncode == 3, proc.stderr
    assert "Traceback" not in proc.stderr and "paramiko" not in proc.stderr, proc.stderr
    assert proc.stderr.strip() == "", proc.stderr
    errors = {r["device"]: r["error"] for r in json.loads(proc.stdout)["results"]}
    assert f"port {http.port} answers but is not SSH" in errors["web"]
    assert "connection refused" in errors["nothing"]
    assert took < 15.0, f"devices check of two bad endpoints took {took:.1f} s"


def test_paramiko_log_goes_to_farm_ssh_log_when_asked(tmp_path, endpoint) -> None:
    http = endpoint("http")
    inv = inventory(tmp_path, {"web": http.port})
    log = tmp_path / "ssh.log"
    code = ("import sys\nfrom farm.inventory import load_inventory\n"
            "from farm.transports.ssh import SSHTransport\n"
            "try:\n    SSHTransport(load_inventory(sys.argv[1]).get('web')).run(['true'])\n"
            "except Exception as exc:\n    print(type(exc).__name__)\n")
    proc = subprocess.run([sys.executable, "-c", code, str(inv)], cwd=REPO, timeout=60,
                          env={**os.environ, "FARM_SSH_LOG": str(log)},
                          capture_output=True, text=True)
    assert proc.stdout.strip() == "EndpointFailure" and proc.stderr == "", proc.stderr
    assert "Error reading SSH protocol banner" in log.read_text()
