"""Interrupted deploys resume on the lab: finished files are not re-sent, the partial one is
continued from its size; Ctrl-C on `farm deploy` exits 130 and the same command resumes."""

from __future__ import annotations

import hashlib
import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from deploy_helpers import device, private_inventory, remote_files

from farm.artifacts import make_artifact, register
from farm.deploy.deployer import deploy_device, part_name
from farm.lab.shaping import shape, unshape

pytestmark = [pytest.mark.lab]


@pytest.fixture(autouse=True)
def farm_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FARM_HOME", str(tmp_path / "home"))


def blob(path: Path, mib: int) -> Path:
    path.write_bytes(os.urandom(mib << 20))
    return path


def test_stopped_deploy_keeps_whole_files_and_continues_the_partial_one(
        lab: Any, tmp_path: Path) -> None:
    inventory, wd = private_inventory(lab, tmp_path)
    dev = device(inventory, "lab1")
    small = [make_artifact("file", blob(tmp_path / f"s{i}.bin", 1), "artifacts")
             for i in range(2)]
    big = make_artifact("file", blob(tmp_path / "big.bin", 8), "artifacts")
    stop = threading.Event()

    def progress(_device: str, done: int, _total: int, _status: str) -> None:
        if done > (2 << 20) + (1 << 20):  # 1 MiB into the big file
            stop.set()

    first = deploy_device(dev, [*small, big], progress, stop=stop)
    assert first.interrupted and not first.ok
    assert first.uploaded == [a.remote for a in small]
    part = remote_files(lab, "lab1", wd)[part_name(big)]
    assert 0 < part < big.size
    again = deploy_device(dev, [*small, big])
    assert again.ok and again.unchanged == [a.remote for a in small]
    assert again.uploaded == [big.remote]
    assert again.bytes_resumed == part and again.bytes_sent == big.size - part
    digest = lab.run_in("lab1", ["sha256sum", f"{wd}/{big.remote}"]).stdout.split()[0]
    assert digest == hashlib.sha256(Path(big.local).read_bytes()).hexdigest()


def test_ctrl_c_exits_130_and_the_same_command_resumes(lab: Any, tmp_path: Path) -> None:
    if lab.namespace("lab2") is None:
        pytest.skip("link shaping needs the namespace lab")
    inventory, wd = private_inventory(lab, tmp_path)
    big = register(make_artifact("plan", blob(tmp_path / "big.plan", 6), "artifacts"))
    argv = [sys.executable, "-m", "farm.cli.main", "--inventory", str(inventory), "deploy",
            "--device", "lab2", "--all-builds", "--output", "json"]
    shape(lab.state, "lab2", "20mbit")  # 6 MiB take ~2.5 s
    try:
        proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                text=True, env=os.environ.copy())
        deadline = time.monotonic() + 30
        while remote_files(lab, "lab2", wd).get(part_name(big), 0) < (1 << 20):
            assert time.monotonic() < deadline and proc.poll() is None, proc.communicate()
            time.sleep(0.1)
        proc.send_signal(signal.SIGINT)
        _out, err = proc.communicate(timeout=30)
        assert proc.returncode == 130, err
        assert "run the same command to resume" in err
    finally:
        unshape(lab.state, "lab2")
    part = remote_files(lab, "lab2", wd)[part_name(big)]
    done = subprocess.run(argv, capture_output=True, text=True, check=False, timeout=120)
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)[0]
    assert big.remote in result["uploaded"] and result["bytes_resumed"] == part
    assert not [a for a in result["uploaded"] if a.startswith("agent/")]  # sent before ^C
