"""Real benches and the pytest plugin against the suite's PostgreSQL server: `farm bench
--store URL` killed -9 mid-run leaves whole records and an `interrupted` run; the plugin
tags a baseline in the server store and gates a later session against it."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from farm.results.open_store import open_store

REPO = Path(__file__).resolve().parent.parent
FAST = ["--routes", "ort,ort-unfused", "--runs", "5", "--min-time", "0", "--max-time", "2",
        "--warmup", "1", "--warmup-time", "0", "--profile-runs", "0", "--pause", "0"]


def _env(tmp_path: Path, **extra: str) -> dict[str, str]:
    env = {**os.environ, "FARM_HOME": str(tmp_path / "home"),
           "FARM_LOCAL_WORKDIR": str(tmp_path / "wd"),
           "PYTHONPATH": str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""), **extra}
    env.pop("FARM_INVENTORY", None)
    return env


@pytest.mark.slow
def test_bench_killed_mid_run_leaves_whole_records(pg_url, tmp_path) -> None:
    """FARM_STORE names the server; the bench is killed -9 once its first record is in."""
    proc = subprocess.Popen(
        # each route measures 3 s: the kill lands in the second one's measuring
        [sys.executable, "-m", "farm.cli.main", "bench", "--device", "local", *FAST,
         "--min-time", "3", "--max-time", "4", "--runs", "100000", "--output", "json"],
        cwd=tmp_path, env=_env(tmp_path, FARM_STORE=pg_url), stdout=subprocess.PIPE,
        stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 300
    with open_store(pg_url) as store:
        while not store.records() and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.2)
        assert proc.poll() is None, proc.communicate()
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    with open_store(pg_url) as store:
        (run,) = store.runs()
        assert run.status == "interrupted", run
        report = store.integrity_check()
        assert report.ok, report.summary()
        assert all(r["n"] == len(r["samples_ms"]) for r in store.records())


SAMPLE = '''
def test_tiny_is_fast(farm_bench):
    result = farm_bench(model="tiny", route="ort")
    assert result.median_ms < 1000

def test_no_slower_than_main(farm_bench):
    result = farm_bench(model="tiny", route="ort")
    check = result.no_slower_than("main", "50%")
    assert check, check
    print("GATE", check.verdict)
'''


@pytest.mark.slow
def test_plugin_keeps_and_gates_against_a_server_baseline(pg_url, tmp_path) -> None:
    (tmp_path / "sample").mkdir()
    (tmp_path / "sample" / "test_sample.py").write_text(SAMPLE)

    def session(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "pytest", "-p", "farm.pytest_plugin", "-p",
             "no:cacheprovider", "-rA", "-s", "--farm-store", pg_url, *args, "sample"],
            cwd=tmp_path, env=_env(tmp_path), capture_output=True, text=True, timeout=600)

    first = session("-k", "fast", "--farm-tag", "main")
    assert first.returncode == 0, first.stdout + first.stderr
    assert "tagged 1 run(s) as 'main'" in first.stdout
    assert "farm-test-pw" not in first.stdout + first.stderr  # the store line is redacted
    second = session("-k", "main")
    assert second.returncode == 0, second.stdout + second.stderr
    assert "GATE " in second.stdout and "gate vs main (p10, limit +50.0%)" in second.stdout
    with open_store(pg_url) as store:
        assert len(store.runs()) == 2 and json.dumps(store.meta_items("tag:"))
        assert len(store.records()) == 2


@pytest.mark.slow
def test_server_gone_mid_bench_the_bench_goes_on_and_push_sends_the_rest(
        pg_server, pg_url, tmp_path) -> None:
    """The server stops once the bench's first record is in and comes back only after the
    bench ended: the bench measures its second route anyway, says where the record went,
    and `farm results push URL` sends it and the run's end."""
    env = _env(tmp_path)
    proc = subprocess.Popen(
        [sys.executable, "-m", "farm.cli.main", "bench", "--device", "local", *FAST,
         "--min-time", "3", "--max-time", "4", "--runs", "100000", "--output", "json",
         "--store", pg_url],
        cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 300
        with open_store(pg_url) as store:
            while not store.records() and proc.poll() is None and time.monotonic() < deadline:
                time.sleep(0.2)
        assert proc.poll() is None, proc.communicate()
        pg_server.stop("fast")
        out, err = proc.communicate(timeout=300)
    finally:
        pg_server.start()
    assert proc.returncode == 0, err
    measured = json.loads(out)["records"]
    assert sorted(r["route"] for r in measured) == ["ort", "ort"], out
    assert "record not stored" in err and "went away" in err, err
    assert "farm results push URL" in err and "farm-test-pw" not in err, err
    done = subprocess.run(  # no local store (the bench wrote to the server): the spill only
        [sys.executable, "-m", "farm.cli.main", "results", "push", pg_url],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 and "are now in it" in done.stderr, done.stdout + done.stderr
    assert "no local store" in done.stdout
    with open_store(pg_url) as store:
        (run,) = store.runs()
        assert run.status == "ok", run
        assert sorted(r["record_id"] for r in store.records()) == sorted(
            r["record_id"] for r in measured)
        assert store.integrity_check().ok
