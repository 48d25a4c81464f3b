"""md / csv / json / jsonl printers and a rich table, all generated from `schema.FIELDS`.

Contract:
* `COLUMNS`: one `Column` per record field (key = field name), plus the derived columns
  "ci95" (fields ci95_low_ms, ci95_high_ms; label "95% CI median ms") and "noise" (fields
  round_medians_ms, rounds: the rounds and the spread of their medians, "NOISY: ..." past
  the bounds of `farm.results.noise`). Labels name the
  statistic: "median ms", "p90 ms", "CV"...
* `format_records(records, fmt, columns=None)` with fmt in md | csv | json | jsonl | sql,
  written by the one format switch `farm.results.textout`; `columns_for(fmt, arg)` is the
  CLI's choice: the summary (`SUMMARY_COLUMNS`: one row per device x route x variant x
  threads, statistics named, no raw arrays) for table/md/csv, every field for json/jsonl/sql
  and for `--columns all`.
  Machine formats (csv/json/jsonl) use field names as keys and raw values, a derived
  column expands to its fields; csv cells of JSON fields hold compact JSON, and with all
  columns a csv parses back to the records (`from_csv`). json is {"schema_version", "fields",
  "records"}; every jsonl line carries "schema_version" first. md uses labels and
  formatted cells. sql is a CREATE TABLE IF NOT EXISTS records (the store's DDL) and
  one INSERT per record, always with every field. `columns=None` means every field.
* `render_results(records, columns=SUMMARY_COLUMNS) -> rich.table.Table` (a pure
  function) whose caption (`stat_caption`) names the statistics shown and the records' CI
  method, and says which records are noisy (`farm.results.noise`); its drift cell
  counts flags by kind (the flags themselves are in md/json).
* `format_runs` / `render_runs` print the run list of `farm results list`.
"""

from __future__ import annotations

import csv
import io
import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from rich.text import Text

from farm.results import textout
from farm.results.config_flags import route_key_label
from farm.results.emulation import device_label, is_emulated
from farm.results.layout import Col, FitTable
from farm.results.noise import noise_warnings, spread_pct
from farm.results.schema import FIELDS, SCHEMA_VERSION
from farm.results.store import records_table_sql
from farm.results.textout import Field

FORMATS = ("md", "csv", "json", "jsonl", "sql")

FIELD_TYPES = {f.name: f.type for f in FIELDS}
_LABELS = {"n": "n", "cv": "CV", "peak_vmhwm_kb": "VmHWM KiB",
           "peak_pss_kb": "PSS KiB", "first_run_ms": "1st run ms", "threads": "thr",
           "status_detail": "detail"}


@dataclass(frozen=True)
class Column:
    key: str
    label: str
    fields: tuple[str, ...]
    cell: Callable[[dict[str, Any]], str]
    numeric: bool = False


def _fmt_value(value: Any, kind: str, name: str) -> str:
    if value is None:
        return ""
    if kind == "real":
        if name == "cv":
            return f"{value:.1%}"
        return f"{value:.3f}" if abs(value) < 1000 else f"{value:.1f}"
    if kind == "json":
        if name == "drift" and isinstance(value, list):
            return "; ".join(map(str, value)) if value else "none"
        return json.dumps(value, separators=(",", ":"))
    return str(value)


def _field_column(name: str, kind: str) -> Column:
    label = _LABELS.get(name, name.replace("_", " "))
    return Column(name, label, (name,),
                  lambda r: _fmt_value(r.get(name), kind, name), kind in ("int", "real"))


def _drift_kinds(flags: Any) -> str:
    """Table cell for drift: flag kinds with counts ("freq x2, thermal x1"); the flags
    themselves are in md/json output."""
    if not isinstance(flags, list):
        return ""
    if not flags:
        return "none"
    kinds: dict[str, int] = {}
    for flag in flags:
        kind = str(flag).split(":", 1)[0]
        kinds[kind] = kinds.get(kind, 0) + 1
    return ", ".join(f"{k} x{n}" for k, n in kinds.items())


def _ci_cell(r: dict[str, Any]) -> str:
    lo, hi = r.get("ci95_low_ms"), r.get("ci95_high_ms")
    return "" if lo is None or hi is None else f"[{lo:.3f}, {hi:.3f}]"


COLUMNS: dict[str, Column] = {f.name: _field_column(f.name, f.type) for f in FIELDS}
# an emulated device reads "pixel7 (emulated)" wherever a person reads the device name
COLUMNS["device"] = Column("device", "device", ("device",),
                           lambda r: device_label(str(r.get("device") or ""), is_emulated(r)))
