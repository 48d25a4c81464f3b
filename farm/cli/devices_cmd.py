"""`farm devices` — list the fleet; `devices check` probes it (with the load, CPU steal and
frequency it sees, and the noise floor the store keeps); `devices calibrate` measures the
noise floor with A/A runs (`farm.bench.calibrate`); `devices trust` pins host keys."""

from __future__ import annotations

import argparse
import json
import sys
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from farm.cli.term import stdout_console
from farm.devices.check import CheckResult, check_device
from farm.devices.fanout import fan_out
from farm.errors import EXIT_PARTIAL, UsageError
from farm.inventory import load_inventory
from farm.paths import state_dir
from farm.results.emulation import device_label
from farm.transports.trust import fetch_host_key, pin_host_key


def register(sub: argparse._SubParsersAction) -> None:
    parser = sub.add_parser("devices", help="list, check and trust devices")
    parser.add_argument("--output", choices=["table", "json"], default="table")
    parser.set_defaults(func=run_list)
    actions = parser.add_subparsers(dest="action", metavar="ACTION")
    check = actions.add_parser("check", help="pre-flight probe: reachable, arch, memory, "
                                             "disk, load, governor, thermal, Python")
    check.add_argument("names", nargs="*", metavar="NAME")
    check.add_argument("--all", action="store_true", help="every device of the inventory")
    check.add_argument("--output", choices=["table", "json"], default="table")
    check.add_argument("--store", metavar="FILE",
                       help="result store whose noise floors to show (default: farm's own)")
    check.set_defaults(func=run_check)
    cal = actions.add_parser("calibrate", help="measure the device's noise floor: A/A pairs "
                                               "of a reference bench, kept in the store")
    cal.add_argument("name", metavar="NAME")
    cal.add_argument("--model", default="tiny", help="reference workload (default tiny)")
    cal.add_argument("--routes", default="ort", help="its routes (default ort)")
    cal.add_argument("--pairs", type=int, default=3, help="A/A pairs (default 3)")
    cal.add_argument("--rounds", type=int, default=None,
                     help="rounds of each bench (default: farm bench's)")
    cal.add_argument("--store", metavar="FILE", help="result store (default: farm's own)")
    cal.add_argument("--output", choices=["table", "json"], default="table")
    cal.set_defaults(func=run_calibrate)
    trust = actions.add_parser("trust", help="show a device's SSH host key and pin it on request")
    trust.add_argument("name", metavar="NAME")
    trust.add_argument("--pin", action="store_true", help="pin the presented key without asking")
    trust.add_argument("--expect", metavar="SHA256:…",
                       help="pin only if the presented fingerprint is this one")
    trust.set_defaults(func=run_trust)


def run_list(args: argparse.Namespace) -> int:
    inventory = load_inventory(args.inventory)
    devices = list(inventory.devices.values())
    if args.output == "json":
        # `via` names the gateway; its resolved Device is not repeated in every row
        rows = [{k: v for k, v in vars(d).items() if k != "gateway"} for d in devices]
        print(json.dumps(rows, indent=2))
        return 0
    table = Table(title=f"devices ({inventory.source or 'built-in only'})")
    for column in ("name", "transport", "address", "arch", "triple", "features", "cores", "tags"):
        table.add_column(column)
    for d in devices:
        address = f"{d.user or 'root'}@{d.host}:{d.port}" if d.host else (d.key or "-")
        if d.via:
            address += f" via {d.via}"
        table.add_row(device_label(d.name, d.emulated), d.transport, address, d.arch,
                      d.triple, ",".join(d.features), str(d.cores), ",".join(d.tags))
    _stdout_console().print(table)
    if inventory.source is None and Path("devices.example.yaml").is_file():
        # the repository root: its example is documentation, not this user's fleet
        print("farm: no ./devices.yaml here, only the built-in `local`; devices.example.yaml "
              "documents every key: copy it to devices.yaml and describe your devices",
              file=sys.stderr)
    return 0


def run_check(args: argparse.Namespace) -> int:
    inventory = load_inventory(args.inventory)
    if not args.names and not args.all:
        raise UsageError("name a device or pass --all", hint="e.g. `farm devices check local`")
    devices = [d for d in inventory.select(args.names, args.all) if d.has_shell]
    outcomes = fan_out(devices, check_device)
    results = [o if isinstance(o, CheckResult) else CheckResult(n, False, error=str(o))
               for n, o in outcomes.items()]
    floors = _floors([r.device for r in results], args.store)
    for r in results:
        _add_noise(r, floors.get(r.device))
    record = {"checked_utc": datetime.now(timezone.utc).isoformat(),
              "inventory": inventory.source, "results": [r.to_json() for r in results]}
    out_dir = state_dir() / "checks"
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / f"check-{datetime.now(timezone.utc):%Y%m%dT%H%M%S%fZ}.json"
    path.write_text(json.dumps(record, indent=2))
    if args.output == "json":
        print(json.dumps(record, indent=2))
    else:
        _stdout_console().print(render_checks(results))
        print(f"recorded: {path}", file=sys.stderr)
    return 0 if all(r.healthy for r in results) else EXIT_PARTIAL


def _floors(devices: list[str], store_path: str | None) -> dict[str, Any]:
    """The noise floors the store keeps (none when there is no store yet)."""
    from farm.errors import StoreError
    from farm.results.floor import load_floors
    from farm.results.open_store import open_store

    try:
        with open_store(store_path, create=False) as store:
            return load_floors(store, devices)
    except StoreError:
        return {}


