"""A route cut mid-way on the lab (#16): lab1's sshd is killed (every session with it, as a
crash or OOM would) after two of three rounds of its route; lab2 is healthy. The two
finished rounds are kept in a `partial` record with a `rounds` field; after sshd is back,
`farm bench --resume` runs only the missing round and stores a whole record that names
the one it resumed, and says nothing about the superseded one on stderr."""

from __future__ import annotations

import pytest

from farm.results.run_checks import assert_store_ok
from farm.results.store import ResultStore

pytestmark = [pytest.mark.lab, pytest.mark.slow]

ROUNDS = ["--routes", "ort", "--repeats", "3"]


def test_16_route_cut_after_two_rounds_is_kept_and_resumed(faults, start_bench) -> None:
    bench = start_bench(["lab1", "lab2"], runs=5, min_time=0.3, extra=ROUNDS)
    bench.wait_event(lambda e: e.get("device") == "lab1" and e.get("event") == "route_start"
                     and e.get("index") == 2)
    faults.kill_sshd("lab1")
    assert bench.wait() == 3, bench.stderr
    records = bench.records()
    cut = records[("lab1", "ort")]
    assert cut["status"] == "partial", cut["status_detail"]
    assert "2 of 3 rounds finished before the device failed" in cut["status_detail"]
    assert cut["rounds"]["done"] == 2 and cut["rounds"]["planned"] == 3
    assert cut["rounds"]["stopped"] and cut["n"] == sum(cut["rounds"]["sizes"]) >= 10
    healthy = records[("lab2", "ort")]
    assert healthy["status"] == "ok" and healthy["rounds"]["done"] == 3
    faults.assert_no_farm_process()

    faults.restart_sshd("lab1")
    resumed = start_bench([], extra=["--resume", bench.run_id])
    assert resumed.wait() == 0, resumed.stderr
    assert "superseded" not in resumed.stderr, resumed.stderr
    starts = [e for e in resumed.events if e.get("event") == "route_start"]
    assert [(e["device"], e["index"]) for e in starts] == [("lab1", 0)]  # one round only
    after = resumed.records()
    whole = after[("lab1", "ort")]
    assert whole["status"] == "ok" and whole["rounds"]["done"] == 3
    assert whole["rounds"]["resumed_from"] == cut["record_id"]
    assert whole["samples_ms"][:cut["n"]] == cut["samples_ms"]
    assert after[("lab2", "ort")]["record_id"] == healthy["record_id"]
    with ResultStore(resumed.store, create=False) as store:
        assert [r.status for r in store.runs()] == ["ok"]
        assert_store_ok(store)
    faults.assert_no_farm_process()
