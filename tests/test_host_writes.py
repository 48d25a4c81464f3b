"""Host writes on a full disk (a small tmpfs each test mounts and fills), and the controller
recorded in a run row: the store, the lease and the spill file each say which file system
is full in one line, an intact store is never called unreadable, what the store refuses is
kept, and a run whose controller died reads `interrupted`."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from farm.bench.lease import DeviceLease, LeaseBusy, LeaseWriteError
from farm.results.controller import is_gone, this_controller
from farm.results.keeper import MEMORY, SPILL, Keeper
from farm.results.store import ResultStore, StoreDiskError

REPO = Path(__file__).resolve().parent.parent


@pytest.fixture
def small_fs(tmp_path: Path) -> Iterator[Path]:
    """A 1 MB tmpfs of the test's own, unmounted at the end."""
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root")
    mnt = tmp_path / "fs"
    mnt.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(mnt)], check=True)
    try:
        yield mnt
    finally:
        if subprocess.run(["umount", str(mnt)], check=False).returncode != 0:
            subprocess.run(["umount", "-l", str(mnt)], check=False)


def fill(fs: Path, leave_kib: int) -> Path:
    filler = fs / f"filler-{len(list(fs.iterdir()))}"
    with open(filler, "wb") as f:
        while True:
            st = os.statvfs(fs)
            extra = st.f_bavail * st.f_frsize - leave_kib * 1024
            if extra <= 0:
                break
            try:
                f.write(b"\0" * min(extra, 1 << 20))
                f.flush()
            except OSError:
                break
    return filler


def record(run_id: str, n: int = 5) -> dict:
    return {"run_id": run_id, "device": "lab1", "route": "ort", "status": "ok",
            "samples_ms": [1.0 + i / 10 for i in range(n)]}


# -- the store ---------------------------------------------------------------------------
@pytest.mark.parametrize("leave_kib", [0, 8, 20])
def test_full_disk_store_is_intact_not_unreadable(small_fs: Path, leave_kib: int) -> None:
    path = small_fs / "results.sqlite"
    with ResultStore(path) as store:
        run = store.start_run("farm bench")
        store.add(record(run))
        store.finish_run(run, "ok")
    fill(small_fs, leave_kib)
    # a writer: SQLite cannot make its -shm (32 KiB); one line naming the file system
    with pytest.raises(StoreDiskError) as info, ResultStore(path) as store:
        store.add(record(store.start_run("farm bench")))
    text = str(info.value)
    assert "\n" not in text and f"no space left on {small_fs}" in text, text
    assert "free space there" in text and "intact" in text, text
    with ResultStore(path, create=False) as store:  # a reader reads it as it is
        assert store.runs()[0].status == "ok"
        assert store.records(run)[0]["n"] == 5


def test_refused_record_goes_to_the_spill_file_then_into_the_store(small_fs: Path) -> None:
    path = small_fs / "results.sqlite"
    store = ResultStore(path)
    keeper = Keeper(store)
    run = store.start_run("farm bench")
    store.release_space()  # an empty WAL: the next record needs new pages
    filler = fill(small_fs, 4)  # one tmpfs page: a short JSON line, not SQLite's frames
    kept, where = keeper.keep(record(run))
    assert where == SPILL, keeper.problems
    assert keeper.keep_status([kept["record_id"]], "partial", "device failed") == SPILL
    assert f"no space left on {small_fs}" in keeper.problems[0]
    assert keeper.pending(run)[0]["status"] == "partial"
    store.close()
    filler.unlink()
    with ResultStore(path) as again:  # the next open with room writes the spill file in
        assert again.replayed == 2
        stored = again.records(run)
        assert [(r["record_id"], r["status"]) for r in stored] == [(kept["record_id"],
                                                                     "partial")]
        assert stored[0]["samples_ms"] == kept["samples_ms"]
    assert not path.with_name(path.name + ".spill").exists()


def test_record_written_nowhere_stays_in_memory(small_fs: Path) -> None:
    store = ResultStore(small_fs / "results.sqlite")
    keeper = Keeper(store)
    run = store.start_run("farm bench")
    fill(small_fs, 0)
    kept, where = keeper.keep(record(run, n=2000))
    assert where == MEMORY
    assert keeper.unsaved() == [kept] and len(keeper.problems) == 2  # store, spill file
    assert keeper.keep_finish(run, "ok") in (SPILL, MEMORY)
    store.close()


# -- the lease ---------------------------------------------------------------------------
def test_empty_or_damaged_lease_is_stale_not_held(tmp_path: Path) -> None:
    for content in ("", "{not json", "[1, 2]"):
        (tmp_path / "pi.lease").write_text(content)
        lease = DeviceLease("pi", "NEW", directory=tmp_path)
        lease.acquire()  # no wait: it names no holder, so nobody holds it
        assert json.loads((tmp_path / "pi.lease").read_text())["run_id"] == "NEW"
        lease.release()


def test_lease_on_a_full_disk_fails_in_one_line_and_leaves_no_lease(small_fs: Path) -> None:
    locks = small_fs / "locks"
    locks.mkdir()
    fill(small_fs, 0)
    with pytest.raises(LeaseWriteError) as info:
        DeviceLease("pi", "RUN", directory=locks).acquire()
    text = str(info.value)
    assert "\n" not in text and f"no space left on {small_fs}" in text, text
    assert "lease of device 'pi'" in text
    assert list(locks.iterdir()) == []  # no empty lease blocks the device afterwards


def test_lease_waiter_hears_who_holds_it(tmp_path: Path) -> None:
    first = DeviceLease("pi", "RUN-A", directory=tmp_path)
    first.acquire()
    heard: list[str] = []
    with pytest.raises(LeaseBusy):
        DeviceLease("pi", "RUN-B", directory=tmp_path).acquire(0.5, poll_s=0.1,
                                                               on_wait=heard.append)
    first.release()
    assert len(heard) == 1 and "farm bench RUN-A" in heard[0]


# -- the controller of a run ---------------------------------------------------------------
def test_run_of_a_dead_controller_reads_interrupted(tmp_path: Path) -> None:
    path = tmp_path / "r.sqlite"
    script = ("import os, sys\nfrom farm.results.store import ResultStore\n"
              "s = ResultStore(sys.argv[1]); s.start_run('farm bench'); os._exit(9)\n")
    proc = subprocess.run([sys.executable, "-c", script, str(path)], cwd=REPO, timeout=60,
                          check=False, capture_output=True, text=True)
    assert proc.returncode == 9, proc.stderr
    with ResultStore(path) as store:
        mine = store.start_run("farm bench")  # alive: stays running
        runs = {r.run_id: r for r in store.runs()}
        dead = next(r for r in runs.values() if r.run_id != mine)
        assert dead.status == "interrupted" and "is gone" in dead.meta["interrupted"]
        assert runs[mine].status == "running"
        store.claim_run(dead.run_id)  # a resume: running again, under this process
        assert {r.status for r in store.runs()} == {"running"}


def test_controller_identity_catches_a_reused_pid() -> None:
    me = this_controller()
    assert not is_gone(me.pid, me.host, me.started)
    if me.started is not None:  # same pid, another start time: a reused pid
        assert is_gone(me.pid, me.host, "1999-01-01T00:00:00.00Z")
    assert not is_gone(me.pid, "another-host", None)  # another host's: cannot tell
    assert not is_gone(None, socket.gethostname(), None)  # written before version 3
