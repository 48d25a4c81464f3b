"""Tables that fit the terminal without cutting a number.

Rich shrinks every column of a table wider than the terminal, numbers included, and cuts
what no longer fits without a mark (a stored n of 1983 read `198`, a p of 8.92e-06 read
`8.92`). A `FitTable` decides the widths itself, when it is drawn (so at the width of the
console it is printed on), and hands rich columns that already fit:

* `number` and `whole` columns (statistics, ids, device and route names) are never narrower
  than their widest cell; only their header may wrap, at its spaces;
* `wrap` columns (details, notes, JSON) wrap at spaces, from their `cap` down to their
  longest word (a word longer than `WHOLE_WORD`, e.g. a fused kernel's name, folds); a
  `note` column also moves a cell longer than its `cap` (a long configuration string
  repeated on every row) into a numbered note under the table, its cell keeping the mark
  `(1)`;
* when the minimum widths still do not fit, whole columns are left out (those with the
  highest `drop`, then the rightmost) and a line under the table names them and how to see
  them (`--columns all`, or a wider terminal); `keep` columns are never left out;
* `full=True` (`--columns all`) leaves nothing out: the table takes its natural width, which
  may be wider than the terminal (print it with `crop=False`).

`fit(columns, rows, width, ...) -> Fit` is the pure part (tests and HTML-free callers);
`FitTable` is the rich renderable built on it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Literal

from rich import box as boxes
from rich.console import Console, ConsoleOptions, RenderResult
from rich.table import Table
from rich.text import Text

Mode = Literal["number", "whole", "wrap", "note"]
WHOLE_WORD = 20      # a wrapping column never splits a word up to this long (names, verdicts)
SHOW_ALL = "`--columns all`"


@dataclass(frozen=True)
class Col:
    header: str
    mode: Mode = "number"
    keep: bool = False       # never left out (what names a row: device, route)
    cap: int | None = None   # wrap/note: widest it grows to; note: longer cells become notes
    drop: int = 0            # left out before columns with a lower value (then rightmost first)
    justify: Literal["left", "right"] | None = None

    @property
    def align(self) -> Literal["left", "right"]:
        return self.justify or ("right" if self.mode == "number" else "left")


@dataclass
class Fit:
    kept: list[int]                    # indexes of the columns drawn, in order
    widths: list[int]                  # content width of each kept column
    dropped: list[str]                 # headers of the columns left out
    notes: list[tuple[int, str]] = field(default_factory=list)  # (number, text) drawn here
    note_of: dict[tuple[int, int], int] = field(default_factory=dict)  # (row, col) -> number


class Notes:
    """The numbered notes of long cells. One `Notes` may serve several tables (the report's):
    a text keeps its number in all of them and is printed under the first that shows it."""

    def __init__(self) -> None:
        self.texts: list[str] = []
        self.printed: set[int] = set()

    def number(self, text: str) -> int:
        if text not in self.texts:
            self.texts.append(text)
        return self.texts.index(text) + 1


def _lines(text: str) -> list[str]:
    return text.splitlines() or [""]


def _width(text: Text | str) -> int:
    plain = text.plain if isinstance(text, Text) else text
    return max(Text(line).cell_len for line in _lines(plain))


def _longest_word(texts: Iterable[str]) -> int:
    words = [w for t in texts for line in _lines(t) for w in line.split(" ")]
    return max((Text(w).cell_len for w in words), default=0)


def overhead(n_columns: int, show_edge: bool = True, padding: int = 1) -> int:
    """What a rich table with a box adds to its columns' content widths."""
    return n_columns * 2 * padding + max(0, n_columns - 1) + (2 if show_edge else 0)


def _note_cells(columns: Sequence[Col], rows: Sequence[Sequence[str]], notes: Notes
                ) -> dict[tuple[int, int], int]:
    note_of: dict[tuple[int, int], int] = {}
    for c, col in enumerate(columns):
        if col.mode != "note" or col.cap is None:
            continue
        for r, row in enumerate(rows):
            if _width(row[c]) > col.cap:
                note_of[(r, c)] = notes.number(row[c])
    return note_of


def _limits(col: Col, header: str, cells: list[str]) -> tuple[int, int]:
    """(minimum, natural) content width of a column."""
    widest = max([_width(c) for c in cells], default=0)
    head_word = _longest_word([header])
    if col.mode in ("number", "whole"):
        return max(widest, head_word), max(widest, _width(header))
    natural = max(widest, _width(header))
    if col.cap is not None:
        natural = min(natural, max(col.cap, head_word))
    floor = max(head_word, min(WHOLE_WORD, _longest_word(cells)))
    return min(natural, floor), natural


def fit(columns: Sequence[Col], rows: Sequence[Sequence[str]], width: int, *,
        show_edge: bool = True, full: bool = False, notes: Notes | None = None) -> Fit:
    """Which columns to draw at `width` and how wide (see module docstring); `notes` numbers
    the long cells of `note` columns (a fresh `Notes` when None)."""
    notes = notes if notes is not None else Notes()
    note_of = _note_cells(columns, rows, notes)
    shown = [[f"({note_of[(r, c)]})" if (r, c) in note_of else cell
              for c, cell in enumerate(row)] for r, row in enumerate(rows)]
    limits = [_limits(col, col.header, [row[c] for row in shown])
              for c, col in enumerate(columns)]
    kept = list(range(len(columns)))
    if full:
        return Fit(kept, [limits[c][1] for c in kept], [], _drawn(notes, note_of), note_of)
    # a column with nothing in it goes first (no detail when every route was ok)
    empty = {c for c in kept if not any(row[c].strip() for row in shown)}
    order = sorted((c for c in kept if not columns[c].keep),
                   key=lambda c: (c not in empty, -columns[c].drop, -c))
    dropped: list[int] = []
    while sum(limits[c][0] for c in kept) + overhead(len(kept), show_edge) > width and order:
        gone = order.pop(0)
        kept.remove(gone)
        dropped.append(gone)
    # a narrow column left out on the way may fit in what the wider ones freed
    for c in [c for c in reversed(dropped) if c not in empty]:
        if sum(limits[k][0] for k in kept) + limits[c][0] + overhead(len(kept) + 1, show_edge) \
                <= width:
            kept = sorted([*kept, c])
            dropped.remove(c)
    widths = {c: limits[c][0] for c in kept}
    room = width - sum(widths.values()) - overhead(len(kept), show_edge)
    # numbers first get their one-line headers back, then text columns grow in turn
    for group in (("number", "whole"), ("wrap", "note")):
        growing = [c for c in kept if columns[c].mode in group]
        while room > 0 and growing:
            for c in list(growing):
                if room <= 0:
                    break
                if widths[c] >= limits[c][1]:
                    growing.remove(c)
                    continue
                widths[c] += 1
                room -= 1
    note_of = {k: v for k, v in note_of.items() if k[1] in kept}  # left out with their column
    return Fit(kept, [widths[c] for c in kept], [columns[c].header for c in sorted(dropped)],
               _drawn(notes, note_of), note_of)


def _drawn(notes: Notes, note_of: dict[tuple[int, int], int]) -> list[tuple[int, str]]:
    return [(no, notes.texts[no - 1]) for no in sorted(set(note_of.values()))]


class FitTable:
    """A rich renderable: a table laid out by `fit` at the width it is drawn at.

    Cells are plain strings or `Text` (styled); each row has one cell per column. `caption`
    may be a function of the indexes of the columns drawn; `notes` may be shared with other
    tables printed after this one (see `Notes`)."""

    def __init__(self, columns: Sequence[Col], rows: Sequence[Sequence[Text | str]], *,
                 title: str | Text | None = None,
                 caption: str | Callable[[list[int]], str | None] | None = None,
                 show_edge: bool = True, full: bool = False, show_all: str = SHOW_ALL,
                 title_justify: Literal["left", "center", "right"] = "center",
                 notes: Notes | None = None) -> None:
        self.columns = list(columns)
        self.rows = [[c if isinstance(c, Text) else Text(c) for c in row] for row in rows]
        self.title = title
        self.caption = caption
        self.show_edge = show_edge
        self.full = full
        self.show_all = show_all
        self.title_justify = title_justify
        self.notes = notes if notes is not None else Notes()
        self._own_notes = notes is None  # printed again each time this table is drawn

    @property
    def headers(self) -> list[str]:
        return [c.header for c in self.columns]

    def layout(self, width: int) -> Fit:
        plain = [[cell.plain for cell in row] for row in self.rows]
        return fit(self.columns, plain, width, show_edge=self.show_edge, full=self.full,
                   notes=self.notes)

    def table(self, width: int) -> tuple[Table, Fit]:
        plan = self.layout(width)
        # a caption may depend on the columns drawn (the statistics it names)
        caption = self.caption(plan.kept) if callable(self.caption) else self.caption
        table = Table(title=self.title, caption=caption, caption_justify="left",
                      title_justify=self.title_justify, show_edge=self.show_edge,
                      box=boxes.HEAVY_HEAD)
        for c, w in zip(plan.kept, plan.widths, strict=True):
            col = self.columns[c]
            table.add_column(col.header, justify=col.align, width=w, overflow="fold",
                             no_wrap=False)
        for r, row in enumerate(self.rows):
            cells = []
            for c in plan.kept:
                no = plan.note_of.get((r, c))
                cells.append(Text(f"({no})", style=row[c].style) if no else row[c])
            table.add_row(*cells)
        return table, plan

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        if self._own_notes:
            self.notes.printed.clear()
        table, plan = self.table(options.max_width)
        if self.full:  # wider than the console: rendered at its own width, not squeezed
            width = sum(plan.widths) + overhead(len(plan.widths), self.show_edge)
            yield from console.render(table, options.update_width(max(width,
                                                                     options.max_width)))
        else:
            yield table
        for no, text in plan.notes:
            if no not in self.notes.printed:  # a shared note: under the first table only
                self.notes.printed.add(no)
                yield Text(f"({no}) {text}")
        if plan.dropped:
            yield Text(f"not shown at {options.max_width} columns: {', '.join(plan.dropped)} "
                       f"({self.show_all}, or a wider terminal)", style="dim")
