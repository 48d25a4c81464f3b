"""The report in the terminal: rich tables like a benchmark article's.

Contract: `render_report(report) -> list[RenderableType]` is a pure function of the
`Report` (a header, then one rich `Table` per report table, in order); `print_report(report,
console)` prints them. Column headers carry the statistic and the unit ("median ms",
"peak VmHWM KiB (max of records)"), each table's caption says how the numbers were
computed. Columns whose value is the same on every row (e.g. variant, threads) are moved
into the title to keep tables narrow; md/csv/json keep every column.
"""

from __future__ import annotations

from rich.console import Console, Group, RenderableType
from rich.table import Table
from rich.text import Text

from farm.report import opcheck
from farm.report.analysis import Report
from farm.report.emulated import device_labels
from farm.report.tables import Column, ReportTable, cell, row_cell

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


def render_table(table: ReportTable) -> Table:
    constant = _constant_columns(table)
    title = table.title
    if constant:
        title += " (" + ", ".join(f"{k}: {v}" for k, v in constant.items()) + ")"
    cols = [c for c in table.columns if c.label not in constant]
    out = Table(title=title, caption=table.caption, caption_justify="left",
                title_justify="left", show_lines=False)
    for c in cols:
        out.add_column(c.label, justify="right" if c.numeric else "left", overflow="fold",
                       max_width=48 if c.key in ("why_not", "config", "drift") else None)
    if not table.rows:
        out.add_row(*(["(none)"] + [""] * (len(cols) - 1)))
    for row in table.rows:
        # Text, not markup: cells hold brackets and JSON that rich would parse
        out.add_row(*[Text(row_cell(c, row), style=_style(c, row.get(c.key)))
                      for c in cols])
    return out


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


def render_report(report: Report) -> list[RenderableType]:
    return [header(report), *(render_table(t) for t in report.tables.values()),
            *warnings(report)]


def print_report(report: Report, console: Console | None = None) -> None:
    console = console or Console()
    console.print(Group(*render_report(report)))