# the route key, as `--routes` and the live view name it: an `-unfused` row must not read
# as the plain route beside its fused twin (the record keeps the base route, csv/json too)
COLUMNS["route"] = Column("route", "route", ("route",), route_key_label)
COLUMNS["ci95"] = Column("ci95", "95% CI median ms", ("ci95_low_ms", "ci95_high_ms"),
                         _ci_cell, True)


def _noise_cell(r: dict[str, Any]) -> str:
    """Rounds and how far their medians spread; the warnings when past the bounds."""
    warnings = noise_warnings(r)
    if warnings:  # the first words say it; the spread/steal figures follow
        return "NOISY: " + "; ".join(w.replace("round medians ", "") for w in warnings)
    medians = r.get("round_medians_ms") or []
    spread = spread_pct(medians)
    return "" if not medians else f"{len(medians)} rounds" + (
        f", spread {spread:.1f} %" if spread is not None else "")


COLUMNS["noise"] = Column("noise", "rounds / noise", ("round_medians_ms", "rounds"),
                          _noise_cell)
ALL_COLUMNS = tuple(f.name for f in FIELDS)
SUMMARY_COLUMNS = ("device", "route", "variant", "threads", "status", "n", "median_ms",
                   "ci95", "p90_ms", "cv", "load_ms", "first_run_ms", "peak_vmhwm_kb",
                   "drift", "status_detail")
# how each statistic column is computed, for the caption that names what is shown
_STAT_WORDS = {
    "median_ms": "median", "ci95": "95% CI of the median (seeded percentile bootstrap)",
    "ci95_low_ms": "95% CI of the median (seeded percentile bootstrap)",
    "noise": "spread of round medians = max / min - 1",
    "p90_ms": "p90", "p99_ms": "p99", "mean_ms": "mean", "stddev_ms": "sample stddev",
    "cv": "CV = stddev / mean", "min_ms": "min", "max_ms": "max",
}


def stat_caption(keys: Sequence[str]) -> str | None:
    """One sentence naming the statistics among `keys` (None when there are none)."""
    words = list(dict.fromkeys(_STAT_WORDS[k] for k in keys if k in _STAT_WORDS))
    if not words:
        return None
    pct = " (percentiles: linear interpolation)" if {"p90_ms", "p99_ms"} & set(keys) else ""
    return ("latency of one inference in ms over n steady-state samples: "
            + ", ".join(words) + pct)


def columns_for(fmt: str, columns: str | None) -> Sequence[str] | None:
    """The columns a printer shows: `columns` as given ("a,b,c"), every field for "all",
    else the summary for what a human reads (table, md, csv) and every field for what a
    program reads (json, jsonl, sql: the whole record, raw samples and profiles included)."""
    if columns == "all":
        return None
    if columns:
        return [c.key for c in resolve_columns(columns)]
    return SUMMARY_COLUMNS if fmt in ("table", "md", "csv") else None


def resolve_columns(columns: Sequence[str] | str | None) -> list[Column]:
    """Columns by key ("a,b,c" or a list); None means every field. Unknown -> ValueError."""
    if columns is None:
        keys: Sequence[str] = ALL_COLUMNS
    elif isinstance(columns, str):
        keys = [c.strip() for c in columns.split(",") if c.strip()]
    else:
        keys = columns
    unknown = [k for k in keys if k not in COLUMNS]
    if unknown:
        raise ValueError(f"unknown column(s) {unknown}; known: {', '.join(COLUMNS)}")
    return [COLUMNS[k] for k in keys]


def _fields_of(cols: Sequence[Column]) -> list[str]:
    return [name for col in cols for name in col.fields]


def _record_raw(name: str) -> Callable[[Any], str]:
    kind = FIELD_TYPES[name]

    def raw(value: Any) -> str:
        if value is None:
            return ""
        if kind == "json":  # even a JSON string: from_csv parses the cell as JSON
            return json.dumps(value, separators=(",", ":"))
        return repr(float(value)) if kind == "real" else str(value)
    return raw


def _text_fields(cols: Sequence[Column]) -> list[Field]:
    """md: one field per column, its label and formatted cell (a row is the record)."""
    return [Field(c.key, c.label, c.numeric, text=c.cell) for c in cols]


def _md_rows(records: Sequence[dict[str, Any]], cols: Sequence[Column]
             ) -> list[dict[str, Any]]:
    return [{c.key: r for c in cols} for r in records]


def _machine_fields(cols: Sequence[Column]) -> list[Field]:
    return [Field(n, raw=_record_raw(n)) for n in _fields_of(cols)]


