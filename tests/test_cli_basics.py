"""What a new user meets first: `farm --help` lists every exit code, and a model file that
is not there is the same error (exit 1, the same message) whichever command names it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from farm.cli.main import build_parser, main
from farm.errors import EXIT_PARTIAL, EXIT_USAGE


def test_help_lists_every_exit_code() -> None:
    text = " ".join(build_parser().format_help().split())
    for code in ("0 ok", "1 error", f"{EXIT_USAGE} usage", f"{EXIT_PARTIAL} some devices",
                 "4 regression", "130 interrupted"):
        assert code in text


@pytest.mark.parametrize("argv", [
    ["bench", "--routes", "ort"], ["models", "check"], ["build", "--routes", "custom"],
    ["triangle"], ["deploy", "--dry-run"]])
def test_a_missing_model_file_exits_1_everywhere(argv: list[str], tmp_path: Path,
                                                 monkeypatch: pytest.MonkeyPatch,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("FARM_HOME", str(tmp_path / "home"))
    monkeypatch.delenv("FARM_INVENTORY", raising=False)
    missing = str(tmp_path / "nope.onnx")
    model = [missing] if argv[0] == "models" else ["--model", missing]
    assert main([*argv, *model]) == 1
    assert f"model file {missing} does not exist" in capsys.readouterr().err


def test_models_check_takes_the_model_names_bench_takes(tmp_path: Path,
                                                        monkeypatch: pytest.MonkeyPatch,
                                                        capsys: pytest.CaptureFixture[str]) -> None:
    """`farm models check tiny` checks the file the preset builds to (the error's hint names
    preset names; before, only a path was accepted)."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("FARM_HOME", str(tmp_path / "home"))
    monkeypatch.delenv("FARM_INVENTORY", raising=False)
    assert main(["models", "check", "tiny", "--output", "json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert Path(report["file"]).name.startswith("tiny-fp32-")
    assert set(report["routes"]) == {"ort", "tvm", "custom"}
    assert all(v["ok"] for v in report["routes"].values())
