"""How noisy the machine was: CPU steal and load per round, the spread of round medians,
and the warnings a reader must see before trusting a verdict.

Contract:
* `cpu_shares(before, after)` -> {"steal_pct", "busy_pct"} from two device states'
  `cpu_jiffies` (/proc/stat's aggregate line, read by the agent); None when either side
  lacks it or no time passed. Steal is time the hypervisor gave another guest while this
  one wanted the CPU: no load average shows it, and it stretches every sample it hits.
* `round_facts(before, after)` -> what a record keeps per round: steal_pct, busy_pct and
  load1 (the 1-minute load average after the round).
* `spread_pct(round_medians)` -> (max / min - 1) * 100 of the round medians: how far the
  rounds of one key disagree; None with fewer than two rounds.
* `noise_warnings(record)` / `warnings_of(round_medians, steals)` -> the warnings, with the
  bounds `SPREAD_BOUND_PCT` (round medians further apart than this make a verdict of a few
  percent meaningless) and `STEAL_BOUND_PCT` (a hypervisor taking this much is preempting
  the bench).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

SPREAD_BOUND_PCT = 10.0
STEAL_BOUND_PCT = 5.0


def _jiffies(state: Mapping[str, Any] | None) -> dict[str, float]:
    raw = (state or {}).get("cpu_jiffies") or {}
    return {k: float(v) for k, v in raw.items()
            if isinstance(v, (int, float)) and not isinstance(v, bool)}


def cpu_shares(before: Mapping[str, Any] | None, after: Mapping[str, Any] | None
               ) -> dict[str, float] | None:
    a, b = _jiffies(before), _jiffies(after)
    if not a or not b or set(a) != set(b):
        return None
    delta = {k: b[k] - a[k] for k in a}
    total = sum(delta.values())
    if total <= 0 or any(v < 0 for v in delta.values()):  # a reboot or a counter wrap
        return None
    idle = delta.get("idle", 0.0) + delta.get("iowait", 0.0)
    return {"steal_pct": round(100.0 * delta.get("steal", 0.0) / total, 2),
            "busy_pct": round(100.0 * (total - idle) / total, 2)}


def round_facts(before: Mapping[str, Any] | None, after: Mapping[str, Any] | None
                ) -> dict[str, float | None]:
    shares = cpu_shares(before, after) or {}
    load = (after or {}).get("load") or []
    return {"steal_pct": shares.get("steal_pct"), "busy_pct": shares.get("busy_pct"),
            "load1": float(load[0]) if load else None}


def spread_pct(round_medians: Sequence[float] | None) -> float | None:
    values = [float(v) for v in round_medians or [] if v and v > 0]
    if len(values) < 2:
        return None
    return (max(values) / min(values) - 1.0) * 100.0


def warnings_of(round_medians: Sequence[float] | None,
                steals: Sequence[float | None] | None) -> list[str]:
    out = []
    spread = spread_pct(round_medians)
    if spread is not None and spread > SPREAD_BOUND_PCT:
        out.append(f"round medians spread {spread:.0f} % > {SPREAD_BOUND_PCT:.0f} %")
    seen = [float(s) for s in steals or [] if s is not None]
    if seen and max(seen) > STEAL_BOUND_PCT:
        out.append(f"CPU steal up to {max(seen):.1f} % > {STEAL_BOUND_PCT:.0f} %")
    return out


def noise_warnings(record: Mapping[str, Any]) -> list[str]:
    """The warnings for one stored record (its round medians and per-round steal)."""
    rounds = record.get("rounds")
    steals = rounds.get("steal_pct") if isinstance(rounds, Mapping) else None
    return warnings_of(record.get("round_medians_ms"),
                       steals if isinstance(steals, list) else None)


def steal_warning(shares: Mapping[str, float] | None) -> str | None:
    """`farm devices check`: the probe's steal over its window, if past the bound (the
    load rule is the check's own, `farm.devices.check`)."""
    steal = (shares or {}).get("steal_pct")
    if steal is None or steal <= STEAL_BOUND_PCT:
        return None
    return (f"CPU steal {steal:.1f} % (bound {STEAL_BOUND_PCT:.0f} %): the hypervisor "
            "preempts this machine; timings will be noisy")
