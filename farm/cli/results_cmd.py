"""`farm results list|show|check` — read the result store.

`list` prints every run; `show RUN` prints a run's records (RUN: an id, a unique prefix
of one, or "latest"), optionally filtered by device/route and with chosen columns, as a
table, md, csv, json, jsonl or sql;
`check` runs the store's integrity check, reading row by row around damaged pages and
naming what cannot be read (exit 1 when it finds problems); `recover OUT.sqlite` copies
every readable record of a damaged store into a new store (atomically);
`tag RUN NAME` names a run (e.g. `main`) for `farm compare`; `tags` lists the names;
`push URL [RUN...]` copies runs of the local store (--store) into another store, e.g. the
team's PostgreSQL one, and `pull URL [RUN...]` the other way (`farm.results.transfer`:
keyed by run and record ids, a second push adds nothing).
"""

from __future__ import annotations

import argparse
import sys

from rich.console import Console

from farm import followup
from farm.cli.term import add_all_columns_option, stdout_console
from farm.errors import StoreError, UsageError
from farm.results.location import check_location
from farm.results.open_store import open_store
from farm.results.printers import (
    columns_for,
    format_records,
    format_runs,
    render_results,
    render_runs,
)

OUTPUTS = ["table", "json", "jsonl", "csv", "md"]


def console() -> Console:
    """The terminal's width on a TTY, else $COLUMNS, else 160 columns (`farm.cli.term`)."""
    return stdout_console()


def store_arg(text: str) -> str:
    """argparse type of every --store: a URL other than postgresql:// is a usage error at
    once, before a bench builds anything (`farm.results.location`)."""
    try:
        check_location(text)
    except StoreError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    return text


def add_store_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--store", metavar="FILE|URL", type=store_arg,
                        help="result store: a SQLite file or a postgresql:// URL (default: "
                             "$FARM_STORE, else $FARM_HOME/results.sqlite, else "
                             "./.farm/results.sqlite)")


def add_columns_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--columns", metavar="A,B,...|all",
                        help="columns to print: record field names or 'ci95', or 'all' "
                             "(default: the summary for table/md/csv, every field for "
                             "json/jsonl/sql)")


def register(sub: argparse._SubParsersAction) -> None:
    parser = sub.add_parser("results", help="list and show stored benchmark results")
    parser.set_defaults(func=lambda args: _usage(parser))
    actions = parser.add_subparsers(dest="action", metavar="ACTION")
    lst = actions.add_parser("list", help="every run in the store")
    lst.add_argument("--output", choices=OUTPUTS, default="table")
    add_all_columns_option(lst)
    add_store_option(lst)
    lst.set_defaults(func=run_list)
    show = actions.add_parser("show", help="the records of one run")
    show.add_argument("run", metavar="RUN", help="run id, unique prefix, or 'latest'")
    show.add_argument("--output", choices=[*OUTPUTS, "sql"], default="table",
                      help="sql: CREATE TABLE + INSERT statements with every field")
    add_columns_option(show)
    show.add_argument("--device", action="append", help="only this device (repeatable)")
    show.add_argument("--route", action="append", help="only this route (repeatable)")
    add_store_option(show)
    show.set_defaults(func=run_show)
    check = actions.add_parser("check", help="integrity check of the store")
    add_store_option(check)
    check.set_defaults(func=run_check)
    tag = actions.add_parser("tag", help="name a run (e.g. main) for `farm compare`")
    tag.add_argument("run", metavar="RUN", help="run id, unique prefix, 'latest' or a tag")
    tag.add_argument("name", metavar="NAME", help="the tag: letters, digits, '.', '_', '-'")
    add_store_option(tag)
    tag.set_defaults(func=run_tag)
    tag_list = actions.add_parser("tags", help="every tag and the run it names")
    add_store_option(tag_list)
    tag_list.set_defaults(func=run_tags)
    recover = actions.add_parser(
        "recover", help="salvage every readable record of a damaged store into a new one")
    recover.add_argument("out", metavar="OUT.sqlite", help="the new store (must not exist)")
    add_store_option(recover)
    recover.set_defaults(func=run_recover)
    for name, verb in (("push", "into"), ("pull", "from")):
        move = actions.add_parser(
            name, help=f"copy runs of the local store (--store) {verb} another store "
                       "(e.g. postgresql://...): idempotent by run id")
        move.add_argument("url", metavar="URL", type=store_arg,
                          help="the other store: a postgresql:// URL or a SQLite file")
        move.add_argument("runs", metavar="RUN", nargs="*",
                          help="run ids, prefixes, tags or 'latest' (default: every run)")
        add_store_option(move)
        move.set_defaults(func=run_push if name == "push" else run_pull)


