"""Property tests of the agent -> host decoder (`farm.protocol.wire.decode`).

Properties: every well-formed message of every kind round-trips through encode/decode;
dropping a required field or giving it a value of another JSON type is a ProtocolError
naming that field; a foreign protocol version is always refused; and no input at all --
arbitrary bytes, arbitrary JSON, deeply nested JSON -- makes the decoder raise anything
but the AgentError family (a crash in the host's reader thread would hang a bench).
"""

from __future__ import annotations

import contextlib
import json
from typing import Any

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from farm.errors import AgentError, ProtocolError
from farm.protocol import wire

SETTINGS = settings(max_examples=100, deadline=None,
                    suppress_health_check=[HealthCheck.too_slow])

text = st.text(max_size=20)
json_scalar = st.one_of(st.none(), st.booleans(), st.integers(-2**53, 2**53),
                        st.floats(allow_nan=False, allow_infinity=False), text)
json_value = st.recursive(json_scalar, lambda inner: st.one_of(
    st.lists(inner, max_size=4), st.dictionaries(text, inner, max_size=4)), max_leaves=12)
number = st.one_of(st.integers(-10**6, 10**6),
                   st.floats(-1e6, 1e6, allow_nan=False, allow_infinity=False))

# a value of each JSON type, to swap in for a field of another type
WRONG: dict[type, Any] = {str: "s", bool: True, int: 7, float: 1.5, dict: {"a": 1},
                          list: [1], type(None): None}


def runner_event() -> st.SearchStrategy[dict[str, Any]]:
    return st.one_of(
        st.fixed_dictionaries({"ev": st.just("loaded"), "load_ms": number}),
        st.fixed_dictionaries({"ev": st.just("first"), "ms": number}),
        st.fixed_dictionaries({"ev": st.just("warmup"), "runs": st.integers(0, 10**6),
                               "ms_total": number}),
        st.fixed_dictionaries({"ev": st.just("samples"), "ms": st.lists(number, max_size=50)}),
        st.fixed_dictionaries({"ev": st.just("ops"),
                               "categories": st.dictionaries(text, number, max_size=5)}),
        st.fixed_dictionaries({"ev": st.just("outputs"), "file": text}),
        st.fixed_dictionaries({"ev": st.just("memory"),
                               "vmhwm_kb": st.one_of(st.none(), st.integers(0, 2**40))}),
        st.fixed_dictionaries({"ev": st.just("info")},
                              optional={"providers": st.lists(text, max_size=3)}),
        st.just({"ev": "done"}),
        st.fixed_dictionaries({"ev": st.just("error"), "message": text}),
    )


rid = st.text(min_size=1, max_size=12)
MESSAGES = st.one_of(
    st.fixed_dictionaries({"kind": st.just("hello"), "agent_sha256": text, "python": text,
                           "platform": st.dictionaries(text, text, max_size=3),
                           "cpu": st.dictionaries(text, json_scalar, max_size=3),
                           "routes": st.dictionaries(st.sampled_from(["ort", "tvm", "custom"]),
                                                     st.fixed_dictionaries(
                                                         {"ok": st.booleans(), "reason": text})),
                           "pid": st.integers(1, 2**22)}),
    st.fixed_dictionaries({"kind": st.just("reply"), "id": rid, "ok": st.booleans(),
                           "data": st.dictionaries(text, json_value, max_size=4)}),
    st.fixed_dictionaries({"kind": st.just("event"), "id": rid, "ev": runner_event()}),
    st.fixed_dictionaries({"kind": st.just("end"), "id": rid,
                           "status": st.sampled_from(wire.END_STATUSES), "message": text,
                           "exit_code": st.one_of(st.none(), st.integers(-64, 255)),
                           "stderr_tail": text}),
    st.fixed_dictionaries({"kind": st.just("error"), "id": st.one_of(st.none(), rid),
                           "message": text}),
    st.fixed_dictionaries({"kind": st.just("log"), "id": st.one_of(st.none(), rid),
                           "text": text}),
)


