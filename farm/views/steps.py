"""Short human lines from the bench's events, for a log (stdout/stderr not a terminal).

Contract: `StepLines().lines(event) -> list[str]` is a reducer over the bench's event dicts
(see `farm.bench.runner`): zero or more lines per event, no I/O. What makes a line — the
things a CI log reader looks for, the way pytest or cargo report steps:

* the run (id, model, routes, devices);
* the start of a long step (`prepare` = model build on the host, a device's `build` and
  `deploy`) and its end with the duration, taken from the events' own timestamps `t`
  ("failed after N s" when the device failed inside the step); a route whose build took a
  second or more, with its duration (what the build step spent its time on);
* a route started, and finished with its status, median, p90 and n; without `--routes`,
  a route the device cannot run is "skipped" with the reason;
* warnings: a route's drift flags (frequency/temperature moved), a noisy route (its round
  medians spread, or CPU steal, past `farm.results.noise`'s bounds), a route or device
  that is not ok with its detail;
* one line naming a step's library output (TVM, onnxscript, numpy) and its log
  (`farm.libout`), when the step had any;
* a device finished.

Per-sample events (`samples`, `stage`, `state`) make no line: they are what the live view
draws and what `--events FILE` keeps.

`timed_step(console, what)` does the same for the long steps of `farm build`, `deploy` and
`tune`: their progress bars draw on a terminal; in a log, a start line and a finish line
with the duration.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from rich.console import Console

# steps that can take long enough that a log reader wants their start and duration
LONG_PHASES = {"prepare": "model build", "build": "build", "deploy": "deploy"}
# a route's own build gets a line when it took this long (a cached one takes ~0.1 s)
BUILD_LINE_S = 1.0


def _ms(value: Any) -> str:
    return "–" if not isinstance(value, (int, float)) else f"{value:.3g} ms"


@dataclass
class StepLines:
    """See module docstring; keeps each open long step's start time."""

    open_steps: dict[str | None, tuple[str, float]] = field(default_factory=dict)

    def _close(self, who: str | None, t: float | None, outcome: str = "done") -> list[str]:
        """The end line of `who`'s open long step: "done in N s", or "failed after N s"
        when the device failed inside it (a deploy that could not connect is not done)."""
        step = self.open_steps.pop(who, None)
        if step is None or t is None:
            return []
        name, started = step
        prefix = f"{who}: " if who else "farm: "
        took = max(0.0, t - started)
        verb = "done in" if outcome == "done" else f"{outcome} after"
        return [f"{prefix}{LONG_PHASES[name]} {verb} {took:.1f} s"]

    def lines(self, event: dict[str, Any]) -> list[str]:
        kind, who, t = event.get("event"), event.get("device"), event.get("t")
        prefix = f"{who}: " if who else "farm: "
        out: list[str] = []
        if kind in ("phase", "run", "route_start"):
            out += self._close(who, t)  # whatever comes next ends the open long step
        elif kind == "route_done" and event.get("status") == "failed":
            # a route failing with no route started since the step began: the device
            # failed inside the step (its routes are stored "not run")
            out += self._close(who, t, "failed")
        elif kind == "device_done":
            status = event.get("status")
            out += self._close(who, t, "done" if status in ("ok", "partial") else
                               "stopped" if status == "interrupted" else "failed")
        if kind == "phase" and event.get("phase") in LONG_PHASES:
            name = event["phase"]
            what = LONG_PHASES[name]
            if name == "prepare" and event.get("model"):
                what += f" of {event['model']} ({event.get('variant') or '?'})"
            out.append(f"{prefix}{what}…")
            if t is not None:
                self.open_steps[who] = (name, float(t))
        elif kind == "run":
            default = " (the default: every route; --routes to choose)" \
                if event.get("routes_default") else ""
            out.append(f"farm: run {event.get('run_id')}: model {event.get('model')}, "
                       f"routes {','.join(event.get('routes') or [])}{default} on "
                       f"{', '.join(event.get('devices') or [])}")
        elif kind == "build" and event.get("state") == "done" \
                and float(event.get("seconds") or 0) >= BUILD_LINE_S:
            out.append(f"{prefix}built {event.get('route')} in {event['seconds']:.1f} s")
        elif kind == "library_output" and event.get("summary"):
            out.append(f"{prefix}{event['summary']}")
        elif kind == "route_start":
            out.append(f"{prefix}{event.get('route')} ({int(event.get('index') or 0) + 1}/"
                       f"{event.get('total') or '?'}) started")
        elif kind == "route_done":
            out += self._route_done(prefix, event)
        elif kind == "device_done":
            status, detail = event.get("status"), event.get("detail") or ""
            tail = f": {detail}" if detail and status != "ok" else ""
            out.append(f"{prefix}finished: {status}{tail}")
        return out

    @staticmethod
    def _route_done(prefix: str, event: dict[str, Any]) -> list[str]:
        route, status = event.get("route"), event.get("status")
        if event.get("skipped"):  # not named by --routes: this device cannot run it
            return [f"{prefix}skipped {route}: {event.get('detail') or status}"]
        line = f"{prefix}{route} {status}"
        if isinstance(event.get("median_ms"), (int, float)):
            line += f": median {_ms(event['median_ms'])}, p90 {_ms(event.get('p90_ms'))}"
            if event.get("n") is not None:
                line += f", n {event['n']}"
            if event.get("rounds"):
                line += f", {event['rounds']} rounds"
        if status != "ok" and event.get("detail"):
            line += f" — {event['detail']}"
        out = [line]
        out += [f"{prefix}warning: {route}: drift {flag}" for flag in event.get("drift") or []]
        out += [f"{prefix}warning: {route}: noisy: {w}" for w in event.get("noise") or []]
        return out


@contextlib.contextmanager
def timed_step(console: Console, what: str) -> Iterator[None]:
    """Off a terminal (where the caller's progress bar is disabled): "what…" now and
    "what done in N s" (or "what failed after N s") at the end. On a terminal: nothing,
    the progress bar shows it."""
    if console.is_terminal:
        yield
        return
    console.print(f"{what}…", markup=False, highlight=False, soft_wrap=True)
    started = time.monotonic()
    try:
        yield
    except BaseException:
        console.print(f"{what} failed after {time.monotonic() - started:.1f} s", markup=False,
                      highlight=False, soft_wrap=True)
        raise
    console.print(f"{what} done in {time.monotonic() - started:.1f} s", markup=False,
                  highlight=False, soft_wrap=True)
