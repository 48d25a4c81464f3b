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
from farm.bench.model_front import build_path, front_flags
from farm.bench.prepare import Prepared
from farm.build.routes import PlanInput, RoutePlan, route
from farm.build.routes.tvm import original_build_s, tvm_facts
from farm.inventory.device import Device

__all__ = ["BUILD_LOCK", "RoutePlan", "original_build_s", "plan_route", "tvm_facts"]

BUILD_LOCK = threading.Lock()


def plan_route(route_key: str, device: Device, prepared: Prepared) -> RoutePlan:
    """Plan a route key (`ort`, `tvm-unfused`, …; see `farm.bench.config`)."""
    name = base_route(route_key)
    spec = route(name)
    # TVM and custom build the front-end's canonical file of a user's model (ORT runs the
    # user's own file); the presets are canonical already
    given = PlanInput(build_path(prepared, name), prepared.model_artifact, prepared.extra)
    if spec.serial_build:
        with BUILD_LOCK:
            plan = spec.plan(device, given, not is_unfused(route_key))
    else:
        plan = spec.plan(device, given, not is_unfused(route_key))
    plan.build_flags.update(front_flags(prepared, name))  # bound shapes, symbolic dims
    return plan
