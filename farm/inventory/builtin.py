"""The built-in `local` device: this machine, driven through subprocesses, no SSH."""

from __future__ import annotations

import hashlib
import os
import platform
import sys
import tempfile
from pathlib import Path

from farm import isa
from farm.inventory.capped import capped
from farm.inventory.device import Device
from farm.paths import state_dir_path

# /proc/cpuinfo flag -> farm feature name (the names used in devices.yaml)
# (Linux spells AVX-512 VNNI `avx512_vnni`: keyed as `avx512vnni` it was never found, and
# the TVM target of `local` lacked +avx512vnni)
_X86_FLAGS = {"avx2": "avx2", "fma": "fma", "avx512f": "avx512f", "avx512bw": "avx512bw",
              "avx512_vnni": "avx512vnni", "avx_vnni": "avxvnni", "f16c": "f16c",
              "sse4_2": "sse4.2", "amx_tile": "amx-tile", "amx_int8": "amx-int8"}
_ARM_FLAGS = {"asimd": "neon", "asimddp": "dotprod", "i8mm": "i8mm", "sve": "sve", "fphp": "fp16"}


def cpu_features(cpuinfo: str, arch: str) -> tuple[str, ...]:
    """Farm feature names present in a /proc/cpuinfo text."""
    table = _X86_FLAGS if arch == "x86_64" else _ARM_FLAGS
    flags: set[str] = set()
    for line in cpuinfo.splitlines():
        key, _, value = line.partition(":")
        if key.strip() in ("flags", "Features"):
            flags.update(value.split())
    return tuple(sorted({name for flag, name in table.items() if flag in flags}))


def default_local_workdir() -> Path:
    """`local`'s work dir: one per state dir, so two farms on this machine (two checkouts,
    two $FARM_HOME) never overwrite each other's deployed executors and models."""
    state = str(state_dir_path().resolve())
    key = hashlib.sha256(state.encode()).hexdigest()[:12]
    return Path(tempfile.gettempdir()) / f"farm-local-{key}"


def local_device() -> Device:
    """Describe this machine as the `local` device, capped at $FARM_ISA when it is set
    (a UsageError when this machine cannot run that level)."""
    arch = platform.machine()
    arch = "aarch64" if arch in ("arm64", "aarch64") else arch
    try:
        cpuinfo = Path("/proc/cpuinfo").read_text()
    except OSError:
        cpuinfo = ""
    workdir = os.environ.get("FARM_LOCAL_WORKDIR") or str(default_local_workdir())
    device = Device(
        name="local",
        transport="local",
        arch=arch,
        triple=f"{arch}-linux-gnu",
        features=cpu_features(cpuinfo, arch),
        cores=os.cpu_count() or 1,
        python=sys.executable,
        workdir=workdir,
        tags=("builtin",),
        description="this machine (no SSH)",
    )
    level = isa.requested()
    return capped(device, level) if level and isa.level(level).arch == arch else device
