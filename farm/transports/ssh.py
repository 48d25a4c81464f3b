"""The `ssh` transport: paramiko with a strict host-key policy.

Host keys are checked against the device's `known_hosts` file (default
~/.ssh/known_hosts) with `RejectPolicy`: an unknown or changed key is a
`HostKeyError` pointing at `farm devices trust NAME`, never a silent accept.
Connection setup is retried once when the failure may pass (refused, reset, no answer;
`ssh_endpoint` names each case in one line and keeps paramiko's log off the terminal);
commands are never retried (a measurement must not be silently repeated into the same
result). A device with a gateway (`via`) runs its session over a channel through the
gateway's own `SSHTransport` (`ssh_jump`); both hops' keys are checked.
"""

from __future__ import annotations

import socket
import threading
import time
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

import paramiko

from farm import followup
from farm.errors import HostKeyError, TransportError
from farm.inventory.device import Device
from farm.transports.base import (
    LINE_CAP_BYTES,
    QueuedProcess,
    RunResult,
    Transport,
    command_line,
    copy_capped,
)
from farm.transports.sftp_upload import upload
from farm.transports.ssh_endpoint import (
    EndpointFailure,
    RecordingSocket,
    handshake_failure,
    open_socket,
    quiet_paramiko,
)
from farm.transports.ssh_jump import gateway_error, open_channel

CONNECT_TIMEOUT_S = 10.0
# AES-GCM first: its tag comes with the cipher, while the CTR modes add a separate
# HMAC-SHA2 pass. On this host `cryptography` alone: aes128-ctr + hmac-sha2-256 ~0.74 s per
# GB, aes128-gcm ~0.09 s; a whole farm upload (benchmarks/deploy_scale.py's cipher check,
# one run, load ~17): 0.41 CPU s per 100 MB with aes128-ctr, 0.32 aes128-gcm, 0.26
# aes256-gcm. Servers without GCM negotiate the next one of paramiko's list.
PREFERRED_CIPHERS = ("aes128-gcm@openssh.com", "aes256-gcm@openssh.com")
# our receive window per channel (paramiko's default is 2 MiB): outputs and agent lines
# come back without waiting for window adjustments
WINDOW_BYTES = 16 << 20
CONNECT_BUDGET_S = 20.0  # connection setup: the one retry starts only within this time
RETRY_DELAY_S = 1.0  # before the one retry of a refused / reset / unanswered connect

quiet_paramiko()


def known_hosts_path(device: Device) -> Path:
    return Path(device.known_hosts or Path.home() / ".ssh" / "known_hosts").expanduser()


def host_key_name(device: Device) -> str:
    """The name a known_hosts line uses for this device ([host]:port unless port 22)."""
    assert device.host
    return device.host if device.port == 22 else f"[{device.host}]:{device.port}"


class SSHProcess(QueuedProcess):
    """A remote command on its own channel; lines are pumped by a reader thread."""

    def __init__(self, channel: paramiko.Channel, device: str) -> None:
        self._channel = channel
        self._device = device
        super().__init__()
        self._stderr: deque[bytes] = deque(maxlen=64)
        self._status: int | None = None
        threading.Thread(target=self._pump, daemon=True).start()

    def _pump(self) -> None:
        buffer = b""
        skipping = False
        channel = self._channel
        try:
            while True:
                if channel.recv_stderr_ready():
                    self._stderr.append(channel.recv_stderr(65536))
                if channel.recv_ready():
                    chunk = channel.recv(65536)
                    if not chunk:
                        break
                    buffer += chunk
                    *complete, buffer = buffer.split(b"\n")
                    for raw in complete:
                        if skipping:  # the end of an over-long line already cut
                            skipping = False
                            continue
                        self._lines.put(raw.decode(errors="replace"))
                    if len(buffer) > LINE_CAP_BYTES:
                        if not skipping:
                            self._lines.put(buffer[:LINE_CAP_BYTES + 1].decode(errors="replace"))
                        buffer, skipping = b"", True
                    continue
                if channel.exit_status_ready() and not channel.recv_ready():
                    while channel.recv_stderr_ready():
                        self._stderr.append(channel.recv_stderr(65536))
                    break
                if channel.closed or not channel.get_transport() \
                        or not channel.get_transport().is_active():
                    break
                time.sleep(0.005)
        except (OSError, EOFError, paramiko.SSHException):
            pass
        if buffer:
            self._lines.put(buffer.decode(errors="replace"))
        self._lines.put(None)

    def write_line(self, line: str) -> None:
        try:
            self._channel.sendall((line + "\n").encode())
        except (OSError, EOFError, paramiko.SSHException) as exc:
            raise TransportError(f"channel closed: {exc}", device=self._device) from exc

    def stderr_tail(self) -> str:
        return b"".join(self._stderr).decode(errors="replace")[-4096:]

    def exit_status(self) -> int | None:
        if self._channel.exit_status_ready():
            return self._channel.recv_exit_status()
        if self._channel.closed:
            return -1
        return None

    def close(self, timeout: float = 5.0) -> None:
        try:
            self._channel.shutdown_write()  # EOF on the agent's stdin: it exits by itself
            deadline = time.monotonic() + timeout
            while not self._channel.exit_status_ready() and time.monotonic() < deadline:
                time.sleep(0.02)
        except (OSError, EOFError, paramiko.SSHException):
            pass
        self._channel.close()


