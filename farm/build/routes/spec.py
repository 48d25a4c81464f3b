"""The shape of one route's host-side description (`Route`) and what its functions return.

A route module (`farm/build/routes/<name>.py`) defines `ROUTE = Route(...)`; the registry
(`farm.build.routes.ROUTES`) lists them. `plan` makes what a bench deploys and asks for,
`build` what `farm build` registers; both raise BuildError when the route cannot be built
for the model or device (the bench then records it `unavailable`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from farm.build.registry import Artifact
from farm.inventory.device import Device

Progress = Callable[[str, float], None]


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

    model_path: Path
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
    fusion_flag: str = "fusion"             # build_flags key naming the fusion setting
    fusion_values: tuple[Any, Any] = (True, False)  # its value (fused, unfused)
    serial_build: bool = True               # builds share a cache: one at a time
    # what the agent checks before it offers the route (shipped in runners/routes.json):
    # "runners" (first present wins; a .py runs with the agent's Python, else an
    # executable), "requires" (executables), "modules" (importable in a fresh child),
    # "cpu_features" ({arch: [feature, ...]}); "{arch}" in a path is the device's arch
    agent: dict[str, Any] = field(default_factory=dict)
    # what deploy ships for the route: host files (relative to the repository root) that
    # land in runners/ under their own names, and the build-registry kinds it runs
    runner_files: tuple[str, ...] = ()
    artifact_kinds: tuple[str, ...] = ()

    def fusion_flags(self, fused: bool) -> dict[str, Any]:
        return {self.fusion_flag: self.fusion_values[0 if fused else 1]}

    def is_unfused(self, build_flags: dict[str, Any]) -> bool:
        return build_flags.get(self.fusion_flag, self.fusion_values[0]) == self.fusion_values[1]
