"""Host-side provenance stamped on every record and run: who measured, with what, when.

Contract:
* `farm_version()` -> the package version (`farm.__version__`).
* `farm_commit()` -> the git commit of the farm checkout, with "+dirty" when the work
  tree has uncommitted changes, or "unknown" outside a git checkout or without git.
* `utc_now()` -> ISO 8601 UTC timestamp with microseconds and a "Z" suffix; these sort
  lexically in time order, which the store relies on.
* `host_cpu_info()` -> {"machine", "model", "cores", "features", "system"} of this host.
* `host_provenance()` -> all of the above in one dict (a run's `meta`).

The commit and CPU info are read once per process (they do not change under us).
"""

from __future__ import annotations

import functools
import os
import platform
import subprocess
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from farm import __version__
from farm.paths import REPO_ROOT

UNKNOWN = "unknown"


def farm_version() -> str:
    return __version__


@functools.lru_cache(maxsize=1)
def farm_commit(repo: Path = REPO_ROOT) -> str:
    """Commit of the farm checkout ("<sha>[+dirty]"), or "unknown"."""
    def git(*argv: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            ["git", "-C", str(repo), *argv], capture_output=True, text=True, timeout=10,
            check=False,
        )

    try:
        head = git("rev-parse", "HEAD")
        if head.returncode != 0:
            return UNKNOWN
        sha = head.stdout.strip()
        # untracked files do not change what runs; only tracked modifications count
        dirty = git("status", "--porcelain", "--untracked-files=no")
    except (OSError, subprocess.SubprocessError):
        return UNKNOWN
    if not sha:
        return UNKNOWN
    return f"{sha}+dirty" if dirty.returncode == 0 and dirty.stdout.strip() else sha


def utc_now() -> str:
    return datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def _cpuinfo_fields(text: str) -> dict[str, str]:
    """First value of each key in /proc/cpuinfo (x86 and arm spell keys differently)."""
    out: dict[str, str] = {}
    for line in text.splitlines():
        key, sep, value = line.partition(":")
        if sep:
            out.setdefault(key.strip().lower(), value.strip())
    return out


@functools.lru_cache(maxsize=1)
def host_cpu_info() -> dict[str, Any]:
    """CPU model, feature flags and core count of the host (best effort, never raises)."""
    try:
        info = _cpuinfo_fields(Path("/proc/cpuinfo").read_text(errors="replace"))
    except OSError:
        info = {}
    model = info.get("model name") or info.get("hardware") or platform.processor() or UNKNOWN
    features = (info.get("flags") or info.get("features") or "").split()
    return {
        "machine": platform.machine(),
        "model": model,
        "cores": os.cpu_count() or 1,
        "features": sorted(features),
        "system": f"{platform.system()} {platform.release()}",
    }


def host_provenance() -> dict[str, Any]:
    return {
        "farm_version": farm_version(),
        "farm_commit": farm_commit(),
        "utc": utc_now(),
        "host": platform.node(),
        "python": platform.python_version(),
        "cpu": host_cpu_info(),
    }
