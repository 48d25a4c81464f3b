"""Say which reference judged the outputs, and why, where the records say it (int8 benches).

Contract: `mark_reference(report)` is applied by `analyze`: for every (model, variant) whose
records carry `accuracy.reference_why` (farm/bench/int8_reference.py: the exact integer
reference of an int8 file, or ORT where the evaluator cannot run it), the availability
table's caption (validity is what it is about) names the reference, the reason, and ORT's
own deviation from the exact outputs on the host that computed them.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


def _fmt(value: Any, spec: str) -> str:
    return format(value, spec) if isinstance(value, (int, float)) else "—"


def reference_notes(report: Any) -> list[str]:
    seen: dict[tuple[str, str], str] = {}
    for c in report.configs:
        for r in c.records:
            acc = r.get("accuracy")
            if not isinstance(acc, Mapping) or not acc.get("reference_why"):
                continue
            key = (c.model, c.variant)
            if key in seen:
                continue
            note = (f"{c.model} {c.variant}: judged against {acc.get('reference') or '?'} "
                    f"({acc['reference_why']})")
            dev = acc.get("ort_host_deviation")
            if isinstance(dev, Mapping):
                note += (f"; ORT on the host against the exact outputs: per-token cosine min "
                         f"{_fmt(dev.get('cosine_min'), '.4f')}, max abs diff "
                         f"{_fmt(dev.get('max_abs_diff'), '.3g')}")
            seen[key] = note + "."
    return list(seen.values())


def mark_reference(report: Any) -> None:
    notes = reference_notes(report)
    if notes and "availability" in report.tables:
        report.tables["availability"].caption += " Outputs: " + " ".join(notes)
