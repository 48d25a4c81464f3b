"""Fixtures of the fault suite (real lab, real `farm bench`, faults injected from outside).

`faults` -> a `FaultLab` (tests/faults/lab_faults.py) over the session `lab`, undone after
each test; `start_bench(devices, ...)` -> a running `BenchRun` (tests/faults/bench_run.py)
with a FARM_HOME shared by the fault benches (model built once, leases shared as on one
host) and a result store of the test's own.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from .bench_run import BenchRun
from .lab_faults import FaultLab


@pytest.fixture
def faults(lab: Any) -> Iterator[FaultLab]:
    if lab.state.mode != "netns":
        pytest.skip("fault scenarios need the network-namespace lab (root)")
    helper = FaultLab(lab)
    try:
        yield helper
    finally:
        helper.undo()
        for dev in ("lab1", "lab2"):
            if dev in lab.devices:
                helper.clear_nft(dev)


@pytest.fixture(scope="session")
def shared_home(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One FARM_HOME for the fault benches: the model is built once, leases are shared
    (as for benches on one host); each test has its own result store."""
    return tmp_path_factory.mktemp("fault-farm-home")


@pytest.fixture
def bench_home(shared_home: Path) -> Path:
    return shared_home


@pytest.fixture
def start_bench(lab: Any, shared_home: Path, tmp_path: Path
                ) -> Iterator[Callable[..., BenchRun]]:
    started: list[BenchRun] = []

    def start(devices: list[str], *, home: Path | None = None, **kwargs: Any) -> BenchRun:
        bench = BenchRun(home or shared_home, tmp_path / "results.sqlite", lab.inventory_path,
                         devices, **kwargs)
        started.append(bench)
        return bench
    yield start
    for bench in started:
        bench.kill()
