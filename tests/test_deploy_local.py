"""Deploy to the built-in local device: content addressing, skip-unchanged, atomic verify."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

from farm.artifacts import make_artifact
from farm.deploy import deploy
from farm.deploy.deployer import deploy_device
from farm.deploy.selection import bundle_for
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


def test_deploy_model_ships_only_what_was_built_from_it(tmp_path, monkeypatch, capsys):
    from farm.cli.main import main
    from farm.models import resolve_model

    monkeypatch.setenv("FARM_HOME", str(tmp_path / "state"))
    monkeypatch.setenv("FARM_LOCAL_WORKDIR", str(tmp_path / "device"))
    monkeypatch.delenv("FARM_INVENTORY", raising=False)
    monkeypatch.chdir(tmp_path)  # no ./devices.yaml: built-in `local` only
    assert main(["deploy", "--model", "tiny"]) == 2  # nothing built yet: say what to run
    err = capsys.readouterr().err
    assert "nothing is built from model tiny-fp32 for local" in err
    assert "farm build --model tiny --variant fp32 --device local" in err
    for variant in ("fp32", "int8-dynamic"):
        assert main(["build", "--device", "local", "--model", "tiny", "--variant", variant,
                     "--routes", "ort"]) == 0
    fp32, int8 = (resolve_model("tiny", v) for v in ("fp32", "int8-dynamic"))
    model_remotes = {a.remote: a.source for a in bundle_for(local_device()) if a.kind == "model"}
    assert set(model_remotes.values()) == {fp32.sha256, int8.sha256}  # plain deploy: every build
    only = {a.remote for a in bundle_for(local_device(), model_sha=fp32.sha256)
            if a.kind == "model"}
    assert only == {r for r, sha in model_remotes.items() if sha == fp32.sha256}
    capsys.readouterr()
    assert main(["deploy", "--model", "tiny", "--output", "json"]) == 0
    uploaded = json.loads(capsys.readouterr().out)[0]["uploaded"]
    assert only <= set(uploaded)
    assert not any(r in uploaded for r, sha in model_remotes.items() if sha == int8.sha256)
