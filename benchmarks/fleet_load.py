"""A fleet under load: one `farm bench` across 16 native + 2 emulated aarch64 lab devices.

Brings up its own lab (root; its own temporary lab dir, torn down at the end, also on
Ctrl-C), runs ONE real `farm bench --all` with 3 routes in a subprocess (its own
FARM_HOME: the model and the routes' builds are made for the run), samples the bench
process and the machine while it runs, then reads the store. Prints:

* wall time of the bench, and of its phases (prepare/build vs the devices' work);
* host peak RSS: the bench process's VmHWM, and the peak sampled RSS of its process tree;
* records stored vs expected (devices x routes): none lost, none duplicated, by status;
* what limits it on this machine: the bench process's CPU share vs the whole machine's
  busy time (the devices' runners, sshds and qemu run on the same cores).

    .venv/bin/python benchmarks/fleet_load.py [--native 16] [--aarch64 2]
        [--routes ort,tvm,custom] [--runs 10] [--min-time 1] [--inventory FILE]

With --inventory, a running lab is used as it is (nothing brought up or down).
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from farm.inventory import load_inventory
from farm.lab import LabSpec, down, up
from farm.results.run_checks import assert_store_ok
from farm.results.store import ResultStore

CLK_TCK = os.sysconf("SC_CLK_TCK")


def _read(path: str) -> str:
    try:
        with open(path) as handle:
            return handle.read()
    except OSError:
        return ""


def _status_kb(pid: int, key: str) -> int:
    for line in _read(f"/proc/{pid}/status").splitlines():
        if line.startswith(key + ":"):
            return int(line.split()[1])
    return 0


def _cpu_s(pid: int) -> float:
    fields = _read(f"/proc/{pid}/stat").rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / CLK_TCK if len(fields) > 12 else 0.0


def _tree(root: int) -> list[int]:
    children: dict[int, list[int]] = collections.defaultdict(list)
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            fields = _read(f"/proc/{entry}/stat").rpartition(")")[2].split()
            if len(fields) > 1:
                children[int(fields[1])].append(int(entry))
    out, todo = [], [root]
    while todo:
        pid = todo.pop()
        out.append(pid)
        todo += children.get(pid, [])
    return out


def _machine_busy() -> tuple[float, float]:
    """(busy, total) jiffies of all CPUs since boot."""
    values = [int(v) for v in _read("/proc/stat").splitlines()[0].split()[1:]]
    idle = values[3] + values[4]
    return sum(values) - idle, sum(values)


class Sampler(threading.Thread):
    """Polls the bench process: VmHWM, tree RSS, CPU time (the last values before exit)."""

    def __init__(self, pid: int) -> None:
        super().__init__(daemon=True)
        self.pid = pid
        self.vmhwm_kb = 0
        self.tree_rss_kb = 0
        self.cpu_s = 0.0
        self.stop = threading.Event()

    def run(self) -> None:
        while not self.stop.wait(0.25):
            hwm = _status_kb(self.pid, "VmHWM")
            if not hwm:
                continue
            self.vmhwm_kb = max(self.vmhwm_kb, hwm)
            self.cpu_s = max(self.cpu_s, _cpu_s(self.pid))
            self.tree_rss_kb = max(self.tree_rss_kb, sum(_status_kb(p, "VmRSS")
                                                         for p in _tree(self.pid)))


def run_bench(inventory: Path, home: Path, store: Path, args: argparse.Namespace) -> dict:
    argv = [sys.executable, "-m", "farm.cli.main", "--inventory", str(inventory), "bench",
            "--all", "--routes", args.routes, "--store", str(store), "--runs", str(args.runs),
            "--min-time", str(args.min_time), "--max-time", str(max(args.min_time * 4, 10)),
            "--warmup", "2", "--warmup-time", "0", "--pause", "0", "--profile-runs", "0",
            "--link-timeout", "120"]
    env = {**os.environ, "FARM_HOME": str(home), "PYTHONUNBUFFERED": "1"}
    busy0, total0 = _machine_busy()
    started = time.monotonic()
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=env)
    sampler = Sampler(proc.pid)
    sampler.start()
    events: list[dict] = []
    err: list[str] = []
    reader = threading.Thread(target=lambda: err.extend(proc.stderr), daemon=True)  # type: ignore[arg-type]
    reader.start()
    assert proc.stdout is not None
    for line in proc.stdout:  # stdout is not a terminal: the bench's events as jsonl
        if line.startswith("{"):
            try:
                event = json.loads(line)
            except ValueError:
                continue
            event["t_mono"] = time.monotonic() - started
            events.append(event)
    code = proc.wait()
    wall = time.monotonic() - started
    sampler.stop.set()
    sampler.join(2)
    reader.join(5)
    busy1, total1 = _machine_busy()
    return {"code": code, "wall_s": wall, "events": events, "stderr": "".join(err),
            "vmhwm_kb": sampler.vmhwm_kb, "tree_rss_kb": sampler.tree_rss_kb,
            "cpu_s": sampler.cpu_s, "machine_busy_s": (busy1 - busy0) / CLK_TCK,
            "machine_total_s": (total1 - total0) / CLK_TCK}


def first_t(events: list[dict], pred) -> float | None:  # type: ignore[no-untyped-def]
    return next((e["t_mono"] for e in events if pred(e)), None)


def report(result: dict, store_path: Path, devices: list[str], routes: list[str]) -> int:
    events = result["events"]
    run_id = next((e["run_id"] for e in events if e.get("event") == "run"), None)
    print(f"farm bench exit {result['code']}; run {run_id}")
    if run_id is None:
        print(result["stderr"][-3000:])
        return 1
    with ResultStore(store_path, create=False) as store:
        assert_store_ok(store)
        records = store.records(run_id)
    pairs = collections.Counter((r["device"], r["route"]) for r in records)
    expected = {(d, r) for d in devices for r in routes}
    lost = sorted(expected - set(pairs))
    dup = sorted(k for k, n in pairs.items() if n > 1)
    extra = sorted(set(pairs) - expected)
    statuses = collections.Counter(r["status"] for r in records)
    running = first_t(events, lambda e: e.get("event") == "phase" and e.get("phase") == "running")
    print(f"devices {len(devices)}, routes {','.join(routes)}")
    print(f"records stored {len(records)} / expected {len(expected)}: lost {len(lost)}, "
          f"duplicated {len(dup)}, unexpected {len(extra)}; by status {dict(statuses)}")
    for name in lost[:10] + dup[:10]:
        print(f"  problem: {name}")
    for r in records:
        if r["status"] not in ("ok",):
            detail = (r["status_detail"] or "")[:160]
            print(f"  {r['device']}/{r['route']}: {r['status']}: {detail}")
    print(f"bench wall {result['wall_s']:.1f} s (first device running at "
          f"{running if running is None else round(running, 1)} s; events {len(events)})")
    print(f"host peak RSS: bench process VmHWM {result['vmhwm_kb'] / 1024:.0f} MiB, its process "
          f"tree (sampled) {result['tree_rss_kb'] / 1024:.0f} MiB")
    cores = os.cpu_count() or 1
    busy, total = result["machine_busy_s"], result["machine_total_s"]
    print(f"CPU: {cores} cores; machine busy {busy:.0f} of {total:.0f} core-s "
          f"({100 * busy / max(total, 1e-9):.0f} %); bench process {result['cpu_s']:.1f} s "
          f"= {100 * result['cpu_s'] / max(busy, 1e-9):.0f} % of the busy time")
    share = result["cpu_s"] / max(busy, 1e-9)
    if busy >= 0.9 * total and share < 0.25:
        print("limit: the cores are saturated by the devices' own work (runners, sshd, qemu) "
              "and anything else on the machine; the host side is a small share")
    elif busy >= 0.9 * total:
        print("limit: the cores are saturated and the bench process is a large share of it")
    else:
        print("limit: the cores are not saturated (waiting: pauses, links, timeouts)")
    ok = not lost and not dup and not extra and result["code"] in (0, 3)
    return 0 if ok else 1


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--native", type=int, default=16)
    parser.add_argument("--aarch64", type=int, default=2)
    parser.add_argument("--routes", default="ort,tvm,custom")
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--min-time", type=float, default=1.0)
    parser.add_argument("--inventory", help="use this running lab (nothing brought up)")
    args = parser.parse_args()
    routes = [r.strip() for r in args.routes.split(",") if r.strip()]
    with tempfile.TemporaryDirectory(prefix="farm-fleet-") as tmp:
        work = Path(tmp)
        lab_dir = work / "lab"
        inventory = Path(args.inventory) if args.inventory else lab_dir / "devices.yaml"
        started = time.monotonic()
        if not args.inventory:
            up(LabSpec(native=args.native, aarch64=args.aarch64), lab_dir,
               owner_pid=os.getpid(), log=lambda m: None)
            print(f"lab up: {args.native} native + {args.aarch64} aarch64 in "
                  f"{time.monotonic() - started:.1f} s")
        try:
            devices = sorted(d.name for d in load_inventory(str(inventory)).devices.values()
                             if not d.is_local)
            result = run_bench(inventory, work / "home", work / "results.sqlite", args)
            return report(result, work / "results.sqlite", devices, routes)
        finally:
            if not args.inventory:
                down(lab_dir, log=lambda m: None)  # raises if anything is left behind
                print("lab down: nothing left")


if __name__ == "__main__":
    sys.exit(main())
