"""No shell string is built from inventory or model values.

`command_line` is the one place an argv becomes a remote command line: for any argv and
env it must split back (as the device's shell splits it) into exactly that argv. Then real
benches on a lab device prove it end to end: a model file whose name is full of shell
metacharacters, and a device whose name and work dir use every character the inventory
allows beyond letters and digits (`+~-._`), run cleanly; every command line the SSH
transport sent (recorded by a pass-through spy) splits back into its argv; nothing the
hostile name tried to run ran on the device or here.
"""

from __future__ import annotations

import re
import shlex
import subprocess
from collections.abc import Mapping, Sequence
from pathlib import Path

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

import farm.transports.ssh as ssh_module
from farm.cli.main import main as farm_main
from farm.models import build_model
from farm.results.store import ResultStore
from farm.transports.base import command_line

HOSTILE = "m o;d$(touch PWNED)`touch PWNED2`'\"|&<x>*?[a]{b,c}!#~\\"
argument = st.text(st.characters(blacklist_characters="\0", blacklist_categories=("Cs",)),
                   max_size=30)


@settings(max_examples=300, deadline=None)
@given(st.lists(argument, min_size=1, max_size=6),
       st.dictionaries(st.from_regex(r"[A-Z_][A-Z0-9_]{0,8}", fullmatch=True), argument,
                       max_size=3))
def test_command_line_splits_back_into_its_argv(argv: list[str], env: dict[str, str]) -> None:
    line = command_line(argv, env)
    prefix = ["env", *[f"{k}={v}" for k, v in env.items()]] if env else []
    assert shlex.split(line) == [*prefix, *argv]


def test_hostile_argv_reaches_a_real_shell_as_data(tmp_path: Path) -> None:
    # what sshd does with the line: hand it to the login shell with -c
    argv = ["printf", "%s\\n", HOSTILE, "--", "-rf", "$HOME", "a\nb"]
    out = subprocess.run(["sh", "-c", command_line(argv)], capture_output=True, text=True,
                         cwd=tmp_path, check=True).stdout
    assert out == "\n".join([HOSTILE, "--", "-rf", "$HOME", "a\nb"]) + "\n"
    assert list(tmp_path.iterdir()) == []


class Spy:
    """Pass-through recorder of every remote command line the SSH transport builds."""

    def __init__(self) -> None:
        self.sent: list[tuple[list[str], str]] = []

    def __call__(self, argv: Sequence[str], env: Mapping[str, str] | None = None) -> str:
        line = command_line(argv, env)
        self.sent.append((list(argv), line))
        return line


def _bench(inventory: Path, device: str, model: str, store: Path) -> int:
    return farm_main(["--inventory", str(inventory), "bench", "--device", device,
                      "--model", model, "--routes", "ort", "--runs", "3", "--min-time", "0",
                      "--warmup", "1", "--warmup-time", "0", "--profile-runs", "0",
                      "--pause", "0", "--rounds", "1", "--store", str(store),
                      "--output", "json"])


def _no_pwned(lab, device: str, *roots: Path) -> None:
    found = lab.run_in(device, ["find", "/root", "/tmp", "-name", "PWNED*"]).stdout
    assert found.strip() == ""
    for root in roots:
        assert not list(root.rglob("PWNED*"))


@pytest.mark.lab
@pytest.mark.slow
def test_hostile_model_name_and_odd_workdir_on_a_lab_device(
        lab, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("FARM_HOME", str(tmp_path / "home"))
    monkeypatch.chdir(tmp_path)
    spy = Spy()
    monkeypatch.setattr(ssh_module, "command_line", spy)
    # a device that uses every non-alphanumeric character the inventory allows
    data = yaml.safe_load(lab.inventory_path.read_text())
    entry = next(d for d in data["devices"] if d["name"] == "lab1")
    odd = {**entry, "name": "Lab1.odd_name-9", "workdir": "/root/w+~-.d/-x~_.+"}
    inventory = tmp_path / "odd.yaml"
    inventory.write_text(yaml.safe_dump({"version": 1, "devices": [odd]}))
    model_dir = tmp_path / "models-in"
    model_dir.mkdir()
    hostile = model_dir / f"{HOSTILE}.onnx"
    hostile.write_bytes(build_model("tiny", "fp32", tmp_path / "built").path.read_bytes())

    store = tmp_path / "r.sqlite"
    assert _bench(inventory, odd["name"], str(hostile), store) == 0, capsys.readouterr().err
    with ResultStore(store, create=False) as results:
        [record] = results.records()
    assert record["status"] == "ok" and record["device"] == odd["name"]
    assert record["model"] == HOSTILE

    home = Path(lab.device("lab1").dir) / "home"
    landed = home / "w+~-.d" / "-x~_.+" / "models"
    # remote names are reduced to plain characters (farm.artifacts.make_artifact), so
    # the hostile name never reaches a device command line in the first place
    plain = re.sub(r"[^A-Za-z0-9._-]", "_", f"{HOSTILE}.onnx")
    assert [p.name for p in landed.iterdir() if p.name.endswith(plain)]
    assert spy.sent, "the SSH transport was not used"
    for argv, line in spy.sent:
        assert shlex.split(line) == argv
    assert any(plain in arg for argv, _ in spy.sent for arg in argv)
    assert not any(HOSTILE in arg for argv, _ in spy.sent for arg in argv)
    _no_pwned(lab, "lab1", tmp_path, Path.cwd())


@pytest.mark.lab
@pytest.mark.slow
def test_model_name_with_a_newline_deploys_twice(lab, tmp_path: Path,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FARM_HOME", str(tmp_path / "home"))
    hostile = tmp_path / "two\nlines.onnx"
    hostile.write_bytes(build_model("tiny", "fp32", tmp_path / "built").path.read_bytes())
    store = tmp_path / "r.sqlite"
    assert _bench(lab.inventory_path, "lab2", str(hostile), store) == 0
    assert _bench(lab.inventory_path, "lab2", str(hostile), store) == 0


def test_no_shell_true_in_the_host_code() -> None:
    """The host never hands a string to a local shell either."""
    root = Path(__file__).resolve().parents[2] / "farm"
    offenders = [str(p.relative_to(root)) for p in root.rglob("*.py")
                 if "shell=True" in p.read_text() or "os.system(" in p.read_text()]
    assert offenders == []
