"""`--store` takes a file or a postgresql:// URL, never another URL (issue 33, item 6:
`postgresql://u@host:1/db` made a SQLite file at ./postgresql:/u@host:1/db and exited 0;
a postgresql:// URL is a server store since issue 30), and every command farm prints for
the user to run next carries the --inventory / --store this invocation was given."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from farm.cli.main import build_parser, main
from farm.errors import StoreError
from farm.results.store import ResultStore

URL = "mysql://u:s3cret@host:1/db"
FAST = ["--routes", "ort", "--runs", "5", "--min-time", "0", "--max-time", "2", "--warmup",
        "1", "--warmup-time", "0", "--profile-runs", "1", "--pause", "0", "--rounds", "1"]


@pytest.fixture
def here(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("FARM_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("FARM_LOCAL_WORKDIR", str(tmp_path / "wd"))
    monkeypatch.delenv("FARM_INVENTORY", raising=False)
    monkeypatch.chdir(tmp_path)
    return tmp_path


def _nothing_made(here: Path) -> None:
    assert not (here / "mysql:").exists()
    assert not list(here.glob("mysql*"))


@pytest.mark.parametrize("argv", [["bench", "--device", "local"], ["results", "list"],
                                  ["results", "show", "latest"], ["report", "--latest"],
                                  ["compare", "a", "b"]])
def test_a_store_url_is_a_usage_error_and_makes_no_file(here, capsys, argv) -> None:
    with pytest.raises(SystemExit) as exit_:
        main([*argv, "--store", URL])
    err = capsys.readouterr().err
    assert exit_.value.code == 2
    assert "a mysql:// store is not supported" in err and "SQLite file" in err, err
    assert "s3cret" not in err  # a password in the URL is never echoed
    _nothing_made(here)


def test_the_store_itself_refuses_a_url(here) -> None:
    with pytest.raises(StoreError, match=r"mysql:// store is not supported") as info:
        ResultStore(URL)
    assert "s3cret" not in str(info.value) and "u:***@host" in str(info.value)
    _nothing_made(here)
    with ResultStore("plain.sqlite") as store:  # a path is still a path
        assert store.path == Path("plain.sqlite")


def _takes_store(parser: argparse.ArgumentParser) -> bool:
    if "--store" in parser._option_string_actions:
        return True
    subs = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    return any(_takes_store(p) for s in subs for p in s.choices.values())


def _actions(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    subs = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    return {name: p for s in subs for name, p in s.choices.items()}


def test_store_commands_are_the_subcommands_that_take_store() -> None:
    from farm import followup

    top = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    # whole: the subcommand, or every action of it, takes --store
    whole = {name for name, p in top.choices.items() if not name.startswith("__") and (
             "--store" in p._option_string_actions
             or (_actions(p) and all(_takes_store(a) for a in _actions(p).values())))}
    taking = {name for name, p in top.choices.items()
              if _takes_store(p) and not name.startswith("__")}
    assert whole == set(followup.STORE_COMMANDS)
    # a subcommand with actions of which only some take --store: those, by name
    for name in taking - whole:
        actions = _actions(top.choices[name])
        assert {a for a, p in actions.items() if _takes_store(p)} == \
            followup.STORE_ACTIONS[name], name
    assert set(followup.STORE_ACTIONS) == taking - whole
    assert followup.STORE_ONLY_COMMANDS <= followup.STORE_COMMANDS


def test_printed_commands_carry_the_options_given(here, capsys) -> None:
    from farm import followup

    inv = here / "fleet.yaml"
    inv.write_text("version: 1\ndevices: []\n")
    store = here / "my store.sqlite"
    # an unknown device: the listing it points at must read the same inventory
    assert main(["--inventory", str(inv), "bench", "--device", "nosuch",
                 "--store", str(store)]) == 1
    assert f"`farm --inventory {inv} devices`" in capsys.readouterr().err
    # a bench's closing line names the store it wrote to, quoted for a shell
    assert main(["bench", "--device", "local", *FAST, "--store", str(store)]) == 0
    err = capsys.readouterr().err
    assert "(`farm results show " in err and f"--store '{store}'`)" in err, err
    run_id = err.split("(`farm results show ")[1].split()[0]
    assert main(["results", "show", run_id, "--store", str(store)]) == 0  # it works
    capsys.readouterr()
    assert main(["results", "show", "zzz", "--store", str(store)]) == 1
    assert f"`farm results list --store '{store}'`" in capsys.readouterr().err
    # outside the CLI, nothing is remembered
    assert followup.command("results", "list") == "farm results list"
