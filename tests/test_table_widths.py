"""Tables never cut a number (issue 29): at 80, 120 and 200 columns every stored number a
table draws appears whole; a column that does not fit is left out whole and named under the
table; names of rows (device, route) are never cut; a long configuration string becomes one
numbered note. Checked on `farm bench`'s and `results show`'s table, `results list`,
`compare`, the gate and the report's terminal tables, each drawn into a capturing Console
from records in a real store; and through the CLI, whose piped output honours $COLUMNS.

Before this, rich squeezed every column: at 120 columns a stored n of 1983 read `198` and CV
lost its `%`; at 80, VmHWM read `7227` for 72272 and the device `lo`; `compare` read
p = `8.92` for 8.92e-06, at every width, because the ORT configuration took the room."""

from __future__ import annotations

import io
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from rich.console import Console
from test_report_data import constructed_records

from farm.results.compare import compare_records, render_comparisons
from farm.results.gate import gate_runs, render_gate
from farm.results.layout import Col, FitTable, fit
from farm.results.printers import render_results, render_runs
from farm.results.store import ResultStore

WIDTHS = (80, 120, 200)
ORT_FLAGS = {"opt_level": "all", "provider": "CPUExecutionProvider",
             "session_config": {"session.intra_op.allow_spinning": "1",
                                "session.intra_op.spin_duration_us": "250"}}
LONG_DEVICE = "rpi5-bench-rig-b"


def _run(store: ResultStore, shift: float, seed: int) -> str:
    rng = np.random.default_rng(seed)
    run_id = store.start_run(["farm", "bench", "--model", "tiny"], meta={
        "model": "tiny-fp32", "devices": ["local", LONG_DEVICE],
        "routes": ["ort", "tvm", "custom"]})
    base = {"run_id": run_id, "model": "tiny", "variant": "fp32", "threads": 1,
            "status": "ok", "transport": "local", "arch": "x86_64"}
    for device in ("local", LONG_DEVICE):
        # 12 rounds a side: enough for a p over rounds small enough to print as 1e-06
        store.add({**base, "device": device, "route": "ort", "build_flags": ORT_FLAGS,
                   "samples_ms": list(0.342 * shift * rng.lognormal(0, 0.05, 1983)),
                   "rounds": {"planned": 12, "done": 12, "sizes": [166] * 11 + [157]},
                   "load_ms": 1234.5678, "first_run_ms": 17.25, "peak_vmhwm_kb": 72272,
                   "drift": ["freq: [cpu0] 1800000 -> 1200000 kHz (-33.3%)"]})
        store.add({**base, "device": device, "route": "tvm", "build_flags": {"fusion": True},
                   "samples_ms": list(0.166 * rng.lognormal(0, 0.05, 5162)),
                   "load_ms": 6.999, "first_run_ms": 0.35, "peak_vmhwm_kb": 10384})
        store.add({**base, "device": device, "route": "custom", "status": "unavailable",
                   "build_flags": {"fusion": True},
                   "status_detail": "cannot build the custom route for x86_64: node "
                                    "'/embeddings/Mul' (Mul): this Mul pattern is not "
                                    "supported by the custom executor's lowering"})
    store.finish_run(run_id, "ok")
    return run_id


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[ResultStore, str, str]]:
    path = tmp_path_factory.mktemp("widths") / "results.sqlite"
    with ResultStore(path) as s:
        a, b = _run(s, 1.0, 1), _run(s, 1.015, 2)
        yield s, a, b


def draw(renderable: Any, width: int, crop: bool = True) -> str:
    console = Console(width=width, force_terminal=True, color_system=None, record=True,
                      file=io.StringIO())
    console.print(renderable, crop=crop)  # the CLI prints `--columns all` uncropped
    return console.export_text()


def left_out(text: str) -> list[str]:
    """Headers named by the table's 'not shown at N columns: a, b (…)' line(s)."""
    flat = " ".join(line.strip() for line in text.splitlines())
    found = re.findall(r"not shown at \d+ columns: (.*?) \(`--columns all`", flat)
    return [h for names in found for h in names.split(", ")]


