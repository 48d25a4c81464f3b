"""`farm report history`: series per model x device x route x variant from either store,
points labelled with run id and commit, the largest changes first, an offline page that
renders in headless Chromium."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import numpy as np
import pytest
from test_html_report import CHROMIUM, _dump, _png_size, parse

from farm.cli.main import main
from farm.report.history import load_history
from farm.report.history_html import render_history
from farm.results.backend import Store
from farm.results.open_store import open_store
from farm.results.schema import empty_record

COMMITS = ["1a2b3c4d5e6f", "2b3c4d5e6f70", "3c4d5e6f7081", "4d5e6f708192", "5e6f708192a3"]


def fill_history(store: Store, runs: int = 5) -> dict[tuple[str, str, int], list[float]]:
    """Runs of tiny on two devices x two routes; ort on dev-b slows 30 % from run 4 on.
    Returns the stored medians per (device, route, run index)."""
    rng = np.random.default_rng(7)
    medians: dict[tuple[str, str, int], list[float]] = {}
    for i in range(runs):
        run_id = store.start_run(["farm", "bench"], {"model": "tiny"})
        for device in ("dev-a", "dev-b"):
            for route, base in (("ort", 2.0), ("custom", 1.5)):
                level = base * (1.3 if (device, route, i >= 3) == ("dev-b", "ort", True)
                                else 1.0)
                samples = list(level + rng.normal(0, 0.02, 40))
                rec = store.add(empty_record(
                    run_id=run_id, device=device, transport="local", route=route,
                    model="tiny", variant="fp32", threads=1, status="ok",
                    samples_ms=samples, farm_commit=COMMITS[i],
                    created_utc=f"2026-12-0{i + 1}T10:00:00.000000Z",
                    policy={"seed": 0, "n_boot": 200}))
                medians.setdefault((device, route, i), []).append(rec["median_ms"])
        store.finish_run(run_id, "ok")
    return medians


def _check(history, medians) -> None:
    assert [s.name for s in history.series] == [
        f"tiny · {d} · {r} · fp32 · 1 thr" for d in ("dev-a", "dev-b") for r in ("custom", "ort")]
    for s in history.series:
        assert [p.commit for p in s.points] == COMMITS
        assert [p.median_ms for p in s.points] == [
            medians[(s.device, s.route, i)][0] for i in range(5)]
    top = history.changes[0]
    assert (top.series.device, top.series.route) == ("dev-b", "ort")
    assert (top.before.commit, top.after.commit) == (COMMITS[2], COMMITS[3])
    assert 25 < top.pct < 35 and top.clear
    assert not history.changes[1].clear  # noise only elsewhere


def test_history_from_postgresql_and_sqlite_agree(pg_url, tmp_path, monkeypatch, capsys) -> None:
    monkeypatch.setenv("FARM_HOME", str(tmp_path / "home"))
    with open_store(pg_url) as pg:
        medians = fill_history(pg)
        _check(load_history(pg), medians)
        only = load_history(pg, devices=["dev-b"], routes=["ort"])
        assert [s.name for s in only.series] == ["tiny · dev-b · ort · fp32 · 1 thr"]
    local = tmp_path / "r.sqlite"
    assert main(["results", "pull", pg_url, "--store", str(local)]) == 0
    with open_store(local) as lite:
        _check(load_history(lite), medians)
    page = tmp_path / "h.html"
    assert main(["report", "history", "--model", "tiny", "--html", str(page),
                 "--store", pg_url]) == 0
    lines = capsys.readouterr().out.split("4 series, 20 measured records", 1)[1].splitlines()
    assert lines[1].startswith("  +") and "dev-b · ort" in lines[1], lines
    assert "farm-test-pw" not in page.read_text()
    dom = parse(page.read_text())
    plots = dom.find("svg", "history")
    assert len(plots) == 4 and {a["data-points"] for a, _ in plots} == {"5"}
    points = dom.find("circle", "point")
    assert len(points) == 20
    assert {a["data-commit"] for a, _ in points} == set(COMMITS)
    stored = sorted(v[0] for v in medians.values())
    assert sorted(float(a["data-value"]) for a, _ in points) == stored
    first = dom.find("tr")[1][0]
    assert first["data-series"] == "tiny · dev-b · ort · fp32 · 1 thr"
    assert main(["report", "history", "--model", "nope", "--store", pg_url]) == 1
    assert "no measured records" in capsys.readouterr().err


@pytest.mark.skipif(not os.path.exists(CHROMIUM), reason="chromium is not installed")
def test_history_page_renders_in_headless_chromium(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("FARM_HOME", str(tmp_path / "home"))
    with open_store(tmp_path / "r.sqlite") as store:
        fill_history(store)
        history = load_history(store)
    page = tmp_path / "history.html"
    page.write_text(render_history(history))
    flags = [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
             "--no-first-run", "--disable-background-networking",
             "--disable-component-update", "--disable-sync", "--enable-logging=stderr",
             "--v=0", f"--user-data-dir={tmp_path / 'profile'}"]
    url = page.resolve().as_uri()
    dom, console = _dump(flags, url)
    assert console == [], console
    assert dom.text.get("status") == "ok", dom.text.get("status")
    status = next(a for a, _ in dom.find("div") if a.get("id") == "status")
    assert int(status["data-plots"]) == 4 and status["data-wide-tables"] == "0"
    shot = Path(os.environ.get("FARM_HISTORY_SHOT") or tmp_path / "history.png")
    subprocess.run([*flags, f"--screenshot={shot}", "--window-size=1200,2200", url],
                   capture_output=True, text=True, timeout=120, check=True)
    assert _png_size(shot) == (1200, 2200) and shot.stat().st_size > 30_000
