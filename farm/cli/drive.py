"""One driver for `farm bench` and `farm triangle`: run a `Bench`, show it, survive Ctrl-C.

Contract: `drive(bench, progress, events_path) -> BenchResult`:

* starts the bench and consumes its events in one UI loop (`farm.views.live.run_ui`): the
  live table when `progress` is a terminal, short human step lines when it is not (a log),
  nothing when `progress` is None;
* `events_path` ("-" = stdout, else a file, truncated) also receives every event as one
  JSON line: the machine stream a script or test follows;
* Ctrl-C interrupts the bench (agents stopped, measured results kept); a second Ctrl-C
  stops waiting for the devices to wind down. The result's status is then "interrupted".

`add_events_option(parser)` adds `--events FILE` to a subcommand.
"""

from __future__ import annotations

import argparse
import contextlib
import queue
import sys
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any, TextIO

from rich.console import Console

from farm.errors import UsageError

if TYPE_CHECKING:
    from farm.bench.runner import Bench, BenchResult

WIND_DOWN_S = 30.0  # how long an interrupted bench may take to stop its agents


def add_events_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--events", metavar="FILE",
                        help="also write every bench event as one JSON line to FILE "
                             "('-': stdout) — the machine-readable progress stream")


@contextlib.contextmanager
def open_events(path: str | None) -> Iterator[TextIO | None]:
    if path is None:
        yield None
    elif path == "-":
        yield sys.stdout
    else:
        try:
            f = open(path, "w", encoding="utf-8")  # noqa: SIM115 (closed below)
        except OSError as exc:
            raise UsageError(f"cannot write the event stream to {path}: {exc.strerror}",
                             hint="choose a writable --events FILE, or '-' for stdout") from exc
        with f:
            yield f


def drive(bench: Bench, progress: Console | None, events_path: str | None = None
          ) -> BenchResult:
    """See module docstring."""
    from farm.views.live import elapsed_line, run_ui

    events: queue.Queue[dict[str, Any]] = queue.Queue()
    wanted = progress is not None or events_path is not None
    emit = events.put if wanted else (lambda _event: None)
    err = Console(stderr=True, highlight=False)
    with open_events(events_path) as events_out:
        try:
            config = bench.config
            with elapsed_line(progress or Console(quiet=True, force_terminal=False),
                              f"model build of {config.model} ({config.variant})"):
                bench.start(emit)
            run_ui(events, lambda: not bench.running(),
                   progress or Console(quiet=True, force_terminal=False),
                   events_out=events_out)
        except KeyboardInterrupt:
            err.print("[yellow]farm: interrupted: stopping agents, keeping what was "
                      "measured…[/]")
            bench.interrupt()
            with contextlib.suppress(KeyboardInterrupt):  # a second Ctrl-C: stop waiting
                bench.wait(WIND_DOWN_S)
    return bench.finish()

