"""Devices capped at an ISA level (farm/isa.py): the one place a cap is checked and applied.

`capped(device, name)` -> the device with `isa` set, after `farm.isa.check` (an unknown
level, one of another arch, or one above what the device has is a UsageError naming the
device's own level). `cap_all(devices, name)` caps every device of the level's arch and
uncaps the others: a mixed fleet under `FARM_ISA=avx2` still runs its phones, at their own
level (their records say which). `require_arch(devices, name)` is for a level the user
named on the command line: one that matches no selected device would cap nothing.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from farm import isa
from farm.errors import UsageError
from farm.inventory.device import Device


def capped(device: Device, name: str | None) -> Device:
    if name is None:
        return replace(device, isa=None)
    isa.check(name, device.arch, device.features, device.name)
    return replace(device, isa=name)


def cap_all(devices: Sequence[Device], name: str | None) -> list[Device]:
    """Every device of the level's arch capped at `name`, every other one uncapped (None:
    all uncapped; a bench's `isa` already holds $FARM_ISA when no option was given)."""
    arch = isa.level(name).arch if name is not None else None
    return [capped(d, name if d.arch == arch else None) for d in devices]


def require_arch(devices: Sequence[Device], name: str | None) -> None:
    if name is None:
        return
    arch = isa.level(name).arch
    if devices and not any(d.arch == arch for d in devices):
        raise UsageError(f"ISA level {name} is an {arch} level and no selected device is "
                         f"{arch} ({', '.join(d.name for d in devices)})",
                         hint=f"drop --isa / {isa.ENV}, or select an {arch} device")
