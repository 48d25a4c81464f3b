"""Shared fixtures: the real lab (session scoped) lives in tests/lab_fixture.py."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from lab_fixture import lab  # noqa: F401  (re-exported pytest fixture)
from pg_fixture import pg_server, pg_url  # noqa: F401  (re-exported pytest fixtures)


@pytest.fixture(scope="session", autouse=True)
def build_cache(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """One $FARM_BUILD_CACHE for the session: each TVM library, runner and executor binary,
    plan and canonical model is built once, not once per test module's $FARM_HOME (they are
    keyed by their inputs; registries, stores and labs stay per home)."""
    cache = tmp_path_factory.mktemp("build_cache")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("FARM_BUILD_CACHE", str(cache))
        yield cache


NO_TORCH = '''"""tests/conftest.py, children_without_torch: torch is not installed here."""
import sys


class NoTorch:
    @staticmethod
    def find_spec(name, path=None, target=None):
        if name == "torch" or name.startswith("torch."):
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return None


sys.meta_path.insert(0, NoTorch())
'''


@pytest.fixture(scope="session", autouse=True)
def children_without_torch(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """Python processes the suite starts cannot import torch (a `sitecustomize` on their
    PYTHONPATH: an import finder that says it is not installed). tvm_ffi imports torch
    whenever it is installed (a symbol clash workaround in its `__init__`): ~2 s of the ~4 s
    each `import tvm` costs here, and the suite starts dozens of processes that import TVM
    (trackers, RPC servers and their popen workers, MetaSchedule's builders and runners, CLI
    runs). None of them uses torch (test_real_torch_exports does, in this process, which
    keeps it), and devices have none. Not `sys.modules["torch"] = None`: scipy reads a
    present entry as the module."""
    shim = tmp_path_factory.mktemp("no_torch")
    (shim / "sitecustomize.py").write_text(NO_TORCH)
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("PYTHONPATH", os.pathsep.join(
            p for p in (str(shim), os.environ.get("PYTHONPATH")) if p))
        yield


@pytest.fixture(scope="module")
def farm_home(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """A private $FARM_HOME for one test module (modules may define their own instead)."""
    home = tmp_path_factory.mktemp("farm_home")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("FARM_HOME", str(home))
        yield home
