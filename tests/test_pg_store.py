"""The PostgreSQL result store against a real server the suite starts (tests/pg_fixture.py):
records, migrations, tags and the gate, `results check`, push/pull, a writer killed -9,
the server going away under a bench's keeper, and the errors for a wrong URL or login."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from pg_server import PgServer

from farm.cli.main import main
from farm.errors import StoreError, StoreUnavailable
from farm.results import migrate
from farm.results.backend import Store
from farm.results.keeper import SPILL, STORE, Keeper
from farm.results.open_store import open_store
from farm.results.pg_store import PgStore
from farm.results.schema import FIELD_NAMES, SCHEMA_VERSION, empty_record
from farm.results.store import ResultStore

REPO = Path(__file__).resolve().parent.parent


@pytest.fixture(autouse=True)
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("FARM_HOME", str(tmp_path / "home"))
    monkeypatch.delenv("FARM_STORE", raising=False)
    monkeypatch.chdir(tmp_path)
    return tmp_path


def rec(run_id: str, samples: list[float], **over: Any) -> dict[str, Any]:
    values = {"run_id": run_id, "device": "local", "transport": "local", "route": "ort",
              "model": "tiny", "variant": "fp32", "threads": 1, "status": "ok",
              "samples_ms": samples, "build_flags": {"fused": True},
              "policy": {"seed": 0, "n_boot": 200}, **over}
    return empty_record(**values)


def fill(store: Store, base: float, n_records: int = 2) -> str:
    run_id = store.start_run(["test"], {"model": "tiny"})
    for i in range(n_records):
        # six rounds of five: the gate judges rounds (farm.results.rounds)
        store.add(rec(run_id, [base + 0.01 * ((j * 7) % 11) for j in range(30)],
                      threads=i + 1, rounds={"planned": 6, "done": 6, "sizes": [5] * 6}))
    store.finish_run(run_id, "ok")
    return run_id


def test_records_read_back_as_from_sqlite_and_check_passes(pg_url, tmp_path, capsys) -> None:
    with open_store(pg_url) as pg, ResultStore(tmp_path / "r.sqlite") as lite:
        assert isinstance(pg, PgStore) and "***" in pg.where and "farm-test-pw" not in pg.where
        run_pg, run_lite = fill(pg, 2.0), fill(lite, 2.0)
        a, b = pg.records(run_pg), lite.records(run_lite)
        assert len(a) == 2 and list(a[0]) == list(FIELD_NAMES)
        for x, y in zip(a, b, strict=True):
            for name in ("samples_ms", "median_ms", "ci95_low_ms", "build_flags", "threads",
                         "policy", "status"):
                assert x[name] == y[name], name
        assert [r.n_records for r in pg.runs()] == [2]
        assert pg.resolve_run("latest") == run_pg == pg.resolve_run(run_pg[:17])
        assert pg.records(run_pg, threads=[2]) == [a[1]]
        assert pg.integrity_check().ok
    assert main(["results", "check", "--store", pg_url]) == 0
    out = capsys.readouterr().out
    assert "1 run(s), 2 record(s) read: ok" in out and "farm-test-pw" not in out


def test_concurrent_writers_one_transaction_per_record(pg_url) -> None:
    """Four processes write into one new database at once (creating the schema together):
    every record is there once."""
    code = ("import sys; from farm.results.open_store import open_store\n"
            "sys.path.insert(0, 'tests'); from test_pg_store import rec\n"
            "s = open_store(sys.argv[1]); r = s.start_run('w')\n"
            "for i in range(25): s.add(rec(r, [1.0, 1.1, 1.2], threads=i))\n"
            "s.finish_run(r, 'ok')\n")
    env = {**os.environ, "PYTHONPATH": f"{REPO}{os.pathsep}{REPO / 'tests'}"}
    procs = [subprocess.Popen([sys.executable, "-c", code, pg_url], cwd=REPO, env=env)
             for _ in range(4)]
    assert [p.wait(timeout=120) for p in procs] == [0] * 4
    with open_store(pg_url, create=False) as store:
        runs = store.runs()
        assert len(runs) == 4 and {r.n_records for r in runs} == {25}
        assert {r.status for r in runs} == {"ok"}
        assert len({r["record_id"] for r in store.records()}) == 100


def test_migration_of_an_older_database_and_a_newer_one_refused(pg_server: PgServer) -> None:
    assert migrate.MIGRATIONS[-1].version == SCHEMA_VERSION
    url = pg_server.create_db()
    with open_store(url) as store:
        fill(store, 1.0, 1)
    db = url.rsplit("/", 1)[1]
    pg_server.sql("ALTER TABLE records DROP COLUMN isa", db)
    pg_server.sql("ALTER TABLE runs DROP COLUMN controller_pid", db)
    pg_server.sql("UPDATE meta SET value = '2' WHERE key = 'schema_version'", db)
    with open_store(url) as store:
        assert store.migrated == ["isa"]
        assert [r["isa"] for r in store.records()] == [None]
        fill(store, 1.0, 1)  # the controller column is back
    assert pg_server.sql("SELECT value FROM meta WHERE key = 'schema_version'", db) == [
        (str(SCHEMA_VERSION),)]
    pg_server.sql(f"UPDATE meta SET value = '{SCHEMA_VERSION + 1}' "
                  "WHERE key = 'schema_version'", db)
    with pytest.raises(StoreError, match="upgrade farm"):
        open_store(url)


def test_tags_compare_and_gate_read_the_server(pg_url, capsys) -> None:
    with open_store(pg_url) as store:
        base = fill(store, 2.0)
        fill(store, 3.0)  # 50 % slower
    assert main(["results", "tag", base, "main", "--store", pg_url]) == 0
    assert main(["results", "tags", "--store", pg_url]) == 0
    assert f"main\t{base}" in capsys.readouterr().out
    assert main(["compare", "main", "latest", "--store", pg_url, "--output", "json"]) == 0
    assert main(["compare", "main", "latest", "--max-slowdown", "5%",
                 "--store", pg_url]) == 4
    os.environ["FARM_STORE"] = pg_url  # the default store of every command
    try:
        assert main(["compare", "main", "latest", "--max-slowdown", "80%"]) == 0
    finally:
        del os.environ["FARM_STORE"]


def test_push_and_pull_are_idempotent(pg_url, tmp_path, capsys) -> None:
    local = tmp_path / "ci.sqlite"
    with ResultStore(local) as store:
        runs = [fill(store, 1.0 + i, 3) for i in range(3)]
    assert main(["results", "push", pg_url, "--store", str(local)]) == 0
    assert "3 new run(s), 9 new record(s)" in capsys.readouterr().out
    assert main(["results", "push", pg_url, "--store", str(local)]) == 0
    assert "0 new run(s), 0 new record(s)" in capsys.readouterr().out
    with open_store(pg_url) as pg:
        assert sorted(r.run_id for r in pg.runs()) == sorted(runs)
        assert pg.integrity_check().ok
    back = tmp_path / "back.sqlite"
    assert main(["results", "pull", pg_url, runs[0], "--store", str(back)]) == 0
    assert main(["results", "pull", pg_url, "--store", str(back)]) == 0
    assert main(["results", "pull", pg_url, "--store", str(back)]) == 0
    out = capsys.readouterr().out.splitlines()
    assert "1 new run(s), 3 new record(s)" in out[0] and "2 new run(s), 6 new" in out[1]
    assert "0 new run(s), 0 new record(s)" in out[2]
    with ResultStore(back) as lite, ResultStore(local) as src:
        assert lite.records() == src.records()


WRITER = """
import sys
from farm.results.keeper import Keeper
from farm.results.open_store import open_store
sys.path.insert(0, 'tests')
from test_pg_store import rec
store = open_store(sys.argv[1])
run = store.start_run('writer')
keeper = Keeper(store)
i = 0
while True:
    keeper.keep(rec(run, [1.0 + (k % 13) * 0.01 for k in range(4000)], threads=i))
    i += 1
    print(i, flush=True)
