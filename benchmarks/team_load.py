"""A team on one PostgreSQL store: 4 controllers x 4 lab devices, a kill -9, a server restart.

Brings up its own PostgreSQL server (tests/pg_server.py: Debian's postgresql, initdb in a
temporary directory, fsync ON as a real server would run) and its own lab of 4 native
devices (sshd per network namespace; root), then starts 4 controller processes, each
benching its own lab device in a loop (`farm.bench.runner.run_bench`, the code path of
`farm bench`, routes ort, ort-unfused and custom) into the one store, each with its own
FARM_HOME (so its own spill file). While they run, the server is restarted once (stopped,
down for a few seconds, started: the benches keep measuring and spill what they cannot
store; the next bench's open writes the spill in) and one controller is killed -9. At the
end `farm results push URL` runs for every controller's FARM_HOME (the way a user sends
what is left in a spill file), and the store is checked:

* records stored for the survivors = records they measured (each controller prints every
  record of every finished bench): 0 lost, 0 duplicated; the killed controller's finished
  benches are all there, its last run reads `interrupted`;
* nothing half-written: the store's integrity check (every record's statistics recomputed
  from its samples, JSON fields parse, types);
* insert latency per record: measured around `PgStore._insert` in the controllers during
  the load (restart included), and in a burst of 4 processes x 250 inserts at once;
* `farm results push` of a 10,000-record SQLite store (100 runs x 100 records) into an
  empty database: time, and a second push that adds 0.

    .venv/bin/python benchmarks/team_load.py [--seconds 120] [--devices 4] [--down 4]
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "tests"))

from pg_server import PgServer  # noqa: E402

from farm.results.open_store import open_store  # noqa: E402


def _env(home: Path) -> dict[str, str]:
    # one build cache for every controller: the model and the custom executor are built once
    cache = os.environ.get("FARM_BUILD_CACHE") or str(home.parent / "build-cache")
    return {**os.environ, "FARM_HOME": str(home), "PYTHONPATH": str(REPO),
            "FARM_BUILD_CACHE": cache}


def _json_lines(path: Path) -> list[dict[str, Any]]:
    out = []
    for line in path.read_text().splitlines():
        try:
            out.append(json.loads(line))
        except ValueError:
            continue  # the killed controller's last line may be cut
    return out


# -- controller: one process benching one device in a loop ----------------------------
def controller(args: argparse.Namespace) -> int:
    from farm.bench.config import BenchConfig, Policy
    from farm.errors import StoreError
    from farm.inventory import load_inventory
    from farm.results import pg_store

    latencies: list[float] = []
    original = pg_store.PgStore._insert

    def timed(self: pg_store.PgStore, full: dict[str, Any]) -> dict[str, Any]:
        start = time.perf_counter()
        try:
            return original(self, full)
        finally:
            latencies.append(time.perf_counter() - start)

    pg_store.PgStore._insert = timed  # type: ignore[method-assign]
    from farm.bench.runner import run_bench

    device = load_inventory(args.inventory).get(args.device)
    config = BenchConfig(model="tiny", routes=("ort", "ort-unfused", "custom"), pause_s=0.0,
                         policy=Policy(warmup_runs=2, warmup_min_s=0.0, min_runs=20,
                                       min_time_s=0.3, max_time_s=2.0))
    deadline = time.monotonic() + args.seconds
    refused = 0
    while time.monotonic() < deadline or args.once:
        try:
            store = open_store(args.url)
        except StoreError as exc:  # the server is down as the bench starts: wait for it
            refused += 1
            print(json.dumps({"refused": str(exc).splitlines()[0]}), flush=True)
            time.sleep(0.5)
            continue
        try:
            with store:
                result = run_bench([device], config, store, ["team_load", args.device])
        except StoreError as exc:
            text = str(exc).splitlines()[0]
            # the server went down as the bench recorded its run: nothing measured yet, the
            # bench says so and stops (`farm bench` exits 1); anything later must not stop it
            kind = "refused" if "while starting a run" in text else "aborted"
            print(json.dumps({kind: text}), flush=True)
            time.sleep(0.5)
            continue
        spilled = {r["record_id"] for r in result.spilled}
        unsaved = {r["record_id"] for r in result.unsaved}
        print(json.dumps({"run": result.run_id, "status": result.status,
                          "records": [r["record_id"] for r in result.records],
                          "spilled": sorted(spilled), "unsaved": sorted(unsaved),
                          "problems": result.disk_problems[:2]}), flush=True)
        if args.once:
            break
    print(json.dumps({"latencies": latencies, "refused": refused}), flush=True)
    return 0


# -- the orchestra -----------------------------------------------------------------------
def _percentiles(values: list[float]) -> str:
    ms = np.asarray(values) * 1000.0
    return (f"n={len(ms)}, p50 {np.percentile(ms, 50):.2f} ms, p90 "
            f"{np.percentile(ms, 90):.2f} ms, p99 {np.percentile(ms, 99):.2f} ms, max "
            f"{ms.max():.1f} ms")


BURST = """
import json, sys, time
from farm.results.open_store import open_store
from farm.results.schema import empty_record
store = open_store(sys.argv[1]); run = store.start_run('burst')
template = store.add(empty_record(run_id=run, device='burst', route='ort', model='tiny',
    variant='fp32', threads=1, status='ok', samples_ms=[1.0 + i % 17 * 0.01 for i in range(200)],
    policy={'seed': 0, 'n_boot': 200}))
