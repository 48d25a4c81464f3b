"""`farm.rpc.forward`'s forwarded RPC server, owned by a child process.

TVM's RPC client blocks inside C while holding the GIL, so forwarding threads in the same
process as a TVM client starve and its session deadlocks. A process that is a client (a
test, a bench) therefore uses `forwarded_rpc_server_process(device, key, ...)`: the forwards
live in a child (`python -m farm.rpc.forward_child`) that reads its job as one JSON line on
stdin, answers one JSON line on stdout ({"port", "tracker_port", "pgid", ...} or {"error",
"hint"}), and tears everything down when its stdin closes (also when the parent dies).
"""

from __future__ import annotations

import contextlib
import json
import os
import select
import subprocess
import sys
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path

from farm.errors import FarmError, TransportError
from farm.inventory.device import Device
from farm.rpc.forward import forwarded_rpc_server
from farm.rpc.tracker import DEFAULT_PORT
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
    job = {"device": asdict(device), "key": key, "tracker_host": tracker_host,
           "tracker_port": tracker_port, "env": dict(env or {})}
    root = str(Path(__file__).resolve().parents[2])
    child_env = {**os.environ, "PYTHONPATH": os.pathsep.join(
        p for p in (root, os.environ.get("PYTHONPATH")) if p)}
    proc = subprocess.Popen([sys.executable, "-m", "farm.rpc.forward_child"], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, text=True, env=child_env)
    assert proc.stdin is not None and proc.stdout is not None
    try:
        proc.stdin.write(json.dumps(job) + "\n")
        proc.stdin.flush()
        ready = select.select([proc.stdout], [], [], start_timeout_s)[0]
        answer = json.loads(proc.stdout.readline() or "{}") if ready else {}
        if "port" not in answer:
            raise TransportError(
                f"forwarded RPC server for {key} did not start: "
                f"{answer.get('error', f'no answer within {start_timeout_s:.0f} s')}",
                hint=answer.get("hint"))  # the child's message names the device
        yield ChildForward(ForwardInfo(**answer), proc)
    finally:
        with contextlib.suppress(OSError):
            proc.stdin.close()
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def _child_main() -> int:
    job = json.loads(sys.stdin.readline())
    fields = job["device"]
    fields.update(features=tuple(fields["features"]), tags=tuple(fields["tags"]))
    transport = SSHTransport(Device(**fields))
    try:
        with forwarded_rpc_server(transport, job["key"], tracker_host=job["tracker_host"],
                                  tracker_port=job["tracker_port"],
                                  env=job["env"] or None) as server:
            print(json.dumps({"device": server.device, "key": server.key, "port": server.port,
                              "tracker_port": server.tracker_port, "pgid": server.pgid}),
                  flush=True)
            sys.stdin.read()  # until the parent closes our stdin (or dies)
    except FarmError as exc:
        print(json.dumps({"error": exc.message, "hint": exc.hint}), flush=True)
        return 1
    finally:
        transport.close()
    return 0


if __name__ == "__main__":
    sys.exit(_child_main())
