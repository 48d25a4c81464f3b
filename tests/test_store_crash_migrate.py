"""Crash safety and migration of the result store, with real processes and real old stores.

* a writer SIGKILLed inside a transaction (and one killed during a burst of adds): the
  store opens, passes SQLite's and farm's checks, and holds exactly the committed records;
* a store written by the farm of schema version 1 (the code of commit V1_COMMIT, taken
  from git history and run in its own process) is migrated in place when opened.
"""

from __future__ import annotations

import io
import os
import signal
import sqlite3
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

from farm.errors import StoreError
from farm.results import migrate
from farm.results.schema import FIELD_NAMES, SCHEMA_VERSION
from farm.results.store import ResultStore

REPO = Path(__file__).resolve().parent.parent
V1_COMMIT = "afd27d5fc803b6e3527aa5b076ccb7275359f793"  # last commit writing schema version 1

_WRITER = r"""
import os, sys, time
from farm.results.store import ResultStore
s = ResultStore(sys.argv[1])
run = s.start_run("crash")
mode = sys.argv[2]
def rec(i):
    return {"run_id": run, "device": "lab%d" % (i % 4), "route": "ort", "status": "ok",
            "samples_ms": [1.0 + (i * j) % 13 * 0.5 for j in range(300)]}
if mode == "burst":
    i = 0
    while True:
        s.add(rec(i)); i += 1
        print("stored", i, flush=True)
for i in range(20):
    s.add(rec(i))
wal = sys.argv[1] + "-wal"
before = os.path.getsize(wal)
big = "[" + ",".join(["1.0"] * 8000) + "]"
with s._transaction() as db:  # the same transaction `add` uses, held open
    for i in range(250):       # ~8 MB, more than SQLite's page cache: it spills uncommitted
        db.execute("INSERT INTO records (record_id, run_id, device, route, status, samples_ms)"
                   " VALUES (?, ?, 'x', 'ort', 'ok', ?)", ("open-%d" % i, run, big))
    db.execute("UPDATE runs SET status = 'ok' WHERE run_id = ?", (run,))
    print("inside", before, os.path.getsize(wal), flush=True)
    time.sleep(120)
"""


def _writer(path: Path, mode: str) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, "-c", _WRITER, str(path), mode], cwd=REPO,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _assert_sound(path: Path) -> list[dict]:
    db = sqlite3.connect(path)
    assert db.execute("PRAGMA integrity_check").fetchall() == [("ok",)]
    db.close()
    with ResultStore(path, create=False) as store:
        report = store.integrity_check()
        assert report.ok, report.summary()
        store.require_sound()
        return store.records()


def test_writer_killed_inside_a_transaction(tmp_path: Path) -> None:
    path = tmp_path / "r.sqlite"
    proc = _writer(path, "hold")
    try:
        assert proc.stdout is not None
        said = proc.stdout.readline().split()
        assert said and said[0] == "inside", proc.stderr.read()
        before, during = int(said[1]), int(said[2])
        assert during > before + (1 << 20)  # uncommitted frames are in the WAL file
        proc.send_signal(signal.SIGKILL)
        assert proc.wait(30) == -signal.SIGKILL
    finally:
        proc.kill()
    records = _assert_sound(path)
    assert len(records) == 20 and not [r for r in records if r["record_id"].startswith("open")]
    with ResultStore(path) as store:
        # the uncommitted 'ok' is gone too; the killed writer's run is found interrupted
        assert store.runs()[0].status == "interrupted"
        run = store.start_run("after")  # and the store takes writes again
        store.add({"run_id": run, "device": "d", "route": "ort", "status": "ok",
                   "samples_ms": [1.0, 2.0]})


def test_writer_killed_during_a_burst(tmp_path: Path) -> None:
    path = tmp_path / "r.sqlite"
    proc = _writer(path, "burst")
    last = 0
    try:
        assert proc.stdout is not None
        while last < 25:  # a kill at an arbitrary moment of the 26th add or later
            line = proc.stdout.readline()
            assert line, proc.stderr.read()
            last = int(line.split()[1])
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(30)
    finally:
        proc.kill()
    records = _assert_sound(path)
    # everything reported stored is there; at most the add in flight also committed
    assert last <= len(records) <= last + 2
    assert all(len(r["samples_ms"]) == 300 and r["n"] == 300 for r in records)


def _v1_tree(tmp_path: Path) -> Path:
    """The farm package of schema version 1, from git history."""
    proc = subprocess.run(["git", "-C", str(REPO), "archive", V1_COMMIT, "farm"],
                          capture_output=True, timeout=120, check=False)
    if proc.returncode != 0:
        pytest.skip(f"commit {V1_COMMIT[:12]} not in this clone's history: "
                    f"{proc.stderr.decode()[-200:]}")
    tree = tmp_path / "farm-v1"
    with tarfile.open(fileobj=io.BytesIO(proc.stdout)) as tar:
        tar.extractall(tree, filter="data")
    return tree


