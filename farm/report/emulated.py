"""Mark emulated devices in a `Report` (see `farm.results.emulation` for why).

Contract: `mark_emulated(report)` is applied by `analyze` once the tables exist: every row
whose device is emulated gets `row["emulated"] = True` (printers show the device as
`NAME (emulated)` through `farm.report.tables.row_cell`; the raw device name stays in the
json/csv values), and the latency and decision captions say why emulated latency is not
ranked. `emulated_devices(report)` and `device_labels(report)` serve headers and titles.
"""

from __future__ import annotations

from typing import Any

from farm.results.emulation import WHY, device_label


def emulated_devices(report: Any) -> set[str]:
    return {c.device for c in report.configs if c.emulated}


def device_labels(report: Any) -> list[str]:
    marked = emulated_devices(report)
    return [device_label(d, d in marked) for d in report.devices]


def mark_emulated(report: Any) -> None:
    marked = emulated_devices(report)
    if not marked:
        return
    for table in report.tables.values():
        for row in table.rows:
            if row.get("device") in marked:
                row["emulated"] = True
        if table.name in ("latency", "decision", "fusion"):
            table.caption += f" {', '.join(sorted(marked))}: {WHY}."
