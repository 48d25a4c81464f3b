"""`farm lab up|status|down` — the real local lab of sshd devices in network namespaces."""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import asdict

from rich.console import Console
from rich.table import Table

from farm.errors import EXIT_PARTIAL
from farm.lab import LabSpec, default_lab_dir, down, down_stale, up
from farm.lab.inspect import DeviceStatus, device_status
from farm.lab.inventory_file import INVENTORY_FILE


def register(sub: argparse._SubParsersAction) -> None:
    parser = sub.add_parser("lab", help="bring up / inspect / tear down the local lab",
                            description="A real local farm: each device is a network "
                            "namespace with its own sshd; emulated aarch64 devices run "
                            "qemu-user through a private binfmt_misc.")
    parser.set_defaults(func=lambda args: (parser.print_help(), 2)[1])
    actions = parser.add_subparsers(dest="action", metavar="ACTION")
    # no state_dir() call here: building the parser must not create .farm/
    dir_help = "lab directory (default .farm/lab, or $FARM_HOME/lab)"

    p_up = actions.add_parser("up", help="create the devices and write the lab inventory")
    p_up.add_argument("--devices", type=int, default=2, metavar="N",
                      help="native devices lab1..labN (default 2)")
    p_up.add_argument("--aarch64", type=int, default=0, metavar="M",
                      help="emulated aarch64 devices pixel7, rpi5, a64-3... (default 0)")
    p_up.add_argument("--jumped", type=int, default=0, metavar="J",
                      help="native devices far1..farJ reachable only through a gateway "
                           "device `gate` (added too; `via: gate`) (default 0)")
    p_up.add_argument("--loopback", action="store_true",
                      help="use the no-namespace fallback (one sshd per 127.0.0.x:port)")
    p_up.add_argument("--dir", help=dir_help)
    p_up.set_defaults(func=run_up)

    p_status = actions.add_parser("status", help="show the lab's devices")
    p_status.add_argument("--dir", help=dir_help)
    p_status.add_argument("--output", choices=["table", "json"], default="table")
    p_status.set_defaults(func=run_status)

    p_down = actions.add_parser("down", help="remove every process, namespace, veth and "
                                             "mount of the lab (also after a crash)")
    p_down.add_argument("--dir", help=dir_help)
    p_down.add_argument("--purge", action="store_true",
                        help="also delete the lab directory (keys, device homes, logs)")
    p_down.add_argument("--stale", action="store_true",
                        help="instead, tear down every lab whose owner (a test run) is gone")
    p_down.set_defaults(func=run_down)


def _log(message: str) -> None:
    print(message, file=sys.stderr)


def run_up(args: argparse.Namespace) -> int:
    state = up(LabSpec(native=args.devices, aarch64=args.aarch64, loopback=args.loopback,
                       jumped=args.jumped),
               args.dir, log=_log)
    inventory = f"{state.lab_dir}/{INVENTORY_FILE}"
    print(inventory)
    _log(f"next: farm --inventory {inventory} devices check --all")
    return 0


def run_status(args: argparse.Namespace) -> int:
    state, rows = device_status(args.dir)
    if args.output == "json":
        print(json.dumps({"lab_dir": state.lab_dir if state else None,
                          "mode": state.mode if state else None,
                          "devices": [asdict(r) for r in rows]}, indent=2))
    elif state is None:
        _log(f"no lab is up in {args.dir or default_lab_dir()} (start one: farm lab up)")
    else:
        Console().print(render_status(state.lab_dir, state.mode, rows))
    if state is None:
        return 0
    return 0 if all(r.alive and r.reachable for r in rows) else EXIT_PARTIAL


def render_status(lab_dir: str, mode: str, rows: list[DeviceStatus]) -> Table:
    """The status table: a pure function of the rows."""
    table = Table(title=f"lab {lab_dir} ({mode})", show_edge=False)
    for column in ("name", "arch", "address", "sshd pid", "alive", "ssh", "namespace"):
        table.add_column(column, no_wrap=True)
    for r in rows:
        table.add_row(r.name, r.arch, f"{r.address}:{r.port}", str(r.pid or "-"),
                      "[green]yes[/]" if r.alive else "[red]no[/]",
                      "[green]ok[/]" if r.reachable else "[red]silent[/]",
                      r.netns or "-")
    return table


def run_down(args: argparse.Namespace) -> int:
    if args.stale:
        if not down_stale(log=_log):
            _log("no stale lab found")
        return 0
    down(args.dir, purge=args.purge, log=_log)
    return 0
