"""TVM's RPC through its Python API (split from `api.py`, whose lazy-import rule it keeps):
tracker queries, sessions, loading a VM library on the device, outputs and on-device
timing, each kernel timed alone. Errors surface as `TransportError` with the TVM message.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from farm.errors import TransportError
from farm.routes.tvm.api import _tvm


def _check_tracker_listens(host: str, port: int) -> None:
    """Fail within seconds on a dead tracker: tvm.rpc.connect_tracker retries one for 60 s."""
    import socket
    try:
        socket.create_connection((host, port), timeout=3).close()
    except OSError as exc:
        raise TransportError(f"TVM RPC tracker {host}:{port} is not reachable: {exc}",
                             hint="farm tracker start / farm tracker status") from exc


def tracker_summary(host: str, port: int) -> dict[str, Any]:
    """The tracker's {"server_info": [...], "queue_info": {...}}."""
    _check_tracker_listens(host, port)
    _tvm()
    from tvm import rpc
    try:
        tracker = rpc.connect_tracker(host, port)
        try:
            return dict(tracker.summary())
        finally:
            tracker.close()
    except Exception as exc:
        raise TransportError(f"TVM RPC tracker {host}:{port} did not answer: {exc}",
                             hint="farm tracker start / farm tracker status") from exc


def rpc_request(host: str, port: int, key: str, *, priority: int = 1,
                session_timeout: float = 0) -> Any:
    """A session on a server registered under `key`; blocks while every such server is busy
    (the tracker queues requests by priority, so sessions never collide)."""
    _check_tracker_listens(host, port)
    _tvm()
    from tvm import rpc
    try:
        return rpc.connect_tracker(host, port).request(
            key, priority=priority, session_timeout=session_timeout)
    except Exception as exc:
        raise TransportError(f"no TVM RPC session for key {key!r} from {host}:{port}: {exc}",
                             hint="is an RPC server registered? farm tracker status") from exc


@dataclass
class RemoteVM:
    """A model library loaded into a Relax VM in one RPC session, its inputs on the device.
    Valid while the session lives; `remote_vm_outputs` and `remote_vm_time` may be called
    any number of times (the library is uploaded and loaded once)."""

    vm: Any
    dev: Any
    args: list[Any]
    phases: dict[str, float] = field(default_factory=dict)  # upload_s, load_s
    remote: Any = None                  # the session, for functions on the device


def _upload(remote: Any, lib_path: Path) -> str:
    import uuid

    # a fresh remote name per upload: re-uploading over a library the session process has
    # loaded crashes it (seen: kShutdown on the second run in one session)
    remote_name = f"{uuid.uuid4().hex[:12]}-{lib_path.name}"
    remote.upload(str(lib_path), target=remote_name)
    return remote_name


def remote_vm_load(remote: Any, lib_path: Path, inputs: list[Any]) -> RemoteVM:
    """Upload `lib_path`, load it into a VM on the session's CPU and copy `inputs` there."""
    import time

    tvm = _tvm()
    from tvm import relax
    phases: dict[str, float] = {}
    started = time.monotonic()
    remote_name = _upload(remote, lib_path)
    phases["upload_s"] = time.monotonic() - started
    started = time.monotonic()
    dev = remote.cpu()
    vm = relax.VirtualMachine(remote.load_module(remote_name), dev)
    args = [tvm.runtime.tensor(a, dev) for a in inputs]
    phases["load_s"] = time.monotonic() - started
    return RemoteVM(vm, dev, args, phases, remote)


def remote_vm_outputs(loaded: RemoteVM) -> list[Any]:
    """Run `main` once on the device; its outputs as numpy arrays."""
    tvm = _tvm()
    result = loaded.vm["main"](*loaded.args)
    if isinstance(result, tvm.runtime.Tensor):
        return [result.numpy()]
    try:
        items = list(result)
    except TypeError:
        # several outputs come back as a tuple that stays on the device (an RPC object
        # reference, not iterable here): read its items with the device's own functions
        size = loaded.remote.get_function("ffi.ArraySize")
        item = loaded.remote.get_function("ffi.ArrayGetItem")
        items = [item(result, i) for i in range(int(size(result)))]
    return [x.numpy() for x in items]


def remote_vm_time(loaded: RemoteVM, *, number: int, repeat: int,
                   min_repeat_ms: int = 0) -> list[float]:
    """`main` timed ON the device by `time_evaluator`: ms per repeat (mean of `number`)."""
    timer = loaded.vm.time_evaluator("main", loaded.dev, number=number, repeat=repeat,
                                     min_repeat_ms=min_repeat_ms)
    return [t * 1000.0 for t in timer(*loaded.args).results]


def remote_kernel_times(remote: Any, kernels_lib: Path, kernels: dict[str, dict[str, Any]],
                        *, repeat: int, min_repeat_ms: int) -> dict[str, list[float]]:
    """Time each kernel of `kernels_lib` (`export_kernel_library`) alone ON the device:
    kernel -> ms per call, one mean per repeat. `kernels` gives each kernel's sidecar entry:
    `args` ([shape, dtype] per parameter) and `constants` ({position: [mean, std]} of the
    weights its call passes). Each parameter gets a fresh device tensor: a weight drawn with
    its real mean and std, any other float N(0, 1) (activations are unit-scale after a
    LayerNorm), integers 0 (always a valid index: a gather with an out-of-range one may
    crash the device). Data matters to transcendental kernels (erf, exp): farm's tiny
    encoder's fused FFN kernel took 0.03 ms on zeros and 0.13 ms on U(-1, 1).

    Over RPC this is the only per-kernel timer TVM 0.27 offers: the Relax VM profiler is
    gone, and `set_instrument` needs a function, which RPC cannot pass to the remote.
    """
    import numpy as np

    tvm = _tvm()
    module = remote.load_module(_upload(remote, kernels_lib))
    dev = remote.cpu()
    rng = np.random.default_rng(0)
    times: dict[str, list[float]] = {}
    for name, info in kernels.items():
        weights = info.get("constants") or {}
        arrays = []
        for i, (shape, dtype) in enumerate(info["args"]):
            if np.dtype(dtype).kind != "f":
                arrays.append(np.zeros(shape, dtype))
                continue
            mean, std = weights.get(str(i), (0.0, 1.0))
            arrays.append(rng.normal(mean, std, shape).astype(dtype))
        args = [tvm.runtime.tensor(a, dev) for a in arrays]
        timer = module.time_evaluator(name, dev, number=1, repeat=repeat,
                                      min_repeat_ms=min_repeat_ms)
        times[name] = [t * 1000.0 for t in timer(*args).results]
    return times