"""


def test_a_writer_killed_mid_run_leaves_no_half_record(pg_url) -> None:
    env = {**os.environ, "PYTHONPATH": f"{REPO}{os.pathsep}{REPO / 'tests'}"}
    proc = subprocess.Popen([sys.executable, "-c", WRITER, pg_url], cwd=REPO, env=env,
                            stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    while int(proc.stdout.readline() or 0) < 5:
        pass
    time.sleep(0.05)  # somewhere inside a write
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    with open_store(pg_url) as store:
        report = store.integrity_check()
        assert report.ok, report.summary()
        (run,) = store.runs()
        assert run.status == "interrupted" and "killed" in run.meta["interrupted"]
        assert run.n_records >= 5
        assert {len(r["samples_ms"]) for r in store.records()} == {4000}


def test_server_gone_mid_bench_spills_and_push_recovers_all(pg_server, pg_url, tmp_path,
                                                           capsys) -> None:
    store = open_store(pg_url)
    keeper = Keeper(store)
    run = store.start_run("bench")
    kept = [keeper.keep(rec(run, [1.0, 1.1, 1.2], threads=1))]
    pg_server.stop("immediate")  # a crash: connections cut, nothing said
    try:
        kept.append(keeper.keep(rec(run, [1.0, 1.1, 1.3], threads=2)))
        kept.append(keeper.keep(rec(run, [1.0, 1.1, 1.4], threads=3)))
        assert keeper.keep_status([kept[1][0]["record_id"]], "partial", "device lost") == SPILL
    finally:
        pg_server.start()
    kept.append(keeper.keep(rec(run, [1.0, 1.1, 1.5], threads=4)))  # reconnects
    assert [where for _, where in kept] == [STORE, SPILL, SPILL, STORE]
    # the write that met the crash, then the reconnects that found no server
    assert "went away" in keeper.problems[0] and "cannot reach" in keeper.problems[1]
    assert "farm-test-pw" not in "".join(keeper.problems)
    assert keeper.spill_file.exists() and keeper.spill_file.is_relative_to(tmp_path / "home")
    store.finish_run(run, "partial")
    store.close()
    # `farm results push URL` (here with an empty local store) writes the spill file in
    ResultStore(tmp_path / "empty.sqlite").close()
    assert main(["results", "push", pg_url, "--store", str(tmp_path / "empty.sqlite")]) == 0
    assert "0 new record(s)" in capsys.readouterr().out
    assert not keeper.spill_file.exists()
    with open_store(pg_url) as again:
        got = again.records(run)
        assert sorted(r["threads"] for r in got) == [1, 2, 3, 4]
        assert next(r for r in got if r["threads"] == 2)["status"] == "partial"
        assert again.integrity_check().ok


def test_wrong_url_login_and_server_errors_are_one_line(pg_server, capsys) -> None:
    cases = [
        (pg_server.url("postgres", password="nope"), "refused the login of user 'farm'"),
        (pg_server.url("no_such_db"), "database 'no_such_db' does not exist"),
        (f"postgresql://farm:farm-test-pw@127.0.0.1:{pg_server.port}/db?port=abc",
         "not a valid PostgreSQL URL"),
        ("postgresql://farm:farm-test-pw@127.0.0.1:1/db", "cannot reach the PostgreSQL server"),
    ]
    for url, words in cases:
        with pytest.raises(StoreError) as info:
            open_store(url)
        text = str(info.value)
        assert words in text and "farm-test-pw" not in text, text
        assert isinstance(info.value, StoreUnavailable) == ("reach" in words)
        assert main(["results", "list", "--store", url]) == 1
        err = capsys.readouterr().err
        assert words in err and "farm-test-pw" not in err and "Traceback" not in err, err