def _usage(parser: argparse.ArgumentParser) -> int:
    parser.print_help(sys.stderr)
    raise UsageError("choose an action: list, show, check, recover, tag, tags, push or pull")


def run_list(args: argparse.Namespace) -> int:
    with open_store(args.store, create=False) as store:
        runs = store.runs()
        if store.replayed:
            print(f"farm: {store.replayed} write(s) kept in {store.spill_file} while the "
                  "store could not take them are now in it", file=sys.stderr)
    if args.output == "table":
        full = args.columns == "all"
        console().print(render_runs(runs, full=full), crop=not full)
    else:
        sys.stdout.write(format_runs(runs, args.output))
    return 0


def run_show(args: argparse.Namespace) -> int:
    filters = {}
    if args.device:
        filters["device"] = args.device
    if args.route:
        filters["route"] = args.route
    try:
        keys = columns_for(args.output, args.columns)
    except ValueError as exc:
        raise UsageError(str(exc)) from exc
    with open_store(args.store, create=False) as store:
        run_id = store.resolve_run(args.run)
        records = store.records(run_id, **filters)
        status = next(r.status for r in store.runs() if r.run_id == run_id)
    if args.output == "table":
        title = f"run {run_id} ({status}, {len(records)} record(s))"
        # columns named on the command line are all drawn, however wide
        full = bool(args.columns)
        console().print(render_results(records, keys, title=title, full=full), crop=not full)
    else:
        try:
            text = format_records(records, args.output, keys)
        except ValueError as exc:
            raise UsageError(str(exc)) from exc
        sys.stdout.write(text)
    return 0


def run_check(args: argparse.Namespace) -> int:
    with open_store(args.store, create=False) as store:
        report = store.integrity_check()
        path = store.where
    print(f"{path}: {report.summary()}")
    if report.damaged:
        raise StoreError(f"result store {path} is damaged",
                         hint=f"`farm results recover OUT.sqlite --store {path}` copies every "
                              "readable record into a new store")
    if not report.ok:
        raise StoreError(f"result store {path} failed its integrity check",
                         hint="the problems are listed above; a record whose statistics "
                              "disagree with its samples was edited after it was written")
    return 0


def run_tag(args: argparse.Namespace) -> int:
    from farm.results.tags import tag_run

    with open_store(args.store, create=False) as store:
        run_id = tag_run(store, args.run, args.name)
    gate = followup.command("compare", args.name, "latest", "--max-slowdown", "5%")
    print(f"tagged run {run_id} as {args.name!r} ({gate})")
    return 0


def run_tags(args: argparse.Namespace) -> int:
    from farm.results.tags import tags

    with open_store(args.store, create=False) as store:
        for name, run_ids in tags(store).items():
            print(f"{name}\t{','.join(run_ids)}")

def run_recover(args: argparse.Namespace) -> int:
    from pathlib import Path

    from farm.results.location import is_server_url
    from farm.results.open_store import store_target
    from farm.results.recover import recover_store
    from farm.results.store import default_store_path

    target = store_target(args.store)
    if target is not None and is_server_url(target):
        raise UsageError("`farm results recover` salvages a damaged SQLite file; a PostgreSQL "
                         "store keeps its own pages", hint="`farm results pull URL --store "
                         "OUT.sqlite` copies its runs into a file")
    src = Path(target) if target else default_store_path()
    result = recover_store(src, Path(args.out))
    print(result.summary())
    print(f"check it with `farm results check --store {args.out}`; use it with --store "
          f"{args.out}, or move it over {src}")
    return 0


def run_push(args: argparse.Namespace) -> int:
    from pathlib import Path

    from farm.results.location import is_server_url
    from farm.results.open_store import store_target
    from farm.results.store import default_store_path
    from farm.results.transfer import copy_runs

    local = store_target(args.store) or default_store_path()
    # a bench that wrote only to the server leaves no local store, maybe a spill file:
    # opening the server store sends that; there is nothing else to push then
    missing = not is_server_url(local) and not Path(local).exists() and not args.runs
    with open_store(args.url) as dst:
        if dst.replayed:
            print(f"farm: {dst.replayed} write(s) a bench kept in {dst.spill_file} while "
                  f"{dst.where} could not take them are now in it", file=sys.stderr)
        if missing:
            print(f"no local store at {local}: nothing else to push to {dst.where}")
            return 0
        with open_store(args.store, create=False) as src:
            done = copy_runs(src, dst, args.runs)
            print(done.summary(src.where, dst.where))
    return 0


def run_pull(args: argparse.Namespace) -> int:
    from farm.results.transfer import copy_runs

    with open_store(args.url, create=False) as src, open_store(args.store) as dst:
        done = copy_runs(src, dst, args.runs)
        print(done.summary(src.where, dst.where))
    return 0
