"""The shape of one route's host-side description (`Route`), the typed route key
(`RouteKey`), what a route builds from (`ModelForms`) and what its functions return.

A route package (`farm/routes/<name>/`) defines `ROUTE = Route(...)` in its `route.py`; the
registry (`farm.routes.ROUTES`) lists them. `plan` makes what a bench deploys and asks for,
`build` what `farm build` registers; both raise BuildError when the route cannot be built
for the model or device (the bench then records it `unavailable`). `check` is the route's
`farm models check` verdict, decided by the real build step, not by a list of op names.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from farm.artifacts import Artifact
from farm.errors import UsageError
from farm.inventory.device import Device
from farm.models.frontend import Canonical, ShapeSpec, canonicalize

Progress = Callable[[str, float], None]
Verdict = dict[str, Any]  # {ok, stage, node, op, reason[, warning]} (farm.routes.check)

UNFUSED_SUFFIX = "-unfused"


@dataclass(frozen=True, order=True)
class RouteKey:
    """What one bench configuration runs: a route, with fusion on or off (the fusion
    experiment: ORT without graph optimisations, TVM without FuseOps/FuseTIR, the custom
    executor with every op separate). Written `tvm` / `tvm-unfused` on the command line,
    in events and in resume bookkeeping; parsed once, at that edge."""

    route: str
    fused: bool = True

    @classmethod
    def parse(cls, text: str) -> RouteKey:
        text = text.strip()
        if text.endswith(UNFUSED_SUFFIX):
            return cls(text.removesuffix(UNFUSED_SUFFIX), False)
        return cls(text)

    def __str__(self) -> str:
        return self.route if self.fused else self.route + UNFUSED_SUFFIX


def parse_keys(text: str | Sequence[str], known: Sequence[str]) -> list[RouteKey]:
    """`ort,tvm-unfused` (or a list of such) -> keys, in order, without repeats; an
    unknown route is a UsageError naming the known ones."""
    items = text.split(",") if isinstance(text, str) else list(text)
    keys = [RouteKey.parse(t) for t in items if str(t).strip()]
    unknown = [str(k) for k in keys if k.route not in known]
    if unknown or not keys:
        raise UsageError(f"unknown route(s) {unknown or '(none)'} in {text!r}",
                         hint=f"choose from {', '.join(known)} (each also as "
                              f"<route>{UNFUSED_SUFFIX})")
    return list(dict.fromkeys(keys))


@dataclass(frozen=True)
class ModelForms:
    """The forms of one model a route may build from: the user's own file (`source`, run
    at run-time shapes), and for a user's file the front-end's canonical one (bound
    shapes, canonical op set; `canonical` is None for a generated preset, which is
    canonical already)."""

    source: Path
    canonical: Canonical | None = None
    spec: ShapeSpec | None = None

    @property
    def quantisation(self) -> str | None:
        return self.canonical.quantisation if self.canonical is not None else None

    def canonical_path(self) -> Path:
        return self.canonical.path if self.canonical is not None else self.source

    def dequantized_path(self) -> Path:
        """The canonical file with MatMulNBits dequantised (for a route without 4-bit)."""
        if self.canonical is None:
            return self.source
        return canonicalize(self.canonical.source, self.spec, dequantize=True).path


def source_file(forms: ModelForms) -> Path:
    return forms.source


def canonical_file(forms: ModelForms) -> Path:
    return forms.canonical_path()


@dataclass(frozen=True)
class RoutePlan:
    route: str
    model_remote: str                      # relative to the device work dir
    artifacts: tuple[Artifact, ...] = ()
    options: dict[str, Any] = field(default_factory=dict)
    build_flags: dict[str, Any] = field(default_factory=dict)
    sizes: dict[str, int] = field(default_factory=dict)  # runtime, code, weights (bytes)


@dataclass(frozen=True)
class PlanInput:
    """What a plan needs from the bench's preparation."""

    model_path: Path                        # the form `Route.model_input` chose
    model_artifact: Artifact                # the ONNX model as the bench deploys it
    memo: dict[str, Any]                    # per-bench memo (one executor per arch, ...)


@dataclass
class BuiltRoute:
    route: str
    ok: bool
    detail: str
    seconds: float
    artifacts: list[str] = field(default_factory=list)
    facts: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Route:
    """One route as the host knows it (see module docstring)."""

    name: str                               # `--routes` key and the record's `route`
    label: str                              # how reports name it
    plan: Callable[[Device, PlanInput, bool], RoutePlan]   # (device, input, fused)
    # `farm build`: (device, model, fused, progress) -> (detail, artifact paths, facts)
    build: Callable[[Path, Device, bool, Progress], tuple[str, list[str], dict[str, Any]]]
    # `farm models check`: can this route take the model? (the real step, see module doc)
    check: Callable[[ModelForms], Verdict]
    # which form of the model the route builds from (the user's own file, or the
    # front-end's canonical one)
    model_input: Callable[[ModelForms], Path] = canonical_file
    fusion_flag: str = "fusion"             # build_flags key naming the fusion setting
    fusion_values: tuple[Any, Any] = (True, False)  # its value (fused, unfused)
    serial_build: bool = True               # builds share a cache: one at a time
    # what the agent checks before it offers the route (shipped in runners/routes.json):
    # "runners" (first present wins; a .py runs with the agent's Python, else an
    # executable), "requires" (executables), "modules" (importable in a fresh child),
    # "cpu_features" ({arch: [feature, ...]}); "{arch}" in a path is the device's arch
    agent: dict[str, Any] = field(default_factory=dict)
    # what deploy ships for the route: host files (relative to the repository root, or
    # absolute for a route from another package) that land in runners/ under their own
    # names, and the build-registry kinds it runs
    runner_files: tuple[str, ...] = ()
    artifact_kinds: tuple[str, ...] = ()
    # facts the route's runner reports (its `info` event) that the record keeps in
    # build_flags; anything else the runner says is not stored
    record_keys: tuple[str, ...] = ()
    # the TVM-RPC path for devices reached through a tracker: (device, input, fused) ->
    # what the RPC backend loads; None = the route needs the agent
    rpc_plan: Callable[[Device, PlanInput, bool], Any] | None = None
    # the route honours an ISA cap (`device.isa`, farm/isa.py): its records carry the cap's
    # level; a route that does not (ORT picks its kernels itself) records the device's own
    isa_capped: bool = False

    def fusion_flags(self, fused: bool) -> dict[str, Any]:
        return {self.fusion_flag: self.fusion_values[0 if fused else 1]}

    def is_unfused(self, build_flags: dict[str, Any]) -> bool:
        return build_flags.get(self.fusion_flag, self.fusion_values[0]) == self.fusion_values[1]

    def fused_of(self, build_flags: dict[str, Any]) -> bool | None:
        """True/False when the flags hold this route's fused/unfused value, else None
        (absent, or another setting such as ORT's `basic` level)."""
        value = build_flags.get(self.fusion_flag)
        if value is None or value not in self.fusion_values:
            return None
        return value == self.fusion_values[0]
