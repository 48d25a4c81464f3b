"""Devices behind a jump host, on a real lab: `gate` (on the host's bridge and on a second
link) and `far1`, whose namespace is linked to the gateway's only. The host cannot reach
far1; farm reaches it through gate's sshd (a direct-tcpip channel), with each hop's host key
checked, deploys and benches the tiny model there, and when the gateway drops mid-bench only
far1 fails, with one line naming the gateway."""

from __future__ import annotations

import errno
import os
import signal
import socket
import threading
import time
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from lab_fixture import LabHandle

from farm.bench.config import BenchConfig, Policy
from farm.bench.runner import Bench, run_bench
from farm.cli.main import main as farm_main
from farm.errors import HostKeyError, TransportError
from farm.inventory import load_inventory
from farm.lab import LabSpec, down, up
from farm.lab.netns_backend import reachable_from
from farm.results.store import ResultStore
from farm.transports.ssh import SSHTransport
from farm.transports.trust import fetch_host_key

pytestmark = [pytest.mark.lab,
              pytest.mark.skipif(os.geteuid() != 0, reason="the gateway lab needs root")]

QUICK = Policy(warmup_runs=1, warmup_min_s=0.0, min_runs=10, min_time_s=0.3, max_time_s=5.0)


@pytest.fixture(scope="module")
def jump_lab(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LabHandle]:
    """lab1 on the bridge, the gateway `gate`, and `far1` behind it (its own lab slot)."""
    lab_dir = tmp_path_factory.mktemp("jumplab")
    messages: list[str] = []
    state = up(LabSpec(native=1, jumped=1), lab_dir, log=messages.append,
               owner_pid=os.getpid())
    try:
        if state.mode != "netns":
            pytest.skip("a device reachable only through a gateway needs namespaces")
        yield LabHandle(state)
    finally:
        down(lab_dir, log=messages.append)


@pytest.fixture(autouse=True)
def farm_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FARM_HOME", str(tmp_path / "home"))


def device(lab: LabHandle, name: str, inventory: Path | None = None) -> Any:
    return load_inventory(str(inventory or lab.inventory_path)).get(name)


def test_far_device_is_reachable_only_through_the_gateway(jump_lab: LabHandle) -> None:
    far = jump_lab.device("far1")
    assert far.via == "gate"
    # the host has no route to it: the kernel refuses at once, nothing leaves the host
    with pytest.raises(OSError) as info:
        socket.create_connection((far.address, far.port), timeout=3).close()
    assert info.value.errno in (errno.EHOSTUNREACH, errno.ENETUNREACH)
    # neither has a device on the host's bridge; the gateway's namespace has
    assert not reachable_from(jump_lab.namespace("lab1"), far.address, far.port, 1.0)
    assert reachable_from(jump_lab.namespace("gate"), far.address, far.port, 2.0)
    far1 = device(jump_lab, "far1")
    direct = replace(far1, via=None, gateway=None)
    with pytest.raises(TransportError, match="host unreachable"):
        SSHTransport(direct, connect_budget_s=1.0).run(["true"])
    with SSHTransport(far1) as transport:
        assert transport.run(["hostname"]).stdout.strip() == "far1"


def test_two_hops_nest(jump_lab: LabHandle, tmp_path: Path) -> None:
    """far1 as a gateway to itself: host -> gate -> far1 -> far1's sshd, the inner channel
    opened over a session that itself runs through gate (its key: far1's pin)."""
    far = jump_lab.device("far1")
    inv = tmp_path / "devices.yaml"
    inv.write_text(jump_lab.inventory_path.read_text() +
                   f"- name: far1-loop\n  transport: ssh\n  host: {far.address}\n"
                   f"  arch: x86_64\n  user: root\n  identity_file: {jump_lab.client_key}\n"
                   f"  known_hosts: {jump_lab.known_hosts}\n  via: far1\n")
    loop = device(jump_lab, "far1-loop", inv)
    assert [h.name for h in loop.hops] == ["gate", "far1"]
    with SSHTransport(loop) as transport:
        assert transport.run(["hostname"]).stdout.strip() == "far1"