def _add_noise(result: CheckResult, floor: Any) -> None:
    """CPU steal over the probe's window (two /proc/stat readings) and the noise floor:
    `healthy` says the device can run a bench, these say how far to trust one."""
    from farm.results.noise import cpu_shares, steal_warning

    shares = cpu_shares(result.probe.get("state_before"), result.probe.get("state"))
    result.probe["cpu_window"] = shares
    warning = steal_warning(shares)
    if warning:
        result.warnings.append(warning)
    if floor is not None:
        result.probe["noise_floor"] = {"floor_pct": floor.floor_pct,
                                       "measured_utc": floor.measured_utc}
    elif not result.error:
        result.warnings.append("no noise floor: `farm devices calibrate "
                               f"{result.device}` measures how far identical runs differ")


def render_checks(results: list[CheckResult]) -> Table:
    table = Table(title="device pre-flight check",
                  caption="steal / busy: share of CPU time over the probe's 1 s window "
                          "(/proc/stat); noise floor: spread of the median over A/A runs "
                          "(`farm devices calibrate`)", caption_justify="left")
    for column in ("device", "health", "arch", "python", "mem avail", "disk free", "load 1m",
                   "steal %", "busy %", "governor", "freq MHz", "thermal °C", "noise floor",
                   "notes"):
        table.add_column(column)
    for r in results:
        p = r.probe
        st = p.get("state") or {}
        mem = st.get("mem_available_kb")
        freqs = list((st.get("freq_khz") or {}).values())
        temps = list((st.get("thermal_c") or {}).values())
        window = p.get("cpu_window") or {}
        floor = (p.get("noise_floor") or {}).get("floor_pct") or {}
        table.add_row(
            r.device, ("healthy, noisy" if any("noisy" in w for w in r.warnings) else
                       "healthy") if r.healthy else "UNHEALTHY", str(p.get("arch", "-")),
            str(p.get("python", "-")),
            f"{mem // 1024} MiB" if mem else "-",
            f"{st['disk_free_kb'] // 1024} MiB" if st.get("disk_free_kb") else "-",
            f"{st['load'][0]:.2f}" if st.get("load") else "-",
            f"{window['steal_pct']:.1f}" if window.get("steal_pct") is not None else "n/a",
            f"{window['busy_pct']:.0f}" if window.get("busy_pct") is not None else "n/a",
            ",".join(sorted(set((st.get("governor") or {}).values()))) or "n/a",
            f"{min(freqs) // 1000}-{max(freqs) // 1000}" if freqs else "n/a",
            f"{max(temps):.1f}" if temps else "n/a",
            f"±{floor['median']:.1f} %" if floor.get("median") is not None else "-",
            "; ".join(r.problems + r.warnings + ([r.error] if r.error else [])),
        )
    return table


def run_calibrate(args: argparse.Namespace) -> int:
    from dataclasses import asdict

    from farm.bench.calibrate import calibrate, reference_config
    from farm.bench.config import DEFAULT_ROUNDS
    from farm.results.floor import METRICS
    from farm.results.open_store import open_store

    device = load_inventory(args.inventory).get(args.name)
    routes = [r.strip() for r in args.routes.split(",") if r.strip()]
    config = reference_config(args.model, routes, args.rounds or DEFAULT_ROUNDS)
    err = Console(stderr=True, highlight=False)
    with open_store(args.store) as store:
        floor = calibrate(device, store, config, pairs=args.pairs,
                          say=lambda line: err.print(line, markup=False))
        where = str(store)
    if args.output == "json":
        print(json.dumps(asdict(floor), indent=2))
    else:
        print(f"{device.name}: noise floor {floor.describe()}")
        for pair in floor.pairs:
            moves = "; ".join(
                f"{key}: " + ", ".join(f"{m} {c[m]:+.2f} %" for m in METRICS if m in c)
                for key, c in pair["changes"].items())
            print(f"  {pair['base']} -> {pair['new']}: {moves}")
        print(f"kept in {where}: `farm compare` calls a change inside it 'within noise'")
    return 0


def run_trust(args: argparse.Namespace) -> int:
    device = load_inventory(args.inventory).get(args.name)
    presented = fetch_host_key(device)
    via = f" via {' -> '.join(h.name for h in device.hops)}" if device.via else ""
    print(f"{device.name} ({presented.host_name}{via}) presents {presented.key.get_name()} "
          f"{presented.fingerprint}")
    if presented.pinned == "match":
        print("already pinned: this key matches the known_hosts entry; nothing to do")
        return 0
    if presented.pinned == "changed":
        print("WARNING: this key differs from the one pinned for this device.")
    if args.expect:
        if args.expect != presented.fingerprint:
            raise UsageError(f"fingerprint mismatch: expected {args.expect}, device presents "
                             f"{presented.fingerprint}; nothing pinned",
                             hint="verify the fingerprint on the device itself")
    elif not args.pin:
        if not sys.stdin.isatty():
            print("not pinned: re-run with --pin (or --expect FINGERPRINT) to pin this key")
            return 1
        answer = input("pin this key? [y/N] ").strip().lower()
        if answer not in ("y", "yes"):
            print("not pinned")
            return 1
    path = pin_host_key(device, presented)
    print(f"pinned in {path}")
    return 0


def _stdout_console() -> Console:
    """The terminal's width on a TTY; 160 columns in a log, so tables stay one line a row."""
    return stdout_console()
