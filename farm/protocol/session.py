"""Host side of the agent protocol: one `AgentSession` per device.

Life cycle: `AgentSession(transport, agent_path, python=..., workdir=...)` → `start()`
(starts the agent over the transport, reads and checks its `hello`) → `state()`,
`run_route(...)` (yields runner events) → `close()` (sends `bye`, closes the channel and
makes sure the remote process ended). Also a context manager.

One reader thread owns the channel: it decodes every line (`farm.protocol.wire.decode`)
and routes it by request id. One keepalive thread pings the agent so that an agent behind a
cut link exits by its idle timeout, and a silent agent is declared lost after
`dead_after_s` (a cut link gives no EOF, only silence).

The host can be what stopped (SIGSTOP, a suspended laptop, a starved CPU;
`farm.protocol.stall`): silence that spans such a stall is not the device's, so the agent
gets a fresh `dead_after_s` from the host's resume, and a failure that follows says the
host was paused (the agent may have ended the session by its idle timeout), not "link
down? check the device's network".
A hint quotes the agent's stderr written since its hello or the last request only: lines
from before (its clean-start log) do not explain a later failure.

Errors: the agent or channel failing → `AgentError`/`TransportError` (the device is lost);
a route whose runner failed while the agent is fine → `RouteFailed` (the device goes on).
"""

from __future__ import annotations

import contextlib
import itertools
import queue
import threading
import time
from collections.abc import Iterator
from typing import Any

from farm import followup
from farm.errors import AgentError, ProtocolError, TransportError
from farm.protocol import wire
from farm.protocol.stall import HostStalls
from farm.protocol.untrusted import EventGuard, check_state
from farm.transports.base import RemoteProcess, Transport

_EOF = object()


class RouteFailed(AgentError):
    """The route's runner failed, timed out or was cancelled; the agent itself is fine."""

    def __init__(self, message: str, *, status: str, stderr_tail: str = "",
                 hint: str | None = None) -> None:
        super().__init__(message, hint=hint)
        self.status = status
        self.stderr_tail = stderr_tail


