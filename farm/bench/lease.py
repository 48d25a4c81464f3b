"""Device leases: one bench at a time per device, and a crashed bench never blocks it forever.

A lease is the file `<state_dir>/locks/<device>.lease` holding JSON {holder, pid, host,
run_id, acquired_utc, expires} (expires: wall-clock epoch seconds). It is created with
O_EXCL; the holder renews `expires` every `ttl_s / 3` from a heartbeat thread. A lease is
stale, and may be taken over, when it has expired or when its holder process on this host
is gone. Take-over is a rename of our own fresh file over the stale one after re-reading
it, so two waiters cannot both win. A second bench waits up to `wait_s` and then fails
with a message naming the holder.

The agent adds a second, device-side lock (flock on `<workdir>/agent.lock`, released by the
kernel when the agent dies); this lease is what lets the host safely reap a leftover agent.

Life cycle: `DeviceLease(device, run_id).acquire(wait_s)` → work → `release()`; or
`with DeviceLease(...).hold(wait_s):`.

Nesting: a lease taken with `nestable=True` (the pytest plugin's device fixture holds one
for a whole test) lets leases of the SAME process on that device nest inside it: their
acquire/release do nothing, so the test's own benches run while every other process still
sees the device busy.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from farm.errors import FarmError
from farm.paths import state_dir

DEFAULT_TTL_S = 60.0
# lease files this process holds with nestable=True (see "Nesting" above)
_NESTABLE: set[Path] = set()
_NEST_LOCK = threading.Lock()


class LeaseBusy(FarmError):
    """Another bench holds the device (exit code 1 for that device)."""


def locks_dir() -> Path:
    path = state_dir() / "locks"
    path.mkdir(parents=True, exist_ok=True)
    return path


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


class DeviceLease:
    """A renewable, expiring lease on one device (see module docstring)."""

    def __init__(self, device: str, run_id: str, *, ttl_s: float = DEFAULT_TTL_S,
                 directory: Path | None = None, nestable: bool = False) -> None:
        self.device = device
        self.run_id = run_id
        self.ttl_s = ttl_s
        self.path = (directory or locks_dir()) / f"{device}.lease"
        self._stop = threading.Event()
        self._held = False
        self._thread: threading.Thread | None = None
        self.nestable = nestable
        self._nested = False

    def _content(self) -> dict[str, Any]:
        return {"holder": f"farm bench {self.run_id}", "pid": os.getpid(),
                "host": socket.gethostname(), "run_id": self.run_id,
                "acquired_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                "expires": time.time() + self.ttl_s}

    def read(self) -> dict[str, Any] | None:
        try:
            return json.loads(self.path.read_text())
        except FileNotFoundError:
            return None
        except (OSError, ValueError):
            return {}  # half-written or damaged: stale once old enough (see _stale)

    def _stale(self, info: dict[str, Any]) -> bool:
        if not info:
            try:
                return time.time() - self.path.stat().st_mtime > self.ttl_s
            except FileNotFoundError:
                return True
        if float(info.get("expires", 0)) < time.time():
            return True
        pid = info.get("pid")
        same_host = info.get("host") == socket.gethostname()
        return bool(same_host and isinstance(pid, int) and not _pid_alive(pid))

    def _try_take(self) -> bool:
        data = json.dumps(self._content()).encode()
        try:
            fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        except FileExistsError:
            info = self.read()
            if info is None or not self._stale(info):
                return False
            # take over: write our own file, re-check the stale one is still what we saw
            tmp = self.path.with_name(f".{self.path.name}.{os.getpid()}")
            tmp.write_bytes(data)
            if self.read() != info:
                tmp.unlink(missing_ok=True)
                return False
            os.replace(tmp, self.path)
            return self.read() == json.loads(data)
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
        return True

    def acquire(self, wait_s: float = 0.0, poll_s: float = 0.5) -> None:
        with _NEST_LOCK:
            if self.path in _NESTABLE:
                self._nested = True
                return
        deadline = time.monotonic() + wait_s
        while not self._try_take():
            if time.monotonic() >= deadline:
                info = self.read() or {}
                left = float(info.get("expires", 0)) - time.time()
                raise LeaseBusy(
                    f"device {self.device!r} is busy: held by {info.get('holder', '?')} "
                    f"(pid {info.get('pid', '?')} on {info.get('host', '?')}, since "
                    f"{info.get('acquired_utc', '?')}, lease expires in {max(left, 0):.0f} s)",
                    hint="wait for that bench, pass --lock-wait SECONDS to queue behind it, "
                         f"or remove {self.path} if you are sure it is dead")
            time.sleep(poll_s)
        self._held = True
        self._stop.clear()
        self._thread = threading.Thread(target=self._renew, name=f"lease-{self.device}",
                                        daemon=True)
        self._thread.start()
        if self.nestable:
            with _NEST_LOCK:
                _NESTABLE.add(self.path)

    def _renew(self) -> None:
        while not self._stop.wait(self.ttl_s / 3):
            info = self.read() or {}
            if info.get("pid") != os.getpid() or info.get("run_id") != self.run_id:
                return  # someone took it over (we were presumed dead): do not fight
            info["expires"] = time.time() + self.ttl_s
            tmp = self.path.with_name(f".{self.path.name}.{os.getpid()}")
            tmp.write_text(json.dumps(info))
            os.replace(tmp, self.path)

    def release(self) -> None:
        if self._nested:
            self._nested = False
            return
        if not self._held:
            return
        with _NEST_LOCK:
            _NESTABLE.discard(self.path)
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=2.0)
        info = self.read() or {}
        if info.get("pid") == os.getpid() and info.get("run_id") == self.run_id:
            with contextlib.suppress(FileNotFoundError):
                self.path.unlink()
        self._held = False

    @contextlib.contextmanager
    def hold(self, wait_s: float = 0.0) -> Iterator[DeviceLease]:
        self.acquire(wait_s)
        try:
            yield self
        finally:
            self.release()
