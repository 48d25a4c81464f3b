"""The route registry: one host-side description per route (`spec.Route`: name, report
label, which model form it builds from, how it plans for a bench, builds for `farm build`
and checks for `farm models check`, what the agent checks and runs, which runner facts its
records keep, fusion flag, and its TVM-RPC plan where it has one).

A route is one package, `farm/routes/<name>/`, whose `route.py` defines `ROUTE`. The built-in
routes are listed below; a route from another package registers itself in one place, an
entry point in the group `farm.routes` (`name = "package.module:ROUTE"`), and nothing in
farm/ names it: the bench, deploy's selection, `farm build`, `farm models check`, the
report's order, completion and the agent's offer (deploy ships `agent_table()` as
runners/routes.json) all read `ROUTES` (docs/ARCHITECTURE.md "How to add a route").
"""

from __future__ import annotations

import importlib.metadata
import json
import os
import tempfile
from pathlib import Path
from typing import Any

from farm.errors import ConfigError, UsageError
from farm.paths import state_dir
from farm.routes.custom.route import ROUTE as CUSTOM
from farm.routes.ort.route import ROUTE as ORT
from farm.routes.spec import (
    BuiltRoute,
    ModelForms,
    PlanInput,
    Progress,
    Route,
    RouteKey,
    RoutePlan,
    parse_keys,
)
from farm.routes.tvm.route import ROUTE as TVM

AGENT_TABLE = "routes.json"  # under runners/ on the device
ENTRY_POINT_GROUP = "farm.routes"


def _plugged_in() -> list[Route]:
    """Routes other packages register under the `farm.routes` entry point group."""
    found = []
    for entry in importlib.metadata.entry_points(group=ENTRY_POINT_GROUP):
        try:
            spec = entry.load()
        except Exception as exc:  # a broken plugin must name itself, not crash farm
            raise ConfigError(f"route plugin {entry.name!r} ({entry.value}) failed to load: "
                              f"{type(exc).__name__}: {exc}",
                              hint="fix or uninstall the package that registers it") from exc
        if not isinstance(spec, Route) or spec.name != entry.name:
            raise ConfigError(f"route plugin {entry.name!r} ({entry.value}) is not a "
                              f"Route named {entry.name!r}",
                              hint="its entry point must name a farm.routes.spec.Route")
        found.append(spec)
    return found


def _registry() -> dict[str, Route]:
    routes: dict[str, Route] = {}
    for spec in (ORT, TVM, CUSTOM, *_plugged_in()):  # in report order
        if spec.name in routes:
            raise ConfigError(f"two routes are named {spec.name!r}",
                              hint="rename the plugin's route")
        routes[spec.name] = spec
    return routes


ROUTES: dict[str, Route] = _registry()


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


def route_keys(text: str) -> list[RouteKey]:
    """`--routes ort,tvm-unfused` -> keys (unknown names are a UsageError)."""
    return parse_keys(text, tuple(ROUTES))


def key_of_record(record: dict[str, Any]) -> RouteKey:
    """The key a stored record was measured under (inverse of `Route.fusion_flags`); a
    record of a route not registered here is fused unless it says `fusion: false`."""
    flags = record.get("build_flags") or {}
    spec = ROUTES.get(record["route"])
    off = spec.is_unfused(flags) if spec else flags.get("fusion") is False
    return RouteKey(record["route"], not off)


def all_keys() -> list[RouteKey]:
    """Every key: each route fused and unfused (completion, `--routes` help)."""
    return [RouteKey(name, fused) for fused in (True, False) for name in ROUTES]


__all__ = ["AGENT_TABLE", "ROUTES", "BuiltRoute", "ModelForms", "PlanInput", "Progress",
           "Route", "RouteKey", "RoutePlan", "agent_table", "agent_table_file", "all_keys",
           "key_of_record", "route", "route_keys"]
