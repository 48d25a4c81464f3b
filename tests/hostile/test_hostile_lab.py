"""A hostile device on the real lab: each `evil-MODE` device runs `hostile_agent.py` in
place of the real agent (through a `python` wrapper named in the inventory) and misbehaves
one way; `lab1` runs the real agent in the same bench. Each evil device must fail alone
with a message naming what it did, lab1 must be measured as usual, the store must stay
sound, and nothing may be written where a device pointed outside the run's folder.
"""

from __future__ import annotations

import copy
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import yaml

from farm.paths import REPO_ROOT
from farm.results.run_checks import assert_store_ok
from farm.results.store import ResultStore

HOSTILE = Path(__file__).with_name("hostile_agent.py")
# mode -> words the user must see about that device (its record or the failure line)
FAILS = {
    "nan": "non-finite number NaN",
    "negative": "a sample = -3.0 is not a time in ms",
    "flood": "samples in one route run, over the 1000000",
    "order": "sent after the run's done/error event",
    "escape": "is outside the run's output directory",
    "bigline": "over the 1048576-byte cap",
    "unknown": "unknown kind 'takeover'",
    "markup": "[/red] the agent [bold]rejects[/] [link=http://x]you[/link]",
}


def _wrapper(tmp: Path, mode: str, python: str, canary: Path) -> Path:
    """A `python` for the device: the agent's start runs the hostile agent instead; any
    other use (deploy's commit script) runs the real interpreter."""
    path = tmp / f"python-{mode}"
    path.write_text("#!/bin/sh\n"
                    f"export FARM_CANARY={str(canary).lstrip('/')}\n"
                    'case "$2" in */farm_agent-*.py) '
                    f'exec {python} {HOSTILE} {mode} "$@";; esac\n'
                    f'exec {python} "$@"\n')
    path.chmod(0o755)
    return path


def _inventory(lab: Any, tmp: Path, canary: Path) -> tuple[Path, list[str]]:
    base = yaml.safe_load(lab.inventory_path.read_text())
    lab2 = next(d for d in base["devices"] if d["name"] == "lab2")
    devices = [d for d in base["devices"] if d["name"] == "lab1"]
    modes = [*FAILS, "endless"]
    for mode in modes:
        devices.append({**copy.deepcopy(lab2), "name": f"evil-{mode}",
                        "workdir": f"{lab2['workdir']}-evil-{mode}",
                        "python": str(_wrapper(tmp, mode, lab2["python"], canary)),
                        "description": f"hostile agent ({mode}) on lab2's sshd"})
    path = tmp / "hostile.yaml"
    path.write_text(yaml.safe_dump({"version": 1, "devices": devices}, sort_keys=False))
    return path, [f"evil-{m}" for m in modes]


def test_hostile_devices_fail_alone(lab: Any, tmp_path: Path) -> None:
    canary = tmp_path / "escaped" / "outputs.ftns"
    inventory, evil = _inventory(lab, tmp_path, canary)
    store = tmp_path / "results.sqlite"
    argv = [sys.executable, "-m", "farm.cli.main", "--inventory", str(inventory), "bench",
            "--store", str(store), "--device", "lab1",
            *[a for d in evil for a in ("--device", d)],
            "--model", "tiny", "--routes", "ort", "--warmup", "1", "--warmup-time", "0",
            "--profile-runs", "0", "--pause", "0", "--runs", "5", "--min-time", "0.5",
            "--max-time", "5", "--link-timeout", "20", "--output", "json", "--rounds", "1"]
    env = {**os.environ, "FARM_HOME": str(tmp_path / "home")}
    proc = subprocess.run(argv, capture_output=True, text=True, env=env, cwd=REPO_ROOT,
                          timeout=540, check=False)
    print(f"--- what the user saw (exit {proc.returncode}):\n{proc.stderr}")
    assert "Traceback" not in proc.stderr and "MarkupError" not in proc.stderr
    assert proc.returncode == 3, proc.stderr
    err = " ".join(proc.stderr.split())
    with ResultStore(store, create=False) as s:
        assert_store_ok(s)
        records = {r["device"]: r for r in s.records()}
    good = records["lab1"]
    assert good["status"] == "ok" and good["n"] >= 5, good["status_detail"]
    for mode, words in FAILS.items():
        rec = records[f"evil-{mode}"]
        assert rec["status"] == "failed" and rec["samples_ms"] is None, (mode, rec)
        assert words in rec["status_detail"], (mode, rec["status_detail"])
        assert f"farm: evil-{mode}: failed:" in err, mode
    assert FAILS["markup"] in err  # printed literally, not as markup
    # a symlink to /dev/zero inside the run folder: the download stops at the cap, the
    # route is kept as invalid (its outputs could not be checked), the device goes on
    endless = records["evil-endless"]
    assert endless["status"] == "invalid" and "limit" in endless["status_detail"]
    # the path that climbed out of the run folder was never touched
    assert not canary.exists() and not canary.parent.exists()
