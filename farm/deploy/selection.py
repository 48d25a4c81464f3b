"""What a device must receive for a set of routes and models: the one selection function.

`ship_list(device, routes, builds, extra)` is the deploy list: the agent, the runner files
of the selected routes only, the builds of those routes (an ONNX model is an `ort` build:
TVM and the custom executor run their own compiled files), then `extra` (a bench's inputs).
`farm deploy` feeds it the build registry filtered by model (`registered_builds`); a bench
feeds it its route plans (`farm.bench.prepare.device_bundle`). Both ship nothing else.

Which route a file belongs to comes from the route registry (`Route.runner_files`,
`Route.artifact_kinds`); a `runner` build is routed by its directory (runners/tvm-<arch>/,
runners/custom-<arch>/). Every device also gets runners/routes.json, the registry's table.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from pathlib import Path

from farm.artifacts import Artifact, for_target, make_artifact
from farm.deploy.bundle import agent_artifact
from farm.devices.agent_program import AGENT_FILE
from farm.inventory.device import Device
from farm.paths import REPO_ROOT, agents_dir
from farm.routes import ROUTES as REGISTRY
from farm.routes import agent_table_file

# the route registry names the routes, their runner files and their build kinds
ROUTES = tuple(REGISTRY)
_KIND_ROUTE = {kind: name for name, r in REGISTRY.items() for kind in r.artifact_kinds}


def _runner_sources() -> dict[str, list[Path]]:
    """Host files of each route's runner, shipped to runners/ under their own names."""
    return {name: [REPO_ROOT / f for f in r.runner_files] for name, r in REGISTRY.items()}


def route_of(artifact: Artifact) -> str | None:
    """The route a build belongs to; None for files every route uses (inputs, agent)."""
    if artifact.kind == "runner":
        top = artifact.remote.split("/")[1] if artifact.remote.count("/") >= 2 else ""
        return next((r for r in ROUTES if top.startswith(f"{r}-")), None)
    return _KIND_ROUTE.get(artifact.kind)


def runner_files(routes: Iterable[str]) -> list[Artifact]:
    sources = _runner_sources()
    items: list[Artifact] = []
    for route in routes:
        items += [make_artifact("runner", f, "runners", content_name=False)
                  for f in sources.get(route, []) if f.is_file()]
    return items


def registered_builds(device: Device, model_shas: Iterable[str] | None,
                      routes: Sequence[str]) -> list[Artifact]:
    """Registered builds for the device's arch, of these routes, built from these models
    (None: from any model, `--all-builds`); model-independent builds (runtimes, executors)
    come with their route."""
    shas = None if model_shas is None else set(model_shas)
    return [a for a in for_target(device.arch)
            if route_of(a) in routes and (shas is None or a.source in ("", *shas))]


def ship_list(device: Device, routes: Iterable[str], builds: Iterable[Artifact] = (),
              extra: Iterable[Artifact] = ()) -> list[Artifact]:
    """Everything `device` receives, in upload order (agent first), each remote path once.
    `builds` of routes not selected are left out."""
    wanted = list(dict.fromkeys(routes))
    items: list[Artifact] = []
    if (agents_dir() / AGENT_FILE).is_file():
        items.append(agent_artifact())
    # runners/routes.json: the registry's table, from which the agent learns its routes
    items.append(make_artifact("runner", agent_table_file(), "runners", content_name=False))
    items += runner_files(wanted)
    items += [b for b in builds if route_of(b) in (None, *wanted)]
    items += list(extra)
    seen: set[str] = set()
    unique = []
    for item in items:
        if item.remote not in seen:
            seen.add(item.remote)
            unique.append(item)
    return unique


def bundle_for(device: Device, extra: list[Path] | None = None, *,
               registered: bool = True, model_sha: str | None = None) -> list[Artifact]:
    """Every route's runners plus registered builds (`farm deploy --all-builds`), in
    upload order (agent first); see `farm.deploy.selection.ship_list` for the selection.

    `registered=False` leaves out the build registry; `model_sha` keeps only what was
    built from that model."""
    builds = (registered_builds(device, None if model_sha is None else [model_sha], ROUTES)
              if registered else [])
    return ship_list(device, ROUTES, builds,
                     [make_artifact("file", p, "artifacts") for p in (extra or [])])
