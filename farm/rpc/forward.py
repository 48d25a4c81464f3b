"""A TVM RPC server on an SSH device, reached only through the device's SSH connection.

    with forwarded_rpc_server(transport, "lab1-cpu", tracker_port=9190) as server:
        ...  # tracker_session("lab1-cpu", port=9190) now runs on the device

Over one paramiko connection (`SSHTransport.client()`):
1. a REMOTE forward: the device's 127.0.0.1:<server.tracker_port> reaches the host tracker;
2. the device runs `tvm.exec.rpc_server` bound to its own 127.0.0.1:<server.port>, registered
   with the tracker through (1) under `key`, reporting 127.0.0.1 as its address;
3. a LOCAL forward: the host's 127.0.0.1:<server.port> reaches the device's 127.0.0.1:<port>
   through direct-tcpip channels, so a client the tracker sends to 127.0.0.1:<port> lands on
   the device. TVM reports (custom address, server port) to clients, hence the same port
   number on both ends; the device must have its own loopback (a real remote device, or a
   lab device in its network namespace).
No RPC port is ever bound beyond loopback (TVM RPC has no authentication).

The forwards are threads of the calling process: a process that is itself a TVM RPC client
must use `farm.rpc.forward_child.forwarded_rpc_server_process` instead (TVM's client holds
the GIL while it waits on its socket, which would starve these threads: a deadlock).
`farm deploy --rpc-server` runs this in the foreground.

The server runs under a small watchdog (`_WATCHDOG`) in its own process group on the
device: TVM's server forks a `popen_worker` child that outlives its parent. When the SSH
channel's stdin closes (the block exits, or this host process dies and the connection
drops) the watchdog kills the whole group.
"""

from __future__ import annotations

import contextlib
import select
import socket
import threading
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import paramiko

from farm.errors import TransportError
from farm.rpc.server import rpc_server_argv
from farm.rpc.tracker import DEFAULT_PORT
from farm.transports.ssh import SSHProcess, SSHTransport

# Device side, Python 3.8+: fork; the child starts a new session and execs the server; the
# parent prints the child's pid, then waits for EOF on stdin or the child's exit and kills
# the child's process group (TERM, then KILL after 3 s) so no popen_worker is left.
_WATCHDOG = r"""
import os, select, signal, sys, time
pid = os.fork()
if pid == 0:
    os.setsid()
    os.execvp(sys.argv[1], sys.argv[1:])
print(pid, flush=True)
status = None
while status is None:
    done, code = os.waitpid(pid, os.WNOHANG)
    if done:
        status = code
        break
    ready = select.select([sys.stdin], [], [], 0.5)[0]
    if ready and not os.read(sys.stdin.fileno(), 4096):
        break
for sig, wait_s in ((signal.SIGTERM, 3.0), (signal.SIGKILL, 3.0)):
    try:
        os.killpg(pid, sig)
    except OSError:
        break
    end = time.time() + wait_s
    while time.time() < end:
        if status is None:
            done, code = os.waitpid(pid, os.WNOHANG)
            status = code if done else None
        try:
            os.killpg(pid, 0)
        except OSError:
            break
        time.sleep(0.05)
    else:
        continue
    break
sys.exit(0 if status is None else (status >> 8) & 255)
"""

_PORT_TRIES = 10


@dataclass
class ForwardedServer:
    """A running forwarded server: `port` on both loopbacks, the device-side tracker port,
    the server's process group on the device. Valid inside `forwarded_rpc_server`."""

    device: str
    key: str
    port: int
    tracker_port: int            # the device's end of the remote forward
    pgid: int
    process: SSHProcess = field(repr=False)

    def alive(self) -> bool:
        return self.process.exit_status() is None

    def log_tail(self) -> str:
        return self.process.stderr_tail()


def _pump(sock: socket.socket, chan: paramiko.Channel) -> None:
    """Copy bytes both ways until either side closes."""
    try:
        while True:
            ready = select.select([sock, chan], [], [], 1.0)[0]
            if sock in ready:
                data = sock.recv(65536)
                if not data:
                    break
                chan.sendall(data)
            if chan in ready:
                data = chan.recv(65536)
                if not data:
                    break
                sock.sendall(data)
    except (OSError, EOFError, ValueError, paramiko.SSHException):
        pass  # either end closed (or we closed it on stop)
    finally:
        chan.close()
        sock.close()


