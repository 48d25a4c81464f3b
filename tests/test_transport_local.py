"""The local transport: argv without a shell, streaming lines, process-group cleanup."""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

import pytest

from farm.errors import TransportError
from farm.inventory.builtin import local_device
from farm.transports import command_line, open_transport


def test_run_passes_argv_without_a_shell(tmp_path):
    t = open_transport(local_device())
    hostile = "x; touch " + str(tmp_path / "pwned")
    result = t.run(["echo", hostile])
    assert result.ok and result.stdout.strip() == hostile
    assert not (tmp_path / "pwned").exists()


def test_run_failure_raises_unless_check_false():
    t = open_transport(local_device())
    with pytest.raises(TransportError, match="exited 3"):
        t.run([sys.executable, "-c", "import sys; sys.exit(3)"])
    assert t.run([sys.executable, "-c", "import sys; sys.exit(3)"], check=False).exited == 3


def test_start_streams_lines_as_printed_and_close_kills_group(tmp_path):
    t = open_transport(local_device())
    code = ("import sys, subprocess, time\n"
            "child = subprocess.Popen(['sleep', '60'])\n"
            "print(child.pid, flush=True)\n"
            "for line in sys.stdin:\n"
            "    print('echo:' + line.strip(), flush=True)\n"
            "time.sleep(60)\n")
    proc = t.start([sys.executable, "-c", code])
    grandchild = int(proc.read_line(timeout=10))
    proc.write_line("hello")
    assert proc.read_line(timeout=10) == "echo:hello"
    assert proc.read_line(timeout=0.2) is None  # nothing more yet: a timeout, not EOF
    proc.close(timeout=0.5)
    time.sleep(0.2)
    assert not alive(grandchild)  # the whole process group is gone: no orphans


def alive(pid: int) -> bool:
    """True if `pid` runs (a zombie waiting for its reaper does not count)."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except FileNotFoundError:
        return False
    return "\nState:\tZ" not in status


def test_put_get_roundtrip(tmp_path):
    t = open_transport(local_device())
    src = tmp_path / "a.bin"
    src.write_bytes(os.urandom(1000))
    seen = []
    t.put(src, str(tmp_path / "b.bin"), callback=lambda d, n: seen.append((d, n)))
    t.get(str(tmp_path / "b.bin"), tmp_path / "c.bin")
    assert (tmp_path / "c.bin").read_bytes() == src.read_bytes()
    assert seen[-1] == (1000, 1000)


def test_command_line_quotes_every_argument():
    line = command_line(["ls", "a b", "$(reboot)", "x;y"], env={"K": "v w"})
    assert line == "env 'K=v w' ls 'a b' '$(reboot)' 'x;y'"


def test_devices_check_flags_features_the_cpu_lacks(tmp_path, monkeypatch):
    from dataclasses import replace

    from farm.devices.check import check_device

    monkeypatch.setenv("FARM_HOME", str(tmp_path))
    device = replace(local_device(), workdir=str(tmp_path / "not-yet"))
    healthy = check_device(device)
    assert healthy.healthy and healthy.probe["arch"] == device.arch
    assert healthy.probe["state"]["disk_free_kb"] > 0  # read from the nearest existing dir
    wrong = check_device(replace(device, features=("sve",)))
    assert not wrong.healthy and "CPU lacks sve" in wrong.problems[0]
