"""Transports: how farm reaches a device (`local` subprocess, `ssh` via paramiko)."""

from __future__ import annotations

from collections.abc import Callable

from farm.errors import TransportError
from farm.inventory.device import Device
from farm.transports.base import RemoteProcess, RunResult, Transport, command_line


def _local(device: Device) -> Transport:
    from farm.transports.local import LocalTransport
    return LocalTransport(device)


def _ssh(device: Device) -> Transport:
    from farm.transports.ssh import SSHTransport
    return SSHTransport(device)


# transports that run commands (`TransportKind.commands` in farm.inventory.device); imported
# on first use: paramiko is not needed to bench `local`
OPENERS: dict[str, Callable[[Device], Transport]] = {"local": _local, "ssh": _ssh}


def open_transport(device: Device) -> Transport:
    """The transport for `device` (lazy: nothing connects until first use)."""
    opener = OPENERS.get(device.transport)
    if opener is not None:
        return opener(device)
    raise TransportError(
        f"transport {device.transport!r} runs no commands (no shell on the device)",
        device=device.name,
        hint="tvm-rpc devices are reached through `farm tracker` sessions (TVM route only)")


__all__ = ["RemoteProcess", "RunResult", "Transport", "command_line", "open_transport"]
