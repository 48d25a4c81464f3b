"""The live bench view: every device's phase, what it is building (and for how long),
current route, progress, running median and p90, and state (CPU frequency, temperature).

Noise (`farm.results.noise`): a finished route whose round medians spread, or a round
whose CPU steal, exceeds its bound is named in the device's row while the bench runs.

Pure core: `BenchState` + `apply(state, event)` (a reducer over the bench's event dicts,
see `farm.bench.runner`) + `render(state) -> Table` (no I/O, testable with a capturing
Console). `run_ui(events, done, console)` is the one UI loop: it drains the event queue,
applies events and redraws with `rich.live.Live` on a terminal; when the console is not a
terminal it prints short human step lines instead (`farm.views.steps`: a log stays readable).
With `events_out` every event is also written there as one JSON line (`--events FILE`).
"""

from __future__ import annotations

import contextlib
import json
import queue
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any, TextIO

from rich.console import Console
from rich.live import Live
from rich.table import Table
from rich.text import Text

from farm.results.emulation import device_label
from farm.results.noise import STEAL_BOUND_PCT
from farm.views.steps import StepLines

STATUS_STYLE = {"ok": "green", "partial": "yellow", "invalid": "red", "failed": "red",
                "unavailable": "dim", "skipped": "dim", "interrupted": "yellow"}


@dataclass
class DeviceView:
    name: str
    phase: str = "waiting"
    route: str | None = None
    stage: str = ""
    index: int = 0
    total: int = 0
    progress: float = 0.0
    n: int = 0
    median_ms: float | None = None
    p90_ms: float | None = None
    freq_mhz: float | None = None
    temp_c: float | None = None
    finished: list[tuple[str, str, float | None, int]] = field(default_factory=list)
    noisy: list[str] = field(default_factory=list)  # "route: why" of noisy finished routes
    steal_pct: float | None = None
    status: str | None = None
    detail: str = ""
    emulated: bool = False
    warnings: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)  # e.g. where library output went
    building: str | None = None       # the route key whose build runs now
    build_t: float | None = None      # its start (the event's time)


@dataclass
class BenchState:
    run_id: str = ""
    model: str = ""
    routes: list[str] = field(default_factory=list)
    phase: str = "starting"
    devices: dict[str, DeviceView] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)  # the host's steps (model build)

    def device(self, name: str) -> DeviceView:
        if name not in self.devices:
            self.devices[name] = DeviceView(name)
        return self.devices[name]


def apply(state: BenchState, event: dict[str, Any]) -> BenchState:
    """Fold one bench event into the state (mutates and returns it)."""
    kind, name = event.get("event"), event.get("device")
    if name is None:
        if kind == "run":
            state.run_id, state.model = event["run_id"], event.get("model", "")
            state.routes = list(event.get("routes", []))
            for device in event.get("devices", []):
                state.device(device)
            state.phase = "running"
        elif kind == "phase":
            state.phase = event.get("phase", state.phase)
        elif kind == "library_output" and event.get("summary"):
            state.notes.append(str(event["summary"]))
        return state
    dev = state.device(name)
    if kind == "phase":
        dev.phase = event["phase"]
        dev.emulated = bool(event.get("emulated", dev.emulated))
        dev.total = event.get("total", dev.total)
    elif kind == "route_start":
        dev.phase, dev.route, dev.stage = "running", event["route"], "starting"
        dev.index, dev.total = event.get("index", 0), event.get("total", dev.total)
        dev.progress, dev.n, dev.median_ms, dev.p90_ms = 0.0, 0, None, None
        dev.freq_mhz = event.get("freq_mhz", dev.freq_mhz)
        dev.temp_c = event.get("temp_c", dev.temp_c)
    elif kind == "build":
        start = event.get("state") == "start"
        dev.building = str(event.get("route")) if start else None
        dev.build_t = event.get("t") if start else None
    elif kind == "stage":
        dev.stage = event["stage"]
    elif kind == "library_output" and event.get("summary"):
        dev.notes.append(str(event["summary"]))
    elif kind == "warning":  # e.g. a TVM build left with a symbolic dim (slow, not wrong)
        dev.warnings.append(str(event.get("message", "")))
    elif kind == "samples":
        dev.stage = "measuring"
        dev.n, dev.progress = event["n"], event.get("progress", dev.progress)
        dev.median_ms, dev.p90_ms = event.get("median_ms"), event.get("p90_ms")
    elif kind == "state":
        dev.freq_mhz, dev.temp_c = event.get("freq_mhz"), event.get("temp_c")
        dev.steal_pct = event.get("steal_pct", dev.steal_pct)
    elif kind == "route_done":
        status = "skipped" if event.get("skipped") else event["status"]
        dev.finished.append((event["route"], status, event.get("median_ms"),
                             len(event.get("drift") or [])))
        dev.noisy += [f"{event['route']}: {w}" for w in event.get("noise") or []]
        dev.route, dev.stage, dev.progress = None, "", 0.0
    elif kind == "device_done":
        dev.phase, dev.status, dev.detail = "done", event["status"], event.get("detail") or ""
    return state


def _num(value: float | None, unit: str = "", digits: int = 3) -> str:
    return "–" if value is None else f"{value:.{digits}g}{unit}"


