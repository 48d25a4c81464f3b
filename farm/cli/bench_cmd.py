"""`farm bench` — measure a model on devices, live, and keep every result.

Without `--routes` every route the device offers for the model is measured (the fused keys
of the registry); a route it cannot run or build is recorded `unavailable` and reported as
skipped, with the reason.

Devices run in parallel; the live view (stdout on a terminal) shows each one; without a
terminal (a log, CI) one short line per step prints instead, then the table. `--events FILE`
('-': stdout) keeps every event as JSON lines. With `--output json|jsonl|csv|md` stdout holds
only the final records (md/csv: the summary, `--columns all` for every field); progress
goes to stderr. Exit codes:
0 all ok, 3 a device or route failed (the rest is kept), 130 Ctrl-C (measured results
kept, no agent left running), 1 error before anything was measured (also: every device
busy past --lock-wait; such a refusal stores no run). When the host's disk fills up
mid-run, records go to a spill file beside the store, or are printed as JSON lines, so
nothing measured is lost (`farm.cli.drive.report_kept`).
"""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING

from rich.console import Console
from rich.text import Text

from farm import followup
from farm.bench.config import (
    DEFAULT_ROUNDS,
    ROUND_MIN_TIME_S,
    TOTAL_MIN_RUNS,
    TOTAL_MIN_TIME_S,
    BenchConfig,
    Policy,
)
from farm.cli.drive import add_events_option, drive, report_kept
from farm.cli.isa_opt import add_isa_option, isa_from
from farm.cli.results_cmd import add_columns_option, store_arg
from farm.cli.shape_opts import add_shape_options, shape_kwargs
from farm.cli.term import stdout_console
from farm.errors import EXIT_INTERRUPTED, UsageError
from farm.inventory import load_inventory
from farm.routes import ROUTES, all_keys

if TYPE_CHECKING:
    from farm.bench.runner import BenchResult
    from farm.results.backend import Store

OUTPUTS = ["table", "json", "jsonl", "csv", "md"]


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("bench", help="benchmark a model on devices (live view)")
    add_target_options(p)
    p.add_argument("--routes", default=None,
                   help="comma list of " + ",".join(str(k) for k in all_keys())
                        + " (default: every route the device offers for the model, fused: "
                        + ",".join(ROUTES) + "; those it cannot run are skipped and named)")
    p.add_argument("--threads", type=int, default=1, help="intra-op threads (default 1)")
    add_rounds_option(p)
    add_policy_options(p)
    add_session_options(p)
    p.add_argument("--resume", metavar="RUN",
                   help="continue run RUN (id, prefix or 'latest') with its own settings: "
                        "routes it kept are skipped, failed ones run again")
    p.add_argument("--output", choices=OUTPUTS, default="table",
                   help="table (default), md/csv (the summary), json/jsonl (whole records)")
    add_columns_option(p)
    add_events_option(p)
    p.add_argument("--store", metavar="FILE|URL", type=store_arg,
                   help="result store: a SQLite file or a postgresql:// URL (default: "
                        "$FARM_STORE, else .farm/results.sqlite, or $FARM_HOME)")
    p.set_defaults(func=run)


def add_target_options(p: argparse.ArgumentParser) -> None:
    """Which devices and which model (shared with `triangle`)."""
    p.add_argument("--device", action="append", dest="devices", metavar="NAME",
                   help="device (repeatable; default: local)")
    p.add_argument("--all", action="store_true", help="every device of the inventory")
    p.add_argument("--model", default="tiny", help="preset name or .onnx path (default tiny)")
    p.add_argument("--variant", default="fp32", help="fp32 | int8-dynamic | int8-qdq | int4")
    add_shape_options(p, reference=True)
    add_isa_option(p)


