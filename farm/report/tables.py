"""The report's table model and its text printers (md, csv, json).

Contract: a `ReportTable` is a name, a title, a caption naming the statistics, typed
`Column`s and rows of RAW values (dicts keyed by column key; floats unrounded, None for
"not measured"). Every printer works from those rows only, so md, csv, json, the terminal
and the HTML page show the same numbers (md and csv are written by the one format switch,
`farm.results.textout`):

* `cell(column, value)` -> the display text (rounded per `Column.kind`; "—" for None);
* `to_md(tables)`: one `## title` section per table, caption as a paragraph;
* `to_csv(tables)`: tidy long format, one line per cell:
  `table,row,column,label,unit,value` (value raw: repr of floats, JSON of lists);
* `to_json(tables, meta)`: {"report_version", "meta", "tables": {name: {"title",
  "caption", "columns": [{"key", "label", "unit", "kind"}], "rows": [...]}}}.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from farm.results.emulation import device_label
from farm.results.textout import Field, csv_table, md_table

REPORT_VERSION = 1

# kind -> (unit, format); the unit is what the raw value is in
KINDS: dict[str, tuple[str, str]] = {
    "text": ("", "{}"),
    "int": ("", "{:d}"),
    "ms": ("ms", "{:.3f}"),
    "pct": ("%", "{:.1f}"),
    "spct": ("%", "{:+.1f}"),
    "kib": ("KiB", "{:,.0f}"),
    "kib1": ("KiB", "{:,.1f}"),
    "s": ("s", "{:.1f}"),
    "share": ("share", "{:.0%}"),
    "ratio": ("", "{:.1%}"),
    "num": ("", ""),  # unit given by another column; digits chosen by magnitude
}
MISSING = "—"


@dataclass(frozen=True)
class Column:
    key: str
    label: str
    kind: str = "text"

    @property
    def unit(self) -> str:
        return KINDS[self.kind][0]

    @property
    def numeric(self) -> bool:
        return self.kind != "text"


@dataclass
class ReportTable:
    name: str
    title: str
    caption: str
    columns: list[Column]
    rows: list[dict[str, Any]] = field(default_factory=list)

    def column(self, key: str) -> Column:
        for c in self.columns:
            if c.key == key:
                return c
        raise KeyError(f"table {self.name!r} has no column {key!r}")


def cell(column: Column, value: Any) -> str:
    if value is None or (isinstance(value, float) and value != value):
        return MISSING
    if column.kind == "text":
        if isinstance(value, bool):
            return "yes" if value else "no"
        return str(value)
    if column.kind == "int":
        return str(int(value))
    if column.kind == "num":
        return f"{value:,.0f}" if abs(value) >= 1000 else f"{value:.3f}"
    return KINDS[column.kind][1].format(value)


def row_cell(column: Column, row: Mapping[str, Any]) -> str:
    """`cell` of one row's value; an emulated row's device reads `NAME (emulated)`."""
    text = cell(column, row.get(column.key))
    if column.key == "device" and row.get("emulated"):
        return device_label(text, True)
    return text


def table_md(table: ReportTable) -> str:
    fields = [Field(c.key, c.label, c.numeric, text=lambda v, c=c: v)
              for c in table.columns]
    rows = [{c.key: row_cell(c, row) for c in table.columns} for row in table.rows]
    return "\n".join([f"## {table.title}", "", table.caption, ""]) + "\n" + md_table(
        rows, fields, empty="(none)")


def to_md(tables: Sequence[ReportTable], header: str = "") -> str:
    parts = [header] if header else []
    parts += [table_md(t) for t in tables]
    return "\n".join(parts)


def _raw(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, float):
        return repr(value)
    if isinstance(value, (list, dict, bool)):
        return json.dumps(value)
    return str(value)


_TIDY = [Field("table"), Field("row"), Field("column"), Field("label"), Field("unit"),
         Field("value", raw=lambda v: _raw(v))]


def to_csv(tables: Sequence[ReportTable]) -> str:
    rows = [{"table": t.name, "row": i, "column": c.key, "label": c.label, "unit": c.unit,
             "value": row.get(c.key)}
            for t in tables for i, row in enumerate(t.rows) for c in t.columns]
    return csv_table(rows, _TIDY)


def _json_safe(value: Any) -> Any:
    if isinstance(value, float) and value != value:
        return None
    return value


def to_json(tables: Sequence[ReportTable], meta: Mapping[str, Any] | None = None) -> str:
    doc = {
        "report_version": REPORT_VERSION,
        "meta": dict(meta or {}),
        "tables": {
            t.name: {
                "title": t.title, "caption": t.caption,
                "columns": [{"key": c.key, "label": c.label, "unit": c.unit, "kind": c.kind}
                            for c in t.columns],
                # the columns first, then what a row holds beyond them (the mean of the
                # latency table, the fusion row's `significant`): json keeps every figure
                "rows": [{**{c.key: _json_safe(row.get(c.key)) for c in t.columns},
                          **{k: _json_safe(v) for k, v in row.items()}}
                         for row in t.rows],
            }
            for t in tables
        },
    }
    return json.dumps(doc, indent=2, allow_nan=False) + "\n"
