"""Real benches over SSH on the lab: native devices and the emulated aarch64 one in
parallel, and faults injected from outside (agent killed, link cut, device busy): the right
device fails alone, the others finish, no agent or runner is left on any device."""

from __future__ import annotations

import os
import signal
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from farm.bench.config import BenchConfig, Policy
from farm.bench.runner import Bench, run_bench
from farm.inventory import load_inventory
from farm.results.run_checks import partial_run_problems
from farm.results.store import ResultStore

pytestmark = [pytest.mark.lab, pytest.mark.slow]

QUICK = Policy(warmup_runs=1, warmup_min_s=0.0, min_runs=10, min_time_s=0.3, max_time_s=5.0)


@pytest.fixture(autouse=True)
def farm_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FARM_HOME", str(tmp_path / "home"))


def devices(lab: Any, *names: str) -> list:
    inventory = load_inventory(str(lab.inventory_path))
    return [inventory.get(n) for n in names]


def leftovers(lab: Any, name: str) -> dict[int, str]:
    """Agent or runner processes on the device, listed without SSH."""
    return {pid: cmd for pid, cmd in lab.processes(name).items()
            if "farm_agent" in cmd or "_runner" in cmd}


def wait_no_leftovers(lab: Any, name: str, timeout: float) -> dict[int, str]:
    deadline = time.monotonic() + timeout
    while (found := leftovers(lab, name)) and time.monotonic() < deadline:
        time.sleep(0.5)
    return found


@pytest.mark.aarch64
@pytest.mark.tvm
def test_native_and_emulated_devices_in_parallel(lab: Any, tmp_path: Path) -> None:
    names = ["lab1", "lab2"] + (["pixel7"] if "pixel7" in lab.devices else [])
    config = BenchConfig(routes=("ort", "tvm", "custom"), policy=QUICK, pause_s=0.0,
                         profile_runs=1)
    with ResultStore(tmp_path / "r.sqlite") as store:
        result = run_bench(devices(lab, *names), config, store, "test")
        assert result.exit_code == 0, result.failures()
        recs = {(r["device"], r["route"]): r for r in store.records(result.run_id)}
        assert store.integrity_check().ok
    for name in names:
        ort = recs[(name, "ort")]
        assert ort["status"] == "ok", ort["status_detail"]
        assert ort["transport"] == "ssh" and ort["n"] >= 10
        assert ort["accuracy"]["ok"] and ort["peak_vmhwm_kb"] > 0
        tvm = recs[(name, "tvm")]
        assert tvm["status"] == "ok", tvm["status_detail"]
        assert tvm["accuracy"]["ok"] and tvm["accuracy"]["cross_routes"] + \
            ort["accuracy"]["cross_routes"]
        assert recs[(name, "custom")]["status"] in ("ok", "unavailable")
        assert not leftovers(lab, name)
    if "pixel7" in names:
        assert recs[("pixel7", "ort")]["arch"] == "aarch64"
        assert recs[("pixel7", "ort")]["cpu_info"]["arch"] == "aarch64"


def _bench_with_fault(lab: Any, tmp_path: Path, fault: Any, **config_kw: Any) -> tuple:
    slow = Policy(warmup_runs=1, warmup_min_s=0.0, min_runs=10, min_time_s=4.0,
                  max_time_s=8.0)
    config = BenchConfig(policy=slow, pause_s=0.0, profile_runs=1,
                         **{"routes": ("ort",), **config_kw})
    fired = threading.Event()
    store = ResultStore(tmp_path / "r.sqlite")
    bench = Bench(devices(lab, "lab1", "lab2"), config, store, "test")

    def emit(event: dict[str, Any]) -> None:
        if event["device"] == "lab2" and event["event"] == "samples" and not fired.is_set():
            fired.set()
            fault()

    bench.start(emit)
    assert bench.wait(120)
    result = bench.finish()
    assert fired.is_set()
    return result, store


