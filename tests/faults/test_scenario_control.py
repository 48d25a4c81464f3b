"""Two benches on one device at once, and Ctrl-C in the middle of a bench.

A second `farm bench` on a device another bench holds fails at once naming the holder and
stores no run (or, with --lock-wait, waits and then runs); the first bench is not
disturbed. SIGINT stops a bench cleanly: exit code 130, what finished is kept, the run is
marked interrupted, no agent or runner is left on any device.
"""

from __future__ import annotations

import signal
from pathlib import Path

import pytest

from farm.results.run_checks import assert_store_ok
from farm.results.store import ResultStore

from .lab_faults import ORT_RUNNING

pytestmark = [pytest.mark.lab, pytest.mark.slow]


def test_7_two_benches_on_one_device(faults, start_bench) -> None:
    first = start_bench(["lab1", "lab2"], min_time=2.0)
    faults.wait_proc("lab1", ORT_RUNNING)
    # hold the first bench mid-route on lab1 (its agent keeps answering) while the others try
    faults.signal_procs("lab1", ORT_RUNNING, signal.SIGSTOP)
    second = start_bench(["lab1"], runs=1, min_time=0.0)
    queued = start_bench(["lab1"], runs=1, min_time=0.0, extra=["--lock-wait", "60"])
    code = second.wait()
    faults.signal_procs("lab1", ORT_RUNNING, signal.SIGCONT)
    assert code == 1  # refused before measuring anything
    err = " ".join(second.stderr.split())
    assert "device 'lab1' is busy: held by farm bench" in err, second.stderr
    assert first.run_id in err  # names the holder
    assert first.wait() == 0, first.stderr  # the holder was not disturbed
    assert queued.wait() == 0, queued.stderr  # the waiter ran after it
    firsts = first.records()
    assert {firsts[(d, "ort")]["status"] for d in ("lab1", "lab2")} == {"ok"}
    assert queued.records()[("lab1", "ort")]["status"] == "ok"
    assert second.records() == {}  # a refusal stores no run
    with ResultStore(first.store, create=False) as store:
        assert second.run_id not in [r.run_id for r in store.runs()]
    with ResultStore(first.store, create=False) as store:
        assert_store_ok(store)
    faults.assert_no_farm_process()


def test_7_two_benches_from_two_hosts_on_one_device(faults, start_bench,
                                                    tmp_path: Path) -> None:
    first = start_bench(["lab1"], min_time=2.0)
    faults.wait_proc("lab1", ORT_RUNNING)
    faults.signal_procs("lab1", ORT_RUNNING, signal.SIGSTOP)
    other_home = tmp_path / "other-host"
    other_home.mkdir()
    second = start_bench(["lab1"], home=other_home, runs=1, min_time=0.0)
    second.wait()
    faults.signal_procs("lab1", ORT_RUNNING, signal.SIGCONT)
    assert first.wait() == 0, first.stderr
    assert "busy" in second.stderr


def test_8_ctrl_c_mid_bench(faults, start_bench) -> None:
    bench = start_bench(["lab1", "lab2"], min_time=2.0)
    # freeze lab1's runner so lab2 finishes first; then Ctrl-C while lab1 is mid-route
    runner = faults.wait_proc("lab1", ORT_RUNNING)
    faults.signal_procs("lab1", ORT_RUNNING, signal.SIGSTOP)
    bench.wait_event(lambda e: e.get("device") == "lab2" and e.get("event") == "device_done")
    assert faults.procs("lab1").get(runner)  # lab1 is still in the middle of its route
    bench.proc.send_signal(signal.SIGINT)
    assert bench.wait(timeout=60) == 130, bench.stderr
    assert "interrupted" in bench.stderr
    records = bench.records()
    assert records[("lab2", "ort")]["status"] == "ok"  # measured before Ctrl-C: kept
    assert records[("lab2", "ort")]["n"] >= 10
    assert not [r for (d, _), r in records.items() if d == "lab1" and r["status"] == "ok"]
    with ResultStore(bench.store, create=False) as store:
        assert [r.status for r in store.runs()] == ["interrupted"]
        assert_store_ok(store)
    faults.assert_no_farm_process()  # the stopped runner was killed with its agent


def test_13_crashed_bench_never_blocks_the_device(faults, start_bench) -> None:
    crashed = start_bench(["lab1"], min_time=30.0)
    faults.wait_proc("lab1", ORT_RUNNING)
    crashed.proc.kill()  # SIGKILL: no cleanup at all, its lease file stays behind
    crashed.wait()
    lease = crashed.home / "locks" / "lab1.lease"
    assert lease.exists()
    nxt = start_bench(["lab1"], runs=1, min_time=0.0)
    assert nxt.wait(timeout=90) == 0, nxt.stderr  # the dead holder's lease was taken over
    assert nxt.records()[("lab1", "ort")]["status"] == "ok"
    with ResultStore(nxt.store, create=False) as store:
        assert_store_ok(store)  # the crashed run's half-written state did not damage it
    faults.assert_no_farm_process()  # the orphaned agent exited or was reaped
