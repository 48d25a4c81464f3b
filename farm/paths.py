"""Where farm keeps its state: `.farm/` in the working directory (override: $FARM_HOME)."""

from __future__ import annotations

import os
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent


def state_dir_path() -> Path:
    """Where the state directory is, without creating it."""
    return Path(os.environ.get("FARM_HOME") or Path.cwd() / ".farm")


def state_dir() -> Path:
    """The state directory (artifacts, lab, results); created on first use."""
    path = state_dir_path()
    path.mkdir(parents=True, exist_ok=True)
    return path


def build_cache_dir() -> Path:
    """Where outputs that are a pure function of their inputs are kept (TVM libraries, the
    runner and executor binaries, custom plans, generated and canonical models, each under a
    content key): $FARM_BUILD_CACHE when set, so several state directories (test sessions,
    labs, checkouts) build each of them once; else the state directory. What was built for
    which device (the registry), results, locks and the lab stay in the state directory."""
    env = os.environ.get("FARM_BUILD_CACHE")
    if not env:
        return state_dir()
    path = Path(env)
    path.mkdir(parents=True, exist_ok=True)
    return path


def agents_dir() -> Path:
    """Source of the on-device agent and its route runners."""
    return REPO_ROOT / "agents"


def kernels_dir() -> Path:
    """Source of the custom executor's C kernels."""
    return REPO_ROOT / "kernels"
