"""Write the running lab as an inventory (`<lab_dir>/devices.yaml`) plus its known_hosts.

The file is in the format `farm.inventory.loader` parses, and is re-read with it before
`farm lab up` returns, so a lab that writes an inventory farm cannot load fails loudly.
"""

from __future__ import annotations

import os
from pathlib import Path

import yaml

from farm.inventory import load_inventory
from farm.lab.records import LabState
from farm.lab.sshd import known_hosts_line, public_key
from farm.lab.system import LabError

INVENTORY_FILE = "devices.yaml"
KNOWN_HOSTS_FILE = "known_hosts"
CLIENT_KEY = "client_key"


def triple(arch: str) -> str:
    return f"{arch}-linux-gnu"


def write_inventory(state: LabState) -> Path:
    """Write devices.yaml and known_hosts for `state`; return the inventory path."""
    lab_dir = Path(state.lab_dir)
    known_hosts = lab_dir / KNOWN_HOSTS_FILE
    lines = [known_hosts_line(d.address, d.port, public_key(Path(d.dir) / "ssh_host_ed25519_key"))
             for d in state.devices]
    known_hosts.write_text("\n".join(lines) + "\n")
    cores = os.cpu_count() or 1
    devices = []
    for dev in state.devices:
        emulated = dev.arch == "aarch64"
        where = (f"netns {dev.netns}" if dev.netns else "loopback") + \
            f", sshd {dev.address}:{dev.port}"
        if dev.via:
            where += f", reachable only through {dev.via}"
        devices.append({
            "name": dev.name,
            "transport": "ssh",
            "host": dev.address,
            "port": dev.port,
            "user": dev.user,
            "identity_file": str(lab_dir / CLIENT_KEY),
            "known_hosts": str(known_hosts),
            "arch": dev.arch,
            "triple": triple(dev.arch),
            "features": list(dev.features),
            "cores": cores,
            "python": dev.python,
            "workdir": dev.workdir,
            "tags": ["lab", "emulated", "qemu"] if emulated else ["lab", "native"],
            # qemu-user time says nothing about a phone: reports must not rank it
            "emulated": emulated,
            "description": (f"farm lab: emulated aarch64 (qemu-user {dev.name}), {where}"
                            if emulated else f"farm lab: native device, {where}"),
        })
        if dev.via:
            devices[-1]["via"] = dev.via
    header = ("# Written by `farm lab up` for the running lab; rewritten on every `up`.\n"
              "# Use it with: farm --inventory "
              f"{lab_dir / INVENTORY_FILE} devices check --all\n")
    path = lab_dir / INVENTORY_FILE
    body = yaml.safe_dump({"version": 1, "devices": devices}, sort_keys=False,
                          default_flow_style=None)
    path.write_text(header + body)
    try:
        load_inventory(str(path))
    except Exception as exc:
        raise LabError(f"the lab wrote an inventory farm cannot load: {exc}",
                       hint="the lab directory must be a path of letters, digits and ._/~+- "
                            "(use --dir to choose another)") from exc
    return path
