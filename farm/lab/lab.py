"""Bring the lab up, report on it, tear it down: the public verbs behind `farm lab`.

`up(spec)` creates native devices `lab1..labN` and emulated aarch64 devices `pixel7`,
`rpi5`, `a64-3`... (network namespaces, or loopback sshds where namespaces are not
permitted), with `jumped` > 0 a gateway `gate` and native devices `far1..farM` reachable
only through it (`via: gate`; namespaces only, see netns_backend), waits until every sshd
answers, and writes `<lab_dir>/devices.yaml`.
`down()` removes everything the journal records (even after a crash) and then proves
that no process, namespace, link or mount of the lab is left; it raises otherwise.
The lab directory defaults to `<state_dir>/lab` (`.farm/lab`).
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import platform
import shutil
import socket
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from farm.inventory.builtin import cpu_features
from farm.lab import aarch64, loopback_backend, netns_backend, registry
from farm.lab.inventory_file import INVENTORY_FILE, KNOWN_HOSTS_FILE, write_inventory
from farm.lab.records import LabDevice, LabState, load_state
from farm.lab.sysroot import ensure_sysroot
from farm.lab.system import LabError, is_alive, namespace_of, start_time
from farm.lab.teardown import leftovers, remove_recorded, summary
from farm.paths import state_dir

READY_TIMEOUT_S = 20.0
GATEWAY = "gate"  # the lab's jump host when `LabSpec.jumped` > 0
AARCH64_FEATURES = ["neon", "dotprod"]  # what QEMU_CPU=cortex-a76 provides
Log = Callable[[str], None]


@dataclass(frozen=True)
class LabSpec:
    native: int = 2
    aarch64: int = 0
    loopback: bool = False  # force the loopback fallback even where namespaces work
    jumped: int = 0  # devices behind the gateway `gate` (which this adds too)


def default_lab_dir() -> Path:
    return state_dir() / "lab"


def resolve_lab_dir(lab_dir: Path | str | None) -> Path:
    return Path(lab_dir).resolve() if lab_dir else default_lab_dir().resolve()


def up(spec: LabSpec, lab_dir: Path | str | None = None, *, log: Log = print,
       owner_pid: int | None = None) -> LabState:
    """Bring up the lab described by `spec` in `lab_dir`; return its journal.

    With `owner_pid`, the lab counts as stale once that process exits (see `down_stale`).
    """
    if min(spec.native, spec.aarch64, spec.jumped) < 0 or \
            spec.native + spec.aarch64 + spec.jumped == 0:
        raise LabError("the lab needs at least one device",
                       hint="e.g. farm lab up --devices 2 --aarch64 1")
    if spec.native + spec.aarch64 + spec.jumped > 200:
        raise LabError("at most 200 lab devices are supported")
    path = resolve_lab_dir(lab_dir)
    existing = load_state(path)
    if existing is not None:
        if healthy(existing) and _shape(existing) == _wanted_shape(existing.mode, spec):
            log(f"lab already up in {path} ({len(existing.devices)} devices)")
            return existing
        if healthy(existing):
            raise LabError(f"a different lab is already up in {path}",
                           hint="run `farm lab down` first (others may be using it)")
        log(f"the previous lab in {path} is not healthy: cleaning up by its records")
        down(path, log=log)

    mode, n_arm, n_jumped = _choose_mode(spec, log)
    if mode == "netns":
        _outside_root("lab directory", path, "use --dir")
    # build the sysroot before creating anything, so a long download holds no resources
    sysroot = ensure_sysroot() if n_arm else None
    if sysroot is not None:
        _outside_root("aarch64 sysroot", sysroot,
                      "set FARM_SYSROOT elsewhere, e.g. /var/cache/farm/sysroot-aarch64")
    path.mkdir(parents=True, exist_ok=True)
    with _lab_lock():
        slot = netns_backend.free_slot() if mode == "netns" else 0
        state = LabState(lab_dir=str(path), mode=mode, slot=slot)
        if owner_pid is not None:
            state.owner = {"pid": owner_pid, "start": start_time(owner_pid)}
        registry.register(str(path))
        state.save()
        try:
            _create_devices(state, spec.native, n_arm, n_jumped, sysroot)
        except BaseException:
            _cleanup_after_failure(path, log)
            raise
    try:
        _wait_ready(state)
        write_inventory(state)
    except BaseException:
        _cleanup_after_failure(path, log)
        raise
    for dev in state.devices:
        via = f" via {dev.via}" if dev.via else ""
        log(f"  {dev.name:8} {dev.arch:8} {dev.user}@{dev.address}:{dev.port}{via}  "
            f"pid {dev.pid}")
    log(f"lab up: {len(state.devices)} devices; inventory {path / INVENTORY_FILE}")
    return state


def _choose_mode(spec: LabSpec, log: Log) -> tuple[str, int, int]:
    """("netns" | "loopback", how many aarch64 and jumped devices can be made)."""
    if not spec.loopback and os.geteuid() == 0 and netns_backend.netns_available():
        return "netns", spec.aarch64, spec.jumped
    reason = "as asked" if spec.loopback else "network namespaces are not permitted here"
    log(f"lab: falling back to one sshd per loopback address/port ({reason})")
    if spec.aarch64:
        log(f"lab: {spec.aarch64} emulated aarch64 device(s) unavailable in loopback mode "
            "(they need namespaces); bringing up native devices only")
    if spec.jumped:
        log(f"lab: the gateway and {spec.jumped} device(s) behind it unavailable in loopback "
            "mode (a device reachable only through the gateway needs namespaces)")
    return "loopback", 0, 0


def _create_devices(state: LabState, n_native: int, n_arm: int, n_jumped: int,
                    sysroot: Path | None) -> None:
    python = _native_python()
    host_arch = _host_arch()
    native_features = list(cpu_features(_read("/proc/cpuinfo"), host_arch))
    if state.mode == "netns":
        netns_backend.create_bridge(state)
    taken: set[int] = set()
    for i in range(1, n_native + n_arm + 1):
        arm = i > n_native
        if state.mode == "netns":
            dev, _proc = netns_backend.create_device(
                state, i, aarch64.fleet_name(i - n_native) if arm else f"lab{i}",
                "aarch64" if arm else host_arch, AARCH64_FEATURES if arm else native_features,
                python, sysroot if arm else None)
        else:
            dev, _proc = loopback_backend.create_device(
                state, i, f"lab{i}", python, native_features, taken)
        state.devices.append(dev)
        state.save()
    if n_jumped:
        _create_jumped(state, n_native + n_arm, n_jumped, python, host_arch, native_features)


def _create_jumped(state: LabState, before: int, n_jumped: int, python: str, arch: str,
                   features: list[str]) -> None:
    """The gateway `gate` (a native device on the bridge) and `far1..` behind it."""
    gateway, _proc = netns_backend.create_device(state, before + 1, GATEWAY, arch, features,
                                                 python, None)
    state.devices.append(gateway)
    state.save()
    netns_backend.create_jump_network(state, gateway)
    for j in range(1, n_jumped + 1):
        dev, _proc = netns_backend.create_device(state, before + 1 + j, f"far{j}", arch,
                                                 features, python, None, behind=gateway)
        state.devices.append(dev)
        state.save()


def down(lab_dir: Path | str | None = None, *, purge: bool = False,
         log: Log = print) -> list[str]:
    """Remove everything the lab's journal records; raise if anything is left."""
    path = resolve_lab_dir(lab_dir)
    state = load_state(path)
    if state is None:
        log(f"no lab recorded in {path}: nothing to do")
        return []
    actions = remove_recorded(state)
    left = leftovers(state)
    if left:
        raise LabError("lab down left these behind:\n  " + "\n  ".join(left),
                       hint=f"the journal {state.path} is kept; retry `farm lab down`")
    for name in ("state.json", INVENTORY_FILE, KNOWN_HOSTS_FILE):
        (path / name).unlink(missing_ok=True)
    registry.unregister(str(path))
    if purge:
        shutil.rmtree(path, ignore_errors=True)
    log(f"lab down ({path}): {summary(actions)}; nothing left behind")
    return actions


