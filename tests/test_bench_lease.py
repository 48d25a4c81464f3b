"""Device leases: exclusive, renewed while held, taken over when the holder died or the
lease expired, and a clear message naming the holder when busy."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

from farm.bench.lease import DeviceLease, LeaseBusy


def test_second_holder_fails_clearly_then_gets_it(tmp_path: Path) -> None:
    first = DeviceLease("pi", "RUN-A", directory=tmp_path)
    first.acquire()
    second = DeviceLease("pi", "RUN-B", directory=tmp_path)
    started = time.monotonic()
    with pytest.raises(LeaseBusy, match=r"device 'pi' is busy: held by farm bench RUN-A") as info:
        second.acquire(wait_s=0.6, poll_s=0.1)
    assert time.monotonic() - started >= 0.5
    assert "--lock-wait" in str(info.value)
    first.release()
    assert not (tmp_path / "pi.lease").exists()
    second.acquire()
    second.release()


def test_waiter_gets_the_lease_when_it_is_released(tmp_path: Path) -> None:
    import threading
    first = DeviceLease("pi", "RUN-A", directory=tmp_path)
    first.acquire()
    threading.Timer(0.5, first.release).start()
    second = DeviceLease("pi", "RUN-B", directory=tmp_path)
    second.acquire(wait_s=10, poll_s=0.1)
    assert json.loads((tmp_path / "pi.lease").read_text())["run_id"] == "RUN-B"
    second.release()


def test_lease_of_a_dead_holder_is_taken_over(tmp_path: Path) -> None:
    # a holder that crashed (its pid is gone) never blocks the device
    code = (f"import sys; sys.path.insert(0, {str(Path.cwd())!r}); from pathlib import Path; "
            "from farm.bench.lease import DeviceLease; "
            f"DeviceLease('pi', 'CRASHED', directory=Path({str(tmp_path)!r})).acquire(); "
            "import os; os._exit(0)")
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)
    assert json.loads((tmp_path / "pi.lease").read_text())["run_id"] == "CRASHED"
    lease = DeviceLease("pi", "RUN-B", directory=tmp_path)
    lease.acquire()
    assert json.loads((tmp_path / "pi.lease").read_text())["run_id"] == "RUN-B"
    lease.release()


def test_expired_lease_is_taken_over_and_a_held_one_is_renewed(tmp_path: Path) -> None:
    path = tmp_path / "pi.lease"
    path.write_text(json.dumps({"holder": "farm bench OLD", "pid": 1, "host": "elsewhere",
                                "run_id": "OLD", "expires": time.time() - 1}))
    lease = DeviceLease("pi", "NEW", ttl_s=0.6, directory=tmp_path)
    lease.acquire()
    first_expiry = json.loads(path.read_text())["expires"]
    time.sleep(0.8)  # past the ttl: only renewal keeps it ours
    assert json.loads(path.read_text())["expires"] > first_expiry
    other = DeviceLease("pi", "OTHER", ttl_s=0.6, directory=tmp_path)
    with pytest.raises(LeaseBusy):
        other.acquire()
    lease.release()


def test_live_lease_of_another_host_is_respected(tmp_path: Path) -> None:
    (tmp_path / "pi.lease").write_text(json.dumps({
        "holder": "farm bench THEIRS", "pid": 999999, "host": "other-host", "run_id": "T",
        "acquired_utc": "2026-01-01T00:00:00Z", "expires": time.time() + 60}))
    with pytest.raises(LeaseBusy, match="pid 999999 on other-host"):
        DeviceLease("pi", "MINE", directory=tmp_path).acquire()


def test_triangle_waits_for_a_held_device_with_lock_wait(tmp_path: Path) -> None:
    """`farm triangle` takes bench's --lock-wait: without it a held device fails naming the
    holder and the option; with it the triangle waits for the lease, then runs."""
    import os
    import threading

    home = tmp_path / "home"
    env = {**os.environ, "FARM_HOME": str(home), "PYTHONPATH": str(Path.cwd())}
    argv = [sys.executable, "-m", "farm.cli.main", "triangle", "--device", "local",
            "--model", "tiny", "--routes", "custom", "--repeats", "1", "--runs", "3",
            "--min-time", "0", "--warmup", "1", "--warmup-time", "0", "--profile-runs", "1",
            "--pause", "0", "--output", "json"]
    holder = DeviceLease("local", "OTHER", directory=home / "locks")
    (home / "locks").mkdir(parents=True)
    holder.acquire()
    try:
        busy = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=300)
        assert busy.returncode == 1, busy.stderr  # refused: nothing measured, no run stored
        assert "held by farm bench OTHER" in busy.stderr and "--lock-wait" in busy.stderr
        threading.Timer(2.0, holder.release).start()
        started = time.monotonic()
        waited = subprocess.run([*argv, "--lock-wait", "120"], env=env, capture_output=True,
                                text=True, timeout=300)
    finally:
        holder.release()
    assert waited.returncode == 0, waited.stderr
    assert time.monotonic() - started >= 2.0
    assert json.loads(waited.stdout)["meta"]["run_ids"]
