"""Printers generated from the field list: csv parses back, md has its header, json and
jsonl load, and the rich tables render into a capturing Console."""

from __future__ import annotations

import csv
import io
import json
import sqlite3
from pathlib import Path

import pytest
from rich.console import Console

from farm.results.printers import (
    format_records,
    format_runs,
    from_csv,
    render_results,
    render_runs,
    stat_caption,
)
from farm.results.schema import FIELD_NAMES, FIELDS, SCHEMA_VERSION
from farm.results.store import ResultStore


@pytest.fixture
def stored(tmp_path: Path):  # type: ignore[no-untyped-def]
    with ResultStore(tmp_path / "r.sqlite") as store:
        run_id = store.start_run("farm bench")
        recs = [
            store.add({"run_id": run_id, "device": "local", "route": "ort", "variant": "fp32",
                       "threads": 1, "status": "ok", "model": "tiny|pipe",
                       "samples_ms": [1.1, 1.3, 0.9, 1.7, 1.2, 1.25], "load_ms": 40.125,
                       "peak_vmhwm_kb": 51200, "build_flags": {"opt": "all", "q": "a,b\"c"},
                       "drift": ["freq: [cpu0] 1800000 -> 1200000 kHz (-33.3%)"]}),
            store.add({"run_id": run_id, "device": "local", "route": "tvm", "variant": "fp32",
                       "threads": 1, "status": "failed", "status_detail": "build failed: x"}),
        ]
        store.finish_run(run_id, "partial")
        yield store, recs


def test_csv_parses_back(stored) -> None:  # type: ignore[no-untyped-def]
    _, recs = stored
    text = format_records(recs, "csv")
    rows = list(csv.reader(io.StringIO(text)))
    assert tuple(rows[0]) == FIELD_NAMES and len(rows) == 3
    assert from_csv(text) == recs  # every type, JSON field and float digit survives


def test_csv_column_subset_names_the_statistic(stored) -> None:  # type: ignore[no-untyped-def]
    _, recs = stored
    text = format_records(recs, "csv", "device,route,median_ms,ci95")
    header, first, _ = list(csv.reader(io.StringIO(text)))
    assert header == ["device", "route", "median_ms", "ci95_low_ms", "ci95_high_ms"]
    assert float(first[2]) == recs[0]["median_ms"]


def test_md_has_labelled_header(stored) -> None:  # type: ignore[no-untyped-def]
    _, recs = stored
    lines = format_records(recs, "md", ["device", "model", "median_ms", "ci95", "p90_ms",
                                        "cv"]).splitlines()
    assert lines[0] == "| device | model | median ms | 95% CI median ms | p90 ms | CV |"
    assert lines[1] == "|---|---|---:|---:|---:|---:|"
    assert len(lines) == 4
    assert "tiny\\|pipe" in lines[2]  # a pipe in a cell cannot break the table
    drift = format_records(recs, "md", ["drift"]).splitlines()[2]
    assert "[cpu0] 1800000 -> 1200000 kHz (-33.3%)" in drift
    assert f"{recs[0]['median_ms']:.3f}" in lines[2]
    full = format_records(recs, "md").splitlines()
    assert full[0].count("|") == len(FIELD_NAMES) + 1


def test_json_and_jsonl_load(stored) -> None:  # type: ignore[no-untyped-def]
    _, recs = stored
    doc = json.loads(format_records(recs, "json"))
    assert doc["schema_version"] == SCHEMA_VERSION
    assert doc["fields"] == list(FIELD_NAMES) and doc["records"] == recs
    lines = format_records(recs, "jsonl").splitlines()
    assert len(lines) == 2
    first = json.loads(lines[0])
    assert next(iter(first)) == "schema_version"
    assert {k: v for k, v in first.items() if k != "schema_version"} == recs[0]
    subset = json.loads(format_records(recs, "json", ["route", "p99_ms"]))
    assert subset["records"][1] == {"route": "tvm", "p99_ms": None}