out = []
for i in range(int(sys.argv[2])):
    full = dict(template, record_id=f'{run}-{i}')
    t = time.perf_counter(); store._insert(full); out.append(time.perf_counter() - t)
store.finish_run(run, 'ok'); print(json.dumps(out))
"""


def burst(url: str, work: Path, procs: int = 4, each: int = 250) -> list[float]:
    children = [subprocess.Popen([sys.executable, "-c", BURST, url, str(each)],
                                 env=_env(work / f"burst{i}"), stdout=subprocess.PIPE,
                                 text=True) for i in range(procs)]
    out: list[float] = []
    for child in children:
        stdout, _ = child.communicate(timeout=600)
        out += json.loads(stdout)
    return out


def big_sqlite(path: Path, runs: int = 100, per_run: int = 100) -> int:
    """A SQLite store of runs x per_run records: distinct templates, stored whole."""
    from farm.results.backend import RunInfo
    from farm.results.store import ResultStore
    from farm.results.validate import normalize_record

    rng = np.random.default_rng(1)
    with ResultStore(path) as store:
        for r in range(runs):
            run_id = f"20260101-{r:06d}-big{r:03d}"
            base = normalize_record({
                "run_id": run_id, "record_id": f"{run_id}-t", "device": f"dev{r % 8}",
                "route": "ort", "model": "tiny", "variant": "fp32", "threads": 1,
                "status": "ok", "samples_ms": list(1.0 + rng.random(100)),
                "created_utc": f"2026-01-01T00:{r // 60:02d}:{r % 60:02d}.000000Z",
                "policy": {"seed": 0, "n_boot": 200}})
            records = [dict(base, record_id=f"{run_id}-{i:03d}") for i in range(per_run)]
            store.import_run(RunInfo(run_id, base["created_utc"], base["created_utc"],
                                     "big", "ok", {}, per_run), records)
    return runs * per_run


def push(url: str, store: Path, home: Path) -> tuple[float, str]:
    start = time.monotonic()
    done = subprocess.run([sys.executable, "-m", "farm.cli.main", "results", "push", url,
                           "--store", str(store)], env=_env(home), capture_output=True,
                          text=True, timeout=900)
    took = time.monotonic() - start
    if done.returncode != 0:
        raise SystemExit(f"push failed: {done.stdout}{done.stderr}")
    return took, done.stdout.strip().splitlines()[-1]


def orchestrate(args: argparse.Namespace) -> int:
    from farm.inventory import load_inventory
    from farm.lab import LabSpec, down, up

    cpu = next((line.split(":", 1)[1].strip() for line in
                subprocess.run(["lscpu"], capture_output=True, text=True).stdout.splitlines()
                if line.startswith("Model name")), "?")
    print(f"host CPU: {cpu}, {os.cpu_count()} cores")
    with tempfile.TemporaryDirectory(prefix="farm-team-") as tmp:
        work = Path(tmp)
        os.chmod(work, 0o711)
        server = PgServer(work / "pg", fsync=True).start()
        lab_dir = work / "lab"
        try:
            url = server.create_db("team")
            started = time.monotonic()
            up(LabSpec(native=args.devices), lab_dir, owner_pid=os.getpid(),
               log=lambda m: None)
            inventory = lab_dir / "devices.yaml"
            devices = sorted(d.name for d in load_inventory(str(inventory)).devices.values()
                             if not d.is_local)[:args.devices]
            print(f"lab up: {len(devices)} native devices in {time.monotonic() - started:.1f} s;"
                  f" PostgreSQL {server.bin.parent.name} on 127.0.0.1:{server.port} (fsync on)")
            return _load(args, server, url, work, inventory, devices)
        finally:
            down(lab_dir, log=lambda m: None)
            server.stop("immediate")


def _load(args: argparse.Namespace, server: PgServer, url: str, work: Path,
          inventory: Path, devices: list[str]) -> int:
    # the model and the routes' builds are made once before the load (the build cache is
    # shared): the load measures benches and the store, not 4 concurrent first builds
    started = time.monotonic()
    subprocess.run([sys.executable, __file__, "controller", "--url", str(work / "warm.sqlite"),
                    "--inventory", str(inventory), "--device", devices[0], "--once"],
                   env=_env(work / "home-warm"), check=True, stdout=subprocess.DEVNULL,
                   stderr=subprocess.DEVNULL, timeout=1800)
    print(f"build cache warmed by one bench in {time.monotonic() - started:.0f} s; load "
          f"for {args.seconds:.0f} s")
    logs = {d: (work / f"{d}.jsonl").open("w") for d in devices}
    procs = {d: subprocess.Popen(
        [sys.executable, __file__, "controller", "--url", url, "--inventory", str(inventory),
         "--device", d, "--seconds", str(args.seconds)], env=_env(work / f"home-{d}"),
        stdout=logs[d], stderr=subprocess.DEVNULL) for d in devices}
    victim = devices[-1]
    t0 = time.monotonic()
    time.sleep(args.seconds * 0.35)
    print(f"t={time.monotonic() - t0:.0f}s: server restart (down {args.down:.0f} s)")
    server.restart(down_s=args.down)
    time.sleep(max(0.0, args.seconds * 0.6 - (time.monotonic() - t0)))
    # the kill lands inside a bench: once the victim has a run `running` (not between two)
    pid, waited = procs[victim].pid, time.monotonic()
    while time.monotonic() - waited < 30 and not server.sql(
            f"SELECT 1 FROM runs WHERE status = 'running' AND controller_pid = {pid}",
            url.rsplit("/", 1)[1]):
        time.sleep(0.1)
    time.sleep(0.5)
    print(f"t={time.monotonic() - t0:.0f}s: kill -9 the controller of {victim} (mid-bench)")
    procs[victim].send_signal(signal.SIGKILL)
    for d, proc in procs.items():
        proc.wait(timeout=args.seconds + 600)
        logs[d].close()
    print(f"t={time.monotonic() - t0:.0f}s: survivors done")

    lines = {d: _json_lines(work / f"{d}.jsonl") for d in devices}
    empty = work / "empty.sqlite"
    from farm.results.store import ResultStore
    ResultStore(empty).close()
    for d in devices:  # what a spill file still holds goes in now
        push(url, empty, work / f"home-{d}")

    with open_store(url) as store:
        runs = {r.run_id: r for r in store.runs()}
        stored = store.records()
        report = store.integrity_check()
    by_run: dict[str, list[str]] = {}
    for r in stored:
        by_run.setdefault(r["run_id"], []).append(r["record_id"])
    ids = [r["record_id"] for r in stored]
    keys = [(r["run_id"], r["device"], r["route"], json.dumps(r["build_flags"],
                                                               sort_keys=True)) for r in stored]
    print(f"store: {len(runs)} runs, {len(stored)} records; duplicated record ids "
          f"{len(ids) - len(set(ids))}, duplicated run x device x route keys "
          f"{len(keys) - len(set(keys))}; integrity: {report.summary().splitlines()[0]}")
    ok = report.ok and len(ids) == len(set(ids)) and len(keys) == len(set(keys))
    latencies: list[float] = []
    for d in devices:
        benches = [x for x in lines[d] if "run" in x]
        measured = {i for x in benches for i in x["records"]}
        spilled = sum(len(x["spilled"]) for x in benches)
        unsaved = sum(len(x["unsaved"]) for x in benches)
        refused = sum(1 for x in lines[d] if "refused" in x and "latencies" not in x)
        aborted = [x["aborted"] for x in lines[d] if "aborted" in x]
        mine = {i for x in benches for i in by_run.get(x["run"], [])}
        lost = measured - set(ids)
        extra = mine - measured
        role = "killed -9" if d == victim else "survivor"
        print(f"  {d} ({role}): {len(benches)} benches finished, {len(measured)} records "
              f"measured, {len(measured & set(ids))} stored ({spilled} via the spill file, "
              f"{unsaved} written nowhere), lost {len(lost)}, stored but not reported "
              f"{len(extra)}; {refused} bench start(s) refused while the server was down; "
              f"{len(aborted)} bench(es) stopped by a store error")
        for reason in sorted(set(aborted)):
            print(f"    aborted: {reason[:160]}")
        ok = ok and not lost and not unsaved and not aborted and (d == victim or not extra)
        reasons = sorted({x["refused"][:160] for x in lines[d]
                          if "refused" in x and "latencies" not in x})
        for reason in reasons:
            print(f"    refused: {reason}")
        final = next((x for x in lines[d] if "latencies" in x), None)
        if final:
            latencies += final["latencies"]
    victim_runs = [r for r in runs.values() if r.status in ("interrupted", "running")]
    print("  runs left unfinished (the killed bench's): " + ", ".join(
        f"{r.run_id} {r.status} with {len(by_run.get(r.run_id, []))} whole record(s) "
        f"({r.meta.get('interrupted', '')[:90]})" for r in victim_runs))
    ok = ok and len(victim_runs) == 1 and victim_runs[0].status == "interrupted"
    if not victim_runs:
        print("  (no bench of the killed controller was running: the kill missed)")
    print(f"insert latency during the load (restart included): {_percentiles(latencies)}")
    print(f"insert latency, 4 processes x 250 inserts at once: "
          f"{_percentiles(burst(server.create_db('burst'), work))}")

    big = work / "big.sqlite"
    n = big_sqlite(big)
    target = server.create_db("push")
    first, said = push(target, big, work / "home-push")
    print(f"push of a {n}-record SQLite store: {first:.1f} s ({said})")
    second, said2 = push(target, big, work / "home-push")
    print(f"second push: {second:.1f} s ({said2})")
    with open_store(target) as store:
        pushed = len(store.records())
    print(f"records in the target after both pushes: {pushed}")
    ok = ok and pushed == n and "0 new record(s)" in said2
    print("RESULT:", "ok" if ok else "FAILED")
    return 0 if ok else 1


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="mode")
    ctl = sub.add_parser("controller")
    ctl.add_argument("--url", required=True)
    ctl.add_argument("--inventory", required=True)
    ctl.add_argument("--device", required=True)
    ctl.add_argument("--seconds", type=float, default=90)
    ctl.add_argument("--once", action="store_true", help="one bench (warms the build cache)")
    parser.add_argument("--seconds", type=float, default=120,
                        help="how long each controller keeps benching")
    parser.add_argument("--devices", type=int, default=4)
    parser.add_argument("--down", type=float, default=4.0,
                        help="seconds the server stays down when it is restarted")
    args = parser.parse_args()
    return controller(args) if args.mode == "controller" else orchestrate(args)


if __name__ == "__main__":
    sys.exit(main())
