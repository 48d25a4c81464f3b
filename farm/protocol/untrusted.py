"""What a device sends is untrusted: the host's checks on runner events, beyond their types.

`farm.protocol.wire.decode` checks framing, kinds and field types, and refuses NaN,
Infinity and numbers that overflow to them (`wire.strict_number`). This module checks
what the values MEAN, per route run, so that a broken or hostile device fails alone, with a
message naming the event, and never makes the host write, read or keep more than a bound:

* numbers: times are finite, >= 0 and under `MAX_MS` (a day); counts are non-negative
  integers under `MAX_COUNT`; memory under `MAX_KB`;
* sizes: at most `MAX_SAMPLES` samples per route run, `MAX_EVENTS` events, `MAX_NODES`
  per-op nodes, `MAX_INFO_KEYS` info keys (the line cap bounds each event);
* paths: the outputs file a runner names must be inside the run's own output directory on
  the device (the directory of the requested `outputs`), with no `..`; the host then
  fetches it to a path IT chose, with a size cap (`outputs_cap`), so nothing the device
  names decides where the host writes;
* order: `loaded` at most once and before `first`/`warmup`/`samples`/`ops`/`outputs`/
  `memory`; nothing after `done` or `error`; an unknown event name (a newer runner) is
  ignored, but counts towards `MAX_EVENTS`.

Life cycle: one `EventGuard(request, device)` per run_route; `check(ev)` on every event in
order; it raises `ProtocolError` (an `AgentError`: the device is failed) on the first
violation. `check_state(data, device)` does the same for a `state` reply (the shape
`farm.results.stats.drift_flags` and the live view read: maps of numbers, not anything).
"""

from __future__ import annotations

import math
import posixpath
from typing import Any

from farm import followup
from farm.errors import ProtocolError

MAX_MS = 86_400_000.0  # one day in ms: no single inference or load takes longer
MAX_COUNT = 1_000_000_000
MAX_KB = 1 << 40       # 1 PiB of memory, in KiB
MAX_SAMPLES = 1_000_000
MAX_EVENTS = 200_000
MAX_NODES = 100_000
MAX_INFO_KEYS = 256

_NEEDS_LOADED = ("first", "warmup", "samples", "ops", "outputs", "memory")


def outputs_cap(reference_bytes: int) -> int:
    """Bytes the host accepts for a route's outputs file: the reference outputs' size with
    room for headers and another dtype (4x) plus 1 MiB; a device cannot fill the host."""
    return 4 * max(reference_bytes, 0) + (1 << 20)


