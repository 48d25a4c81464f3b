"""Slow links for lab devices: a token-bucket rate limit (`tc … tbf`) on the bridge side
of a device's veth, which is the host→device direction (uploads). netem does not exist on
the lab's kernel, tbf does. The qdisc goes away with the veth
at `farm lab down`; `unshape` removes it earlier.
"""

from __future__ import annotations

import subprocess

from farm.lab.records import LabState
from farm.lab.system import LabError


def host_veth(state: LabState, device: str) -> str:
    """The bridge-side veth of a namespace device (the interface to shape)."""
    netns = state.device(device).netns
    for record in state.resources:
        if record.get("kind") == "veth" and record.get("netns") == netns and netns:
            return str(record["name"])
    raise LabError(f"lab device {device} has no veth to shape ({state.mode} mode)",
                   hint="link shaping needs a namespace lab (root)")


def _tc(argv: list[str]) -> None:
    proc = subprocess.run(["tc", *argv], capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise LabError(f"`tc {' '.join(argv)}` failed: {proc.stderr.strip()}",
                       hint="is iproute2 installed and are we root?")


def shape(state: LabState, device: str, rate: str = "20mbit") -> None:
    """Limit host→device traffic of `device` to `rate` (tc syntax, e.g. 20mbit)."""
    _tc(["qdisc", "replace", "dev", host_veth(state, device), "root", "tbf", "rate", rate,
         "burst", "64kb", "latency", "400ms"])


def unshape(state: LabState, device: str) -> None:
    subprocess.run(["tc", "qdisc", "del", "dev", host_veth(state, device), "root"],
                   capture_output=True, check=False)