@SETTINGS
@given(MESSAGES)
def test_every_wellformed_message_round_trips(message: dict[str, Any]) -> None:
    line = wire.encode(message)
    assert "\n" not in line  # one message is one line, whatever its strings hold
    decoded = wire.decode(line, 1)
    assert decoded == {"proto": wire.PROTO, **message}
    assert wire.decode(line.encode(), 1) == decoded  # bytes as read from a channel


@SETTINGS
@given(MESSAGES, st.data())
def test_missing_required_field_is_named(message: dict[str, Any], data: st.DataObject) -> None:
    required = sorted(wire.AGENT_KINDS[message["kind"]])
    key = data.draw(st.sampled_from(required))
    del message[key]
    with pytest.raises(ProtocolError, match=f"missing field '{key}'"):
        wire.decode(wire.encode(message), 5)


@SETTINGS
@given(MESSAGES, st.data())
def test_wrongly_typed_field_is_named(message: dict[str, Any], data: st.DataObject) -> None:
    spec = wire.AGENT_KINDS[message["kind"]]
    key = data.draw(st.sampled_from(sorted(spec)))
    accepted = spec[key]
    wrong = [v for v in WRONG.values() if not isinstance(v, accepted)
             or (isinstance(v, bool) and bool not in accepted)]
    message[key] = data.draw(st.sampled_from(wrong))
    with pytest.raises(ProtocolError, match=f"field '{key}' must be"):
        wire.decode(wire.encode(message), 5)


@SETTINGS
@given(MESSAGES, st.one_of(st.integers(), st.none(), st.text(max_size=3), st.floats()))
def test_foreign_protocol_version_is_always_refused(message: dict[str, Any],
                                                    proto: Any) -> None:
    assume(proto != wire.PROTO or isinstance(proto, bool))
    line = json.dumps({**message, "proto": proto})
    with pytest.raises(AgentError) as info:
        wire.decode(line, 2)
    if message["kind"] == "hello":  # the version refusal says how to fix it
        assert "redeploy" in str(info.value)


@SETTINGS
@given(st.dictionaries(text, json_value, max_size=6))
def test_arbitrary_json_objects_decode_or_raise_agent_errors(obj: dict[str, Any]) -> None:
    try:
        message = wire.decode(json.dumps(obj), 3)
    except AgentError as exc:
        assert "line 3" in str(exc) or "protocol" in str(exc)
        return
    assert message["kind"] in wire.AGENT_KINDS and message["proto"] == wire.PROTO


@SETTINGS
@given(st.binary(max_size=300))
def test_arbitrary_bytes_only_raise_agent_errors(raw: bytes) -> None:
    with contextlib.suppress(AgentError):
        wire.decode(raw, 4)


@SETTINGS
@given(st.integers(1, 4096))
def test_lines_over_the_cap_are_refused_before_parsing(extra: int) -> None:
    pad = "x" * (wire.MAX_LINE_BYTES + extra)
    with pytest.raises(ProtocolError, match="byte cap"):
        wire.decode(json.dumps({"proto": 1, "kind": "log", "id": None, "text": pad}), 9)


@pytest.mark.parametrize("opener", ["[", '{"a":'])
def test_deeply_nested_line_is_a_protocol_error(opener: str) -> None:
    line = opener * 200_000
    assert len(line) < wire.MAX_LINE_BYTES * 2
    with pytest.raises(ProtocolError):
        wire.decode(line[: wire.MAX_LINE_BYTES - 1], 1)


@pytest.mark.parametrize("proto", ["true", "1.0"])
def test_proto_must_be_the_integer_1(proto: str) -> None:
    line = f'{{"proto": {proto}, "kind": "reply", "id": "a", "ok": true, "data": {{}}}}'
    with pytest.raises(ProtocolError):
        wire.decode(line, 1)
