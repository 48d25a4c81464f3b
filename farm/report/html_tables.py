"""The HTML page's tables: every cell of a `ReportTable`, laid out to fit the page.

Contract: `HtmlTables(labels)` numbers the report's long configuration labels once, in the
report's order (`legend()`: the "Configurations" list the page shows near its top;
`short(label)`: a plot's row label); `table(t)` renders one table: cells carry `data-key`
and, when numeric, `data-value` (the raw float), as before.

Why the layout is what it is (a 1400 px window cut the per-op table's "flagged" column and
the fusion table's "uncertainty" column, and drew the categories table's TVM rows ~500 px
tall and mostly blank):
* numbers never wrap (`white-space: nowrap` on `td.num`); text wraps at spaces, and a
  cell holding a word longer than `LONG_WORD` (a fused kernel's 90-character name, a JSON
  config) may break it anywhere (`td.long`), so it no longer forces a table wider than the
  page while short words (route names) stay whole;
* a configuration longer than `SHORT` characters (ORT's
  `opt=all, provider=CPUExecutionProvider, session_config={...}` on every ORT row) is shown
  as its first flag and a numbered link to the legend, the whole string in the cell's
  tooltip and in `data-config`;
* the categories table's `note` (the same explanation on many rows) becomes a lettered
  note under the table.
"""

from __future__ import annotations

from collections.abc import Iterable
from html import escape
from typing import Any

from farm.report.tables import Column, ReportTable, row_cell

SHORT = 24
LONG_WORD = 20  # a cell with a longer word may break it anywhere; others break at spaces
CONFIG_KEYS = ("config", "off_config", "on_config")
NOTE_KEYS = ("note",)

CSS = """
table.data td { overflow-wrap: break-word; vertical-align: top; }
table.data td.long { overflow-wrap: anywhere; }
table.data td.num { white-space: nowrap; overflow-wrap: normal; }
table.data th { overflow-wrap: break-word; hyphens: auto; }
table.data td .ref { color: #555; text-decoration: none; font-size: 11px; }
ol.legend, ol.notes { font-size: 12.5px; color: #444; margin: 4px 0 14px; }
ol.notes { list-style: lower-alpha; }
ol.legend li, ol.notes li { overflow-wrap: anywhere; }
"""


def _slug(text: str) -> str:
    return "".join(ch if ch.isalnum() else "-" for ch in text.lower()).strip("-")


class HtmlTables:
    """See module docstring; one per page (the configuration numbers are the page's)."""

    def __init__(self, labels: Iterable[str] = ()) -> None:
        self.configs: list[str] = []
        for label in labels:  # numbered in the report's order, before any table or plot
            if len(label) > SHORT:
                self._config_no(label)

    def _config_no(self, text: str) -> int:
        if text not in self.configs:
            self.configs.append(text)
        return self.configs.index(text) + 1

    def legend(self) -> str:
        """The long configurations, numbered (call after rendering every table)."""
        if not self.configs:
            return ""
        items = "".join(f'<li id="cfg-{i}" data-config="{escape(text)}">{escape(text)}</li>'
                        for i, text in enumerate(self.configs, 1))
        return ('<p class="caption">Configurations whose label is long: the tables show '
                'their first flag and the number below (the whole label in the tooltip).'
                f'</p><ol class="legend">{items}</ol>')

    def short(self, text: str) -> str:
        """A configuration as a plot's row label shows it: whole, or first flag (n)."""
        return text if len(text) <= SHORT else f"{text.split(', ')[0]} ({self._config_no(text)})"

    def _config_cell(self, text: str) -> str:
        if len(text) <= SHORT:
            return escape(text)
        no = self._config_no(text)
        head = text.split(", ")[0]
        return f'{escape(head)} <a class="ref" href="#cfg-{no}">({no})</a>'

    def table(self, table: ReportTable) -> str:
        notes: list[str] = []
        out = [f'<table class="data" data-table="{escape(table.name)}"><thead><tr>']
        out += [f'<th data-key="{escape(c.key)}">{escape(c.label)}</th>' for c in table.columns]
        out.append("</tr></thead><tbody>")
        for row in table.rows:
            out.append("<tr>")
            out += [self._cell(c, row, notes, table.name) for c in table.columns]
            out.append("</tr>")
        if not table.rows:
            out.append(f'<tr><td colspan="{len(table.columns)}">(none)</td></tr>')
        out.append("</tbody></table>")
        if notes:
            out.append('<ol class="notes">' + "".join(
                f'<li id="{escape(table.name)}-note-{chr(96 + i)}">{escape(n)}</li>'
                for i, n in enumerate(notes, 1)) + "</ol>")
        return "\n".join(out)

    def _cell(self, c: Column, row: dict[str, Any], notes: list[str], name: str) -> str:
        value = row.get(c.key)
        text = row_cell(c, row)
        classes = ["num"] if c.numeric else []
        shown = text if c.key not in CONFIG_KEYS + NOTE_KEYS or len(text) <= SHORT \
            else text.split(", ")[0]
        if not c.numeric and any(len(word) > LONG_WORD for word in shown.split()):
            classes.append("long")  # a kernel's or a JSON's word may break anywhere
        if c.key in ("status", "verdict") and value:
            classes.append(f"{c.key}-{_slug(str(value))}")
        if c.key == "op_share_check" and row.get("op_flagged"):
            classes.append("op-flagged")
        attrs = f' data-key="{escape(c.key)}"'
        if c.numeric and isinstance(value, (int, float)) and not isinstance(value, bool):
            attrs += f' data-value="{float(value)!r}"'
        if classes:
            attrs += f' class="{" ".join(classes)}"'
        body = escape(text)
        if c.key in CONFIG_KEYS and len(text) > SHORT:
            attrs += f' title="{escape(text)}" data-config="{escape(text)}"'
            body = self._config_cell(text)
        elif c.key in NOTE_KEYS and len(text) > SHORT:
            if text not in notes:
                notes.append(text)
            letter = chr(96 + notes.index(text) + 1)
            attrs += f' title="{escape(text)}"'
            body = f'<a class="ref" href="#{escape(name)}-note-{letter}">({letter})</a>'
        return f"<td{attrs}>{body}</td>"
