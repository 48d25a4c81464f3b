"""`BenchRun`: the real `farm bench` CLI in a subprocess, its jsonl events (`--events -`:
the default output off a terminal is human step lines) read as they stream (so a fault
can be injected at a chosen moment, and SIGINT sent like a Ctrl-C), and `check_failed_alone`,
the common end of a scenario where one device failed.
"""

from __future__ import annotations

import contextlib
import json
import os
import queue
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from farm.paths import REPO_ROOT
from farm.results.run_checks import assert_store_ok, partial_run_problems
from farm.results.store import ResultStore

# one round unless a test asks for more (`--repeats` in `extra` comes later and wins): these
# tests are about what a fault does to a bench, not about its statistics
FAST_ARGS = ["--model", "tiny", "--routes", "ort,custom", "--warmup", "1", "--warmup-time", "0",
             "--profile-runs", "0", "--pause", "0", "--rounds", "1"]


class BenchRun:
    """`farm bench` in a subprocess; its jsonl events are read as they stream."""

    def __init__(self, home: Path, store: Path, inventory: Path, devices: list[str], *,
                 runs: int = 10, min_time: float = 1.5, extra: list[str] | None = None) -> None:
        self.home = home
        self.store = store
        argv = [sys.executable, "-m", "farm.cli.main", "--inventory", str(inventory), "bench",
                "--store", str(store), "--events", "-",
                *[a for d in devices for a in ("--device", d)], *FAST_ARGS,
                "--runs", str(runs), "--min-time", str(min_time),
                "--max-time", str(max(min_time * 3, 10)), *(extra or [])]
        env = {**os.environ, "FARM_HOME": str(home), "PYTHONUNBUFFERED": "1"}
        self.proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                     text=True, env=env, cwd=REPO_ROOT)
        self.events: list[dict[str, Any]] = []
        self._new: queue.Queue[dict[str, Any] | None] = queue.Queue()
        self.stdout_lines: list[str] = []
        self._stderr: list[str] = []
        self._readers = [threading.Thread(target=self._read, daemon=True),
                         threading.Thread(target=self._read_stderr, daemon=True)]
        for reader in self._readers:
            reader.start()

    @property
    def stderr(self) -> str:
        return "".join(self._stderr)

    def _read_stderr(self) -> None:
        assert self.proc.stderr is not None
        for line in self.proc.stderr:
            self._stderr.append(line)

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.stdout_lines.append(line)
            if line.startswith("{"):
                with contextlib.suppress(ValueError):
                    event = json.loads(line)
                    self.events.append(event)
                    self._new.put(event)
        self._new.put(None)

    def wait_event(self, pred: Callable[[dict[str, Any]], bool], timeout: float = 90.0
                   ) -> dict[str, Any]:
        for event in list(self.events):
            if pred(event):
                return event
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                event = self._new.get(timeout=0.2)
            except queue.Empty:
                continue
            if event is None:
                break
            if pred(event):
                return event
        raise AssertionError(f"event not seen; stderr:\n{self.stderr}")

    def wait(self, timeout: float = 150.0) -> int:
        try:
            self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            raise AssertionError(f"farm bench did not finish in {timeout} s:\n{self.stderr}"
                                 ) from None
        for reader in self._readers:
            reader.join(10)
        return self.proc.returncode

    @property
    def run_id(self) -> str:
        for event in self.events:
            if event.get("event") == "run":
                return str(event["run_id"])
        raise AssertionError(f"farm bench announced no run; stderr:\n{self.stderr}")

    def records(self) -> dict[tuple[str, str], dict[str, Any]]:
        with ResultStore(self.store, create=False) as store:
            return {(r["device"], r["route"]): r for r in store.records(self.run_id)}

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()



def check_failed_alone(bench: BenchRun, failed: str, others: list[str], words: list[str],
                       *, runs: int = 10) -> dict[tuple[str, str], dict[str, Any]]:
    """The common end of a scenario: `failed` failed alone with a message naming the
    fault, the others measured fully, finished routes kept as partial, store sound."""
    err = " ".join(bench.stderr.split())
    print(f"--- what the user saw (exit {bench.proc.returncode}):\n{bench.stderr}")
    assert f"farm: {failed}: failed:" in err, bench.stderr
    for word in words:
        assert word in err, f"{word!r} not in:\n{bench.stderr}"
    records = bench.records()
    for dev in others:
        ort = records[(dev, "ort")]
        assert ort["status"] == "ok", ort["status_detail"]
        assert ort["n"] >= runs and len(ort["samples_ms"]) == ort["n"]
    mine = [r for (dev, _), r in records.items() if dev == failed]
    assert any(r["status"] == "failed" and r["status_detail"] for r in mine), mine
    for r in mine:  # a route finished before the fault is kept, marked partial
        if r["samples_ms"]:
            assert r["status"] == "partial" and r["median_ms"] is not None
    with ResultStore(bench.store, create=False) as store:
        assert_store_ok(store)
        assert partial_run_problems(store, bench.run_id, {failed}) == []
    return records
