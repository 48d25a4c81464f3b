"""Helpers of the bad-input corpus: run the real CLI in-process and look at the store.

Every corpus case must end in a clear error (`farm: error: ...` naming the problem) and
leave the result store without a run or record: a bad input must never look like a result.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import pytest

from farm.cli.main import main as farm_main

CORPUS = Path(__file__).resolve().parent / "corpus"


@dataclass(frozen=True)
class CliResult:
    code: int
    out: str
    err: str


@pytest.fixture
def farm_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A private state dir, cwd and local work dir: nothing leaks into the repo's .farm."""
    home = tmp_path / "home"
    monkeypatch.setenv("FARM_HOME", str(home))
    monkeypatch.setenv("FARM_LOCAL_WORKDIR", str(tmp_path / "local-wd"))
    monkeypatch.delenv("FARM_INVENTORY", raising=False)
    monkeypatch.chdir(tmp_path)
    return home


@pytest.fixture
def farm(capsys: pytest.CaptureFixture[str]) -> Callable[[Sequence[str]], CliResult]:
    def run(argv: Sequence[str]) -> CliResult:
        capsys.readouterr()
        code = farm_main(list(argv))
        captured = capsys.readouterr()
        return CliResult(code, captured.out, captured.err)
    return run


def store_contents(path: Path) -> tuple[int, int]:
    """(runs, records) in a store file; (0, 0) when the file does not exist."""
    if not path.exists():
        return 0, 0
    with sqlite3.connect(path) as db:
        tables = {r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type='table'")}
        if not {"runs", "records"} <= tables:
            return 0, 0
        runs = db.execute("SELECT COUNT(*) FROM runs").fetchone()[0]
        records = db.execute("SELECT COUNT(*) FROM records").fetchone()[0]
    return runs, records
