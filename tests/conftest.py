"""Shared fixtures: the real lab (session scoped) lives in tests/lab_fixture.py."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from lab_fixture import lab  # noqa: F401  (re-exported pytest fixture)


@pytest.fixture(scope="module")
def farm_home(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """A private $FARM_HOME for one test module (modules may define their own instead)."""
    home = tmp_path_factory.mktemp("farm_home")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("FARM_HOME", str(home))
        yield home
