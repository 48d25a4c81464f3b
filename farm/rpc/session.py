"""Client sessions through the tracker: request a device by key (queued when busy), upload a
TVM library, run it, and time it on the device with `time_evaluator`.

    with tracker_session("phone-a53", host="127.0.0.1", port=9190) as session:
        run = session.run_vm(Path("model.so"), [ids, mask], number=10, repeat=5)
        # or, several runs of one upload:
        vm = session.load_vm(Path("model.so"), [ids, mask]); vm.outputs(); vm.time(...)

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
        """Load `lib`, run it once for its outputs, then time it: all in one call."""
        loaded = self.load_vm(lib, inputs)
        outputs = loaded.outputs()
        times = loaded.time(number=number, repeat=repeat, min_repeat_ms=min_repeat_ms)
        return RemoteRun(self.key, times, outputs, self.queued_s, loaded.phases)

    def load_vm(self, lib: Path, inputs: Sequence[Any]) -> LoadedVM:
        """Upload and load `lib` once; run and time it as often as wanted in this session."""
        from farm.routes.tvm import api_rpc

        return LoadedVM(api_rpc.remote_vm_load(self.remote, Path(lib), list(inputs)))

    def time_kernels(self, kernels_lib: Path, kernels: dict[str, dict[str, Any]], *,
                     repeat: int, min_repeat_ms: int = 5) -> dict[str, list[float]]:
        """Each kernel of a kernels-only library timed alone on the device: kernel -> ms per
        call, one mean per repeat; `kernels` are sidecar entries with `args` (and
        `constants`), see `farm.routes.tvm.api_rpc.remote_kernel_times`."""
        from farm.routes.tvm import api_rpc

        return api_rpc.remote_kernel_times(self.remote, Path(kernels_lib), kernels,
                                       repeat=repeat, min_repeat_ms=min_repeat_ms)


class LoadedVM:
    """A model loaded in a session's VM, inputs on the device; valid inside the session."""

    def __init__(self, loaded: Any) -> None:
        self._loaded = loaded
        self.phases: dict[str, float] = loaded.phases  # upload_s, load_s (host clock)

    def outputs(self) -> list[Any]:
        """Run `main` once; its outputs as numpy arrays."""
        from farm.routes.tvm import api_rpc

        return api_rpc.remote_vm_outputs(self._loaded)

    def time(self, *, number: int, repeat: int, min_repeat_ms: int = 0) -> list[float]:
        """`main` timed ON the device (`time_evaluator`): ms per repeat, mean of `number`."""
        from farm.routes.tvm import api_rpc

        return api_rpc.remote_vm_time(self._loaded, number=number, repeat=repeat,
                                  min_repeat_ms=min_repeat_ms)


@contextmanager
def tracker_session(key: str, *, host: str = "127.0.0.1", port: int = DEFAULT_PORT,
                    priority: int = 1, session_timeout: float = 0) -> Iterator[Session]:
    from farm.routes.tvm import api_rpc

    started = time.monotonic()
    remote = api_rpc.rpc_request(host, port, key, priority=priority,
                             session_timeout=session_timeout)
    session = Session(key, remote, time.monotonic() - started)
    try:
        yield session
    finally:
        # dropping the last reference closes the socket; the server then frees the slot
        session.remote = None
        del remote
