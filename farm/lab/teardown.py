"""Remove a lab by its journal, then prove nothing of it is left.

`remove_recorded` works from the records alone (no live Python objects), so it also cleans
after `farm lab up` or the devices were killed at any point: processes first (recorded pid
and start time, anything whose command line holds a device dir, anything inside a lab
namespace, any session carrying FARM_LAB_DIR), then namespaces, veths, the bridge and the
host's route to the subnet behind a gateway.
`leftovers` lists whatever of the lab still exists: processes, namespaces, links, mount
namespaces and mounts; empty means clean.
"""

from __future__ import annotations

import time

from farm.lab.netns_backend import remove_link, remove_netns, remove_route, route_exists
from farm.lab.records import LabState
from farm.lab.system import (
    descendants,
    is_alive,
    link_exists,
    mounts_under,
    netns_list,
    netns_pids,
    pids_in_namespaces,
    pids_matching,
    pids_with_env,
    terminate,
)


def _records(state: LabState, kind: str) -> list[dict]:
    return [r for r in state.resources if r["kind"] == kind]


def lab_pids(state: LabState) -> set[int]:
    """Every live process that belongs to the lab, found by the records."""
    pids: set[int] = set()
    for rec in _records(state, "process"):
        if is_alive(rec.get("pid"), rec.get("start")):
            pids.add(rec["pid"])
            pids.update(descendants(rec["pid"]))
        match = rec["match"]
        pids.update(pids_matching([match] if isinstance(match, str) else match))
    existing = set(netns_list())
    for rec in _records(state, "netns"):
        if rec["name"] in existing:
            pids.update(netns_pids(rec["name"]))
    mnt = {r["ns"] for r in _records(state, "mntns")}
    if mnt:
        pids.update(pids_in_namespaces("mnt", mnt))
    # sessions of loopback devices live in no namespace of ours: their env names the lab
    pids.update(pids_with_env(f"FARM_LAB_DIR={state.lab_dir}"))
    return pids


def remove_recorded(state: LabState) -> list[str]:
    """Kill and delete everything recorded; return what was done."""
    actions: list[str] = []
    pids = lab_pids(state)
    if pids:
        actions.append(f"stopped processes {sorted(pids)}")
        remaining = terminate(pids)
        if remaining:  # e.g. a session started during the grace period
            terminate(lab_pids(state), grace_s=0.5)
    existing = set(netns_list())
    for rec in _records(state, "netns"):
        if rec["name"] in existing:
            terminate(netns_pids(rec["name"]), grace_s=0.5)
            remove_netns(rec["name"])
            actions.append(f"deleted netns {rec['name']}")
    for kind in ("veth", "bridge"):
        for rec in _records(state, kind):
            if link_exists(rec["name"]):
                remove_link(rec["name"])
                actions.append(f"deleted {kind} {rec['name']}")
    for rec in _records(state, "route"):
        if route_exists(rec["prefix"]):
            remove_route(rec["prefix"])
            actions.append(f"deleted route {rec['prefix']}")
    # a veth goes away with its namespace, but the kernel does that asynchronously
    links = [r["name"] for r in state.resources if r["kind"] in ("veth", "bridge")]
    deadline = time.monotonic() + 2.0
    while any(link_exists(n) for n in links) and time.monotonic() < deadline:
        time.sleep(0.05)
    return actions


def summary(actions: list[str]) -> str:
    """'stopped 3 processes; deleted 3 netns, 1 bridge' from `remove_recorded`'s list."""
    stopped = sum(a.count(",") + 1 for a in actions if a.startswith("stopped"))
    counts: dict[str, int] = {}
    for action in actions:
        if action.startswith("deleted "):
            kind = action.split()[1]
            counts[kind] = counts.get(kind, 0) + 1
    parts = [f"stopped {stopped} processes"] if stopped else []
    if counts:
        parts.append("deleted " + ", ".join(f"{n} {k}" for k, n in counts.items()))
    return "; ".join(parts) or "nothing was running"


def leftovers(state: LabState) -> list[str]:
    """What of the lab still exists (empty when the teardown was complete)."""
    left = [f"process {pid}" for pid in sorted(lab_pids(state))]
    existing = set(netns_list())
    left += [f"netns {r['name']}" for r in _records(state, "netns") if r["name"] in existing]
    left += [f"{r['kind']} {r['name']}" for r in state.resources
             if r["kind"] in ("veth", "bridge") and link_exists(r["name"])]
    left += [f"route {r['prefix']}" for r in _records(state, "route")
             if route_exists(r["prefix"])]
    mnt = {r["ns"] for r in _records(state, "mntns")}
    if mnt and pids_in_namespaces("mnt", mnt):
        left.append(f"mount namespaces {sorted(mnt)} still have processes")
    prefixes = [state.lab_dir] + [r["mount"] for r in _records(state, "netns")]
    left += mounts_under(prefixes)
    return left

