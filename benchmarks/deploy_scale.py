"""Deploy scaling on the lab: the same artifacts to 1, 2, 4 and 8 devices.

Prints wall time per fleet size and its ratio to one device, then the per-device cost of
an unchanged re-deploy. Targets (issue 2): 8 devices <= 2x one device; unchanged
re-deploy <= 0.3 s per device. Needs root: brings up its own lab of 8 native devices
unless --inventory points at a running one, and tears down what it started.

    .venv/bin/python benchmarks/deploy_scale.py [--payload-mb 8] [--inventory FILE]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from farm.build.registry import Artifact, make_artifact
from farm.deploy.bundle import bundle_for
from farm.deploy.deployer import deploy_device
from farm.devices.fanout import fan_out
from farm.inventory import load_inventory
from farm.inventory.device import Device
from farm.transports import open_transport

SIZES = (1, 2, 4, 8)


def wipe(devices: list[Device]) -> None:
    def one(device: Device) -> None:
        with open_transport(device) as t:
            t.run(["rm", "-rf", "--", device.workdir])
    for name, outcome in fan_out(devices, one).items():
        if isinstance(outcome, BaseException):
            raise SystemExit(f"cannot wipe {name}: {outcome}")


def timed_deploy(devices: list[Device], payload: list[Artifact]) -> float:
    started = time.perf_counter()
    outcomes = fan_out(devices, lambda d: deploy_device(d, bundle_for(d) + payload))
    elapsed = time.perf_counter() - started
    for name, result in outcomes.items():
        if isinstance(result, BaseException) or not result.ok:
            raise SystemExit(f"deploy to {name} failed: {result}")
    return elapsed


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--inventory", help="a running lab's inventory (default: start one)")
    parser.add_argument("--payload-mb", type=float, default=8.0)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    started_lab = False
    inventory_path = args.inventory
    if inventory_path is None:
        subprocess.run([sys.executable, "-m", "farm.cli.main", "lab", "up", "--devices", "8",
                        "--aarch64", "0"], check=True)
        started_lab = True
        inventory_path = str(Path(os.environ.get("FARM_HOME", ".farm")) / "lab" / "devices.yaml")
    try:
        devices = [d for d in load_inventory(inventory_path).devices.values() if not d.is_local]
        if len(devices) < max(SIZES):
            raise SystemExit(f"need {max(SIZES)} devices in {inventory_path}, found {len(devices)}")
        with tempfile.TemporaryDirectory() as tmp:
            blob = Path(tmp) / "payload.bin"
            blob.write_bytes(os.urandom(int(args.payload_mb * 1024 * 1024)))
            payload = [make_artifact("file", blob, "artifacts")]
            size_mb = (sum(a.size for a in bundle_for(devices[0])) + payload[0].size) / 2**20
            print(f"payload per device: {size_mb:.1f} MiB ({len(bundle_for(devices[0])) + 1} "
                  f"files); median of {args.repeats} runs")
            fresh: dict[int, float] = {}
            for n in SIZES:
                samples = []
                for _ in range(args.repeats):
                    wipe(devices[:n])
                    samples.append(timed_deploy(devices[:n], payload))
                fresh[n] = statistics.median(samples)
            print(f"{'devices':>8} {'wall s':>8} {'ratio to 1':>11}")
            for n in SIZES:
                print(f"{n:>8} {fresh[n]:>8.3f} {fresh[n] / fresh[1]:>11.2f}")
            again = [timed_deploy(devices[:8], payload) for _ in range(args.repeats)]
            per_device = statistics.median(again) / 8
            single = [timed_deploy(devices[:1], payload) for _ in range(args.repeats)]
            print(f"unchanged re-deploy: 8 devices {statistics.median(again):.3f} s "
                  f"({per_device:.3f} s per device), 1 device {statistics.median(single):.3f} s")
            print(f"targets: 8 devices <= 2x one device -> {fresh[8] / fresh[1]:.2f}x "
                  f"{'MET' if fresh[8] / fresh[1] <= 2 else 'MISSED'}; unchanged <= 0.3 s "
                  f"per device -> {statistics.median(single):.3f} s "
                  f"{'MET' if statistics.median(single) <= 0.3 else 'MISSED'}")
    finally:
        if started_lab:
            subprocess.run([sys.executable, "-m", "farm.cli.main", "lab", "down"], check=False)
    return 0


if __name__ == "__main__":
    sys.exit(main())
