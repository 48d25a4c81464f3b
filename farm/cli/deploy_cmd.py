"""`farm deploy` — push the agent and artifacts to devices, in parallel, with progress."""

from __future__ import annotations

import argparse
import json
import threading

from rich.console import Console
from rich.progress import BarColumn, DownloadColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from farm.deploy import DeployResult, deploy
from farm.errors import EXIT_PARTIAL
from farm.inventory import load_inventory


def register(sub: argparse._SubParsersAction) -> None:
    parser = sub.add_parser("deploy", help="push the agent, runners and built artifacts")
    parser.add_argument("--device", action="append", dest="devices", metavar="NAME",
                        help="device to deploy to (repeatable; default: local)")
    parser.add_argument("--all", action="store_true", help="every device of the inventory")
    parser.add_argument("--output", choices=["table", "json"], default="table")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    inventory = load_inventory(args.inventory)
    devices = [d for d in inventory.select(args.devices, args.all) if d.transport != "tvm-rpc"]
    console = Console(stderr=True)
    lock = threading.Lock()
    with Progress(TextColumn("{task.description:<12}"), BarColumn(), DownloadColumn(),
                  TextColumn("{task.fields[status]}"), TimeElapsedColumn(),
                  console=console, transient=False, disable=not console.is_terminal) as bar:
        tasks = {d.name: bar.add_task(d.name, total=None, status="queued") for d in devices}

        def progress(device: str, done: int, total: int, status: str) -> None:
            with lock:
                bar.update(tasks[device], completed=done, total=total or None, status=status)

        results = deploy(devices, progress)
    if args.output == "json":
        print(json.dumps([vars(r) for r in results.values()], indent=2))
    else:
        Console().print(render_summary(list(results.values())))
    failed = [r for r in results.values() if not r.ok]
    for r in failed:
        console.print(f"[red]deploy failed on {r.device}[/red]: {r.error}")
    if all(not r.uploaded for r in results.values() if r.ok) and not failed:
        console.print("nothing to upload: every device already has every file")
    return EXIT_PARTIAL if failed else 0


def render_summary(results: list[DeployResult]) -> Table:
    table = Table(title="deploy")
    for column in ("device", "result", "uploaded", "unchanged", "bytes", "seconds"):
        table.add_column(column)
    for r in results:
        table.add_row(r.device, "ok" if r.ok else "FAILED", str(len(r.uploaded)),
                      str(len(r.unchanged)), str(r.bytes_sent), f"{r.seconds:.2f}")
    return table
