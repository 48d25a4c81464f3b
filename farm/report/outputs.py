"""Text outputs of the report, all from the same `Report`: md, csv, json.

Contract: `format_report(report, fmt)` with fmt in `TEXT_FORMATS` (md | csv | json) returns
the whole report as one string (see `farm.report.tables` for each layout); the terminal
table is `farm.report.terminal`, the HTML page `farm.report.html`.
"""

from __future__ import annotations

from farm.report.analysis import Report
from farm.report.emulated import device_labels, emulated_devices
from farm.report.tables import to_csv, to_json, to_md

TEXT_FORMATS = ("md", "csv", "json")


def _md_header(report: Report) -> str:
    lines = [f"# farm triangle report — {', '.join(report.models) or 'model ?'}", ""]
    lines.append(f"Runs: {', '.join(report.run_ids) or '(records given directly)'}; "
                 f"devices: {', '.join(device_labels(report)) or '-'}. Every number is computed "
                 "from the stored raw records.")
    return "\n".join(lines) + "\n"


def format_report(report: Report, fmt: str) -> str:
    tables = list(report.tables.values())
    if fmt == "md":
        return to_md(tables, header=_md_header(report))
    if fmt == "csv":
        return to_csv(tables)
    if fmt == "json":
        return to_json(tables, {**report.meta(),
                                "emulated_devices": sorted(emulated_devices(report))})
    raise ValueError(f"unknown report format {fmt!r}; use one of {', '.join(TEXT_FORMATS)}")
