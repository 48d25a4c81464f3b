"""Host-side preparation of a bench: the model file, its input tensors, the fp32 reference
outputs every route is checked against, and what each device must receive.

`prepare(config)` builds (or finds in the cache) the model and the fp32 model, writes the
inputs as FTNS, and runs the fp32 model once with ONNX Runtime on the host: those
outputs are the reference (a pre-quantised file: ORT's run of the same file; an int8 one:
its exact integer outputs, `farm.bench.int8_reference`, which also says why).
`device_bundle(device, prepared, plans)` is the deploy list:
exactly what the planned routes run (`farm.deploy.selection.ship_list`), the inputs under
`inputs/<sha12>.ftns`, and the model under `models/<sha12>-<name>.onnx` only for ORT.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from farm.artifacts import Artifact, make_artifact
from farm.bench.config import BenchConfig
from farm.bench.int8_reference import INT8_VARIANTS, int8_reference
from farm.bench.model_front import effective_variant, front_for, reference_plan
from farm.deploy.selection import ship_list
from farm.errors import BuildError
from farm.inventory.device import Device
from farm.models import (
    PRESETS,
    ModelInfo,
    build_model,
    ftns_module,
    resolve_model,
    write_inputs,
)
from farm.paths import state_dir


@dataclass
class Prepared:
    config: BenchConfig
    model: ModelInfo
    model_artifact: Artifact
    inputs_artifact: Artifact
    reference: dict[str, np.ndarray]
    reference_label: str
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def model_label(self) -> str:
        return self.model.name


def reference_outputs(model_path: Path, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """fp32 outputs of the model by ONNX Runtime on the host (CPU provider)."""
    import onnxruntime as ort

    try:
        options = ort.SessionOptions()
        options.intra_op_num_threads = 1
        session = ort.InferenceSession(str(model_path), options,
                                       providers=["CPUExecutionProvider"])
        names = [o.name for o in session.get_outputs()]
        values = session.run(names, feeds)
    except Exception as exc:  # onnxruntime raises its own untyped errors
        raise BuildError(f"computing the fp32 reference of {model_path} on the host failed: "
                         f"{exc}", hint="check the model with `farm models check`") from exc
    return {n: np.asarray(v) for n, v in zip(names, values, strict=True)}


def _resolve(config: BenchConfig, variant: str, out: Path) -> ModelInfo:
    """A preset at `--seq` is its own build (the presets are fixed-shape encoders)."""
    if config.seq is not None and config.model in PRESETS:
        cfg = dataclasses.replace(PRESETS[config.model], seq=config.seq)
        return build_model(cfg, variant, out, name=f"{config.model}-s{config.seq}")
    return resolve_model(config.model, variant, out)


def prepare(config: BenchConfig, cache_dir: Path | None = None) -> Prepared:
    out = cache_dir or state_dir() / "models"
    model = _resolve(config, config.variant, out)
    fp32 = model if config.variant == "fp32" else _resolve(config, "fp32", out)
    canonical = front_for(config, model)
    ref_path, ref_label, ref_kind = reference_plan(config, model.path, fp32.path, canonical)
    config = dataclasses.replace(config, variant=effective_variant(config, canonical))
    shapes = canonical.input_shapes if canonical is not None else None
    inputs_path = write_inputs(model, config.inputs_seed, state_dir() / "inputs", shapes=shapes)
    feeds = ftns_module().read(str(inputs_path))
    reference = reference_outputs(ref_path, dict(feeds))
    extra: dict[str, Any] = {"canonical": canonical, "reference_kind": ref_kind}
    if config.variant in INT8_VARIANTS:  # the file's exact integer outputs (int8_reference)
        same = ref_kind == "same-file"
        ort_int8 = reference if same else reference_outputs(model.path, dict(feeds))
        extra["int8"] = int8 = int8_reference(model.path, feeds, ort_int8, config.variant,
                                              same)
        if int8.judges and int8.exact is not None:
            reference, ref_label = int8.exact, int8.label
    model_art = make_artifact("model", model.path, "models")
    inputs_art = make_artifact("inputs", inputs_path, "inputs", content_name=False)
    return Prepared(config, model, model_art, inputs_art, reference, ref_label, extra=extra)


def device_bundle(device: Device, prepared: Prepared,
                  plans: Iterable[Any] = ()) -> list[Artifact]:
    """What this bench ships to `device`: the agent, the runners of the planned routes
    (`farm.routes.RoutePlan`s), their builds and the inputs; the ONNX model only when
    a route runs it (ORT). The selection itself is `farm.deploy.selection.ship_list`."""
    plans = list(plans)
    routes = [plan.route for plan in plans]
    builds = [a for plan in plans for a in plan.artifacts]
    if any(plan.model_remote == prepared.model_artifact.remote for plan in plans):
        builds.append(prepared.model_artifact)
    return ship_list(device, routes, builds, [prepared.inputs_artifact])


def agent_artifact(bundle: list[Artifact]) -> Artifact:
    for artifact in bundle:
        if artifact.kind == "agent":
            return artifact
    raise BuildError("the deploy bundle has no agent (agents/farm_agent.py missing?)")
