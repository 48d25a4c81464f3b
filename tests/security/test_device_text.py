"""Text a device sends (error messages, stderr tails) is printed as text, never as rich
markup: a `[/red]` from a hostile or unlucky device must not crash the final report."""

from __future__ import annotations

import io
from pathlib import Path

from rich.console import Console

from farm.bench.runner import BenchResult
from farm.cli.bench_cmd import report
from farm.results.store import ResultStore

HOSTILE = "runner said [/red] and [bold]x[/bold] [link=file:///etc/passwd]y[/link]"


def test_report_prints_device_markup_literally(tmp_path: Path) -> None:
    with ResultStore(tmp_path / "r.sqlite") as store:
        run_id = store.start_run("t")
        rec = store.add({"run_id": run_id, "device": "evil", "route": "ort",
                         "status": "failed", "status_detail": HOSTILE})
        result = BenchResult(run_id, "partial", {"evil": ("failed", HOSTILE),
                                                 "good": ("ok", "")}, [rec])
        out, err = io.StringIO(), io.StringIO()
        report(result, "table", None, Console(file=out, width=200),
               Console(file=err, width=400, force_terminal=True, color_system=None), store)
    text = err.getvalue()
    assert f"farm: evil: failed: {HOSTILE}" in text  # literally, brackets and all
    assert "evil" in out.getvalue()  # the table rendered too
