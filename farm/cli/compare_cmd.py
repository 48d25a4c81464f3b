"""`farm compare RUN_A RUN_B` — per (device, route, variant, threads): ratio of medians
B/A with its bootstrap CI and a Mann-Whitney U test on the raw samples.

RUN_A/RUN_B: a run id, a unique prefix of one, or "latest".
"""

from __future__ import annotations

import argparse
import sys

from farm.cli.results_cmd import OUTPUTS, add_store_option, console
from farm.errors import UsageError
from farm.results.store import ResultStore


def register(sub: argparse._SubParsersAction) -> None:
    parser = sub.add_parser("compare", help="compare two runs (ratio of medians, significance)")
    parser.add_argument("run_a", metavar="RUN_A", help="baseline run (id, prefix or 'latest')")
    parser.add_argument("run_b", metavar="RUN_B", help="run compared with the baseline")
    parser.add_argument("--output", choices=OUTPUTS, default="table")
    parser.add_argument("--alpha", type=float, default=0.05,
                        help="significance level of the test (default 0.05)")
    add_store_option(parser)
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    # scipy costs ~1 s to import: only when a comparison runs
    from farm.results.compare import compare_runs, format_comparisons, render_comparisons

    if not 0.0 < args.alpha < 1.0:
        raise UsageError(f"--alpha must be between 0 and 1, got {args.alpha}")
    with ResultStore(args.store, create=False) as store:
        run_a, run_b, comps = compare_runs(store, args.run_a, args.run_b, alpha=args.alpha)
    if args.output == "table":
        console().print(render_comparisons(comps, run_a, run_b, alpha=args.alpha))
    else:
        sys.stdout.write(format_comparisons(comps, args.output, alpha=args.alpha))
    return 0
