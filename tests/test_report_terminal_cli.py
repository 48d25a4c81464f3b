"""The terminal rendering (rich, captured) and the `farm report` command end to end."""

from __future__ import annotations

import json

import pytest
from rich.console import Console
from test_report_data import constructed_records, write_store

from farm.cli.main import main
from farm.report.analysis import load_report
from farm.report.terminal import render_report


@pytest.fixture(scope="module")
def stored(tmp_path_factory):
    path = tmp_path_factory.mktemp("store") / "r.sqlite"
    store, run_id = write_store(path, constructed_records())
    store.close()
    return path, run_id


def _capture(renderables, width=260):
    console = Console(force_terminal=True, color_system=None, width=width)
    with console.capture() as cap:
        for r in renderables:
            console.print(r)
    return cap.get()


def test_terminal_tables_name_statistic_and_unit(stored):
    from farm.results.store import ResultStore

    path, run_id = stored
    with ResultStore(path, create=False) as store:
        report = load_report(store, [run_id])
    text = _capture(render_report(report))
    for header in ("median ms", "p90 ms", "CI95 low ms", "CI95 high ms", "peak VmHWM KiB",
                   "total KiB", "attention ms", "reduction %", "why not", "verdict"):
        assert header in text, header
    assert "95% CI of the median by seeded two-level bootstrap" in text.replace("\n", " ")
    for row in report.tables["latency"].rows:
        if row["median_ms"] is not None:
            assert f"{row['median_ms']:.3f}" in text
    # constant columns move into the title instead of repeating on every row
    assert "(variant: fp32, threads: 1)" in text
    assert "missing CPU feature: asimddp" in text


def test_farm_report_json_and_html(stored, tmp_path, capsys):
    path, run_id = stored
    html = tmp_path / "out" / "r.html"
    code = main(["report", run_id[:12], "--store", str(path), "--output", "json",
                 "--html", str(html)])
    assert code == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["meta"]["run_ids"] == [run_id]
    assert set(doc["tables"]) == {"latency", "memory", "size", "ops", "categories", "fusion",
                                  "availability", "build", "decision"}
    assert html.read_text().startswith("<!DOCTYPE html>")


def test_farm_report_latest_table_and_errors(stored, tmp_path, capsys):
    path, _ = stored
    assert main(["report", "--latest", "--store", str(path)]) == 0
    out = capsys.readouterr().out
    assert "Decision matrix" in out and "median ms" in out
    assert main(["report", "nope", "--store", str(path)]) == 1
    assert "no run matches 'nope'" in capsys.readouterr().err
    assert main(["report", "--store", str(tmp_path / "missing.sqlite")]) == 1
    assert main(["report", "x", "--latest", "--store", str(path)]) == 2
