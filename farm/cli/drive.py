"""One driver for `farm bench` and `farm triangle`: run a `Bench`, show it, survive Ctrl-C.

Contract: `drive(bench, progress, events_path) -> BenchResult`:

* starts the bench and consumes its events in one UI loop (`farm.views.live.run_ui`): the
  live table when `progress` is a terminal, short human step lines when it is not (a log),
  nothing when `progress` is None;
* `events_path` ("-" = stdout, else a file, truncated) also receives every event as one
  JSON line: the machine stream a script or test follows;
* Ctrl-C interrupts the bench (agents stopped, measured results kept); a second Ctrl-C
  stops waiting for the devices to wind down. The result's status is then "interrupted".
* off a terminal, `warning` events (a device busy and who holds it, a record the disk
  refused) print as lines too: the step lines leave them to the live view;
* the events file is a copy: when its disk fills up it stops with one line, the bench goes on.

`add_events_option(parser)` adds `--events FILE` to a subcommand. `report_kept(result,
err, json_out)` tells what the host's disk refused during the bench and prints the records
that were written nowhere, as JSON lines.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import queue
import sys
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any, TextIO

from rich.console import Console

from farm.errors import UsageError
from farm.paths import host_write_failure, is_host_disk_error

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
            yield _GuardedEvents(f, path)


class _GuardedEvents:
    """The events file; a write the disk refuses ends the copy with one line on stderr."""

    def __init__(self, f: TextIO, path: str) -> None:
        self._f, self._path, self._dead = f, path, False

    def write(self, text: str) -> int:
        if not self._dead:
            try:
                return self._f.write(text)
            except OSError as exc:
                self._stop(exc)
        return len(text)

    def flush(self) -> None:
        if not self._dead:
            try:
                self._f.flush()
            except OSError as exc:
                self._stop(exc)

    def _stop(self, exc: OSError) -> None:
        if not is_host_disk_error(exc):
            raise exc
        self._dead = True
        print(f"farm: {host_write_failure(self._path, exc.errno, 'the event stream')}; "
              "no more events are written to it (the bench goes on)", file=sys.stderr)


class _Events(queue.Queue):  # type: ignore[type-arg]
    """The bench's event queue; `seen(event)` runs in the UI thread as events are taken."""

    def __init__(self, seen: Callable[[dict[str, Any]], None]) -> None:
        super().__init__()
        self._seen = seen

    def get(self, block: bool = True, timeout: float | None = None) -> Any:
        event = super().get(block, timeout)
        self._seen(event)
        return event


def drive(bench: Bench, progress: Console | None, events_path: str | None = None
          ) -> BenchResult:
    """See module docstring."""
    from farm.views.live import elapsed_line, run_ui

    def seen(event: dict[str, Any]) -> None:
        if event.get("event") == "warning" and progress is not None \
                and not progress.is_terminal:
            who = event.get("device")
            progress.print(f"{who + ': ' if who else 'farm: '}warning: {event.get('message')}",
                           markup=False, highlight=False, soft_wrap=True)

    events = _Events(seen)
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



def report_kept(result: BenchResult, err: Console, json_out: TextIO | None) -> None:
    """What the host's disk refused during the bench (see module docstring). Records
    written nowhere go to `json_out` as JSON lines (None: the output above already holds
    them whole, as json/jsonl output does)."""
    def say(text: str) -> None:
        err.print(f"farm: {text}", markup=False, highlight=False, style="red")

    for problem in result.disk_problems:
        say(problem)
    if result.spilled:
        back = result.spill_back or "the next farm command that opens the store writes them in"
        say(f"{len(result.spilled)} record(s) could not be stored: kept in {result.spill_file} "
            f"({back})")
    if result.end_unsaved:
        say(f"the end of run {result.run_id} could not be stored: it reads `interrupted` "
            "from now on; `farm bench --resume` continues it")
    if not result.unsaved:
        return
    if json_out is None:
        say(f"{len(result.unsaved)} record(s) could be written nowhere: they are in the "
            "output above; keep it")
        return
    where = "below" if json_out is sys.stdout else "on stderr"
    say(f"{len(result.unsaved)} record(s) could be written nowhere: printed {where} as JSON "
        "lines, one record each; keep them")
    for record in result.unsaved:
        json_out.write(json.dumps(record, default=str) + "\n")
    json_out.flush()
