"""Lab devices as network namespaces on a bridge (needs root).

Slot k (the lowest one free, so several labs can coexist) owns bridge `farmlab<k>` with
10.77.<k>.1/24 in the root namespace; device i lives in netns `farmlab<k>-<name>` at
10.77.<k>.<10+i>, joined by veth `fl<k>h<i>` (bridge side) / `fl<k>d<i>` (device side).
The subnet exists only between the host and these namespaces (no default route).
Each device's sshd runs under `unshare --mount --uts` with the device's own /root bound
over the host's (a clean home: no pyenv .bashrc, StrictModes works); aarch64 devices add
a user namespace with a private binfmt_misc (see farm.lab.aarch64).
Every resource is recorded in the lab journal before it is created.

Devices behind a gateway (`LabSpec.jumped`): the gateway `gate` is a native device on the
bridge whose namespace also holds a bridge `jump` with 10.78.<k>.1/24; each jumped device
`far<j>` lives in its own namespace at 10.78.<k>.<10+i>, joined to that bridge by veth
`fl<k>g<i>` / `fl<k>d<i>`, with no link to the host's namespace. The gateway namespace
does not forward (a new namespace starts with ip_forward 0), and the host gets an
`unreachable` route for 10.78.<k>.0/24, so a packet to a jumped device fails at once
instead of leaving by the host's default route: only an SSH channel through the
gateway's sshd (`direct-tcpip`) reaches it.
"""

from __future__ import annotations

import shlex
import subprocess
import sys
from pathlib import Path

from farm.lab import aarch64
from farm.lab.device_dir import DeviceDir, spawn_sshd
from farm.lab.records import LabDevice, LabState
from farm.lab.sshd import SSHD, ensure_privsep_dir, sshd_config, write_config
from farm.lab.system import LabError, link_exists, netns_list, run

MAX_SLOTS = 50
NETNS_PREFIX = "farmlab"


def bridge_name(slot: int) -> str:
    return f"farmlab{slot}"


def netns_name(slot: int, device: str) -> str:
    return f"{NETNS_PREFIX}{slot}-{device}"


def address(slot: int, index: int) -> str:
    return f"10.77.{slot}.{10 + index}"


def hidden_subnet(slot: int) -> str:
    """The subnet behind the gateway (see the module docstring)."""
    return f"10.78.{slot}.0/24"


def hidden_address(slot: int, index: int) -> str:
    return f"10.78.{slot}.{10 + index}"


JUMP_BRIDGE = "jump"  # inside the gateway's namespace: gone with it


def netns_available() -> bool:
    """Can this process create network namespaces? (root, and not in a locked-down sandbox)"""
    probe = f"{NETNS_PREFIX}-probe"
    proc = run(["ip", "netns", "add", probe], check=False)
    if proc.returncode != 0:
        return False
    run(["ip", "netns", "del", probe], check=False)
    return True


def free_slot() -> int:
    """The lowest slot whose bridge and namespaces do not exist (call under the lab lock)."""
    names = netns_list()
    for slot in range(MAX_SLOTS):
        prefix = f"{NETNS_PREFIX}{slot}-"
        if not link_exists(bridge_name(slot)) and not any(n.startswith(prefix) for n in names):
            return slot
    raise LabError(f"all {MAX_SLOTS} lab slots are in use", hint="`farm lab down` old labs")


def create_bridge(state: LabState) -> None:
    name = bridge_name(state.slot)
    state.add("bridge", name=name)
    run(["ip", "link", "add", name, "type", "bridge"])
    run(["ip", "addr", "add", f"10.77.{state.slot}.1/24", "dev", name])
    run(["ip", "link", "set", name, "up"])


def create_jump_network(state: LabState, gateway: LabDevice) -> None:
    """The gateway's second link (a bridge in its namespace) and the host's unreachable
    route for the subnet behind it."""
    assert gateway.netns
    subnet = hidden_subnet(state.slot)
    state.add("route", prefix=subnet)
    run(["ip", "route", "add", "unreachable", subnet])
    # the bridge lives and dies with the gateway's namespace (recorded there)
    ns = gateway.netns
    run(["ip", "-n", ns, "link", "add", JUMP_BRIDGE, "type", "bridge"])
    run(["ip", "-n", ns, "addr", "add", f"10.78.{state.slot}.1/24", "dev", JUMP_BRIDGE])
    run(["ip", "-n", ns, "link", "set", JUMP_BRIDGE, "up"])


