"""The SQLite result store: round trip, validation, version refusal, integrity check,
crash survival, run resolution, and the fault-suite integrity helpers."""

from __future__ import annotations

import re
import sqlite3
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from farm.errors import StoreError
from farm.results import provenance
from farm.results.run_checks import assert_store_ok, partial_run_problems, records_by_device
from farm.results.schema import FIELD_NAMES, SCHEMA_VERSION
from farm.results.store import ResultStore

REPO = Path(__file__).resolve().parent.parent


def _record(run_id: str, **over: object) -> dict:
    rec = {
        "run_id": run_id, "device": "local", "transport": "local", "arch": "x86_64",
        "route": "ort", "model": "tiny", "variant": "fp32", "threads": 2, "status": "ok",
        "samples_ms": [1.25, 1.5, 1.0, 2.0, 1.75], "load_ms": 12.5, "first_run_ms": 3.0,
        "warmup_runs": 5, "peak_vmhwm_kb": 123456,
        "cpu_info": {"model": "test cpu", "features": ["avx2", "fma"], "cores": 2},
        "build_flags": {"provider": "CPUExecutionProvider", "opt": "all"},
        "ops": {"categories": {"fc": 0.5, "attention": 0.25}, "nodes": []},
        "state_before": {"governor": {}, "freq_khz": {}, "thermal_c": {}, "load": [0, 0, 0]},
        "drift": [], "accuracy": {"ok": True, "max_abs_diff": 0.0},
        "policy": {"seed": 4, "min_runs": 5},
    }
    rec.update(over)
    return rec


@pytest.fixture
def store(tmp_path: Path):  # type: ignore[no-untyped-def]
    with ResultStore(tmp_path / "results.sqlite") as s:
        yield s


def test_round_trip_survives_reopen(tmp_path: Path) -> None:
    path = tmp_path / "r.sqlite"
    with ResultStore(path) as s:
        run_id = s.start_run(["farm", "bench", "--device", "local"], {"model": "tiny"})
        written = [s.add(_record(run_id)), s.add(_record(run_id, route="tvm", threads=1))]
        s.finish_run(run_id, "ok")
    assert written[0]["median_ms"] == 1.5 and written[0]["n"] == 5  # filled in
    assert written[0]["farm_version"] and written[0]["record_id"]
    with ResultStore(path) as s:
        assert s.records() == written
        assert s.records(run_id) == written
        assert s.records(route="tvm") == [written[1]]
        assert s.records(route=["tvm", "ort"], threads=2) == [written[0]]
        (run,) = s.runs()
    assert list(written[0]) == list(FIELD_NAMES)
    assert written[0]["cpu_info"]["features"] == ["avx2", "fma"]  # JSON comes back parsed
    assert (run.run_id, run.status, run.n_records) == (run_id, "ok", 2)
    assert run.command == "farm bench --device local"
    assert run.meta["model"] == "tiny" and "farm_commit" in run.meta["provenance"]
    assert run.finished_utc is not None and run.finished_utc >= run.started_utc


def test_given_statistics_must_match_samples(store: ResultStore) -> None:
    run_id = store.start_run("t")
    good = store.add(_record(run_id))
    again = {k: good[k] for k in good if k != "record_id"}
    assert store.add(again)["median_ms"] == good["median_ms"]  # same numbers accepted
    with pytest.raises(StoreError, match="statistics do not match samples_ms") as exc:
        store.add(_record(run_id, median_ms=1.4))
    assert "record_stats" in str(exc.value)  # says what to do


@pytest.mark.parametrize(("over", "message"), [
    ({"colour": "red"}, "unknown field"),
    ({"threads": "2"}, "'threads': expected an integer"),
    ({"threads": True}, "'threads': expected an integer"),
    ({"load_ms": float("nan")}, "'load_ms': expected a finite number"),
    ({"device": None}, "required field"),
    ({"status": "great"}, "status 'great'"),
    ({"ops": {"bad": object()}}, "not JSON-serializable"),
    ({"samples_ms": [1.0, "x"]}, "samples_ms: not a list of numbers"),
    ({"samples_ms": [1.0, -2.0]}, "non-negative"),
])
def test_bad_records_are_refused(store: ResultStore, over: dict, message: str) -> None:
    run_id = store.start_run("t")
    with pytest.raises(StoreError, match=message):
        store.add(_record(run_id, **over))
    assert store.records() == []


