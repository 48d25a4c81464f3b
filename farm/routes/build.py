"""`farm build`'s work: build each route's artifacts for one target and register them,
so `farm deploy` pushes them. The bench builds the same things itself through the same
functions (`farm.routes.tvm.builder.build_tvm`, `farm.routes.custom.compile`), cached by
content, so a `farm build` before a bench makes the bench's build step a cache hit.
"""

from __future__ import annotations

import time
from dataclasses import replace
from typing import Any

from farm.errors import BuildError, UsageError
from farm.inventory.builtin import local_device
from farm.inventory.device import Device
from farm.routes.spec import BuiltRoute, Progress, Route

# features assumed for a bare `--target TRIPLE` (no inventory device to read them from)
_BASE_FEATURES = {"aarch64": ("neon",), "x86_64": ("avx2", "fma")}

__all__ = ["BuiltRoute", "build_route", "device_for_target"]


def device_for_target(triple: str) -> Device:
    """A build-only device for `--target TRIPLE` (the host itself when the arch matches)."""
    arch = triple.split("-", 1)[0]
    if arch not in _BASE_FEATURES:
        raise UsageError(f"unsupported target triple {triple!r}",
                         hint="use aarch64-linux-gnu, aarch64-linux-android or x86_64-linux-gnu")
    host = local_device()
    if arch == host.arch:
        return replace(host, name=f"target:{triple}", triple=triple)
    # the host's cap ($FARM_ISA) is a level of the host's arch: not this target's
    return replace(host, name=f"target:{triple}", transport="ssh", arch=arch, triple=triple,
                   features=_BASE_FEATURES[arch], host="build-only", isa=None)


def build_route(spec: Route, model_path: Any, device: Device, *, fusion: bool = True,
                progress: Progress | None = None) -> BuiltRoute:
    """Build one route for one device; a BuildError becomes a failed BuiltRoute."""
    started = time.perf_counter()
    report = progress or (lambda _stage, _fraction: None)
    route = spec.name
    try:
        detail, artifacts, facts = spec.build(model_path, device, fusion, report)
        return BuiltRoute(route, True, detail, time.perf_counter() - started, artifacts,
                          facts)
    except BuildError as exc:
        return BuiltRoute(route, False, str(exc), time.perf_counter() - started)
