"""The console a command's tables print on.

On a terminal: its width. Off one (a pipe, a log, CI): `$COLUMNS` when it is set, so a log
or a test can say how wide it is (`COLUMNS=80 farm results show latest | less`), else a
fixed width wide enough that tables stay legible. The tables lay themselves out for that
width (`farm.results.layout`): numbers whole, columns left out named.
"""

from __future__ import annotations

import argparse
import os
import sys

from rich.console import Console

PIPED_WIDTH = 160


def stdout_console(piped_width: int = PIPED_WIDTH) -> Console:
    if sys.stdout.isatty() or os.environ.get("COLUMNS", "").strip().isdigit():
        return Console(highlight=False)  # rich reads $COLUMNS itself
    return Console(width=piped_width, highlight=False)


def add_all_columns_option(parser: argparse.ArgumentParser) -> None:
    """`--columns all` for commands whose tables have fixed columns (compare, report, results
    list): a table too wide for the terminal leaves columns out and names them; this keeps
    them (the table is then wider than the terminal)."""
    parser.add_argument("--columns", choices=["all"],
                        help="all: no column left out when the table is wider than the "
                             "terminal (default: those that do not fit are left out and named)")
