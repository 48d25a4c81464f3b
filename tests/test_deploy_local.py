"""Deploy to the built-in local device: content addressing, skip-unchanged, atomic verify."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

from farm.build.registry import make_artifact
from farm.deploy import deploy
from farm.deploy.bundle import bundle_for
from farm.deploy.deployer import deploy_device
from farm.inventory.builtin import local_device


def test_second_deploy_uploads_nothing(tmp_path, monkeypatch):
    monkeypatch.setenv("FARM_HOME", str(tmp_path / "state"))
    device = replace(local_device(), workdir=str(tmp_path / "device"))
    first = deploy([device])["local"]
    assert first.ok and first.uploaded and not first.unchanged
    agent = [r for r in first.uploaded if r.startswith("agent/farm_agent-")]
    assert agent and (Path(device.workdir) / agent[0]).is_file()
    manifest = json.loads((Path(device.workdir) / "manifest.json").read_text())
    assert set(first.uploaded) <= set(manifest["files"])
    second = deploy([device])["local"]
    assert second.ok and second.uploaded == [] and set(second.unchanged) == set(first.uploaded)


def test_changed_or_damaged_file_is_uploaded_again(tmp_path, monkeypatch):
    monkeypatch.setenv("FARM_HOME", str(tmp_path / "state"))
    device = replace(local_device(), workdir=str(tmp_path / "device"))
    src = tmp_path / "model.bin"
    src.write_bytes(b"a" * 4096)
    art = make_artifact("model", src, "models")
    assert deploy_device(device, [art]).uploaded == [art.remote]
    target = Path(device.workdir) / art.remote
    target.write_bytes(b"b" * 10)  # damaged on the device: size differs from the manifest
    again = deploy_device(device, [art])
    assert again.uploaded == [art.remote] and target.read_bytes() == src.read_bytes()
    assert not list(target.parent.glob("*.tmp-*"))  # no temporary left behind


def test_upload_that_does_not_verify_is_refused(tmp_path, monkeypatch):
    monkeypatch.setenv("FARM_HOME", str(tmp_path / "state"))
    device = replace(local_device(), workdir=str(tmp_path / "device"))
    src = tmp_path / "x.bin"
    src.write_bytes(b"payload")
    art = replace(make_artifact("model", src, "models"), sha256="0" * 64)
    result = deploy_device(device, [art])
    assert not result.ok and "sha256 mismatch" in (result.error or "")
    assert not (Path(device.workdir) / art.remote).exists()  # never renamed into place


def test_bad_workdir_fails_alone(tmp_path, monkeypatch):
    monkeypatch.setenv("FARM_HOME", str(tmp_path / "state"))
    good = replace(local_device(), workdir=str(tmp_path / "good"))
    blocker = tmp_path / "file"
    blocker.write_text("not a dir")
    bad = replace(local_device(), name="bad", workdir=str(blocker / "sub"))
    results = deploy([good, bad])
    assert results["local"].ok
    assert not results["bad"].ok and "cannot create work dir" in results["bad"].error


def test_bundle_contains_agent_and_runners():
    names = [a.remote for a in bundle_for(local_device())]
    assert names[0].startswith("agent/farm_agent-")
