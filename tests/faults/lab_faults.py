"""Fault injection on the real lab, from outside the bench: `FaultLab` (see its methods).

- processes: `procs(dev)`, `farm_procs(dev)` (agents and route runners inside the device's
  network namespace), `wait_proc(dev, needle)`, `signal_procs(dev, needle, sig)`,
  `assert_no_farm_process()` (none left on any lab device);
- sshd: `kill_sshd(dev)` (listener and every session, as a crash or OOM would),
  `restart_sshd(dev)` (what a reboot does to it, journaled in the lab state),
  `host_key_changed(dev)`;
- the link: `link_cut(dev)` / `cut_link_now(dev)` (nftables drop-all in its namespace),
  `packet_loss(dev, pct)` (nftables `numgen random` drop, with counters: `nft_dropped`),
  `rate_limit(dev, rate)` (tc tbf on both ends of its veth);
- storage: `workdir_on_host(dev)`, `corrupt(dev, relpath)` and `replace_text(...)` (keep size
  and mtime, so only a content check can notice), `small_workdir(dev, size)` (a tmpfs over
  the work dir inside the device's mount namespace).
Every fault is a context manager or is undone by `undo()` (the `faults` fixture calls it),
so the shared session lab comes back healthy for the next test. Native devices only.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from farm.lab.device_dir import DeviceDir, spawn_sshd
from farm.lab.lab import reachable
from farm.lab.system import cmdline, netns_pids

FARM_PROCESS_NEEDLES = ("farm_agent", "ort_runner", "tvm_runner", "fk_exec")
NFT_TABLE = "farmfault"
# the ORT route's runner child while it measures (not a deploy command naming the file)
ORT_RUNNING = "ort_runner.py --request"


def run(argv: list[str], check: bool = True, timeout: float = 30.0) -> subprocess.CompletedProcess:
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, check=False)
    if check and proc.returncode != 0:
        raise AssertionError(f"{' '.join(argv)} failed ({proc.returncode}): {proc.stderr}")
    return proc


@dataclass
class FaultLab:
    """Fault injection helpers over a running netns lab (see module docstring)."""

    lab: Any  # tests/lab_fixture.py LabHandle
    _undo: list[Callable[[], None]] = field(default_factory=list)

    # -- facts ------------------------------------------------------------------------
    def ns(self, dev: str) -> str:
        ns = self.lab.namespace(dev)
        assert ns, "fault scenarios need the netns lab (root)"
        return ns

    def veth(self, dev: str) -> tuple[str, str]:
        """(host side, device side) interface names of the device's veth pair."""
        ns = self.ns(dev)
        for rec in self.lab.state.resources:
            if rec["kind"] == "veth" and rec.get("netns") == ns:
                return rec["name"], rec["peer"]
        raise AssertionError(f"no veth recorded for {dev}")

    def workdir_on_host(self, dev: str) -> Path:
        return Path(self.lab.device(dev).dir) / "home" / "farm"

    # -- processes --------------------------------------------------------------------
    def procs(self, dev: str) -> dict[int, str]:
        """pid -> command line of every process in the device's network namespace."""
        out = {}
        for pid in netns_pids(self.ns(dev)):
            cmd = cmdline(pid)
            try:
                state = Path(f"/proc/{pid}/stat").read_text().rsplit(") ", 1)[1][0]
            except (OSError, IndexError):
                continue
            if cmd and state != "Z":
                out[pid] = cmd
        return out

    def farm_procs(self, dev: str) -> dict[int, str]:
        return {pid: cmd for pid, cmd in self.procs(dev).items()
                if any(n in cmd for n in FARM_PROCESS_NEEDLES)}

    def wait_proc(self, dev: str, needle: str, timeout: float = 60.0) -> int:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for pid, cmd in self.procs(dev).items():
                if needle in cmd:
                    return pid
            time.sleep(0.05)
        raise AssertionError(f"no process matching {needle!r} appeared on {dev} in {timeout} s")

    def signal_procs(self, dev: str, needle: str, sig: int) -> list[int]:
        hit = [pid for pid, cmd in self.procs(dev).items() if needle in cmd]
        for pid in hit:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, sig)
        return hit

    def assert_no_farm_process(self, timeout: float = 15.0) -> None:
        """No agent or runner left on any lab device (the agent may need a moment)."""
        deadline = time.monotonic() + timeout
        while True:
            left = {dev: self.farm_procs(dev) for dev in self.lab.devices
                    if self.lab.namespace(dev)}
            left = {dev: procs for dev, procs in left.items() if procs}
            if not left:
                return
            if time.monotonic() > deadline:
                raise AssertionError(f"farm processes left on devices: {left}")
            time.sleep(0.2)

    # -- sshd ---------------------------------------------------------------------------
    def kill_sshd(self, dev: str) -> None:
        """SIGKILL every sshd of the device (listener and sessions); undone at teardown."""
        assert self.lab.device(dev).arch != "aarch64", "restart supports native devices"
        self.signal_procs(dev, "sshd", signal.SIGKILL)
        self._undo.append(lambda: self.restart_sshd(dev))

    def restart_sshd(self, dev: str) -> None:
        """Kill everything in the device (a reboot) and start its sshd again, journaled."""
        device = self.lab.device(dev)
        for pid in self.procs(dev):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        deadline = time.monotonic() + 10
        while self.procs(dev) and time.monotonic() < deadline:
            time.sleep(0.05)
        ddir = DeviceDir(Path(device.dir), "")
        argv = ["ip", "netns", "exec", self.ns(dev), "unshare", "--mount", "--uts",
                "--propagation", "private", "/bin/sh", str(ddir.launcher)]
        spawn_sshd(self.lab.state, device, ddir, argv)
        deadline = time.monotonic() + 20
        while not reachable(device, 0.5):
            assert time.monotonic() < deadline, f"sshd of {dev} did not come back"
            time.sleep(0.05)

    @contextlib.contextmanager
    def host_key_changed(self, dev: str) -> Iterator[None]:
        """The device presents a new host key (re-imaged), then gets its own key back."""
        key = DeviceDir(Path(self.lab.device(dev).dir), "").host_key
        pub = key.with_name(key.name + ".pub")
        saved = {p: p.read_bytes() for p in (key, pub)}
        fresh = key.with_name("fault-new-key")
        for p in (fresh, fresh.with_name(fresh.name + ".pub")):
            p.unlink(missing_ok=True)
        run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(fresh)])
        shutil.copyfile(fresh, key)
        shutil.copyfile(fresh.with_name(fresh.name + ".pub"), pub)
        try:
            self.restart_sshd(dev)
            yield
        finally:
            for p, data in saved.items():
                p.write_bytes(data)
            key.chmod(0o600)
            self.restart_sshd(dev)

    # -- link ---------------------------------------------------------------------------
    def _nft(self, dev: str, rules_in: str, rules_out: str) -> None:
        ruleset = (f"table inet {NFT_TABLE} {{\n"
                   f" chain input {{ type filter hook input priority 0; policy accept; "
                   f"{rules_in}; }}\n"
                   f" chain output {{ type filter hook output priority 0; policy accept; "
                   f"{rules_out}; }}\n}}\n")
        proc = subprocess.run(["ip", "netns", "exec", self.ns(dev), "nft", "-f", "-"],
                              input=ruleset, capture_output=True, text=True, timeout=30)
        assert proc.returncode == 0, proc.stderr

    def clear_nft(self, dev: str) -> None:
        run(["ip", "netns", "exec", self.ns(dev), "nft", "delete", "table", "inet", NFT_TABLE],
            check=False)

    def nft_dropped(self, dev: str) -> int:
        """Packets dropped by our rules so far (from their counters)."""
        out = run(["ip", "netns", "exec", self.ns(dev), "nft", "-j", "list", "table", "inet",
                   NFT_TABLE]).stdout
        total = 0
        for item in json.loads(out)["nftables"]:
            for expr in item.get("rule", {}).get("expr", []):
                if "counter" in expr:
                    total += expr["counter"]["packets"]
        return total

    @contextlib.contextmanager
    def link_cut(self, dev: str) -> Iterator[None]:
        self._nft(dev, "counter drop", "counter drop")
        try:
            yield
        finally:
            self.clear_nft(dev)

    def cut_link_now(self, dev: str) -> None:
        """Cut the link until teardown (for a cut injected from another thread)."""
        self._nft(dev, "counter drop", "counter drop")
        self._undo.append(lambda: self.clear_nft(dev))

    @contextlib.contextmanager
    def packet_loss(self, dev: str, percent: int) -> Iterator[None]:
        rule = f"numgen random mod 100 < {percent} counter drop"
        self._nft(dev, rule, rule)
        try:
            yield
        finally:
            self.clear_nft(dev)

    @contextlib.contextmanager
    def rate_limit(self, dev: str, rate: str = "8mbit") -> Iterator[None]:
        host_if, dev_if = self.veth(dev)
        tbf = ["root", "tbf", "rate", rate, "burst", "32kbit", "latency", "400ms"]
        run(["tc", "qdisc", "add", "dev", host_if, *tbf])
        run(["ip", "netns", "exec", self.ns(dev), "tc", "qdisc", "add", "dev", dev_if, *tbf])
        try:
            yield
        finally:
            run(["tc", "qdisc", "del", "dev", host_if, "root"], check=False)
            run(["ip", "netns", "exec", self.ns(dev), "tc", "qdisc", "del", "dev", dev_if,
                 "root"], check=False)

    # -- storage ------------------------------------------------------------------------
    def corrupt(self, dev: str, relpath: str, offset: int = -64) -> bytes:
        """Flip bytes of a deployed file, keeping its size and mtime; returns the original."""
        path = self.workdir_on_host(dev) / relpath
        original = path.read_bytes()
        st = path.stat()
        data = bytearray(original)
        for i in range(8):
            data[offset + i] ^= 0x5A
        path.write_bytes(bytes(data))
        os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))

        def restore() -> None:
            path.write_bytes(original)
            os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))
        self._undo.append(restore)
        return original

    def replace_text(self, dev: str, relpath: str, old: bytes, new: bytes) -> None:
        """Edit a deployed file in place (same length: size and mtime kept)."""
        assert len(old) == len(new)
        path = self.workdir_on_host(dev) / relpath
        original = path.read_bytes()
        assert old in original, f"{old!r} not in {relpath}"
        st = path.stat()
        path.write_bytes(original.replace(old, new, 1))
        os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))

        def restore() -> None:
            path.write_bytes(original)
            os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))
        self._undo.append(restore)

    @contextlib.contextmanager
    def small_workdir(self, dev: str, size: str = "256k") -> Iterator[None]:
        workdir = self.lab.device(dev).workdir
        self.lab.run_in(dev, ["mount", "-t", "tmpfs", "-o", f"size={size}", "farmfault",
                              workdir]).check_returncode()
        try:
            yield
        finally:
            self.lab.run_in(dev, ["umount", "-l", workdir])

    def undo(self) -> None:
        while self._undo:
            with contextlib.suppress(Exception):
                self._undo.pop()()