def test_record_needs_a_started_run_and_unique_id(store: ResultStore) -> None:
    with pytest.raises(StoreError, match="no such run"):
        store.add(_record("nope"))
    run_id = store.start_run("t")
    store.add(_record(run_id, record_id="r1"))
    with pytest.raises(StoreError, match="'r1' not stored"):
        store.add(_record(run_id, record_id="r1"))
    with pytest.raises(StoreError, match="cannot finish"):
        store.finish_run(run_id, "running")


def test_failed_record_without_samples(store: ResultStore) -> None:
    run_id = store.start_run("t")
    rec = store.add(_record(run_id, status="failed", status_detail="device dropped",
                            samples_ms=None))
    assert rec["n"] is None and rec["median_ms"] is None
    assert store.integrity_check().ok


def _craft_store(path: Path, version: str) -> None:
    db = sqlite3.connect(path)
    db.execute("CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)")
    db.execute("INSERT INTO meta VALUES ('schema_version', ?)", (version,))
    db.commit()
    db.close()


def test_store_of_another_version_is_refused(tmp_path: Path) -> None:
    newer = tmp_path / "newer.sqlite"
    _craft_store(newer, "999")
    with pytest.raises(StoreError, match="schema version 999") as exc:
        ResultStore(newer)
    assert "upgrade farm" in str(exc.value)
    older = tmp_path / "older.sqlite"
    _craft_store(older, "0")
    with pytest.raises(StoreError, match="move it aside") as exc:
        ResultStore(older)
    assert f"reads version {SCHEMA_VERSION} only" in str(exc.value)


def test_changed_field_list_and_foreign_files_are_refused(tmp_path: Path) -> None:
    path = tmp_path / "r.sqlite"
    ResultStore(path).close()
    db = sqlite3.connect(path)
    db.execute("ALTER TABLE records DROP COLUMN policy")
    db.commit()
    db.close()
    with pytest.raises(StoreError, match=r"missing \['policy'\]"):
        ResultStore(path)
    junk = tmp_path / "junk.sqlite"
    junk.write_bytes(b"this is not a database" * 100)
    with pytest.raises(StoreError, match="cannot be read as SQLite"):
        ResultStore(junk)
    other = tmp_path / "other.sqlite"
    db = sqlite3.connect(other)
    db.execute("CREATE TABLE t (x)")
    db.commit()
    db.close()
    with pytest.raises(StoreError, match="not a farm result store"):
        ResultStore(other)


def test_integrity_check_detects_tampering(tmp_path: Path) -> None:
    path = tmp_path / "r.sqlite"
    with ResultStore(path) as s:
        run_id = s.start_run("t")
        a = s.add(_record(run_id))
        b = s.add(_record(run_id, route="tvm"))
        report = assert_store_ok(s)
        assert (report.runs_checked, report.records_checked) == (1, 2)
    db = sqlite3.connect(path)
    db.execute("UPDATE records SET median_ms = median_ms * 0.9 WHERE record_id = ?",
               (a["record_id"],))
    db.execute("UPDATE records SET ops = '{broken' WHERE record_id = ?", (b["record_id"],))
    db.commit()
    db.close()
    with ResultStore(path) as s:
        report = s.integrity_check()
        assert not report.ok
        text = "\n".join(report.problems)
        assert f"record {a['record_id']}" in text and "median_ms: stored 1.35" in text
        assert "field 'ops' is not valid JSON" in text
        assert len(report.problems) == 2
        with pytest.raises(StoreError, match="failed its integrity check"):
            assert_store_ok(s)
        with pytest.raises(StoreError, match="not valid JSON"):
            s.records()


