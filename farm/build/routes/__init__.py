"""The route registry: one host-side description per route (`spec.Route`: name, report
label, runner, how it plans for a bench and builds for `farm build`, fusion flag).

Adding a route = one module here (`ROUTE = Route(...)`, listed below), its runner under
agents/runners/, its op-category table in farm/categories.py and its entry in the agent's
capability probe (docs/ARCHITECTURE.md "How to add a route"). Nothing else names routes:
the bench, `farm build` and the report read this table.
"""

from __future__ import annotations

from farm.build.routes import custom, ort, tvm
from farm.build.routes.spec import BuiltRoute, PlanInput, Progress, Route, RoutePlan
from farm.errors import UsageError

# in report order
ROUTES: dict[str, Route] = {r.name: r for r in (ort.ROUTE, tvm.ROUTE, custom.ROUTE)}


def route(name: str) -> Route:
    """The registered route `name`; UsageError naming the known ones otherwise."""
    try:
        return ROUTES[name]
    except KeyError:
        raise UsageError(f"unknown route {name!r}",
                         hint=f"use one of {', '.join(ROUTES)}") from None


__all__ = ["ROUTES", "BuiltRoute", "PlanInput", "Progress", "Route", "RoutePlan", "route"]
