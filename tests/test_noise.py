"""Saying when the machine is noisy: CPU steal from /proc/stat readings, the spread of
round medians, and where the warnings reach the reader (step lines, live view, table)."""

from __future__ import annotations

import pytest
from rich.console import Console

from farm.results.noise import (
    cpu_shares,
    noise_warnings,
    round_facts,
    spread_pct,
    steal_warning,
    warnings_of,
)
from farm.results.printers import render_results
from farm.views.live import BenchState, apply, render
from farm.views.steps import StepLines

JIFFIES = ("user", "nice", "system", "idle", "iowait", "irq", "softirq", "steal")


def _state(*values: int, load: float = 0.5) -> dict:  # type: ignore[type-arg]
    return {"cpu_jiffies": dict(zip(JIFFIES, values, strict=True)), "load": [load, 0, 0]}


def test_steal_and_busy_from_two_proc_stat_readings() -> None:
    before = _state(1000, 0, 100, 5000, 0, 0, 0, 10)
    # 200 ticks passed: 100 user, 40 idle, 40 iowait, 20 stolen by the hypervisor
    after = _state(1100, 0, 100, 5040, 40, 0, 0, 30, load=2.5)
    assert cpu_shares(before, after) == {"steal_pct": 10.0, "busy_pct": 60.0}
    assert round_facts(before, after) == {"steal_pct": 10.0, "busy_pct": 60.0, "load1": 2.5}
    # missing, mismatched or wrapped counters are no reading, not a wrong one
    assert cpu_shares(None, after) is None and cpu_shares(after, before) is None
    assert cpu_shares({"cpu_jiffies": {"user": 1}}, after) is None
    assert round_facts({}, {})["steal_pct"] is None
    assert "CPU steal 10.0 %" in (steal_warning(cpu_shares(before, after)) or "")
    assert steal_warning({"steal_pct": 1.0}) is None


def test_spread_and_warnings() -> None:
    assert spread_pct([0.23, 0.25, 0.37]) == pytest.approx((0.37 / 0.23 - 1) * 100)
    assert spread_pct([0.3]) is None and spread_pct(None) is None
    assert warnings_of([1.0, 1.05], [0.0, 1.0]) == []
    assert warnings_of([1.0, 1.3], None) == ["round medians spread 30 % > 10 %"]
    assert warnings_of([1.0], [0.0, 7.5]) == ["CPU steal up to 7.5 % > 5 %"]
    record = {"round_medians_ms": [0.23, 0.37], "rounds": {"steal_pct": [0.0, 6.0]}}
    assert len(noise_warnings(record)) == 2 and noise_warnings({}) == []


def test_the_reader_sees_the_warning_in_steps_live_view_and_table() -> None:
    done = {"event": "route_done", "device": "local", "route": "ort", "status": "ok",
            "median_ms": 0.3, "p90_ms": 0.4, "n": 6000, "rounds": 6,
            "noise": ["round medians spread 59 % > 10 %"]}
    lines = StepLines().lines(done)
    assert lines[0] == "local: ort ok: median 0.3 ms, p90 0.4 ms, n 6000, 6 rounds"
    assert lines[1] == "local: warning: ort: noisy: round medians spread 59 % > 10 %"
    state = BenchState()
    apply(state, {"event": "state", "device": "local", "steal_pct": 12.0})
    apply(state, done)
    console = Console(force_terminal=True, color_system=None, width=200, record=True)
    console.print(render(state))
    text = console.export_text()
    assert "noisy ort: round medians spread 59 %" in text and "CPU steal 12.0 %" in text
    record = {"device": "local", "route": "ort", "status": "ok", "n": 3, "median_ms": 0.3,
              "round_medians_ms": [0.23, 0.37], "rounds": {"sizes": [2, 1]},
              "ci_method": "hierarchical bootstrap: rounds, then samples within each round",
              "ci95_low_ms": 0.2, "ci95_high_ms": 0.4}
    console = Console(force_terminal=True, color_system=None, width=200, record=True)
    console.print(render_results([record]))
    text = console.export_text()
    assert "NOISY local/ort: round medians spread 61 % > 10 %" in text
    assert "CI by hierarchical bootstrap" in text
