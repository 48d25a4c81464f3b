"""`farm models check` on every corpus file: the per-route verdict of each name
`farm.models.corpus.names()` lists against the expected one.

    python benchmarks/check_corpus.py [--bench-size] [--only SUBSTR,...] [--json OUT]

Every route is expected to take every corpus file (`EXPECTED_FAILURES` lists the documented
exceptions: none today). The check is the one `farm models check` runs: ORT session load,
front-end + custom lowering, front-end + TVM operator check + import (not a TVM build: a
kernel that imports but fails to compile is caught by the bench tests and real_exports.py).
Exit 0 when every verdict is the expected one, 1 otherwise. About 1 s per @small file
(168 files; measured under load): the test suite runs a covering subset
(tests/test_real_models.py::test_models_check_verdict_per_corpus_file), this script all.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from farm.models.corpus import corpus_model, names
from farm.routes import ROUTES as REGISTRY
from farm.routes.check import check_file

ROUTES = ("ort", "tvm", "custom")
# name -> {route: reason it is expected to stop}; every other (name, route) must be ok
EXPECTED_FAILURES: dict[str, dict[str, str]] = {}


def expected(name: str) -> dict[str, bool]:
    stops = EXPECTED_FAILURES.get(name, {})
    return {route: route not in stops for route in ROUTES}


def verdict(name: str, out_dir: Path) -> dict[str, Any]:
    """{route: {ok, stage, node, op, reason}} of `farm models check` on corpus file `name`."""
    return check_file(corpus_model(name, out_dir), REGISTRY)["routes"]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--bench-size", action="store_true", help="bench dims instead of @small")
    ap.add_argument("--only", default="", help="comma list of substrings a name must contain")
    ap.add_argument("--json", metavar="OUT")
    args = ap.parse_args()
    wanted = [s for s in args.only.split(",") if s]
    todo = [n for n in names("" if args.bench_size else "@small")
            if not wanted or any(s in n for s in wanted)]
    rows: dict[str, Any] = {}
    wrong = 0
    with tempfile.TemporaryDirectory(prefix="check-corpus-") as tmp:
        os.environ.setdefault("FARM_HOME", str(Path(tmp) / "home"))
        for name in todo:
            start = time.perf_counter()
            try:
                routes = verdict(name, Path(tmp) / "corpus")
            except Exception as exc:  # a generator or check crash is a finding, not a stop
                routes = {r: {"ok": False, "reason": f"{type(exc).__name__}: {exc}"[:200]}
                          for r in ROUTES}
            got = {r: bool(routes[r]["ok"]) for r in ROUTES}
            bad = got != expected(name)
            wrong += bad
            rows[name] = routes
            detail = "; ".join(f"{r}: {routes[r].get('reason', '')[:80]}" for r in ROUTES
                               if not routes[r]["ok"])
            print(f"{'WRONG' if bad else 'ok   '} {name:46s} "
                  f"{' '.join(r if got[r] else '-' * len(r) for r in ROUTES)} "
                  f"{time.perf_counter() - start:5.1f} s  {detail}", flush=True)
    print(f"{len(todo) - wrong} of {len(todo)} files with the expected verdict")
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1))
    return 1 if wrong else 0


if __name__ == "__main__":
    sys.exit(main())
