"""What a lost agent session says (issue 33): a hint quotes only the agent's stderr written
since its hello or the last request, never its clean-start log; and when it was this host
that was stopped (SIGSTOP), the failure says so instead of "link down? — check the device's
network". Real processes on `local`: a stand-in agent, and a host process stopped for real."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from test_protocol import _fake_agent  # the misbehaving stand-in agent

from farm.errors import AgentError
from farm.inventory.builtin import local_device
from farm.protocol.session import AgentSession
from farm.transports import open_transport

REPO = Path(__file__).resolve().parents[1]
AGENT = REPO / "agents" / "farm_agent.py"


def test_channel_closed_hint_does_not_quote_the_clean_start_log(tmp_path: Path) -> None:
    path = _fake_agent(tmp_path, """
        sys.stderr.write("farm_agent[9]: clean start: cleared the lock of agent pid 4242\\n")
        sys.stderr.flush()
        time.sleep(0.3)
        out(json.dumps(HELLO) + "\\n")
        sys.stdin.readline()
        sys.exit(0)  # the channel closes without a word on stderr (sshd killed)
    """)
    session = AgentSession(open_transport(local_device()), str(path), python=sys.executable,
                           workdir=str(tmp_path / "wd"), hello_timeout_s=20, dead_after_s=10)
    session.start()
    with pytest.raises(AgentError, match="channel closed") as info:
        session.state()
    session.close()
    assert "clean start" not in str(info.value), str(info.value)
    assert "nothing new since the last request" in str(info.value)


CHILD = """
import sys, time
from farm.inventory.builtin import local_device
from farm.protocol.session import AgentSession
from farm.transports import open_transport

session = AgentSession(open_transport(local_device()), sys.argv[1], python=sys.executable,
                       workdir=sys.argv[2], ping_interval_s=0.5, dead_after_s=3.0,
                       idle_timeout_s=3.0)
session.start()
print("ready", flush=True)
try:
    while True:
        session.state()
        time.sleep(0.1)
except Exception as exc:
    print("FAILED", type(exc).__name__, str(exc).replace("\\n", " | "), flush=True)
session.close()
"""


@pytest.mark.slow
def test_a_stopped_host_is_named_not_the_device_network(tmp_path: Path) -> None:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(
        p for p in (str(REPO), os.environ.get("PYTHONPATH")) if p)}
    child = subprocess.Popen([sys.executable, "-c", CHILD, str(AGENT), str(tmp_path / "wd")],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                             env=env, cwd=REPO)
    try:
        assert child.stdout is not None
        assert child.stdout.readline().strip() == "ready", child.stderr
        time.sleep(0.5)
        os.kill(child.pid, signal.SIGSTOP)  # the host stops; the agent hears no ping
        time.sleep(8.0)
        os.kill(child.pid, signal.SIGCONT)
        out, err = child.communicate(timeout=60)
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
    assert "FAILED" in out, (out, err)
    assert "this host was paused for" in out, out
    assert "check the device's network" not in out and "link down" not in out, out