def test_each_hop_key_is_pinned_and_verified(jump_lab: LabHandle, tmp_path: Path,
                                             capsys: pytest.CaptureFixture[str]) -> None:
    known = tmp_path / "kh"
    inv = tmp_path / "devices.yaml"
    inv.write_text(jump_lab.inventory_path.read_text().replace(str(jump_lab.known_hosts),
                                                                str(known)))
    args = ["--inventory", str(inv), "devices"]
    # nothing pinned: the far device cannot even be asked before its gateway is trusted
    with pytest.raises(HostKeyError) as info:
        fetch_host_key(device(jump_lab, "far1", inv))
    assert "through gateway 'gate'" in str(info.value)
    assert "devices trust gate" in str(info.value)
    assert farm_main([*args, "trust", "gate", "--pin"]) == 0
    with pytest.raises(HostKeyError, match=r"host key of 10\.78\.\S+ is not in"):
        SSHTransport(device(jump_lab, "far1", inv)).run(["true"])
    capsys.readouterr()
    assert farm_main([*args, "trust", "far1", "--pin"]) == 0
    out = capsys.readouterr().out
    assert "via gate" in out and "pinned in" in out
    assert farm_main([*args, "check", "far1", "gate"]) == 0
    # the pins are the lab's own keys
    lab_pins = set(jump_lab.known_hosts.read_text().split("\n"))
    assert {line for line in known.read_text().splitlines() if line} <= lab_pins
    # a forged key for far1 (gate's key under far1's address): refused, gateway or not
    gate_key = known.read_text().splitlines()[0].split(" ", 1)[1]
    far_line = next(line for line in known.read_text().splitlines()
                    if line.startswith(jump_lab.device("far1").address))
    known.write_text(known.read_text().replace(far_line, f"{far_line.split()[0]} {gate_key}"))
    with pytest.raises(HostKeyError, match="CHANGED"):
        SSHTransport(device(jump_lab, "far1", inv)).run(["true"])


def test_nothing_listening_behind_the_gateway_is_one_clear_line(jump_lab: LabHandle) -> None:
    wrong = replace(device(jump_lab, "far1"), port=2)
    started = time.monotonic()
    with pytest.raises(TransportError) as info:
        SSHTransport(wrong, connect_budget_s=1.0).run(["true"])
    message = str(info.value).splitlines()[0]
    assert "through gateway 'gate': the gateway could not reach it" in message, message
    assert time.monotonic() - started < 10


def leftovers(lab: LabHandle, name: str) -> dict[int, str]:
    return {pid: cmd for pid, cmd in lab.processes(name).items()
            if "farm_agent" in cmd or "_runner" in cmd}


def test_deploy_and_bench_the_tiny_model_behind_the_gateway(jump_lab: LabHandle,
                                                            tmp_path: Path) -> None:
    config = BenchConfig(routes=("ort",), policy=QUICK, pause_s=0.0, profile_runs=1)
    with ResultStore(tmp_path / "r.sqlite") as store:
        result = run_bench([device(jump_lab, "far1")], config, store, "test")
        assert result.exit_code == 0, result.failures()
        [record] = store.records(result.run_id)
    assert record["device"] == "far1" and record["status"] == "ok", record["status_detail"]
    assert record["n"] >= 10 and record["accuracy"]["ok"] and record["peak_vmhwm_kb"] > 0
    # deployed and run on far1 itself: its work dir holds the agent, no agent is left
    listing = jump_lab.run_in("far1", ["ls", "/root/farm/agent"]).stdout
    assert "farm_agent-" in listing
    assert not leftovers(jump_lab, "far1")
    assert not jump_lab.run_in("gate", ["ls", "/root/farm"]).stdout.strip()  # nothing there