def add_session_options(p: argparse.ArgumentParser) -> None:
    """Timeouts and the device lock (shared with `triangle`)."""
    p.add_argument("--route-timeout", type=float, default=None,
                   help="kill a route after this many seconds (default from --max-time)")
    p.add_argument("--lock-wait", type=float, default=0.0,
                   help="wait this long for a device another bench holds (default: fail)")
    p.add_argument("--link-timeout", type=float, default=30.0,
                   help="declare a silent device lost after this many seconds (default 30)")


def session_kwargs(args: argparse.Namespace) -> dict[str, float | None]:
    """BenchConfig's fields from `add_session_options`."""
    return {"route_timeout_s": args.route_timeout, "lock_wait_s": args.lock_wait,
            "link_timeout_s": args.link_timeout}


def add_rounds_option(p: argparse.ArgumentParser) -> None:
    """Rounds: the replicates every verdict is judged on (shared with `triangle`)."""
    p.add_argument("--rounds", "--repeats", dest="repeats", metavar="N", type=int,
                   default=DEFAULT_ROUNDS,
                   help="interleaved rounds of all routes, each a fresh runner process: the "
                        f"unit verdicts are judged on (default {DEFAULT_ROUNDS}, the fewest "
                        "a paired test can judge at alpha 0.05)")


def add_policy_options(p: argparse.ArgumentParser) -> None:
    """How to measure one round: the stopping rules, order and profiling (shared with
    `triangle`). --runs, --min-time and --warmup-time default to a share of the key's
    measuring time (`Policy.for_rounds`)."""
    d = Policy()
    p.add_argument("--runs", type=int, default=None,
                   help=f"minimum measured runs per round (default max(10, "
                        f"{TOTAL_MIN_RUNS} / rounds))")
    p.add_argument("--min-time", type=float, default=None,
                   help=f"minimum seconds per round (default max({ROUND_MIN_TIME_S}, "
                        f"{TOTAL_MIN_TIME_S} / rounds))")
    p.add_argument("--max-time", type=float, default=d.max_time_s,
                   help="maximum seconds per round")
    p.add_argument("--warmup", type=int, default=d.warmup_runs, help="warm-up runs")
    p.add_argument("--warmup-time", type=float, default=None,
                   help="minimum warm-up seconds per round (default 0.25 with several "
                        f"rounds, else {d.warmup_min_s})")
    p.add_argument("--pause", type=float, default=1.0, help="seconds between routes")
    p.add_argument("--seed", type=int, default=0, help="route order and bootstrap seed")
    p.add_argument("--profile-runs", type=int, default=5,
                   help="per-op profiling runs (each op keeps its median over them)")


def policy_from(args: argparse.Namespace) -> Policy:
    if args.repeats < 1:
        raise UsageError("--rounds must be >= 1")
    return Policy.for_rounds(args.repeats, warmup_runs=args.warmup,
                             warmup_min_s=args.warmup_time, min_runs=args.runs,
                             min_time_s=args.min_time, max_time_s=args.max_time)


def config_from(args: argparse.Namespace, isa: str | None = None) -> BenchConfig:
    policy = policy_from(args)
    # no --routes: () is BenchConfig's "every route" (routes_default)
    routes = tuple(r.strip() for r in (args.routes or "").split(",") if r.strip())
    if args.routes is not None and not routes:
        raise UsageError("--routes is empty", hint="name routes, or leave --routes out for "
                                                   "every route")
    return BenchConfig(model=args.model, variant=args.variant, routes=routes,
                       threads=args.threads, policy=policy, pause_s=args.pause,
                       seed=args.seed, repeats=args.repeats, profile_runs=args.profile_runs,
                       isa=isa, **session_kwargs(args), **shape_kwargs(args))


