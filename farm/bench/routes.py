"""Host-side preparation of one route for one device: build what it needs, name the files.

`plan_route(route, device, prepared) -> RoutePlan`: the artifacts to deploy for the route
(beyond the agent, runners, model and inputs that every bench deploys), the file the
runner request names as `"model"`, route options, and build facts for the record.

* ort – nothing to build: the ONNX model itself, CPU execution provider, all graph
  optimisations.
* tvm – `farm.build.tvm.build_tvm` compiles the model for the device's target (cached by
  content), deployed as `artifacts/<sha12>-tvm-<key12>.so` plus its sidecar `<lib>.json`;
  the runtime-only runner (`build_runner(arch)`) goes to `runners/tvm-<arch>/`.
* custom – the executor and its plan are deployed by the custom route's own build; the
  request names the ONNX model and the agent reports whether an executor is present.

A build that cannot be made (e.g. an operator TVM's frontend lacks) raises BuildError; the
bench records the route `unavailable` with that message. Builds are serialised: two devices
of the same target would otherwise compile the same cache entry at once.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from farm.bench.prepare import Prepared
from farm.build.registry import Artifact, make_artifact
from farm.inventory.device import Device

_BUILD_LOCK = threading.Lock()
ORT_OPTIONS = {"provider": "CPUExecutionProvider", "opt_level": "all"}


@dataclass(frozen=True)
class RoutePlan:
    route: str
    model_remote: str                      # relative to the device work dir
    artifacts: tuple[Artifact, ...] = ()
    options: dict[str, Any] = field(default_factory=dict)
    build_flags: dict[str, Any] = field(default_factory=dict)


def plan_route(route: str, device: Device, prepared: Prepared) -> RoutePlan:
    if route == "tvm":
        with _BUILD_LOCK:
            return _plan_tvm(device, prepared)
    if route == "ort":
        return RoutePlan("ort", prepared.model_artifact.remote, options=dict(ORT_OPTIONS))
    return RoutePlan(route, prepared.model_artifact.remote)


def _plan_tvm(device: Device, prepared: Prepared) -> RoutePlan:
    from farm.build.tvm.builder import build_tvm
    from farm.build.tvm.runner_build import build_runner

    art = build_tvm(prepared.model.path, device)
    lib = make_artifact("tvm-lib", art.path, "artifacts", target=device.arch,
                        name=f"tvm-{art.key[:12]}.so")
    items = [lib]
    if art.meta_path is not None:
        items.append(make_artifact("tvm-meta", art.meta_path, "artifacts", target=device.arch,
                                   name=Path(lib.remote).name + ".json", content_name=False))
    bundle = build_runner(device.arch)
    items += [make_artifact("runner", f, f"runners/tvm-{device.arch}", target=device.arch,
                            content_name=False) for f in (bundle.binary, *bundle.libs)]
    counts: dict[str, int] = {}
    for source in art.schedule_sources.values():
        counts[source] = counts.get(source, 0) + 1
    return RoutePlan("tvm", lib.remote, tuple(items),
                     build_flags={"tvm_key": art.key[:12], "target": art.target,
                                  "schedule_counts": counts, "build_s": art.build_s})
