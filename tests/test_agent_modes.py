"""The agent's one-shot modes as deploy runs them: the packed agent piped to `python -`
(`--commit`, `--prune`, dispatched to agents/agent_commit.py and agents/agent_prune.py), and
packed agents of two versions side by side in one work dir, each with its own modules."""

from __future__ import annotations

import dataclasses
import fcntl
import hashlib
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from farm.devices.agent_program import agent_program, run_agent_mode
from farm.inventory.builtin import local_device
from farm.inventory.device import Device
from farm.protocol.session import AgentSession
from farm.transports import open_transport

AGENTS = Path(__file__).resolve().parent.parent / "agents"
PY38 = Path("/root/.pyenv/versions/3.8.18/bin/python3.8")
PYTHONS = [sys.executable, *([str(PY38)] if PY38.is_file() else [])]


def device(workdir: Path, python: str = sys.executable) -> Device:
    return dataclasses.replace(local_device(), workdir=str(workdir), python=python)


def mode(dev: Device, *args: str) -> dict:
    with open_transport(dev) as link:
        out = run_agent_mode(link, dev, list(args), timeout=60)
    assert out.ok, out.stderr
    return json.loads(out.stdout.strip().splitlines()[-1])


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


@pytest.mark.parametrize("python", PYTHONS)
def test_commit_mode_renames_what_verifies_and_refuses_the_rest(tmp_path: Path,
                                                                python: str) -> None:
    wd = tmp_path / "wd"
    (wd / "models").mkdir(parents=True)
    (wd / "models" / "good.part-1").write_bytes(b"good")
    (wd / "models" / "bad.part-2").write_bytes(b"damaged")
    plan = [{"tmp": "models/good.part-1", "final": "models/good", "sha256": sha(b"good"),
             "mode": "755"},
            {"tmp": "models/bad.part-2", "final": "models/bad", "sha256": sha(b"bad"),
             "mode": None}]
    answer = mode(device(wd, python), "--commit", json.dumps(plan))
    assert answer["ok"] == ["models/good"]
    assert [b["final"] for b in answer["bad"]] == ["models/bad"]
    assert "sha256 mismatch" in answer["bad"][0]["error"]
    assert (wd / "models" / "good").read_bytes() == b"good"
    assert os.access(wd / "models" / "good", os.X_OK)
    assert not (wd / "models" / "bad").exists() and not (wd / "models" / "bad.part-2").exists()
    files = json.loads((wd / "manifest.json").read_text())["files"]
    assert set(files) == {"models/good"} and files["models/good"]["sha256"] == sha(b"good")


@pytest.mark.parametrize("python", PYTHONS)
def test_prune_mode_removes_unkept_and_stale_and_waits_for_no_agent(tmp_path: Path,
                                                                    python: str) -> None:
    wd = tmp_path / "wd"
    (wd / "models").mkdir(parents=True)
    for name in ("keep", "drop", "drop.part-aaaaaaaaaaaa", "fresh.part-bbbbbbbbbbbb"):
        (wd / "models" / name).write_bytes(b"x" * 3)
    old = time.time() - 3600
    os.utime(wd / "models" / "drop.part-aaaaaaaaaaaa", (old, old))
    (wd / "manifest.json").write_text(json.dumps({"version": 1, "files": {
        "models/keep": {"sha256": sha(b"xxx")}, "models/drop": {"sha256": sha(b"xxx")}}}))
    dev = device(wd, python)
    request = json.dumps({"keep": ["models/keep"], "part_age_s": 600, "dry_run": False})
    fd = os.open(wd / "agent.lock", os.O_RDWR | os.O_CREAT)
    try:  # what a running agent does
        os.write(fd, b'{"holder": "test agent"}')
        fcntl.flock(fd, fcntl.LOCK_EX)
        refused = mode(dev, "--prune", request)
    finally:
        os.close(fd)
    assert refused["removed"] == [] and "test agent" in refused["refused"]
    assert (wd / "models" / "drop").exists()
    answer = mode(dev, "--prune", request)
    assert answer["refused"] is None
    assert {r["file"] for r in answer["removed"]} == {"models/drop",
                                                      "models/drop.part-aaaaaaaaaaaa"}
    assert sorted(p.name for p in (wd / "models").iterdir()) == ["fresh.part-bbbbbbbbbbbb",
                                                                 "keep"]
    assert set(json.loads((wd / "manifest.json").read_text())["files"]) == {"models/keep"}


def test_one_mode_at_a_time(tmp_path: Path) -> None:
    dev = device(tmp_path)
    with open_transport(dev) as link:
        out = run_agent_mode(link, dev, ["--commit", "[]", "--prune", "{}"], timeout=60)
    assert out.exited == 2 and "not allowed with" in out.stderr


def test_agents_of_two_versions_side_by_side_use_their_own_modules(tmp_path: Path) -> None:
    """Each packed agent imports the modules packed with it, never a same-named file on
    sys.path (its own directory, where every version's agent sits)."""
    older = tmp_path / "older-agents"
    older.mkdir()
    for path in [AGENTS / "farm_agent.py", *AGENTS.glob("agent_*.py")]:
        shutil.copy(path, older / path.name)
    prune = older / "agent_prune.py"
    prune.write_text(prune.read_text().replace(
        "def run(workdir, request):\n",
        "def run(workdir, request):\n    return {'removed': [], 'refused': 'older agent'}\n"))
    wd = tmp_path / "wd"
    agent_dir = wd / "agent"
    agent_dir.mkdir(parents=True)
    for decoy in ("agent_prune.py", "agent_workdir.py"):
        (agent_dir / decoy).write_text("raise SystemExit('imported a decoy from sys.path')\n")
    paths = {}
    for version, program in (("older", agent_program(older)), ("current", agent_program())):
        paths[version] = agent_dir / f"farm_agent-{sha(program)[:12]}.py"
        paths[version].write_bytes(program)
    assert len(set(paths.values())) == 2
    request = json.dumps({"keep": [], "dry_run": True})
    answers = {}
    for version, path in paths.items():
        out = subprocess.run([sys.executable, str(path), "--prune", request, "--workdir",
                              str(wd)], capture_output=True, text=True, timeout=60)
        assert out.returncode == 0, out.stderr
        answers[version] = json.loads(out.stdout)
    assert answers["older"]["refused"] == "older agent"
    assert answers["current"] == {"removed": [], "refused": None}
    # the agent itself, packed: its hello carries the packed file's hash (what deploy shipped)
    current = paths["current"]
    session = AgentSession(open_transport(local_device()), str(current),
                           python=sys.executable, workdir=str(wd), hello_timeout_s=30,
                           expected_sha256=sha(current.read_bytes()))
    with session:
        assert session.hello["agent_sha256"] == sha(current.read_bytes())
        assert session.state()["mem_available_kb"] > 0
