"""pytest fixture `lab`: a real local lab for the whole test session.

Registered by tests/conftest.py (`from lab_fixture import lab`).
The session brings up 2 native devices (lab1, lab2) and 1 emulated aarch64 device (pixel7)
in its own temporary lab directory (its own slot: it never disturbs a lab an engineer
has up in .farm/lab), yields a `LabHandle`, and tears the lab down at the end.
Without root the lab falls back to loopback sshds, and pixel7 is absent: tests that
need it skip via `lab.require("pixel7")`.
The lab is owned by the pytest process: if the session is killed, the next session (or
`farm lab down --stale`) removes it. The aarch64 sysroot is shared and cached
(`$FARM_SYSROOT` or .farm/sysroot-aarch64).
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import pytest

from farm.lab import LabDevice, LabSpec, LabState, down, down_stale, up
from farm.lab.inspect import device_exec, device_pids
from farm.lab.inventory_file import CLIENT_KEY, INVENTORY_FILE, KNOWN_HOSTS_FILE
from farm.lab.system import cmdline


@dataclass
class LabHandle:
    """A running lab as tests see it."""

    state: LabState

    @property
    def lab_dir(self) -> Path:
        return Path(self.state.lab_dir)

    @property
    def inventory_path(self) -> Path:
        return self.lab_dir / INVENTORY_FILE

    @property
    def known_hosts(self) -> Path:
        return self.lab_dir / KNOWN_HOSTS_FILE

    @property
    def client_key(self) -> Path:
        return self.lab_dir / CLIENT_KEY

    @property
    def devices(self) -> list[str]:
        return [d.name for d in self.state.devices]

    def device(self, name: str) -> LabDevice:
        return self.state.device(name)

    def namespace(self, name: str) -> str | None:
        """The device's network namespace (None in loopback mode)."""
        return self.state.device(name).netns

    def require(self, name: str) -> LabDevice:
        if name not in self.devices:
            pytest.skip(f"lab device {name} is not available ({self.state.mode} mode)")
        return self.device(name)

    def run_in(self, name: str, argv: Sequence[str],
               timeout: float = 60.0) -> subprocess.CompletedProcess[str]:
        """Run argv inside the device's namespaces (no SSH), as root with its own /root."""
        return device_exec(self.state, name, argv, timeout=timeout)

    def pids(self, name: str) -> list[int]:
        """Pids of every process of the device (sshd, sessions, their children)."""
        return device_pids(self.state, name)

    def processes(self, name: str) -> dict[int, str]:
        """pid -> command line of the device's processes."""
        return {pid: cmdline(pid) for pid in self.pids(name)}


@pytest.fixture(scope="session")
def lab(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LabHandle]:
    messages: list[str] = []
    down_stale(log=messages.append)  # labs of earlier test runs that were killed
    lab_dir = tmp_path_factory.mktemp("lab")
    state = up(LabSpec(native=2, aarch64=1), lab_dir, log=messages.append,
               owner_pid=os.getpid())
    try:
        yield LabHandle(state)
    finally:
        down(lab_dir, log=messages.append)
