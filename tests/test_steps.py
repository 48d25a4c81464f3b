"""The step lines a log gets from the bench's events: long steps with their duration, a
route's result with its statistics, warnings for drift and for what is not ok."""

from __future__ import annotations

from farm.views.steps import StepLines


def feed(events: list[dict]) -> list[str]:
    steps = StepLines()
    return [line for event in events for line in steps.lines(event)]


def test_long_steps_print_start_and_duration_from_the_event_times() -> None:
    lines = feed([
        {"t": 100.0, "device": None, "event": "phase", "phase": "prepare", "model": "tiny",
         "variant": "fp32"},
        {"t": 103.5, "device": None, "event": "run", "run_id": "R", "model": "tiny-fp32",
         "devices": ["local"], "routes": ["ort"]},
        {"t": 104.0, "device": "local", "event": "phase", "phase": "deploy"},
        {"t": 106.25, "device": "local", "event": "phase", "phase": "agent"},
        {"t": 107.0, "device": "local", "event": "samples", "route": "ort", "n": 100},
    ])
    assert lines == ["farm: model build of tiny (fp32)…", "farm: model build done in 3.5 s",
                     "farm: run R: model tiny-fp32, routes ort on local",
                     "local: deploy…", "local: deploy done in 2.2 s"]


def test_a_deploy_the_device_failed_in_is_not_reported_done() -> None:
    # issue 33: a resume while a device was still down printed "deploy done in 20.0 s" and
    # then failed; the step ended by the device's failure failed
    lines = feed([
        {"t": 10.0, "device": "lab1", "event": "phase", "phase": "deploy"},
        {"t": 11.0, "device": "lab1", "event": "route_done", "route": "ort",
         "status": "failed", "detail": "not run: device failed before this route: refused"},
        {"t": 11.5, "device": "lab1", "event": "device_done", "status": "failed",
         "detail": "refused"},
        {"t": 20.0, "device": "lab2", "event": "phase", "phase": "deploy"},
        {"t": 25.0, "device": "lab2", "event": "device_done", "status": "interrupted",
         "detail": "stopped by Ctrl-C"},
    ])
    assert lines == ["lab1: deploy…", "lab1: deploy failed after 1.0 s",
                     "lab1: ort failed — not run: device failed before this route: refused",
                     "lab1: finished: failed: refused",
                     "lab2: deploy…", "lab2: deploy stopped after 5.0 s",
                     "lab2: finished: interrupted: stopped by Ctrl-C"]


def test_route_results_drift_and_failures_are_one_line_each() -> None:
    lines = feed([
        {"t": 1.0, "device": "pi", "event": "route_done", "route": "ort", "status": "ok",
         "median_ms": 0.24512, "p90_ms": 0.3, "n": 812,
         "drift": ["freq: cpu0 2400000 -> 1800000 kHz (-25.0%)"]},
        {"t": 2.0, "device": "pi", "event": "route_done", "route": "tvm", "status": "failed",
         "detail": "runner exited 1", "median_ms": None},
        {"t": 3.0, "device": "pi", "event": "device_done", "status": "ok", "detail": ""},
    ])
    assert lines == ["pi: ort ok: median 0.245 ms, p90 0.3 ms, n 812",
                     "pi: warning: ort: drift freq: cpu0 2400000 -> 1800000 kHz (-25.0%)",
                     "pi: tvm failed — runner exited 1",
                     "pi: finished: ok"]


def test_timed_step_prints_start_and_duration_only_off_a_terminal() -> None:
    import io

    import pytest
    from rich.console import Console

    from farm.views.steps import timed_step

    log = Console(file=io.StringIO(), force_terminal=False, width=40)
    with timed_step(log, "farm: deploy to a-device-with-a-rather-long-name"):
        pass
    with pytest.raises(KeyError), timed_step(log, "farm: build tvm"):
        raise KeyError("x")
    lines = log.file.getvalue().splitlines()  # type: ignore[attr-defined]
    assert lines[0] == "farm: deploy to a-device-with-a-rather-long-name…"  # never wrapped
    assert lines[1].startswith("farm: deploy to a-device-with-a-rather-long-name done in ")
    assert lines[1].endswith(" s") and lines[3].startswith("farm: build tvm failed after ")
    tty = Console(file=io.StringIO(), force_terminal=True)
    with timed_step(tty, "farm: build tvm"):
        pass
    assert tty.file.getvalue() == ""  # type: ignore[attr-defined]


def test_default_routes_a_slow_build_and_a_skipped_route() -> None:
    """Without --routes the run line says so; a route's build that took a second or more
    gets its own line (a cached one does not); a route the device cannot run is skipped
    with the reason, not reported as a result."""
    lines = feed([
        {"t": 1.0, "device": None, "event": "run", "run_id": "R", "model": "tiny-fp32",
         "devices": ["local"], "routes": ["ort", "tvm", "custom"], "routes_default": True},
        {"t": 2.0, "device": "local", "event": "phase", "phase": "build"},
        {"t": 2.0, "device": "local", "event": "build", "route": "ort", "state": "start"},
        {"t": 2.1, "device": "local", "event": "build", "route": "ort", "state": "done",
         "seconds": 0.1},
        {"t": 2.1, "device": "local", "event": "build", "route": "tvm", "state": "start"},
        {"t": 33.4, "device": "local", "event": "build", "route": "tvm", "state": "done",
         "seconds": 31.3},
        {"t": 34.0, "device": "local", "event": "phase", "phase": "deploy"},
        {"t": 40.0, "device": "local", "event": "route_done", "route": "custom",
         "status": "unavailable", "skipped": True,
         "detail": "cannot build the custom route for x86_64: node 'n' (Sigmoid)"},
    ])
    assert lines == [
        "farm: run R: model tiny-fp32, routes ort,tvm,custom (the default: every route; "
        "--routes to choose) on local",
        "local: build…", "local: built tvm in 31.3 s", "local: build done in 32.0 s",
        "local: deploy…",
        "local: skipped custom: cannot build the custom route for x86_64: node 'n' (Sigmoid)"]
