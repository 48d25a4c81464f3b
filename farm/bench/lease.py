"""Device leases: one bench at a time per device, and a crashed bench never blocks it forever.

A lease is the file `<state_dir>/locks/<device>.lease` holding JSON {holder, pid, host,
run_id, acquired_utc, expires} (expires: wall-clock epoch seconds). Every write is atomic:
the whole content goes to a file of our own first, which is then hard-linked into place to
take a free device (exclusive: the link fails when the lease exists) or renamed over it
to renew or take over. So a lease is never seen half written, and a full disk fails the
write of our own file (one line naming the file system, `LeaseWriteError`), never leaving
an empty lease behind. The holder renews `expires` every `ttl_s / 3` from a heartbeat
thread (a renewal the disk refuses is retried at the next beat). A lease is stale, and may
be taken over, when it has expired, when its holder process on this host is gone, or when
it is empty or unreadable (written by something else, or damaged: it names no holder to
wait for). Take-over is a rename of our own fresh file over the stale one after re-reading
it, so two waiters cannot both win. A second bench polls with backoff up to `wait_s`
(`on_wait` hears who holds it, once per holder) and then fails with a message naming the
holder.

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
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from farm.errors import FarmError
from farm.paths import host_write_failure, is_host_disk_error, state_dir
from farm.process import pid_alive

DEFAULT_TTL_S = 60.0
MAX_POLL_S = 2.0  # the backoff of a waiting bench stops growing here
# lease files this process holds with nestable=True (see "Nesting" above)
_NESTABLE: set[Path] = set()
_NEST_LOCK = threading.Lock()


class LeaseBusy(FarmError):
    """Another bench holds the device (exit code 1 for that device)."""


class LeaseWriteError(FarmError):
    """The host could not write a lease file (its disk is full, failing or read-only)."""


def describe_holder(info: dict[str, Any]) -> str:
    """Who holds a lease, for a waiting user."""
    left = float(info.get("expires", 0) or 0) - time.time()
    return (f"{info.get('holder', '?')} (pid {info.get('pid', '?')} on {info.get('host', '?')}, "
            f"since {info.get('acquired_utc', '?')}, lease expires in {max(left, 0):.0f} s)")


def locks_dir() -> Path:
    path = state_dir() / "locks"
    path.mkdir(parents=True, exist_ok=True)
    return path


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
            info = json.loads(self.path.read_text())
        except FileNotFoundError:
            return None
        except (OSError, ValueError):
            return {}  # empty or damaged (never half written by us): stale, see _stale
        return info if isinstance(info, dict) else {}

    def _stale(self, info: dict[str, Any]) -> bool:
        if not info:
            return True  # names no holder: nobody to wait for
        try:
            expires = float(info.get("expires", 0))
        except (TypeError, ValueError):
            return True
        if expires < time.time():
            return True
        pid = info.get("pid")
        same_host = info.get("host") == socket.gethostname()
        return bool(same_host and isinstance(pid, int) and not pid_alive(pid))

    def _write_own(self, data: bytes) -> Path:
        """The whole lease in a file of our own next to it (see module docstring)."""
        tmp = self.path.with_name(f".{self.path.name}.{os.getpid()}.{threading.get_ident()}")
        try:
            with open(tmp, "wb") as handle:
                handle.write(data)
        except OSError as exc:
            tmp.unlink(missing_ok=True)
            if is_host_disk_error(exc):
                raise LeaseWriteError(host_write_failure(
                    self.path, exc.errno, f"the lease of device {self.device!r}")) from exc
            raise
        return tmp

    def _link_free(self, tmp: Path, data: bytes) -> bool:
        """Take a free device: our file appears under the lease's name, whole, or not at
        all (False: someone holds it)."""
        try:
            os.link(tmp, self.path)
            return True
        except FileExistsError:
            return False
        except OSError as exc:  # a file system without hard links: exclusive create
            if is_host_disk_error(exc):
                raise LeaseWriteError(host_write_failure(
                    self.path, exc.errno, f"the lease of device {self.device!r}")) from exc
        try:
            fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        except FileExistsError:
            return False
        try:
            with os.fdopen(fd, "wb") as handle:
                handle.write(data)
        except OSError:
            self.path.unlink(missing_ok=True)  # never leave an empty lease behind
            raise
        return True

    def _try_take(self) -> bool:
        data = json.dumps(self._content()).encode()
        tmp = self._write_own(data)
        try:
            if self._link_free(tmp, data):
                return True
            info = self.read()
            if info is None or not self._stale(info):
                return False
            # take over: re-check the stale one is still what we saw, rename ours over it
            if self.read() != info:
                return False
            os.replace(tmp, self.path)
            return self.read() == json.loads(data)
        finally:
            tmp.unlink(missing_ok=True)

    def busy_error(self) -> LeaseBusy:
        return LeaseBusy(
            f"device {self.device!r} is busy: held by {describe_holder(self.read() or {})}",
            hint="wait for that bench, pass --lock-wait SECONDS to queue behind it, "
                 f"or remove {self.path} if you are sure it is dead")

    def acquire(self, wait_s: float = 0.0, poll_s: float = 0.25,
                stop: threading.Event | None = None,
                on_wait: Callable[[str], None] | None = None) -> None:
        """Take the lease, waiting up to `wait_s` (polls from `poll_s` apart, doubling up
        to MAX_POLL_S); LeaseBusy naming the holder when it stays held, or at once when
        `stop` is set; `on_wait(who holds it)` each time the holder changes."""
        with _NEST_LOCK:
            if self.path in _NESTABLE:
                self._nested = True
                return
        deadline = time.monotonic() + wait_s
        delay, told = poll_s, None
        while not self._try_take():
            left = deadline - time.monotonic()
            if left <= 0:
                raise self.busy_error()
            info = self.read() or {}
            who = (info.get("holder"), info.get("pid"), info.get("host"))
            if on_wait is not None and who != told:
                told = who
                on_wait(f"held by {describe_holder(info)}")
            if stop is not None and stop.wait(min(delay, left)):
                raise LeaseBusy(f"stopped while waiting for device {self.device!r}")
            if stop is None:
                time.sleep(min(delay, left))
            delay = min(delay * 2, MAX_POLL_S)
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
            try:
                tmp = self._write_own(json.dumps(info).encode())
            except (LeaseWriteError, OSError):
                continue  # a full disk: the lease holds until it expires; retried next beat
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
