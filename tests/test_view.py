"""The live view: a pure render of the state folded from bench events, checked in a
capturing Console; and the UI loop printing step lines (and the events to --events) when
the console is not a terminal."""

from __future__ import annotations

import io
import json
import queue

from rich.console import Console

from farm.views.live import BenchState, apply, render, run_ui

EVENTS = [
    {"device": None, "event": "run", "run_id": "R1", "model": "tiny-fp32",
     "devices": ["pixel", "pi"], "routes": ["ort", "tvm"]},
    {"device": "pixel", "event": "phase", "phase": "running", "total": 2},
    {"device": "pixel", "event": "route_start", "route": "ort", "index": 0, "total": 2,
     "freq_mhz": 2400.0, "temp_c": 41.5},
    {"device": "pixel", "event": "samples", "route": "ort", "n": 37, "median_ms": 12.25,
     "p90_ms": 14.5, "progress": 0.5},
    {"device": "pi", "event": "route_done", "route": "tvm", "status": "unavailable",
     "median_ms": None},
    {"device": "pi", "event": "device_done", "status": "failed",
     "detail": "agent channel closed (exit status -1)"},
]


def capture(state: BenchState) -> str:
    console = Console(file=io.StringIO(), force_terminal=True, color_system=None, width=160)
    console.print(render(state))
    return console.file.getvalue()  # type: ignore[attr-defined]


def test_render_shows_every_device_route_progress_stats_and_state() -> None:
    state = BenchState()
    for event in EVENTS:
        apply(state, event)
    text = capture(state)
    assert "farm bench R1" in text and "tiny-fp32" in text
    pixel = next(line for line in text.splitlines() if "pixel" in line)
    assert "ort (1/2) measuring" in pixel
    assert "██████░░░░░░  50%" in pixel
    assert "37" in pixel and "12.2" in pixel and "14.5" in pixel
    assert "2400" in pixel and "41.5" in pixel
    pi = next(line for line in text.splitlines() if line.lstrip("│ ").startswith("pi "))
    assert "failed" in pi and "tvm:unavailable" in pi and "agent channel closed" in pi
    assert "median and p90 of steady-state samples" in text


def test_render_is_pure() -> None:
    state = BenchState()
    for event in EVENTS:
        apply(state, event)
    assert capture(state) == capture(state)


def test_route_done_clears_the_running_columns_and_flags_drift() -> None:
    state = BenchState()
    for event in [*EVENTS[:4], {"device": "pixel", "event": "route_done", "route": "ort",
                                "status": "ok", "median_ms": 12.3,
                                "drift": ["freq: cpu0 2400000 -> 1800000 kHz (-25.0%)"]}]:
        apply(state, event)
    pixel = next(line for line in capture(state).splitlines() if "pixel" in line)
    assert "ort:ok 12.3ms drift×1" in pixel and "measuring" not in pixel


def test_ui_loop_prints_step_lines_without_a_terminal_and_events_to_their_file() -> None:
    # off a terminal (a log, CI) the default is short human lines; the JSON event stream is
    # kept whole for `--events FILE` (it used to be the default and buried the table)
    events: queue.Queue[dict] = queue.Queue()
    for event in EVENTS:
        events.put(event)
    sink, stream = io.StringIO(), io.StringIO()
    console = Console(file=sink, force_terminal=False, width=200)
    state = run_ui(events, lambda: True, console, events_out=stream)
    assert [json.loads(line) for line in stream.getvalue().splitlines()] == EVENTS
    lines = sink.getvalue().splitlines()
    assert not any(line.startswith("{") for line in lines)
    assert lines == ["farm: run R1: model tiny-fp32, routes ort,tvm on pixel, pi",
                     "pixel: ort (1/2) started",
                     "pi: tvm unavailable",
                     "pi: finished: failed: agent channel closed (exit status -1)"]
    assert state.devices["pi"].status == "failed"


def test_ui_loop_draws_on_a_terminal() -> None:
    events: queue.Queue[dict] = queue.Queue()
    for event in EVENTS:
        events.put(event)
    sink = io.StringIO()
    console = Console(file=sink, force_terminal=True, color_system=None, width=160)
    run_ui(events, lambda: True, console)
    assert "ort (1/2) measuring" in sink.getvalue()
    assert not sink.getvalue().lstrip().startswith("{")


def test_a_running_build_shows_its_route_and_elapsed_seconds() -> None:
    """A cold build is no longer 33 silent seconds of `build`: the view names the route
    being built and how long it has taken (from the event's time and the `now` drawn at)."""
    state = BenchState()
    for event in [EVENTS[0],
                  {"t": 100.0, "device": "pixel", "event": "phase", "phase": "build"},
                  {"t": 100.0, "device": "pixel", "event": "build", "route": "tvm",
                   "state": "start"}]:
        apply(state, event)
    console = Console(file=io.StringIO(), force_terminal=True, color_system=None, width=160)
    console.print(render(state, now=112.4))
    pixel = next(line for line in console.file.getvalue().splitlines() if "pixel" in line)
    assert "build" in pixel and "building tvm 12 s" in pixel
    apply(state, {"t": 131.0, "device": "pixel", "event": "build", "route": "tvm",
                  "state": "done", "seconds": 31.0})
    assert state.devices["pixel"].building is None
    apply(state, {"t": 140.0, "device": "pixel", "event": "route_done", "route": "custom",
                  "status": "unavailable", "skipped": True})
    assert state.devices["pixel"].finished[-1][1] == "skipped"
