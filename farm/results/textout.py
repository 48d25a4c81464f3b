"""The one format switch for farm's tabular text outputs: md, csv, json, jsonl.

Records (`farm.results.printers`), comparisons (`farm.results.compare`) and the triangle
report's tables (`farm.report.tables`) all print through here, so escaping, number
formatting of raw values and the document shapes are decided once.

Contract:
* a `Field` names a row key (csv header, json key), its md label, whether it is numeric
  (right-aligned in md), how md shows a value (`text`, default `str`; None -> "") and how
  csv writes it (`raw`, default `raw_cell`: repr of floats so every digit survives,
  compact JSON of lists/dicts, "" for None);
* `pick(fmt, rows, fields, doc=..., rows_key=..., line_extra=...)` -> the whole text:
  md = a pipe table with labels (`md_table`), csv = header of keys + raw cells,
  json = `{**doc, rows_key: [row subset...]}` indented, jsonl = one object per row, each
  starting with `line_extra` (e.g. the schema version).
"""

from __future__ import annotations

import csv
import io
import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

FORMATS = ("md", "csv", "json", "jsonl")


def raw_cell(value: Any) -> str:
    """A csv cell that parses back to the value (floats keep every digit)."""
    if value is None:
        return ""
    if isinstance(value, bool):
        return json.dumps(value)
    if isinstance(value, float):
        return repr(value)
    if isinstance(value, (list, dict)):
        return json.dumps(value, separators=(",", ":"))
    return str(value)


def _text(value: Any) -> str:
    return "" if value is None else str(value)


@dataclass(frozen=True)
class Field:
    key: str
    label: str = ""
    numeric: bool = False
    text: Callable[[Any], str] = _text
    raw: Callable[[Any], str] = raw_cell

    @property
    def heading(self) -> str:
        return self.label or self.key


def md_escape(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def md_table(rows: Sequence[Mapping[str, Any]], fields: Sequence[Field],
             empty: str | None = None) -> str:
    """A GitHub pipe table; `empty` fills the first cell of one row when there are none."""
    lines = ["| " + " | ".join(md_escape(f.heading) for f in fields) + " |",
             "|" + "|".join("---:" if f.numeric else "---" for f in fields) + "|"]
    if not rows and empty is not None:
        lines.append("| " + " | ".join([empty] + [""] * (len(fields) - 1)) + " |")
    lines += ["| " + " | ".join(md_escape(f.text(r.get(f.key))) for f in fields) + " |"
              for r in rows]
    return "\n".join(lines) + "\n"


def csv_table(rows: Sequence[Mapping[str, Any]], fields: Sequence[Field]) -> str:
    buf = io.StringIO()
    writer = csv.writer(buf, lineterminator="\n")
    writer.writerow([f.key for f in fields])
    for r in rows:
        writer.writerow([f.raw(r.get(f.key)) for f in fields])
    return buf.getvalue()


def _subset(row: Mapping[str, Any], fields: Sequence[Field]) -> dict[str, Any]:
    return {f.key: row.get(f.key) for f in fields}


def pick(fmt: str, rows: Sequence[Mapping[str, Any]], fields: Sequence[Field], *,
         doc: Mapping[str, Any] | None = None, rows_key: str = "rows",
         line_extra: Mapping[str, Any] | None = None) -> str:
    """See module docstring; an unknown `fmt` is a ValueError naming the formats."""
    if fmt == "md":
        return md_table(rows, fields)
    if fmt == "csv":
        return csv_table(rows, fields)
    if fmt == "json":
        body = {**(doc or {}), rows_key: [_subset(r, fields) for r in rows]}
        return json.dumps(body, indent=2, default=str) + "\n"
    if fmt == "jsonl":
        extra = dict(line_extra or {})
        return "".join(json.dumps({**extra, **_subset(r, fields)}, default=str) + "\n"
                       for r in rows)
    raise ValueError(f"unknown output format {fmt!r}; use one of {', '.join(FORMATS)}")
