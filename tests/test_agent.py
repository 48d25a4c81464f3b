"""The on-device agent end to end on `local`: hello, state, routes in fresh children,
timeouts, cancel, the device lock, and no orphans after EOF, SIGTERM, SIGKILL or silence."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from farm.errors import AgentError
from farm.inventory.builtin import local_device
from farm.protocol import wire
from farm.protocol.session import AgentSession, RouteFailed
from farm.routes import AGENT_TABLE, agent_table_file
from farm.transports import open_transport

REPO = Path(__file__).resolve().parent.parent
AGENT = REPO / "agents" / "farm_agent.py"

# A route runner that follows the contract in docs/ARCHITECTURE.md; `options.mode` picks a
# behaviour. It records its pid so tests can check it is gone afterwards.
TEST_RUNNER = textwrap.dedent("""
    import json, os, sys, time
    req = json.load(open(sys.argv[sys.argv.index("--request") + 1]))
    opts = req.get("options", {})
    open(opts["pidfile"], "w").write(str(os.getpid()))
    def ev(**kw):
        sys.stdout.write(json.dumps(kw) + "\\n"); sys.stdout.flush()
    mode = opts.get("mode", "ok")
    ev(ev="loaded", load_ms=1.5)
    if mode == "sleep":
        time.sleep(600)
    if mode == "forker":  # a helper process in the runner's group outlives the runner
        if os.fork() == 0:
            open(opts["pidfile"] + ".helper", "w").write(str(os.getpid()))
            time.sleep(600)
            os._exit(0)
        time.sleep(600)
    if mode == "crash":
        sys.stderr.write("runner: segfault imitation\\n"); sys.stderr.flush()
        os.kill(os.getpid(), 11)
    if mode == "badtypes":
        ev(ev="samples", ms=[1.0, "fast"])
        time.sleep(600)
    if mode == "newevent":
        ev(ev="thermal_pause", seconds=1)
    if mode == "error":
        ev(ev="error", message="model has an unsupported operator Foo")
        sys.exit(2)
    print("stray library chatter")
    sys.stdout.flush()
    ev(ev="first", ms=3.0)
    ev(ev="warmup", runs=2, ms_total=4.0)
    ev(ev="samples", ms=[1.0, 1.1, 0.9])
    ev(ev="memory", vmhwm_kb=1234, pss_kb=None, method="test")
    ev(ev="done")