def to_md(records: Sequence[dict[str, Any]], columns: Sequence[str] | str | None = None
          ) -> str:
    cols = resolve_columns(columns)
    return textout.md_table(_md_rows(records, cols), _text_fields(cols))


def to_csv(records: Sequence[dict[str, Any]], columns: Sequence[str] | str | None = None
           ) -> str:
    return textout.csv_table(records, _machine_fields(resolve_columns(columns)))


def to_json(records: Sequence[dict[str, Any]], columns: Sequence[str] | str | None = None
            ) -> str:
    fields = _machine_fields(resolve_columns(columns))
    return textout.pick("json", records, fields, rows_key="records",
                        doc={"schema_version": SCHEMA_VERSION,
                             "fields": [f.key for f in fields]})


def to_jsonl(records: Sequence[dict[str, Any]], columns: Sequence[str] | str | None = None
             ) -> str:
    return textout.pick("jsonl", records, _machine_fields(resolve_columns(columns)),
                        line_extra={"schema_version": SCHEMA_VERSION})


def from_csv(text: str) -> list[dict[str, Any]]:
    """Parse `to_csv` output back into records (typed by `FIELDS`; empty cell -> None)."""
    out = []
    for row in csv.DictReader(io.StringIO(text)):
        rec: dict[str, Any] = {}
        for name, cell in row.items():
            kind = FIELD_TYPES.get(name)
            if kind is None:
                raise ValueError(f"csv column {name!r} is not a record field")
            rec[name] = (None if cell == "" else json.loads(cell) if kind == "json"
                         else int(cell) if kind == "int" else float(cell) if kind == "real"
                         else cell)
        out.append(rec)
    return out


def _sql_literal(value: Any, kind: str) -> str:
    if value is None:
        return "NULL"
    if kind == "json":
        value = json.dumps(value, separators=(",", ":"))
    if isinstance(value, str):
        return "'" + value.replace("'", "''") + "'"
    return repr(value)  # int, or a float with every digit


def to_sql(records: Sequence[dict[str, Any]], columns: Sequence[str] | str | None = None
           ) -> str:
    """SQLite statements that recreate the records (llama-bench's sql output)."""
    if columns is not None:
        raise ValueError("sql output always has every field; drop --columns")
    names = ", ".join(f'"{f.name}"' for f in FIELDS)
    lines = [records_table_sql(if_not_exists=True, link_runs=False) + ";"]
    lines += [f"INSERT INTO records ({names}) VALUES ("
              + ", ".join(_sql_literal(r.get(f.name), f.type) for f in FIELDS) + ");"
              for r in records]
    return "\n".join(lines) + "\n"


_PRINTERS = {"md": to_md, "csv": to_csv, "json": to_json, "jsonl": to_jsonl, "sql": to_sql}


def format_records(records: Sequence[dict[str, Any]], fmt: str,
                   columns: Sequence[str] | str | None = None) -> str:
    if fmt not in _PRINTERS:
        raise ValueError(f"unknown output format {fmt!r}; use one of {', '.join(FORMATS)}")
    return _PRINTERS[fmt](records, columns)


_STATUS_STYLE = {"ok": "green", "invalid": "red", "partial": "yellow", "failed": "red",
                 "unavailable": "dim"}
# how each column of the rich table lays out (farm.results.layout): names of the row are
# kept, numbers stay whole, text wraps; at a narrow terminal the highest `drop` goes first
_KEEP = {"device", "route", "status", "median_ms", "run_id"}
# short names (never wrapped); every other text or JSON field wraps
_WHOLE = {"record_id", "run_id", "created_utc", "farm_version", "device", "transport", "arch",
          "triple", "route", "variant", "status", "memory_method"}
_DROP = {"first_run_ms": 9, "load_ms": 8, "threads": 7, "variant": 6, "cv": 5, "ci95": 4,
         "p90_ms": 3, "drift": 2, "peak_vmhwm_kb": 2, "n": 1}


def layout_column(c: Column) -> Col:
    """How the rich table lays out a printer column (see `farm.results.layout`)."""
    if c.numeric:
        return Col(c.label, "number", keep=c.key in _KEEP, drop=_DROP.get(c.key, 0))
    if c.key in _WHOLE:
        return Col(c.label, "whole", keep=c.key in _KEEP, drop=_DROP.get(c.key, 0))
    if c.key == "status_detail":  # a failure's reason, often the same on every device
        return Col(c.label, "note", cap=30, drop=_DROP.get(c.key, 0))
    return Col(c.label, "wrap", cap=48, drop=_DROP.get(c.key, 0))