class AgentSession:
    """A running agent on one device (see module docstring for the life cycle)."""

    def __init__(self, transport: Transport, agent_path: str, *, python: str | None = None,
                 workdir: str | None = None, expected_sha256: str | None = None,
                 holder: str = "", hello_timeout_s: float = 90.0, ping_interval_s: float = 3.0,
                 dead_after_s: float = 30.0, idle_timeout_s: float = 30.0) -> None:
        device = transport.device
        self.transport = transport
        self.device = device.name
        self.agent_path = agent_path
        self.python = python or device.python
        self.workdir = workdir or device.workdir
        self.expected_sha256 = expected_sha256
        self.holder = holder
        self.hello_timeout_s = hello_timeout_s
        self.ping_interval_s = ping_interval_s
        self.dead_after_s = dead_after_s
        self.idle_timeout_s = idle_timeout_s
        self.hello: dict[str, Any] = {}
        self._proc: RemoteProcess | None = None
        self._ids = itertools.count(1)
        self._queues: dict[str, queue.Queue[Any]] = {}
        self._lock = threading.Lock()
        self._write_lock = threading.Lock()
        self._closed = threading.Event()
        self._failure: Exception | None = None
        self._last_heard = time.monotonic()
        self._lineno = 0
        self._stderr_mark = ""  # the agent's stderr tail when the last request was sent
        self._stalls = HostStalls(max(ping_interval_s, 0.25))  # threads wait at most this

    # -- start ---------------------------------------------------------------------------
    def start(self) -> dict[str, Any]:
        argv = [self.python, "-u", self.agent_path, "--workdir", self.workdir,
                "--holder", self.holder, "--reap-stale",
                "--idle-timeout", str(self.idle_timeout_s)]
        self._proc = self.transport.start(argv)
        try:
            self.hello = self._read_hello()
        except BaseException:
            self._proc.close(timeout=2.0)
            raise
        self._stderr_mark = self._proc.stderr_tail()
        threading.Thread(target=self._reader, name=f"agent-{self.device}", daemon=True).start()
        threading.Thread(target=self._keepalive, name=f"ping-{self.device}",
                         daemon=True).start()
        return self.hello

    def _read_hello(self) -> dict[str, Any]:
        assert self._proc is not None
        deadline = time.monotonic() + self.hello_timeout_s
        while True:
            left = deadline - time.monotonic()
            try:
                line = self._proc.read_line(timeout=max(left, 0.01)) if left > 0 else None
            except EOFError:
                raise self._lost("agent exited before its hello") from None
            if line is None:
                raise AgentError(f"device {self.device!r}: no hello from the agent within "
                                 f"{self.hello_timeout_s:.0f} s",
                                 hint=f"agent stderr: {self._stderr()}")
            self._lineno += 1
            message = wire.decode(line, self._lineno, f"device {self.device!r} agent")
            if message["kind"] == "log":
                continue
            if message["kind"] == "error":
                busy = "device busy" in message["message"]
                raise AgentError(f"device {self.device!r}: agent refused to start: "
                                 f"{message['message']}",
                                 hint="another host's bench holds the device; wait for it"
                                 if busy else f"check the work dir {self.workdir} on the "
                                 "device (free space, permissions)")
            if message["kind"] != "hello":
                raise ProtocolError(f"device {self.device!r}: agent line {self._lineno}: "
                                    f"expected hello, got {message['kind']!r}")
            if self.expected_sha256 and message["agent_sha256"] != self.expected_sha256:
                raise AgentError(
                    f"device {self.device!r}: agent at {self.agent_path} has sha256 "
                    f"{message['agent_sha256'][:12]}, expected {self.expected_sha256[:12]}",
                    hint="the file on the device was changed or corrupted; redeploy "
                         f"(`{followup.command('deploy', '--device', self.device)}`)")
            return message

    # -- channel threads -----------------------------------------------------------------
    def _reader(self) -> None:
        assert self._proc is not None
        failure: Exception | None = None
        while not self._closed.is_set():
            try:
                line = self._proc.read_line(timeout=0.5)
            except EOFError:
                self._stalls.tick()
                failure = self._lost("agent channel closed")
                break
            except Exception as exc:  # any transport failure ends the session
                failure = TransportError(f"reading from the agent failed: {exc}",
                                         device=self.device)
                break
            now = self._stalls.tick()
            if line is None:
                continue
            self._last_heard = now
            self._lineno += 1
            try:
                message = wire.decode(line, self._lineno, f"device {self.device!r} agent")
            except AgentError as exc:
                failure = exc
                break
            rid = message.get("id")
            with self._lock:
                target = self._queues.get(rid) if isinstance(rid, str) else None
            if target is not None:
                target.put(message)
            elif message["kind"] == "error" and rid is None:
                # the agent could not even parse one of our lines: a host/agent bug
                failure = ProtocolError(f"device {self.device!r}: agent rejected a line: "
                                        f"{message['message']}")
                break
            # else: a pong, or a late line of a request we stopped waiting for
        self._fail(failure)

    def _keepalive(self) -> None:
        while not self._closed.wait(self.ping_interval_s):
            self._stalls.tick()
            try:
                self._send("ping", f"ping-{next(self._ids)}", track=False)
            except AgentError:
                return

    def _fail(self, failure: Exception | None) -> None:
        if failure is not None and self._failure is None and not self._closed.is_set():
            self._failure = failure
        with self._lock:
            queues = list(self._queues.values())
        for q in queues:
            q.put(_EOF)

    def _lost(self, what: str) -> AgentError:
        status = self._proc.exit_status() if self._proc else None
        dropped = self.transport.lost_link()
        if dropped:  # the device behind it did nothing wrong: say what did
            return AgentError(f"device {self.device!r}: {what}: {dropped}",
                              hint="the devices behind that gateway are lost for this run; "
                                   "finished routes are kept")
        # the first thread to run after a stop may be the one failing here: tick first
        paused = self._stalls.words(self._stalls.tick(), self.dead_after_s + 5.0)
        if paused:
            return AgentError(f"device {self.device!r}: {what} (exit status {status}) "
                              f"{paused}", hint=self._paused_hint())
        return AgentError(f"device {self.device!r}: {what} (exit status {status})",
                          hint=f"agent stderr: {self._stderr()}")

    def _stderr(self) -> str:
        """What the agent wrote on stderr since its hello or the last request was sent."""
        tail = self._proc.stderr_tail() if self._proc else ""
        mark = self._stderr_mark
        if mark and mark in tail:
            tail = tail[tail.rindex(mark) + len(mark):]
        tail = tail.strip()
        return tail[-800:] or ("(nothing new since the last request)" if mark else "(empty)")

    def _paused_hint(self) -> str:
        return (f"the agent ends a session it hears no ping from for {self.idle_timeout_s:.0f} "
                "s; the device is likely fine: finished routes are kept "
                f"(`{followup.command('bench', '--resume', 'RUN')}` runs the rest)")

    # -- requests ------------------------------------------------------------------------
    def _send(self, op: str, rid: str, *, track: bool = True, **fields: Any) -> None:
        if self._failure is not None:
            raise self._failure
        if self._proc is None:
            raise AgentError(f"device {self.device!r}: session not started")
        if track:
            with self._lock:
                self._queues[rid] = queue.Queue()
            self._stderr_mark = self._proc.stderr_tail()
        line = wire.request(op, rid, **fields)
        with self._write_lock:
            try:
                self._proc.write_line(line)
            except TransportError as exc:
                raise self._lost(f"cannot send {op}: {exc}") from None

    def _next(self, rid: str, deadline: float) -> dict[str, Any]:
        q = self._queues[rid]
        while True:
            if self._failure is not None and q.empty():
                raise self._failure
            try:
                message = q.get(timeout=0.25)
            except queue.Empty:
                now = self._stalls.tick()
                # silence is counted from the host's resume when this host was stopped
                silent = now - max(self._last_heard, self._stalls.resumed_at)
                if silent > self.dead_after_s:
                    paused = self._stalls.words(now, self.dead_after_s + 5.0)
                    hops = self.transport.device.hops
                    # a cut link on the way gives no EOF either: name every hop to check
                    network = ("the device's network" if not hops else
                               "the network of the device and of its gateways ("
                               + " -> ".join(h.name for h in hops) + ")")
                    failure = TransportError(
                        f"agent silent for {silent:.0f} s {paused}" if paused else
                        f"agent silent for {silent:.0f} s (link down?"
                        + (f" reached through gateway {hops[-1].name!r})" if hops else ")"),
                        device=self.device, hint=self._paused_hint() if paused else
                        f"check {network}; finished routes are kept")
                    self._failure = self._failure or failure
                    raise failure from None
                if now > deadline:
                    raise AgentError(f"device {self.device!r}: no answer to request {rid} "
                                     "in time") from None
                continue
            if message is _EOF:
                raise self._failure or self._lost("agent channel closed")
            if message["kind"] == "error":
                raise AgentError(f"device {self.device!r}: agent refused request {rid}: "
                                 f"{message['message']}")
            return message

    def _call(self, op: str, timeout_s: float = 30.0, **fields: Any) -> dict[str, Any]:
        rid = f"{op}-{next(self._ids)}"
        self._send(op, rid, **fields)
        try:
            message = self._next(rid, time.monotonic() + timeout_s)
        finally:
            self._forget(rid)
        if message["kind"] != "reply":
            raise ProtocolError(f"device {self.device!r}: expected a reply to {rid}, got "
                                f"{message['kind']!r}")
        return message["data"]

    def _forget(self, rid: str) -> None:
        with self._lock:
            self._queues.pop(rid, None)

    def state(self) -> dict[str, Any]:
        return check_state(self._call("state"), self.device)

    def ping(self) -> dict[str, Any]:
        return self._call("ping")

    def run_route(self, runner: str, request: dict[str, Any], *, timeout_s: float,
                  verify: dict[str, str] | None = None) -> Iterator[dict[str, Any]]:
        """Yield the runner's events (`{"ev": ...}`); RouteFailed unless it ends `done`.

        `verify` {path under the work dir: sha256}: the agent checks these files first
        and refuses the run (AgentError) when one is missing or corrupted.
        Closing the generator early (or Ctrl-C while iterating) cancels the run.
        """
        rid = f"run-{next(self._ids)}"
        self._send("run_route", rid, runner=runner, request=request, timeout_s=timeout_s,
                   verify=verify or {})
        finished = False
        guard = EventGuard(request, self.device)  # the device is untrusted: ranges, order
        try:
            deadline = time.monotonic() + timeout_s + 30.0  # the agent enforces timeout_s
            while True:
                message = self._next(rid, deadline)
                kind = message["kind"]
                if kind == "event":
                    guard.check(message["ev"])
                    yield message["ev"]
                elif kind == "log":
                    continue
                elif kind == "end":
                    finished = True
                    if message["status"] != "done":
                        raise RouteFailed(
                            f"device {self.device!r}: route runner {message['status']}: "
                            f"{message['message']}", status=message["status"],
                            stderr_tail=message["stderr_tail"],
                            hint="runner stderr: "
                                 f"{message['stderr_tail'].strip()[-600:] or '(empty)'}")
                    return
                else:
                    raise ProtocolError(f"device {self.device!r}: unexpected {kind!r} in "
                                        f"run {rid}")
        finally:
            if not finished:
                self.cancel(rid)
            self._forget(rid)

    def cancel(self, rid: str) -> None:
        """Ask the agent to kill run `rid` (best effort: the channel may be gone)."""
        if self._failure is not None or self._closed.is_set():
            return
        with contextlib.suppress(AgentError, TransportError):
            self._send("cancel", f"cancel-{next(self._ids)}", track=False, target=rid)

    # -- end -----------------------------------------------------------------------------
    def close(self, timeout_s: float = 5.0) -> None:
        """Say bye, close the channel and make sure the agent process ended."""
        if self._proc is None or self._closed.is_set():
            return
        if self._failure is None:
            with contextlib.suppress(AgentError, TransportError):
                self._send("bye", f"bye-{next(self._ids)}", track=False)
        self._closed.set()
        self._proc.close(timeout=timeout_s)

    @property
    def failure(self) -> Exception | None:
        return self._failure

    def __enter__(self) -> AgentSession:
        if self._proc is None:
            self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
