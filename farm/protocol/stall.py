"""Telling a stopped host from a silent device.

A session declares its agent lost after `dead_after_s` without a line from it. When the
*host* was what stopped (SIGSTOP, a suspended laptop, a starved CPU), the clock runs on
while nothing of the host runs: on resume the silence looks like a dead link, and the
agent, which heard no ping, has ended the session by its idle timeout. The session's
threads call `tick()` each time they wake; they never wait longer than `max_wait_s`, so a
wake-up much later than that means the process was stopped. `resumed_at` is when the last
such stall ended (silence is counted from there), `words(now, window_s)` says it for an
error message while it is recent enough to explain one.

Life cycle: one `HostStalls` per session, ticked from any thread (a stale read of the two
floats only shifts the judgement by one tick).
"""

from __future__ import annotations

import time


class HostStalls:
    """See the module docstring."""

    def __init__(self, max_wait_s: float) -> None:
        # a wake-up this much later than asked is a stall, not scheduling noise under load
        self.threshold_s = max(5.0, 2 * max_wait_s)
        self._last = time.monotonic()
        self.resumed_at = 0.0
        self.length_s = 0.0

    def tick(self) -> float:
        now = time.monotonic()
        gap = now - self._last
        if gap > self.threshold_s:
            self.resumed_at, self.length_s = now, gap
        self._last = now
        return now

    def words(self, now: float, window_s: float) -> str:
        """"after this host was paused for N s (…)" when a stall ended within `window_s`."""
        if self.length_s and now - self.resumed_at <= window_s:
            return (f"after this host was paused for {self.length_s:.0f} s (stopped, "
                    "suspended or starved of CPU)")
        return ""