def test_gateway_dropping_mid_bench_fails_only_the_devices_behind_it(
        jump_lab: LabHandle, tmp_path: Path) -> None:
    slow = Policy(warmup_runs=1, warmup_min_s=0.0, min_runs=10, min_time_s=4.0,
                  max_time_s=8.0)
    config = BenchConfig(routes=("ort",), policy=slow, pause_s=0.0, profile_runs=1)
    listener = jump_lab.device("gate").pid
    fired = threading.Event()

    def drop_gateway() -> None:
        # the gateway's per-connection sshd processes (not its listener): what a gateway
        # that reboots or loses its session does to every channel through it
        for pid, cmd in jump_lab.processes("gate").items():
            if pid != listener and "sshd" in cmd:
                os.kill(pid, signal.SIGKILL)

    def emit(event: dict[str, Any]) -> None:
        if event["device"] == "far1" and event["event"] == "samples" and not fired.is_set():
            fired.set()
            drop_gateway()

    with ResultStore(tmp_path / "r.sqlite") as store:
        bench = Bench([device(jump_lab, "lab1"), device(jump_lab, "far1")], config, store,
                      "test")
        bench.start(emit)
        assert bench.wait(120)
        result = bench.finish()
        assert fired.is_set()
        assert result.exit_code == 3
        assert result.devices["lab1"][0] == "ok"
        status, detail = result.devices["far1"]
        assert status == "failed"
        assert "gateway 'gate' dropped the connection" in detail.splitlines()[0], detail
    # far1's sshd saw its connection end: the agent went with it
    deadline = time.monotonic() + 15
    while leftovers(jump_lab, "far1") and time.monotonic() < deadline:
        time.sleep(0.5)
    assert not leftovers(jump_lab, "far1")


def test_gateway_link_cut_mid_bench_names_the_gateway(jump_lab: LabHandle,
                                                      tmp_path: Path) -> None:
    """A cut link gives no EOF, only silence: far1 is declared lost after the link timeout,
    its line names the gateway it is reached through, lab1 finishes."""
    rules = [["nft", "add", "table", "inet", "farmcut"],
             ["nft", "add", "chain", "inet", "farmcut", "in",
              "{ type filter hook input priority 0; policy drop; }"],
             ["nft", "add", "chain", "inet", "farmcut", "out",
              "{ type filter hook output priority 0; policy drop; }"]]
    slow = Policy(warmup_runs=1, warmup_min_s=0.0, min_runs=10, min_time_s=4.0,
                  max_time_s=8.0)
    config = BenchConfig(routes=("ort",), policy=slow, pause_s=0.0, profile_runs=1,
                         link_timeout_s=6.0)
    fired = threading.Event()

    def emit(event: dict[str, Any]) -> None:
        if event["device"] == "far1" and event["event"] == "samples" and not fired.is_set():
            fired.set()
            for argv in rules:
                assert jump_lab.run_in("gate", argv).returncode == 0

    try:
        with ResultStore(tmp_path / "r.sqlite") as store:
            bench = Bench([device(jump_lab, "lab1"), device(jump_lab, "far1")], config,
                          store, "test")
            bench.start(emit)
            assert bench.wait(120)
            result = bench.finish()
        assert fired.is_set() and result.exit_code == 3
        assert result.devices["lab1"][0] == "ok"
        status, detail = result.devices["far1"]
        assert status == "failed"
        assert "silent" in detail and "reached through gateway 'gate'" in detail, detail
        assert "its gateways (gate)" in detail
    finally:
        jump_lab.run_in("gate", ["nft", "delete", "table", "inet", "farmcut"])
    # the agent behind the cut stops by itself (idle timeout), runner included
    deadline = time.monotonic() + 20
    while leftovers(jump_lab, "far1") and time.monotonic() < deadline:
        time.sleep(0.5)
    assert not leftovers(jump_lab, "far1")