def down_stale(*, log: Log = print) -> list[Path]:
    """Tear down every registered lab whose owner process is gone (a killed test run)."""
    removed = []
    for lab_dir in registry.stale_labs():
        log(f"lab in {lab_dir} outlived its owner: tearing it down")
        down(lab_dir, log=log)
        removed.append(lab_dir)
    return removed


def healthy(state: LabState) -> bool:
    return bool(state.devices) and all(is_alive(d.pid, d.start) for d in state.devices)


def reachable(device: LabDevice, timeout_s: float = 1.0,
              state: LabState | None = None) -> bool:
    """True when the device's sshd answers with an SSH banner; a jumped device (`via`) is
    asked from inside its gateway's namespace (`state` names it), the one place it is
    reachable from."""
    if device.via:
        gateway = state.device(device.via) if state else None
        return bool(gateway and gateway.netns) and netns_backend.reachable_from(
            gateway.netns, device.address, device.port, timeout_s)  # type: ignore[arg-type]
    try:
        with socket.create_connection((device.address, device.port), timeout=timeout_s) as s:
            s.settimeout(timeout_s)
            return s.recv(8).startswith(b"SSH-")
    except OSError:
        return False


def _wait_ready(state: LabState) -> None:
    deadline = time.monotonic() + READY_TIMEOUT_S
    pending = list(state.devices)
    while pending:
        for dev in list(pending):
            if not is_alive(dev.pid, dev.start):
                tail = _tail(Path(dev.dir) / "sshd.log")
                raise LabError(f"the sshd of lab device {dev.name} exited:\n{tail}",
                               hint=f"see {dev.dir}/sshd.log")
            if reachable(dev, 0.5, state):
                pending.remove(dev)
                _record_namespaces(state, dev)
        if pending and time.monotonic() > deadline:
            names = ", ".join(d.name for d in pending)
            raise LabError(f"lab devices {names} did not answer within {READY_TIMEOUT_S:.0f} s",
                           hint="see sshd.log in their device directories")
        if pending:
            time.sleep(0.05)


