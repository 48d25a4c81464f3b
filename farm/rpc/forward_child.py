"""`farm.rpc.forward`'s forwarded RPC server, owned by a child process.

TVM's RPC client blocks inside C while holding the GIL, so forwarding threads in the same
process as a TVM client starve and its session deadlocks. A process that is a client (a
test, a bench) therefore uses `forwarded_rpc_server_process(device, key, ...)`: the forwards
live in a child (`python -m farm.rpc.forward_child`) that reads its job as one JSON line on
stdin, answers one JSON line on stdout ({"port", "tracker_port", "pgid", ...} or {"error",
"hint"}), and tears everything down when its stdin closes (also when the parent dies).

`start_detached_forward(device, key, ...)` starts the same child in its own session for
`farm deploy --rpc-server --detach`: it outlives the CLI, is recorded with the tracker's RPC
servers (`.farm/tracker/servers/`) so `farm tracker stop` stops it, and on SIGTERM tears the
forwards and the device's server down the same way.
"""

from __future__ import annotations

import contextlib
import json
import os
import select
import signal
import subprocess
import sys
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path

from farm.errors import FarmError, TransportError
from farm.inventory.device import Device, device_from_fields
from farm.rpc.forward import forwarded_rpc_server
from farm.rpc.procs import ServiceProcess, stop_group
from farm.rpc.tracker import DEFAULT_PORT, tracker_dir
from farm.transports.ssh import SSHTransport


@dataclass(frozen=True)
class ForwardInfo:
    device: str
    key: str
    port: int
    tracker_port: int
    pgid: int


class ChildForward:
    """A forwarded server owned by a child process; valid inside its context manager."""

    def __init__(self, info: ForwardInfo, proc: subprocess.Popen[str]) -> None:
        self.info, self._proc = info, proc
        self.device, self.key, self.port = info.device, info.key, info.port
        self.tracker_port, self.pgid = info.tracker_port, info.pgid

    @property
    def pid(self) -> int:
        """The forwarding child's pid (host side)."""
        return self._proc.pid

    def alive(self) -> bool:
        return self._proc.poll() is None


@contextmanager
def forwarded_rpc_server_process(device: Device, key: str, *, tracker_host: str = "127.0.0.1",
                                 tracker_port: int = DEFAULT_PORT,
                                 env: Mapping[str, str] | None = None,
                                 start_timeout_s: float = 90.0) -> Iterator[ChildForward]:
    """`forwarded_rpc_server` run by a child process, for a process that is a TVM client."""
    proc = _start_child(device, key, tracker_host, tracker_port, env, detach=False)
    assert proc.stdin is not None
    try:
        yield ChildForward(_answer(proc, key, start_timeout_s), proc)
    finally:
        with contextlib.suppress(OSError):
            proc.stdin.close()
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def _start_child(device: Device, key: str, tracker_host: str, tracker_port: int,
                 env: Mapping[str, str] | None, *, detach: bool,
                 log: Path | None = None) -> subprocess.Popen[str]:
    job = {"device": asdict(device), "key": key, "tracker_host": tracker_host,
           "tracker_port": tracker_port, "env": dict(env or {}), "detach": detach}
    root = str(Path(__file__).resolve().parents[2])
    child_env = {**os.environ, "PYTHONPATH": os.pathsep.join(
        p for p in (root, os.environ.get("PYTHONPATH")) if p)}
    stderr = open(log, "ab") if log else None  # noqa: SIM115 - handed to the child
    try:
        proc = subprocess.Popen([sys.executable, "-m", "farm.rpc.forward_child"],
                                stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=stderr,
                                text=True, env=child_env, start_new_session=detach)
    finally:
        if stderr:
            stderr.close()
    assert proc.stdin is not None
    proc.stdin.write(json.dumps(job) + "\n")
    proc.stdin.flush()
    return proc


def _answer(proc: subprocess.Popen[str], key: str, start_timeout_s: float) -> ForwardInfo:
    assert proc.stdout is not None
    ready = select.select([proc.stdout], [], [], start_timeout_s)[0]
    answer = json.loads(proc.stdout.readline() or "{}") if ready else {}
    if "port" not in answer:
        raise TransportError(
            f"forwarded RPC server for {key} did not start: "
            f"{answer.get('error', f'no answer within {start_timeout_s:.0f} s')}",
            hint=answer.get("hint"))  # the child's message names the device
    return ForwardInfo(**answer)


def start_detached_forward(device: Device, key: str, *, tracker_host: str = "127.0.0.1",
                           tracker_port: int = DEFAULT_PORT,
                           start_timeout_s: float = 90.0) -> tuple[ForwardInfo, ServiceProcess]:
    """A forwarded RPC server that outlives this process until `farm tracker stop`."""
    servers = tracker_dir() / "servers"
    servers.mkdir(parents=True, exist_ok=True)
    log = servers / f"{key}-forward-{device.name}.log"
    proc = _start_child(device, key, tracker_host, tracker_port, None, detach=True, log=log)
    try:
        info = _answer(proc, key, start_timeout_s)
    except BaseException:
        stop_group(proc.pid, 5.0)
        raise
    service = ServiceProcess(f"forwarded rpc server {key} on {device.name}", proc.pid,
                             proc.pid, "127.0.0.1", info.port, str(log),
                             tuple(str(a) for a in proc.args), time.time())
    service.save(servers / f"{key}-forward-{device.name}.json")
    for stream in (proc.stdin, proc.stdout):  # the child no longer reads or writes them
        if stream is not None:
            with contextlib.suppress(OSError):
                stream.close()
    return info, service


def _stop_on_sigterm(_signum: int, _frame: object) -> None:
    raise KeyboardInterrupt  # unwinds the `with` blocks: forwards, device server, SSH


def _child_main() -> int:
    job = json.loads(sys.stdin.readline())
    transport = SSHTransport(device_from_fields(job["device"]))
    try:
        with forwarded_rpc_server(transport, job["key"], tracker_host=job["tracker_host"],
                                  tracker_port=job["tracker_port"],
                                  env=job["env"] or None) as server:
            print(json.dumps({"device": server.device, "key": server.key, "port": server.port,
                              "tracker_port": server.tracker_port, "pgid": server.pgid}),
                  flush=True)
            if job.get("detach"):
                signal.signal(signal.SIGTERM, _stop_on_sigterm)
                while server.alive():  # until `farm tracker stop` (SIGTERM) or the server dies
                    time.sleep(1.0)
            else:
                sys.stdin.read()  # until the parent closes our stdin (or dies)
    except KeyboardInterrupt:
        return 0
    except FarmError as exc:
        with contextlib.suppress(OSError):  # a detached child's parent may be gone
            print(json.dumps({"error": exc.message, "hint": exc.hint}), flush=True)
        print(f"farm forward_child: {exc}", file=sys.stderr)
        return 1
    finally:
        transport.close()
    return 0


if __name__ == "__main__":
    sys.exit(_child_main())
