"""A route cut mid-way (#16): the rounds a device finished before it dropped are kept in a
`partial` record with a `rounds` field, and `--resume` runs only the missing rounds, into
a whole record that says it was resumed. Real agent and ORT runner on `local`; the agent
is SIGKILLed from outside, as a crash would."""

from __future__ import annotations

import dataclasses
import os
import signal
import threading
from pathlib import Path
from typing import Any

import pytest

from farm.bench.config import BenchConfig, Policy
from farm.bench.device_run import remaining_order
from farm.bench.runner import Bench, resume_plan, run_bench
from farm.inventory.builtin import local_device
from farm.results.schema import is_superseded
from farm.results.stats import interleaved_order
from farm.results.store import ResultStore

FAST = Policy(warmup_runs=1, warmup_min_s=0.0, min_runs=5, min_time_s=0.05, max_time_s=2.0)


@pytest.fixture(autouse=True)
def farm_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("FARM_HOME", str(tmp_path / "home"))
    return tmp_path / "home"


def test_remaining_order_drops_the_first_rounds_of_resumed_keys() -> None:
    order = interleaved_order(["ort", "tvm"], 3, seed=0)
    assert remaining_order(order, {"ort": 3, "tvm": 3}) == order
    rest = remaining_order(order, {"ort": 1, "tvm": 3})
    assert rest.count("ort") == 1 and rest.count("tvm") == 3
    # the ort round left is the one in the last place ort had
    last_ort = max(i for i, r in enumerate(order) if r == "ort")
    assert rest == [r for i, r in enumerate(order) if r != "ort" or i == last_ort]


def test_route_cut_after_two_rounds_is_kept_partial_and_resumed(tmp_path: Path) -> None:
    dev = dataclasses.replace(local_device(), name="cut", workdir=str(tmp_path / "wd"))
    config = BenchConfig(routes=("ort",), repeats=3, policy=FAST, pause_s=0.0,
                         profile_runs=0)
    killed = threading.Event()
    with ResultStore(tmp_path / "r.sqlite") as store:
        bench = Bench([dev], config, store, "test")

        def emit(event: dict[str, Any]) -> None:
            # the third round is starting: two rounds are done; the agent dies now
            if event["event"] == "route_start" and event["index"] == 2 and \
                    not killed.is_set():
                run = bench.runs[0]
                assert run.hello is not None
                os.kill(run.hello["pid"], signal.SIGKILL)
                killed.set()

        bench.start(emit)
        assert bench.wait(120)
        result = bench.finish()
        assert killed.is_set() and result.exit_code == 3
        (cut,) = store.records(result.run_id)
        assert cut["status"] == "partial", cut["status_detail"]
        assert "2 of 3 rounds finished before the device failed" in cut["status_detail"]
        rounds = cut["rounds"]
        assert rounds["planned"] == 3 and rounds["done"] == 2 and len(rounds["sizes"]) == 2
        # why it stopped: the lost agent, seen as a closed channel or, when the next request
        # is already on its way, as its closed stdin (a race between SIGKILL and the send)
        assert rounds["stopped"] and any(
            why in rounds["stopped"] for why in ("agent channel closed", "stdin closed"))
        assert rounds["resumed_from"] is None
        assert cut["n"] == sum(rounds["sizes"]) == len(cut["samples_ms"])
        assert all(size >= FAST.min_runs for size in rounds["sizes"])

        run_id, resumed_config, _names = resume_plan(store, result.run_id)
        seen: list[dict[str, Any]] = []
        again = run_bench([dev], resumed_config, store, "resume", emit=seen.append,
                          resume_run=run_id)
        assert again.status == "ok" and again.exit_code == 0, again.failures()
        # only the missing round ran
        assert [e["index"] for e in seen if e["event"] == "route_start"] == [0]
        # the result (what `farm bench` prints) has no superseded history in it
        (whole,) = again.records
        assert whole["status"] == "ok" and whole["rounds"]["done"] == 3
        assert whole["rounds"]["resumed_from"] == cut["record_id"]
        assert whole["rounds"]["sizes"][:2] == rounds["sizes"]
        assert whole["samples_ms"][:cut["n"]] == cut["samples_ms"]
        assert whole["n"] == sum(whole["rounds"]["sizes"]) > cut["n"]
        history = [r for r in store.records(run_id) if is_superseded(r)]
        assert [r["record_id"] for r in history] == [cut["record_id"]]
        assert [r.status for r in store.runs()] == ["ok"]
        assert store.integrity_check().ok
