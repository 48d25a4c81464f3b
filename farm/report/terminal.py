"""The report in the terminal: rich tables like a benchmark article's.

Contract: `render_report(report) -> list[RenderableType]` is a pure function of the
`Report` (a header, then one table per report table, in order); `print_report(report,
console)` prints them. Column headers carry the statistic and the unit ("median ms",
"peak VmHWM KiB (max of records)"), each table's caption says how the numbers were
computed. Columns whose value is the same on every row (e.g. variant, threads) are moved
into the title to keep tables narrow; each table is laid out for the terminal's width
(`farm.results.layout`: numbers never cut, a long configuration a numbered note, columns
that do not fit left out and named; `full` keeps them); md/csv/json keep every column.
"""

from __future__ import annotations

from rich.console import Console, Group, RenderableType
from rich.text import Text

from farm.report import opcheck
from farm.report.analysis import Report
from farm.report.emulated import device_labels
from farm.report.tables import Column, ReportTable, cell, row_cell
from farm.results.layout import Col, FitTable, Notes

_STATUS_STYLE = {"ok": "green", "invalid": "red", "partial": "yellow", "failed": "red",
                 "unavailable": "dim"}
_VERDICT_STYLE = {"winner": "bold green", "no significant difference": "yellow"}
_COMPACTABLE = ("variant", "threads", "model", "unit", "scope")


def _constant_columns(table: ReportTable) -> dict[str, str]:
    """Compactable columns whose cell is identical on every row (needs >= 2 rows)."""
    if len(table.rows) < 2:
        return {}
    out = {}
    for col in table.columns:
        if col.key in _COMPACTABLE:
            cells = {cell(col, row.get(col.key)) for row in table.rows}
            if len(cells) == 1:
                out[col.label] = cells.pop()
    return out


def _style(col: Column, value: object) -> str:
    if col.key in ("status", "statuses"):
        return _STATUS_STYLE.get(str(value).split("×")[0], "")
    if col.key == "verdict":
        return _VERDICT_STYLE.get(str(value), "")
    if col.key == "available":
        return "green" if value else "red"
    if col.key == "significant":
        return "bold" if value else "dim"
    if col.key in ("op_share_check", "op_flagged"):
        return "bold red" if value is True or str(value).startswith("FLAG") else ""
    return ""


# layout (farm.results.layout): what names a row is kept whole; a long configuration string
# becomes a numbered note under its table; lists of op names, reasons and notes wrap; at a
# narrow terminal the highest `drop` goes first, then the rightmost column
_KEEP = {"device", "route", "config", "criterion", "block", "median_ms", "winner"}
_WHOLE = {"variant", "status", "statuses", "available", "significant", "scope", "unit",
          "margin", "runner_up", "op_share_check"}
_DROP = {"first_run_ms": 9, "load_ms": 8, "min_ms": 8, "mean_ms": 7, "p99_ms": 6,
         "threads": 6, "variant": 5, "cv": 4, "memory_method": 4, "method": 3,
         "profiled_run_ms": 3, "named_share_pct": 2, "profiled_share_pct": 2,
         # what a reader must not miss: a decision's verdict, a flagged per-op row
         "verdict": -2, "op_flagged": -1}
# long strings repeated on many rows (configurations, the categories table's explanation of
# a category with no op of its own): spelt out once under the first table, numbered
_NOTES = {"config", "off_config", "on_config", "note"}


def layout_column(col: Column) -> Col:
    drop = _DROP.get(col.key, 0)
    if col.numeric:
        return Col(col.label, "number", keep=col.key in _KEEP, drop=drop)
    if col.key in _NOTES:
        return Col(col.label, "note", keep=col.key in _KEEP, cap=24, drop=drop)
    if col.key in _KEEP or col.key in _WHOLE:
        return Col(col.label, "whole", keep=col.key in _KEEP, drop=drop)
    return Col(col.label, "wrap", cap=36, drop=drop)


def render_table(table: ReportTable, full: bool = False, notes: Notes | None = None
                 ) -> FitTable:
    """One report table laid out for the width it is printed at (numbers whole, columns
    left out named); `full`: every column (`--columns all`); `notes`: the numbered
    configuration strings, shared by the report's tables."""
    constant = _constant_columns(table)
    title = table.title
    if constant:
        title += " (" + ", ".join(f"{k}: {v}" for k, v in constant.items()) + ")"
    cols = [c for c in table.columns if c.label not in constant]
    # Text, not markup: cells hold brackets and JSON that rich would parse
    rows = [[Text(row_cell(c, row), style=_style(c, row.get(c.key))) for c in cols]
            for row in table.rows]
    if not rows:
        rows = [[Text("(none)"), *(Text("") for _ in cols[1:])]]
    return FitTable([layout_column(c) for c in cols], rows, title=title,
                    caption=table.caption, title_justify="left", full=full, notes=notes)


def header(report: Report) -> Text:
    text = Text("triangle report", style="bold")
    text.append(f" — runs {', '.join(report.run_ids) or '(records given directly)'}; "
                f"devices {', '.join(device_labels(report)) or '-'}; "
                f"models {', '.join(report.models) or '-'}")
    return text


def warnings(report: Report) -> list[Text]:
    """Lines a reader must not miss: per-op profiles that do not add up (`opcheck`)."""
    ops = report.tables.get("ops")
    lines = opcheck.warning_lines(ops) if ops is not None else []
    return [Text(f"warning: {line}", style="bold red") for line in lines]


def render_report(report: Report, full: bool = False) -> list[RenderableType]:
    notes = Notes()  # a long configuration string is spelt out once, under its first table
    return [header(report), *(render_table(t, full, notes) for t in report.tables.values()),
            *warnings(report)]


def print_report(report: Report, console: Console | None = None, full: bool = False) -> None:
    console = console or Console()
    # full: tables wider than the terminal are printed whole (the terminal wraps them)
    console.print(Group(*render_report(report, full)), crop=not full)