def whole(cell: str, text: str) -> bool:
    """`cell` appears with no digit, point, letter or % glued to either side."""
    return re.search(rf"(?<![\w.%]){re.escape(cell)}(?![\w.%])", text) is not None


def once(text: str, config: str) -> bool:
    """`config` (a configuration string) is spelt out exactly once, as a numbered note
    (a long note may wrap and fold: compared without whitespace)."""
    flat = re.sub(r"\s", "", text)
    squeezed = re.sub(r"\s", "", config)
    return flat.count(squeezed) == 1 and re.search(r"\(\d+\)" + re.escape(squeezed), flat) \
        is not None


def assert_numbers_whole(table: FitTable, width: int) -> str:
    """Every `number` or `whole` column is drawn with each cell whole, or named as left out;
    the drawn table is no wider than the console."""
    text = draw(table, width)
    body = text.split("not shown at")[0]
    assert max(len(line.rstrip()) for line in body.splitlines()) <= width, text
    gone = left_out(text)
    for c, col in enumerate(table.columns):
        if col.mode not in ("number", "whole"):
            continue
        if col.header in gone:
            assert not col.keep, f"{col.header} is a kept column\n{text}"
            continue
        for row in table.rows:
            cell = row[c].plain
            assert not cell or whole(cell, body), f"{cell!r} of {col.header!r} cut\n{text}"
    return text


@pytest.mark.parametrize("width", WIDTHS)
def test_bench_and_results_show_table(store: tuple[ResultStore, str, str], width: int
                                      ) -> None:
    s, _, b = store
    records = s.records(b)
    text = assert_numbers_whole(render_results(records, title=f"run {b}"), width)
    gone = left_out(text)
    for r in records:
        assert whole(r["device"], text) and whole(r["route"], text)
    ort = next(r for r in records if r["route"] == "ort")
    # the values the issue saw cut, from the stored record
    assert whole(str(ort["n"]), text) and ort["n"] == 1983
    assert whole(f"{ort['median_ms']:.3f}", text)
    if "VmHWM KiB" not in gone:
        assert whole("72272", text)
    if "CV" not in gone:
        assert whole(f"{ort['cv']:.1%}", text)
    if width >= 120:
        assert "VmHWM KiB" not in gone and "CV" not in gone


@pytest.mark.parametrize("width", WIDTHS)
def test_results_list(store: tuple[ResultStore, str, str], width: int) -> None:
    s, a, b = store
    table = render_runs(s.runs())
    text = assert_numbers_whole(table, width)
    assert whole(a, text) and whole(b, text) and "tiny-fp32" in text
    assert [c.header for c in table.columns][5:8] == ["model", "devices", "routes"]
    assert LONG_DEVICE in text and all(whole(r, text) for r in ("ort", "tvm", "custom"))


@pytest.mark.parametrize("width", WIDTHS)
def test_compare(store: tuple[ResultStore, str, str], width: int) -> None:
    s, a, b = store
    comps = compare_records(s.records(a), s.records(b))
    text = assert_numbers_whole(render_comparisons(comps, a, b), width)
    ort = next(c for c in comps if c.route == "ort" and c.device == "local")
    assert ort.p_value is not None and 0 < ort.p_value < 1e-4
    assert "e-" in f"{ort.p_value:.3g}"
    if width >= 120 or "p" not in left_out(text):
        assert whole(f"{ort.p_value:.3g}", text), text  # e.g. 8.92e-06, never `8.92`
    assert whole(f"{ort.ratio:.3f}x", text)
    # the long ORT configuration is spelt out once, as a note the rows point to
    assert once(text, "opt=all, provider=CPUExecutionProvider"), text


@pytest.mark.parametrize("width", WIDTHS)
def test_gate(store: tuple[ResultStore, str, str], width: int) -> None:
    s, a, b = store
    result = gate_runs(s, a, b, max_slowdown=0.05)
    text = assert_numbers_whole(render_gate(result), width)
    assert once(text, "opt=all, provider=CPUExecutionProvider")


