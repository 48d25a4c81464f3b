"""`farm` entry point: parse arguments, dispatch to one module per subcommand,
and turn the FarmError family into exit codes (0 ok, 1 error, 2 usage, 3 partial,
4 regression found by `compare --max-slowdown`, 130 interrupted). This is the only place
exit codes are decided. While a command runs, libraries' output during the steps that
capture it goes to .farm/logs/ (`farm.libout`).
"""

from __future__ import annotations

import argparse
import errno
import importlib
import sqlite3
import sys
from collections.abc import Sequence

from farm import __version__, followup, libout
from farm.errors import EXIT_ERROR, EXIT_INTERRUPTED, EXIT_USAGE, FarmError
from farm.paths import host_write_failure, is_host_disk_error, state_dir_path
from farm.results.location import redacted

# subcommand name -> module under farm.cli exposing register(subparsers) and run(args) -> int
SUBCOMMANDS: dict[str, str] = {
    "devices": "farm.cli.devices_cmd",
    "lab": "farm.cli.lab_cmd",
    "deploy": "farm.cli.deploy_cmd",
    "models": "farm.cli.models_cmd",
    "build": "farm.cli.build_cmd",
    "bench": "farm.cli.bench_cmd",
    "results": "farm.cli.results_cmd",
    "compare": "farm.cli.compare_cmd",
    "tracker": "farm.cli.tracker_cmd",
    "tune": "farm.cli.tune_cmd",
    "triangle": "farm.cli.triangle_cmd",
    "report": "farm.cli.report_cmd",
    "completion": "farm.cli.completion_cmd",  # also registers the hidden `__complete`
}


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="farm",
        description="Measure TVM, ONNX Runtime and a custom executor on real devices.",
        epilog="exit codes: 0 ok, 1 error, 2 usage, 3 some devices failed, 4 regression "
               "(compare --max-slowdown), 130 interrupted",
    )
    parser.add_argument("--version", action="version", version=f"farm {__version__}")
    parser.add_argument("--inventory", metavar="FILE",
                        help="devices.yaml to use (default: $FARM_INVENTORY, then ./devices.yaml)")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for _name, module_name in SUBCOMMANDS.items():
        try:
            module = importlib.import_module(module_name)
        except ModuleNotFoundError as exc:
            if exc.name == module_name:
                continue  # subcommand not built yet
            raise
        module.register(sub)
    _accept_inventory_anywhere(sub)
    return parser


def _accept_inventory_anywhere(sub: argparse._SubParsersAction) -> None:
    """Let `--inventory` also follow the subcommand (`farm devices check --inventory F`)."""
    for parser in set(sub.choices.values()):
        if "--inventory" not in parser._option_string_actions:
            parser.add_argument("--inventory", metavar="FILE", default=argparse.SUPPRESS,
                                help=argparse.SUPPRESS)
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                _accept_inventory_anywhere(action)


def main(argv: Sequence[str] | None = None) -> int:
    try:
        parser = build_parser()
    except FarmError as exc:  # e.g. a route plugin that fails to load (farm.routes)
        print(f"farm: error: {exc}", file=sys.stderr)
        return exc.exit_code
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help()
        return EXIT_USAGE
    # printed follow-up commands carry --inventory / --store as given here (farm.followup)
    store = getattr(args, "store", None)
    followup.remember(inventory=getattr(args, "inventory", None),
                      store=redacted(store) if store else store)  # no password in a hint
    libout.install()  # libraries' chatter to .farm/logs/ during the steps that capture it
    try:
        return int(args.func(args) or 0)
    except BrokenPipeError:  # e.g. `farm devices --output json | head`
        return 0
    except KeyboardInterrupt:
        print("farm: interrupted; measured results were kept", file=sys.stderr)
        return EXIT_INTERRUPTED
    except FarmError as exc:
        print(f"farm: error: {exc}", file=sys.stderr)
        return exc.exit_code
    except (OSError, sqlite3.OperationalError) as exc:
        # a write of the host refused by its disk (a build output, a cache, a state file):
        # one line naming the file system, never a traceback
        text = disk_failure(exc)
        if text is None:
            raise
        print(f"farm: error: {text}", file=sys.stderr)
        return EXIT_ERROR
    finally:
        followup.remember()
        libout.uninstall()


def disk_failure(exc: BaseException) -> str | None:
    """The one-line message for an error the host's disk caused, else None."""
    if is_host_disk_error(exc):
        assert isinstance(exc, OSError)
        path = exc.filename or state_dir_path()
        return host_write_failure(path, exc.errno, "a file")
    if isinstance(exc, sqlite3.OperationalError) and "disk is full" in str(exc):
        return host_write_failure(state_dir_path(), errno.ENOSPC, "an SQLite file under")
    return None


def entry() -> None:
    sys.exit(main())


if __name__ == "__main__":
    entry()
