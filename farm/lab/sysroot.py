"""The cached aarch64 sysroot of emulated lab devices (built by scripts/make_sysroot.sh).

Location: `$FARM_SYSROOT`, else `<state_dir>/sysroot-aarch64`. It is up to date when its
marker `.farm-sysroot` holds the sha256 of the build script, so changing the script's pins
rebuilds it; otherwise nothing is downloaded.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
from pathlib import Path

from farm.lab.system import LabError
from farm.paths import REPO_ROOT, state_dir

SCRIPT = REPO_ROOT / "scripts" / "make_sysroot.sh"
MARKER = ".farm-sysroot"


def sysroot_path() -> Path:
    env = os.environ.get("FARM_SYSROOT")
    return Path(env).resolve() if env else state_dir() / "sysroot-aarch64"


def is_current(path: Path) -> bool:
    try:
        marker = (path / MARKER).read_text().strip()
    except OSError:
        return False
    return marker == hashlib.sha256(SCRIPT.read_bytes()).hexdigest()


def ensure_sysroot(path: Path | None = None, *, quiet: bool = False) -> Path:
    """Return an up-to-date sysroot, building it first when missing or stale."""
    path = path or sysroot_path()
    if is_current(path):
        return path
    if not SCRIPT.is_file():
        raise LabError(f"sysroot build script {SCRIPT} is missing")
    env = {**os.environ, "PYTHON": sys.executable}
    # progress goes to stderr: stdout of `farm lab up` is the inventory path
    out = subprocess.DEVNULL if quiet else sys.stderr
    print(f"farm lab: building the aarch64 sysroot in {path} (first time ~150 MB, ~1 min)",
          file=sys.stderr)
    proc = subprocess.run(["bash", str(SCRIPT), str(path)], env=env, stdout=out, check=False)
    if proc.returncode != 0 or not is_current(path):
        raise LabError(f"building the aarch64 sysroot in {path} failed (exit "
                       f"{proc.returncode})",
                       hint=f"run `bash {SCRIPT} {path}` to see why (network to Debian and "
                            "PyPI needed the first time)")
    return path
