"""Deploy: push the agent, runners and built artifacts to devices (content-addressed).

What a device receives is chosen by `farm.deploy.selection.ship_list` (the CLI and the
bench both go through it); `deploy_device` moves it (resumable, verified).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence

from farm.artifacts import Artifact
from farm.deploy.deployer import DeployResult, Progress, deploy_device
from farm.deploy.selection import bundle_for
from farm.inventory.device import Device
from farm.transports import Transport, open_transport

Bundle = Callable[[Device], list[Artifact]]
Then = Callable[[Device, Transport, DeployResult], None]
MAX_PARALLEL = 16  # devices uploading at once (as `farm.devices.fanout`)


def deploy(devices: Sequence[Device], progress: Progress | None = None, *,
           bundle: Bundle | None = None, stop: threading.Event | None = None,
           dry_run: bool = False, then: Then | None = None) -> dict[str, DeployResult]:
    """Deploy `bundle(device)` (default: every build, `bundle_for`) to each device in
    parallel; one device's failure never stops the others. `then(device, transport,
    result)` runs next in the same thread on the same connection (e.g. `--prune`).

    Ctrl-C (KeyboardInterrupt in the calling thread) sets `stop`: every device ends its
    current write, verifies and keeps the files that arrived whole, and the results come
    back with `interrupted` set (the caller checks `stop.is_set()`), so the same command
    resumes later."""
    stop = stop or threading.Event()
    choose = bundle or bundle_for
    results: dict[str, DeployResult] = {}
    slots = threading.Semaphore(MAX_PARALLEL)
    left = [len(devices)]
    lock = threading.Lock()
    all_done = threading.Event()

    def work(device: Device) -> None:
        try:
            with slots, open_transport(device) as link:
                results[device.name] = deploy_device(device, choose(device), progress,
                                                     transport=link, stop=stop,
                                                     dry_run=dry_run)
                if then is not None:
                    then(device, link, results[device.name])
        except Exception as exc:  # a bug or a bad bundle fails this device, not the others
            results[device.name] = DeployResult(device.name, error=f"{type(exc).__name__}: "
                                                                   f"{exc}")
        finally:
            with lock:
                left[0] -= 1
                if not left[0]:
                    all_done.set()

    if not devices:
        return {}
    for d in devices:
        threading.Thread(target=work, args=(d,), name=f"deploy-{d.name}", daemon=True).start()
    # an Event, not Thread.join: a join interrupted by Ctrl-C can later return while the
    # thread still runs (CPython 3.11), and the devices' results would be lost
    try:
        while not all_done.wait(0.2):
            pass
    except KeyboardInterrupt:
        stop.set()
        while not all_done.wait(0.2):
            pass
    return {d.name: results.get(d.name) or DeployResult(d.name, error="no result")
            for d in devices}


__all__ = ["Bundle", "DeployResult", "deploy", "deploy_device"]
