"""Resolve `via:` (ProxyJump through another inventory device) into each device's gateway.

A device with `via: G` is reached by connecting to G first and opening a channel from G to
the device's `host:port`; G may have its own `via`. Once every device of the file is parsed
the loader calls `gateway_problems`: a name that is no device of the file, a device that is
its own gateway, a chain that loops, a gateway or device that is not `ssh`, or a chain
deeper than `MAX_HOPS` is one ConfigError naming the file, the line of the `via` key and
the device. Then `with_gateways` returns the devices in file order with `gateway` set (the
gateway's own chain included), so a transport never looks anything up by name.
"""

from __future__ import annotations

import dataclasses
import difflib

from farm.errors import ConfigError
from farm.inventory.device import Device

# OpenSSH sets no limit; a longer chain in a device farm is a mistake, not a topology
MAX_HOPS = 8


def gateway_problems(devices: list[Device], via_lines: dict[str, int],
                     file: str) -> list[ConfigError]:
    """One error per wrong `via` (at the device whose own `via` is wrong; a loop once, at
    its first device in the file); `via_lines` gives the line of each `via` key."""
    by_name = {d.name: d for d in devices}
    errors: list[ConfigError] = []

    def error(device: Device, message: str, hint: str) -> None:
        errors.append(ConfigError(message, file=file, line=via_lines.get(device.name),
                                  device=device.name, key="via", hint=hint))

    for device in devices:
        if device.via is not None:
            problem = _direct_problem(device, by_name)
            if problem is not None:
                error(device, *problem)
    if errors:  # chains through a wrong link are not followed further
        return errors
    loops: set[frozenset[str]] = set()
    for device in devices:
        chain = [device.name]
        current = device
        while current.via is not None and current.via not in chain:
            chain.append(current.via)
            current = by_name[current.via]
        if current.via is not None:  # a loop: report it once, at its first device
            loop = chain[chain.index(current.via):]
            if frozenset(loop) not in loops and device.name in loop:
                loops.add(frozenset(loop))
                what = ("is its own gateway" if len(loop) == 1 else
                        f"`via` loops: {' -> '.join([*loop, loop[0]])}")
                error(device, what,
                      "point `via` at a device reached without going through this one")
        elif len(chain) - 1 > MAX_HOPS:
            error(device, f"more than {MAX_HOPS} gateways: {' -> '.join(chain)}",
                  "shorten the chain of `via`")
    return errors


def with_gateways(devices: list[Device]) -> list[Device]:
    """`devices` (whose chains `gateway_problems` passed) with `gateway` filled in."""
    by_name = {d.name: d for d in devices}
    resolved: dict[str, Device] = {}

    def resolve(device: Device) -> Device:
        if device.name not in resolved:
            gateway = resolve(by_name[device.via]) if device.via else None
            resolved[device.name] = dataclasses.replace(device, gateway=gateway)
        return resolved[device.name]

    return [resolve(d) for d in devices]


def _direct_problem(device: Device, by_name: dict[str, Device]) -> tuple[str, str] | None:
    """(message, hint) when `device` or the device its `via` names cannot be a hop."""
    if device.transport != "ssh":
        return (f"`via` is for ssh devices; this one is {device.transport}",
                "remove `via`, or reach the device over ssh")
    name = device.via
    assert name is not None
    gateway = by_name.get(name)
    if gateway is None:
        close = difflib.get_close_matches(name, list(by_name), n=1)
        hint = (f"did you mean {close[0]!r}?" if close else
                "`via` names another device of this file (its SSH jump host)")
        if name == "local":
            hint = "`local` is this machine; drop `via` to connect directly"
        return f"gateway {name!r} is not a device of this file", hint
    if gateway.transport != "ssh":
        return (f"gateway {name!r} is a {gateway.transport} device: farm jumps only "
                "through SSH servers", f"give {name!r} `transport: ssh`, or another `via`")
    return None
