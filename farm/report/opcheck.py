"""Does a route's per-op profile add up to its end-to-end latency? Flag it when it does not.

Why this exists: per-op times come from a few separate profiling runs after the timed ones,
and a profiler costs time inside the windows it measures. What was measured (one run each,
on a 2-core VM loaded by other jobs to load 3–9: figures are noisy):

* ONNX Runtime 1.32's profiler does its own bookkeeping inside each node's `*_kernel_time`
  window (shape strings, allocator counters, the intra-op pool's scheduling stats as JSON):
  ~2 µs per node at 1 thread, ~3 µs at 2 threads on a 400-Add chain, whose node sum is then
  8–12× an unprofiled run (`benchmarks/ort_profile_overhead.py`);
* the profiling runs themselves are not the steady state: tiny at 2 threads on `local`,
  their own wall time was 3.4× (ORT), 2.0× (custom), 1.6× (TVM) the e2e median, while the
  per-op totals were 70 %, 97 %, 73 % of that wall; mobilebert at 2 threads, interleaved
  profiled and unprofiled ORT runs differed by 1.1–1.3× but separate ones by up to 2.8×;
* on a loaded machine the per-node medians drop the preemptions a whole run suffers
  (mobilebert fp32 at 2 threads: ORT per-op total 25 % of an e2e median of 258 ms, its
  profiled runs' wall 263 ms).

No constant corrects that from outside (it depends on node count, threads and load), so the
report does not pretend: it shows the profiled runs' own wall time (`ops.run_ms`, recorded
by the ORT, TVM and custom runners on agent devices) and the per-op total as a share of it,
and FLAGS a configuration whose per-op total is outside ±`TOLERANCE_PCT` % of its e2e
median, naming which of the two gaps is off. A flagged row's per-category figures are not
comparable with other routes' at that setting; its shares of its own profiled total still
are what the profile saw.

Contract: `check_fields(records, profiled_ms, e2e_ms)` -> the ops-table fields
`profiled_run_ms`, `op_share_of_run_pct`, `op_share_check` (text) and `op_flagged` (bool,
None when there is nothing to check); `COLUMNS` are their report columns; `flagged_rows`
and `warning_lines(table)` serve the terminal and the HTML page.
"""

from __future__ import annotations

import statistics
from collections.abc import Iterable, Mapping
from typing import Any

from farm.report.tables import Column, ReportTable

TOLERANCE_PCT = 20.0

COLUMNS = [Column("profiled_run_ms", "profiled runs' wall ms", "ms"),
           Column("op_share_of_run_pct", "profiled total % of profiled runs' wall", "pct"),
           Column("op_share_check", f"per-op total vs e2e (±{TOLERANCE_PCT:.0f} %)"),
           Column("op_flagged", "flagged")]

CAPTION = (f" A row is FLAGGED when its profiled total is outside ±{TOLERANCE_PCT:.0f} % of "
           "its end-to-end median: its per-op figures are then not comparable with other "
           "routes'. 'profiled runs' wall ms' is the profiling runs' own median run time and "
           "the next column the per-op total's share of it: together they say whether the "
           "profiling runs were unlike the steady state (load, cold start) or the ops do not "
           "add up to their runs (a profiler timing its own bookkeeping inside each op's "
           "window — ORT: ~2–3 µs per node — or per-op medians dropping preemptions).")


def profiled_run_ms(records: Iterable[Mapping[str, Any]]) -> float | None:
    """Median over records of the profiling runs' own wall time (`ops.run_ms`)."""
    values = [float(r["ops"]["run_ms"]) for r in records
              if isinstance(r.get("ops"), Mapping)
              and isinstance(r["ops"].get("run_ms"), (int, float))]
    return statistics.median(values) if values else None


def check_fields(records: Iterable[Mapping[str, Any]], profiled_ms: float | None,
                 e2e_ms: float | None, tolerance_pct: float = TOLERANCE_PCT
                 ) -> dict[str, Any]:
    wall = profiled_run_ms(records)
    out: dict[str, Any] = {"profiled_run_ms": wall, "op_share_of_run_pct": None,
                           "op_share_check": None, "op_flagged": None}
    if profiled_ms is not None and wall:
        out["op_share_of_run_pct"] = profiled_ms / wall * 100
    if profiled_ms is None or not e2e_ms:
        return out
    share = profiled_ms / e2e_ms * 100
    inside = abs(share - 100.0) <= tolerance_pct
    out["op_flagged"] = not inside
    # short: the column header states the tolerance, the warning lines say what it means
    out["op_share_check"] = f"{'ok' if inside else 'FLAG'}: {share:.0f} % of e2e"
    return out


def flagged_rows(table: ReportTable) -> list[dict[str, Any]]:
    return [row for row in table.rows if row.get("op_flagged")]


def _why(row: Mapping[str, Any]) -> str:
    """Which gap is off: the profiling runs vs the steady state, or the ops vs their runs."""
    wall, e2e = row.get("profiled_run_ms"), row.get("e2e_median_ms")
    inside = row.get("op_share_of_run_pct")
    if wall is None or not e2e:
        return "the route does not record its profiled runs' wall time"
    parts = []
    if abs(wall / e2e * 100 - 100) > TOLERANCE_PCT:
        parts.append(f"the profiling runs themselves took {wall / e2e:.2f}× the e2e median "
                     "(not the steady state: load, cold start, thread wake-ups)")
    if inside is not None and abs(inside - 100) > TOLERANCE_PCT:
        parts.append(f"the per-op windows sum to {inside:.0f} % of those runs' wall "
                     "(profiler bookkeeping inside op windows, or per-op medians dropping "
                     "preemptions)")
    return "; ".join(parts) or "both gaps within tolerance alone, not together"


def warning_lines(table: ReportTable) -> list[str]:
    """One line per flagged configuration, for the terminal and the HTML page."""
    lines = []
    for row in flagged_rows(table):
        wall = row.get("profiled_run_ms")
        wall_text = f", profiled runs' own wall {wall:.3f} ms" if wall is not None else ""
        lines.append(f"per-op profile of {row.get('device')}/{row.get('route')} "
                     f"({row.get('config')}, {row.get('threads')} thr): total "
                     f"{row.get('profiled_ms'):.3f} ms vs e2e median "
                     f"{row.get('e2e_median_ms'):.3f} ms{wall_text} — "
                     f"{row.get('op_share_check')}, outside ±{TOLERANCE_PCT:.0f} %: its "
                     f"per-op figures are not comparable with other routes'; {_why(row)}")
    return lines