@pytest.mark.parametrize("width", WIDTHS)
def test_report_tables(tmp_path: Path, width: int) -> None:
    from test_report_data import write_store

    from farm.report.analysis import load_report
    from farm.report.terminal import render_report, render_table

    recs = constructed_records()
    for r in recs:  # ORT's flags as its runner records them: a ~100-character label
        if r["route"] == "ort":
            level = r["build_flags"]["graph_optimization"]
            r["build_flags"] = {**ORT_FLAGS, "opt_level": level, "build_s": 0.4}
    s, run_id = write_store(tmp_path / "r.sqlite", recs)
    report = load_report(s, [run_id])
    for table in report.tables.values():
        assert_numbers_whole(render_table(table), width)
    console = Console(width=width, force_terminal=True, color_system=None, record=True,
                      file=io.StringIO())
    for part in render_report(report):  # one report: its tables share the numbered notes
        console.print(part)
    text = console.export_text()
    # one configuration string, numbered once for every table of the report
    tables = text.split("warning: per-op")[0]
    for level in ("all", "disable"):
        assert once(tables, f"opt={level}, provider=CPUExecutionProvider, session_config")
    s.close()


def test_full_keeps_every_column_and_is_wider() -> None:
    cols = [Col("device", "whole", keep=True), *(Col(f"stat {i} ms") for i in range(12))]
    rows = [["local", *(f"{1000 + i}.125" for i in range(12))]]
    narrow = fit(cols, rows, 80)
    assert narrow.dropped and all(w >= 8 for w in narrow.widths[1:])
    full = fit(cols, rows, 80, full=True)
    assert full.dropped == [] and len(full.kept) == 13
    text = draw(FitTable(cols, rows, full=True), 80, crop=False)
    assert all(whole(f"{1000 + i}.125", text) for i in range(12))
    assert "not shown" not in text


def test_numbers_keep_their_width_and_headers_wrap() -> None:
    """A header may wrap at its spaces to make room; a number never does; a column that
    cannot have its number's width is left out whole."""
    cols = [Col("device", "whole", keep=True), Col("95% CI median ms"), Col("n")]
    rows = [["local", "[0.340, 0.344]", "1983"]]
    plan = fit(cols, rows, 27)  # device 6 + 14 + the frame's 7: no room for n
    assert plan.widths == [6, 14] and plan.dropped == ["n"]
    text = draw(FitTable(cols, rows), 27)
    assert whole("[0.340, 0.344]", text) and "95% CI" in text  # its header on two lines
    assert "1983" not in text.split("not shown")[0] and "not shown at 27 columns: n" in text


def test_cli_honours_columns_when_piped(store: tuple[ResultStore, str, str],
                                        monkeypatch: pytest.MonkeyPatch,
                                        capsys: pytest.CaptureFixture[str]) -> None:
    """`COLUMNS=80 farm results show latest | less` lays out for 80 columns (piped output
    without $COLUMNS keeps 160); `--columns all` leaves nothing out, however wide."""
    from farm.cli.main import main

    s, a, b = store
    monkeypatch.setenv("COLUMNS", "80")
    assert main(["results", "show", b, "--store", str(s.path)]) == 0
    out = capsys.readouterr().out
    assert max(len(line) for line in out.splitlines()) <= 80
    assert "not shown at 80 columns:" in " ".join(out.split()) and whole("1983", out)
    assert main(["compare", a, b, "--store", str(s.path), "--columns", "all"]) == 0
    out = capsys.readouterr().out
    assert "not shown" not in out and max(len(line) for line in out.splitlines()) > 80
    monkeypatch.delenv("COLUMNS")
    assert main(["results", "list", "--store", str(s.path)]) == 0
    out = capsys.readouterr().out
    assert max(len(line) for line in out.splitlines()) <= 160 and "not shown" not in out