def test_sql_recreates_the_records(stored) -> None:  # type: ignore[no-untyped-def]
    _, recs = stored
    db = sqlite3.connect(":memory:")
    db.executescript(format_records(recs, "sql"))
    rows = db.execute("SELECT * FROM records ORDER BY created_utc").fetchall()
    kinds = {f.name: f.type for f in FIELDS}
    back = [{n: json.loads(v) if kinds[n] == "json" and v is not None else v
             for n, v in zip(FIELD_NAMES, row, strict=True)} for row in rows]
    assert back == recs  # quotes in JSON text and every float digit survive
    with pytest.raises(ValueError, match="every field"):
        format_records(recs, "sql", ["route"])


def test_unknown_columns_and_formats() -> None:
    with pytest.raises(ValueError, match="unknown column"):
        format_records([], "csv", ["median"])
    with pytest.raises(ValueError, match="unknown output format"):
        format_records([], "xml")


def test_rich_table_names_the_statistic(stored) -> None:  # type: ignore[no-untyped-def]
    _, recs = stored
    console = Console(force_terminal=True, color_system=None, width=160, record=True)
    console.print(render_results(recs, title="run x"))
    text = console.export_text()
    for label in ("median ms", "95% CI median ms", "p90 ms", "CV", "VmHWM KiB"):
        assert label in text
    r = recs[0]
    assert f"[{r['ci95_low_ms']:.3f}, {r['ci95_high_ms']:.3f}]" in text
    assert f"{r['median_ms']:.3f}" in text and f"{r['cv']:.1%}" in text
    assert "freq x1" in text  # drift: flags counted by kind
    assert "build failed: x" in text and "failed" in text
    assert "95% CI of the median (seeded percentile bootstrap)" in text
    assert "median" in stat_caption(["median_ms"])  # type: ignore[operator]
    assert stat_caption(["device", "route"]) is None


def test_runs_printers(stored) -> None:  # type: ignore[no-untyped-def]
    store, _ = stored
    runs = store.runs()
    console = Console(force_terminal=True, color_system=None, width=160, record=True)
    console.print(render_runs(runs))
    text = console.export_text()
    assert runs[0].run_id in text and "partial" in text and "farm bench" in text
    assert json.loads(format_runs(runs, "json"))["runs"][0]["n_records"] == 2
    (row,) = csv.DictReader(io.StringIO(format_runs(runs, "csv")))
    assert row["status"] == "partial"
    assert format_runs(runs, "md").splitlines()[0].startswith("| run_id |")


def test_unfused_rows_name_their_route_key_in_the_table_and_md() -> None:
    # issue 33: `ort-unfused` / `tvm-unfused` rows printed as plain `ort` / `tvm` beside
    # their fused twins; the record keeps the base route (csv/json), the table names the key
    base = {"device": "local", "variant": "fp32", "threads": 1, "status": "ok", "n": 3,
            "median_ms": 1.0}
    recs = [{**base, "route": "ort", "build_flags": {"opt_level": "all"}},
            {**base, "route": "ort", "build_flags": {"opt_level": "disable"}},
            {**base, "route": "tvm", "build_flags": {"fusion": True}},
            {**base, "route": "custom", "build_flags": {"fusion": False}}]
    console = Console(force_terminal=True, color_system=None, width=160, record=True)
    console.print(render_results(recs, ["device", "route", "median_ms"], title="run x"))
    routes = [line.split("│")[1].strip() for line in console.export_text().splitlines()
              if line.startswith(" local")]
    assert routes == ["ort", "ort-unfused", "tvm", "custom-unfused"]
    md = format_records(recs, "md", ["device", "route"])
    assert "| ort-unfused |" in md and "| custom-unfused |" in md
    assert [r["route"] for r in json.loads(format_records(recs, "json"))["records"]] == \
        ["ort", "ort", "tvm", "custom"]
