"""Checks over a stored run, for tests and fault scenarios: `assert_store_ok(store)` (the
integrity report, or StoreError listing the problems), `records_by_device(store, run_id)`,
`partial_run_problems(...)` (what a run with failed devices must look like)."""

from __future__ import annotations

from typing import Any

from farm import followup
from farm.errors import StoreError
from farm.results.backend import Store
from farm.results.integrity import IntegrityReport
from farm.results.schema import FAILED, PARTIAL


def assert_store_ok(store: Store) -> IntegrityReport:
    """The integrity report of `store`; StoreError naming every problem if any."""
    report = store.integrity_check()
    if not report.ok:
        raise StoreError(f"result store {store.where} failed its integrity check:\n"
                         + report.summary(), hint=f"see `{followup.command('results', 'check')}`")
    return report


def records_by_device(store: Store, run_id: str) -> dict[str, list[dict[str, Any]]]:
    out: dict[str, list[dict[str, Any]]] = {}
    for rec in store.records(run_id):
        out.setdefault(rec["device"], []).append(rec)
    return out


def partial_run_problems(
    store: Store, run_id: str, failed_devices: set[str] | list[str],
) -> list[str]:
    """What a run that lost `failed_devices` got wrong (empty list: handled well)."""
    problems: list[str] = []
    runs = {r.run_id: r for r in store.runs()}
    if run_id not in runs:
        return [f"run {run_id!r} is not in the store"]
    if runs[run_id].status != "partial":
        problems.append(f"run {run_id}: status {runs[run_id].status!r}, expected 'partial'")
    by_device = records_by_device(store, run_id)
    failing = (FAILED, PARTIAL)
    for device in sorted(failed_devices):
        bad = [r for r in by_device.get(device, []) if r["status"] in failing]
        if not bad:
            problems.append(f"device {device}: no failed/partial record says why it failed")
        problems += [f"device {device}: record {r['record_id']} has no status_detail"
                     for r in bad if not r["status_detail"]]
    for device, recs in sorted(by_device.items()):
        if device in failed_devices:
            continue
        problems += [f"device {device}: record {r['record_id']} is {r['status']!r} but the "
                     f"device was not expected to fail ({r['status_detail']})"
                     for r in recs if r["status"] in failing]
    for recs in by_device.values():
        for r in recs:
            if r["samples_ms"] and r["median_ms"] is None:
                problems.append(f"record {r['record_id']}: samples kept but no statistics")
    return problems
