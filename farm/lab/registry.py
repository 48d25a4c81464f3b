"""Machine-wide list of lab directories, so labs left by a killed test run can be found.

`up` registers its lab directory (before creating anything) in `/run/farmlab/labs/`
(root) or `$TMPDIR/farmlab-<uid>/labs/`; `down` unregisters it. A lab brought up with an
owner (the pytest session of the `lab` fixture) is *stale* once that owner process is
gone: `farm lab down --stale` (and the fixture itself, at start) removes such labs.
/run is emptied at boot, like the namespaces and processes a lab can leave.
"""

from __future__ import annotations

import hashlib
import os
import tempfile
from pathlib import Path

from farm.lab.records import LabState, load_state
from farm.lab.system import LabError, is_alive


def registry_dir() -> Path:
    base = Path("/run/farmlab") if os.geteuid() == 0 else \
        Path(tempfile.gettempdir()) / f"farmlab-{os.geteuid()}"
    return base / "labs"


def _entry(lab_dir: str) -> Path:
    return registry_dir() / hashlib.sha256(lab_dir.encode()).hexdigest()[:16]


def register(lab_dir: str) -> None:
    path = _entry(lab_dir)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(lab_dir + "\n")


def unregister(lab_dir: str) -> None:
    _entry(lab_dir).unlink(missing_ok=True)


def registered() -> list[Path]:
    try:
        entries = sorted(registry_dir().iterdir())
    except FileNotFoundError:
        return []
    return [Path(e.read_text().strip()) for e in entries]


def is_stale(state: LabState) -> bool:
    """True for a lab whose owning process (if it has one) has exited."""
    owner = state.owner
    return bool(owner) and not is_alive(owner.get("pid"), owner.get("start"))


def stale_labs() -> list[Path]:
    """Registered lab directories whose owner is gone (or whose journal vanished). A lab
    this farm cannot read (written by another farm version, which may still be using it)
    is left alone: tearing down what it cannot read could cut another checkout's tests."""
    out = []
    for lab_dir in registered():
        try:
            state = load_state(lab_dir)
        except LabError:
            continue
        if state is None:
            unregister(str(lab_dir))
        elif is_stale(state):
            out.append(lab_dir)
    return out