_V1_WRITER = r"""
import sys
from farm.results import schema
from farm.results.store import ResultStore
assert schema.SCHEMA_VERSION == 1, schema.SCHEMA_VERSION
with ResultStore(sys.argv[1]) as s:
    run = s.start_run(["farm", "bench", "--device", "lab1"], {"model": "tiny"})
    for route in ("ort", "tvm", "custom"):
        s.add({"run_id": run, "device": "lab1", "route": route, "status": "ok",
               "samples_ms": [1.0, 1.5, 2.0], "policy": {"seed": 0}})
    s.finish_run(run, "ok")
print(",".join(schema.FIELD_NAMES))
"""


def _v1_store(tmp_path: Path) -> tuple[Path, list[str]]:
    tree = _v1_tree(tmp_path)
    path = tmp_path / "v1.sqlite"
    env = {**os.environ, "PYTHONPATH": str(tree)}
    proc = subprocess.run([sys.executable, "-c", _V1_WRITER, str(path)], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode == 0, proc.stderr
    return path, proc.stdout.strip().split(",")


def _meta_version(path: Path) -> str:
    db = sqlite3.connect(path)
    try:
        return db.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone()[0]
    finally:
        db.close()


def test_version1_store_written_by_the_old_farm_is_migrated(tmp_path: Path) -> None:
    path, v1_fields = _v1_store(tmp_path)
    assert _meta_version(path) == "1"
    with ResultStore(path) as store:
        assert sorted(store.migrated) == sorted(set(FIELD_NAMES) - set(v1_fields))
        old = store.records()
        run = store.runs()[0]
        assert [r["route"] for r in old] == ["ort", "tvm", "custom"]
        assert all(r[name] is None for r in old for name in store.migrated)  # not invented
        assert old[0]["median_ms"] == 1.5 and run.status == "ok"
        new_run = store.start_run("farm bench")
        store.add({"run_id": new_run, "device": "lab1", "route": "ort", "status": "ok",
                   "samples_ms": [1.0]})
        assert store.integrity_check().ok
    assert _meta_version(path) == str(SCHEMA_VERSION)
    with ResultStore(path) as store:  # a second open has nothing to do
        assert store.migrated == [] and len(store.records()) == 4


def test_missing_columns_are_added_in_one_transaction(tmp_path: Path,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """A version-1 store whose table lacks two of today's columns (as a store written before
    those fields existed does): both are added, or, if that fails, neither."""
    path, v1_fields = _v1_store(tmp_path)
    added_since_v1 = set(FIELD_NAMES) - set(v1_fields)  # e.g. rounds, emulated
    db = sqlite3.connect(path)
    db.execute("ALTER TABLE records DROP COLUMN sizes")
    db.execute("ALTER TABLE records DROP COLUMN cv")
    db.commit()
    db.close()

    class FailSecond(dict):  # the second ALTER fails: the first must be rolled back
        calls = 0

        def __getitem__(self, key: str) -> str:
            FailSecond.calls += 1
            if FailSecond.calls == 2:
                raise RuntimeError("disk full (injected)")
            return super().__getitem__(key)

    monkeypatch.setattr(migrate, "SQL_TYPES", FailSecond(migrate.SQL_TYPES))
    with pytest.raises(RuntimeError, match="injected"):
        ResultStore(path)
    db = sqlite3.connect(path)
    cols = {r[1] for r in db.execute("PRAGMA table_info(records)")}
    db.close()
    assert "cv" not in cols and "sizes" not in cols and _meta_version(path) == "1"
    monkeypatch.undo()

    with ResultStore(path) as store:
        assert sorted(store.migrated) == sorted({"cv", "sizes"} | added_since_v1)
        assert [r["cv"] for r in store.records()] == [None] * 3
    # the migrated columns sit at the end of the table: reading names them, order is free
    with ResultStore(path) as store:
        assert list(store.records()[0]) == list(FIELD_NAMES)


def test_newer_or_unknown_layouts_are_refused(tmp_path: Path) -> None:
    path, _ = _v1_store(tmp_path)
    db = sqlite3.connect(path)
    db.execute("ALTER TABLE records ADD COLUMN from_the_future TEXT")
    db.commit()
    db.close()
    with pytest.raises(StoreError, match="columns this farm does not know"):
        ResultStore(path)
    assert _meta_version(path) == "1"
