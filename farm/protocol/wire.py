"""The agent wire protocol: framing, message kinds, size cap and version, in one place.

Framing: one JSON object per line, UTF-8, `\\n`-terminated, no line longer than
`MAX_LINE_BYTES` (1 MiB) in either direction. The agent's stdout carries only protocol
lines (each flushed); its logs go to stderr. Every line carries `"proto": PROTO`.

Life cycle::

    host starts `python -u <workdir>/agent/farm_agent-<sha12>.py --workdir W`
    agent -> host  {"kind": "hello", "proto", "agent_sha256", "python", "platform", "cpu",
                    "routes": {route: {"ok": bool, "reason": str, ...}}, "pid"}
    host checks `proto` (refuses any other version: redeploy) and the agent hash
    host -> agent  requests {"proto", "id", "op", ...}
    agent -> host  replies, events and ends, tagged with the request id
    host -> agent  {"op": "bye"}  (or closes stdin: the agent exits either way)

Requests (host -> agent), field `op`:
    ping                           liveness; reply `{"t": monotonic}`
    state                          reply: device state dict (see agent `read_state`)
    run_route  runner, request, timeout_s, verify
                                   checks `verify` {path: sha256} (refuses a corrupted
                                   artifact), then starts the route runner in a FRESH child
                                   process; its JSON lines come back as `event`s, then one
                                   `end`
    cancel     target              kill the child process group of run `target`
    bye                            the agent kills its children and exits

Agent -> host, field `kind`:
    hello   see above (sent first, once)
    reply   id, ok, data           answer to ping/state/cancel/bye
    event   id, ev                 one runner line (`ev` is the runner's object, see
                                   docs/ARCHITECTURE.md "Route runner contract")
    end     id, status, message, exit_code, stderr_tail
                                   status: done | error | timeout | cancelled
    error   id (or null), message  a request refused (unknown proto/op, bad line, busy)
    log     id (or null), text     a stray non-JSON runner stdout line, for diagnostics

Numbers: NaN, Infinity and numbers that overflow to infinity (1e999) are refused on
every line (`strict_number`): no non-finite value enters the host. What values mean (ranges,
sizes, paths, event order) is checked per route run by `farm.protocol.untrusted`.

Liveness: the host pings every few seconds; an agent that hears nothing on stdin for its
`--idle-timeout` (a cut link leaves sshd and the agent unaware) kills its children and
exits, and a host that hears nothing for `dead_after_s` declares the link down.

The agent (`agents/farm_agent.py`) is stdlib-only and cannot import this module; it
repeats `PROTO` and `MAX_LINE_BYTES`, and `tests/test_protocol.py` checks they agree.
"""

from __future__ import annotations

import json
from typing import Any

from farm import followup
from farm.errors import AgentError, ProtocolError

PROTO = 1
MAX_LINE_BYTES = 1 << 20

REQUEST_OPS = ("ping", "state", "run_route", "cancel", "bye")
END_STATUSES = ("done", "error", "timeout", "cancelled")

# kind -> required field -> accepted types (checked on every line the host decodes)
_NUM = (int, float)
AGENT_KINDS: dict[str, dict[str, tuple[type, ...]]] = {
    "hello": {"agent_sha256": (str,), "python": (str,), "platform": (dict,), "cpu": (dict,),
              "routes": (dict,), "pid": (int,)},
    "reply": {"id": (str,), "ok": (bool,), "data": (dict,)},
    "event": {"id": (str,), "ev": (dict,)},
    "end": {"id": (str,), "status": (str,), "message": (str,), "exit_code": (int, type(None)),
            "stderr_tail": (str,)},
    "error": {"id": (str, type(None)), "message": (str,)},
    "log": {"id": (str, type(None)), "text": (str,)},
}

# runner event name -> required fields (the subset the host relies on)
RUNNER_EVENTS: dict[str, dict[str, tuple[type, ...]]] = {
    "loaded": {"load_ms": _NUM},
    "first": {"ms": _NUM},
    "warmup": {"runs": (int,), "ms_total": _NUM},
    "samples": {"ms": (list,)},
    "ops": {"categories": (dict,)},
    "outputs": {"file": (str,)},
    "memory": {},
    "info": {},
    "done": {},
    "error": {"message": (str,)},
}


class _NotFinite(ValueError):
    pass


def _refuse_constant(name: str) -> float:
    raise _NotFinite(f"non-finite number {name}")


def strict_number(text: str) -> float:
    """JSON float parser that refuses what would become inf (e.g. 1e999)."""
    value = float(text)
    if value in (float("inf"), float("-inf")):
        raise _NotFinite(f"number {text[:40]} overflows to infinity")
    return value


def excerpt(line: str | bytes, limit: int = 80) -> str:
    """A short, printable view of a line for error messages."""
    text = line.decode("utf-8", "replace") if isinstance(line, bytes) else line
    return repr(text[:limit]) + ("…" if len(text) > limit else "")