def _record_namespaces(state: LabState, dev: LabDevice) -> None:
    # the private mount namespace of a device dies with its last process; `down` checks that
    # no process is left in it
    assert dev.pid is not None
    mnt = namespace_of(dev.pid, "mnt")
    if dev.netns and mnt and mnt != namespace_of(os.getpid(), "mnt"):
        state.add("mntns", device=dev.name, ns=mnt)


def _cleanup_after_failure(path: Path, log: Log) -> None:
    log("lab up failed: removing what was created")
    with contextlib.suppress(LabError):
        down(path, log=log)


def _shape(state: LabState) -> tuple[str, int, int, int]:
    arm = sum(1 for d in state.devices if d.netns and d.arch == "aarch64")
    jumped = sum(1 for d in state.devices if d.via)
    gateways = 1 if jumped else 0
    return state.mode, len(state.devices) - arm - jumped - gateways, arm, jumped


def _wanted_shape(mode: str, spec: LabSpec) -> tuple[str, int, int, int]:
    netns = mode == "netns"
    return mode, spec.native, spec.aarch64 if netns else 0, spec.jumped if netns else 0


def _outside_root(what: str, path: Path, fix: str) -> None:
    if path == Path("/root") or Path("/root") in path.parents:
        raise LabError(f"the {what} {path} is under /root, which every lab device replaces "
                       "with its private home", hint=f"{fix} (a path outside /root)")


def _native_python() -> str:
    # the host tool's own interpreter has numpy/onnxruntime; a python under /root would be
    # hidden by the device's private home
    exe = sys.executable
    return "/usr/bin/python3" if exe.startswith("/root/") or not exe else exe


def _host_arch() -> str:
    machine = platform.machine()
    return "aarch64" if machine in ("arm64", "aarch64") else machine


def _read(path: str) -> str:
    try:
        return Path(path).read_text()
    except OSError:
        return ""


def _tail(path: Path, lines: int = 15) -> str:
    return "\n".join(_read(str(path)).splitlines()[-lines:])


@contextlib.contextmanager
def _lab_lock() -> Iterator[None]:
    """Serialise slot choice across concurrent `farm lab up` runs on this machine."""
    path = Path("/run/farmlab.lock") if os.geteuid() == 0 else \
        Path(tempfile.gettempdir()) / f"farmlab-{os.geteuid()}.lock"
    with path.open("a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)
