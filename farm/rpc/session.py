"""Client sessions through the tracker: request a device by key (queued when busy), upload a
TVM library, run it, and time it on the device with `time_evaluator`.

    with tracker_session("phone-a53", host="127.0.0.1", port=9190) as session:
        run = session.run_vm(Path("model.so"), [ids, mask], number=10, repeat=5)

The session is released when the block exits; the server then re-registers as free and the
next queued request gets it. `RemoteRun.queued_s` is how long the request waited.
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from farm.rpc.tracker import DEFAULT_PORT


@dataclass
class RemoteRun:
    key: str
    times_ms: list[float]              # one mean per repeat, measured on the device
    outputs: list[Any]                 # numpy arrays
    queued_s: float
    phases: dict[str, float] = field(default_factory=dict)  # upload_s, load_s


class Session:
    """One tracker session on a device; valid inside `tracker_session`'s block."""

    def __init__(self, key: str, remote: Any, queued_s: float) -> None:
        self.key, self.remote, self.queued_s = key, remote, queued_s

    def run_vm(self, lib: Path, inputs: Sequence[Any], *, number: int = 10, repeat: int = 3,
               min_repeat_ms: int = 0) -> RemoteRun:
        from farm.build.tvm import api

        times, outputs, phases = api.remote_vm_run(self.remote, Path(lib), list(inputs),
                                                   number=number, repeat=repeat,
                                                   min_repeat_ms=min_repeat_ms)
        return RemoteRun(self.key, times, outputs, self.queued_s, phases)


@contextmanager
def tracker_session(key: str, *, host: str = "127.0.0.1", port: int = DEFAULT_PORT,
                    priority: int = 1, session_timeout: float = 0) -> Iterator[Session]:
    from farm.build.tvm import api

    started = time.monotonic()
    remote = api.rpc_request(host, port, key, priority=priority,
                             session_timeout=session_timeout)
    session = Session(key, remote, time.monotonic() - started)
    try:
        yield session
    finally:
        # dropping the last reference closes the socket; the server then frees the slot
        session.remote = None
        del remote
