"""The device-side lease: waiting for another controller's agent to let go of a device.

The host-side lease (`farm.bench.lease`) only orders the benches of one state directory.
Benches of another host (or another FARM_HOME) meet on the device: its agent holds
`<workdir>/agent.lock` (flock) for the whole of a bench and refuses a second agent with
"device busy". `--lock-wait` covers that lock too:

* `probe(transport, device)` asks the device, without touching the lock (a probe that
  took it, even for a moment, could make the holder's next agent fail), whether a live
  agent holds it: the lock file's JSON names the agent pid, and that pid must run
  `farm_agent` and have been heard from by its host within its idle timeout (after that
  the next agent reaps it, as the agent's own `holder_is_stale` decides). It runs before
  deploy, so a waiting bench does not upload next to a measuring one.
* `wait_free(...)` polls that probe with backoff until the lock is free or the deadline
  passes (then `LeaseBusy` naming the holder), telling `on_wait` who holds it.
* `holder_of_refusal(message)` reads the holder out of an agent's "device busy" refusal,
  for the race where another agent took the lock between the probe and our start.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from typing import Any

from farm.bench.lease import LeaseBusy
from farm.errors import FarmError
from farm.inventory.device import Device
from farm.transports import Transport

BUSY_WORDS = "device busy"
MAX_DEVICE_POLL_S = 5.0  # each poll is a command on the device: back off further

# stdlib only, Python 3.8: runs on the device's interpreter (workdir as argv, nothing pasted)
_PROBE = r'''
import json, os, sys, time
path = os.path.join(sys.argv[1], "agent.lock")
try:
    age = time.time() - os.stat(path).st_mtime
    with open(path) as f:
        raw = f.read()
except OSError:
    print(json.dumps({"held": False})); sys.exit(0)
try:
    info = json.loads(raw or "{}")
except ValueError:
    info = {}
if not isinstance(info, dict):
    info = {}
pid, alive = info.get("pid"), False
if isinstance(pid, int) and pid > 1:
    try:
        with open("/proc/%d/cmdline" % pid, "rb") as f:
            alive = b"farm_agent" in f.read()
    except OSError:  # no /proc, or hidden: the pid existing is all we can tell
        try:
            os.kill(pid, 0); alive = True
        except PermissionError:
            alive = True
        except OSError:
            alive = False
limit = info.get("idle_timeout")
limit = float(limit) if isinstance(limit, (int, float)) else 60.0
print(json.dumps({"held": alive and age <= limit + 2.0, "info": info, "age_s": age}))
'''


def describe(info: dict[str, Any], workdir: str) -> str:
    return (f"its agent lock {workdir}/agent.lock is held by {info.get('holder') or '?'} "
            f"(agent pid {info.get('pid', '?')}, since {info.get('since', '?')})")


def probe(transport: Transport, device: Device) -> dict[str, Any] | None:
    """The lock file's holder when a live agent holds the device, else None. A device
    that cannot answer is taken as free: the agent's own refusal still protects it."""
    try:
        result = transport.run([device.python, "-", device.workdir], stdin=_PROBE.encode(),
                               timeout=30, check=False)
        facts = json.loads(result.stdout.strip().splitlines()[-1])
    except (FarmError, OSError, ValueError, IndexError):
        return None
    if not isinstance(facts, dict) or not facts.get("held"):
        return None
    info = facts.get("info")
    return info if isinstance(info, dict) else {}


def holder_of_refusal(message: str) -> dict[str, Any]:
    """The holder JSON at the end of an agent's "device busy: another agent holds P (J)"."""
    start = message.find("({")
    if start < 0:
        return {}
    try:
        info = json.loads(message[start + 1:message.rfind(")")])
    except ValueError:
        return {}
    return info if isinstance(info, dict) else {}


def busy_error(device: Device, info: dict[str, Any], waited_s: float) -> LeaseBusy:
    waited = f"; waited {waited_s:.0f} s" if waited_s >= 1 else ""
    return LeaseBusy(
        f"device {device.name!r} is busy: {describe(info, device.workdir)}{waited}",
        hint="another host or FARM_HOME benches it: wait for that bench, or pass "
             "--lock-wait SECONDS to queue behind it")


class Waiter:
    """Polls with backoff until a deadline (shared by the probe loop and the agent's
    refusals); `on_wait` hears each new holder once."""

    def __init__(self, device: Device, deadline: float, stop: threading.Event | None,
                 on_wait: Callable[[str], None] | None) -> None:
        self.device = device
        self.deadline = deadline
        self.stop = stop
        self.on_wait = on_wait
        self.started = time.monotonic()
        self._delay = 0.5
        self._told: object = None

    def pause(self, info: dict[str, Any]) -> None:
        """Wait before the next try, or raise LeaseBusy when the time is up (or stopped)."""
        left = self.deadline - time.monotonic()
        if left <= 0:
            raise busy_error(self.device, info, time.monotonic() - self.started)
        who = (info.get("holder"), info.get("pid"))
        if self.on_wait is not None and who != self._told:
            self._told = who
            self.on_wait(describe(info, self.device.workdir))
        pause = min(self._delay, left)
        if self.stop is not None and self.stop.wait(pause):
            raise LeaseBusy(f"stopped while waiting for device {self.device.name!r}")
        if self.stop is None:
            time.sleep(pause)
        self._delay = min(self._delay * 2, MAX_DEVICE_POLL_S)


def wait_free(transport: Transport, device: Device, waiter: Waiter) -> None:
    """Return once no live agent holds the device (see module docstring)."""
    while True:
        info = probe(transport, device)
        if info is None:
            return
        waiter.pause(info)
