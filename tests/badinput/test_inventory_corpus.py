"""Bad inventories (tests/badinput/corpus/inventory/*.yaml): each file's first line says
what the error must contain (`# expect: TEXT | key: KEY`). Each is refused by the loader
with file, line and hint, and by the CLI (`farm bench`, `farm deploy`, `farm devices`)
with exit code 1 before anything is written to the result store or run anywhere."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from farm.errors import ConfigError
from farm.inventory import load_inventory

from .conftest import CORPUS, store_contents

FILES = sorted((CORPUS / "inventory").glob("*.yaml"))


def expectation(path: Path) -> tuple[str, str | None]:
    head = path.read_text().splitlines()[0]
    match = re.match(r"# expect: ([^|]+?)\s*(?:\| key: (\S+))?$", head)
    assert match, f"{path.name}: first line must be `# expect: TEXT [| key: KEY]`"
    return match.group(1), match.group(2)


def test_corpus_is_big_enough() -> None:
    assert len(FILES) >= 45


@pytest.mark.parametrize("path", FILES, ids=[p.stem for p in FILES])
def test_loader_refuses_with_location_and_hint(path: Path, farm_home: Path) -> None:
    words, key = expectation(path)
    with pytest.raises(ConfigError) as info:
        load_inventory(str(path))
    err = info.value
    assert words in str(err), str(err)
    assert err.file == str(path)
    assert err.line is not None and err.line >= 1
    if key is not None:
        assert err.key == key, str(err)
    # the message shows the offending file first, then says what to do where it can
    assert str(err).startswith(str(path))
    assert not (Path.cwd() / "PWNED").exists()


@pytest.mark.parametrize("path", FILES, ids=[p.stem for p in FILES])
def test_cli_refuses_and_writes_nothing(path: Path, farm_home: Path, farm) -> None:
    words, _ = expectation(path)
    store = farm_home / "bench.sqlite"
    for argv in (["bench", "--device", "phone1", "--store", str(store)],
                 ["deploy", "--device", "phone1"],
                 ["devices"]):
        result = farm(["--inventory", str(path), *argv])
        assert result.code == 1, (argv, result)
        assert "farm: error:" in result.err and words in result.err, result.err
        assert "Traceback" not in result.err
    assert store_contents(store) == (0, 0) and not store.exists()
    assert not (farm_home / "results.sqlite").exists()
    assert not (Path.cwd() / "local-wd").exists()  # nothing was deployed, not even locally
    assert not (Path.cwd() / "PWNED").exists()
