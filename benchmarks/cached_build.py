"""What the `build` step of a bench costs when every build is already cached (issue 29).

    .venv/bin/python benchmarks/cached_build.py [--model tiny] [--routes ort,tvm,custom]
        [--repeat 3]

Builds once (filling the cache), then times `--repeat` fresh processes, each doing exactly
what a bench's `build` step does on `local` (`farm.bench.plan.plan_route` for every route
key, after `prepare`), and prints each route's seconds, the whole step, and whether the
process imported TVM. Run from a scratch directory (it uses `./.farm` unless $FARM_HOME).

Measured on a shared 2-vCPU VM (Xeon, load ~3), tiny, ort,tvm,custom, 3 cached runs:
before (TVM imported for the key's version, LLVM's CPU name and the frontend's op list; both
source digests parsed every module they reach): build step 3.5 / 4.8 / 5.1 s (tvm 3.3-4.8 s,
custom 0.2 s), TVM imported; after: 0.19 / 0.17 / 0.17 s (tvm 0.09 s, custom 0.09 s), TVM
not imported.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys

CHILD = """
import json, sys, time
from farm.bench.config import BenchConfig
from farm.bench.plan import plan_route
from farm.bench.prepare import prepare
from farm.inventory.builtin import local_device
config = BenchConfig(model=sys.argv[1], routes=tuple(sys.argv[2].split(",")))
prepared = prepare(config)
times = {}
started = time.perf_counter()
for key in config.routes:
    t = time.perf_counter()
    plan_route(key, local_device(), prepared)
    times[str(key)] = round(time.perf_counter() - t, 3)
print(json.dumps({"routes": times, "step_s": round(time.perf_counter() - started, 3),
                  "tvm_imported": "tvm" in sys.modules}))
"""


def run_once(model: str, routes: str) -> dict[str, object]:
    proc = subprocess.run([sys.executable, "-c", CHILD, model, routes],
                          capture_output=True, text=True, check=True)
    return json.loads(proc.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="tiny")
    parser.add_argument("--routes", default="ort,tvm,custom")
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    first = run_once(args.model, args.routes)
    print(f"first (fills the cache if empty): step {first['step_s']} s")
    for i in range(args.repeat):
        facts = run_once(args.model, args.routes)
        routes = ", ".join(f"{k} {v} s" for k, v in facts["routes"].items())  # type: ignore[union-attr]
        print(f"cached #{i + 1}: build step {facts['step_s']} s ({routes}); "
              f"TVM imported: {'yes' if facts['tvm_imported'] else 'no'}")


if __name__ == "__main__":
    main()
