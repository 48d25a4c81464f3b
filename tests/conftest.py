"""Shared fixtures: the real lab (session scoped) lives in tests/lab_fixture.py."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from lab_fixture import lab  # noqa: F401  (re-exported pytest fixture)


@pytest.fixture(scope="session", autouse=True)
def build_cache(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """One $FARM_BUILD_CACHE for the session: each TVM library, runner and executor binary,
    plan and canonical model is built once, not once per test module's $FARM_HOME (they are
    keyed by their inputs; registries, stores and labs stay per home)."""
    cache = tmp_path_factory.mktemp("build_cache")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("FARM_BUILD_CACHE", str(cache))
        yield cache


@pytest.fixture(scope="module")
def farm_home(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """A private $FARM_HOME for one test module (modules may define their own instead)."""
    home = tmp_path_factory.mktemp("farm_home")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("FARM_HOME", str(home))
        yield home
