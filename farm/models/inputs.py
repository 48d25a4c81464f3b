"""Deterministic input tensors for a model, and their FTNS file.

`make_inputs(model, seed) -> dict[name, ndarray]` where `model` is a ModelInfo or a path.
Rules per graph input (symbolic dims: the first is batch = 1, the others the sequence length
from the model's farm config, else 128):
- an int input whose name contains ``mask``: ones, with the last seq//8 positions 0
  (padding, so the additive-mask path is exercised by every route);
- ``token_type_ids``/``position_ids``-like int inputs: zeros / arange;
- other int inputs: token ids uniform in [0, vocab), vocab read from the embedding Gather
  that consumes the input (else 100);
- float inputs: standard normal.
`write_inputs(model, seed, out_dir) -> Path` writes them as FTNS to `<sha12>.ftns` (content
address of the file bytes, the name the device work dir uses).
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import threading
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING

import numpy as np
import onnx

from farm.errors import BuildError
from farm.models.check import FTNS_TYPES, graph_inputs
from farm.paths import agents_dir

CALIBRATION_SEEDS = range(1000, 1008)  # fixed feeds for int8-qdq calibration

if TYPE_CHECKING:
    from farm.models.info import ModelInfo

DEFAULT_SEQ = 128


def ftns_module() -> ModuleType:
    """agents/ftns.py, the one FTNS implementation (it also runs on devices, so not in farm/)."""
    spec = importlib.util.spec_from_file_location("farm_agents_ftns", agents_dir() / "ftns.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _seq_from_model(model: onnx.ModelProto) -> int:
    for prop in model.metadata_props:
        if prop.key == "farm.config":
            return int(json.loads(prop.value)["seq"])
    return DEFAULT_SEQ


def _vocab_for(model: onnx.ModelProto, name: str) -> int:
    inits = {i.name: i for i in model.graph.initializer}
    for node in model.graph.node:
        if node.op_type == "Gather" and len(node.input) > 1 and node.input[1] == name:
            table = inits.get(node.input[0])
            if table is not None and table.dims:
                return int(table.dims[0])
    return 100


def _shape(vi: onnx.ValueInfoProto, seq: int) -> tuple[int, ...]:
    dims = []
    for i, d in enumerate(vi.type.tensor_type.shape.dim):
        dims.append(d.dim_value if d.HasField("dim_value") else (1 if i == 0 else seq))
    return tuple(dims)


def _load_graph(model: ModelInfo | str | Path) -> onnx.ModelProto:
    path = Path(getattr(model, "path", model))
    return onnx.load(str(path), load_external_data=False)


# one input tensor larger than this is a broken shape, not a benchmark input
MAX_INPUT_BYTES = 1 << 30


def make_inputs(model: ModelInfo | str | Path, seed: int = 0,
                shapes: dict[str, list[int]] | None = None) -> dict[str, np.ndarray]:
    """`shapes`: dims per input name bound by the front-end (override the rule above)."""
    proto = _load_graph(model)
    seq = _seq_from_model(proto)
    rng = np.random.default_rng(seed)
    feeds: dict[str, np.ndarray] = {}
    for vi in graph_inputs(proto):
        dtype = np.dtype(FTNS_TYPES.get(vi.type.tensor_type.elem_type, "float32"))
        shape = tuple(shapes[vi.name]) if shapes and vi.name in shapes else _shape(vi, seq)
        nbytes = int(np.prod(shape, dtype=np.float64)) * dtype.itemsize
        if nbytes > MAX_INPUT_BYTES:
            raise BuildError(
                f"model input {vi.name!r} of shape {list(shape)} needs {nbytes / 2**20:.0f} MiB,"
                f" over the {MAX_INPUT_BYTES // 2**20} MiB budget for one input",
                hint="fix the input's static shape in the model (a batch or sequence "
                     "dimension this large is a mistake)")
        lname = vi.name.lower()
        if dtype.kind == "f":
            feeds[vi.name] = rng.standard_normal(shape).astype(dtype)
        elif "mask" in lname:
            mask = np.ones(shape, dtype)
            if shape and shape[-1] >= 2:
                mask[..., shape[-1] - max(1, shape[-1] // 8):] = 0
            feeds[vi.name] = mask
        elif "token_type" in lname or "segment" in lname:
            feeds[vi.name] = np.zeros(shape, dtype)
        elif "position" in lname and shape:
            feeds[vi.name] = np.broadcast_to(np.arange(shape[-1], dtype=dtype), shape).copy()
        else:
            high = _vocab_for(proto, vi.name)
            if dtype.kind == "u" or dtype.itemsize == 1:
                high = min(high, 127)
            feeds[vi.name] = rng.integers(0, high, size=shape, dtype=dtype)
    return feeds


def write_inputs(model: ModelInfo | str | Path, seed: int, out_dir: Path,
                 shapes: dict[str, list[int]] | None = None) -> Path:
    """Write `make_inputs(model, seed, shapes)` as FTNS to out_dir/<sha12>.ftns."""
    data = ftns_module().dumps(make_inputs(model, seed, shapes))
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / f"{hashlib.sha256(data).hexdigest()[:12]}.ftns"
    if not path.exists():
        tmp = path.with_name(f".{path.name}.{os.getpid()}.{threading.get_ident()}.tmp")
        tmp.write_bytes(data)
        tmp.replace(path)
    return path
