"""Deploy ships what is asked, on the real lab: dry run, --model/--routes/--all-builds, and
what a first bench ships."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from deploy_helpers import device, manifest, private_inventory, remote_files

from farm.bench.config import BenchConfig, Policy
from farm.bench.runner import run_bench
from farm.cli.main import main
from farm.models import resolve_model
from farm.results.store import ResultStore

pytestmark = [pytest.mark.lab]

# every device also gets the route registry's table, from which the agent learns its routes
ROUTES_TABLE = "runners/routes.json"
ORT_RUNNERS = {"runners/ort_runner.py", "runners/ftns.py", "runners/categories.py", ROUTES_TABLE}


@pytest.fixture(autouse=True)
def farm_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FARM_HOME", str(tmp_path / "home"))


def deploy_json(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, list[dict]]:
    capsys.readouterr()
    code = main([*argv, "--output", "json"])
    return code, json.loads(capsys.readouterr().out or "[]")


def test_dry_run_lists_files_and_bytes_and_changes_nothing(lab: Any, tmp_path: Path,
                                                           capsys: Any) -> None:
    inventory, workdir = private_inventory(lab, tmp_path)
    assert main(["--inventory", str(inventory), "build", "--device", "lab1", "--model", "tiny",
                 "--routes", "ort"]) == 0
    code, out = deploy_json(capsys, "--inventory", str(inventory), "deploy", "--device", "lab1",
                            "--device", "lab2", "--routes", "ort", "--dry-run")
    assert code == 0 and [r["device"] for r in out] == ["lab1", "lab2"]
    model = resolve_model("tiny", "fp32")
    for result in out:
        files = {p["file"]: p for p in result["plan"]}
        assert set(files) >= ORT_RUNNERS and any(f.startswith("agent/") for f in files)
        assert [f for f in files if f.startswith("models/")] == \
            [f"models/{model.sha256[:12]}-{model.path.name}"]
        assert "runners/tvm_runner.py" not in files  # route not selected
        assert {p["action"] for p in files.values()} == {"upload"}
        assert result["bytes_sent"] == sum(p["bytes"] for p in files.values())
        assert result["uploaded"] == []
    for name in ("lab1", "lab2"):  # not even the work dir was created
        assert lab.run_in(name, ["test", "-e", workdir]).returncode != 0


def test_model_and_routes_select_builds_all_builds_ships_the_rest(lab: Any, tmp_path: Path,
                                                                  capsys: Any) -> None:
    inventory, workdir = private_inventory(lab, tmp_path)
    for variant in ("fp32", "int8-dynamic"):
        assert main(["--inventory", str(inventory), "build", "--device", "lab1", "--model",
                     "tiny", "--variant", variant, "--routes", "ort"]) == 0
    fp32, int8 = (resolve_model("tiny", v) for v in ("fp32", "int8-dynamic"))
    code, out = deploy_json(capsys, "--inventory", str(inventory), "deploy", "--device", "lab1",
                            "--model", "tiny", "--routes", "ort")
    assert code == 0
    on_device = set(manifest(lab, "lab1", workdir))
    models = {f for f in on_device if f.startswith("models/")}
    assert models == {f"models/{fp32.sha256[:12]}-{fp32.path.name}"}
    assert on_device >= ORT_RUNNERS and "runners/tvm_runner.py" not in on_device
    code, out = deploy_json(capsys, "--inventory", str(inventory), "deploy", "--device", "lab1",
                            "--all-builds")
    assert code == 0
    sent = set(out[0]["uploaded"])
    assert f"models/{int8.sha256[:12]}-{int8.path.name}" in sent
    assert "runners/tvm_runner.py" in sent
    assert not sent & on_device  # what was there already is not sent again


def test_first_bench_ships_only_what_its_routes_need(lab: Any, tmp_path: Path) -> None:
    inventory, workdir = private_inventory(lab, tmp_path)
    config = BenchConfig(routes=("ort",), policy=Policy(warmup_runs=1, warmup_min_s=0.0,
                                                        min_runs=5, min_time_s=0.1,
                                                        max_time_s=5.0),
                         pause_s=0.0, profile_runs=0)
    with ResultStore(tmp_path / "r.sqlite") as store:
        result = run_bench([device(inventory, "lab1")], config, store, "test")
        assert result.exit_code == 0, result.failures()
    shipped = set(manifest(lab, "lab1", workdir))
    kinds = {f.split("/")[0] for f in shipped}
    assert kinds == {"agent", "runners", "models", "inputs"}
    assert {f for f in shipped if f.startswith("runners/")} == ORT_RUNNERS
    files = remote_files(lab, "lab1", workdir)
    assert not [f for f in files if ".part-" in f]  # every upload verified and renamed


def test_custom_bench_ships_no_onnx_model_and_no_python_runner(lab: Any, tmp_path: Path) -> None:
    inventory, workdir = private_inventory(lab, tmp_path)
    config = BenchConfig(routes=("custom",), policy=Policy(warmup_runs=1, warmup_min_s=0.0,
                                                           min_runs=5, min_time_s=0.1,
                                                           max_time_s=5.0),
                         pause_s=0.0, profile_runs=0)
    with ResultStore(tmp_path / "r.sqlite") as store:
        result = run_bench([device(inventory, "lab2")], config, store, "test")
        assert result.exit_code == 0, result.failures()
    shipped = set(manifest(lab, "lab2", workdir))
    assert {f.split("/")[0] for f in shipped} == {"agent", "runners", "artifacts", "inputs"}
    assert {f for f in shipped if f.startswith("runners/")} == {"runners/custom-x86_64/fk_exec",
                                                                        ROUTES_TABLE}
