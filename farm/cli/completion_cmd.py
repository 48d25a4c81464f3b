"""`farm completion bash|zsh` — print the shell completion script (generated from the
parser, `farm.cli.completion_gen`); and the hidden `farm __complete devices|runs` the
scripts call for the names that live in the user's inventory and result store.

Install:  farm completion bash > ~/.local/share/bash-completion/completions/farm
          farm completion zsh > "${fpath[1]}/_farm"
or for the current shell only: source <(farm completion bash)
"""

from __future__ import annotations

import argparse
import sys

SHELLS = ("bash", "zsh")


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("completion", help="print the bash or zsh completion script",
                       description="Print a completion script for SHELL on stdout; install "
                                   "it with: farm completion bash > "
                                   "~/.local/share/bash-completion/completions/farm  (zsh: "
                                   "farm completion zsh > \"${fpath[1]}/_farm\")")
    p.add_argument("shell", choices=SHELLS)
    p.set_defaults(func=run)
    # hidden (no help=): what the scripts call while completing
    helper = sub.add_parser("__complete")
    helper.add_argument("what", choices=("devices", "runs"))
    helper.add_argument("--store", metavar="FILE")
    helper.set_defaults(func=run_helper)


def run(args: argparse.Namespace) -> int:
    from farm.cli.completion_gen import bash_script, spec, zsh_script
    from farm.cli.main import build_parser

    s = spec(build_parser())
    sys.stdout.write(bash_script(s) if args.shell == "bash" else zsh_script(s))
    return 0


def run_helper(args: argparse.Namespace) -> int:
    """One name per line; nothing (exit 0) when the inventory or store cannot be read:
    a completion must never print an error into the user's command line."""
    from farm.errors import FarmError

    try:
        if args.what == "devices":
            from farm.inventory import load_inventory
            names = sorted(load_inventory(args.inventory).devices)
        else:
            from farm.results.open_store import open_store
            with open_store(args.store, create=False) as store:
                names = [r.run_id for r in reversed(store.runs())]  # newest first
    except (FarmError, OSError):
        return 0
    sys.stdout.write("".join(f"{n}\n" for n in names))
    return 0
