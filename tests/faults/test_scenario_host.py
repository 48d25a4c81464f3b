"""When the host is what fails (issue 33, items 1-3), with a real `farm bench` on the lab.

* A full disk under FARM_HOME (a 3 MB tmpfs this module mounts, filled from outside to a few
  free-space levels, at start and mid-run): one line naming the file system and what to
  free, no traceback, the intact store never called unreadable, every measured record kept
  (the store, the spill file, or JSON on stdout), no empty lease left behind.
* A `farm bench` killed with SIGKILL: `farm results list` shows its run `interrupted` (a
  SIGSTOPped one is alive: still `running`), and `--resume` finishes it.
* Two controllers (two FARM_HOMEs) on one device: `--lock-wait` waits on the device-side
  lease too, naming who holds it; without it the refusal is immediate and stores no run.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from farm.paths import REPO_ROOT
from farm.results.store import ResultStore

from .bench_run import BenchRun
from .lab_faults import ORT_RUNNING

pytestmark = [pytest.mark.lab, pytest.mark.slow]

ORT_ONLY = ["--routes", "ort"]
FS_SIZE = "3m"


def farm(home: Path, *argv: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "FARM_HOME": str(home)}
    return subprocess.run([sys.executable, "-m", "farm.cli.main", *argv], cwd=REPO_ROOT,
                          env=env, capture_output=True, text=True, timeout=timeout, check=False)


def listed_runs(home: Path, store: Path) -> list[dict[str, Any]]:
    proc = farm(home, "results", "list", "--store", str(store), "--output", "json")
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)["runs"]


@pytest.fixture
def small_fs(tmp_path: Path) -> Iterator[Path]:
    """A 3 MB tmpfs of the test's own, unmounted at the end."""
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root")
    mnt = tmp_path / "fs"
    mnt.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={FS_SIZE}", "tmpfs", str(mnt)],
                   check=True)
    try:
        yield mnt
    finally:
        if subprocess.run(["umount", str(mnt)], check=False).returncode != 0:
            subprocess.run(["umount", "-l", str(mnt)], check=False)


def free_kib(fs: Path) -> int:
    st = os.statvfs(fs)
    return st.f_bavail * st.f_frsize // 1024


def fill(fs: Path, leave_kib: int) -> Path:
    """Fill the file system from outside farm until `leave_kib` KiB are free."""
    filler = fs / f"filler-{time.monotonic_ns()}"
    with open(filler, "wb") as f:
        while (extra := free_kib(fs) - leave_kib) > 0:
            try:
                f.write(b"\0" * min(extra, 1024) * 1024)
                f.flush()
            except OSError:
                break
    return filler


@pytest.fixture
def benches() -> Iterator[list[BenchRun]]:
    started: list[BenchRun] = []
    yield started
    for bench in started:
        bench.kill()


def start(benches: list[BenchRun], lab: Any, home: Path, store: Path, extra: list[str],
          **kwargs: Any) -> BenchRun:
    bench = BenchRun(home, store, lab.inventory_path, ["lab1"], extra=ORT_ONLY + extra,
                     **kwargs)
    benches.append(bench)
    return bench


def json_records(bench: BenchRun) -> list[dict[str, Any]]:
    """Records the bench printed as JSON lines on stdout (written nowhere else)."""
    out = []
    for line in bench.stdout_lines:
        if line.startswith("{") and '"record_id"' in line and '"event"' not in line:
            out.append(json.loads(line))
    return out


def assert_one_line_disk_message(text: str, fs: Path) -> None:
    assert "Traceback" not in text and "Exception in thread" not in text, text
    assert "cannot be read as SQLite" not in text and "unreadable" not in text, text
    lines = [ln for ln in text.splitlines() if f"no space left on {fs}" in ln]
    assert lines, text
    assert all("free space there" in ln for ln in lines), lines  # and what to free


def assert_lease_sound(home: Path) -> None:
    for lease in (home / "locks").glob("*.lease"):
        assert lease.read_text().strip(), f"empty lease left behind: {lease}"


# -- 1. a full disk under FARM_HOME ------------------------------------------------------
@pytest.mark.parametrize("leave_kib", [0, 8, 20, 60])
def test_full_disk_at_start(faults: Any, lab: Any, small_fs: Path, benches: list[BenchRun],
                            leave_kib: int) -> None:
    home = small_fs / "home"
    store = home / "results.sqlite"
    first = start(benches, lab, home, store, [], runs=3, min_time=0.2)
    assert first.wait() == 0, first.stderr  # the store now holds one intact run
    filler = fill(small_fs, leave_kib)
    bench = start(benches, lab, home, store, [], runs=3, min_time=0.2)
    code = bench.wait()
    print(f"--- {leave_kib} KiB free: exit {code}\n{bench.stderr}")
    assert_one_line_disk_message(bench.stderr, small_fs)
    assert_lease_sound(home)
    if code == 1:  # refused before measuring: one line, nothing measured
        errors = [ln for ln in bench.stderr.splitlines() if ln.startswith("farm: error:")]
        assert len(errors) == 1 and "intact" in errors[0], bench.stderr
    else:  # it measured: the record is in the store, the spill file or on stdout
        assert code == 3, bench.stderr
        run = bench.run_id
        kept = [r for r in json_records(bench) if r["run_id"] == run]
        spill = store.with_name(store.name + ".spill")
        if spill.exists():
            kept += [e["record"] for e in map(json.loads, spill.read_text().splitlines())
                     if e["kind"] == "record"]
        with ResultStore(store, create=False) as s:
            kept += s.records(run)
        assert [(r["device"], r["route"]) for r in kept] == [("lab1", "ort")]
        assert kept[0]["n"] >= 3 and len(kept[0]["samples_ms"]) == kept[0]["n"]
    # a reader still reads the intact store on the full disk
    assert listed_runs(home, store)[0]["status"] == "ok"
    filler.unlink()  # room again: benches run, the lease of the device is free
    again = start(benches, lab, home, store, [], runs=3, min_time=0.2)
    assert again.wait() == 0, again.stderr
    assert again.records()[("lab1", "ort")]["status"] == "ok"


