"""What one bench measures and how: `Policy` (MLPerf/TFLite-style stopping rules) and
`BenchConfig` (model, routes — by default every route, fused —, threads, order, pauses,
timeouts).

The policy travels unchanged to every route runner (`Policy.as_request()`, the
`"policy"` object of the route-runner contract in docs/ARCHITECTURE.md) and into every
record's `policy` field together with the seed, so a result says how it was measured.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import Any

from farm import isa as isa_levels
from farm.errors import UsageError
from farm.results.rounds import min_paired_rounds
from farm.results.stats import DEFAULT_N_BOOT
from farm.routes import ROUTES, RouteKey, parse_keys

# `farm bench` and `farm triangle` run this many rounds unless told: the fewest whose
# paired verdicts (fusion on/off, route vs route: Wilcoxon signed-rank) can be significant
# at alpha 0.05 at all; fewer rounds make every such verdict "not enough rounds to judge"
DEFAULT_ROUNDS = min_paired_rounds(0.05)
# the measuring time of one route key, split over its rounds: more rounds, shorter rounds
# (a round still measures at least ROUND_MIN_TIME_S), so `farm bench --model tiny` stays
# quick while the replicates that matter, the rounds, grow
TOTAL_MIN_TIME_S = 3.0
ROUND_MIN_TIME_S = 0.5
TOTAL_MIN_RUNS = 50


def default_keys() -> tuple[RouteKey, ...]:
    """What `farm bench` measures without `--routes`: every registered route (plugins
    included), fused, in the report's order."""
    return tuple(RouteKey(name) for name in ROUTES)


@dataclass(frozen=True)
class Policy:
    """Warm up while (runs < warmup_runs or time < warmup_min_s); then measure while
    (n < min_runs or elapsed < min_time_s) and elapsed < max_time_s."""

    warmup_runs: int = 5
    warmup_min_s: float = 0.5
    min_runs: int = 50
    min_time_s: float = 2.0
    max_time_s: float = 30.0

    def __post_init__(self) -> None:
        if self.warmup_runs < 0 or self.min_runs < 1:
            raise UsageError("--warmup must be >= 0 and --runs >= 1")
        if min(self.warmup_min_s, self.min_time_s) < 0 or self.max_time_s <= 0:
            raise UsageError("--warmup-time/--min-time must be >= 0 and --max-time > 0")
        if self.max_time_s < self.min_time_s:
            raise UsageError(f"--max-time {self.max_time_s} is below --min-time "
                             f"{self.min_time_s}")

    @classmethod
    def for_rounds(cls, rounds: int, *, min_runs: int | None = None,
                   min_time_s: float | None = None, warmup_min_s: float | None = None,
                   **given: Any) -> Policy:
        """The policy of ONE round when a key runs `rounds` rounds; what is not given is
        split: min time = max(ROUND_MIN_TIME_S, TOTAL_MIN_TIME_S / rounds), min runs =
        max(10, TOTAL_MIN_RUNS / rounds), warm-up 0.25 s with several rounds (each round is a
        fresh process: it warms up again, and a quarter second warms a small model)."""
        rounds = max(1, rounds)
        if min_time_s is None:
            min_time_s = max(ROUND_MIN_TIME_S, TOTAL_MIN_TIME_S / rounds)
        if min_runs is None:
            min_runs = max(10, math.ceil(TOTAL_MIN_RUNS / rounds))
        if warmup_min_s is None:
            warmup_min_s = 0.25 if rounds > 1 else cls.warmup_min_s
        return cls(min_runs=min_runs, min_time_s=min_time_s, warmup_min_s=warmup_min_s,
                   **given)

    def as_request(self) -> dict[str, Any]:
        return asdict(self)

    def progress(self, n: int, elapsed_s: float) -> float:
        """Fraction of the measuring phase done (for the live view)."""
        enough = min(n / self.min_runs, elapsed_s / self.min_time_s if self.min_time_s else 1)
        return max(0.0, min(1.0, max(enough, elapsed_s / self.max_time_s)))


@dataclass(frozen=True)
class BenchConfig:
    model: str = "tiny"
    variant: str = "fp32"
    # route keys, parsed once here (`ort`, `tvm-unfused` and RouteKey alike are taken);
    # none given: every registered route, fused (`routes_default` then says so, and a
    # route the device cannot run is reported as skipped)
    routes: tuple[RouteKey, ...] = ()
    threads: int = 1
    policy: Policy = field(default_factory=Policy)
    pause_s: float = 1.0
    seed: int = 0
    repeats: int = 1
    profile_runs: int = 5
    route_timeout_s: float | None = None
    lock_wait_s: float = 0.0
    inputs_seed: int = 0
    # a device silent this long is lost (host side); an agent that hears nothing from the
    # host this long kills its runner and exits (device side, after a cut link)
    link_timeout_s: float = 30.0
    # model front-end (farm/models/frontend): `--shape NAME=D0,..` pairs, `--batch`,
    # `--seq`, and `--reference FILE.onnx` (fp32 model a pre-quantised file is judged against)
    shapes: tuple[tuple[str, tuple[int, ...]], ...] = ()
    batch: int | None = None
    seq: int | None = None
    reference: str | None = None
    routes_default: bool = False
    # ISA level farm's own routes are capped at (farm/isa.py, farm.inventory.capped);
    # defaults to $FARM_ISA, None = each device's own
    isa: str | None = field(default_factory=isa_levels.requested)

    def __post_init__(self) -> None:
        object.__setattr__(self, "isa", isa_levels.requested(self.isa or isa_levels.NATIVE))
        if not self.routes:
            object.__setattr__(self, "routes", default_keys())
            object.__setattr__(self, "routes_default", True)
        texts = [str(r) for r in self.routes]
        keys = parse_keys(texts, tuple(ROUTES))
        if len(keys) != len(texts):
            raise UsageError(f"route listed twice in {','.join(texts)}")
        object.__setattr__(self, "routes", tuple(keys))
        if self.threads < 1 or self.repeats < 1 or self.pause_s < 0 or self.profile_runs < 0:
            raise UsageError("--threads and --repeats must be >= 1, --pause >= 0")
        if self.link_timeout_s < 3:
            raise UsageError("--link-timeout must be at least 3 seconds (pings every 1-3 s)")

    def timeout_s(self) -> float:
        """How long one route may take before the agent kills it."""
        if self.route_timeout_s:
            return self.route_timeout_s
        p = self.policy
        return 120.0 + 2 * (p.max_time_s + p.warmup_min_s) + 10.0 * self.profile_runs

    def to_meta(self) -> dict[str, Any]:
        """Everything needed to rebuild this config (`farm bench --resume`)."""
        return {**asdict(self), "routes": [str(k) for k in self.routes]}

    @classmethod
    def from_meta(cls, meta: dict[str, Any]) -> BenchConfig:
        data = dict(meta)
        data["routes"] = tuple(data["routes"])
        data["policy"] = Policy(**data["policy"])
        data["shapes"] = tuple((str(n), tuple(d)) for n, d in data.get("shapes") or ())
        data.setdefault("isa", None)  # a run from before caps ran uncapped
        known = {f for f in cls.__dataclass_fields__}
        return cls(**{k: v for k, v in data.items() if k in known})

    def record_policy(self) -> dict[str, Any]:
        """The record's `policy` field: the stopping rules plus what makes stats repeatable."""
        return {**self.policy.as_request(), "seed": self.seed, "n_boot": DEFAULT_N_BOOT,
                "pause_s": self.pause_s, "repeats": self.repeats,
                "profile_runs": self.profile_runs, "inputs_seed": self.inputs_seed}
