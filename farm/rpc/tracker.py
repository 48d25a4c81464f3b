"""The TVM RPC tracker farm runs: start, status, stop; state under `.farm/tracker/`.

`start_tracker(host, port)` runs `python -m tvm.exec.rpc_tracker` bound to exactly
host:port (loopback by default) in its own process group and records it in
`.farm/tracker/tracker.json`; servers farm starts are recorded in
`.farm/tracker/servers/*.json`. `stop_tracker()` stops those servers, then the tracker's
whole process group, so no `popen_worker` child is orphaned. `tracker_status()` asks the
tracker for its servers and queue (what `python -m tvm.exec.query_rpc_tracker` prints).
"""

from __future__ import annotations

import ipaddress
import sys
from pathlib import Path
from typing import Any

from farm.errors import TransportError, UsageError
from farm.paths import state_dir
from farm.process import pid_alive
from farm.rpc.procs import ServiceProcess, listeners, port_open, spawn
from farm.rpc.tvm_main import tvm_program_argv

DEFAULT_PORT = 9190


def tracker_dir() -> Path:
    return state_dir() / "tracker"


def _state_path() -> Path:
    return tracker_dir() / "tracker.json"


def tracker_state() -> ServiceProcess | None:
    """The running tracker farm started, or None (a stale state file is removed)."""
    state = ServiceProcess.load(_state_path())
    if state is None:
        return None
    if not state.alive():
        _state_path().unlink(missing_ok=True)
        return None
    return state


def start_tracker(host: str = "127.0.0.1", port: int = DEFAULT_PORT,
                  allow_public: bool = False) -> ServiceProcess:
    """Start the tracker (idempotent when one is running at the same address)."""
    if not allow_public and not ipaddress.ip_address(host).is_loopback:
        raise UsageError(f"refusing to bind the TVM RPC tracker to {host}: TVM RPC has no "
                         "authentication", hint="use 127.0.0.1 and SSH port forwards, or pass "
                                                "--allow-public if this network is trusted")
    running = tracker_state()
    if running is not None:
        if (running.host, running.port) == (host, port):
            return running
        raise UsageError(f"a tracker already runs on {running.host}:{running.port} "
                         f"(pid {running.pid})", hint="farm tracker stop")
    if port_open(host, port):
        raise TransportError(f"{host}:{port} is already in use by another process",
                             hint="pick another --port")
    argv = tvm_program_argv(sys.executable, "tvm.exec.rpc_tracker", "--host", host,
                            "--port", str(port), "--port-end", str(port + 1), "--silent")
    service = spawn("tvm rpc tracker", argv, host, port, tracker_dir() / "tracker.log")
    service.save(_state_path())
    return service


def stop_tracker() -> bool:
    """Stop farm's RPC servers and the tracker; False when none was running."""
    for path in sorted((tracker_dir() / "servers").glob("*.json")):
        server = ServiceProcess.load(path)
        if server is not None:
            server.stop()
        path.unlink(missing_ok=True)
    state = tracker_state()
    if state is None:
        return False
    state.stop()
    _state_path().unlink(missing_ok=True)
    return True


def tracker_status(host: str | None = None, port: int | None = None) -> dict[str, Any]:
    """{"host", "port", "pid", "started_pid", "started_alive", "servers": [{"key", "addr"}],
    "queue": {key: {free, pending}}}. `pid` is the process that listens on the port (TVM's
    `popen_worker` child), `started_pid` the one farm started (it may be gone while its
    child serves on). A tracker farm recorded that no process listens for any more is a
    TransportError (its processes were killed), never a status naming a dead pid."""
    from farm.routes.tvm import api_rpc

    state = tracker_state()
    if host is None or port is None:
        if state is None:
            raise TransportError("no tracker is running", hint="farm tracker start")
        host, port = state.host, state.port
    if state is not None and (host, port) != (state.host, state.port):
        state = None  # another tracker (a device's own): farm's record says nothing of it
    serving = listeners(port, state.pgid) if state else None
    if state is not None and serving == []:
        raise TransportError(
            f"the tracker farm started on {host}:{port} (process group {state.pgid}) no "
            "longer listens: its processes were killed or exited",
            hint="`farm tracker stop` clears what is left, then `farm tracker start`")
    summary = api_rpc.tracker_summary(host, port)
    servers = [{"key": s["key"].split(":", 1)[-1], "addr": f"{s['addr'][0]}:{s['addr'][1]}"}
               for s in summary.get("server_info", [])]
    queue = {k: {"free": v.get("free", 0), "pending": v.get("pending", 0)}
             for k, v in summary.get("queue_info", {}).items()}
    return {"host": host, "port": port, "pid": serving[0] if serving else None,
            "started_pid": state.pid if state else None,
            "started_alive": pid_alive(state.pid) if state else None,
            "servers": sorted(servers, key=lambda s: (s["key"], s["addr"])), "queue": queue}
