"""`farm deploy` — push the agent, the selected routes' runners and the builds of the
selected models to devices, in parallel, with per-device bytes/rate/ETA.

Selection: `--model` (repeatable; default the bench's default model), `--variant`,
`--routes` (default every route); `--all-builds` ships every registered build as before.
`--dry-run` lists files and bytes per device and changes nothing; `--prune` then removes
what the selection no longer ships (policy: farm/deploy/prune.py). Ctrl-C stops every
device after its current write (exit 130); the same command resumes.

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
from rich.table import Table

from farm.cli.term import stdout_console
from farm.deploy import DeployResult, deploy
from farm.deploy.choice import DeployChoice, choose, parse_routes
from farm.deploy.prune import PART_AGE_S, PruneResult, prune_device
from farm.errors import EXIT_INTERRUPTED, EXIT_PARTIAL, UsageError
from farm.inventory import load_inventory
from farm.inventory.device import Device
from farm.transports import Transport
from farm.views.deploy_progress import deploy_progress
from farm.views.steps import timed_step


def register(sub: argparse._SubParsersAction) -> None:
    parser = sub.add_parser("deploy", help="push the agent, runners and built artifacts")
    parser.add_argument("--device", action="append", dest="devices", metavar="NAME",
                        help="device to deploy to (repeatable; default: local)")
    parser.add_argument("--all", action="store_true", help="every device of the inventory")
    parser.add_argument("--model", action="append", dest="models", metavar="MODEL",
                        help="ship the builds of this model (a preset or .onnx path, as in "
                             "`farm build`; repeatable; default: the bench's default model)")
    parser.add_argument("--variant", default="fp32",
                        help="variant of --model: fp32 | int8-dynamic | int8-qdq | int4")
    parser.add_argument("--routes", default=None,
                        help="comma list of routes whose runners and builds to ship "
                             "(default: all)")
    parser.add_argument("--all-builds", action="store_true",
                        help="ship every registered build of every model (the whole registry)")
    parser.add_argument("--dry-run", action="store_true",
                        help="list the files and bytes each device would receive; change "
                             "nothing")
    parser.add_argument("--prune", action="store_true",
                        help="after deploying, remove what the selection no longer ships and "
                             "stale partial uploads (refused while a bench uses the device)")
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
    from farm.bench.config import BenchConfig

    inventory = load_inventory(args.inventory)
    devices = [d for d in inventory.select(args.devices, args.all) if d.has_shell]
    if args.all_builds and args.models:
        raise UsageError("--all-builds ships every model's builds; drop --model or it")
    choice = choose(args.models or [BenchConfig().model], args.variant,
                    parse_routes(args.routes), devices, all_builds=args.all_builds,
                    explicit=bool(args.models))
    console = Console(stderr=True)
    for note in choice.notes:
        console.print(f"note: {note}", highlight=False)
    stop = threading.Event()
    pruned: dict[str, PruneResult] = {}

    def then(device: Device, link: Transport, result: DeployResult) -> None:
        # a device whose deploy failed keeps its old files: they may be all it can run
        if args.prune and result.ok and not stop.is_set():
            pruned[device.name] = prune(device, link, choice, args.dry_run)

    with timed_step(console, f"farm: deploy to {', '.join(d.name for d in devices)}"), \
         deploy_progress([d.name for d in devices], console) as progress:
        results = deploy(devices, progress, bundle=choice.bundle, stop=stop,
                         dry_run=args.dry_run, then=then)
    if args.output == "json":
        # one object per device, as before; `prune` added with --prune
        print(json.dumps([{**vars(r), **({"prune": {**vars(pruned[name]),
                                                    "bytes_freed": pruned[name].bytes_freed}}
                                         if name in pruned else {})}
                          for name, r in results.items()], indent=2))
    else:
        out = _stdout_console()
        if args.dry_run:
            for r in results.values():
                out.print(render_plan(r))
        out.print(render_summary(list(results.values()), args.dry_run))
        if pruned:
            out.print(render_prune(list(pruned.values()), args.dry_run))
    if stop.is_set():
        done = sum(len(r.uploaded) for r in results.values())
        console.print(f"interrupted: {done} files verified and kept; run the same command to "
                      "resume (the partial files are continued, nothing finished is re-sent)")
        return EXIT_INTERRUPTED
    failed = [r for r in results.values() if not r.ok]
    for r in failed:
        console.print(f"[red]deploy failed on {r.device}[/red]: {escape(r.error or '')}")
    not_pruned = [p for p in pruned.values() if not p.ok]
    for p in not_pruned:
        console.print(f"[yellow]not pruned on {p.device}[/yellow]: {p.refused or p.error}")
    if not args.dry_run and not failed and all(not r.uploaded for r in results.values()):
        console.print("nothing to upload: every device already has every file")
    return EXIT_PARTIAL if failed or not_pruned else 0


def prune(device: Device, link: Transport, choice: DeployChoice,
          dry_run: bool) -> PruneResult:
    """Prune one device (on the deploy's connection) under the host's bench lease, so no
    bench of this host starts on it meanwhile; a held lease refuses the device (see
    farm/deploy/prune.py)."""
    from farm.bench.lease import DeviceLease, LeaseBusy

    keep = [a.remote for a in choice.bundle(device)]
    try:
        with DeviceLease(device.name, "farm deploy --prune").hold(0):
            return prune_device(device, keep, part_age_s=PART_AGE_S, dry_run=dry_run,
                                transport=link)
    except LeaseBusy as exc:
        return PruneResult(device.name, refused=f"a bench holds the device: {exc}")
    except Exception as exc:  # a bug fails this device's prune, not the others
        return PruneResult(device.name, error=f"{type(exc).__name__}: {exc}")


def render_plan(result: DeployResult) -> Table:
    table = Table(title=f"dry run: {result.device}")
    for column in ("file", "bytes", "action"):
        table.add_column(column, justify="right" if column == "bytes" else "left")
    for item in result.plan:
        table.add_row(item["file"], f"{item['bytes']:,}", item["action"])
    return table


def render_summary(results: list[DeployResult], dry_run: bool = False) -> Table:
    table = Table(title="deploy (dry run: nothing sent)" if dry_run else "deploy")
    columns = ("device", "result", "files", "to send", "unchanged", "bytes") if dry_run else \
        ("device", "result", "uploaded", "unchanged", "bytes", "resumed", "seconds", "MB/s")
    for column in columns:
        table.add_column(column)
    for r in results:
        result = "ok" if r.ok else "INTERRUPTED" if r.interrupted else "FAILED"
        if dry_run:
            table.add_row(r.device, result, str(len(r.plan)),
                          str(sum(1 for p in r.plan if p["action"] != "unchanged")),
                          str(len(r.unchanged)), f"{r.bytes_sent:,}")
            continue
        rate = r.bytes_sent / r.seconds / 1e6 if r.seconds else 0.0
        table.add_row(r.device, result, str(len(r.uploaded)), str(len(r.unchanged)),
                      f"{r.bytes_sent:,}", f"{r.bytes_resumed:,}", f"{r.seconds:.2f}",
                      f"{rate:.1f}")
    return table


def render_prune(results: list[PruneResult], dry_run: bool) -> Table:
    table = Table(title="prune (dry run: nothing removed)" if dry_run else "prune")
    for column in ("device", "result", "files", "bytes freed", "detail"):
        table.add_column(column)
    for p in results:
        result = "ok" if p.ok else "REFUSED" if p.refused else "FAILED"
        detail = p.refused or p.error or ", ".join(r["file"] for r in p.removed[:3]) + \
            (" …" if len(p.removed) > 3 else "")
        table.add_row(p.device, result, str(len(p.removed)), f"{p.bytes_freed:,}", detail)
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


def _stdout_console() -> Console:
    """The terminal's width on a TTY; 160 columns in a log, so tables stay one line a row."""
    return stdout_console()