def _bar(fraction: float, width: int = 12) -> str:
    filled = round(max(0.0, min(1.0, fraction)) * width)
    return "█" * filled + "░" * (width - filled) + f" {fraction:4.0%}"


def render(state: BenchState, now: float | None = None) -> Table:
    """The whole view as one table (pure: same state and `now`, same table). `now` (a
    `time.time()`) gives a running build its elapsed seconds."""
    title = f"farm bench {state.run_id}  model {state.model}" if state.run_id else "farm bench"
    caption = "\n".join(["median and p90 of steady-state samples so far, ms",
                         *(f"farm: {note}" for note in state.notes)])
    table = Table(title=title, caption=caption, caption_justify="left", expand=False)
    for column in ("device", "phase", "route", "progress", "n", "median ms", "p90 ms",
                   "CPU MHz", "temp °C", "finished"):
        table.add_column(column, no_wrap=column != "finished")
    for name in sorted(state.devices):
        dev = state.devices[name]
        phase = Text(dev.status or dev.phase, style=STATUS_STYLE.get(dev.status or "", ""))
        route = "–"
        if dev.building and dev.phase == "build":
            route = f"building {dev.building}"
            if now is not None and dev.build_t is not None:
                route += f" {max(0.0, now - dev.build_t):.0f} s"
        if dev.route:
            route = f"{dev.route} ({dev.index + 1}/{dev.total})"
            route += f" {dev.stage}" if dev.stage else ""
        finished = Text()
        for route_name, status, median, drift in dev.finished:
            finished.append(f"{route_name}:", style="bold")
            finished.append(status, style=STATUS_STYLE.get(status, ""))
            if median is not None:
                finished.append(f" {median:.3g}ms")
            if drift:  # frequency/temperature moved during the route: see the record
                finished.append(f" drift×{drift}", style="yellow")
            finished.append("  ")
        for warning in dev.warnings:
            finished.append(f"warning: {warning[:120]}  ", style="yellow")
        for note in dev.notes:
            finished.append(f"{note}  ", style="dim")
        for noisy in dev.noisy:  # a verdict on these rounds needs care: say so while it runs
            finished.append(f"noisy {noisy}  ", style="yellow")
        if dev.steal_pct is not None and dev.steal_pct > STEAL_BOUND_PCT:
            finished.append(f"CPU steal {dev.steal_pct:.1f} % last round  ", style="yellow")
        if dev.detail and dev.status not in (None, "ok"):
            finished.append(dev.detail[:120], style="red")
        table.add_row(device_label(name, dev.emulated), phase, route,
                      _bar(dev.progress) if dev.route else "",
                      str(dev.n) if dev.route else "", _num(dev.median_ms),
                      _num(dev.p90_ms), _num(dev.freq_mhz, digits=4),
                      _num(dev.temp_c, digits=3), finished)
    return table


class Elapsed:
    """A one-line renderable, "what… N s", its seconds counted each time it is drawn: the
    model build on the host (`Bench.start`) runs before the live table exists."""

    def __init__(self, what: str) -> None:
        self.what = what
        self.started = time.monotonic()

    def __rich__(self) -> Text:
        return Text(f"farm: {self.what}… {time.monotonic() - self.started:.0f} s")


@contextlib.contextmanager
def elapsed_line(console: Console, what: str) -> Iterator[None]:
    """On a terminal, `Elapsed(what)` redrawn until the block ends (then erased: the live
    table or the step lines take over); elsewhere nothing (the step lines say it)."""
    if not console.is_terminal:
        yield
        return
    # no redirect of sys.stdout/stderr: a capturing thread's writes must reach
    # farm.libout's router, not be printed above the live display
    with Live(Elapsed(what), console=console, refresh_per_second=4, transient=True,
              redirect_stdout=False, redirect_stderr=False):
        yield


def run_ui(events: queue.Queue[dict[str, Any]], done: Callable[[], bool],
           console: Console | None = None, state: BenchState | None = None,
           events_out: TextIO | None = None) -> BenchState:
    """Consume events until `done()` and the queue is empty; draw, or print step lines."""
    console = console or Console()
    state = state or BenchState()
    steps = StepLines()

    def drain(block_s: float) -> bool:
        got = False
        try:
            event = events.get(timeout=block_s)
        except queue.Empty:
            return False
        while True:
            got = True
            apply(state, event)
            if events_out is not None:
                events_out.write(json.dumps(event, default=str) + "\n")
                events_out.flush()
            if not console.is_terminal:
                for line in steps.lines(event):
                    # markup off: device details may hold brackets rich would parse
                    console.print(line, markup=False, highlight=False, soft_wrap=True)
            try:
                event = events.get_nowait()
            except queue.Empty:
                return got

    if not console.is_terminal:
        while not (done() and events.empty()):
            drain(0.2)
        return state
    with Live(render(state, time.time()), console=console, refresh_per_second=4,
              transient=False, redirect_stdout=False, redirect_stderr=False) as live:
        while not (done() and events.empty()):
            drain(0.25)
            live.update(render(state, time.time()))  # also between events: elapsed ticks
        live.update(render(state, time.time()))
    return state
