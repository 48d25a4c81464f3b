"""`farm completion bash|zsh` run in real bash and zsh against a sample inventory and a
real result store: subcommands, options, option values, device names and run ids.

bash: the generated function is called as bash's programmable completion calls it
(COMP_WORDS/COMP_CWORD in, COMPREPLY out). zsh: `compadd` and `_files` only exist inside
zsh's completion widgets, so they are replaced by functions printing what would be offered;
everything else (the script's parsing of the line, its tables, the `__complete` helper
calls) is zsh running the generated script.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from farm.cli.main import main
from farm.results.store import ResultStore

REPO = Path(__file__).resolve().parent.parent
INVENTORY = """version: 1
devices:
  - name: phone-a
    transport: ssh
    host: 10.0.0.2
    arch: aarch64
    workdir: /tmp/farm
  - name: board-b
    transport: ssh
    host: 10.0.0.3
    arch: x86_64
    workdir: /tmp/farm
"""


@pytest.fixture(scope="module")
def env(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    tmp = tmp_path_factory.mktemp("completion")
    (tmp / "devices.yaml").write_text(INVENTORY)
    with ResultStore(tmp / "s.sqlite") as store:
        run_id = store.start_run(["farm", "bench"], {"model": "tiny"})
        store.finish_run(run_id, "ok")
    (tmp / "run_id").write_text(run_id)
    farm = tmp / "bin" / "farm"  # `farm` as the user's shell finds it
    farm.parent.mkdir()
    farm.write_text(f'#!/bin/sh\nPYTHONPATH={REPO} exec {sys.executable} -m farm.cli.main "$@"\n')
    farm.chmod(0o755)
    for shell in ("bash", "zsh"):
        path = tmp / f"farm.{shell}"
        proc = subprocess.run([str(farm), "completion", shell], capture_output=True,
                              text=True, check=True)
        path.write_text(proc.stdout)
    return {"dir": tmp, "farm": farm}


def _bash(env: dict[str, Path], words: list[str]) -> list[str]:
    quoted = " ".join("'" + w.replace("'", "'\\''") + "'" for w in words)
    script = (f"source {env['dir'] / 'farm.bash'}\n"
              f"COMP_WORDS=({quoted}); COMP_CWORD={len(words) - 1}\n"
              "_farm\nprintf '%s\\n' \"${COMPREPLY[@]}\"\n")
    proc = subprocess.run(["bash", "--norc", "--noprofile", "-c", script], capture_output=True,
                          text=True, timeout=60, cwd=env["dir"])
    assert proc.returncode == 0, proc.stderr
    return [line for line in proc.stdout.splitlines() if line]


def _zsh(env: dict[str, Path], words: list[str]) -> list[str]:
    quoted = " ".join("'" + w.replace("'", "'\\''") + "'" for w in words)
    # the stand-in compadd matches the word being completed as a prefix, as compadd does
    script = ("compadd() { while [[ $1 != -- ]]; do shift; done; shift; local w; "
              "for w in \"$@\"; do [[ $w == ${words[CURRENT]}* ]] && print -r -- $w; done; "
              "return 0; }\n"
              "_files() { print -r -- '<files>'; }\n"
              f"source {env['dir'] / 'farm.zsh'}\n"
              f"words=({quoted}); CURRENT={len(words)}\n_farm\n")
    proc = subprocess.run(["zsh", "-f", "-c", script], capture_output=True, text=True,
                          timeout=60, cwd=env["dir"])
    assert proc.returncode == 0, proc.stderr
    return [line for line in proc.stdout.splitlines() if line]


SHELLS = [pytest.param(_bash, id="bash"),
          pytest.param(_zsh, id="zsh", marks=pytest.mark.skipif(
              not shutil.which("zsh"), reason="zsh not installed (scripts/setup.sh adds it)"))]


@pytest.mark.parametrize("complete", SHELLS)
def test_completion_of_the_sample_inventory_and_store(env, complete) -> None:  # type: ignore[no-untyped-def]
    farm, inv = str(env["farm"]), str(env["dir"] / "devices.yaml")
    store = str(env["dir"] / "s.sqlite")
    run_id = (env["dir"] / "run_id").read_text()

    top = complete(env, [farm, ""])
    assert {"bench", "triangle", "results", "compare", "completion"} <= set(top)
    assert "__complete" not in top  # the helper stays hidden
    assert complete(env, [farm, "results", "s"]) == ["show"]
    assert complete(env, [farm, "bench", "--dev"]) == ["--device"]
    # an option's value is skipped when finding where the cursor is
    assert complete(env, [farm, "bench", "--threads", "2", "--ou"]) == ["--output"]
    assert set(complete(env, [farm, "bench", "--output", ""])) == {
        "table", "json", "jsonl", "csv", "md"}
    # device names come from the inventory on the line, run ids from the store on the line
    assert set(complete(env, [farm, "--inventory", inv, "bench", "--device", ""])) == {
        "local", "phone-a", "board-b"}
    assert complete(env, [farm, "--inventory", inv, "triangle", "--device", "ph"]) == [
        "phone-a"]
    assert complete(env, [farm, "results", "show", "--store", store, ""]) == ["latest", run_id]
    assert complete(env, [farm, "compare", "--store", store, "latest", ""]) == [
        "latest", run_id]
    assert complete(env, [farm, "completion", ""]) == ["bash", "zsh"]


def test_helper_prints_names_and_nothing_on_errors(tmp_path: Path,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "devices.yaml").write_text(INVENTORY)
    assert main(["--inventory", str(tmp_path / "devices.yaml"), "__complete", "devices"]) == 0
    assert capsys.readouterr().out.split() == ["board-b", "local", "phone-a"]
    # a broken inventory or a missing store: no names, no error text in the user's line
    (tmp_path / "bad.yaml").write_text("version: 1\ndevices: [{name: x}]\n")
    assert main(["--inventory", str(tmp_path / "bad.yaml"), "__complete", "devices"]) == 0
    assert main(["__complete", "runs", "--store", str(tmp_path / "none.sqlite")]) == 0
    captured = capsys.readouterr()
    assert captured.out == "" and captured.err == ""
    assert not (tmp_path / "none.sqlite").exists()
    assert os.path.exists(tmp_path / "devices.yaml")