def create_device(state: LabState, index: int, name: str, arch: str, features: list[str],
                  python: str, sysroot: Path | None, *, behind: LabDevice | None = None,
                  ) -> tuple[LabDevice, subprocess.Popen[bytes]]:
    """Namespace, veth, address, keys, config and a running sshd for one device.

    `sysroot` is given for (and only for) an emulated aarch64 device; `behind` is the
    gateway of a jumped device (`create_jump_network` ran for it).
    """
    ns = netns_name(state.slot, name)
    if behind is None:
        ip = address(state.slot, index)
        _create_network(state, ns, index, ip)
    else:
        ip = hidden_address(state.slot, index)
        _create_hidden_network(state, ns, index, ip, behind)
    ddir = DeviceDir.prepare(Path(state.lab_dir), name)
    env = {"FARM_DEVICE": name, "FARM_LAB_DIR": state.lab_dir}
    if sysroot is not None:
        env.update(aarch64.session_env(sysroot))
    ensure_privsep_dir()
    write_config(ddir.config, sshd_config(
        listen=ip, port=22, host_key=ddir.host_key, authorized_keys=".ssh/authorized_keys",
        strict_modes=True, env=env))
    device = LabDevice(name=name, arch=arch, address=ip, port=22, user="root", netns=ns,
                       dir=str(ddir.path), python=python, workdir="/root/farm",
                       features=features, via=behind.name if behind else None)
    # in-namespace mounts vanish with the device's last process; recorded so `down` can
    # prove it (no mount table anywhere may still mention the lab directory)
    state.add("mount", path="/root", source=str(ddir.home), where=f"mount ns of {name}")
    if sysroot is not None:
        device.python = "/root/bin/python3"
        argv = _aarch64_launcher(state, ddir, name, ns, sysroot)
    else:
        argv = _native_launcher(state, ddir, name, ns, python)
    proc = spawn_sshd(state, device, ddir, argv)
    if sysroot is not None:
        aarch64.write_id_maps(proc.pid)
    return device, proc


def _create_network(state: LabState, ns: str, index: int, ip: str) -> None:
    host_if, dev_if = f"fl{state.slot}h{index}", f"fl{state.slot}d{index}"
    # `ip netns add` also bind-mounts /run/netns/<ns>: `ip netns del` removes both
    state.add("netns", name=ns, mount=f"/run/netns/{ns}")
    run(["ip", "netns", "add", ns])
    state.add("veth", name=host_if, peer=dev_if, netns=ns)
    run(["ip", "link", "add", host_if, "type", "veth", "peer", "name", dev_if, "netns", ns])
    run(["ip", "link", "set", host_if, "master", bridge_name(state.slot), "up"])
    run(["ip", "-n", ns, "link", "set", "lo", "up"])
    run(["ip", "-n", ns, "addr", "add", f"{ip}/24", "dev", dev_if])
    run(["ip", "-n", ns, "link", "set", dev_if, "up"])


def _create_hidden_network(state: LabState, ns: str, index: int, ip: str,
                           gateway: LabDevice) -> None:
    """A jumped device's namespace, linked to the gateway's `jump` bridge only."""
    assert gateway.netns
    gw_if, dev_if = f"fl{state.slot}g{index}", f"fl{state.slot}d{index}"
    state.add("netns", name=ns, mount=f"/run/netns/{ns}")
    run(["ip", "netns", "add", ns])
    # both ends are in lab namespaces: the veth goes away with them
    state.add("veth", name=gw_if, peer=dev_if, netns=ns, where=gateway.netns)
    run(["ip", "-n", gateway.netns, "link", "add", gw_if, "type", "veth", "peer", "name",
         dev_if, "netns", ns])
    run(["ip", "-n", gateway.netns, "link", "set", gw_if, "master", JUMP_BRIDGE, "up"])
    run(["ip", "-n", ns, "link", "set", "lo", "up"])
    run(["ip", "-n", ns, "addr", "add", f"{ip}/24", "dev", dev_if])
    run(["ip", "-n", ns, "link", "set", dev_if, "up"])


