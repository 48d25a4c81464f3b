"""`farm tracker start|status|stop|serve` — the TVM RPC tracker farm runs (loopback only).

start: run `tvm.exec.rpc_tracker` in its own process group, state in .farm/tracker/.
status: servers and queue per key (like `python -m tvm.exec.query_rpc_tracker`).
stop: stop farm's RPC servers and the tracker's whole process group.
serve: start a local RPC server registering with the tracker under --key.
"""

from __future__ import annotations

import argparse
import json

from rich.console import Console
from rich.table import Table

from farm.rpc import start_rpc_server, start_tracker, stop_tracker, tracker_status
from farm.rpc.tracker import DEFAULT_PORT, tracker_state


def register(sub: argparse._SubParsersAction) -> None:
    parser = sub.add_parser("tracker", help="TVM RPC tracker: start, status, stop, serve")
    actions = parser.add_subparsers(dest="action", metavar="ACTION", required=True)
    start = actions.add_parser("start", help="start the tracker (loopback by default)")
    start.add_argument("--host", default="127.0.0.1")
    start.add_argument("--port", type=int, default=DEFAULT_PORT)
    start.add_argument("--allow-public", action="store_true",
                       help="allow a non-loopback bind (TVM RPC has no authentication)")
    start.set_defaults(func=run_start)
    status = actions.add_parser("status", help="servers and queue per key")
    status.add_argument("--output", choices=["table", "json"], default="table")
    status.set_defaults(func=run_status)
    stop = actions.add_parser("stop", help="stop farm's RPC servers and the tracker")
    stop.set_defaults(func=run_stop)
    serve = actions.add_parser("serve", help="start a local RPC server registered under a key")
    serve.add_argument("--key", required=True)
    serve.add_argument("--port", type=int, default=None, help="server port (default: free one)")
    serve.set_defaults(func=run_serve)


def run_start(args: argparse.Namespace) -> int:
    state = start_tracker(args.host, args.port, allow_public=args.allow_public)
    print(f"tracker listening on {state.host}:{state.port} (pid {state.pid}, log {state.log})")
    return 0


def run_status(args: argparse.Namespace) -> int:
    status = tracker_status()
    if args.output == "json":
        print(json.dumps(status, indent=2))
        return 0
    console = Console()
    who = f"pid {status['pid']}" if status["pid"] else "pid unknown"
    if status["started_pid"] and status["started_pid"] != status["pid"]:
        who += (f"; started as pid {status['started_pid']}" if status["started_alive"] else
                f"; pid {status['started_pid']} it was started as is gone")
    console.print(f"tracker {status['host']}:{status['port']} ({who})", markup=False)
    servers = Table(title="servers")
    servers.add_column("key")
    servers.add_column("address")
    for server in status["servers"]:
        servers.add_row(server["key"], server["addr"])
    console.print(servers)
    queue = Table(title="queue")
    for column in ("key", "total", "free", "pending"):
        queue.add_column(column)
    totals: dict[str, int] = {}
    for server in status["servers"]:
        totals[server["key"]] = totals.get(server["key"], 0) + 1
    for key, info in sorted(status["queue"].items()):
        if totals.get(key) or info["pending"]:
            queue.add_row(key, str(totals.get(key, 0)), str(info["free"]), str(info["pending"]))
    console.print(queue)
    return 0


def run_stop(args: argparse.Namespace) -> int:
    print("tracker stopped" if stop_tracker() else "no tracker was running")
    return 0


def run_serve(args: argparse.Namespace) -> int:
    state = tracker_state()
    if state is None:
        from farm.errors import TransportError
        raise TransportError("no tracker is running", hint="farm tracker start")
    server = start_rpc_server(args.key, tracker_host=state.host, tracker_port=state.port,
                              port=args.port)
    print(f"RPC server {args.key!r} on 127.0.0.1:{server.port} (pid {server.pid}) "
          f"registered with {state.host}:{state.port}")
    return 0
