"""`farm devices check`: a pre-flight probe of each device, recorded as JSON.

The agent's `--probe` mode (`agents/farm_agent.py`, packed and piped to the device's own
Python as `python - --probe` by `farm.devices.agent_program`) answers, so a device can be
checked before anything is deployed and the state read is the same one every bench
records. Health rules are explicit thresholds below.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from farm.devices.agent_program import run_agent_mode
from farm.errors import AgentError, FarmError
from farm.inventory.device import Device
from farm.transports import open_transport

MIN_MEM_AVAILABLE_KB = 256 * 1024
MIN_DISK_FREE_KB = 200 * 1024
MIN_PYTHON = (3, 8)


@dataclass
class CheckResult:
    device: str
    healthy: bool
    problems: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    probe: dict[str, Any] = field(default_factory=dict)
    error: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {"device": self.device, "healthy": self.healthy, "problems": self.problems,
                "warnings": self.warnings, "error": self.error, "probe": self.probe}


def run_probe(device: Device) -> dict[str, Any]:
    """Pipe the probe to the device's Python and decode its one JSON line."""
    with open_transport(device) as transport:
        result = run_agent_mode(transport, device, ["--probe"], timeout=60)
    if not result.ok:
        raise AgentError(
            f"device {device.name!r}: the probe failed under {device.python!r} "
            f"(exit {result.exited}): {result.stderr.strip()[-300:]}",
            hint="check `python` in the inventory points at a Python 3.8+ on the device")
    try:
        return json.loads(result.stdout.strip().splitlines()[-1])
    except (ValueError, IndexError):
        raise AgentError(f"device {device.name!r}: the probe printed no JSON: "
                         f"{result.stdout[-200:]!r}") from None


def evaluate(device: Device, probe: dict[str, Any]) -> CheckResult:
    """Apply the health rules to a probe result."""
    result = CheckResult(device.name, True, probe=probe)
    arch = probe.get("arch")
    if arch != device.arch:
        result.problems.append(f"arch is {arch}, the inventory says {device.arch}")
    seen = set((probe.get("cpu") or {}).get("features") or [])
    missing = sorted(set(device.features) - seen)
    if missing and seen:
        result.problems.append(f"CPU lacks {', '.join(missing)} that the inventory lists: "
                               "builds for it would crash (SIGILL) there")
    version = tuple(int(p) for p in str(probe.get("python", "0.0")).split(".")[:2])
    if version < MIN_PYTHON:
        result.problems.append(f"Python {probe.get('python')} is older than 3.8")
    state = probe.get("state") or {}
    mem = state.get("mem_available_kb")
    if mem is not None and mem < MIN_MEM_AVAILABLE_KB:
        result.problems.append(f"only {mem // 1024} MiB memory available")
    disk = state.get("disk_free_kb")
    if disk is not None and disk < MIN_DISK_FREE_KB:
        result.problems.append(f"only {disk // 1024} MiB free in {probe.get('disk_dir')}")
    load = state.get("load") or []
    cores = (probe.get("cpu") or {}).get("cores") or device.cores
    if load and load[0] > cores:
        result.warnings.append(f"load {load[0]:.2f} exceeds {cores} cores: timings will be noisy")
    governors = set((state.get("governor") or {}).values())
    if governors - {"performance"}:
        result.warnings.append(f"CPU governor {', '.join(sorted(governors))} (not performance)")
    emulator = (probe.get("cpu") or {}).get("emulator")
    if emulator or device.emulated:
        why = f"runs under {emulator}" if emulator else "the inventory says emulated: true"
        result.warnings.append(f"emulated ({why}): its latency is the emulator's, not the "
                               "device's; reports will not rank or gate on it")
        if emulator and not device.emulated:
            result.warnings.append("add `emulated: true` to its inventory entry")
    result.healthy = not result.problems
    return result


def check_device(device: Device) -> CheckResult:
    try:
        return evaluate(device, run_probe(device))
    except FarmError as exc:
        return CheckResult(device.name, False, error=str(exc))
