"""`farm triangle --device NAME [--device ...] --model M` — measure every route, then report.

One command for the question farm exists to answer: builds the model (if needed), deploys,
runs every route the devices can run (ORT, TVM, custom) interleaved in seeded rounds
(`--rounds`, default 6: the fusion and route-vs-route verdicts are paired by round),
records the runs in the store, and renders the triangle report of that run
(`farm report RUN` renders it again later). Routes a device cannot run are recorded as
unavailable with the agent's reason, so the report says why not.

Orchestration is `farm.bench.runner.Bench` and the driver `farm.cli.drive` (the same as
`farm bench`); the progress goes to stderr (the live view on a terminal, one short line per
step otherwise), stdout carries the report (table, md, csv or json); `--events FILE` keeps
every bench event as JSON lines.
Exit codes: those of the bench (0 ok, 3 a device or route failed, 130 interrupted).
"""

from __future__ import annotations

import argparse
import sys

from rich.console import Console

from farm import followup
from farm.bench.config import BenchConfig
from farm.bench.runner import Bench
from farm.cli.bench_cmd import (
    add_policy_options,
    add_rounds_option,
    add_session_options,
    add_target_options,
    policy_from,
    session_kwargs,
)
from farm.cli.drive import add_events_option, drive, report_kept
from farm.cli.isa_opt import isa_from
from farm.cli.report_cmd import add_report_options, render
from farm.cli.shape_opts import shape_kwargs
from farm.errors import EXIT_INTERRUPTED, UsageError
from farm.inventory import load_inventory
from farm.results.open_store import open_store
from farm.routes import all_keys


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("triangle", help="run every route on devices and report which wins")
    add_target_options(p)
    p.add_argument("--routes", default=",".join(str(k) for k in all_keys()),
                   help="comma list (default: every route, fused and unfused)")
    p.add_argument("--threads", type=int, default=1, help="intra-op threads (default 1)")
    add_rounds_option(p)
    add_policy_options(p)
    add_session_options(p)
    add_report_options(p)
    add_events_option(p)
    p.set_defaults(func=run)


def config_from(args: argparse.Namespace, isa: str | None = None) -> BenchConfig:
    routes = tuple(r.strip() for r in args.routes.split(",") if r.strip())
    if args.profile_runs < 1:
        raise UsageError("--profile-runs must be >= 1: the per-op table needs a profile")
    policy = policy_from(args)
    return BenchConfig(model=args.model, variant=args.variant, routes=routes,
                       threads=args.threads, policy=policy, pause_s=args.pause,
                       seed=args.seed, repeats=args.repeats, profile_runs=args.profile_runs,
                       isa=isa, **session_kwargs(args), **shape_kwargs(args))


def run(args: argparse.Namespace) -> int:
    devices = load_inventory(args.inventory).select(args.devices, args.all)
    config = config_from(args, isa_from(args, devices))
    # in a log a message must stay one line whatever its length (no wrap at 80 columns)
    err = Console(stderr=True, highlight=False, soft_wrap=not sys.stderr.isatty())
    with open_store(args.store) as store:
        bench = Bench(devices, config, store, ["farm", *sys.argv[1:]])
        # stdout holds the report; the progress is for a human watching stderr
        result = drive(bench, err, args.events)
        for line in result.failures():
            err.print(f"farm: {line}", markup=False, highlight=False)
        report_kept(result, err, sys.stderr)  # stdout is the report
        if result.run_id and result.records:
            render(store, [result.run_id], args.output, args.html,
                   full=args.columns == "all")
            err.print(f"farm: triangle run {result.run_id} {result.status}; "
                      f"`{followup.command('report', result.run_id)}` shows it again", markup=False,
                      highlight=False)
    return EXIT_INTERRUPTED if result.status == "interrupted" else result.exit_code
