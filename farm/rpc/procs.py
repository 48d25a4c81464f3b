"""Long-running helper processes in their own process group, with readiness and clean stop.

TVM's tracker and RPC server each fork a `popen_worker` child that keeps listening when only
the parent is killed, so a `ServiceProcess` is started with `start_new_session=True` and
stopped by signalling the whole group (SIGTERM, then SIGKILL after a grace period) until the
group is empty. Its state (pid, pgid, address) is a small JSON file so another `farm`
invocation can find and stop it.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

from farm.errors import TransportError


@dataclass(frozen=True)
class ServiceProcess:
    name: str
    pid: int
    pgid: int
    host: str
    port: int
    log: str
    argv: tuple[str, ...] = ()
    started_at: float = 0.0

    def alive(self) -> bool:
        return group_alive(self.pgid)

    def save(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(asdict(self), indent=1))
        tmp.replace(path)

    @classmethod
    def load(cls, path: Path) -> ServiceProcess | None:
        try:
            data = json.loads(path.read_text())
            data["argv"] = tuple(data.get("argv", ()))
            return cls(**data)
        except (OSError, ValueError, TypeError):
            return None

    def stop(self, grace_s: float = 5.0) -> None:
        stop_group(self.pgid, grace_s)


def group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def stop_group(pgid: int, grace_s: float = 5.0) -> None:
    """SIGTERM the group, SIGKILL what is left after `grace_s`; return when it is empty."""
    for sig, wait_s in ((signal.SIGTERM, grace_s), (signal.SIGKILL, 5.0)):
        try:
            os.killpg(pgid, sig)
        except ProcessLookupError:
            return
        deadline = time.monotonic() + wait_s
        while time.monotonic() < deadline:
            _reap(pgid)
            if not group_alive(pgid):
                return
            time.sleep(0.05)
    if group_alive(pgid):
        raise TransportError(f"process group {pgid} survived SIGKILL")


def _reap(leader: int) -> None:
    """Collect the group leader if it is our child (a zombie still counts as a member).
    Only that pid: waiting on any child would steal other subprocesses' exit statuses."""
    with contextlib.suppress(ChildProcessError):
        os.waitpid(leader, os.WNOHANG)


def listeners(port: int, pgid: int) -> list[int] | None:
    """Pids of group `pgid` that hold a listening TCP socket on `port` ([] if none does);
    None when /proc cannot tell (not Linux). TVM's tracker listens in its `popen_worker`
    child, not in the process farm started, so the started pid is not the one to name."""
    inodes: set[str] = set()
    try:
        for table in ("/proc/net/tcp", "/proc/net/tcp6"):
            with contextlib.suppress(FileNotFoundError):
                for line in Path(table).read_text().splitlines()[1:]:
                    cols = line.split()
                    if len(cols) > 9 and cols[3] == "0A" and \
                            int(cols[1].rsplit(":", 1)[1], 16) == port:
                        inodes.add(f"socket:[{cols[9]}]")
        pids = [int(d.name) for d in Path("/proc").iterdir() if d.name.isdigit()]
    except (OSError, ValueError):
        return None
    found = []
    for pid in pids:
        with contextlib.suppress(OSError, ValueError, IndexError):
            stat = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[-1].split()
            if int(stat[2]) != pgid or stat[0] == "Z":
                continue
            if any(os.readlink(fd) in inodes for fd in Path(f"/proc/{pid}/fd").iterdir()):
                found.append(pid)
    return found


def port_open(host: str, port: int) -> bool:
    try:
        with socket.create_connection((host, port), timeout=0.5):
            return True
    except OSError:
        return False


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket() as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


def spawn(name: str, argv: list[str], host: str, port: int, log: Path,
          ready_timeout_s: float = 30.0, env: dict[str, str] | None = None,
          ready: Callable[[], bool] | None = None) -> ServiceProcess:
    """Start `argv` in a new session; wait until `ready()` (default: it accepts TCP on
    host:port). A TVM RPC server must not be probed by connecting: a connection that sends no
    RPC magic makes it drop and redo its tracker registration, so it passes its own `ready`."""
    is_ready = ready or (lambda: port_open(host, port))
    log.parent.mkdir(parents=True, exist_ok=True)
    with open(log, "ab") as out:
        proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=out, stderr=out,
                                start_new_session=True, env=env)
    service = ServiceProcess(name, proc.pid, proc.pid, host, port, str(log), tuple(argv),
                             time.time())
    deadline = time.monotonic() + ready_timeout_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            stop_group(proc.pid, 1.0)
            tail = log.read_text(errors="replace")[-800:]
            raise TransportError(f"{name} exited with status {proc.returncode} before "
                                 f"listening on {host}:{port}; log {log}:\n{tail}",
                                 hint="is the port already in use?")
        if is_ready():
            return service
        time.sleep(0.1)
    stop_group(proc.pid, 1.0)
    raise TransportError(f"{name} on {host}:{port} was not ready within {ready_timeout_s} s "
                         f"({'its own check' if ready else 'not accepting TCP'}); log: {log}")