class _Forwards:
    """The remote forward to the tracker and the local listener to the device's server."""

    def __init__(self, ssh: paramiko.Transport, tracker: tuple[str, int]) -> None:
        self.ssh, self.tracker = ssh, tracker
        self.remote_port: int | None = None
        self.listener: socket.socket | None = None
        self.stopped = threading.Event()

    def _spawn(self, sock: socket.socket, chan: paramiko.Channel) -> None:
        threading.Thread(target=_pump, args=(sock, chan), daemon=True).start()

    def _to_tracker(self, chan: paramiko.Channel, origin: Any, server: Any) -> None:
        # called on paramiko's transport thread: connect and hand over without blocking long
        try:
            sock = socket.create_connection(self.tracker, timeout=5)
            sock.settimeout(None)
        except OSError:
            chan.close()
            return
        self._spawn(sock, chan)

    def open_remote(self) -> int:
        try:
            self.remote_port = self.ssh.request_port_forward("127.0.0.1", 0, self._to_tracker)
        except paramiko.SSHException as exc:
            raise TransportError(f"the device refused a remote port forward: {exc}",
                                 hint="allow it in sshd_config (AllowTcpForwarding yes)"
                                 ) from None
        return self.remote_port

    def listen(self) -> int:
        """Listen on a free host loopback port; connections go to the device's same port."""
        self.listener = socket.socket()
        self.listener.bind(("127.0.0.1", 0))
        self.listener.listen(16)
        port = int(self.listener.getsockname()[1])
        threading.Thread(target=self._accept, args=(self.listener, port), daemon=True).start()
        return port

    def _accept(self, listener: socket.socket, port: int) -> None:
        while not self.stopped.is_set():
            try:
                sock, peer = listener.accept()
            except OSError:
                return  # closed on stop
            try:
                chan = self.ssh.open_channel("direct-tcpip", ("127.0.0.1", port), peer)
            except (OSError, EOFError, paramiko.SSHException):
                sock.close()
                continue
            self._spawn(sock, chan)

    def close(self) -> None:
        self.stopped.set()
        if self.listener is not None:
            self.listener.close()
        if self.remote_port is not None and self.ssh.is_active():
            with contextlib.suppress(paramiko.SSHException, EOFError, OSError):
                self.ssh.cancel_port_forward("127.0.0.1", self.remote_port)


def _pick_port(transport: SSHTransport, forwards: _Forwards, python: str) -> int:
    """A port free on the host's loopback (bound at once) and on the device's."""
    probe = ("import socket,sys; s=socket.socket(); "
             "s.bind(('127.0.0.1', int(sys.argv[1])))")
    for _ in range(_PORT_TRIES):
        port = forwards.listen()
        if transport.run([python, "-c", probe, str(port)], check=False, timeout=30).ok:
            return port
        assert forwards.listener is not None
        forwards.listener.close()
    raise TransportError(f"found no port free on both loopbacks in {_PORT_TRIES} tries",
                         device=transport.device.name,
                         hint="does the device share this machine's loopback? the forward "
                              "needs a device with its own network")


def _registered(tracker: tuple[str, int], key: str, port: int) -> bool:
    from farm.routes.tvm import api_rpc

    summary = api_rpc.tracker_summary(*tracker)
    return any(s["key"].split(":", 1)[-1] == key and int(s["addr"][1]) == port
               for s in summary.get("server_info", []))


@contextmanager
def forwarded_rpc_server(transport: SSHTransport, key: str, *,
                         tracker_host: str = "127.0.0.1", tracker_port: int = DEFAULT_PORT,
                         env: Mapping[str, str] | None = None,
                         register_timeout_s: float = 30.0) -> Iterator[ForwardedServer]:
    """Run a forwarded RPC server on `transport`'s device under `key` until the block exits;
    yield once the tracker lists it. On exit the server's process group and both forwards
    are gone."""
    device = transport.device
    ssh = transport.client().get_transport()
    if ssh is None:
        raise TransportError("SSH connection is not open", device=device.name)
    forwards = _Forwards(ssh, (tracker_host, tracker_port))
    process: SSHProcess | None = None
    server_pgid = 0
    try:
        remote_tracker = forwards.open_remote()
        port = _pick_port(transport, forwards, device.python)
        server_argv = rpc_server_argv(key, tracker=f"127.0.0.1:{remote_tracker}", port=port,
                                      python=device.python, custom_addr="127.0.0.1")
        process = transport.start([device.python, "-c", _WATCHDOG, *server_argv], env=env)
        try:
            first = process.read_line(timeout=30)
        except EOFError:
            first = None
        if first is None or not first.strip().isdigit():
            raise TransportError(f"the RPC server watchdog did not start: {first!r} "
                                 f"{process.stderr_tail()}", device=device.name)
        server_pgid = int(first)
        server = ForwardedServer(device.name, key, port, remote_tracker, server_pgid, process)
        deadline = time.monotonic() + register_timeout_s
        while not _registered((tracker_host, tracker_port), key, port):
            if not server.alive() or time.monotonic() > deadline:
                why = "exited" if not server.alive() else f"waited {register_timeout_s} s"
                raise TransportError(
                    f"RPC server {key} on {device.name} did not register with the tracker "
                    f"{tracker_host}:{tracker_port} ({why}): "
                    f"{server.log_tail()[-800:]}", device=device.name,
                    hint=f"can `{device.python}` import tvm on the device?")
            time.sleep(0.2)
        yield server
    finally:
        if process is not None:
            process.close(timeout=10)  # EOF on the watchdog's stdin: it kills the group
            if process.exit_status() == -1 and server_pgid:  # the watchdog did not answer
                with contextlib.suppress(TransportError):
                    transport.run(["kill", "-KILL", "--", f"-{server_pgid}"], check=False)
        forwards.close()
