"""Host-side preparation of one route key for one device: `plan_route(key, device,
prepared) -> RoutePlan`, the artifacts to deploy for the route (beyond the agent, runners,
model and inputs that every bench deploys), the file the runner request names as
`"model"`, route options, and build facts for the record.

What each route builds, and from which form of the model (`Route.model_input`: the user's
own file, or the front-end's canonical one), is the route's own (`farm.routes`); an
unfused key plans the same route with fusion off. A build that cannot be made (e.g. an
operator TVM's frontend lacks) raises BuildError; the bench records the route
`unavailable` with that message. Builds of routes that share a cache are serialised: two
devices of the same target would otherwise compile the same cache entry at once.
"""

from __future__ import annotations

import threading
from typing import Any

from farm.bench.model_front import spec_of
from farm.bench.prepare import Prepared
from farm.inventory.device import Device
from farm.routes import ModelForms, PlanInput, Route, RouteKey, RoutePlan, route
from farm.routes.spec import source_file

BUILD_LOCK = threading.Lock()


def model_forms(prepared: Prepared) -> ModelForms:
    return ModelForms(prepared.model.path, prepared.extra.get("canonical"),
                      spec_of(prepared.config))


def plan_input(spec: Route, prepared: Prepared) -> PlanInput:
    return PlanInput(spec.model_input(model_forms(prepared)), prepared.model_artifact,
                     prepared.extra)


def front_flags(prepared: Prepared, spec: Route) -> dict[str, Any]:
    """The front-end's facts for the record (bound shapes, symbolic dims left)."""
    canonical = prepared.extra.get("canonical")
    if canonical is None:
        return {}
    flags = canonical.flags()
    if spec.model_input is source_file:
        flags.pop("symbolic_dims", None)  # the route runs the source file at run-time shapes
    return flags


def isa_flags(device: Device, spec: Route) -> dict[str, Any]:
    """A capped route's level as a config flag (`isa`): capped and uncapped runs are two
    configurations to the report, compare and the gate. Uncapped records carry no flag, so
    their configurations read as they always did (the record's `isa` field has the level)."""
    return {"isa": device.isa} if spec.isa_capped and device.isa else {}


def plan_route(key: RouteKey, device: Device, prepared: Prepared) -> RoutePlan:
    """Plan a route key for the agent path."""
    spec = route(key.route)
    given = plan_input(spec, prepared)
    if spec.serial_build:
        with BUILD_LOCK:
            plan = spec.plan(device, given, key.fused)
    else:
        plan = spec.plan(device, given, key.fused)
    plan.build_flags.update(front_flags(prepared, spec), **isa_flags(device, spec))
    return plan


def plan_rpc(key: RouteKey, device: Device, prepared: Prepared) -> RoutePlan:
    """Plan a route key for a device behind a TVM tracker (`Route.rpc_plan`)."""
    spec = route(key.route)
    if spec.rpc_plan is None:
        raise ValueError(f"route {key.route} has no RPC plan")  # callers check rpc_routes()
    with BUILD_LOCK:  # the agent path's lock: same-target devices share cache entries
        plan = spec.rpc_plan(device, plan_input(spec, prepared), key.fused)
    plan.build_flags.update(front_flags(prepared, spec), **isa_flags(device, spec))
    return plan


def rpc_routes() -> tuple[str, ...]:
    """The routes a device behind a TVM tracker can run (those with an RPC plan)."""
    from farm.routes import ROUTES

    return tuple(name for name, spec in ROUTES.items() if spec.rpc_plan is not None)
