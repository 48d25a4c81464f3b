"""Does the fusion verdict of `farm triangle` survive running the same command again?
Issue 32's check: the end-to-end fusion verdict of each route has the same sign, or says
"not significant" / "not enough rounds to judge", in every rerun.

    python benchmarks/fusion_reruns.py [--reruns 5] [--model tiny] [--device local]
        [--rounds N] [--keep DIR] [--json OUT]

Each rerun is one `farm triangle --model M --output json` of its own (a fresh process, as a
user types it), into one temporary store (or `--keep DIR`), so every figure printed here is
a row of a stored run's report and `farm report RUN` shows it again. Per route it prints the
reduction, its CI, the rounds and the verdict of every rerun, then whether the reruns agree:
"consistent" when the significant ones all point the same way.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

E2E = "end-to-end"


def triangle(store: Path, args: argparse.Namespace) -> list[dict[str, Any]]:
    """The end-to-end fusion rows of one `farm triangle` run."""
    cmd = [sys.executable, "-m", "farm.cli.main", "triangle", "--device", args.device,
           "--model", args.model, "--output", "json", "--store", str(store)]
    if args.rounds:
        cmd += ["--rounds", str(args.rounds)]
    done = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        tail = done.stderr.strip().splitlines()[-1:] or ["(no output)"]
        raise SystemExit(f"farm triangle exited {done.returncode}: {tail[0]}")
    report = json.loads(done.stdout)
    return [row for row in report["tables"]["fusion"]["rows"] if row["block"] == E2E]


def direction(row: dict[str, Any]) -> str:
    """'faster' / 'slower' with fusion on when significant, else the verdict itself."""
    if row["verdict"] != "significant":
        return str(row["verdict"])
    return "faster" if row["reduction_pct"] > 0 else "slower"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--reruns", type=int, default=5)
    ap.add_argument("--model", default="tiny")
    ap.add_argument("--device", default="local")
    ap.add_argument("--rounds", type=int, default=0, help="default: the triangle's own")
    ap.add_argument("--keep", metavar="DIR", help="keep the store here")
    ap.add_argument("--json", metavar="OUT")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="fusion-reruns-") as tmp:
        work = Path(args.keep) if args.keep else Path(tmp)
        work.mkdir(parents=True, exist_ok=True)
        store = work / "reruns.sqlite"
        by_route: dict[str, list[dict[str, Any]]] = {}
        for i in range(args.reruns):
            for row in triangle(store, args):
                by_route.setdefault(str(row["route"]), []).append(row)
                print(f"rerun {i + 1} {row['route']:<7} reduction {row['reduction_pct']:+6.1f} % "
                      f"[{row['ci_low_pct']:+.1f}, {row['ci_high_pct']:+.1f}], "
                      f"{row['rounds']} rounds, p {row['p_value']}: {direction(row)}",
                      flush=True)
    print(f"\nfusion verdict of `farm triangle --model {args.model}` over {args.reruns} reruns:")
    agree = True
    for route, rows in sorted(by_route.items()):
        ways = {direction(r) for r in rows} & {"faster", "slower"}
        consistent = len(ways) <= 1
        agree &= consistent
        print(f"  {route:<7} " + ", ".join(direction(r) for r in rows)
              + f" -> {'consistent' if consistent else 'FLIPPED'}")
    print(f"  all routes: {'consistent' if agree else 'a verdict flipped'}")
    if args.json:
        Path(args.json).write_text(json.dumps(by_route, indent=2))
    return 0 if agree else 1


if __name__ == "__main__":
    sys.exit(main())
