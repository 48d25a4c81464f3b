"""The real local lab: sshd devices in network namespaces, an emulated aarch64 device,
and a teardown that leaves nothing behind, even after a crash.

Leftovers are checked independently of farm.lab's own bookkeeping: `ip netns list`,
/sys/class/net, every process's command line and every mount table on the host.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import paramiko
import pytest

from farm.cli.main import main as farm_main
from farm.inventory import load_inventory
from farm.lab import LabError, LabSpec, down, load_state, up

pytestmark = [pytest.mark.lab,
              pytest.mark.skipif(os.geteuid() != 0, reason="the lab tests need root")]

MARK = f"{os.getpid()}.25"  # `sleep MARK`: a session process of this test run, findable


def connect(lab_dir: Path, name: str) -> paramiko.SSHClient:
    """paramiko with the lab's known_hosts and RejectPolicy (no trust on first use)."""
    device = load_inventory(str(lab_dir / "devices.yaml")).get(name)
    client = paramiko.SSHClient()
    client.load_host_keys(str(lab_dir / "known_hosts"))
    client.set_missing_host_key_policy(paramiko.RejectPolicy())
    client.connect(device.host, port=device.port, username=device.user,
                   key_filename=str(lab_dir / "client_key"), look_for_keys=False,
                   allow_agent=False, timeout=10)
    return client


def ssh_run(client: paramiko.SSHClient, command: str, timeout: float = 60) -> tuple[int, str]:
    _, stdout, stderr = client.exec_command(command, timeout=timeout)
    out = stdout.read().decode()
    status = stdout.channel.recv_exit_status()
    return status, out + stderr.read().decode()


def traces(lab_dir: Path, netns: list[str], links: list[str]) -> list[str]:
    """Anything of a lab still on this host, found without farm.lab's helpers."""
    found = []
    listed = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    found += [f"netns {n}" for n in netns if n in listed.split()]
    found += [f"link {n}" for n in links if Path("/sys/class/net", n).exists()]
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit() or int(proc.name) == os.getpid():
            continue
        try:
            cmd = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode()
            mounts = (proc / "mountinfo").read_text()
        except OSError:
            continue
        if str(lab_dir) in cmd or f"sleep {MARK}" in cmd:
            found.append(f"process {proc.name}: {cmd}")
        for line in mounts.splitlines():
            fields = line.split()
            if str(lab_dir) in line or any(f"/run/netns/{n}" == fields[4] for n in netns):
                found.append(f"mount seen by {proc.name}: {line}")
    return found


def start_session_sleep(lab_dir: Path, name: str) -> paramiko.SSHClient:
    """Open an SSH session running `sleep MARK` and wait until the process exists."""
    client = connect(lab_dir, name)
    client.exec_command(f"sleep {MARK}")
    deadline = time.monotonic() + 10
    while not any(f"sleep {MARK}" in t for t in traces(lab_dir, [], [])):
        assert time.monotonic() < deadline, "the session's sleep never started"
        time.sleep(0.05)
    return client


def names_of(lab_dir: Path) -> tuple[list[str], list[str]]:
    state = load_state(lab_dir)
    assert state is not None
    netns = [r["name"] for r in state.resources if r["kind"] == "netns"]
    links = [r["name"] for r in state.resources if r["kind"] in ("veth", "bridge")]
    return netns, links


def test_inventory_pins_every_device(lab):
    inventory = load_inventory(str(lab.inventory_path))
    names = [n for n in inventory.devices if n != "local"]
    assert names == lab.devices
    assert names[:2] == ["lab1", "lab2"]
    known = lab.known_hosts.read_text().splitlines()
    assert len(known) == len(names)
    for name in names:
        dev = inventory.get(name)
        assert dev.transport == "ssh" and dev.known_hosts == str(lab.known_hosts)
        assert dev.arch == ("aarch64" if name == "pixel7" else "x86_64")
    if "pixel7" in names:
        pixel7 = inventory.get("pixel7")
        assert pixel7.features == ("neon", "dotprod")
        assert pixel7.triple == "aarch64-linux-gnu"


