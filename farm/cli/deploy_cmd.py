"""`farm deploy` — push the agent and artifacts to devices, in parallel, with progress.

`farm deploy --rpc-server --key K --device NAME` instead runs a TVM RPC server on the SSH
device NAME, registered with farm's tracker under K through SSH port forwards (nothing
listens beyond loopback), in the foreground until Ctrl-C (see farm/rpc/forward.py), or with
--detach in the background until `farm tracker stop`.
"""

from __future__ import annotations

import argparse
import json
import threading
import time

from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, DownloadColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from farm.deploy import DeployResult, deploy
from farm.errors import EXIT_PARTIAL, UsageError
from farm.inventory import load_inventory
from farm.inventory.device import Device


def register(sub: argparse._SubParsersAction) -> None:
    parser = sub.add_parser("deploy", help="push the agent, runners and built artifacts")
    parser.add_argument("--device", action="append", dest="devices", metavar="NAME",
                        help="device to deploy to (repeatable; default: local)")
    parser.add_argument("--all", action="store_true", help="every device of the inventory")
    parser.add_argument("--model", help="ship only what was built from this model (a preset or "
                                        ".onnx path, as in `farm build`) instead of every build")
    parser.add_argument("--variant", default="fp32",
                        help="variant of --model: fp32 | int8-dynamic | int8-qdq | int4")
    parser.add_argument("--output", choices=["table", "json"], default="table")
    parser.add_argument("--rpc-server", action="store_true",
                        help="run a TVM RPC server on --device, registered with the tracker "
                             "through SSH port forwards, until Ctrl-C")
    parser.add_argument("--key", help="tracker key of the --rpc-server")
    parser.add_argument("--detach", action="store_true",
                        help="with --rpc-server: return once registered and keep the server "
                             "(and its SSH forwards) running until `farm tracker stop`")
    parser.add_argument("--tracker-port", type=int, default=None,
                        help="tracker port on 127.0.0.1 (default: the tracker farm runs)")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    if args.rpc_server:
        return run_rpc_server(args)
    inventory = load_inventory(args.inventory)
    devices = [d for d in inventory.select(args.devices, args.all) if d.transport != "tvm-rpc"]
    model_sha = _built_model_sha(args.model, args.variant, devices) if args.model else None
    console = Console(stderr=True)
    lock = threading.Lock()
    with Progress(TextColumn("{task.description:<12}"), BarColumn(), DownloadColumn(),
                  TextColumn("{task.fields[status]}"), TimeElapsedColumn(),
                  console=console, transient=False, disable=not console.is_terminal) as bar:
        tasks = {d.name: bar.add_task(d.name, total=None, status="queued") for d in devices}

        def progress(device: str, done: int, total: int, status: str) -> None:
            with lock:
                bar.update(tasks[device], completed=done, total=total or None, status=status)

        results = deploy(devices, progress, model_sha)
    if args.output == "json":
        print(json.dumps([vars(r) for r in results.values()], indent=2))
    else:
        Console().print(render_summary(list(results.values())))
    failed = [r for r in results.values() if not r.ok]
    for r in failed:
        console.print(f"[red]deploy failed on {r.device}[/red]: {escape(r.error or '')}")
    if all(not r.uploaded for r in results.values() if r.ok) and not failed:
        console.print("nothing to upload: every device already has every file")
    return EXIT_PARTIAL if failed else 0


def _built_model_sha(spec: str, variant: str, devices: list[Device]) -> str:
    """The sha256 of model `spec`, after checking every device has something built from it."""
    from farm.build.models import resolve_model
    from farm.build.registry import for_target

    model = resolve_model(spec, variant)
    missing = [d.name for d in devices
               if not any(a.source == model.sha256 for a in for_target(d.arch, model.sha256))]
    if missing:
        raise UsageError(f"nothing is built from model {model.name} for "
                         f"{', '.join(missing)}",
                         hint=f"run `farm build --model {spec} --variant {variant} --device "
                              f"{missing[0]}` first (or deploy without --model)")
    return model.sha256


def render_summary(results: list[DeployResult]) -> Table:
    table = Table(title="deploy")
    for column in ("device", "result", "uploaded", "unchanged", "bytes", "seconds"):
        table.add_column(column)
    for r in results:
        table.add_row(r.device, "ok" if r.ok else "FAILED", str(len(r.uploaded)),
                      str(len(r.unchanged)), str(r.bytes_sent), f"{r.seconds:.2f}")
    return table


def run_rpc_server(args: argparse.Namespace) -> int:
    from farm.rpc.forward import forwarded_rpc_server
    from farm.rpc.tracker import tracker_state
    from farm.transports.ssh import SSHTransport

    if not args.key or not args.devices or len(args.devices) != 1 or args.all:
        raise UsageError("--rpc-server needs --key K and exactly one --device NAME")
    device = load_inventory(args.inventory).get(args.devices[0])
    if device.transport != "ssh":
        raise UsageError(f"--rpc-server needs an ssh device; {device.name} is "
                         f"{device.transport}", hint="a local server: farm tracker serve")
    port = args.tracker_port
    if port is None:
        state = tracker_state()
        if state is None:
            raise UsageError("no tracker is running", hint="farm tracker start")
        port = state.port
    console = Console(stderr=True)
    if args.detach:
        from farm.rpc.forward_child import start_detached_forward

        info, service = start_detached_forward(device, args.key, tracker_port=port)
        console.print(f"RPC server {args.key} on {device.name} registered with "
                      f"127.0.0.1:{port} (forwarded 127.0.0.1:{info.port}; forwarder pid "
                      f"{service.pid}, log {service.log}); `farm tracker stop` stops it")
        return 0
    transport = SSHTransport(device)
    try:
        with forwarded_rpc_server(transport, args.key, tracker_port=port) as server:
            console.print(f"RPC server {args.key} on {device.name} registered with "
                          f"127.0.0.1:{port} (forwarded 127.0.0.1:{server.port}); Ctrl-C stops")
            try:
                while server.alive():
                    time.sleep(1.0)
            except KeyboardInterrupt:
                console.print("stopping")
                return 0
            console.print(f"[red]RPC server {args.key} on {device.name} exited[/red]: "
                          f"{escape(server.log_tail()[-800:])}")
            return 1
    finally:
        transport.close()
