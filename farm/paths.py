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


def agents_dir() -> Path:
    """Source of the on-device agent and its route runners."""
    return REPO_ROOT / "agents"


def kernels_dir() -> Path:
    """Source of the custom executor's C kernels."""
    return REPO_ROOT / "kernels"