def test_ssh_into_each_device_with_pinned_host_keys(lab):
    for name in lab.devices:
        client = connect(lab.lab_dir, name)
        try:
            status, out = ssh_run(client, "hostname; echo $FARM_DEVICE; echo $HOME; ls -A ~")
        finally:
            client.close()
        assert status == 0, out
        lines = out.split()
        if lab.namespace(name):
            assert lines[0] == name  # own UTS namespace
            assert lines[2] == "/root"
            assert "farm" in lines[3:] and ".bashrc" not in lines[3:]  # private home
        assert lines[1] == name


def test_unpinned_or_wrong_host_key_is_rejected(lab, tmp_path):
    dev = load_inventory(str(lab.inventory_path)).get("lab1")
    other = load_inventory(str(lab.inventory_path)).get("lab2")
    empty = tmp_path / "empty_known_hosts"
    empty.write_text("")
    # lab2's key pinned under lab1's address: a device presenting another key
    wrong = tmp_path / "wrong_known_hosts"
    lab2_line = next(line for line in lab.known_hosts.read_text().splitlines()
                     if line.startswith((f"{other.host} ", f"[{other.host}]:")))
    wrong.write_text(lab2_line.replace(other.host, dev.host, 1).replace(
        f":{other.port}]", f":{dev.port}]") + "\n")
    for known, error, match in ((empty, paramiko.SSHException, "not found in known_hosts"),
                                (wrong, paramiko.BadHostKeyException, "does not match")):
        client = paramiko.SSHClient()
        client.load_host_keys(str(known))
        client.set_missing_host_key_policy(paramiko.RejectPolicy())
        with pytest.raises(error, match=match):
            client.connect(dev.host, port=dev.port, username=dev.user,
                           key_filename=dev.identity_file, look_for_keys=False,
                           allow_agent=False, timeout=10)
        client.close()


@pytest.mark.aarch64
def test_aarch64_device_runs_aarch64_python_with_onnxruntime(lab):
    lab.require("pixel7")
    dev = load_inventory(str(lab.inventory_path)).get("pixel7")
    client = connect(lab.lab_dir, "pixel7")
    try:
        status, out = ssh_run(client, f"{dev.python} -c 'import platform; "
                                      "print(platform.machine())'")
        assert (status, out.strip()) == (0, "aarch64")
        status, out = ssh_run(client, f"{dev.python} -c 'import onnxruntime as o, numpy; "
                                      "print(o.get_available_providers())'")
        assert status == 0, out
        assert "CPUExecutionProvider" in out
    finally:
        client.close()
    # the qemu handler is registered only inside the device, never on the host
    assert not Path("/proc/sys/fs/binfmt_misc/qemu-aarch64").exists()
    # and inside it, without SSH (nsenter into its user namespace and private binfmt_misc)
    inside = lab.run_in("pixel7", [dev.python, "-c", "import platform; print(platform.machine())"])
    assert (inside.returncode, inside.stdout.strip()) == (0, "aarch64"), inside.stderr


def test_device_processes_live_in_its_namespace(lab):
    name = lab.devices[0]
    sshd = lab.device(name).pid
    assert sshd in lab.pids(name)
    assert "sshd" in lab.processes(name)[sshd]
    if lab.namespace(name):
        assert lab.run_in(name, ["hostname"]).stdout.strip() == name
        other = lab.devices[1]
        assert sshd not in lab.pids(other)


