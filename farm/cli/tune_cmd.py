"""`farm tune --device NAME --model M --trials N [--time-budget S]` — MetaSchedule tuning.

Measures on this machine for `local`, through the TVM RPC tracker (device `key`) otherwise.
The database is keyed by model and target and `farm build` applies it; re-running adds
trials on top of the stored ones. Budgets are explicit: ~1 minute per 16 candidates here.
"""

from __future__ import annotations

import argparse
import json

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from farm.cli.shape_opts import add_shape_options
from farm.inventory import load_inventory
from farm.models import VARIANTS
from farm.routes.tvm.tune import DEFAULT_OPS, tune_tvm
from farm.views.steps import timed_step


def register(sub: argparse._SubParsersAction) -> None:
    parser = sub.add_parser("tune", help="tune the TVM route's kernels for a device (MetaSchedule)")
    parser.add_argument("--device", required=True, metavar="NAME")
    parser.add_argument("--model", required=True, metavar="PRESET|FILE.onnx")
    parser.add_argument("--variant", default="fp32", choices=list(VARIANTS))
    parser.add_argument("--trials", type=int, required=True,
                        help="candidates to measure in this run (~1 min per 16 here)")
    parser.add_argument("--time-budget", type=float, metavar="S",
                        help="stop after S seconds (may overshoot by one batch of 16)")
    parser.add_argument("--ops", default=",".join(DEFAULT_OPS),
                        help="only kernels whose name contains one of these (comma list; "
                             "'all' for every kernel; default: %(default)s)")
    add_shape_options(parser)
    parser.add_argument("--output", choices=["text", "json"], default="text")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    device = load_inventory(args.inventory).get(args.device)
    from farm.models import resolve_model
    from farm.models.frontend import canonicalize, make_spec

    model = resolve_model(args.model, args.variant)
    # tune what `farm build`/bench compile: the canonical file of a user's model
    path = (canonicalize(model.path, make_spec(args.shapes, args.batch, args.seq)).path
            if model.preset is None else model.path)
    ops = None if args.ops == "all" else tuple(o for o in args.ops.split(",") if o)
    err = Console(stderr=True)
    with Progress(TextColumn(f"tuning {model.name} for {device.name}"), BarColumn(),
                  MofNCompleteColumn(), TimeElapsedColumn(),
                  disable=not err.is_terminal or args.output == "json",
                  console=err) as bar, \
            timed_step(err, f"farm: tune {model.name} for {device.name}"):
        task = bar.add_task("tune", total=args.trials)
        result = tune_tvm(path, device, trials=args.trials,
                          time_budget_s=args.time_budget, ops=ops,
                          progress=lambda done, total: bar.update(task, completed=done,
                                                                  total=max(total, done)))
    summary = {"device": device.name, "model": str(model.path), "database": str(result.database),
               "measured": result.measured, "seconds": round(result.seconds, 1),
               "total_trials": result.total_trials,
               "total_seconds": round(result.total_seconds, 1), "tasks": list(result.tasks)}
    if args.output == "json":
        print(json.dumps(summary, indent=2))
    else:
        print(f"measured {result.measured} candidates in {result.seconds:.0f} s "
              f"({result.total_trials} in {result.total_seconds:.0f} s on this database)\n"
              f"database: {result.database}\n"
              f"`farm build` applies it for this model and target")
    return 0
