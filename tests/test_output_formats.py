"""md and csv of `bench`, `results show` and `compare` on a real 3-route bench on `local`:
the summary (one row per device x route x variant x threads, statistics named, no raw
arrays), parsed back; `--columns all` keeps every field; json keeps the whole record."""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path

import pytest

from farm.cli.main import main
from farm.inventory.builtin import local_device
from farm.results.printers import SUMMARY_COLUMNS
from farm.results.schema import FIELDS

FAST = ["--routes", "ort,tvm,custom", "--runs", "10", "--min-time", "0.1", "--max-time", "2",
        "--warmup", "1", "--warmup-time", "0", "--profile-runs", "1", "--pause", "0"]
RAW = ("samples_ms", "ops", "cpu_info", "build_flags")  # arrays and nested records


@pytest.fixture
def local_bench(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("FARM_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("FARM_LOCAL_WORKDIR", str(tmp_path / "wd"))
    monkeypatch.delenv("FARM_INVENTORY", raising=False)
    monkeypatch.chdir(tmp_path)  # no ./devices.yaml: the fleet is the built-in `local`
    return tmp_path / "s.sqlite"


def parse_md(text: str) -> list[dict[str, str]]:
    """A GitHub pipe table -> rows keyed by header (escaped pipes kept in their cell)."""
    lines = [line for line in text.splitlines() if line.startswith("|")]

    def cells(line: str) -> list[str]:
        parts, cur, i = [], "", 1
        while i < len(line):
            if line[i] == "\\" and line[i + 1:i + 2] == "|":
                cur, i = cur + "|", i + 2
                continue
            if line[i] == "|":
                parts.append(cur.strip())
                cur = ""
            else:
                cur += line[i]
            i += 1
        return parts

    header = cells(lines[0])
    assert set(lines[1].replace("|", "").replace("-", "").replace(":", "")) <= {""}
    return [dict(zip(header, cells(line), strict=True)) for line in lines[2:]]


def check_summary_csv(text: str) -> list[dict[str, str]]:
    rows = list(csv.DictReader(io.StringIO(text)))
    assert rows and set(RAW).isdisjoint(rows[0])
    assert "median_ms" in rows[0] and "p90_ms" in rows[0]
    for row in rows:
        assert "[" not in row["median_ms"] and float(row["median_ms"]) > 0
    return rows


def test_bench_results_and_compare_md_csv_are_the_summary(
        local_bench: Path, capsys: pytest.CaptureFixture[str]) -> None:
    store = ["--store", str(local_bench)]
    assert main(["bench", *FAST, *store, "--output", "md"]) == 0
    md = capsys.readouterr().out
    rows = parse_md(md)
    keys = {(r["device"], r["route"], r["variant"], r["thr"]) for r in rows}
    assert keys == {("local", route, "fp32", "1") for route in ("ort", "tvm", "custom")}
    assert len(rows) == 3  # one row per configuration
    assert "median ms" in rows[0] and "p90 ms" in rows[0]  # the statistic is named
    assert all(float(r["median ms"]) > 0 and r["status"] == "ok" for r in rows)
    assert "samples" not in md.splitlines()[0] and len(md) < 2000  # no raw arrays

    assert main(["bench", *FAST, *store, "--output", "csv"]) == 0
    assert len(check_summary_csv(capsys.readouterr().out)) == 3

    assert main(["results", "show", "latest", *store, "--output", "csv"]) == 0
    shown = check_summary_csv(capsys.readouterr().out)
    assert list(shown[0]) == ["device", "route", "variant", "threads", "status", "n",
                              "median_ms", "ci95_low_ms", "ci95_high_ms",
                              *SUMMARY_COLUMNS[SUMMARY_COLUMNS.index("p90_ms"):]]
    assert main(["results", "show", "latest", *store, "--output", "md"]) == 0
    assert len(parse_md(capsys.readouterr().out)) == 3

    # every field on request, and in json
    assert main(["results", "show", "latest", *store, "--output", "csv",
                 "--columns", "all"]) == 0
    full = list(csv.DictReader(io.StringIO(capsys.readouterr().out)))
    assert list(full[0]) == [f.name for f in FIELDS]
    assert len(json.loads(full[0]["samples_ms"])) == int(full[0]["n"])
    assert main(["results", "show", "latest", *store, "--output", "json"]) == 0
    whole = json.loads(capsys.readouterr().out)["records"]
    assert "samples_ms" in whole[0]
    # the ISA level: custom and TVM at the cap ($FARM_ISA) or the host's, ORT at the host's
    local = local_device()
    assert {r["route"]: r["isa"] for r in whole} == {
        "ort": local.level, "tvm": local.isa_level, "custom": local.isa_level}
    # every runner records its profiled runs' own wall time (the report's per-op check)
    assert {r["route"] for r in whole if r["ops"]["run_ms"] > 0} == {"ort", "tvm", "custom"}

    runs = ["results", "list", *store, "--output", "json"]
    assert main(runs) == 0
    first, second = (r["run_id"] for r in json.loads(capsys.readouterr().out)["runs"])
    assert main(["compare", first, second, *store, "--output", "md"]) == 0
    compared = parse_md(capsys.readouterr().out)
    assert {r["route"] for r in compared} == {"ort", "tvm", "custom"}
    assert all(r["ratio"].endswith("x") and r["median_a_ms"] for r in compared)
    assert main(["compare", first, second, *store, "--output", "csv"]) == 0
    rows_c = list(csv.DictReader(io.StringIO(capsys.readouterr().out)))
    assert len(rows_c) == 3 and all(float(r["p_value"]) <= 1 for r in rows_c)


def test_unknown_column_fails_before_the_bench(local_bench: Path,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["bench", *FAST, "--store", str(local_bench), "--output", "md",
                 "--columns", "median"]) == 2
    assert "unknown column" in capsys.readouterr().err
    assert not local_bench.exists()
