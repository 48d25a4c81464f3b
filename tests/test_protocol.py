"""The agent wire protocol: framing, size cap, types, version refusal in both directions,
garbage and truncated streams, against the real agent and real processes on `local`."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from farm.devices.agent_program import agent_program
from farm.errors import AgentError, ProtocolError
from farm.inventory.builtin import local_device
from farm.protocol import wire
from farm.protocol.session import AgentSession
from farm.transports import open_transport

AGENT = Path(__file__).resolve().parent.parent / "agents" / "farm_agent.py"


def test_agent_constants_agree_with_wire() -> None:
    text = AGENT.read_text()
    assert re.search(rf"^PROTO = {wire.PROTO}$", text, re.M)
    assert re.search(r"^MAX_LINE_BYTES = 1 << 20$", text, re.M)
    assert wire.MAX_LINE_BYTES == 1 << 20


def test_agent_is_python38_syntax() -> None:
    import ast
    for path in [AGENT, *sorted(AGENT.parent.glob("agent_*.py"))]:
        ast.parse(path.read_text(), str(path), feature_version=(3, 8))
    ast.parse(agent_program(), "packed agent", feature_version=(3, 8))  # and its loader


def test_round_trip_and_fields() -> None:
    line = wire.encode({"kind": "reply", "id": "a", "ok": True, "data": {"x": 1}})
    assert json.loads(line)["proto"] == wire.PROTO
    assert wire.decode(line, 1)["data"] == {"x": 1}


@pytest.mark.parametrize(("line", "pattern"), [
    ("garbage here", r"line 7: not JSON .*'garbage here'"),
    ("[1, 2]", r"line 7: a JSON list, not an object"),
    ('{"proto":1,"kind":"nope"}', r"unknown kind 'nope'"),
    ('{"proto":1,"kind":"reply","id":"a","ok":"yes","data":{}}', r"'ok' must be bool, got str"),
    ('{"proto":1,"kind":"reply","id":"a","ok":true}', r"missing field 'data'"),
    ('{"proto":1,"kind":"end","id":"a","status":"weird","message":"","exit_code":0,'
     '"stderr_tail":""}', r"end status 'weird'"),
    ('{"proto":1,"kind":"event","id":"a","ev":{"ev":"samples","ms":[1,"x"]}}',
     r"samples must be numbers"),
    ('{"proto":1,"kind":"event","id":"a","ev":{"ev":"first","ms":true}}', r"'ms' must be"),
    ('{"proto":3,"kind":"reply","id":"a","ok":true,"data":{}}', r"proto 3, expected 1"),
    ('{"proto":true,"kind":"reply","id":"a","ok":true,"data":{}}', r"proto True, expected 1"),
    ('{"proto":1.0,"kind":"reply","id":"a","ok":true,"data":{}}', r"proto 1.0, expected 1"),
])
def test_bad_lines_name_line_and_excerpt(line: str, pattern: str) -> None:
    with pytest.raises(ProtocolError, match=pattern):
        wire.decode(line, 7)


def test_oversize_line_refused_both_ways() -> None:
    big = "x" * (wire.MAX_LINE_BYTES + 10)
    with pytest.raises(ProtocolError, match=r"line 3: .*over the 1048576-byte cap"):
        wire.decode(json.dumps({"proto": 1, "kind": "log", "id": None, "text": big}), 3)
    with pytest.raises(ProtocolError, match="over the"):
        wire.encode({"op": "run_route", "request": {"x": big}})


def test_hello_of_another_version_names_both_and_the_fix() -> None:
    hello = json.dumps({"proto": 2, "kind": "hello"})
    with pytest.raises(AgentError, match=r"protocol 2, this farm speaks protocol 1") as info:
        wire.decode(hello, 1)
    assert "redeploy" in str(info.value)


@settings(max_examples=300, deadline=None)
@given(st.one_of(st.text(max_size=200), st.binary(max_size=200),
                 st.dictionaries(st.text(max_size=8), st.one_of(
                     st.none(), st.booleans(), st.integers(), st.text(max_size=8)),
                     max_size=6).map(json.dumps)))
def test_decoder_only_raises_protocol_errors(line: str | bytes) -> None:
    try:
        message = wire.decode(line, 1)
    except AgentError:
        return
    assert message["kind"] in wire.AGENT_KINDS


# -- against real processes ----------------------------------------------------------------
def _fake_agent(tmp_path: Path, body: str) -> Path:
    """A stand-in 'agent' that misbehaves on purpose (the only way to get a bad stream)."""
    path = tmp_path / "fake_agent.py"
    path.write_text(textwrap.dedent("""
        import json, sys, time
        HELLO = {"proto": 1, "kind": "hello", "agent_sha256": "0" * 64, "python": "3",
                 "platform": {}, "cpu": {}, "routes": {}, "pid": 1}
        def out(text):
            sys.stdout.write(text)
            sys.stdout.flush()
    """) + textwrap.dedent(body))
    return path


def _session(path: Path, tmp_path: Path) -> AgentSession:
    return AgentSession(open_transport(local_device()), str(path), python=sys.executable,
                        workdir=str(tmp_path / "wd"), hello_timeout_s=20, dead_after_s=10)


def test_host_refuses_agent_of_another_version(tmp_path: Path) -> None:
    skewed = tmp_path / "farm_agent-skew.py"  # packed, as deploy ships it
    skewed.write_bytes(agent_program().replace(b"\nPROTO = 1\n", b"\nPROTO = 2\n"))
    session = _session(skewed, tmp_path)
    with pytest.raises(AgentError, match=r"agent speaks protocol 2, this farm speaks protocol 1"):
        session.start()


def test_agent_refuses_request_of_another_version(tmp_path: Path) -> None:
    lines = [json.dumps({"proto": 9, "id": "x", "op": "state"}), "not json at all",
             json.dumps({"proto": 1, "id": "y", "op": "explode"}),
             json.dumps({"proto": 1, "id": "z", "op": "bye"})]
    proc = subprocess.run([sys.executable, "-u", str(AGENT), "--workdir", str(tmp_path / "w"),
                           "--probe-timeout", "20"], input="\n".join(lines) + "\n",
                          capture_output=True, text=True, timeout=60)
    out = [wire.decode(line, i + 1) for i, line in enumerate(proc.stdout.splitlines())]
    assert proc.returncode == 0
    assert [m["kind"] for m in out] == ["hello", "error", "error", "error", "reply"]
    assert "proto 9 is not spoken by this agent (protocol 1)" in out[1]["message"]
    assert "redeploy" in out[1]["message"]
    assert "line 2 is not JSON" in out[2]["message"]
    assert "unknown op 'explode'" in out[3]["message"]


def test_agent_refuses_oversize_request_and_goes_on(tmp_path: Path) -> None:
    big = json.dumps({"proto": 1, "id": "big", "op": "state", "pad": "x" * (2 << 20)})
    lines = [big, json.dumps({"proto": 1, "id": "s", "op": "ping"})]
    proc = subprocess.run([sys.executable, "-u", str(AGENT), "--workdir", str(tmp_path / "w"),
                           "--probe-timeout", "20"], input="\n".join(lines) + "\n",
                          capture_output=True, text=True, timeout=60)
    out = [wire.decode(line, i + 1) for i, line in enumerate(proc.stdout.splitlines())]
    assert [m["kind"] for m in out] == ["hello", "error", "reply"]
    assert "over 1048576 bytes" in out[1]["message"]


def test_truncated_stream_is_a_clear_error(tmp_path: Path) -> None:
    path = _fake_agent(tmp_path, """
        out(json.dumps(HELLO) + "\\n")
        sys.stdin.readline()
        out('{"proto": 1, "kind": "reply", "id": "state-1", "ok": tr')
    """)
    session = _session(path, tmp_path)
    session.start()
    with pytest.raises(ProtocolError, match=r"line 2: not JSON"):
        session.state()
    session.close()


def test_agent_dying_mid_request_is_a_clear_error(tmp_path: Path) -> None:
    path = _fake_agent(tmp_path, """
        out(json.dumps(HELLO) + "\\n")
        sys.stdin.readline()
        sys.stderr.write("boom: simulated crash\\n")
        sys.exit(7)
    """)
    session = _session(path, tmp_path)
    session.start()
    with pytest.raises(AgentError, match=r"channel closed") as info:
        session.state()
    assert "boom: simulated crash" in str(info.value)
    session.close()


def test_oversize_line_from_agent(tmp_path: Path) -> None:
    path = _fake_agent(tmp_path, """
        out(json.dumps(HELLO) + "\\n")
        sys.stdin.readline()
        out(json.dumps({"proto": 1, "kind": "log", "id": None, "text": "y" * (2 << 20)}) + "\\n")
        sys.stdin.readline()
    """)
    session = _session(path, tmp_path)
    session.start()
    with pytest.raises(ProtocolError, match=r"over the 1048576-byte cap"):
        session.state()
    session.close()


def test_garbage_before_hello(tmp_path: Path) -> None:
    path = _fake_agent(tmp_path, """
        out("Welcome to the device! (motd)\\n")
    """)
    with pytest.raises(ProtocolError, match=r"line 1: not JSON .*Welcome"):
        _session(path, tmp_path).start()


def test_agent_survives_a_burst_of_random_lines(tmp_path: Path) -> None:
    import random
    rng = random.Random(7)
    junk: list[bytes] = []
    for _ in range(300):
        kind = rng.randrange(4)
        if kind == 0:  # raw bytes, invalid UTF-8 included
            raw = bytes(rng.randrange(256) for _ in range(rng.randrange(0, 60)))
            junk.append(raw.replace(b"\n", b" "))
        elif kind == 1:
            junk.append(json.dumps([rng.random(), None]).encode())
        elif kind == 2:
            junk.append(json.dumps({"proto": rng.choice([0, 2, "1", None, True]), "id": "x",
                                    "op": "state"}).encode())
        else:
            junk.append(json.dumps({"proto": 1, "id": rng.choice([None, 5, []]),
                                    "op": "ping"}).encode())
    lines = [*junk, json.dumps({"proto": 1, "id": "last", "op": "ping"}).encode()]
    proc = subprocess.run([sys.executable, "-u", str(AGENT), "--workdir", str(tmp_path / "w"),
                           "--probe-timeout", "20"], input=b"\n".join(lines) + b"\n",
                          capture_output=True, timeout=60)
    out = [wire.decode(line, i + 1) for i, line in enumerate(proc.stdout.splitlines())]
    kinds = [m["kind"] for m in out]
    assert kinds[0] == "hello" and kinds[-1] == "reply" and out[-1]["id"] == "last"
    assert kinds.count("error") == len(junk)  # one refusal per bad line, nothing else
    assert proc.returncode == 0
