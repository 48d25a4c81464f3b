"""`farm deploy --prune` on the lab: removes only what the selection no longer ships and
stale partial uploads; refused while an agent holds the device lock or a bench holds the
host lease."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from deploy_helpers import device, manifest, private_inventory, remote_files

from farm.bench.lease import DeviceLease
from farm.cli.main import main
from farm.models import resolve_model
from farm.transports import open_transport

pytestmark = [pytest.mark.lab]


@pytest.fixture(autouse=True)
def farm_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FARM_HOME", str(tmp_path / "home"))


def build_two_variants(inventory: Path) -> tuple[str, str]:
    for variant in ("fp32", "int8-dynamic"):
        assert main(["--inventory", str(inventory), "build", "--device", "lab1", "--model",
                     "tiny", "--variant", variant, "--routes", "ort"]) == 0
    fp32, int8 = (resolve_model("tiny", v) for v in ("fp32", "int8-dynamic"))
    return (f"models/{fp32.sha256[:12]}-{fp32.path.name}",
            f"models/{int8.sha256[:12]}-{int8.path.name}")


def test_prune_removes_only_unselected_manifest_files_and_stale_parts(
        lab: Any, tmp_path: Path, capsys: Any) -> None:
    inventory, wd = private_inventory(lab, tmp_path)
    fp32, int8 = build_two_variants(inventory)
    base = ["--inventory", str(inventory), "deploy", "--device", "lab1"]
    assert main([*base, "--all-builds"]) == 0
    stale, fresh = f"{int8}.part-{'a' * 12}", f"{fp32}.part-{'b' * 12}"
    made = lab.run_in("lab1", ["sh", "-c", f'cd {wd} && mkdir -p out/r1 && echo x > out/r1/o.ftns'
                               f' && echo x > mine.txt && echo p > {stale} && echo p > {fresh}'
                               f' && touch -d "1 hour ago" {stale}'])
    assert made.returncode == 0, made.stderr
    capsys.readouterr()
    assert main([*base, "--model", "tiny", "--routes", "ort", "--prune", "--output",
                 "json"]) == 0
    removed = {r["file"] for r in json.loads(capsys.readouterr().out)[0]["prune"]["removed"]}
    assert removed == {int8, "runners/tvm_runner.py", stale}
    files = remote_files(lab, "lab1", wd)
    assert {fp32, fresh, "out/r1/o.ftns", "mine.txt"} <= set(files)  # kept
    assert not removed & set(files) and not removed & set(manifest(lab, "lab1", wd))


def test_prune_refused_while_agent_lock_or_bench_lease_holds_the_device(
        lab: Any, tmp_path: Path, capsys: Any) -> None:
    inventory, wd = private_inventory(lab, tmp_path)
    _fp32, int8 = build_two_variants(inventory)
    base = ["--inventory", str(inventory), "deploy", "--device", "lab1"]
    prune = [*base, "--model", "tiny", "--routes", "ort", "--prune"]
    assert main([*base, "--all-builds"]) == 0
    dev = device(inventory, "lab1")
    with open_transport(dev) as link:  # what a running agent does: flock the device lock
        holder = link.start([dev.python, "-c", "import fcntl, os, sys; fd = os.open("
                             f"{wd + '/agent.lock'!r}, os.O_RDWR | os.O_CREAT); "
                             "os.write(fd, b'{\"holder\": \"test agent\"}'); "
                             "fcntl.flock(fd, fcntl.LOCK_EX); print('held', flush=True); "
                             "sys.stdin.read()"])
        assert holder.read_line(timeout=20) == "held"
        capsys.readouterr()
        assert main(prune) == 3
        err = capsys.readouterr().err
        assert "not pruned on lab1" in err and "test agent" in err
        holder.close()
    assert int8 in remote_files(lab, "lab1", wd)
    with DeviceLease("lab1", "bench-test").hold(0):
        assert main(prune) == 3
        assert "a bench holds the device" in capsys.readouterr().err
    assert int8 in remote_files(lab, "lab1", wd)
    assert main(prune) == 0  # both released
    assert int8 not in remote_files(lab, "lab1", wd)