def encode(message: dict[str, Any]) -> str:
    """One protocol line (without the newline); refuses what the peer would refuse."""
    line = json.dumps({"proto": PROTO, **message}, separators=(",", ":"), allow_nan=False)
    if len(line.encode()) > MAX_LINE_BYTES:
        raise ProtocolError(f"outgoing {message.get('op') or message.get('kind')} line is "
                            f"{len(line.encode())} bytes, over the {MAX_LINE_BYTES}-byte cap")
    return line


def request(op: str, rid: str, **fields: Any) -> str:
    if op not in REQUEST_OPS:
        raise ProtocolError(f"unknown request op {op!r}; known: {', '.join(REQUEST_OPS)}")
    return encode({"id": rid, "op": op, **fields})


def version_mismatch(theirs: object, where: str) -> AgentError:
    return AgentError(
        f"{where}: agent speaks protocol {theirs!r}, this farm speaks protocol {PROTO}",
        hint="redeploy the agent that matches this farm "
             f"(`{followup.command('deploy', '--device', 'NAME')}`), or run the farm "
             "version that deployed it")


def decode(line: str | bytes, lineno: int, where: str = "agent") -> dict[str, Any]:
    """Decode and validate one agent -> host line; ProtocolError names line and excerpt."""
    size = len(line.encode() if isinstance(line, str) else line)
    if size > MAX_LINE_BYTES:
        raise ProtocolError(f"{where} line {lineno}: {size} bytes, over the {MAX_LINE_BYTES}-"
                            f"byte cap: {excerpt(line)}",
                            hint="a runner printed a huge line; check its stdout")
    try:
        message = json.loads(line, parse_constant=_refuse_constant, parse_float=strict_number)
    except _NotFinite as exc:
        raise ProtocolError(f"{where} line {lineno}: {exc}: {excerpt(line)}",
                            hint="the device sent a number the protocol does not allow "
                                 "(NaN/Infinity); its results are not trusted") from None
    except (ValueError, UnicodeDecodeError, RecursionError) as exc:
        # RecursionError: a deeply nested line, well under the size cap
        raise ProtocolError(f"{where} line {lineno}: not JSON ({exc.__class__.__name__}): "
                            f"{excerpt(line)}",
                            hint="something other than the agent wrote to its stdout") from None
    if not isinstance(message, dict):
        raise ProtocolError(f"{where} line {lineno}: a JSON {type(message).__name__}, "
                            f"not an object: {excerpt(line)}")
    kind = message.get("kind")
    proto = message.get("proto")
    speaks = type(proto) is int and proto == PROTO  # true and 1.0 are not protocol 1
    if kind == "hello" and not speaks:
        raise version_mismatch(proto, f"{where} hello")
    if not speaks:
        raise ProtocolError(f"{where} line {lineno}: proto {message.get('proto')!r}, "
                            f"expected {PROTO}: {excerpt(line)}")
    if kind not in AGENT_KINDS:
        raise ProtocolError(f"{where} line {lineno}: unknown kind {kind!r}: {excerpt(line)}")
    _check_fields(message, AGENT_KINDS[kind], f"{where} line {lineno} ({kind})", line)
    if kind == "end" and message["status"] not in END_STATUSES:
        raise ProtocolError(f"{where} line {lineno}: end status {message['status']!r} is not "
                            f"one of {', '.join(END_STATUSES)}")
    if kind == "event":
        check_runner_event(message["ev"], f"{where} line {lineno}")
    return message


def check_runner_event(ev: dict[str, Any], where: str) -> None:
    """Known runner events must have the fields the host relies on; an unknown event name
    (a newer runner) is passed through for the caller to ignore."""
    name = ev.get("ev")
    if not isinstance(name, str):
        raise ProtocolError(f"{where}: runner event without a name: {excerpt(str(ev))}")
    if name not in RUNNER_EVENTS:
        return
    _check_fields(ev, RUNNER_EVENTS[name], f"{where} (runner {name})", json.dumps(ev)[:200])
    if name == "samples" and not all(
            isinstance(x, _NUM) and not isinstance(x, bool) for x in ev["ms"]):
        raise ProtocolError(f"{where}: runner samples must be numbers: {excerpt(str(ev['ms']))}")


def _check_fields(message: dict[str, Any], spec: dict[str, tuple[type, ...]], where: str,
                  line: str | bytes) -> None:
    for key, types in spec.items():
        if key not in message:
            raise ProtocolError(f"{where}: missing field {key!r}: {excerpt(line)}")
        value = message[key]
        # bool is an int subclass; a field typed int must not accept true/false
        if (isinstance(value, bool) and bool not in types) or not isinstance(value, types):
            names = "/".join("null" if t is type(None) else t.__name__ for t in types)
            raise ProtocolError(f"{where}: field {key!r} must be {names}, got "
                                f"{type(value).__name__}: {excerpt(line)}")
