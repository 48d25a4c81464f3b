"""Deploy at the speed of the link (issue 17), on the lab, in one run:

1. bytes a first `farm bench --model tiny` ships to a fresh device vs what its routes need
   (agent + inputs + each route's code and weights, and its runtime when farm ships it,
   from the bench's own records); target <= 2x;
2. aggregate throughput at 8 devices, farm vs OpenSSH's `sftp` and `scp` (same devices,
   same files, same cipher, interleaved rounds, median); target farm >= 0.8x the faster;
3. every device's link shaped to 20 Mbit/s (tc tbf): wall time of 8 devices vs 1;
   target <= 1.3x;
plus the cipher check behind the AES-GCM preference (one device, farm's upload, host CPU
seconds per 100 MB). Needs root: brings up its own 8-device lab in a private $FARM_HOME
unless --inventory points at a running one, and tears down what it started.

    python benchmarks/deploy_scale.py [--payload-mb 64] [--shaped-mb 8] [--rounds 3]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import farm.transports.ssh as ssh_module
from farm.artifacts import Artifact, make_artifact
from farm.deploy import deploy
from farm.deploy.deployer import deploy_device
from farm.devices.fanout import fan_out
from farm.inventory import load_inventory
from farm.inventory.device import Device
from farm.lab.records import load_state
from farm.lab.shaping import shape, unshape
from farm.results.store import ResultStore
from farm.transports import open_transport

CIPHER = "aes128-gcm@openssh.com"
FLEET = 8
OPENSSH_DIR = "/root/openssh-bench"


def farm_cli(*argv: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "farm.cli.main", *argv], text=True,
                          capture_output=True, env=env, check=False)


def wipe(devices: list[Device], *paths: str) -> None:
    def one(device: Device) -> None:
        with open_transport(device) as t:
            t.run(["rm", "-rf", "--", device.workdir, *paths])
    for name, outcome in fan_out(devices, one).items():
        if isinstance(outcome, BaseException):
            raise SystemExit(f"cannot wipe {name}: {outcome}")


def manifest_bytes(device: Device) -> tuple[int, int]:
    with open_transport(device) as t:
        text = t.run(["cat", f"{device.workdir}/manifest.json"], check=False).stdout
    files = json.loads(text or "{}").get("files", {})
    return sum(int(f["size"]) for f in files.values()), len(files)


# -- 1. what a first bench ships ---------------------------------------------------------
def first_bench(inventory: Path, device: Device, scratch: Path) -> tuple[int, int, str]:
    """(bytes shipped, bytes needed, breakdown) for `farm bench --model tiny` on a fresh
    device and a fresh $FARM_HOME (the model is generated, nothing is cached)."""
    home = scratch / "bench-home"
    env = {**os.environ, "FARM_HOME": str(home)}
    store = scratch / "bench.sqlite"
    wipe([device])
    proc = farm_cli("--inventory", str(inventory), "bench", "--model", "tiny", "--device",
                    device.name, "--store", str(store), "--output", "json", env=env)
    if proc.returncode != 0:
        raise SystemExit(f"farm bench failed ({proc.returncode}): {proc.stderr[-1500:]}")
    shipped, files = manifest_bytes(device)
    with ResultStore(store) as results:
        run = results.runs()[-1].run_id
        records = results.records(run)
    with open_transport(device) as t:
        listing = t.run(["sh", "-c", f"cd {device.workdir} && stat -c '%s %n' agent/* "
                         "inputs/*"]).stdout.split()
    fixed = sum(int(size) for size in listing[0::2])  # the agent and the input tensors
    need = fixed
    parts = [f"agent+inputs {fixed:,}"]
    for record in records:
        sizes = record.get("sizes") or {}
        # ORT's runtime is installed on the device, not shipped; TVM's and custom's are
        shipped_runtime = sizes.get("runtime", 0) if record["route"] != "ort" else 0
        route_need = int(sizes.get("code", 0)) + int(sizes.get("weights", 0)) + shipped_runtime
        need += route_need
        parts.append(f"{record['route']} {route_need:,}")
    return shipped, need, f"{files} files; need = " + " + ".join(parts)


# -- 2. aggregate throughput, farm vs OpenSSH ----------------------------------------------
def openssh_argv(tool: str, device: Device) -> list[str]:
    return [tool, "-q", "-i", str(device.identity_file), "-o",
            f"UserKnownHostsFile={device.known_hosts}", "-o", "BatchMode=yes", "-o",
            f"Ciphers={CIPHER}", "-P", str(device.port)]


def openssh_round(tool: str, devices: list[Device], files: list[Path]) -> float:
    wipe(devices, OPENSSH_DIR)
    for d in devices:
        with open_transport(d) as t:
            t.run(["mkdir", "-p", OPENSSH_DIR])
    started = time.perf_counter()
    procs = []
    for d in devices:
        target = f"{d.user or 'root'}@{d.host}"
        if tool == "sftp":
            batch = "".join(f"put {f} {OPENSSH_DIR}/{f.name}\n" for f in files)
            p = subprocess.Popen([*openssh_argv("sftp", d), "-b", "-", target],
                                 stdin=subprocess.PIPE, stdout=subprocess.DEVNULL,
                                 stderr=subprocess.PIPE, text=True)
            assert p.stdin is not None
            p.stdin.write(batch)
            p.stdin.close()
        else:
            p = subprocess.Popen([*openssh_argv("scp", d), *map(str, files),
                                  f"{target}:{OPENSSH_DIR}/"], stdout=subprocess.DEVNULL,
                                 stderr=subprocess.PIPE, text=True)
        procs.append(p)
    for p in procs:
        if p.wait() != 0:
            raise SystemExit(f"{tool} failed: {p.stderr.read() if p.stderr else ''}")
    return time.perf_counter() - started


def farm_round(devices: list[Device], payload: list[Artifact]) -> float:
    wipe(devices)
    started = time.perf_counter()
    results = deploy(devices, bundle=lambda _d: payload)
    elapsed = time.perf_counter() - started
    for name, r in results.items():
        if not r.ok:
            raise SystemExit(f"farm deploy to {name} failed: {r.error}")
    return elapsed


def negotiated_cipher(device: Device) -> str:
    transport = open_transport(device)
    try:
        return transport.client().get_transport().remote_cipher  # type: ignore[union-attr]
    finally:
        transport.close()


# -- cipher check ----------------------------------------------------------------------------
def cipher_cost(device: Device, blob: Path, cipher: str) -> tuple[float, float]:
    """(MB/s, host CPU s per 100 MB) of farm's upload with `cipher` first."""
    saved = ssh_module.PREFERRED_CIPHERS
    ssh_module.PREFERRED_CIPHERS = (cipher,)
    try:
        t = open_transport(device)
        t.run(["true"])
        assert t.client().get_transport().remote_cipher == cipher  # type: ignore[union-attr]
        cpu, wall = time.process_time(), time.perf_counter()
        t.put(blob, "/root/cipher-check.bin")
        cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
        t.run(["rm", "-f", "/root/cipher-check.bin"])
        t.close()
    finally:
        ssh_module.PREFERRED_CIPHERS = saved
    size = blob.stat().st_size
    return size / wall / 1e6, cpu / size * 1e8


