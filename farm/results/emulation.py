"""Which records were measured under an emulator, and how every printer says so.

Contract: a record is *emulated* when its `emulated` field is 1 (the inventory said so, or
the agent found itself running under qemu-user: `cpu_info.emulator`). Its latency is the
emulator's on the host, not the device's: printers mark its device `NAME (emulated)`,
the decision matrix names no fastest route from it and `compare` gates nothing on it.
Memory, sizes and validity still count (they do not depend on the emulator's speed).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

MARK = "(emulated)"
WHY = ("emulated device: its latency is qemu-user's on the host, not the device's CPU, "
       "so it is never ranked or gated on (size, memory and validity still count)")
NOT_RANKED = "not ranked: emulated"
NOT_COMPARED = "not compared: emulated"


def record_emulated(device_flag: bool, cpu_info: Mapping[str, Any] | None) -> int:
    """The record field: 1 when the inventory or the agent's own probe says emulated."""
    return int(bool(device_flag) or bool((cpu_info or {}).get("emulator")))


def is_emulated(record: Mapping[str, Any]) -> bool:
    cpu = record.get("cpu_info")
    return bool(record.get("emulated")) or (isinstance(cpu, Mapping)
                                            and bool(cpu.get("emulator")))


def emulated_devices(records: Iterable[Mapping[str, Any]]) -> set[str]:
    return {str(r.get("device")) for r in records if is_emulated(r)}


def device_label(name: str, emulated: bool) -> str:
    """`pixel7 (emulated)` for an emulated device, the bare name otherwise."""
    return f"{name} {MARK}" if emulated and not name.endswith(MARK) else name