def render_results(records: Sequence[dict[str, Any]],
                   columns: Sequence[str] | str | None = SUMMARY_COLUMNS,
                   title: str | None = None, full: bool = False) -> FitTable:
    """A rich table of records laid out for the width it is printed at (numbers never cut;
    columns left out are named); the caption names the statistics shown. `full`: every
    column, however wide (`--columns all`)."""
    cols = resolve_columns(columns)
    methods = list(dict.fromkeys(str(r["ci_method"]) for r in records if r.get("ci_method")))
    noisy = [f"NOISY {r.get('device')}/{r.get('route')}: {'; '.join(w)}"
             for r in records if (w := noise_warnings(r))]

    def caption(kept: Sequence[int]) -> str | None:
        keys = [cols[i].key for i in kept]
        text = stat_caption(keys)
        if text and methods and {"ci95", "ci95_low_ms", "ci95_high_ms"} & set(keys):
            text += "; CI by " + " / ".join(methods)  # the records name their method
        if noisy:  # a reader must see it before trusting a figure of the table
            text = "\n".join([text or "", *noisy]).strip()
        return text

    rows = []
    for r in records:
        style = _STATUS_STYLE.get(str(r.get("status")), "")
        # Text, not markup: cells hold brackets ("[1.0, 2.0]", JSON) rich would parse
        cells = [_drift_kinds(r.get("drift")) if c.key == "drift" else c.cell(r) for c in cols]
        rows.append([Text(cell, style=style if c.key == "status" else
                          "yellow" if cell.startswith("NOISY") else "")
                     for c, cell in zip(cols, cells, strict=True)])
    return FitTable([layout_column(c) for c in cols], rows, title=title, caption=caption,
                    show_edge=False, full=full)


RUN_COLUMNS = ("run_id", "started_utc", "finished_utc", "status", "n_records", "model",
               "devices", "routes", "command")
_RUN_ATTRS = ("run_id", "started_utc", "finished_utc", "status", "n_records", "command")


def _listed(value: Any) -> str | None:
    return ", ".join(map(str, value)) if isinstance(value, list) else value


def _when(utc: str | None) -> str:
    """A stored UTC time as a table shows it: to the second (the run id has the rest)."""
    return "" if not utc else utc.replace("T", " ").split(".")[0].rstrip("Z")


def runs_as_dicts(runs: Sequence[Any]) -> list[dict[str, Any]]:
    """A run's columns; model, devices and routes come from what the run recorded when it
    started (None for a run that did not say)."""
    out = []
    for run in runs:
        meta = getattr(run, "meta", None) or {}
        row = {k: getattr(run, k) for k in _RUN_ATTRS}
        row.update(model=meta.get("model"), devices=_listed(meta.get("devices")),
                   routes=_listed(meta.get("routes")))
        out.append(row)
    return out


def format_runs(runs: Sequence[Any], fmt: str) -> str:
    rows = runs_as_dicts(runs)
    fields = [Field(k, numeric=k == "n_records") for k in RUN_COLUMNS]
    try:
        return textout.pick(fmt, rows, fields, doc={"schema_version": SCHEMA_VERSION},
                            rows_key="runs")
    except ValueError:
        raise ValueError(f"unknown output format {fmt!r} for runs; use md, csv, json or "
                         "jsonl") from None


def render_runs(runs: Sequence[Any], full: bool = False) -> FitTable:
    """`farm results list`: one row per run with what it measured (model, devices, routes,
    from the run's meta) and its command, which wraps."""
    heads = [("run_id", Col("run id", "whole", keep=True)),
             ("started_utc", Col("started utc", "whole", drop=2)),
             ("finished_utc", Col("finished utc", "whole", drop=5)),
             ("status", Col("status", "whole", keep=True)),
             ("n_records", Col("records", "number", drop=3)),
             ("model", Col("model", "wrap", cap=24)),
             ("devices", Col("devices", "wrap", cap=24, drop=1)),
             ("routes", Col("routes", "wrap", cap=24, drop=1)),
             ("command", Col("command", "wrap", cap=60, drop=4))]
    rows = []
    for r in runs_as_dicts(runs):
        style = {"ok": "green", "partial": "yellow", "failed": "red",
                 "interrupted": "magenta"}.get(str(r["status"]), "")
        r["started_utc"], r["finished_utc"] = _when(r["started_utc"]), _when(r["finished_utc"])
        rows.append([Text("" if r[k] is None else str(r[k]),
                          style=style if k == "status" else "") for k, _ in heads])
    return FitTable([c for _, c in heads], rows, title="runs", full=full)
