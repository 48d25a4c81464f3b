"""The `farm` pytest plugin: benchmark a model on a farm device inside a test, assert on
the statistics, gate against a baseline. Docs: docs/pytest-plugin.md.

Enabled by the `pytest11` entry point `farm` (pyproject.toml), or `pytest -p
farm.pytest_plugin`. Options: `--farm-inventory FILE`, `--farm-device NAME` (default
local), `--farm-store FILE` (default: farm's result store), `--farm-lock-wait S` (queue
behind another bench of the device, default 60), `--farm-tag NAME` (at the end, tag every
run of the session, e.g. `main`, for later `no_slower_than("main")` or `farm compare`).

Fixtures:
* `farm_device` – the `Device`, leased for the test (released on teardown, pass or fail);
  a device that does not answer or fails `farm devices check`'s rules skips the test with
  the reason;
* `farm_bench(model="tiny", route="ort", variant="fp32", threads=1, policy=None, ...)` –
  benches on `farm_device`, stores the record, returns a `farm.testing.FarmResult`
  (`median_ms`, `p90_ms`, `no_slower_than("main", "5%")`); a route unavailable there skips,
  a failed or invalid route fails the test with the device's reason;
* `farm_session` – the session object (`farm.testing.FarmSession`).
The figures appear in a "farm benchmarks" section of pytest's summary and as junitxml
properties (`farm.<device>.<route>.median_ms`, ...).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest

from farm.bench.lease import LeaseBusy
from farm.inventory.device import Device
from farm.results.location import redacted
from farm.testing.result import FarmResult
from farm.testing.session import BenchFailed, FarmSession, RouteUnavailable

_SESSION = pytest.StashKey[FarmSession]()


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("farm", "farm: benchmark models on devices")
    group.addoption("--farm-inventory", metavar="FILE",
                    help="devices.yaml (default: $FARM_INVENTORY, then ./devices.yaml)")
    group.addoption("--farm-device", metavar="NAME", default="local",
                    help="the device farm_device leases (default: local)")
    group.addoption("--farm-store", metavar="FILE|URL",
                    help="result store the benches write and baselines are read from: a "
                         "file or a postgresql:// URL (default: $FARM_STORE, else farm's own)")
    group.addoption("--farm-lock-wait", metavar="S", type=float, default=60.0,
                    help="seconds to wait for a device another bench holds (default 60)")
    group.addoption("--farm-tag", metavar="NAME",
                    help="at the end, tag every run of this session NAME (e.g. main)")


def _session(config: pytest.Config) -> FarmSession:
    if _SESSION not in config.stash:
        opt = config.getoption
        config.stash[_SESSION] = FarmSession.from_options(
            opt("--farm-inventory"), opt("--farm-device"), opt("--farm-store"),
            opt("--farm-lock-wait"))
    return config.stash[_SESSION]


@pytest.fixture(scope="session")
def farm_session(request: pytest.FixtureRequest) -> FarmSession:
    return _session(request.config)


@pytest.fixture
def farm_device(request: pytest.FixtureRequest, farm_session: FarmSession) -> Iterator[Device]:
    device = farm_session.device()
    reason = farm_session.down_reason(device)
    if reason:
        pytest.skip(reason)
    lease = farm_session.lease(device, request.node.nodeid)
    try:
        lease.acquire(farm_session.lock_wait_s)
    except LeaseBusy as exc:
        pytest.fail(f"{exc} ({exc.hint})" if exc.hint else str(exc), pytrace=False)
    try:
        yield device
    finally:
        lease.release()


@pytest.fixture
def farm_bench(request: pytest.FixtureRequest, farm_session: FarmSession,
               farm_device: Device) -> Iterator[Callable[..., FarmResult]]:
    made: list[FarmResult] = []

    def bench(**options: Any) -> FarmResult:
        try:
            result = farm_session.bench(farm_device, request.node.nodeid, **options)
        except RouteUnavailable as exc:
            pytest.skip(str(exc))
        except BenchFailed as exc:
            pytest.fail(str(exc), pytrace=False)
        made.append(result)
        return result

    yield bench
    # junitxml: the figures and any gate verdicts of this test
    for r in made:
        rec = r.record
        prefix = f"farm.{rec['device']}.{rec['route']}"
        props = [(f"{prefix}.median_ms", r.median_ms), (f"{prefix}.p90_ms", r.p90_ms),
                 (f"{prefix}.n", r.n), (f"{prefix}.rounds", r.rounds),
                 (f"{prefix}.emulated", r.emulated),
                 (f"{prefix}.run_id", r.run_id)]
        props += [(f"{prefix}.gate.{c.ref}", c.text()) for c in r.checks]
        request.node.user_properties.extend(props)


def _summary_line(nodeid: str, r: FarmResult) -> str:
    line = (f"{nodeid}: {r.label()}: median {r.median_ms:.3f} ms, p90 {r.p90_ms:.3f} ms, "
            f"n {r.n} in {r.rounds} rounds (run {r.run_id})")
    if r.emulated:
        line += " [emulated: not gated]"
    return line + "".join(f"\n    gate {c.text()}" for c in r.checks)


def pytest_terminal_summary(terminalreporter: Any, exitstatus: int,
                            config: pytest.Config) -> None:
    session = config.stash.get(_SESSION, None)
    if session is None or not session.results:
        return
    terminalreporter.write_sep("=", "farm benchmarks")
    for nodeid, result in session.results:
        terminalreporter.write_line(_summary_line(nodeid, result))
    terminalreporter.write_line(f"store: {redacted(session.store_path)}")
    if session.tagged:
        terminalreporter.write_line(f"tagged {len(session.tagged)} run(s) as "
                                    f"{config.getoption('--farm-tag')!r}")


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    farm = session.config.stash.get(_SESSION, None)
    name = session.config.getoption("--farm-tag")
    if farm is not None and name:
        farm.tagged = farm.tag(name)
