"""Run one function per device in parallel; one device's failure never aborts the others.

Like fabric's group results: a per-device map of result-or-exception.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import TypeVar

from farm.inventory.device import Device

T = TypeVar("T")


def fan_out(devices: Sequence[Device], work: Callable[[Device], T],
            max_workers: int = 16) -> dict[str, T | BaseException]:
    """Call `work(device)` for every device concurrently; exceptions are returned, not raised."""
    results: dict[str, T | BaseException] = {}
    if not devices:
        return results
    with ThreadPoolExecutor(max_workers=min(max_workers, len(devices))) as pool:
        futures = {d.name: pool.submit(work, d) for d in devices}
        for name, future in futures.items():
            try:
                results[name] = future.result()
            except Exception as exc:
                results[name] = exc
    return results
