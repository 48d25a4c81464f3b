"""The decision matrix: per device (and model/variant/threads), which route wins what.

Contract: `decisions(configs)` -> `Decision` rows, five criteria per scope:

* fastest     – lowest median end-to-end latency (ms). Winner and runner-up are judged
                over the rounds both ran in (same bench: paired by run and round): the
                signed-rank test of their round-median ratios (`farm.results.rounds`);
                "winner" when p < 0.05, "no significant difference" when not, "not enough
                rounds to judge" below 6 shared rounds. Configurations of different runs
                (no shared round) are judged by Mann-Whitney on their round medians.
* smallest    – lowest binary size = runtime + code + weights (bytes, from `sizes`);
                a route whose record lacks one of the three parts does not compete.
* leanest     – lowest memory the MODEL costs: peak VmHWM less the runner's idle baseline
                (`memory_baseline_kb`: runtime loaded, no model), so ORT's Python process
                with numpy and onnxruntime (~50 MB before any model) is not set against
                a C binary. Per shared round the increments are deterministic readings:
                the winner must be leaner in every shared round by more than
                `MEMORY_TOL` (1 %), else "no significant difference". The row's note
                shows both figures (increment and total) of the two routes; a route
                whose records have no baseline does not compete (named in the note).
* coverage    – highest share of this route's attempted configurations on the device (all
                models/variants of the runs) that produced valid measurements; an
                unavailable or failed route counts 0.
* build cost  – lowest build + tune time (s, from `build_flags` build_s/tune_s).

On an emulated device (`Config.emulated`) the fastest criterion names no winner: its
verdict is "not ranked: emulated" (the emulator's speed on the host says nothing about the
device); the other four criteria are decided as usual.

Candidates per route are its *primary* configurations: measured, outputs valid (status
not invalid), fusion not switched off (the off variants exist for the fusion table); when a
route has several, the fastest by median represents it. `left_out(configs)` names every
configuration of a scope that is not a candidate and why (the decision table's caption).
Margin = runner-up / winner - 1, in percent (for coverage: the difference in percentage
points). Sizes and build times are single exact readings: any difference counts.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from farm.report.configs import SIZE_PARTS, Config
from farm.results.emulation import NOT_RANKED
from farm.results.rounds import NOT_ENOUGH, paired_test, unpaired_test

MEMORY_TOL = 0.01
ALPHA = 0.05
WINS = "winner"
SAME = "no significant difference"
ALONE = "only one route measured"
NONE = "no data"
MIB = 1024.0


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
    note: str = ""


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
            values: dict[str, float], same: Callable[[str, str], bool | str],
            higher_better: bool = False, margin_unit: str = "%", note: str = "") -> Decision:
    """`same(winner, runner_up)`: True (no significant difference), False (a winner) or
    the verdict itself (e.g. "not enough rounds to judge")."""
    ranked = _ranked(values, higher_better)
    if not ranked:
        return Decision(device, scope, criterion, statistic, unit, None, None, None, None,
                        None, margin_unit, NONE, note)
    win, win_v = ranked[0]
    if len(ranked) == 1:
        return Decision(device, scope, criterion, statistic, unit, win, win_v, None, None,
                        None, margin_unit, ALONE, note)
    ru, ru_v = ranked[1]
    tied = [r for r, v in ranked if v == win_v]
    if len(tied) > 1:  # an exact tie has no winner: name every tied route
        rest = [(r, v) for r, v in ranked if v != win_v]
        ru, ru_v = rest[0] if rest else (None, None)
        return Decision(device, scope, criterion, statistic, unit, " = ".join(tied), win_v,
                        ru, ru_v, None, margin_unit, SAME, note)
    if margin_unit == "pp":
        margin = (win_v - ru_v) * 100.0
    else:
        margin = (ru_v / win_v - 1.0) * 100.0 if win_v > 0 else None
    judged = same(win, ru)
    verdict = judged if isinstance(judged, str) else SAME if judged else WINS
    return Decision(device, scope, criterion, statistic, unit, win, win_v, ru, ru_v,
                    margin, margin_unit, verdict, note)


def latency_same(a: Config, b: Config) -> bool | str:
    """Fastest: judged over rounds, paired when the two ran in the same rounds."""
    ra, rb = a.rounds(), b.rounds()
    shared = sorted(set(ra) & set(rb))
    if shared:
        test = paired_test([ra[k] for k in shared], [rb[k] for k in shared], alpha=ALPHA)
    else:
        test = unpaired_test(list(ra.values()), list(rb.values()), alpha=ALPHA)
    if not test.judged:
        return NOT_ENOUGH
    return not test.significant(ALPHA)


def memory_same(a: Config, b: Config) -> bool:
    """Leanest: `a` (the lower increment) must be leaner in every shared round by more
    than MEMORY_TOL; without shared rounds, its largest increment must be."""
    ra, rb = a.round_increments(), b.round_increments()
    shared = sorted(set(ra) & set(rb))
    pairs = ([(ra[k], rb[k]) for k in shared] if shared else
             [(a.memory_increment_kb() or 0.0, b.memory_increment_kb() or 0.0)])
    return not all(y > x * (1.0 + MEMORY_TOL) for x, y in pairs)


def _memory_note(prim: dict[str, Config], mem: dict[str, float]) -> str:
    parts = [f"{r}: +{mem[r] / MIB:.1f} MiB on an idle runner of "
             f"{(c.memory_baseline_kb() or 0) / MIB:.1f} MiB (total "
             f"{(c.peak('peak_vmhwm_kb') or 0) / MIB:.1f} MiB)"
             for r, c in sorted(prim.items(), key=lambda kv: mem.get(kv[0], float("inf")))
             if r in mem]
    without = sorted(r for r, c in prim.items()
                     if r not in mem and c.peak("peak_vmhwm_kb") is not None)
    if without:
        parts.append(f"not ranked (no idle baseline recorded): {', '.join(without)}")
    return "; ".join(parts)


def left_out(configs: Sequence[Config]) -> list[str]:
    """Configurations of the scopes that are not candidates, each with why."""
    prim = {id(c) for group in _scopes(configs).values()
            for c in primary_configs(group).values()}
    out = []
    for c in configs:
        if id(c) in prim:
            continue
        why = ("not measured" if not c.measured else "outputs invalid" if not c.valid else
               "fusion off: the fusion table's baseline" if c.fusion is False else
               "slower than another configuration of the route")
        # the route key names an unfused configuration (`ort-unfused`); a long label (ORT's
        # is ~100 characters) is the latency table's numbered note, not repeated here
        name = (f"{c.route}-unfused" if c.fusion is False else
                f"{c.route} {c.label}" if len(c.label) <= 40 else f"{c.route} {c.label[:39]}…")
        out.append(f"{c.device} {name} ({scope_label(c.model, c.variant, c.threads)}): {why}")
    return out


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
        if any(c.emulated for c in group):
            rows.append(Decision(device, scope, "fastest", "median end-to-end latency", "ms",
                                 None, None, None, None, None, "%", NOT_RANKED))
        else:
            rows.append(_decide(device, scope, "fastest", "median end-to-end latency", "ms",
                                med, lambda a, b, p=prim: latency_same(p[a], p[b]),
                                note="judged over rounds: signed-rank test of paired round "
                                     "medians"))
        sizes = {r: v for r, c in prim.items() if (v := total_size(c)) is not None}
        rows.append(_decide(device, scope, "smallest", "runtime + code + weights", "bytes",
                            sizes, lambda a, b, s=sizes: s[a] == s[b]))
        mem = {r: v for r, c in prim.items() if (v := c.memory_increment_kb()) is not None}
        rows.append(_decide(device, scope, "leanest", "peak VmHWM - idle runner", "KiB", mem,
                            lambda a, b, p=prim: memory_same(p[a], p[b]),
                            note=_memory_note(prim, mem)))
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
