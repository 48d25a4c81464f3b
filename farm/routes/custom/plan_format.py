"""The plan file the custom executor runs: constants, in-memory form, writer and header reader.

Byte layout and meaning are defined in ``kernels/runtime/plan.h`` (the C side is the reader
that matters); this module mirrors it. Version 1, little-endian: a 64-byte header
(magic ``FKPLAN\\0\\0``, version, header size, file size, required CPU feature bits, zlib
CRC-32 of everything after the header, section counts), then fixed-size records for inputs,
outputs, activation buffers, tensors and ops, then the tensor data at 64-byte aligned offsets.
A plan is independent of batch and sequence length: buffers are ``[tokens, cols]`` and the
executor takes ``[batch, seq]`` from its inputs.
"""

from __future__ import annotations

import struct
import zlib
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from farm.errors import BuildError

MAGIC = b"FKPLAN\0\0"
VERSION = 1
HEADER_SIZE = 64
NAME_LEN = 48
OP_NAME_LEN = 64

OP_EMBED, OP_LAYERNORM, OP_FC, OP_GELU, OP_ADD, OP_ATTENTION = 1, 2, 3, 4, 5, 6
OP_NONORM, OP_TRIGRAM = 7, 8  # MobileBERT: NoNorm after a residual; the trigram embedding input
OP_ROW = 9  # one token's row per sequence (BERT's pooler reads [CLS]); p0 its position
OP_GENERIC = 10  # the generic fallback: one plain kernel of an ONNX op (lower_generic.py)
OP_NAMES = {OP_EMBED: "Embed", OP_LAYERNORM: "LayerNorm", OP_FC: "FC", OP_GELU: "Gelu",
            OP_ADD: "Add", OP_ATTENTION: "Attention", OP_NONORM: "NoNorm",
            OP_TRIGRAM: "Trigram", OP_ROW: "Row", OP_GENERIC: "Fallback"}
W_F32, W_I8, W_Q4_0 = 0, 1, 2
ACT_NONE, ACT_GELU, ACT_GELU_TAB, ACT_RELU = 0, 1, 2, 3
ACT_TANH, ACT_GELU_TANH = 4, 5  # run as a row pass after the GEMM (the pooler; ALBERT's gelu_new)
GELU_ERF, GELU_TABLE, GELU_TANH = 0, 1, 2  # OP_GELU's p0
BUF_TOKENS, BUF_SEQS, BUF_FLAT = 0, 1, 2  # a buffer's rows: one per token, one per sequence
# (after OP_ROW), or one row of a fallback tensor's elements
ROLE_IDS, ROLE_MASK, ROLE_TYPE, ROLE_OTHER = 0, 1, 2, 3
SRC_POSITION = -1  # EMBED source: the token's position; >= 0 input slot; <= -2 fixed row

DTYPES = {np.dtype(np.float32): 0, np.dtype(np.int64): 1, np.dtype(np.int32): 2,
          np.dtype(np.int8): 3, np.dtype(np.uint8): 4}

# CPU feature bits (kernels/include/fk.h FK_FEAT_*).
FEATURES = {"avx2": 0, "fma": 1, "avx512f": 2, "avx512bw": 3, "avx512vl": 4, "avx512dq": 5,
            "f16c": 6, "avx512vnni": 7, "amx_tile": 8, "amx_int8": 9, "avxvnni": 10,
            "neon": 16, "dotprod": 17, "i8mm": 18, "sve": 19}

_HEADER = struct.Struct("<8sIIQQI5I8x")
_INPUT = struct.Struct(f"<{NAME_LEN}sII")
_OUTPUT = struct.Struct(f"<{NAME_LEN}sII")
_BUF = struct.Struct("<II")
_TENSOR = struct.Struct("<QQII4q")
_OP = struct.Struct(f"<II{OP_NAME_LEN}s4ii8i8i4fI")
assert _HEADER.size == HEADER_SIZE and _OP.size == 176 and _TENSOR.size == 56


@dataclass
class PlanOp:
    """One executor op. `ins`/`out` are buffer ids, `tensors` tensor ids (None = absent)."""

    kind: int
    name: str
    ins: list[int]
    out: int
    tensors: list[int | None] = field(default_factory=list)
    params: list[int] = field(default_factory=list)
    floats: list[float] = field(default_factory=list)


