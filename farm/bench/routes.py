"""Host-side preparation of one route key for one device: `plan_route(key, device,
prepared) -> RoutePlan`, the artifacts to deploy for the route (beyond the agent, runners,
model and inputs that every bench deploys), the file the runner request names as
`"model"`, route options, and build facts for the record.

What each route builds is its own module in the route registry (`farm.build.routes`);
`<route>-unfused` keys plan the same route with fusion off (see `farm.bench.config`).
A build that cannot be made (e.g. an operator TVM's frontend lacks) raises BuildError; the
bench records the route `unavailable` with that message. Builds are serialised: two devices
of the same target would otherwise compile the same cache entry at once.
"""

from __future__ import annotations

import threading

from farm.bench.config import base_route, is_unfused
from farm.bench.prepare import Prepared
from farm.build.routes import PlanInput, RoutePlan, route
from farm.build.routes.tvm import original_build_s, tvm_facts, weight_bytes
from farm.inventory.device import Device

__all__ = ["BUILD_LOCK", "RoutePlan", "original_build_s", "plan_route", "tvm_facts",
           "weight_bytes"]

BUILD_LOCK = threading.Lock()


def plan_route(route_key: str, device: Device, prepared: Prepared) -> RoutePlan:
    """Plan a route key (`ort`, `tvm-unfused`, …; see `farm.bench.config`)."""
    spec = route(base_route(route_key))
    given = PlanInput(prepared.model.path, prepared.model_artifact, prepared.extra)
    if not spec.serial_build:
        return spec.plan(device, given, not is_unfused(route_key))
    with BUILD_LOCK:
        return spec.plan(device, given, not is_unfused(route_key))