def reachable_from(netns: str, host: str, port: int, timeout_s: float) -> bool:
    """True when host:port answers with an SSH banner as seen from inside `netns` (how the
    lab waits for a jumped device: the host itself has no route to it)."""
    probe = ("import socket, sys\n"
             "t = float(sys.argv[3])\n"
             "try:\n"
             "    s = socket.create_connection((sys.argv[1], int(sys.argv[2])), t)\n"
             "    s.settimeout(t)\n"
             "    sys.exit(0 if s.recv(8).startswith(b'SSH-') else 1)\n"
             "except OSError:\n"
             "    sys.exit(1)\n")
    proc = run(["ip", "netns", "exec", netns, sys.executable, "-c", probe, host, str(port),
                str(timeout_s)], check=False, timeout=timeout_s + 10)
    return proc.returncode == 0


def route_exists(prefix: str) -> bool:
    return bool(run(["ip", "route", "show", prefix], check=False).stdout.strip())


def remove_route(prefix: str) -> None:
    if route_exists(prefix):
        run(["ip", "route", "del", prefix], check=False)


def _aarch64_launcher(state: LabState, ddir: DeviceDir, name: str, ns: str,
                      sysroot: Path) -> list[str]:
    state.add("mount", path=str(ddir.binfmt), source="binfmt_misc",
              where=f"mount ns of {name}")
    # sshd in the child user namespace lacks CAP_NET_BIND_SERVICE over this netns
    run(["ip", "netns", "exec", ns, "sysctl", "-qw", "net.ipv4.ip_unprivileged_port_start=0"])
    ddir.write_python_wrappers(sysroot)
    ddir.binfmt.mkdir(exist_ok=True)
    ddir.binfmt_rule.write_text(aarch64.BINFMT_RULE)
    ddir.launcher.write_text(aarch64.launch_script(
        hostname=name, binfmt_dir=ddir.binfmt, rule_file=ddir.binfmt_rule,
        home=ddir.home, config=ddir.config, sshd=SSHD))
    return ["ip", "netns", "exec", ns, "unshare", "--user", "--mount", "--uts",
            "--propagation", "private", "/bin/sh", str(ddir.launcher)]


def _native_launcher(state: LabState, ddir: DeviceDir, name: str, ns: str,
                     python: str) -> list[str]:
    keep = hidden_by_home(python)
    for path in keep:
        (ddir.home / Path(path).name).mkdir(exist_ok=True)
        state.add("mount", path=f"/root/{Path(path).name}", source=path,
                  where=f"mount ns of {name}")
    ddir.launcher.write_text(_native_script(name, ddir, keep))
    return ["ip", "netns", "exec", ns, "unshare", "--mount", "--uts",
            "--propagation", "private", "/bin/sh", str(ddir.launcher)]


def _native_script(name: str, ddir: DeviceDir, keep: list[str]) -> str:
    q = shlex.quote
    binds = []
    for path in keep:  # host dirs under /root the device's python needs, read-only
        target = q(str(ddir.home / Path(path).name))
        binds += [f"mount --bind {q(path)} {target}", f"mount -o remount,bind,ro {target}"]
    lines = "\n".join(binds)
    return f"""#!/bin/sh
# written by farm lab: start the sshd of native device {name}
set -e
hostname {q(name)}
{lines}
mount --rbind {q(str(ddir.home))} /root
exec {SSHD} -D -e -f {q(str(ddir.config))}
"""


def hidden_by_home(python: str) -> list[str]:
    """Top-level dirs under /root that `python` needs (e.g. /root/.pyenv behind a venv).

    The device's private home hides the host's /root, so these are bound back read-only.
    """
    exe = Path(python)
    candidates = [exe, exe.resolve()]
    cfg = exe.parent.parent / "pyvenv.cfg"
    if cfg.is_file():
        for line in cfg.read_text().splitlines():
            key, _, value = line.partition("=")
            if key.strip() == "home" and value.strip():
                candidates.append(Path(value.strip()).resolve())
    keep = []
    for path in candidates:
        parts = path.parts
        if len(parts) > 2 and parts[:2] == ("/", "root"):
            top = f"/root/{parts[2]}"
            if top not in keep:
                keep.append(top)
    return keep


def remove_netns(name: str) -> None:
    if name in netns_list():
        run(["ip", "netns", "del", name], check=False)


def remove_link(name: str) -> None:
    if link_exists(name):
        run(["ip", "link", "del", name], check=False)