def test_disk_fills_mid_run(faults: Any, lab: Any, small_fs: Path,
                            benches: list[BenchRun]) -> None:
    home = small_fs / "home"
    store = home / "results.sqlite"
    first = start(benches, lab, home, store, [], runs=3, min_time=0.2)
    assert first.wait() == 0, first.stderr
    bench = start(benches, lab, home, store, [], runs=50, min_time=3.0)
    bench.wait_event(lambda e: e.get("event") == "route_start")
    filler = fill(small_fs, 0)
    code = bench.wait()
    print(f"--- disk filled mid-run: exit {code}\n{bench.stderr}")
    assert_one_line_disk_message(bench.stderr, small_fs)
    assert code == 3, bench.stderr  # measured, but not all of it is in the store
    printed = json_records(bench)
    assert [(r["device"], r["route"], r["status"]) for r in printed] == [("lab1", "ort", "ok")]
    assert printed[0]["n"] >= 50 and len(printed[0]["samples_ms"]) == printed[0]["n"]
    assert "written nowhere" in bench.stderr
    filler.unlink()
    # the store knows the run lacks a record: partial, or interrupted when even its end
    # could not be written
    runs = {r["run_id"]: r for r in listed_runs(home, store)}
    assert runs[bench.run_id]["status"] in ("partial", "interrupted")
    assert_lease_sound(home)


# -- 2. a killed controller ---------------------------------------------------------------
def test_killed_bench_is_interrupted_and_resumable(faults: Any, lab: Any, tmp_path: Path,
                                                   benches: list[BenchRun]) -> None:
    home, store = tmp_path / "home", tmp_path / "results.sqlite"
    bench = start(benches, lab, home, store, [], runs=20, min_time=6.0)
    faults.wait_proc("lab1", ORT_RUNNING)
    bench.proc.send_signal(signal.SIGSTOP)  # frozen, not dead: its run is still going
    try:
        assert [r["status"] for r in listed_runs(home, store)] == ["running"]
    finally:
        bench.proc.send_signal(signal.SIGCONT)
    bench.proc.kill()
    bench.wait()
    runs = listed_runs(home, store)
    assert [(r["run_id"], r["status"]) for r in runs] == [(bench.run_id, "interrupted")]
    assert "interrupted" in farm(home, "results", "list", "--store", str(store)).stdout
    with ResultStore(store, create=False) as s:
        assert "is gone" in s.runs()[0].meta["interrupted"]
    faults.assert_no_farm_process()
    resumed = farm(home, "--inventory", str(lab.inventory_path), "bench", "--store", str(store),
                   "--resume", bench.run_id, timeout=180)
    assert resumed.returncode == 0, resumed.stderr
    runs = listed_runs(home, store)
    assert [(r["status"], r["n_records"]) for r in runs] == [("ok", 1)]


# -- 3. two controllers on one device ------------------------------------------------------
def test_lock_wait_waits_for_another_controller(faults: Any, lab: Any, tmp_path: Path,
                                                benches: list[BenchRun]) -> None:
    first = start(benches, lab, tmp_path / "a", tmp_path / "a.sqlite", [],
                  runs=100000, min_time=5.0)  # holds lab1 >= 10 s (ort, custom)
    faults.wait_proc("lab1", ORT_RUNNING)
    began = time.monotonic()
    second = start(benches, lab, tmp_path / "b", tmp_path / "b.sqlite",
                   ["--lock-wait", "60"], runs=3, min_time=0.2)
    waiting = second.wait_event(lambda e: e.get("event") == "warning", timeout=30)
    assert first.run_id in waiting["message"] and "waiting" in waiting["message"]
    assert second.wait(timeout=120) == 0, second.stderr
    assert time.monotonic() - began > 3  # it waited for the holder, it did not fail
    assert first.wait() == 0, first.stderr  # the holder was not disturbed
    assert second.records()[("lab1", "ort")]["status"] == "ok"
    faults.assert_no_farm_process()


def test_refused_bench_stores_no_run(faults: Any, lab: Any, tmp_path: Path,
                                     benches: list[BenchRun]) -> None:
    first = start(benches, lab, tmp_path / "a", tmp_path / "a.sqlite", [],
                  runs=100000, min_time=4.0)  # holds lab1 >= 8 s: the second gives up at 2
    faults.wait_proc("lab1", ORT_RUNNING)
    second = start(benches, lab, tmp_path / "b", tmp_path / "b.sqlite",
                   ["--lock-wait", "2"], runs=3, min_time=0.2)
    code = second.wait()
    err = " ".join(second.stderr.split())
    assert code == 1, second.stderr
    assert "is busy" in err and first.run_id in err  # names the holder
    assert "no run stored" in err
    assert listed_runs(tmp_path / "b", tmp_path / "b.sqlite") == []
    assert first.wait() == 0, first.stderr