class SSHTransport(Transport):
    """Opens lazily on first use; one paramiko client per device."""

    def __init__(self, device: Device, *, connect_budget_s: float = CONNECT_BUDGET_S) -> None:
        super().__init__(device)
        self._client: paramiko.SSHClient | None = None
        self._sftp: paramiko.SFTPClient | None = None
        self._budget = connect_budget_s
        self._lock = threading.Lock()
        # the transport of the device's gateway (`via`), connected when this one connects;
        # its own gateway, if any, nests inside it (farm/transports/ssh_jump.py)
        self._gateway = (SSHTransport(device.gateway, connect_budget_s=connect_budget_s)
                         if device.gateway is not None else None)

    # -- connection ---------------------------------------------------------------
    def client(self) -> paramiko.SSHClient:
        with self._lock:
            if self._client is None or not self._is_active():
                self._client = self._connect()
            return self._client

    def _is_active(self) -> bool:
        transport = self._client.get_transport() if self._client else None
        return bool(transport and transport.is_active())

    def _connect(self) -> paramiko.SSHClient:
        """Connect, retrying once what may pass (refused, reset, no answer): a device that
        reboots or an sshd being restarted; a wrong port or a host that is off fails at
        once instead of after the whole budget (`ssh_endpoint`'s docstring)."""
        deadline = time.monotonic() + self._budget
        try:
            return self._connect_once()
        except EndpointFailure as exc:
            if not exc.transient or time.monotonic() + RETRY_DELAY_S >= deadline:
                raise
        time.sleep(RETRY_DELAY_S)
        return self._connect_once()

    def _connect_once(self) -> paramiko.SSHClient:
        device = self.device
        assert device.host
        started = time.monotonic()
        sock = RecordingSocket(self.open_stream())  # type: ignore[arg-type]
        client = paramiko.SSHClient()
        hosts = known_hosts_path(device)
        if hosts.is_file():
            client.load_host_keys(str(hosts))
        client.set_missing_host_key_policy(paramiko.RejectPolicy())
        try:
            client.connect(
                device.host, port=device.port, username=device.user or "root",
                key_filename=device.identity_file, timeout=CONNECT_TIMEOUT_S,
                banner_timeout=CONNECT_TIMEOUT_S, auth_timeout=CONNECT_TIMEOUT_S,
                allow_agent=False, look_for_keys=device.identity_file is None,
                transport_factory=_fast_transport, sock=sock,  # type: ignore[arg-type]
            )
            return client
        except paramiko.BadHostKeyException as exc:
            client.close()
            trust = followup.command("devices", "trust", device.name)
            raise HostKeyError(
                f"host key CHANGED for {host_key_name(device)} (pinned in {hosts}); "
                f"presented {exc.key.get_name()} {fingerprint(exc.key)}",
                device=device.name,
                hint=f"if the device was re-imaged on purpose, run `{trust}` to re-pin; "
                     "otherwise stop: someone may be intercepting the connection") from None
        except paramiko.AuthenticationException:
            client.close()
            raise TransportError(
                f"authentication failed as {device.user or 'root'}",
                device=device.name,
                hint="check `user` and `identity_file` in the inventory") from None
        except paramiko.SSHException as exc:
            client.close()
            if "not found in known_hosts" in str(exc):
                trust = followup.command("devices", "trust", device.name)
                raise HostKeyError(
                    f"host key of {host_key_name(device)} is not in {hosts}",
                    device=device.name,
                    hint=f"run `{trust}` to see its fingerprint and pin it") from None
            raise handshake_failure(sock, exc, host=device.host, port=device.port,
                                    started=started, device=device.name) from None
        except (OSError, EOFError) as exc:
            client.close()
            raise handshake_failure(sock, exc, host=device.host, port=device.port,
                                    started=started, device=device.name) from None

    def open_stream(self) -> socket.socket | paramiko.Channel:
        """The byte stream the device's SSH session runs over: a TCP connection, or a
        channel through the gateway (ssh_jump's docstring)."""
        device = self.device
        assert device.host
        if self._gateway is None:
            return open_socket(device.host, device.port, CONNECT_TIMEOUT_S, device.name)
        try:
            gateway = self._gateway.client().get_transport()
        except TransportError as exc:
            raise gateway_error(device, exc) from None
        assert gateway is not None
        return open_channel(gateway, device, CONNECT_TIMEOUT_S)

    def lost_link(self) -> str | None:
        """Why the connection is gone when a gateway on the way dropped it, else None."""
        gateway = self._gateway
        if gateway is None:
            return None
        deeper = gateway.lost_link()
        if deeper is not None:
            return deeper
        if gateway._client is not None and not gateway._is_active():
            return f"gateway {gateway.device.name!r} dropped the connection"
        return None

    def _failed(self, message: str) -> TransportError:
        """A failed operation's error, saying so when a gateway on the way dropped."""
        dropped = self.lost_link()
        return TransportError(f"{message} ({dropped})" if dropped else message,
                              device=self.device.name)

    # -- interface ------------------------------------------------------------------
    def run(self, argv: Sequence[str], *, timeout: float | None = 60.0, check: bool = True,
            env: Mapping[str, str] | None = None, stdin: bytes | None = None) -> RunResult:
        line = command_line(argv, env)
        try:
            transport = self.client().get_transport()
            assert transport is not None
            # the channel itself, not SSHClient.exec_command's three file objects: those
            # were left to the garbage collector, and a ChannelStdinFile finalised by a
            # collection that runs on paramiko's transport thread while it holds the
            # channel's lock calls shutdown_write() and waits on that lock forever (paramiko
            # 5.1.0; CI hung in Transport.open_session once, py-spy showed both stacks)
            channel = transport.open_session(timeout=timeout)
            try:
                channel.settimeout(timeout)
                channel.exec_command(line)
                if stdin is not None:
                    channel.sendall(stdin)
                channel.shutdown_write()
                out = _drain(channel.recv).decode(errors="replace")
                err = _drain(channel.recv_stderr).decode(errors="replace")
                # a command that closed its output and runs on: the timeout holds here too
                if not channel.status_event.wait(timeout):
                    raise TimeoutError(f"no exit status within {timeout} s")
                status = channel.recv_exit_status()
            finally:
                channel.close()
        except (OSError, EOFError, paramiko.SSHException, TimeoutError) as exc:
            raise self._failed(f"running {argv[0]!r} failed: {type(exc).__name__}: {exc}"
                               ) from None
        result = RunResult(tuple(argv), status, out, err)
        if check and not result.ok:
            raise TransportError(f"command {argv[0]!r} exited {status}: {err.strip()[-500:]}",
                                 device=self.device.name)
        return result

    def start(self, argv: Sequence[str], *, env: Mapping[str, str] | None = None) -> SSHProcess:
        try:
            transport = self.client().get_transport()
            assert transport is not None
            channel = transport.open_session()
            channel.exec_command(command_line(argv, env))
        except (OSError, EOFError, paramiko.SSHException) as exc:
            raise self._failed(f"cannot start {argv[0]!r}: {exc}") from None
        return SSHProcess(channel, self.device.name)

    def sftp(self) -> paramiko.SFTPClient:
        if self._sftp is None or self._sftp.sock.closed:
            self._sftp = self.client().open_sftp()
        return self._sftp

    def put(self, local: Path, remote: str,
            callback: Callable[[int, int], None] | None = None, *, offset: int = 0,
            stop: Callable[[], bool] | None = None) -> None:
        try:
            upload(self.sftp(), Path(local), remote, offset=offset, callback=callback,
                   stop=stop)
        except (OSError, EOFError, paramiko.SSHException) as exc:
            raise self._failed(f"upload to {remote} failed: {exc}") from None

    def get(self, remote: str, local: Path, *, max_bytes: int | None = None) -> None:
        try:
            if max_bytes is None:
                self.sftp().get(remote, str(local))
                return
            # read as a stream with a cap: sftp.get trusts the size the device reports
            with self.sftp().open(remote, "rb") as src, open(local, "wb") as dst:
                copy_capped(src, dst, max_bytes, remote, self.device.name)
        except (OSError, EOFError, paramiko.SSHException) as exc:
            raise self._failed(f"download of {remote} failed: {exc}") from None

    def close(self) -> None:
        if self._sftp is not None:
            self._sftp.close()
            self._sftp = None
        if self._client is not None:
            self._client.close()
            self._client = None
        if self._gateway is not None:
            self._gateway.close()


def _drain(receive: Callable[[int], bytes]) -> bytes:
    """Everything a channel stream sends until its end (b"" from recv once EOF came)."""
    chunks = []
    while chunk := receive(1 << 16):
        chunks.append(chunk)
    return b"".join(chunks)


def _fast_transport(sock: socket.socket, **kwargs: object) -> paramiko.Transport:
    """paramiko's Transport with GCM ciphers first and a larger receive window."""
    transport = paramiko.Transport(sock, default_window_size=WINDOW_BYTES,  # type: ignore[arg-type]
                                   **kwargs)  # type: ignore[arg-type]
    options = transport.get_security_options()
    offered = tuple(options.ciphers)
    options.ciphers = (*[c for c in PREFERRED_CIPHERS if c in offered],
                       *[c for c in offered if c not in PREFERRED_CIPHERS])
    return transport


def fingerprint(key: paramiko.PKey) -> str:
    """OpenSSH-style SHA256 fingerprint."""
    import base64
    import hashlib
    digest = hashlib.sha256(key.asbytes()).digest()
    return "SHA256:" + base64.b64encode(digest).decode().rstrip("=")