""")


@pytest.fixture
def workdir(tmp_path: Path) -> Path:
    wd = tmp_path / "wd"
    (wd / "runners").mkdir(parents=True)
    (wd / "runners" / "test_runner.py").write_text(TEST_RUNNER)
    # the routes table deploy ships (from the host's route registry)
    (wd / "runners" / AGENT_TABLE).write_text(agent_table_file().read_text())
    return wd


def session_for(workdir: Path, **kw: object) -> AgentSession:
    return AgentSession(open_transport(local_device()), str(AGENT), python=sys.executable,
                        workdir=str(workdir), hello_timeout_s=30, **kw)  # type: ignore[arg-type]


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # a zombie is not a running process
    try:
        return Path(f"/proc/{pid}/stat").read_text().split(") ")[1][0] != "Z"
    except (OSError, IndexError):
        return False


def wait_gone(pid: int, timeout: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not alive(pid):
            return True
        time.sleep(0.05)
    return False


def request(workdir: Path, mode: str) -> dict[str, object]:
    return {"route": "test", "options": {"mode": mode, "pidfile": str(workdir / f"{mode}.pid")},
            "policy": {}}


def test_the_agent_learns_its_routes_from_the_deployed_table(workdir: Path) -> None:
    """No `if route ==` on the device: a new route is a table entry plus its runner."""
    table = workdir / "runners" / AGENT_TABLE
    table.write_text(json.dumps({"version": 1, "routes": {
        "newroute": {"runners": ["runners/test_runner.py"], "modules": ["json"]},
        "needs_cpu": {"runners": ["runners/test_runner.py"],
                      "cpu_features": {"x86_64": ["nosuchfeature"],
                                       "aarch64": ["nosuchfeature"]}}}}))
    with session_for(workdir) as session:
        routes = session.hello["routes"]
    assert set(routes) == {"newroute", "needs_cpu"}
    assert routes["newroute"]["ok"] and routes["newroute"]["runner"] == "runners/test_runner.py"
    assert not routes["needs_cpu"]["ok"] and "CPU lacks nosuchfeature" in \
        routes["needs_cpu"]["reason"]
    table.unlink()  # nothing deployed: no route offered
    with session_for(workdir) as session:
        assert session.hello["routes"] == {}


def test_hello_state_and_route(workdir: Path) -> None:
    with session_for(workdir) as session:
        hello = session.hello
        assert hello["proto"] == wire.PROTO
        assert len(hello["agent_sha256"]) == 64
        assert hello["cpu"]["cores"] >= 1 and hello["cpu"]["arch"] in ("x86_64", "aarch64")
        assert set(hello["routes"]) == {"ort", "tvm", "custom"}
        assert hello["routes"]["ort"]["ok"] is False  # no runner deployed in this work dir
        assert "not deployed" in hello["routes"]["ort"]["reason"]
        state = session.state()
        assert {"governor", "freq_khz", "thermal_c", "load", "mem_available_kb"} <= set(state)
        events = list(session.run_route("runners/test_runner.py", request(workdir, "ok"),
                                        timeout_s=30))
        assert [e["ev"] for e in events] == ["loaded", "first", "warmup", "samples", "memory",
                                            "done"]
        assert events[3]["ms"] == [1.0, 1.1, 0.9]
        assert session.ping()["t"] > 0  # the agent is still serving after the route


def test_route_errors_timeout_and_crash_keep_agent(workdir: Path) -> None:
    with session_for(workdir) as session:
        with pytest.raises(RouteFailed, match="unsupported operator Foo") as info:
            list(session.run_route("runners/test_runner.py", request(workdir, "error"),
                                   timeout_s=30))
        assert info.value.status == "error"
        with pytest.raises(RouteFailed, match="killed by signal 11") as info:
            list(session.run_route("runners/test_runner.py", request(workdir, "crash"),
                                   timeout_s=30))
        assert "segfault imitation" in info.value.stderr_tail
        started = time.monotonic()
        with pytest.raises(RouteFailed, match=r"killed after 1.0 s \(timeout\)") as info:
            list(session.run_route("runners/test_runner.py", request(workdir, "sleep"),
                                   timeout_s=1.0))
        assert info.value.status == "timeout" and time.monotonic() - started < 10
        assert wait_gone(int((workdir / "sleep.pid").read_text()))
        with pytest.raises(AgentError, match="outside the work dir"):
            list(session.run_route("../../etc/passwd", {}, timeout_s=5))
        with pytest.raises(RouteFailed, match="broke the runner contract: event samples"):
            list(session.run_route("runners/test_runner.py", request(workdir, "badtypes"),
                                   timeout_s=30))
        assert wait_gone(int((workdir / "badtypes.pid").read_text()))
        # an event this host does not know (a newer runner) is passed through, not fatal
        names = [e["ev"] for e in session.run_route(
            "runners/test_runner.py", request(workdir, "newevent"), timeout_s=30)]
        assert "thermal_pause" in names and names[-1] == "done"
        assert session.state()


def test_cancel_by_closing_the_iterator(workdir: Path) -> None:
    with session_for(workdir) as session:
        events = session.run_route("runners/test_runner.py", request(workdir, "sleep"),
                                   timeout_s=60)
        assert next(events)["ev"] == "loaded"
        events.close()  # what Ctrl-C does to the bench loop
        assert wait_gone(int((workdir / "sleep.pid").read_text()))
        assert session.ping()


def start_raw_agent(workdir: Path, *extra: str) -> tuple[subprocess.Popen[str], dict]:
    proc = subprocess.Popen([sys.executable, "-u", str(AGENT), "--workdir", str(workdir),
                             "--probe-timeout", "20", *extra], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)
    assert proc.stdout is not None
    return proc, json.loads(proc.stdout.readline())


def start_sleeper(proc: subprocess.Popen[str], workdir: Path) -> int:
    assert proc.stdin is not None and proc.stdout is not None
    proc.stdin.write(wire.request("run_route", "r1", runner="runners/test_runner.py",
                                  request=request(workdir, "sleep"), timeout_s=600) + "\n")
    proc.stdin.flush()
    assert json.loads(proc.stdout.readline())["ev"]["ev"] == "loaded"
    return int((workdir / "sleep.pid").read_text())


@pytest.mark.parametrize("how", ["stdin-eof", "sigterm", "sighup", "sigkill", "silence"])
def test_no_orphans_when_the_agent_goes(workdir: Path, how: str) -> None:
    extra = ("--idle-timeout", "1.5") if how == "silence" else ()
    proc, hello = start_raw_agent(workdir, *extra)
    assert hello["kind"] == "hello"
    runner = start_sleeper(proc, workdir)
    assert alive(runner)
    assert proc.stdin is not None
    if how == "stdin-eof":
        proc.stdin.close()  # what a closed SSH channel looks like to the agent
    elif how == "silence":
        pass  # a cut link: no EOF, just no pings
    else:
        proc.send_signal({"sigterm": signal.SIGTERM, "sighup": signal.SIGHUP,
                          "sigkill": signal.SIGKILL}[how])
    proc.wait(timeout=15)
    assert wait_gone(runner), f"runner {runner} orphaned after {how}"
    if how == "silence":
        assert "host silent" in proc.stderr.read()  # type: ignore[union-attr]


def test_device_lock_busy_then_reaped(workdir: Path) -> None:
    first, _ = start_raw_agent(workdir)
    runner = start_sleeper(first, workdir)
    second = subprocess.run([sys.executable, "-u", str(AGENT), "--workdir", str(workdir)],
                            input="", capture_output=True, text=True, timeout=30)
    message = json.loads(second.stdout.splitlines()[0])
    assert second.returncode == 4 and message["kind"] == "error"
    assert "device busy" in message["message"] and str(first.pid) in message["message"]
    # a holder whose host is still talking to it is never reaped, even by --reap-stale
    with pytest.raises(AgentError, match="device busy"):
        session_for(workdir).start()
    # its host silent for longer than its idle timeout (a cut link; injected by ageing the
    # lock, which the holder refreshes on every host line): a new session reaps it
    old = time.time() - 3600
    os.utime(workdir / "agent.lock", (old, old))
    with session_for(workdir) as session:
        assert session.ping()
        assert first.wait(timeout=10) is not None
        assert wait_gone(runner)


def test_clean_start_after_a_killed_agent(workdir: Path) -> None:
    """A SIGKILLed agent leaves its lock (naming its dead pid), its runner's helper process
    and its request file; the next agent clears all three and says so in its log."""
    first, _ = start_raw_agent(workdir)
    assert first.stdin is not None and first.stdout is not None
    first.stdin.write(wire.request("run_route", "r1", runner="runners/test_runner.py",
                                   request=request(workdir, "forker"), timeout_s=600) + "\n")
    first.stdin.flush()
    assert json.loads(first.stdout.readline())["ev"]["ev"] == "loaded"
    helper_file = workdir / "forker.pid.helper"
    deadline = time.monotonic() + 10
    # the runner creates the file, then writes the pid: wait for the pid, not the file
    while time.monotonic() < deadline and not (
            helper_file.exists() and helper_file.read_text().strip()):
        time.sleep(0.05)
    helper = int(helper_file.read_text())
    first.send_signal(signal.SIGKILL)
    first.wait(timeout=10)
    runner = int((workdir / "forker.pid").read_text())
    assert wait_gone(runner)  # the runner dies with its agent (PDEATHSIG)...
    assert alive(helper)      # ...but not what it started
    requests = list((workdir / "out" / "requests").iterdir())
    assert len(requests) == 1 and f"-{first.pid}.json" in requests[0].name
    assert json.loads((workdir / "agent.lock").read_text())["pid"] == first.pid

    second, hello = start_raw_agent(workdir)
    try:
        assert hello["kind"] == "hello"
        assert wait_gone(helper), "the dead agent's runner group was not cleared"
        assert list((workdir / "out" / "requests").iterdir()) == []
        assert json.loads((workdir / "agent.lock").read_text())["pid"] == second.pid
    finally:
        _, log = second.communicate("", timeout=15)  # stdin EOF: the agent exits
    assert second.returncode == 0
    assert f"cleared the lock of agent pid {first.pid} (dead" in log
    assert f"killed the leftover runner process group {runner} ({helper})" in log
    assert "removed 1 stale request file(s)" in log and requests[0].name in log


def test_session_close_leaves_nothing(workdir: Path) -> None:
    session = session_for(workdir)
    session.start()
    pid = session.hello["pid"]
    events = session.run_route("runners/test_runner.py", request(workdir, "sleep"),
                               timeout_s=60)
    assert next(events)["ev"] == "loaded"
    runner = int((workdir / "sleep.pid").read_text())
    session.close()
    assert wait_gone(pid) and wait_gone(runner)


def test_corrupted_artifact_is_refused_before_the_run(workdir: Path) -> None:
    import hashlib
    model = workdir / "models" / "m.onnx"
    model.parent.mkdir()
    model.write_bytes(b"model bytes")
    good = hashlib.sha256(b"model bytes").hexdigest()
    with session_for(workdir) as session:
        events = list(session.run_route("runners/test_runner.py", request(workdir, "ok"),
                                        timeout_s=30, verify={"models/m.onnx": good}))
        assert events[-1]["ev"] == "done"
        model.write_bytes(b"model bytez")  # same size: only the hash can tell
        with pytest.raises(AgentError, match=r"models/m.onnx is corrupted: sha256 [0-9a-f]{12}"
                                             r", deployed as " + good[:12] + ": redeploy"):
            list(session.run_route("runners/test_runner.py", request(workdir, "ok"),
                                   timeout_s=30, verify={"models/m.onnx": good}))
        with pytest.raises(AgentError, match="outside the work dir"):
            list(session.run_route("runners/test_runner.py", request(workdir, "ok"),
                                   timeout_s=30, verify={"../x": good}))


PY38 = Path("/root/.pyenv/versions/3.8.18/bin/python3.8")


@pytest.mark.skipif(not PY38.is_file(), reason="no Python 3.8 interpreter on this machine")
def test_agent_runs_on_python38(workdir: Path) -> None:
    session = AgentSession(open_transport(local_device()), str(AGENT), python=str(PY38),
                           workdir=str(workdir), hello_timeout_s=30)
    with session:
        assert session.hello["python"].startswith("3.8.")
        assert session.state()["mem_available_kb"] > 0
        events = list(session.run_route("runners/test_runner.py", request(workdir, "ok"),
                                        timeout_s=30))
        assert events[-1]["ev"] == "done"
