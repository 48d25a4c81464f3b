"""Reaching an SSH endpoint, and saying in one line why it could not be reached.

farm opens the TCP connection itself (`open_socket`) and hands paramiko a socket that
remembers the first bytes the server sent (`RecordingSocket`), so a failed handshake is
named by what the port did, not by paramiko's symptom:

* refused / unreachable / no answer to the TCP connect -> `EndpointFailure(transient=True)`;
  the caller retries once (a rebooting device, an sshd being restarted), not for its whole
  budget: a wrong port or a host that is off must fail in about a second.
* the port accepts and sends something that is not an SSH version line -> "port N answers
  but is not SSH (it said 'HTTP/1.1 400 Bad Request')"; not retried.
* the port accepts and never speaks (an SSH server greets at once) -> "port N accepted the
  connection but said nothing in 10 s"; not retried (paramiko itself would end this with
  "SSHException: No existing session").
* the port accepts and closes without a word -> not SSH, or an sshd refusing new connections
  (MaxStartups, TCP wrappers); transient.

paramiko logs every failed handshake with a traceback on its transport thread (13 of them
for one HTTP port); those records never reach the terminal: `quiet_paramiko()` gives its
logger a NullHandler and stops propagation. `FARM_SSH_LOG=FILE` writes them (DEBUG) to FILE
instead, for debugging a connection.
"""

from __future__ import annotations

import errno
import logging
import os
import socket
import threading
import time
from typing import Any

from farm.errors import TransportError

# first bytes of the server kept for the message (an SSH banner line is at most 255 bytes)
KEEP_BYTES = 256
_UNREACHABLE = {errno.EHOSTUNREACH, errno.ENETUNREACH, errno.EHOSTDOWN, errno.ENETDOWN}


class EndpointFailure(TransportError):
    """Connection setup failed; `transient` says whether one retry may help."""

    def __init__(self, message: str, *, device: str | None, hint: str | None,
                 transient: bool) -> None:
        super().__init__(message, device=device, hint=hint)
        self.transient = transient


def quiet_paramiko() -> None:
    """Keep paramiko's log records off the terminal (see the module docstring)."""
    logger = logging.getLogger("paramiko")
    if getattr(logger, "_farm_configured", False):
        return
    path = os.environ.get("FARM_SSH_LOG")
    if path:
        logger.setLevel(logging.DEBUG)
        handler: logging.Handler = logging.FileHandler(path)
        handler.setFormatter(logging.Formatter(
            "%(asctime)s %(threadName)s %(name)s %(levelname)s: %(message)s"))
    else:
        handler = logging.NullHandler()
    logger.addHandler(handler)
    logger.propagate = False  # a root handler someone else configured must not print them
    logger._farm_configured = True  # type: ignore[attr-defined]


class RecordingSocket:
    """A socket that remembers the first bytes received, and whether the peer closed or
    reset the connection; everything else is the wrapped socket's."""

    def __init__(self, sock: socket.socket) -> None:
        self._sock = sock
        self._lock = threading.Lock()
        self.seen = b""
        self.peer_closed = False

    def recv(self, size: int, *flags: int) -> bytes:
        try:
            data = self._sock.recv(size, *flags)
        except (ConnectionResetError, BrokenPipeError):
            self.peer_closed = True
            raise
        with self._lock:
            if not data:
                self.peer_closed = True
            elif len(self.seen) < KEEP_BYTES:
                self.seen += data[:KEEP_BYTES - len(self.seen)]
        return data

    def __getattr__(self, name: str) -> Any:
        return getattr(self._sock, name)


def open_socket(host: str, port: int, timeout: float, device: str) -> socket.socket:
    """The TCP connection to host:port, or an EndpointFailure naming what happened."""
    where = f"{host}:{port}"
    try:
        return socket.create_connection((host, port), timeout=timeout)
    except ConnectionRefusedError:
        raise EndpointFailure(
            f"cannot connect to {where}: connection refused (nothing listens on port {port})",
            device=device, transient=True,
            hint="check the device is on, its sshd runs, and `port` in the inventory") from None
    except TimeoutError:
        raise EndpointFailure(
            f"cannot connect to {where}: no answer within {timeout:.0f} s "
            "(packets dropped: link down, host off or a firewall)",
            device=device, transient=True,
            hint="check the device's network and `host` in the inventory") from None
    except socket.gaierror as exc:
        raise EndpointFailure(
            f"cannot connect to {where}: cannot resolve {host!r} ({exc.strerror})",
            device=device, transient=True, hint="check `host` in the inventory") from None
    except OSError as exc:
        what = ("host unreachable" if exc.errno in _UNREACHABLE
                else exc.strerror or type(exc).__name__)
        raise EndpointFailure(
            f"cannot connect to {where}: {what}", device=device, transient=True,
            hint="check the device is on and its network") from None


def handshake_failure(recorded: RecordingSocket, exc: BaseException, *, host: str,
                      port: int, started: float, device: str) -> EndpointFailure:
    """One line for an SSH handshake that failed on an open TCP connection."""
    where = f"{host}:{port}"
    waited = time.monotonic() - started
    seen = recorded.seen
    if not seen:
        if recorded.peer_closed:
            return EndpointFailure(
                f"cannot connect to {where}: port {port} accepted the connection and closed "
                "it without a word (not SSH, or an sshd refusing new connections: "
                "MaxStartups, TCP wrappers)", device=device, transient=True,
                hint="check `port` in the inventory and the device's sshd log")
        return EndpointFailure(
            f"cannot connect to {where}: port {port} accepted the connection but said "
            f"nothing in {waited:.0f} s (an SSH server greets at once: not SSH, or a hung "
            "sshd)", device=device, transient=False,
            hint="check `port` in the inventory; restart the device's sshd if it is hung")
    lines = seen.split(b"\n")
    if not any(line.startswith(b"SSH-") for line in lines) and \
            not (len(lines) == 1 and b"SSH-".startswith(seen)):
        said = lines[0].rstrip(b"\r").decode("ascii", errors="replace")[:60]
        return EndpointFailure(
            f"cannot connect to {where}: port {port} answers but is not SSH "
            f"(it said {said!r})", device=device, transient=False,
            hint="check `port` in the inventory: it must be the device's sshd port")
    detail = str(exc).strip() or type(exc).__name__
    return EndpointFailure(
        f"cannot connect to {where}: SSH handshake failed ({type(exc).__name__}: {detail})",
        device=device, transient=isinstance(exc, (EOFError, ConnectionError)),
        hint="check the device's sshd (its log names the reason)")
