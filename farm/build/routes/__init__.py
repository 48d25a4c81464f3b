"""The route registry: one host-side description per route (`spec.Route`: name, report
label, what the agent checks and runs, how it plans for a bench and builds for `farm
build`, fusion flag).

Adding a route = one module here (`ROUTE = Route(...)`, listed below), its runner under
agents/runners/ and its op-category table in farm/categories.py (docs/ARCHITECTURE.md
"How to add a route"). Nothing else names routes: the bench, `farm build` and the report
read this table, and the agent learns the routes from `agent_table()`, which deploy ships
as runners/routes.json.
"""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import Any

from farm.build.routes import custom, ort, tvm
from farm.build.routes.spec import BuiltRoute, PlanInput, Progress, Route, RoutePlan
from farm.errors import UsageError
from farm.paths import state_dir

AGENT_TABLE = "routes.json"  # under runners/ on the device

# in report order
ROUTES: dict[str, Route] = {r.name: r for r in (ort.ROUTE, tvm.ROUTE, custom.ROUTE)}


def agent_table() -> dict[str, Any]:
    """What deploy ships as runners/routes.json: the agent offers these routes and no
    other, each after the checks its entry names (see `Route.agent`)."""
    return {"version": 1, "routes": {name: r.agent for name, r in ROUTES.items()}}


def agent_table_file() -> Path:
    """`agent_table()` written under the state dir (rewritten only when it changes, so its
    mtime and the deploy manifest stay put)."""
    path = state_dir() / "routes" / AGENT_TABLE
    text = json.dumps(agent_table(), indent=1, sort_keys=True) + "\n"
    if not path.is_file() or path.read_text() != text:
        path.parent.mkdir(parents=True, exist_ok=True)
        # a temporary name of its own: parallel deploys (one thread per device) and other
        # processes may all write the table at once; each rename is atomic
        fd, tmp = tempfile.mkstemp(prefix=f".{AGENT_TABLE}.", dir=path.parent)
        with os.fdopen(fd, "w") as handle:
            handle.write(text)
        os.replace(tmp, path)
    return path


def route(name: str) -> Route:
    """The registered route `name`; UsageError naming the known ones otherwise."""
    try:
        return ROUTES[name]
    except KeyError:
        raise UsageError(f"unknown route {name!r}",
                         hint=f"use one of {', '.join(ROUTES)}") from None


__all__ = ["AGENT_TABLE", "ROUTES", "BuiltRoute", "PlanInput", "Progress", "Route",
           "RoutePlan", "agent_table", "agent_table_file", "route"]
