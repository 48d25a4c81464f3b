"""Link and sshd faults on lab1 during a real two-device bench: sshd killed mid-bench, the
link cut mid-bench (nftables drop-all in its namespace), and a slow, lossy link (tc tbf
rate limit plus nftables random drop) under which the bench completes, only slower."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from farm.inventory import load_inventory
from farm.transports import open_transport

from .bench_run import check_failed_alone
from .lab_faults import ORT_RUNNING

pytestmark = [pytest.mark.lab, pytest.mark.slow]


def test_1_sshd_killed_mid_bench(faults, start_bench) -> None:
    bench = start_bench(["lab1", "lab2"])
    faults.wait_proc("lab1", ORT_RUNNING)
    faults.kill_sshd("lab1")
    assert bench.wait() == 3
    check_failed_alone(bench, "lab1", ["lab2"], ["agent channel closed"])
    faults.assert_no_farm_process()


def test_2_link_cut_mid_bench(faults, start_bench) -> None:
    bench = start_bench(["lab1", "lab2"], extra=["--link-timeout", "6"])
    faults.wait_proc("lab1", ORT_RUNNING)
    faults.cut_link_now("lab1")
    started = time.monotonic()
    assert bench.wait(timeout=120) == 3
    waited = time.monotonic() - started
    records = check_failed_alone(bench, "lab1", ["lab2"], ["link down?"])
    assert "device lost during this route" in records[("lab1", "ort")]["status_detail"]
    assert faults.nft_dropped("lab1") > 0  # the cut was real
    assert waited < 40, f"declaring the link dead took {waited:.0f} s"
    # the agent behind the cut link hears no ping and exits by its idle timeout, killing
    # its runner: nothing is left running on the device
    faults.assert_no_farm_process(timeout=30)


def _upload_seconds(tmp_path: Path, inventory: Path) -> float:
    blob = tmp_path / "blob"
    blob.write_bytes(bytes(range(256)) * 8192)  # 2 MiB
    device = load_inventory(str(inventory)).get("lab1")
    with open_transport(device) as transport:
        transport.run(["true"])  # connect first: time the transfer only
        started = time.monotonic()
        transport.put(blob, f"{device.workdir}/fault-blob")
        took = time.monotonic() - started
        transport.run(["rm", "-f", f"{device.workdir}/fault-blob"])
    return took


def test_3_slow_and_lossy_link_completes_slower(faults, start_bench, tmp_path: Path) -> None:
    fast = _upload_seconds(tmp_path, faults.lab.inventory_path)
    with faults.rate_limit("lab1", "8mbit"), faults.packet_loss("lab1", 3):
        slow = _upload_seconds(tmp_path, faults.lab.inventory_path)
        bench = start_bench(["lab1", "lab2"], runs=10, min_time=1.0)
        code = bench.wait(timeout=150)
        dropped = faults.nft_dropped("lab1")
    assert code == 0, bench.stderr
    assert slow > 1.5 and slow > 5 * fast, (fast, slow)  # 2 MiB at 8 Mbit/s: ~2 s
    assert dropped > 0  # packets really were lost
    records = bench.records()
    for dev in ("lab1", "lab2"):
        assert records[(dev, "ort")]["status"] == "ok"
        assert records[(dev, "ort")]["n"] >= 10
    faults.assert_no_farm_process()


def test_sshd_down_fails_that_device_fast_naming_the_refusal(faults, start_bench) -> None:
    # issue 33: a refused port was retried for the whole 20 s connect budget; now one retry
    # (tests/test_ssh_endpoints.py shows a device whose sshd comes up in time for it)
    faults.kill_sshd("lab1")
    bench = start_bench(["lab1", "lab2"], runs=5, min_time=0.5)
    failed = bench.wait_event(lambda e: e.get("event") == "device_done"
                              and e.get("device") == "lab1")
    deploy = bench.wait_event(lambda e: e.get("event") == "phase"
                              and e.get("device") == "lab1" and e.get("phase") == "deploy")
    assert failed["status"] == "failed" and "connection refused" in failed["detail"], failed
    assert failed["t"] - deploy["t"] < 5.0, "a refused device took the whole budget to fail"
    assert bench.wait() == 3
    check_failed_alone(bench, "lab1", ["lab2"], ["connection refused"], runs=5)
    faults.assert_no_farm_process()
