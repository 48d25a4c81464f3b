"""`farm compare BASE NEW` — per (device, route, variant, threads): ratio of medians
NEW/BASE with its two-level bootstrap CI and a Mann-Whitney U test on the ROUND medians
(rounds are the replicates; `farm.results.rounds`); a change inside the device's noise
floor (`farm devices calibrate`, kept in the store) is "within noise (±x %)".

With `--max-slowdown 5%` it is a regression gate (`farm.results.gate`): per device x
route x model x variant x threads x config, exit 4 when NEW is slower than the limit AND
the floor AND significantly so over rounds (`--metric p10|median|p90`, p10 by default:
the quiet level, see `farm.results.gate`; `--alpha`); md output is a PR comment.

BASE/NEW: a run id, a unique prefix of one, "latest", or a tag (`farm results tag`).
"""

from __future__ import annotations

import argparse
import sys

from farm.cli.results_cmd import OUTPUTS, add_store_option, console
from farm.cli.term import add_all_columns_option
from farm.errors import UsageError
from farm.results.open_store import open_store


def register(sub: argparse._SubParsersAction) -> None:
    parser = sub.add_parser("compare", help="compare two runs (ratio of medians, "
                                            "significance); --max-slowdown: a CI gate")
    parser.add_argument("run_a", metavar="BASE",
                        help="baseline run (id, prefix, 'latest' or a tag such as main)")
    parser.add_argument("run_b", metavar="NEW", help="run compared with the baseline")
    parser.add_argument("--output", choices=OUTPUTS, default="table")
    parser.add_argument("--alpha", type=float, default=0.05,
                        help="significance level of the test (default 0.05)")
    parser.add_argument("--max-slowdown", metavar="PCT",
                        help="gate: exit 4 when NEW is more than PCT (e.g. 5%%) and more "
                             "than the device's noise floor slower than BASE, and the "
                             "slowdown is significant over rounds")
    parser.add_argument("--metric", choices=["p10", "median", "p90"], default="p10",
                        help="gate: the statistic the slowdown is measured on (default p10, "
                             "the quiet level: a shared host's disturbances only add time, "
                             "so identical runs agree on it where their medians do not)")
    add_all_columns_option(parser)
    add_store_option(parser)
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    # scipy costs ~1 s to import: only when a comparison runs
    from farm.results import tags

    if not 0.0 < args.alpha < 1.0:
        raise UsageError(f"--alpha must be between 0 and 1, got {args.alpha}")
    if args.max_slowdown is not None:
        return _gate(args)
    from farm.results.compare import compare_runs, format_comparisons, render_comparisons

    with open_store(args.store, create=False) as store:
        a, b = tags.resolve(store, args.run_a), tags.resolve(store, args.run_b)
        run_a, run_b, comps = compare_runs(store, a, b, alpha=args.alpha)
    if args.output == "table":
        full = args.columns == "all"
        console().print(render_comparisons(comps, run_a, run_b, alpha=args.alpha, full=full),
                        crop=not full)
    else:
        sys.stdout.write(format_comparisons(comps, args.output, alpha=args.alpha))
    return 0


def _gate(args: argparse.Namespace) -> int:
    from farm.results.gate import format_gate, gate_runs, parse_slowdown, render_gate

    try:
        limit = parse_slowdown(args.max_slowdown)
    except ValueError as exc:
        raise UsageError(str(exc)) from exc
    with open_store(args.store, create=False) as store:
        result = gate_runs(store, args.run_a, args.run_b, max_slowdown=limit,
                           metric=args.metric, alpha=args.alpha)
    if args.output == "table":
        full = args.columns == "all"
        console().print(render_gate(result, full=full), crop=not full)
    else:
        sys.stdout.write(format_gate(result, args.output))
    return result.exit_code
