"""The decision matrix: per device (and model/variant/threads), which route wins what.

Contract: `decisions(configs)` -> `Decision` rows, five criteria per scope:

* fastest     – lowest median end-to-end latency (ms). The runner-up is beaten
                significantly only when the 95 % CIs of the two medians do not overlap;
                otherwise the verdict is "no significant difference".
* smallest    – lowest binary size = runtime + code + weights (bytes, from `sizes`);
                a route whose record lacks one of the three parts does not compete.
* leanest     – lowest peak VmHWM (KiB). With repeats the [min, max] ranges over records
                must not overlap; a single reading per route must differ by more than
                `MEMORY_TOL` (1 %), else "no significant difference".
* coverage    – highest share of this route's attempted configurations on the device (all
                models/variants of the runs) that produced valid measurements; an
                unavailable or failed route counts 0.
* build cost  – lowest build + tune time (s, from `build_flags` build_s/tune_s).

On an emulated device (`Config.emulated`) the fastest criterion names no winner: its
verdict is "not ranked: emulated" (the emulator's speed on the host says nothing about the
device); the other four criteria are decided as usual.

Candidates per route are its *primary* configurations: measured, outputs valid (status
not invalid), fusion not switched off (the off variants exist for the fusion table); when a
route has several, the fastest by median represents it. Margin = runner-up / winner - 1,
in percent (for coverage: the difference in percentage points). Sizes and build times are
single exact readings: any difference counts.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from farm.report.configs import SIZE_PARTS, Config
from farm.results.emulation import NOT_RANKED

MEMORY_TOL = 0.01
WINS = "winner"
SAME = "no significant difference"
ALONE = "only one route measured"
NONE = "no data"


@dataclass(frozen=True)
class Decision:
    device: str
    scope: str
    criterion: str
    statistic: str
    unit: str
    winner: str | None
    winner_value: float | None
    runner_up: str | None
    runner_up_value: float | None
    margin: float | None
    margin_unit: str
    verdict: str


def total_size(config: Config) -> float | None:
    sizes = config.first_json("sizes")
    if not sizes:
        return None
    parts = [sizes.get(p) for p in SIZE_PARTS]
    nums = [float(p) for p in parts if isinstance(p, (int, float)) and not isinstance(p, bool)]
    # a total of some parts only (e.g. weights without the runtime) would mislead
    return sum(nums) if len(nums) == len(SIZE_PARTS) else None


def build_cost(config: Config) -> float | None:
    build, tune = config.cost_s("build_s"), config.cost_s("tune_s")
    if build is None and tune is None:
        return None
    return (build or 0.0) + (tune or 0.0)


def primary_configs(configs: Sequence[Config]) -> dict[str, Config]:
    """route -> its representative configuration (see module docstring)."""
    best: dict[str, Config] = {}
    for c in configs:
        if not c.valid or c.fusion is False:
            continue
        cur = best.get(c.route)
        if cur is None or c.summary.median < cur.summary.median:  # type: ignore[union-attr]
            best[c.route] = c
    return best


def coverage(configs: Sequence[Config], device: str) -> dict[str, float]:
    """route -> share (0..1) of its configurations on `device` that measured validly."""
    tried: dict[str, list[bool]] = {}
    for c in configs:
        if c.device == device:
            tried.setdefault(c.route, []).append(c.valid)
    return {route: sum(ok) / len(ok) for route, ok in tried.items()}


def _ranked(values: dict[str, float], higher_better: bool = False) -> list[tuple[str, float]]:
    return sorted(values.items(), key=lambda kv: (-kv[1] if higher_better else kv[1], kv[0]))


def _decide(device: str, scope: str, criterion: str, statistic: str, unit: str,
            values: dict[str, float], same: Callable[[str, str], bool],
            higher_better: bool = False, margin_unit: str = "%") -> Decision:
    ranked = _ranked(values, higher_better)
    if not ranked:
        return Decision(device, scope, criterion, statistic, unit, None, None, None, None,
                        None, margin_unit, NONE)
    win, win_v = ranked[0]
    if len(ranked) == 1:
        return Decision(device, scope, criterion, statistic, unit, win, win_v, None, None,
                        None, margin_unit, ALONE)
    ru, ru_v = ranked[1]
    tied = [r for r, v in ranked if v == win_v]
    if len(tied) > 1:  # an exact tie has no winner: name every tied route
        rest = [(r, v) for r, v in ranked if v != win_v]
        ru, ru_v = rest[0] if rest else (None, None)
        return Decision(device, scope, criterion, statistic, unit, " = ".join(tied), win_v,
                        ru, ru_v, None, margin_unit, SAME)
    if margin_unit == "pp":
        margin = (win_v - ru_v) * 100.0
    else:
        margin = (ru_v / win_v - 1.0) * 100.0 if win_v > 0 else None
    verdict = SAME if same(win, ru) else WINS
    return Decision(device, scope, criterion, statistic, unit, win, win_v, ru, ru_v,
                    margin, margin_unit, verdict)


def _memory_same(a: Config, b: Config) -> bool:
    ra = [float(r["peak_vmhwm_kb"]) for r in a.records if r.get("peak_vmhwm_kb") is not None]
    rb = [float(r["peak_vmhwm_kb"]) for r in b.records if r.get("peak_vmhwm_kb") is not None]
    if len(ra) > 1 or len(rb) > 1:
        return min(ra) <= max(rb) and min(rb) <= max(ra)
    lo, hi = sorted((max(ra), max(rb)))
    return hi <= lo * (1.0 + MEMORY_TOL)


def _scopes(configs: Sequence[Config]) -> dict[tuple[str, str, str, int | None], list[Config]]:
    out: dict[tuple[str, str, str, int | None], list[Config]] = {}
    for c in configs:
        out.setdefault((c.device, c.model, c.variant, c.threads), []).append(c)
    return out


def scope_label(model: str, variant: str, threads: int | None) -> str:
    parts = [model or "?"]
    if variant:
        parts.append(variant)
    if threads is not None:
        parts.append(f"{threads} thr")
    return " / ".join(parts)


def decisions(configs: Sequence[Config]) -> list[Decision]:
    rows: list[Decision] = []
    for (device, model, variant, threads), group in _scopes(configs).items():
        scope = scope_label(model, variant, threads)
        prim = primary_configs(group)
        med = {r: c.summary.median for r, c in prim.items()}  # type: ignore[union-attr]

        def ci_overlap(a: str, b: str, prim: dict[str, Config] = prim) -> bool:
            sa, sb = prim[a].summary, prim[b].summary
            return sa.ci95_low <= sb.ci95_high and sb.ci95_low <= sa.ci95_high  # type: ignore[union-attr]

        if any(c.emulated for c in group):
            rows.append(Decision(device, scope, "fastest", "median end-to-end latency", "ms",
                                 None, None, None, None, None, "%", NOT_RANKED))
        else:
            rows.append(_decide(device, scope, "fastest", "median end-to-end latency", "ms",
                                med, ci_overlap))
        sizes = {r: v for r, c in prim.items() if (v := total_size(c)) is not None}
        rows.append(_decide(device, scope, "smallest", "runtime + code + weights", "bytes",
                            sizes, lambda a, b, s=sizes: s[a] == s[b]))
        mem = {r: v for r, c in prim.items() if (v := c.peak("peak_vmhwm_kb")) is not None}
        rows.append(_decide(device, scope, "leanest", "peak VmHWM", "KiB", mem,
                            lambda a, b, p=prim: _memory_same(p[a], p[b])))
        cov = coverage(configs, device)
        cov = {r: v for r, v in cov.items() if any(c.route == r for c in group)}
        if not any(cov.values()):
            cov = {}  # nothing measured validly: no winner, "no data"
        rows.append(_decide(device, scope, "coverage", "valid configurations / attempted",
                            "share", cov, lambda a, b, v=cov: v[a] == v[b],
                            higher_better=True, margin_unit="pp"))
        costs = {r: v for r, c in prim.items() if (v := build_cost(c)) is not None}
        rows.append(_decide(device, scope, "build cost", "build + tune time", "s", costs,
                            lambda a, b, v=costs: v[a] == v[b]))
    return rows
