"""`farm report [RUN ...|--latest]` — the triangle report of stored runs.

RUN is a run id, a unique prefix of one, or "latest"; several runs are analysed together
(their records of one configuration are pooled). `--output table` prints rich tables,
md/csv/json print the same tables as text on stdout; `--html FILE` also writes the
self-contained HTML page. Every number comes from the stored raw records.

`farm report history [--model M --device D --route R --variant V ...] --html FILE`: how
each model x device x route x variant's median (and its CI) moved over the stored runs,
from either store (`farm.report.history`, `farm.report.history_html`); it prints the
largest changes and writes the page.
"""

from __future__ import annotations

import argparse
import sys

from rich.console import Console

from farm.cli.results_cmd import store_arg
from farm.cli.term import add_all_columns_option, stdout_console
from farm.errors import UsageError
from farm.report.analysis import load_report
from farm.report.html import write_html
from farm.report.outputs import TEXT_FORMATS, format_report
from farm.report.terminal import print_report
from farm.results.backend import Store
from farm.results.open_store import open_store

OUTPUTS = ["table", *TEXT_FORMATS]


def add_report_options(parser: argparse.ArgumentParser) -> None:
    """Options shared with `farm triangle`, which renders the report it just measured."""
    parser.add_argument("--output", choices=OUTPUTS, default="table",
                        help="table (rich, default), md, csv (tidy: one line per cell), json")
    parser.add_argument("--html", metavar="FILE",
                        help="also write the report as one self-contained HTML page")
    add_all_columns_option(parser)
    parser.add_argument("--store", metavar="FILE|URL", type=store_arg,
                        help="result store: a SQLite file or a postgresql:// URL (default: "
                             "$FARM_STORE, else $FARM_HOME/results.sqlite, else "
                             "./.farm/results.sqlite)")


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("report", help="triangle report (latency, per-op, fusion, memory, "
                                      "size, decision matrix) of stored runs")
    p.add_argument("runs", nargs="*", metavar="RUN",
                   help="run id, unique prefix or 'latest' (several: analysed together); "
                        "or 'history': the latency of every configuration over time")
    for name in ("model", "device", "route", "variant"):
        p.add_argument(f"--{name}", action="append", default=[], metavar=name.upper(),
                       help=f"history: only this {name} (repeatable)")
    p.add_argument("--latest", action="store_true", help="the most recent run")
    add_report_options(p)
    p.set_defaults(func=run)


def console() -> Console:
    return stdout_console(piped_width=200)


def render(store: Store, run_ids: list[str], output: str, html: str | None,
           full: bool = False) -> None:
    """Print the report of resolved `run_ids` and write the HTML page when asked."""
    report = load_report(store, run_ids)
    if output == "table":
        print_report(report, console(), full=full)
    else:
        sys.stdout.write(format_report(report, output))
        sys.stdout.flush()
    if html:
        path = write_html(report, html)
        print(f"farm: HTML report written to {path}", file=sys.stderr)


def run(args: argparse.Namespace) -> int:
    if args.runs[:1] == ["history"]:
        return run_history(args)
    if args.model or args.device or args.route or args.variant:
        raise UsageError("--model/--device/--route/--variant select series of "
                         "`farm report history`", hint="farm report history --model M --html F")
    if args.latest and args.runs:
        raise UsageError("give run ids or --latest, not both")
    wanted = args.runs or ["latest"]
    with open_store(args.store, create=False) as store:
        run_ids = list(dict.fromkeys(store.resolve_run(r) for r in wanted))
        render(store, run_ids, args.output, args.html, full=args.columns == "all")
    return 0


def run_history(args: argparse.Namespace) -> int:
    from farm.report.history import load_history
    from farm.report.history_html import MAX_CHANGES, write_history

    if len(args.runs) > 1 or args.latest:
        raise UsageError("`farm report history` takes no run ids: it reads every run",
                         hint="select with --model/--device/--route/--variant")
    with open_store(args.store, create=False) as store:
        history = load_history(store, models=args.model, devices=args.device,
                               routes=args.route, variants=args.variant)
    print(f"{len(history.series)} series, {sum(len(s.points) for s in history.series)} "
          f"measured records in {history.where}")
    for c in history.changes[:10 if args.html else MAX_CHANGES]:
        print(f"{c.pct:+7.1f} %  {c.series.name}: {c.before.median_ms:.3f} -> "
              f"{c.after.median_ms:.3f} ms  ({c.before.label} -> {c.after.label})"
              + ("" if c.clear else "  [CIs overlap]"))
    if args.html:
        path = write_history(history, args.html)
        print(f"farm: history page written to {path}", file=sys.stderr)
    return 0