def run(args: argparse.Namespace) -> int:
    # heavy imports (onnx, onnxruntime, numpy) only when a bench really runs: `farm --help`
    # imports every subcommand module
    from farm.bench.runner import Bench, resume_plan
    from farm.results.open_store import open_store
    from farm.results.printers import columns_for

    try:  # a typo in --columns must not cost a whole bench
        columns_for(args.output, args.columns)
    except ValueError as exc:
        raise UsageError(str(exc)) from exc
    inventory = load_inventory(args.inventory)
    resume = None
    if args.resume:
        with open_store(args.store) as store:
            resume, config, names = resume_plan(store, args.resume)
        devices = [inventory.get(name) for name in names]
    else:
        devices = inventory.select(args.devices, args.all)
        config = config_from(args, isa_from(args, devices))
    names = [d.name for d in devices]
    twice = sorted({n for n in names if names.count(n) > 1})
    if twice:
        raise UsageError(f"device {', '.join(twice)} listed twice; each device runs once")
    out = stdout_console()
    # in a log a message must stay one line whatever its length (no wrap at 80 columns)
    err = Console(stderr=True, highlight=False, soft_wrap=not sys.stderr.isatty())
    # the progress goes where a human looks; machine output and `--events -` keep stdout clean
    machine = args.output != "table" or args.events == "-"
    with open_store(args.store) as store:
        bench = Bench(devices, config, store, ["farm", *sys.argv[1:]], resume_run=resume)
        result = drive(bench, err if machine else out, args.events)
        report(result, args.output, args.columns, out, err, store, config.routes_default)
    return EXIT_INTERRUPTED if result.status == "interrupted" else result.exit_code


def report(result: BenchResult, output: str, columns: str | None, out: Console,
           err: Console, store: Store, default_routes: bool = False) -> None:
    from farm.results.noise import noise_warnings
    from farm.results.printers import columns_for, format_records, render_results

    if result.refused:
        for line in result.failures():
            err.print(Text(f"farm: {line}", style="red"))
        why = ("stopped while waiting for a busy device" if result.status == "interrupted"
               else "every device was busy (see above)")
        err.print(f"farm: no run stored: {why}; nothing was measured",
                  markup=False, highlight=False)
        return
    if not result.run_id:
        return
    try:
        keys = columns_for(output, columns)
    except ValueError as exc:  # checked before the bench too: this is a last resort
        raise UsageError(str(exc)) from exc
    if output == "table":
        full = bool(columns)  # columns named on the command line are all drawn
        out.print(render_results(result.records, keys, title=f"run {result.run_id}",
                                 full=full), crop=not full)
    else:
        sys.stdout.write(format_records(result.records, output, keys))
        sys.stdout.flush()
    for line in result.failures():
        err.print(Text(f"farm: {line}", style="red"))
    bad = [r for r in result.records if r["status"] not in ("ok",)]
    for r in bad:
        what = f"{r['status']}: {r['status_detail']}"
        if default_routes and r["status"] == "unavailable":
            what = f"skipped (not named by --routes): {r['status_detail']}"
        err.print(f"farm: {r['device']}/{r['route']}: {what}", markup=False, highlight=False)
    for r in result.records:
        noisy = noise_warnings(r)
        if noisy:
            err.print(Text(f"farm: warning: {r['device']}/{r['route']}: noisy: "
                           f"{'; '.join(noisy)}: its CI is wide and a comparison may say "
                           f"'within noise' (`farm devices check {r['device']}`)",
                           style="yellow"))
    machine_whole = output in ("json", "jsonl")  # stdout holds every field of each record
    report_kept(result, err, None if machine_whole else
                sys.stdout if output == "table" else sys.stderr)
    spilled, nowhere = len(result.spilled), len(result.unsaved)
    kept = "".join([f", {spilled} in the spill file" if spilled else "",
                    f", {nowhere} written nowhere (printed)" if nowhere else ""])
    err.print(f"farm: run {result.run_id} {result.status}; "
              f"{len(result.records) - spilled - nowhere} record(s) in {store.where}{kept} "
              f"(`{followup.command('results', 'show', result.run_id)}`)",
              markup=False, highlight=False)
