"""Bad agent lines in a real bench: the real agent runs on `local` behind a filter that
replaces its first runner event with garbage, an oversize line, wrong field types, a JSON
array, another protocol version, an unknown kind. The host refuses the line with a message
naming it, the device fails alone with that message, no measurement is stored (only a
`failed` record saying why), the store passes its integrity check, and no agent or runner
process is left behind."""

from __future__ import annotations

import dataclasses
import os
import sys
from pathlib import Path

import pytest

from farm.bench.config import BenchConfig, Policy
from farm.bench.runner import run_bench
from farm.inventory.builtin import local_device
from farm.results.run_checks import assert_store_ok
from farm.results.store import ResultStore
from farm.transports.local import LocalTransport

from .conftest import CORPUS

pytestmark = [pytest.mark.slow]

FAST = Policy(warmup_runs=1, warmup_min_s=0.0, min_runs=5, min_time_s=0.0, max_time_s=5.0)
CASES = {
    "garbage": "not JSON",
    "oversize": "byte cap",
    "wrong_types": "samples must be numbers",
    "not_an_object": "not an object",
    "other_proto": "proto 2, expected 1",
    "unknown_kind": "unknown kind 'teleport'",
    "bool_exit_code": "'exit_code' must be int/null, got bool",
}


def wrapper(tmp_path: Path, mode: str) -> Path:
    """A `python` for the device that pipes the agent (only) through inject.py."""
    script = tmp_path / "python-with-filter"
    real = sys.executable
    script.write_text(f"""#!/bin/sh
case "$2" in
  */farm_agent-*) "{real}" "$@" | "{real}" "{CORPUS / 'agent' / 'inject.py'}" {mode}; exit ;;
esac
exec "{real}" "$@"
""")
    script.chmod(0o755)
    return script


def leftovers(workdir: str) -> list[str]:
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            cmd = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode()
            state = (entry / "stat").read_text().rsplit(") ", 1)[1][0]
        except (OSError, IndexError):
            continue
        if workdir in cmd and state != "Z":
            found.append(f"{entry.name}: {cmd}")
    return found


@pytest.mark.parametrize("mode", sorted(CASES))
def test_bad_agent_line_fails_the_device_clearly(mode: str, tmp_path: Path,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FARM_HOME", str(tmp_path / "home"))
    workdir = str(tmp_path / "wd")
    dev = dataclasses.replace(local_device(), name="liar", workdir=workdir,
                              python=str(wrapper(tmp_path, mode)))
    config = BenchConfig(routes=("ort",), policy=FAST, pause_s=0.0, profile_runs=0)
    with ResultStore(tmp_path / "r.sqlite") as store:
        result = run_bench([dev], config, store, "test")
        status, detail = result.devices["liar"]
        assert status == "failed" and CASES[mode] in detail, detail
        assert result.exit_code == 3 and result.status == "failed"
        records = store.records(result.run_id)
        assert [(r["route"], r["status"]) for r in records] == [("ort", "failed")]
        assert CASES[mode] in records[0]["status_detail"]
        assert not records[0]["samples_ms"] and records[0]["median_ms"] is None
        assert_store_ok(store)
    assert not leftovers(workdir)


def test_non_utf8_agent_output_reaches_the_decoder() -> None:
    code = ("import sys; sys.stdout.buffer.write(b'bad \\xff\\xfe bytes\\n'); "
            "sys.stdout.buffer.write(b'next\\n'); sys.stdout.flush()")
    proc = LocalTransport(local_device()).start([sys.executable, "-c", code])
    try:
        first = proc.read_line(timeout=10)
        assert first is not None and first.startswith("bad ")
        assert proc.read_line(timeout=10) == "next"
    finally:
        proc.close()
