"""`farm deploy`'s selection: which routes, and builds of which models, each device gets.

`choose(models, variant, routes, devices, all_builds=..., explicit=...)` resolves model specs
to their sha256 (as `farm build` names them) and checks that something is built from each
for every device; `DeployChoice.bundle(device)` is then `ship_list` over the registered
builds of those routes and models. `--all-builds` keeps the old behaviour (every route,
every registered build for the device's arch).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from farm.artifacts import Artifact
from farm.deploy.selection import ROUTES, registered_builds, route_of, ship_list
from farm.errors import UsageError
from farm.inventory.device import Device
from farm.routes import route_keys


@dataclass(frozen=True)
class DeployChoice:
    routes: tuple[str, ...]
    model_shas: tuple[str, ...] | None  # None: builds of every model
    notes: tuple[str, ...] = ()

    def bundle(self, device: Device) -> list[Artifact]:
        return ship_list(device, self.routes,
                         registered_builds(device, self.model_shas, self.routes))


def parse_routes(text: str | None) -> tuple[str, ...]:
    """`ort,tvm-unfused` -> ("ort", "tvm"): a route key ships its base route's files."""
    if not text:
        return ROUTES
    return tuple(dict.fromkeys(key.route for key in route_keys(text)))


def choose(models: Sequence[str], variant: str, routes: tuple[str, ...],
           devices: Sequence[Device], *, all_builds: bool = False,
           explicit: bool = True) -> DeployChoice:
    """Resolve the selection; with `explicit` (the user named the models) a model with
    nothing built for a device is an error naming the `farm build` to run, otherwise a note."""
    if all_builds:
        return DeployChoice(ROUTES, None)
    from farm.models import resolve_model

    shas: list[str] = []
    notes: list[str] = []
    for spec in models:
        model = resolve_model(spec, variant)
        shas.append(model.sha256)
        missing = [d.name for d in devices
                   if not any(a.source == model.sha256 and route_of(a) in routes
                              for a in registered_builds(d, [model.sha256], routes))]
        if not missing:
            continue
        build = (f"farm build --model {spec} --variant {variant} --device {missing[0]} "
                 f"--routes {','.join(routes)}")
        if explicit:
            raise UsageError(f"nothing is built from model {model.name} for "
                             f"{', '.join(missing)}",
                             hint=f"run `{build}` first (or deploy without --model)")
        notes.append(f"nothing is built from model {model.name} for {', '.join(missing)}: "
                     f"shipping the agent and runners only (`{build}` builds it)")
    return DeployChoice(routes, tuple(shas), tuple(notes))