def test_agent_killed_on_the_device(lab: Any, tmp_path: Path) -> None:
    def kill_agent() -> None:
        for pid, cmd in lab.processes("lab2").items():
            if "farm_agent" in cmd:
                os.kill(pid, signal.SIGKILL)

    result, store = _bench_with_fault(lab, tmp_path, kill_agent)
    with store:
        assert result.exit_code == 3
        assert result.devices["lab1"][0] == "ok"
        assert result.devices["lab2"][0] == "failed"
        assert "agent channel closed" in result.devices["lab2"][1]
        assert not partial_run_problems(store, result.run_id, {"lab2"})
        assert store.integrity_check().ok
    assert not wait_no_leftovers(lab, "lab2", 10)
    assert not leftovers(lab, "lab1")


def test_link_cut_mid_bench(lab: Any, tmp_path: Path) -> None:
    ns_rules = [["nft", "add", "table", "inet", "farmcut"],
                ["nft", "add", "chain", "inet", "farmcut", "in",
                 "{ type filter hook input priority 0; policy drop; }"],
                ["nft", "add", "chain", "inet", "farmcut", "out",
                 "{ type filter hook output priority 0; policy drop; }"]]
    if lab.namespace("lab2") is None:
        pytest.skip("needs the network-namespace lab to cut a link")

    def cut() -> None:
        for argv in ns_rules:
            assert lab.run_in("lab2", argv).returncode == 0

    try:
        started = time.monotonic()
        result, store = _bench_with_fault(lab, tmp_path, cut, link_timeout_s=6.0)
        assert time.monotonic() - started < 60
        with store:
            assert result.exit_code == 3 and result.devices["lab1"][0] == "ok"
            status, detail = result.devices["lab2"]
            assert status == "failed" and "silent" in detail and "link down" in detail
            assert not partial_run_problems(store, result.run_id, {"lab2"})
        # the agent behind the cut link stops by itself (idle timeout), runner included
        assert not wait_no_leftovers(lab, "lab2", 15)
    finally:
        lab.run_in("lab2", ["nft", "delete", "table", "inet", "farmcut"])


def test_second_bench_on_a_busy_device_fails_clearly(lab: Any, tmp_path: Path) -> None:
    long = Policy(warmup_runs=1, warmup_min_s=0.0, min_runs=10, min_time_s=5.0, max_time_s=8.0)
    store = ResultStore(tmp_path / "r.sqlite")
    first = Bench(devices(lab, "lab1"), BenchConfig(policy=long, profile_runs=1, routes=("ort",)),
                  store, "a")
    measuring = threading.Event()
    first.start(lambda e: measuring.set() if e["event"] == "samples" else None)
    assert measuring.wait(60)
    second = run_bench(devices(lab, "lab1"), BenchConfig(policy=QUICK, profile_runs=1,
                                                            routes=("ort",)), store, "b")
    assert second.exit_code == 1 and second.refused  # a refusal stores no run
    status, detail = second.devices["lab1"]
    assert status == "failed" and "busy: held by farm bench" in detail
    assert second.run_id == "" and len(store.runs()) == 1
    assert first.wait(60)
    assert first.finish().status == "ok"
    store.close()


def test_interrupt_leaves_no_agent_on_any_device(lab: Any, tmp_path: Path) -> None:
    long = Policy(warmup_runs=1, warmup_min_s=0.0, min_runs=10, min_time_s=30.0,
                  max_time_s=40.0)
    with ResultStore(tmp_path / "r.sqlite") as store:
        bench = Bench(devices(lab, "lab1", "lab2"),
                      BenchConfig(policy=long, profile_runs=1, routes=("ort",)), store, "test")
        measuring: set[str] = set()
        both = threading.Event()

        def emit(event: dict[str, Any]) -> None:
            if event["event"] == "samples":
                measuring.add(event["device"])
                if len(measuring) == 2:
                    both.set()

        bench.start(emit)
        assert both.wait(60)
        assert leftovers(lab, "lab1") and leftovers(lab, "lab2")
        started = time.monotonic()
        bench.interrupt()  # what Ctrl-C does in `farm bench`
        assert bench.wait(20) and time.monotonic() - started < 15
        result = bench.finish()
        assert result.exit_code == 130
        assert [r.status for r in store.runs()] == ["interrupted"]
    for name in ("lab1", "lab2"):
        assert not wait_no_leftovers(lab, name, 10), name