def test_records_survive_a_crash(tmp_path: Path) -> None:
    path = tmp_path / "r.sqlite"
    script = (
        "import os, sys\n"
        "from farm.results.store import ResultStore\n"
        "s = ResultStore(sys.argv[1])\n"
        "run = s.start_run('crash')\n"
        "for route in ('ort', 'tvm'):\n"
        "    s.add({'run_id': run, 'device': 'local', 'route': route, 'status': 'ok',\n"
        "           'samples_ms': [1.0, 2.0, 3.0]})\n"
        "os._exit(9)  # no close, no finish_run\n"
    )
    proc = subprocess.run([sys.executable, "-c", script, str(path)], cwd=REPO, timeout=60,
                          capture_output=True, text=True, check=False)
    assert proc.returncode == 9, proc.stderr
    with ResultStore(path) as s:
        assert [r["route"] for r in s.records()] == ["ort", "tvm"]
        # its writer died without finishing it: found on this open (tests/test_host_faults.py)
        assert s.runs()[0].status == "interrupted"
        assert s.integrity_check().ok


def test_concurrent_writers_share_one_store(store: ResultStore) -> None:
    run_id = store.start_run("t")

    def work(device: str) -> None:
        for i in range(8):
            store.add(_record(run_id, device=device, threads=i + 1))

    threads = [threading.Thread(target=work, args=(f"dev{i}",)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(store.records(run_id)) == 32
    assert sorted(records_by_device(store, run_id)) == ["dev0", "dev1", "dev2", "dev3"]


def test_resolve_run(store: ResultStore) -> None:
    with pytest.raises(StoreError, match="no runs"):
        store.resolve_run("latest")
    first, second = store.start_run("a"), store.start_run("b")
    assert store.resolve_run("latest") == second
    assert store.resolve_run(first) == first
    k = next(i for i, (x, y) in enumerate(zip(first, second, strict=True)) if x != y)
    assert store.resolve_run(first[:k + 1]) == first  # shortest unique prefix
    with pytest.raises(StoreError, match="ambiguous"):
        store.resolve_run(first[:k])
    with pytest.raises(StoreError, match="ambiguous"):
        store.resolve_run("2")
    with pytest.raises(StoreError, match="no run matches") as exc:
        store.resolve_run("zzz")
    assert "farm results list" in str(exc.value)
    with pytest.raises(StoreError, match="not a record field"):
        store.records(colour="red")


def test_partial_run_helpers(store: ResultStore) -> None:
    run_id = store.start_run("bench")
    store.add(_record(run_id, device="good"))
    kept = store.add(_record(run_id, device="flaky", route="ort"))
    store.add(_record(run_id, device="flaky", route="tvm", status="failed",
                      status_detail="connection lost", samples_ms=None))
    store.set_status([kept["record_id"]], "partial", "kept: finished before the device failed")
    (marked,) = store.records(run_id, device="flaky", route="ort")
    assert {**marked, "status": "ok", "status_detail": None} == kept  # measurements untouched
    assert marked["status"] == "partial"
    with pytest.raises(StoreError, match="not one of"):
        store.set_status([kept["record_id"]], "meh", None)
    with pytest.raises(StoreError, match="'nope' is not in"):
        store.set_status(["nope"], "partial", None)
    assert partial_run_problems(store, run_id, {"flaky"}) == [
        f"run {run_id}: status 'running', expected 'partial'"]
    store.finish_run(run_id, "partial")
    assert partial_run_problems(store, run_id, {"flaky"}) == []
    problems = partial_run_problems(store, run_id, {"good"})
    assert any("device good: no failed/partial record" in p for p in problems)
    assert any("device flaky" in p and "not expected to fail" in p for p in problems)


def test_provenance(tmp_path: Path) -> None:
    commit = provenance.farm_commit()
    assert re.fullmatch(r"[0-9a-f]{40}(\+dirty)?", commit), commit
    assert provenance.farm_commit(tmp_path) == "unknown"  # not a git checkout
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z", provenance.utc_now())
    cpu = provenance.host_cpu_info()
    assert cpu["cores"] >= 1 and cpu["machine"] and isinstance(cpu["features"], list)
    assert provenance.host_provenance()["farm_version"] == provenance.farm_version()