def interleaved(rounds: int, runs: dict[str, Callable[[], float]]) -> dict[str, float]:
    samples: dict[str, list[float]] = {k: [] for k in runs}
    for _ in range(rounds):
        for name, run in runs.items():
            samples[name].append(run())
    return {k: statistics.median(v) for k, v in samples.items()}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--inventory", help="a running lab's inventory (default: start one)")
    parser.add_argument("--payload-mb", type=float, default=64.0,
                        help="per-device payload of the throughput comparison")
    parser.add_argument("--shaped-mb", type=float, default=8.0,
                        help="per-device payload over the 20 Mbit/s links")
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    scratch = Path(tempfile.mkdtemp(prefix="farm-deploy-scale-"))
    started_lab = args.inventory is None
    env = {**os.environ, "FARM_HOME": str(scratch / "home")}
    inventory = Path(args.inventory) if args.inventory else scratch / "home" / "lab" / \
        "devices.yaml"
    if started_lab:
        up = farm_cli("lab", "up", "--devices", str(FLEET), "--aarch64", "0", env=env)
        if up.returncode != 0:
            raise SystemExit(f"farm lab up failed: {up.stderr[-1500:]}")
    try:
        devices = [d for d in load_inventory(str(inventory)).devices.values()
                   if not d.is_local and d.arch == os.uname().machine][:FLEET]
        if len(devices) < FLEET:
            raise SystemExit(f"need {FLEET} native devices in {inventory}, found {len(devices)}")
        lab = load_state(inventory.parent)
        if lab is None:
            raise SystemExit(f"{inventory.parent} holds no lab state (needed for tc shaping)")
        load = os.getloadavg()[0]
        print(f"host: {os.cpu_count()} cores, load {load:.1f} at start; cipher {CIPHER}")

        shipped, need, detail = first_bench(inventory, devices[0], scratch)
        ratio = shipped / need
        print(f"\n1. first `farm bench --model tiny` on a fresh device: shipped {shipped:,} B, "
              f"routes need {need:,} B -> {ratio:.2f}x ({detail})")

        files = []
        for i, share in enumerate((0.6, 0.3, 0.1)):  # a few files of different sizes
            path = scratch / f"payload{i}.bin"
            path.write_bytes(os.urandom(int(args.payload_mb * share * 2**20)))
            files.append(path)
        payload = [make_artifact("file", f, "artifacts") for f in files]
        per_device = sum(a.size for a in payload)
        cipher = negotiated_cipher(devices[0])
        if cipher != CIPHER:
            raise SystemExit(f"farm negotiated {cipher}, not {CIPHER}: not the same cipher")
        walls = interleaved(args.rounds, {
            "farm": lambda: farm_round(devices, payload),
            "sftp": lambda: openssh_round("sftp", devices, files),
            "scp": lambda: openssh_round("scp", devices, files)})
        agg = {k: FLEET * per_device / v / 1e6 for k, v in walls.items()}
        best = max(agg["sftp"], agg["scp"])
        print(f"\n2. {FLEET} devices x {per_device / 2**20:.0f} MiB ({len(files)} files), median "
              f"of {args.rounds} interleaved rounds, wall incl. connect (farm also verifies "
              "sha256 on the device):")
        for k in ("farm", "sftp", "scp"):
            print(f"   {k:5} {walls[k]:6.2f} s  aggregate {agg[k]:7.1f} MB/s")
        print(f"   farm / faster OpenSSH = {agg['farm'] / best:.2f}x")

        small = scratch / "shaped.bin"
        small.write_bytes(os.urandom(int(args.shaped_mb * 2**20)))
        shaped_payload = [make_artifact("file", small, "artifacts")]
        for d in devices:
            shape(lab, d.name, "20mbit")
        try:
            shaped = interleaved(args.rounds, {
                "1": lambda: farm_round(devices[:1], shaped_payload),
                "8": lambda: farm_round(devices, shaped_payload)})
        finally:
            for d in devices:
                unshape(lab, d.name)
        print(f"\n3. 20 Mbit/s per device, {args.shaped_mb:.0f} MiB each: 1 device "
              f"{shaped['1']:.2f} s, {FLEET} devices {shaped['8']:.2f} s -> "
              f"{shaped['8'] / shaped['1']:.2f}x")

        blob = scratch / "cipher.bin"
        blob.write_bytes(os.urandom(64 << 20))
        print("\ncipher check (one device, farm upload of 64 MiB, host CPU per 100 MB):")
        for c in ("aes128-ctr", "aes128-gcm@openssh.com", "aes256-gcm@openssh.com"):
            rate, cpu = cipher_cost(devices[1], blob, c)
            print(f"   {c:24} {rate:6.1f} MB/s  {cpu:.2f} CPU s/100 MB")

        # what a repeated deploy costs once everything is there
        deploy_device(devices[0], payload)
        again = statistics.median(deploy_device(devices[0], payload).seconds
                                  for _ in range(args.rounds))
        print(f"\nunchanged re-deploy of the payload to 1 device: {again:.3f} s")
        print(f"\ntargets: bytes <= 2x -> {ratio:.2f}x {'MET' if ratio <= 2 else 'MISSED'}; "
              f"8-device throughput >= 0.8x OpenSSH -> {agg['farm'] / best:.2f}x "
              f"{'MET' if agg['farm'] / best >= 0.8 else 'MISSED'}; shaped 8 vs 1 <= 1.3x -> "
              f"{shaped['8'] / shaped['1']:.2f}x "
              f"{'MET' if shaped['8'] / shaped['1'] <= 1.3 else 'MISSED'}; "
              f"load {os.getloadavg()[0]:.1f} at end")
    finally:
        if started_lab:
            down = farm_cli("lab", "down", env=env)
            print(down.stdout.strip().splitlines()[-1] if down.stdout.strip() else down.stderr)
        shutil.rmtree(scratch, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
