"""Thin, checked wrappers over the host tools and /proc facts the lab needs.

Every function either succeeds or raises `LabError` naming the command, its output and
the next step. Processes are identified by (pid, start time) so a recycled pid is
never killed by mistake.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from collections.abc import Iterable, Sequence
from pathlib import Path

from farm.errors import FarmError


class LabError(FarmError):
    """The lab could not be brought up, inspected or torn down."""


def run(argv: Sequence[str], *, check: bool = True, timeout: float = 30.0,
        input_text: str | None = None) -> subprocess.CompletedProcess[str]:
    """Run a host command (argv, never a shell string) and capture its output."""
    try:
        proc = subprocess.run(list(argv), capture_output=True, text=True, timeout=timeout,
                              input=input_text, check=False)
    except FileNotFoundError as exc:
        raise LabError(f"`{argv[0]}` is not installed",
                       hint="run scripts/setup.sh (needs iproute2, openssh-server, "
                            "util-linux, qemu-user)") from exc
    except subprocess.TimeoutExpired as exc:
        raise LabError(f"`{' '.join(argv)}` did not finish within {timeout:.0f} s") from exc
    if check and proc.returncode != 0:
        output = (proc.stderr or proc.stdout).strip()
        raise LabError(f"`{' '.join(argv)}` failed (exit {proc.returncode}): {output}",
                       hint="run `farm lab down` to clean up, then retry")
    return proc


def link_exists(name: str) -> bool:
    return Path("/sys/class/net", name).exists()


def netns_list() -> list[str]:
    """Names of the named network namespaces (`ip netns add`) on this host."""
    try:
        return sorted(p.name for p in Path("/run/netns").iterdir())
    except FileNotFoundError:
        return []


def netns_pids(name: str) -> list[int]:
    """Pids of every process living in the named network namespace."""
    proc = run(["ip", "netns", "pids", name], check=False)
    return [int(tok) for tok in proc.stdout.split() if tok.isdigit()]


def start_time(pid: int) -> int | None:
    """The process start time in clock ticks since boot (field 22 of /proc/PID/stat)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError, PermissionError):
        return None
    # the command name is in parentheses and may hold spaces: split after the last ')'
    fields = stat[stat.rindex(")") + 2:].split()
    return int(fields[19])


def is_alive(pid: int | None, start: int | None) -> bool:
    """True when `pid` runs and is the same process that was recorded (not a zombie)."""
    if not pid:
        return False
    now = start_time(pid)
    if now is None or (start is not None and now != start):
        return False
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state != "Z"


def cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(
            errors="replace")
    except OSError:
        return ""


def all_pids() -> list[int]:
    return [int(p.name) for p in Path("/proc").iterdir() if p.name.isdigit()]


# only these programs are ever started by the lab with a device file in their argv
_LAB_PROGRAMS = frozenset({"sshd", "ip", "unshare", "sh", "nsenter"})


def pids_matching(tokens: Sequence[str]) -> list[int]:
    """Pids of lab programs (sshd, its launcher) with one of `tokens` as an argument.

    Exact argv elements and the program name are compared, so an editor or `tail -f` on
    a lab file is never taken for a lab process.
    """
    wanted = set(tokens)
    found = []
    for pid in all_pids():
        try:
            argv = Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace")
        except OSError:
            continue
        args = [a for a in argv.split("\0") if a]
        if len(args) == 1:  # sshd rewrites its title: "sshd: /usr/sbin/sshd -D -f CONF [listener]"
            args = args[0].split()
        if args and os.path.basename(args[0]).rstrip(":") in _LAB_PROGRAMS \
                and wanted & set(args[1:]):
            found.append(pid)
    return found


def terminate(pids: Iterable[int], grace_s: float = 2.0) -> list[int]:
    """SIGTERM, wait up to `grace_s`, then SIGKILL; return the pids that still remain."""
    targets = {pid: start_time(pid) for pid in pids}
    targets = {pid: st for pid, st in targets.items() if st is not None}
    for pid in targets:
        _signal(pid, signal.SIGTERM)
    deadline = time.monotonic() + grace_s
    while time.monotonic() < deadline:
        _reap(targets)
        if not any(is_alive(pid, st) for pid, st in targets.items()):
            return []
        time.sleep(0.05)
    for pid, st in targets.items():
        if is_alive(pid, st):
            _signal(pid, signal.SIGKILL)
    time.sleep(0.1)
    _reap(targets)
    return [pid for pid, st in targets.items() if is_alive(pid, st)]


def _signal(pid: int, sig: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.kill(pid, sig)


def _reap(pids: Iterable[int]) -> None:
    # our own children (spawned by this very process) would stay zombies otherwise
    for pid in pids:
        with contextlib.suppress(ChildProcessError):
            os.waitpid(pid, os.WNOHANG)


def _under(path: str, prefixes: Sequence[str]) -> bool:
    return any(path == p or path.startswith(p.rstrip("/") + "/") for p in prefixes)


def mounts_under(prefixes: Sequence[str]) -> list[str]:
    """Mounts, in any process's mount namespace, at or from a path under one of `prefixes`."""
    found: set[str] = set()
    seen_ns: set[str] = set()
    for pid in all_pids():
        try:
            ns = os.readlink(f"/proc/{pid}/ns/mnt")
            if ns in seen_ns:
                continue
            seen_ns.add(ns)
            text = Path(f"/proc/{pid}/mountinfo").read_text()
        except OSError:
            continue
        for line in text.splitlines():
            parts = line.split()
            if len(parts) > 4 and (_under(parts[3], prefixes) or _under(parts[4], prefixes)):
                found.add(f"mount {parts[4]} (from {parts[3]}, seen by pid {pid})")
    return sorted(found)


def namespace_of(pid: int, kind: str) -> str | None:
    """`mnt:[4026531841]`-style identity of one of a process's namespaces."""
    try:
        return os.readlink(f"/proc/{pid}/ns/{kind}")
    except OSError:
        return None


def pids_in_namespaces(kind: str, identities: set[str]) -> list[int]:
    return [pid for pid in all_pids() if namespace_of(pid, kind) in identities]


def descendants(root: int) -> list[int]:
    """All live descendants of `root` (children, grandchildren...)."""
    children: dict[int, list[int]] = {}
    for pid in all_pids():
        try:
            stat = Path(f"/proc/{pid}/stat").read_text()
        except OSError:
            continue
        ppid = int(stat[stat.rindex(")") + 2:].split()[1])
        children.setdefault(ppid, []).append(pid)
    out, todo = [], [root]
    while todo:
        for child in children.get(todo.pop(), []):
            out.append(child)
            todo.append(child)
    return out


def pids_with_env(entry: str) -> list[int]:
    """Pids whose environment holds exactly `entry` (e.g. FARM_LAB_DIR=/path)."""
    wanted = entry.encode()
    found = []
    for pid in all_pids():
        try:
            env = Path(f"/proc/{pid}/environ").read_bytes()
        except OSError:
            continue
        if wanted in env.split(b"\0"):
            found.append(pid)
    return found