@dataclass
class Plan:
    """A plan being built: tensors are numpy arrays already in kernel layout."""

    inputs: list[tuple[str, int]] = field(default_factory=list)   # (name, role)
    outputs: list[tuple[str, int]] = field(default_factory=list)  # (name, buffer)
    bufs: list[int] = field(default_factory=list)                 # columns per buffer
    buf_rows: list[int] = field(default_factory=list)             # BUF_* per buffer
    tensors: list[np.ndarray] = field(default_factory=list)
    ops: list[PlanOp] = field(default_factory=list)
    features: set[str] = field(default_factory=set)

    def add_tensor(self, arr: np.ndarray) -> int:
        if arr.dtype not in DTYPES:
            raise BuildError(f"plan tensor dtype {arr.dtype} is not supported")
        self.tensors.append(np.ascontiguousarray(arr))
        return len(self.tensors) - 1

    def add_buf(self, cols: int, rows: int = BUF_TOKENS) -> int:
        self.bufs.append(int(cols))
        self.buf_rows += [BUF_TOKENS] * (len(self.bufs) - 1 - len(self.buf_rows)) + [rows]
        return len(self.bufs) - 1


def _name(text: str, size: int) -> bytes:
    raw = text.encode("utf-8")[: size - 1]
    return raw + b"\0" * (size - len(raw))


def _pad(seq: list, n: int, fill) -> list:
    if len(seq) > n:
        raise BuildError(f"plan op has {len(seq)} slots, the format allows {n}")
    return list(seq) + [fill] * (n - len(seq))


def serialize(plan: Plan) -> bytes:
    """The plan file's bytes (deterministic for a given plan)."""
    bad = sorted(set(plan.features) - set(FEATURES))
    if bad:
        raise BuildError(f"unknown CPU feature(s) {bad}", hint=f"known: {', '.join(FEATURES)}")
    feat = sum(1 << FEATURES[f] for f in plan.features)
    body = bytearray()
    for name, role in plan.inputs:
        body += _INPUT.pack(_name(name, NAME_LEN), role, 0)
    for name, buf in plan.outputs:
        body += _OUTPUT.pack(_name(name, NAME_LEN), buf, 0)
    rows = plan.buf_rows + [BUF_TOKENS] * (len(plan.bufs) - len(plan.buf_rows))
    for cols, kind in zip(plan.bufs, rows, strict=True):
        body += _BUF.pack(cols, kind)
    meta_end = HEADER_SIZE + len(body) + len(plan.tensors) * _TENSOR.size + len(plan.ops) * _OP.size
    offset = (meta_end + 63) // 64 * 64
    records, data = bytearray(), bytearray()
    for arr in plan.tensors:
        if arr.ndim < 1 or arr.ndim > 4:
            raise BuildError(f"plan tensor with {arr.ndim} dims (1..4 allowed)")
        dims = _pad(list(arr.shape), 4, 0)
        records += _TENSOR.pack(offset, arr.nbytes, DTYPES[arr.dtype], arr.ndim, *dims)
        data += b"\0" * (offset - meta_end - len(data))
        data += arr.tobytes()
        offset = (meta_end + len(data) + 63) // 64 * 64
    for op in plan.ops:
        tens = [-1 if t is None else t for t in op.tensors]
        records += _OP.pack(op.kind, 0, _name(op.name, OP_NAME_LEN), *_pad(op.ins, 4, -1), op.out,
                            *_pad(tens, 8, -1), *_pad(op.params, 8, 0), *_pad(op.floats, 4, 0.0), 0)
    payload = bytes(body + records + data)
    counts = (len(plan.inputs), len(plan.outputs), len(plan.bufs), len(plan.tensors), len(plan.ops))
    size = HEADER_SIZE + len(payload)
    header = _HEADER.pack(MAGIC, VERSION, HEADER_SIZE, size, feat, zlib.crc32(payload), *counts)
    return header + payload


@dataclass(frozen=True)
class PlanHeader:
    version: int
    size: int
    features: tuple[str, ...]
    n_inputs: int
    n_outputs: int
    n_bufs: int
    n_tensors: int
    n_ops: int


def read_header(path: Path) -> PlanHeader:
    """Parse and check a plan's header and checksum (the executor re-checks everything)."""
    raw = Path(path).read_bytes()
    if len(raw) < HEADER_SIZE or raw[:8] != MAGIC:
        raise BuildError(f"{path} is not a plan file")
    _, version, _hsize, size, feat, crc, *counts = _HEADER.unpack_from(raw)
    if version != VERSION:
        raise BuildError(f"{path}: plan version {version}, this farm writes {VERSION}")
    if size != len(raw) or zlib.crc32(raw[HEADER_SIZE:]) != crc:
        raise BuildError(f"{path}: plan is truncated or corrupt", hint="rebuild it")
    names = tuple(n for n, b in FEATURES.items() if feat >> b & 1)
    return PlanHeader(version, size, names, *counts)
