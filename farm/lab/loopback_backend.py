"""Fallback lab without network namespaces: one sshd per loopback address and port.

Used where `ip netns add` is not permitted (not root, or a sandbox without CAP_NET_ADMIN).
Device i listens on 127.0.0.<1+i>:<port>, ports from 2201 upward skipping busy ones; the
login is the current user, the work dir `<device dir>/work`. There are no private mounts
or user namespaces here, so emulated aarch64 devices are not available in this mode.
"""

from __future__ import annotations

import contextlib
import getpass
import socket
import subprocess
from pathlib import Path

from farm.lab.device_dir import DeviceDir, spawn_sshd
from farm.lab.records import LabDevice, LabState
from farm.lab.sshd import SSHD, ensure_privsep_dir, sshd_config, write_config
from farm.lab.system import LabError

BASE_PORT = 2201
MAX_PORT = 2999


def port_free(host: str, port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        try:
            sock.bind((host, port))
        except OSError:
            return False
    return True


def next_port(host: str, start: int, taken: set[int]) -> int:
    for port in range(start, MAX_PORT):
        if port not in taken and port_free(host, port):
            return port
    raise LabError(f"no free port in {start}..{MAX_PORT} on {host}")


def create_device(state: LabState, index: int, name: str, python: str,
                  features: list[str], taken: set[int]) -> tuple[LabDevice,
                                                                 subprocess.Popen[bytes]]:
    host = f"127.0.0.{1 + index}"
    port = next_port(host, BASE_PORT + index - 1, taken)
    taken.add(port)
    ddir = DeviceDir.prepare(Path(state.lab_dir), name)
    # not root: sshd runs without privilege separation and serves only this user
    with contextlib.suppress(PermissionError):
        ensure_privsep_dir()
    write_config(ddir.config, sshd_config(
        listen=host, port=port, host_key=ddir.host_key,
        authorized_keys=str(ddir.path / "authorized_keys"), strict_modes=False,
        env={"FARM_DEVICE": name, "FARM_LAB_DIR": state.lab_dir}))
    device = LabDevice(name=name, arch="x86_64", address=host, port=port,
                       user=getpass.getuser(), netns=None, dir=str(ddir.path), python=python,
                       workdir=str(ddir.path / "work"), features=features)
    proc = spawn_sshd(state, device, ddir, [SSHD, "-D", "-e", "-f", str(ddir.config)])
    return device, proc
