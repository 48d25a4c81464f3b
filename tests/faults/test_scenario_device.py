"""Fault scenarios on one device of a real two-device bench (lab1 faulted, lab2 healthy):
the agent killed, an artifact corrupted between deploy and bench, the host key changed,
the work dir full, an agent of another protocol version, a reboot between deploy and
bench. Each: lab1 fails alone with a message naming the fault, lab2's results are
complete, the store is sound, no agent or runner is left on any device, exit code 3 (a
reboot between deploy and bench is not a failure: that bench completes, exit code 0)."""

from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path

import pytest

from farm.bench.prepare import agent_artifact
from farm.deploy.selection import bundle_for
from farm.inventory import load_inventory
from farm.results.run_checks import assert_store_ok
from farm.results.store import ResultStore

from .bench_run import check_failed_alone
from .lab_faults import ORT_RUNNING

pytestmark = [pytest.mark.lab, pytest.mark.slow]

# min-time of a bench whose fault is in place before it starts: there is no measuring window
# to hit, so the healthy device's routes need only their 10 runs
IN_PLACE = 0.3


def test_4_agent_killed_on_the_device(faults, start_bench) -> None:
    bench = start_bench(["lab1", "lab2"])
    faults.wait_proc("lab1", ORT_RUNNING)
    assert faults.signal_procs("lab1", "farm_agent", signal.SIGKILL)
    assert bench.wait() == 3
    records = check_failed_alone(bench, "lab1", ["lab2"], ["agent channel closed"])
    assert "device lost during this route" in records[("lab1", "ort")]["status_detail"]
    faults.assert_no_farm_process()  # the runner died with its agent (no orphan)

    # `farm bench --resume RUN` finishes the partial run: lab2's kept result is not redone
    resumed = start_bench([], extra=["--resume", bench.run_id])
    assert resumed.wait() == 0, resumed.stderr
    after = resumed.records()
    assert after[("lab2", "ort")]["record_id"] == records[("lab2", "ort")]["record_id"]
    assert after[("lab1", "ort")]["status"] == "ok" and after[("lab1", "ort")]["n"] >= 10
    with ResultStore(resumed.store, create=False) as store:
        assert [r.status for r in store.runs()] == ["ok"]
        assert_store_ok(store)
    faults.assert_no_farm_process()


def _warm(start_bench, home: Path) -> None:
    """A first bench deploys everything (model included) to both devices."""
    first = start_bench(["lab1", "lab2"], home=home, runs=1, min_time=0.0)
    assert first.wait() == 0, first.stderr


def test_5_artifact_corrupted_between_deploy_and_bench(faults, start_bench,
                                                       bench_home: Path) -> None:
    _warm(start_bench, bench_home)
    models = sorted((faults.workdir_on_host("lab1") / "models").glob("*tiny-fp32*.onnx"),
                    key=lambda p: p.stat().st_mtime)
    faults.corrupt("lab1", f"models/{models[-1].name}")  # size and mtime unchanged
    bench = start_bench(["lab1", "lab2"], min_time=IN_PLACE)
    assert bench.wait() == 3
    check_failed_alone(bench, "lab1", ["lab2"], ["is corrupted", "redeploy"])
    faults.assert_no_farm_process()


def test_6_host_key_changed(faults, start_bench) -> None:
    with faults.host_key_changed("lab1"):
        bench = start_bench(["lab1", "lab2"], min_time=IN_PLACE)
        assert bench.wait() == 3
    check_failed_alone(bench, "lab1", ["lab2"], ["host key CHANGED", "SHA256:"])
    faults.assert_no_farm_process()


def test_6_host_key_changed_summary_says_the_next_step(faults, start_bench) -> None:
    with faults.host_key_changed("lab1"):
        bench = start_bench(["lab1"], runs=1, min_time=0.0)
        assert bench.wait() == 3
    # the step carries the inventory the bench was given (farm.followup)
    inventory = faults.lab.inventory_path
    assert f"farm --inventory {inventory} devices trust lab1" in " ".join(bench.stderr.split())


def test_10_work_dir_full(faults, start_bench) -> None:
    with faults.small_workdir("lab1", "256k"):
        bench = start_bench(["lab1", "lab2"], min_time=IN_PLACE)
        assert bench.wait() == 3
    check_failed_alone(bench, "lab1", ["lab2"], ["is out of space", "MiB free in /root/farm",
                                                "free space on the device"])
    faults.assert_no_farm_process()


def test_10_work_dir_full_says_out_of_space(faults, start_bench) -> None:
    with faults.small_workdir("lab1", "256k"):
        bench = start_bench(["lab1"], runs=1, min_time=0.0)
        assert bench.wait() == 3
    assert "space" in " ".join(bench.stderr.split()).lower(), bench.stderr


def test_11_agent_of_another_protocol_version(faults, start_bench, bench_home: Path) -> None:
    _warm(start_bench, bench_home)
    device = load_inventory(str(faults.lab.inventory_path)).get("lab1")
    agent = agent_artifact(bundle_for(device))
    # the deployed agent now speaks protocol 2; its size and mtime are unchanged, so only
    # the hello can tell
    faults.replace_text("lab1", agent.remote, b"\nPROTO = 1\n", b"\nPROTO = 2\n")
    bench = start_bench(["lab1", "lab2"], min_time=IN_PLACE)
    assert bench.wait() == 3
    check_failed_alone(bench, "lab1", ["lab2"],
                       ["agent speaks protocol 2, this farm speaks protocol 1"])
    faults.assert_no_farm_process()


def test_12_reboot_between_deploy_and_bench(faults, start_bench, bench_home: Path) -> None:
    inventory = str(faults.lab.inventory_path)
    env_home = {"FARM_HOME": str(bench_home)}
    deploy = subprocess.run([sys.executable, "-m", "farm.cli.main", "--inventory", inventory,
                             "deploy", "--device", "lab1", "--device", "lab2"],
                            capture_output=True, text=True, timeout=120,
                            env={**__import__("os").environ, **env_home})
    assert deploy.returncode == 0, deploy.stderr
    faults.restart_sshd("lab1")  # every process of the device gone, sshd started again
    bench = start_bench(["lab1", "lab2"], min_time=IN_PLACE)
    assert bench.wait() == 0, bench.stderr
    records = bench.records()
    assert {d: records[(d, "ort")]["status"] for d in ("lab1", "lab2")} == {
        "lab1": "ok", "lab2": "ok"}
    faults.assert_no_farm_process()
