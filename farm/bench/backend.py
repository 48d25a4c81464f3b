"""The interface between the bench scheduler (`farm.bench.device_run`) and the ways a
device runs a route: the agent over a transport (`agent_backend`), TVM RPC through a
tracker (`rpc_backend`).

Life cycle, driven by the scheduler and only by it:

1. `unavailable(route_keys)` -> {key: reason}: keys this backend can never run (recorded
   `unavailable` without opening anything).
2. `open()`: take what the device needs for the whole bench (a lease, a registered
   tracker key); raises FarmError when the device cannot be had.
3. `plan(key)` -> RoutePlan, once per key still to run; BuildError = that key unavailable.
4. `start(plans)` -> {key: reason}: ship and start what the plans need (deploy + agent);
   keys the device then says it cannot run are returned with the reason.
5. `state()` before and after each repeat (None where a device has no state to read),
   `run_repeat(key, outcome, index, total, last=...)` appends one repeat to `outcome`;
   a failure of that route alone raises RouteError, a lost device FarmError.
6. `outputs(key, outcome)` after a key's last repeat: its output tensors, or
   OutputsUnavailable naming why they cannot be checked.
7. `abort()` from another thread on Ctrl-C: end a running repeat now; `close()` at the
   end, from the scheduler's thread: release everything `open`/`start` took.

`hello` is what the device said about itself (the agent's hello; None over TVM RPC), kept
in every record.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol

import numpy as np

from farm.bench.config import BenchConfig
from farm.bench.records import RouteOutcome
from farm.routes import RouteKey, RoutePlan

Emit = Callable[..., None]  # emit(event, **fields): one device's event stream


class Interrupted(Exception):
    """The bench was stopped (Ctrl-C); not a device failure."""


class RouteError(Exception):
    """One route failed on a device that is still fine; the message goes in its record."""


class OutputsUnavailable(Exception):
    """A route's outputs cannot be read back; the message makes its record invalid."""


class Backend(Protocol):
    """See module docstring."""

    hello: dict[str, Any] | None
    config: BenchConfig

    def unavailable(self, route_keys: list[RouteKey]) -> dict[RouteKey, str]: ...

    def open(self) -> None: ...

    def plan(self, route_key: RouteKey) -> RoutePlan: ...

    def start(self, plans: dict[RouteKey, RoutePlan]) -> dict[RouteKey, str]: ...

    def state(self) -> dict[str, Any] | None: ...

    def run_repeat(self, route_key: RouteKey, out: RouteOutcome, index: int, total: int, *,
                   last: bool) -> None: ...

    def outputs(self, route_key: RouteKey, out: RouteOutcome) -> dict[str, np.ndarray]: ...

    def abort(self) -> None: ...

    def close(self) -> None: ...


def last_line(exc: BaseException) -> str:
    """The line of an exception worth showing (TVM errors carry a whole traceback)."""
    text = str(exc).strip()
    return text.splitlines()[-1] if text else repr(exc)
