"""An emulated record is marked in every printer and never ranked on latency."""

from __future__ import annotations

import json

import pytest
from rich.console import Console
from test_report_data import constructed_records, write_store

from farm.report.analysis import analyze
from farm.report.html import render_html
from farm.report.outputs import format_report
from farm.report.terminal import render_report
from farm.results.emulation import NOT_RANKED, WHY
from farm.results.printers import format_records, render_results

EMU = "qemu-a64"


def _records() -> list[dict]:
    return [{**r, "emulated": 1 if r["device"] == EMU else 0} for r in constructed_records()]


def _text(renderables) -> str:
    console = Console(record=True, width=400, force_terminal=True, color_system=None)
    for r in renderables:
        console.print(r)
    return console.export_text()


@pytest.fixture(scope="module")
def stored(tmp_path_factory):
    store, run_id = write_store(tmp_path_factory.mktemp("emu") / "r.sqlite", _records())
    yield store.records(run_id=run_id)
    store.close()


def test_store_keeps_the_emulated_field(stored):
    assert {(r["device"], r["emulated"]) for r in stored} == {("local", 0), (EMU, 1)}


def test_results_printers_mark_the_device(stored):
    table = _text([render_results(stored)])
    assert f"{EMU} (emulated)" in table and "local (emulated)" not in table
    md = format_records(stored, "md", ["device", "route", "median_ms"])
    assert f"| {EMU} (emulated) |" in md and "| local |" in md
    # machine formats keep the raw name and the field
    doc = json.loads(format_records(stored, "json"))
    assert {(r["device"], r["emulated"]) for r in doc["records"]} == {("local", 0), (EMU, 1)}


def test_agent_probe_alone_marks_a_record():
    rec = {**_records()[0], "emulated": None, "device": "phone",
           "cpu_info": {"arch": "aarch64", "emulator": "/usr/bin/qemu-aarch64"}}
    assert "phone (emulated)" in format_records([rec], "md", ["device"])


def test_decision_matrix_never_ranks_emulated_latency(stored):
    report = analyze(stored)
    by = {(d.device, d.criterion): d for d in report.decisions}
    emu_fast = by[(EMU, "fastest")]
    assert emu_fast.winner is None and emu_fast.verdict == NOT_RANKED
    assert by[("local", "fastest")].winner is not None
    # the other criteria do not depend on the emulator's speed: still decided
    assert by[(EMU, "smallest")].winner is not None
    assert by[(EMU, "leanest")].winner is not None
    assert by[(EMU, "coverage")].winner is not None
    assert WHY in report.tables["decision"].caption


def test_every_report_printer_marks_the_device(stored):
    report = analyze(stored)
    terminal = _text(render_report(report))
    assert f"devices local, {EMU} (emulated)" in terminal
    assert f"{EMU} (emulated)" in terminal.split("Decision matrix")[1]
    md = format_report(report, "md")
    assert f"| {EMU} (emulated) |" in md and NOT_RANKED in md
    html = render_html(report)
    assert f"{EMU} (emulated)" in html and f"{EMU} (emulated): latency per" in html
    doc = json.loads(format_report(report, "json"))
    assert doc["meta"]["emulated_devices"] == [EMU]
    assert {r["device"] for r in doc["tables"]["latency"]["rows"]} == {"local", EMU}


def test_compare_does_not_rank_emulated(stored):
    from farm.results.compare import compare_records, format_comparisons, render_comparisons
    from farm.results.emulation import NOT_COMPARED

    comps = compare_records(stored, stored)
    emu = [c for c in comps if c.device == EMU and c.n_a]  # custom is unavailable there
    assert emu and all(c.verdict == NOT_COMPARED and c.p_value is None and c.ratio is None
                       for c in emu)
    assert all(c.verdict != NOT_COMPARED for c in comps if c.device == "local")
    assert f"| {EMU} (emulated) |" in format_comparisons(comps, "md")
    assert f"{EMU} (emulated)" in _text([render_comparisons(comps, "a", "b")])


def test_live_view_marks_an_emulated_device():
    import io

    from farm.views.live import BenchState, apply, render

    state = BenchState()
    for event in ({"device": None, "event": "run", "run_id": "R", "model": "tiny",
                   "devices": ["pixel7", "lab1"], "routes": ["ort"]},
                  {"device": "pixel7", "event": "phase", "phase": "running", "total": 1,
                   "emulated": True},
                  {"device": "lab1", "event": "phase", "phase": "running", "total": 1,
                   "emulated": False}):
        apply(state, event)
    console = Console(file=io.StringIO(), force_terminal=True, color_system=None, width=160)
    console.print(render(state))
    text = console.file.getvalue()
    assert "pixel7 (emulated)" in text and "lab1 (emulated)" not in text
