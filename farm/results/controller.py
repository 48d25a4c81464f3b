"""Who writes a run, and whether that process still lives.

`farm bench` records its own process in its run row (`this_controller()`: pid, host name and
the process's start time). A run left `running` whose controller is gone was killed
(SIGKILL, the OOM killer, a closed terminal): the store marks it `interrupted` the next
time it is opened (`is_gone`, used by `farm.results.store`). Gone means: the pid does not
run on this host, is a zombie, or runs a process started at another time (the pid was
reused). A stopped (SIGSTOP) controller is alive, so its run stays `running`. Runs of
another host cannot be judged here and are left alone, as are runs written before the
store recorded controllers (schema version 3).

The start time is read from `/proc` (Linux): boot time + the process's start in clock
ticks, as an ISO UTC string that is the same on every read. Elsewhere it is None and only
the pid is checked.
"""

from __future__ import annotations

import os
import socket
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

from farm.process import pid_alive


@dataclass(frozen=True)
class Controller:
    pid: int
    host: str
    started: str | None  # process start, ISO UTC (None where /proc cannot tell)


def _proc_stat(pid: int) -> list[str] | None:
    """Fields of /proc/<pid>/stat after the command name (field 3, the state, first)."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return text[text.rfind(")") + 2:].split()


def _boot_time() -> int | None:
    try:
        for line in Path("/proc/stat").read_text().splitlines():
            if line.startswith("btime "):
                return int(line.split()[1])
    except (OSError, ValueError):
        return None
    return None


def process_started(pid: int) -> str | None:
    """When process `pid` started (ISO UTC, 1/100 s), or None when unknown."""
    fields, boot = _proc_stat(pid), _boot_time()
    if not fields or len(fields) < 20 or boot is None:
        return None
    try:
        ticks = int(fields[19])  # field 22 of the whole line: starttime, in clock ticks
        hz = os.sysconf("SC_CLK_TCK")
    except (ValueError, OSError):
        return None
    at = datetime.fromtimestamp(boot + ticks / hz, timezone.utc)
    return at.strftime("%Y-%m-%dT%H:%M:%S.") + f"{at.microsecond // 10000:02d}Z"


def this_controller() -> Controller:
    return Controller(os.getpid(), socket.gethostname(), process_started(os.getpid()))


def is_gone(pid: object, host: object, started: object) -> bool:
    """Whether the controller recorded as (pid, host, started) is certainly dead."""
    if not isinstance(pid, int) or pid <= 0 or host != socket.gethostname():
        return False  # nothing recorded, or another host's process: cannot tell
    if not pid_alive(pid):
        return True  # gone, or killed and not yet reaped by its parent
    now = process_started(pid)
    return isinstance(started, str) and now is not None and now != started
