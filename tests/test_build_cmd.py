"""`farm build`: route artifacts built per target and registered for `farm deploy`."""

from __future__ import annotations

import json
import subprocess
from dataclasses import replace

import pytest

from farm.artifacts import registered
from farm.cli.main import main as farm_main
from farm.deploy import deploy
from farm.inventory.builtin import local_device


@pytest.fixture(autouse=True)
def farm_home(tmp_path, monkeypatch):
    monkeypatch.setenv("FARM_HOME", str(tmp_path / "home"))


def test_build_custom_and_ort_registers_what_deploy_pushes(tmp_path, capsys):
    code = farm_main(["build", "--device", "local", "--model", "tiny", "--routes",
                      "ort,custom", "--output", "json"])
    built = {r["route"]: r for r in json.loads(capsys.readouterr().out)}
    assert code == 0 and built["custom"]["ok"] and built["ort"]["ok"]
    kinds = {a.kind for a in registered()}
    assert {"plan", "executor", "model"} <= kinds
    device = replace(local_device(), workdir=str(tmp_path / "wd"))
    result = deploy([device])["local"]
    assert result.ok and any(r.endswith("custom-x86_64/fk_exec") for r in result.uploaded)


@pytest.mark.aarch64
def test_build_for_a_bare_aarch64_triple_cross_compiles(capsys):
    code = farm_main(["build", "--target", "aarch64-linux-gnu", "--routes", "custom",
                      "--output", "json"])
    [built] = json.loads(capsys.readouterr().out)
    assert code == 0 and built["ok"]
    executor = next(p for p in built["artifacts"] if "fk_exec-aarch64" in p)
    kind = subprocess.run(["file", executor], capture_output=True, text=True).stdout
    assert "ARM aarch64" in kind and "statically linked" in kind


def test_unknown_triple_is_a_usage_error(capsys):
    assert farm_main(["build", "--target", "riscv64-linux-gnu", "--routes", "custom"]) == 2
    assert "unsupported target triple" in capsys.readouterr().err