class EventGuard:
    """Checks one route run's runner events (see module docstring)."""

    def __init__(self, request: dict[str, Any], device: str) -> None:
        self.device = device
        outputs = request.get("outputs")
        self.out_dir = posixpath.dirname(posixpath.normpath(outputs)) if isinstance(
            outputs, str) else None
        self.events = 0
        self.samples = 0
        self.seen: set[str] = set()
        self.ended = False

    def fail(self, name: str, what: str) -> ProtocolError:
        return ProtocolError(
            f"device {self.device!r}: runner event {name!r} refused: {what}",
            hint="the device sent something no farm runner sends; its results are not "
                 "trusted (redeploy it with "
                 f"`{followup.command('deploy', '--device', self.device)}`, check what "
                 "runs there)")

    def check(self, ev: dict[str, Any]) -> None:
        name = ev.get("ev")
        self.events += 1
        if self.events > MAX_EVENTS:
            raise self.fail(str(name), f"more than {MAX_EVENTS} events in one route run")
        if self.ended:
            raise self.fail(str(name), "sent after the run's done/error event")
        if name in _NEEDS_LOADED and "loaded" not in self.seen:
            raise self.fail(name, "sent before the 'loaded' event")
        if name in ("loaded", "done") and name in self.seen:
            raise self.fail(name, "sent twice in one route run")
        check = getattr(self, f"_{name}", None)
        if isinstance(name, str) and check is not None:
            check(ev)
        if isinstance(name, str):
            self.seen.add(name)
        if name in ("done", "error"):
            self.ended = True

    # -- per event -------------------------------------------------------------------
    def _ms(self, name: str, key: str, value: Any, *, optional: bool = False) -> None:
        if value is None and optional:
            return
        if isinstance(value, bool) or not isinstance(value, (int, float)) or \
                not math.isfinite(value) or not 0 <= value <= MAX_MS:
            raise self.fail(name, f"{key} = {value!r} is not a time in ms (0 to {MAX_MS:.0f})")

    def _count(self, name: str, key: str, value: Any, limit: int = MAX_COUNT,
               *, optional: bool = False) -> None:
        if value is None and optional:
            return
        if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= limit:
            raise self.fail(name, f"{key} = {value!r} is not a count (0 to {limit})")

    def _loaded(self, ev: dict[str, Any]) -> None:
        self._ms("loaded", "load_ms", ev.get("load_ms"))

    def _first(self, ev: dict[str, Any]) -> None:
        self._ms("first", "ms", ev.get("ms"))

    def _warmup(self, ev: dict[str, Any]) -> None:
        self._count("warmup", "runs", ev.get("runs"))
        self._ms("warmup", "ms_total", ev.get("ms_total"))

    def _samples(self, ev: dict[str, Any]) -> None:
        values = ev.get("ms")
        if not isinstance(values, list):
            raise self.fail("samples", "ms is not a list")
        self.samples += len(values)
        if self.samples > MAX_SAMPLES:
            raise self.fail("samples", f"{self.samples} samples in one route run, over the "
                                       f"{MAX_SAMPLES} a run may keep")
        for value in values:
            self._ms("samples", "a sample", value)

    def _ops(self, ev: dict[str, Any]) -> None:
        categories = ev.get("categories")
        if not isinstance(categories, dict) or len(categories) > MAX_INFO_KEYS:
            raise self.fail("ops", "categories must be an object of at most "
                                   f"{MAX_INFO_KEYS} entries")
        for key, value in categories.items():
            self._ms("ops", f"categories[{key[:40]!r}]", value, optional=True)
        self._ms("ops", "total_ms", ev.get("total_ms"), optional=True)
        nodes = ev.get("nodes")
        if nodes is None:
            return
        if not isinstance(nodes, list) or len(nodes) > MAX_NODES:
            raise self.fail("ops", f"nodes must be a list of at most {MAX_NODES}")
        for node in nodes:
            if not isinstance(node, dict):
                raise self.fail("ops", "a node is not an object")
            self._ms("ops", "a node's ms", node.get("ms"), optional=True)

    def _outputs(self, ev: dict[str, Any]) -> None:
        path = ev.get("file")
        if not isinstance(path, str) or "\0" in path or not path.startswith("/"):
            raise self.fail("outputs", f"file {str(path)[:200]!r} is not an absolute path")
        if ".." in path.split("/") or self.out_dir is None or \
                posixpath.dirname(posixpath.normpath(path)) != self.out_dir:
            raise self.fail("outputs", f"file {path[:200]!r} is outside the run's output "
                                       f"directory {self.out_dir}")

    def _memory(self, ev: dict[str, Any]) -> None:
        for key in ("vmhwm_kb", "pss_kb", "baseline_kb"):
            self._count("memory", key, ev.get(key), MAX_KB, optional=True)

    def _info(self, ev: dict[str, Any]) -> None:
        if len(ev) > MAX_INFO_KEYS:
            raise self.fail("info", f"{len(ev)} keys, over {MAX_INFO_KEYS}")
        if "runtime_bytes" in ev:
            self._count("info", "runtime_bytes", ev["runtime_bytes"], MAX_KB * 1024,
                        optional=True)


# state reply key -> what its value must be (absent or null is always fine)
_STATE_MAPS = {"governor": "text", "freq_khz": "number", "thermal_c": "temperature",
               "thermal_type": "text", "cpu_jiffies": "number"}
_STATE_NUMBERS = ("mem_total_kb", "mem_available_kb", "disk_free_kb", "uptime_s")


def check_state(data: dict[str, Any], device: str) -> dict[str, Any]:
    """The device's `state` reply if its shape is one the host can read; ProtocolError
    naming the key otherwise. Numbers must be finite and non-negative."""
    def bad(key: str, what: str) -> ProtocolError:
        return ProtocolError(f"device {device!r}: state reply refused: {key} {what}",
                             hint="the device sent a state no farm agent sends; its results "
                                  "are not trusted")

    def number(value: Any, low: float = 0.0, high: float = MAX_KB * 1024) -> bool:
        return (not isinstance(value, bool) and isinstance(value, (int, float))
                and math.isfinite(value) and low <= value <= high)

    checks = {"text": lambda v: isinstance(v, str) and len(v) <= 256, "number": number,
              # a sensor that failed to read may report far below zero: finite is the rule
              "temperature": lambda v: number(v, -1e6, 1e6)}

    if len(data) > MAX_INFO_KEYS:
        raise bad("reply", f"has {len(data)} keys")
    for key, kind in _STATE_MAPS.items():
        value = data.get(key)
        if value is None:
            continue
        if not isinstance(value, dict) or len(value) > 4096:
            raise bad(key, "must be an object of at most 4096 entries")
        for name, item in value.items():
            if not checks[kind](item):
                raise bad(f"{key}[{name[:40]!r}]", f"= {str(item)[:40]!r} is not {kind} "
                          "(bounded)")
    for key in _STATE_NUMBERS:
        if data.get(key) is not None and not number(data[key]):
            raise bad(key, f"= {str(data[key])[:40]!r} is not a non-negative number")
    load = data.get("load")
    if load is not None and (not isinstance(load, list) or len(load) > 3
                             or not all(number(x) for x in load)):
        raise bad("load", "must be up to 3 non-negative numbers")
    return data
