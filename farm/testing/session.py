"""One pytest session's view of the farm: which device, which store, leases and benches.

Life cycle: `FarmSession(inventory, device, store, lock_wait_s)` at session start →
per test: `device_or_skip_reason(name)` (probe once per session: a device that does not
answer, or fails the pre-flight rules of `farm devices check`, is "down" and its tests are
skipped with that reason) → `lease(name, nodeid)` held for the whole test (nestable, so
the test's benches run inside it; released on teardown even when the test fails) →
`bench(device, model=..., route=...)` → `FarmResult` → at session end `tag(NAME)` names
every run of the session (`--farm-tag`), e.g. `main` on the main branch.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from farm.bench.config import DEFAULT_ROUNDS, BenchConfig, Policy
from farm.bench.lease import DeviceLease
from farm.inventory import load_inventory
from farm.inventory.device import Device
from farm.results import tags
from farm.results.open_store import open_store, store_target
from farm.results.store import default_store_path
from farm.testing.result import FarmResult

# a test bench is short by default: the suite's wall time matters more than a tight CI.
# It still runs rounds: a gate judges rounds, not samples (the session's rounds, from
# --farm-rounds, default DEFAULT_ROUNDS, of one route, each a fresh runner process measuring
# >= 0.2 s)
FAST_POLICY = Policy(warmup_runs=3, warmup_min_s=0.1, min_runs=10, min_time_s=0.2,
                     max_time_s=2.0)


class BenchFailed(Exception):
    """The route did not measure (failed, or outputs invalid): the test fails with this."""


class RouteUnavailable(Exception):
    """The route cannot run on that device: the test is skipped with this reason."""


@dataclass
class FarmSession:
    inventory_path: str | None
    device_name: str
    store_path: str  # a file path or a postgresql:// URL (`farm.results.open_store`)
    lock_wait_s: float = 60.0
    rounds: int = DEFAULT_ROUNDS  # of a bench that does not name its own (--farm-rounds)
    run_ids: list[str] = field(default_factory=list)
    results: list[tuple[str, FarmResult]] = field(default_factory=list)
    tagged: list[str] = field(default_factory=list)
    _down: dict[str, str | None] = field(default_factory=dict)

    @classmethod
    def from_options(cls, inventory: str | None, device: str | None, store: str | None,
                     lock_wait_s: float, rounds: int = DEFAULT_ROUNDS) -> FarmSession:
        return cls(inventory, device or "local",
                   str(store_target(store) or default_store_path()), lock_wait_s, rounds)

    def device(self, name: str | None = None) -> Device:
        return load_inventory(self.inventory_path).get(name or self.device_name)

    def down_reason(self, device: Device) -> str | None:
        """Why the device cannot be used now (None: it answered and passed the checks)."""
        if device.name not in self._down:
            self._down[device.name] = _probe(device)
        return self._down[device.name]

    def lease(self, device: Device, nodeid: str) -> DeviceLease:
        return DeviceLease(device.name, f"pytest:{nodeid}", nestable=True)

    def bench(self, device: Device, nodeid: str, *, model: str = "tiny", route: str = "ort",
              variant: str = "fp32", threads: int = 1, policy: Policy | None = None,
              profile_runs: int = 0, rounds: int | None = None, **config: Any
              ) -> FarmResult:
        from farm.bench.runner import run_bench

        bench_config = BenchConfig(model=model, variant=variant, routes=(route,),
                                   threads=threads, policy=policy or FAST_POLICY, pause_s=0.0,
                                   profile_runs=profile_runs, lock_wait_s=self.lock_wait_s,
                                   repeats=self.rounds if rounds is None else rounds, **config)
        with open_store(self.store_path) as store:
            result = run_bench([device], bench_config, store,
                               ["pytest", nodeid, "farm_bench", f"model={model}",
                                f"route={route}"])
        if result.run_id:
            self.run_ids.append(result.run_id)
        records = [r for r in result.records if r["device"] == device.name]
        if not records:
            status, detail = result.devices.get(device.name, ("failed", "no record"))
            raise BenchFailed(f"farm bench on {device.name}: {status}: {detail}")
        rec = records[-1]
        if rec["status"] == "unavailable":
            raise RouteUnavailable(f"route {route} unavailable on {device.name}: "
                                   f"{rec['status_detail']}")
        if rec["status"] != "ok":
            raise BenchFailed(f"farm bench {route} on {device.name}: {rec['status']}: "
                              f"{rec['status_detail']} (run {result.run_id})")
        out = FarmResult(rec, self.store_path)
        self.results.append((nodeid, out))
        return out

    def tag(self, name: str) -> list[str]:
        if not self.run_ids:
            return []
        with open_store(self.store_path) as store:
            return tags.tag_runs(store, self.run_ids, name)


def _probe(device: Device) -> str | None:
    if device.transport == "tvm-rpc":
        return None  # no shell to probe; the bench itself reports an unreachable tracker
    from farm.devices.check import check_device

    result = check_device(device)
    if result.error:
        return f"farm device {device.name} is down: {result.error}"
    if not result.healthy:
        return f"farm device {device.name} fails its checks: {'; '.join(result.problems)}"
    return None
