"""TVM RPC servers that register with a tracker under a key.

`rpc_server_argv(...)` is the command line (for a local process or for a device through a
transport); `start_rpc_server(key, ...)` runs one here, in its own process group, recorded
under `.farm/tracker/servers/` so `farm tracker stop` stops it too. The server binds
loopback; `custom_addr` is the address it reports to the tracker (for port forwards).
"""

from __future__ import annotations

import re
import sys

from farm.errors import TransportError, UsageError
from farm.rpc.procs import ServiceProcess, free_port, spawn
from farm.rpc.tracker import DEFAULT_PORT, tracker_dir
from farm.rpc.tvm_main import tvm_program_argv


def rpc_server_argv(key: str, *, tracker: str = f"127.0.0.1:{DEFAULT_PORT}",
                    host: str = "127.0.0.1", port: int = 9090, python: str = sys.executable,
                    custom_addr: str | None = None) -> list[str]:
    if not re.fullmatch(r"[A-Za-z0-9_.\-]+", key):
        raise UsageError(f"RPC key {key!r} may only hold letters, digits, '_', '.', '-'")
    argv = tvm_program_argv(python, "tvm.exec.rpc_server", "--host", host, "--port", str(port),
                            "--port-end", str(port + 1), "--tracker", tracker, "--key", key,
                            "--silent")
    if custom_addr:
        argv += ["--custom-addr", custom_addr]
    return argv


def start_rpc_server(key: str, *, tracker_host: str = "127.0.0.1",
                     tracker_port: int = DEFAULT_PORT, port: int | None = None,
                     env: dict[str, str] | None = None,
                     register_timeout_s: float = 20.0) -> ServiceProcess:
    """Start a local RPC server for `key`; return once the tracker lists it."""
    from farm.routes.tvm import api_rpc

    port = port or free_port()
    argv = rpc_server_argv(key, tracker=f"{tracker_host}:{tracker_port}", port=port)
    servers = tracker_dir() / "servers"
    def registered() -> bool:
        try:
            summary = api_rpc.tracker_summary(tracker_host, tracker_port)
        except TransportError:
            return False  # the tracker restarting: keep waiting until the deadline
        return any(s["key"].split(":", 1)[-1] == key and int(s["addr"][1]) == port
                   for s in summary.get("server_info", []))

    try:
        service = spawn(f"tvm rpc server {key}", argv, "127.0.0.1", port,
                        servers / f"{key}-{port}.log", env=env,
                        ready_timeout_s=register_timeout_s, ready=registered)
    except TransportError as exc:
        raise TransportError(f"RPC server {key} on port {port} did not register with the "
                             f"tracker {tracker_host}:{tracker_port}: {exc}",
                             hint=exc.hint) from exc
    service.save(servers / f"{key}-{port}.json")
    return service
