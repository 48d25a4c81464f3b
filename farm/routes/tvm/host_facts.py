"""Facts about this machine that only TVM can tell (LLVM's CPU name), kept per machine.

`cached(name, tvm_version, ask)`: the answer `ask()` gave on this machine with this TVM
version, read from `<build cache>/host/<name>-<key>.txt`; `ask()` runs (and the file is
written) only the first time. The key hashes the TVM version and the CPU's identity from
/proc/cpuinfo (vendor, family, model, stepping, model name, flags), so a build cache shared
by several machines keeps one answer each, and a new CPU or TVM asks again. Without
/proc/cpuinfo (not Linux) nothing is cached.
"""

from __future__ import annotations

import hashlib
import os
import platform
from collections.abc import Callable
from pathlib import Path

from farm.paths import build_cache_dir

_IDENTITY = ("vendor_id", "cpu family", "model", "stepping", "model name", "flags",
             "Features", "CPU implementer", "CPU part", "CPU variant", "CPU revision")


def cpu_identity(cpuinfo: Path = Path("/proc/cpuinfo")) -> str | None:
    """The first processor's identifying lines of /proc/cpuinfo, or None when unreadable."""
    try:
        text = cpuinfo.read_text(errors="replace")
    except OSError:
        return None
    first = text.split("\n\n", 1)[0]
    lines = [line for line in first.splitlines()
             if line.split(":", 1)[0].strip() in _IDENTITY]
    return "\n".join([platform.machine(), *lines]) if lines else None


def cached(name: str, tvm_version: str, ask: Callable[[], str]) -> str:
    identity = cpu_identity()
    if identity is None:
        return ask()
    key = hashlib.sha256(f"{tvm_version}\n{identity}".encode()).hexdigest()[:16]
    path = build_cache_dir() / "host" / f"{name}-{key}.txt"
    try:
        value = path.read_text().strip()
        if value:
            return value
    except OSError:
        pass
    value = ask()
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f"{path.name}.tmp{os.getpid()}")
    tmp.write_text(value + "\n")
    tmp.replace(path)  # concurrent askers write the same answer; the rename is atomic
    return value
