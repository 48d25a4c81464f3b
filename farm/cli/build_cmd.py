"""`farm build` — build route artifacts for a device's target (or a bare triple), cached
by content and registered for `farm deploy`."""

from __future__ import annotations

import argparse
import json

from rich.console import Console
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from farm.cli.isa_opt import add_isa_option, isa_from
from farm.cli.shape_opts import add_shape_options
from farm.errors import EXIT_PARTIAL, UsageError
from farm.inventory import load_inventory
from farm.inventory.capped import cap_all
from farm.libout import capture
from farm.routes import ROUTES, ModelForms, route_keys
from farm.routes.build import BuiltRoute, build_route, device_for_target
from farm.views.steps import timed_step


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("build", help="build TVM libraries, custom plans/executors, models")
    where = p.add_mutually_exclusive_group()
    where.add_argument("--device", metavar="NAME", help="build for this device's target")
    where.add_argument("--target", metavar="TRIPLE", help="build for a bare target triple")
    p.add_argument("--model", default="tiny", help="preset name or .onnx path (default tiny)")
    p.add_argument("--variant", default="fp32", help="fp32 | int8-dynamic | int8-qdq | int4")
    p.add_argument("--routes", default="tvm,custom",
                   help=f"comma list of {','.join(ROUTES)} (default tvm,custom)")
    p.add_argument("--no-fusion", action="store_true",
                   help="TVM without FuseOps/FuseTIR (the fusion experiment's baseline)")
    add_shape_options(p)
    add_isa_option(p)
    p.add_argument("--output", choices=["table", "json"], default="table")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from farm.models import resolve_model

    device = (device_for_target(args.target) if args.target
              else load_inventory(args.inventory).get(args.device or "local"))
    device = cap_all([device], isa_from(args, [device]))[0]
    if not args.routes.strip():
        raise UsageError("--routes is empty", hint="e.g. --routes tvm,custom")
    routes = list(dict.fromkeys(key.route for key in route_keys(args.routes)))
    from farm.models.frontend import canonicalize, make_spec

    model = resolve_model(args.model, args.variant)
    spec = make_spec(args.shapes, args.batch, args.seq)
    # a user's file: each route builds the form it takes (its own file or the front-end's
    # canonical one, with bound shapes); the presets are canonical already
    console = Console(stderr=True)
    # each step's library chatter (the front-end's, TVM's, numpy's) goes to .farm/logs/,
    # named in one line (farm.libout); farm's own lines stay outside the captures
    with capture("front-end") as cap:
        canon = canonicalize(model.path, spec) if model.preset is None else None
    caps = [cap]
    forms = ModelForms(model.path, canon, spec)
    if canon is not None and canon.symbolic_left:
        console.print(f"[yellow]farm: warning: {len(canon.symbolic_left)} tensor(s) keep a "
                      f"symbolic dim after binding {canon.input_shapes} (e.g. "
                      f"{canon.symbolic_left[0]}): TVM falls back to slow generic schedules; "
                      "bind them with --shape[/]")
    results: list[BuiltRoute] = []
    with Progress(TextColumn("{task.description:<8}"), BarColumn(),
                  TextColumn("{task.fields[stage]}"), TimeElapsedColumn(), console=console,
                  disable=not console.is_terminal, redirect_stdout=False,
                  redirect_stderr=False) as bar:
        for route in routes:
            task = bar.add_task(route, total=1.0, stage="")
            path = ROUTES[route].model_input(forms)
            with timed_step(console, f"farm: build {route} for {device.name}"), \
                    capture(f"build {route}", where=device.name) as cap:
                results.append(build_route(
                    ROUTES[route], path, device, fusion=not args.no_fusion,
                    progress=lambda stage, frac, t=task: bar.update(t, completed=frac,
                                                                    stage=stage)))
            caps.append(cap)
            bar.update(task, completed=1.0)
            # the level the build is for (ORT builds nothing that a cap could change)
            results[-1].facts["isa"] = (device.isa_level if ROUTES[route].isa_capped
                                        else device.level)
            if canon is not None and path != model.path:
                results[-1].facts.update(canon.flags())
    for cap in caps:
        if cap.summary():
            console.print(f"farm: {cap.summary()}", markup=False, highlight=False,
                          soft_wrap=True)
    if args.output == "json":
        print(json.dumps([vars(r) for r in results], indent=2, default=str))
    else:
        table = Table(title=f"build for {device.name} ({device.triple}, ISA level "
                            f"{device.isa_level}{'' if device.isa else ', uncapped'}) — "
                            f"{model.name}")
        for column in ("route", "result", "seconds", "detail"):
            table.add_column(column)
        for r in results:
            table.add_row(r.route, "ok" if r.ok else "FAILED", f"{r.seconds:.1f}", r.detail)
        Console().print(table)
    return 0 if all(r.ok for r in results) else EXIT_PARTIAL