def test_status_cli_reports_every_device_alive(lab, capsys):
    assert farm_main(["lab", "status", "--dir", str(lab.lab_dir), "--output", "json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert [d["name"] for d in report["devices"]] == lab.devices
    assert all(d["alive"] and d["reachable"] for d in report["devices"])


def _quiet(_message: str) -> None:
    pass


@pytest.mark.aarch64
def test_down_leaves_nothing_behind(tmp_path):
    lab_dir = tmp_path / "lab"
    up(LabSpec(native=1, aarch64=1), lab_dir, log=_quiet)
    netns, links = names_of(lab_dir)
    assert netns and links
    # an open session with a child process, like a benchmark in flight
    client = start_session_sleep(lab_dir, "lab1")
    down(lab_dir, log=_quiet)
    client.close()
    assert traces(lab_dir, netns, links) == []
    assert not (lab_dir / "state.json").exists()


@pytest.mark.aarch64
def test_down_after_devices_were_killed(tmp_path):
    lab_dir = tmp_path / "lab"
    state = up(LabSpec(native=1, aarch64=1), lab_dir, log=_quiet)
    netns, links = names_of(lab_dir)
    client = start_session_sleep(lab_dir, "lab1")
    for dev in state.devices:  # a crash: every sshd dies at once, sessions are orphaned
        os.kill(dev.pid, signal.SIGKILL)
    time.sleep(0.2)
    # `up` on a dead lab cleans it by its records, then brings up a fresh one
    fresh = up(LabSpec(native=1, aarch64=1), lab_dir, log=_quiet)
    assert [d.pid for d in fresh.devices] != [d.pid for d in state.devices]
    assert not any(f"sleep {MARK}" in t for t in traces(lab_dir, netns, links))
    new_netns, new_links = names_of(lab_dir)
    for dev in fresh.devices:
        os.kill(dev.pid, signal.SIGKILL)
    down(lab_dir, log=_quiet)
    client.close()
    assert traces(lab_dir, netns + new_netns, links + new_links) == []


def test_down_after_up_was_killed_midway(tmp_path):
    """SIGKILL `farm lab up` right after it journaled its first namespace."""
    lab_dir = tmp_path / "lab"
    up_cmd = subprocess.Popen(
        [sys.executable, "-c", "import sys; from farm.cli.main import main; "
                               "sys.exit(main(sys.argv[1:]))",
         "lab", "up", "--devices", "3", "--dir", str(lab_dir)],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    state_file = lab_dir / "state.json"
    deadline = time.monotonic() + 30
    recorded: list[str] = []
    while time.monotonic() < deadline and up_cmd.poll() is None:
        try:
            recorded = [r["kind"] for r in json.loads(state_file.read_text())["resources"]]
        except (OSError, ValueError, KeyError):
            recorded = []
        if "netns" in recorded:
            break
        time.sleep(0.005)
    up_cmd.kill()
    up_cmd.wait()
    assert "netns" in recorded, "up never journaled a namespace"
    time.sleep(0.3)  # an `ip` command it had started may still be finishing
    netns, links = names_of(lab_dir)
    assert traces(lab_dir, netns, links), "the killed `up` left nothing to clean"
    down(lab_dir, log=_quiet)
    assert traces(lab_dir, netns, links) == []


def test_loopback_fallback(tmp_path):
    lab_dir = tmp_path / "lab"
    messages: list[str] = []
    state = up(LabSpec(native=2, aarch64=1, loopback=True), lab_dir, log=messages.append)
    try:
        assert state.mode == "loopback"
        assert any("loopback" in m for m in messages)
        assert any("aarch64" in m and "unavailable" in m for m in messages)
        inventory = load_inventory(str(lab_dir / "devices.yaml"))
        for name in ("lab1", "lab2"):
            dev = inventory.get(name)
            assert dev.host.startswith("127.0.0.") and dev.port != 22
            client = connect(lab_dir, name)
            try:
                assert ssh_run(client, "echo $FARM_DEVICE")[1].strip() == name
            finally:
                client.close()
        assert "pixel7" not in inventory.devices
    finally:
        down(lab_dir, log=_quiet)
    assert traces(lab_dir, [], []) == []


def test_loopback_down_finds_sshd_whose_pid_was_never_recorded(tmp_path):
    """A crash between spawning an sshd and journaling its pid: found by its argv."""
    lab_dir = tmp_path / "lab"
    up(LabSpec(native=1, loopback=True), lab_dir, log=_quiet)
    journal = lab_dir / "state.json"
    data = json.loads(journal.read_text())
    for record in data["resources"] + data["devices"]:
        record.update(pid=None, start=None)
    journal.write_text(json.dumps(data))
    assert traces(lab_dir, [], []), "the sshd should still be running"
    down(lab_dir, log=_quiet)
    assert traces(lab_dir, [], []) == []


def test_up_keeps_a_healthy_lab_and_refuses_to_replace_it(lab):
    messages: list[str] = []
    native = sum(1 for d in lab.state.devices if d.arch == "x86_64")
    again = up(LabSpec(native=native, aarch64=len(lab.devices) - native), lab.lab_dir,
               log=messages.append)
    assert [d.pid for d in again.devices] == [d.pid for d in lab.state.devices]
    assert any("already up" in m for m in messages)
    with pytest.raises(LabError, match="different lab is already up"):
        up(LabSpec(native=native + 1), lab.lab_dir, log=_quiet)


def test_lab_of_a_killed_owner_is_stale_and_removed(tmp_path):
    """A test session killed before its teardown: its lab is found and removed later."""
    lab_dir = tmp_path / "lab"
    owner = subprocess.run(
        [sys.executable, "-c",
         "import os, sys; from farm.lab import LabSpec, up; "
         "up(LabSpec(native=1), sys.argv[1], log=lambda m: None, owner_pid=os.getpid()); "
         "os._exit(0)", str(lab_dir)], capture_output=True, text=True, timeout=60)
    assert owner.returncode == 0, owner.stderr
    netns, links = names_of(lab_dir)
    assert traces(lab_dir, netns, links), "the owner's lab should outlive it"
    assert farm_main(["lab", "down", "--stale"]) == 0
    assert traces(lab_dir, netns, links) == []
    assert not (lab_dir / "state.json").exists()


def test_status_table_shows_dead_and_silent_devices():
    from rich.console import Console

    from farm.cli.lab_cmd import render_status
    from farm.lab.inspect import DeviceStatus

    rows = [DeviceStatus("lab1", "x86_64", "10.77.0.11", 22, 101, True, True, "farmlab0-lab1"),
            DeviceStatus("pixel7", "aarch64", "10.77.0.13", 22, 103, False, False,
                         "farmlab0-pixel7")]
    console = Console(force_terminal=True, color_system=None, width=80, record=True)
    console.print(render_status("/x/.farm/lab", "netns", rows))
    text = console.export_text()
    lines = {line.split()[0]: line for line in text.splitlines()
             if line.strip().startswith(("lab1", "pixel7"))}
    assert "10.77.0.11:22" in lines["lab1"] and "yes" in lines["lab1"]
    assert "no" in lines["pixel7"].split() and "silent" in lines["pixel7"]
    assert "farmlab0-pixel7" in lines["pixel7"]  # not truncated at 80 columns


@pytest.mark.aarch64
def test_sysroot_is_current_only_with_this_build_scripts_marker(lab, tmp_path):
    from farm.lab.sysroot import MARKER, SCRIPT, is_current, sysroot_path

    lab.require("pixel7")  # the fixture built or found the cached sysroot
    assert is_current(sysroot_path())
    assert (sysroot_path() / "proc" / "cpuinfo").read_text().count("asimddp") >= 1
    assert not is_current(tmp_path)
    (tmp_path / MARKER).write_text("0" * 64)  # built by another version of the script
    assert not is_current(tmp_path)
    (tmp_path / MARKER).write_text((sysroot_path() / MARKER).read_text())
    assert is_current(tmp_path) and SCRIPT.name == "make_sysroot.sh"
