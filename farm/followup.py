"""Commands farm prints for the user to run next carry the options this invocation had.

A hint such as `farm results show RUN` reads the default store: after
`farm --inventory lab.yaml bench --store x.sqlite` it would name another store (or none)
and another inventory. The CLI calls `remember(inventory=..., store=...)` once per
invocation (`farm.cli.main`); every printed command is built by `command(...)`, which adds
`--inventory FILE` (a global option, so right after `farm`) to commands that reach devices
and `--store FILE` to commands that read or write the store. Outside the CLI (the pytest
plugin, tests calling the API) nothing is remembered and the plain command is printed.
"""

from __future__ import annotations

import shlex

# subcommands that take --store (tests/test_followup.py checks them against the parser)
STORE_COMMANDS = frozenset({"bench", "results", "compare", "report", "triangle"})
# actions of other subcommands that take --store (`farm devices calibrate|check`)
STORE_ACTIONS = {"devices": frozenset({"calibrate", "check"})}
# subcommands that only read the store: --inventory would be noise
STORE_ONLY_COMMANDS = frozenset({"results", "compare", "report"})

_given: dict[str, str | None] = {"inventory": None, "store": None}


def remember(*, inventory: str | None = None, store: str | None = None) -> None:
    """The options of this invocation (None: not given); replaces what was remembered."""
    _given["inventory"] = str(inventory) if inventory is not None else None
    _given["store"] = str(store) if store is not None else None


def command(subcommand: str, *words: str) -> str:
    """`farm [--inventory F] SUBCOMMAND WORDS... [--store S]`, quoted for a shell; a word
    that is a placeholder the user fills in (RUN, OUT.sqlite) is passed as it is."""
    line = ["farm"]
    if _given["inventory"] and subcommand not in STORE_ONLY_COMMANDS:
        line += ["--inventory", _given["inventory"]]
    line += [subcommand, *words]
    takes_store = subcommand in STORE_COMMANDS or (
        bool(words) and words[0] in STORE_ACTIONS.get(subcommand, ()))
    if _given["store"] and takes_store and "--store" not in words:
        line += ["--store", _given["store"]]
    return shlex.join(line)
