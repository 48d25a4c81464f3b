"""Transports: how farm reaches a device (`local` subprocess, `ssh` via paramiko)."""

from __future__ import annotations

from farm.errors import TransportError
from farm.inventory.device import Device
from farm.transports.base import RemoteProcess, RunResult, Transport, command_line


def open_transport(device: Device) -> Transport:
    """The transport for `device` (lazy: nothing connects until first use)."""
    if device.transport == "local":
        from farm.transports.local import LocalTransport
        return LocalTransport(device)
    if device.transport == "ssh":
        from farm.transports.ssh import SSHTransport
        return SSHTransport(device)
    raise TransportError(
        f"transport {device.transport!r} runs no commands (no shell on the device)",
        device=device.name,
        hint="tvm-rpc devices are reached through `farm tracker` sessions (TVM route only)")


__all__ = ["RemoteProcess", "RunResult", "Transport", "command_line", "open_transport"]
