"""Which `build_flags` keys are configuration (what was asked for) and which are costs or
facts observed while running; shared by compare (results layer) and the report.

* config flags = `build_flags` minus `is_cost_key` keys: `*_s`, `*_utc`, `*_sha256`,
  `*_hash`, `*_path`, `*_key`, `artifact*`, `*_version`, `*_count(s)`, `*_providers`,
  `*_available`, `*_ops`, `route`, `python`, `nodes`, `runtime`, `target`, `schedules`,
  `build_cached`, `rpc_sessions`, `session_options` (ORT's read-back values), `quantizer`
  (the model file's quantizer options; the variant names the choice), `kernels` (the custom
  executor's kernel table: what its dispatch chose). An ISA cap (`isa`, farm/isa.py) is
  configuration: a capped run is another configuration than the uncapped one.
* `fusion_of(flags)` -> True / False / None (see its docstring).
* `route_key_label(record)` -> the route key a person reads ("ort-unfused"): records keep
  `route` = the base route and name the fusion setting in `build_flags`.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

_COST_SUFFIXES = ("_s", "_utc", "_sha256", "_hash", "_path", "_key")
_FACT_SUFFIXES = ("_version", "_count", "_counts", "_providers", "_available", "_ops")
# facts the routes report about what ran (the runtime used, the resolved target, the
# schedules applied, whether the build came from the cache, each TVM RPC session's times),
# not choices a user made
_FACT_KEYS = {"route", "python", "nodes", "runtime", "target", "schedules", "build_cached",
              "rpc_sessions", "session_options", "quantizer", "kernels"}
_OFF_LEVELS = {"disable", "disable_all", "off", "none", "0"}
_ON_LEVELS = {"all", "enable_all", "99"}
# labels only; the flags keep their names
_ALIASES = {"graph_optimization": "opt", "opt_level": "opt"}


def is_cost_key(key: str) -> bool:
    """True for build_flags keys that are costs, provenance or facts observed while running
    (node counts, versions, which provider ran each node), not configuration."""
    return (key in _FACT_KEYS or key.endswith(_COST_SUFFIXES + _FACT_SUFFIXES)
            or key.startswith("artifact"))


def config_flags(build_flags: Mapping[str, Any] | None) -> dict[str, Any]:
    return {k: v for k, v in sorted((build_flags or {}).items()) if not is_cost_key(k)}


def fusion_of(flags: Mapping[str, Any] | None, route: str | None = None) -> bool | None:
    """Whether a configuration runs with graph fusion: the route's own fusion flag
    (`Route.fusion_flag`, e.g. ORT's `opt_level`) when the route is registered, else a
    plain `fusion` bool, else ORT's `graph_optimization` level of records written before
    routes named their flag; None when the flags do not say."""
    from farm.routes import ROUTES

    flags = flags or {}
    spec = ROUTES.get(route or flags.get("route") or "")
    if spec is not None and spec.fused_of(dict(flags)) is not None:
        return spec.fused_of(dict(flags))
    if isinstance(flags.get("fusion"), bool):
        return bool(flags["fusion"])
    level = flags.get("graph_optimization")
    if isinstance(level, str):
        low = level.strip().lower()
        if low in _OFF_LEVELS:
            return False
        if low in _ON_LEVELS:
            return True
    return None


def fusion_flag_names(route: str | None) -> set[str]:
    """The flag keys that name a configuration's fusion setting (left out of block keys)."""
    from farm.routes import ROUTES

    spec = ROUTES.get(route or "")
    return {"fusion", "graph_optimization", *([spec.fusion_flag] if spec else [])}


def route_key_label(record: Mapping[str, Any]) -> str:
    """The record's route key as `--routes` names it ("ort-unfused"): the record keeps the
    base route and names its fusion setting in `build_flags` (`farm.routes.key_of_record`)."""
    from farm.routes import key_of_record

    route, flags = record.get("route"), record.get("build_flags")
    if not route:
        return ""
    return str(key_of_record({"route": route,
                              "build_flags": flags if isinstance(flags, Mapping) else {}}))


def _flag_text(value: Any) -> str:
    if isinstance(value, bool):
        return "on" if value else "off"
    if isinstance(value, (dict, list)):
        return json.dumps(value, separators=(",", ":"), sort_keys=True)
    return str(value)


def config_label(flags: Mapping[str, Any]) -> str:
    """Short human label of the config flags, fusion first ("fusion=off", "default")."""
    keys = sorted(flags, key=lambda k: (k not in ("fusion", "graph_optimization", "opt_level"), k))
    return ", ".join(f"{_ALIASES.get(k, k)}={_flag_text(flags[k])}" for k in keys) or "default"
