"""Say so when a report sets capped routes against ORT, which cannot be capped.

Contract: `mark_isa(report)` is applied by `analyze` once the tables exist. On a device where
some configuration of a route that honours an ISA cap (custom, TVM: `Route.isa_capped`) ran
capped (its `isa` config flag) and a route that does not (ORT: MLAS picks its kernels from
the CPU) ran too, the latency and decision captions name the levels each side ran at: the
comparison is then not like for like (a Zen 3 runs ORT at AVX2; an AVX-512 host capped to
avx2 still runs ORT at AVX-512). `isa_mismatches(report)` gives the same facts to callers.
`cap_line(device, cap)` says the same in one line for a benchmark script's header.
"""

from __future__ import annotations

from typing import Any

from farm.routes import ROUTES


def isa_mismatches(report: Any) -> dict[str, tuple[set[str], set[str]]]:
    """device -> (levels of capped configurations, levels of uncappable routes' ones)."""
    capped: dict[str, set[str]] = {}
    free: dict[str, set[str]] = {}
    for c in report.configs:
        spec = ROUTES.get(c.route)
        if spec is not None and spec.isa_capped:
            if c.flags.get("isa"):
                capped.setdefault(c.device, set()).add(str(c.flags["isa"]))
        else:
            free.setdefault(c.device, set()).add(c.isa or "unknown")
    return {d: (levels, free[d]) for d, levels in capped.items()
            if d in free and levels != free[d]}


def cap_line(device: Any, cap: str | None, cpu: str = "") -> str:
    """One line: the level each side of a run on `device` ran at, capped at `cap` (None: not)."""
    uncappable = ", ".join(name for name, spec in ROUTES.items() if not spec.isa_capped)
    cappable = ", ".join(name for name, spec in ROUTES.items() if spec.isa_capped)
    cpu = f"CPU {cpu} " if cpu else ""
    if cap is None or cap == device.level:
        return f"{cpu}(level {device.level}): every route at that level, no cap"
    return (f"{cpu}(level {device.level}): {cappable} capped at {cap} (--isa / FARM_ISA), "
            f"{uncappable} uncapped at {device.level} ({uncappable} cannot be capped): not like "
            f"for like with {uncappable}")


def mark_isa(report: Any) -> None:
    uncappable = ", ".join(name for name, spec in ROUTES.items() if not spec.isa_capped)
    cappable = ", ".join(name for name, spec in ROUTES.items() if spec.isa_capped)
    for device, (capped, free) in sorted(isa_mismatches(report).items()):
        note = (f" Not like for like on {device}: {cappable} capped at "
                f"{', '.join(sorted(capped))} (--isa / FARM_ISA), {uncappable} at "
                f"{', '.join(sorted(free))} ({uncappable} picks its kernels from the CPU and "
                "cannot be capped).")
        for name in ("latency", "decision"):
            if name in report.tables:
                report.tables[name].caption += note
