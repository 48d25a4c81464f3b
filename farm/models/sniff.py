"""Is a file worth parsing as ONNX? Its size and structure, judged before anything reads it.

`sniff_model_file(path) -> int` (the size in bytes) raises BuildError, one line naming the
file, for: a missing path; a path that is not a regular file (a directory, /dev/zero, a
FIFO); an empty file; a file over the bound; and a file whose top-level protobuf structure
is not an ONNX `ModelProto`. Every command that takes a model file calls it first
(`farm.models.check.load_checked`): parsing reads the whole file into memory (a 2 GB file
of zeros cost 2.18 GB RSS and 11 s before protobuf said "wire format was corrupt").

The bound: `$FARM_MAX_MODEL_SIZE` (bytes, or with a K/M/G suffix: `500M`, `1.5G`; binary
units), default and ceiling 2 GiB - 1, the most one ONNX protobuf can hold (weights beyond
that live in external data files, which are not parsed here).

The structure: ONNX files have no magic number; the `ModelProto` field list is their
signature. The top-level fields are walked with seeks: a tag (field number and wire type,
which must be a `ModelProto` field of its declared type), then a varint, or a length whose
bytes are skipped, not read. So the walk reads a few bytes per field whatever the size: a
file of zeros stops at its first byte (field 0), random bytes, text and HTML within a few,
a file cut short where a field claims more bytes than are left ("truncated"), and a file
without a `graph` field is refused too.
"""

from __future__ import annotations

import os
import re
import stat
from pathlib import Path
from typing import BinaryIO

from farm.errors import BuildError, ConfigError

PROTOBUF_LIMIT = 2**31 - 1  # one ONNX protobuf cannot hold more
BOUND_ENV = "FARM_MAX_MODEL_SIZE"
HINT = "pass a preset name (farm models list) or a valid .onnx file"

_UNITS = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([KMG]?)(?:I?B)?\s*$", re.IGNORECASE)
# protobuf wire types
_VARINT, _I64, _LEN, _I32 = 0, 1, 2, 5


def _model_fields() -> dict[int, tuple[str, int]]:
    """{field number: (name, wire type)} of onnx.ModelProto, from the installed onnx."""
    from google.protobuf.descriptor import FieldDescriptor as F
    from onnx import ModelProto

    varint = {F.TYPE_INT64, F.TYPE_INT32, F.TYPE_UINT64, F.TYPE_UINT32, F.TYPE_BOOL,
              F.TYPE_ENUM, F.TYPE_SINT32, F.TYPE_SINT64}
    i32 = {F.TYPE_FLOAT, F.TYPE_FIXED32, F.TYPE_SFIXED32}
    i64 = {F.TYPE_DOUBLE, F.TYPE_FIXED64, F.TYPE_SFIXED64}
    return {f.number: (f.name, _VARINT if f.type in varint else _I32 if f.type in i32 else
                       _I64 if f.type in i64 else _LEN)
            for f in ModelProto.DESCRIPTOR.fields}


def size_bound() -> int:
    """The largest model file farm parses (see the module docstring)."""
    text = os.environ.get(BOUND_ENV, "").strip()
    if not text:
        return PROTOBUF_LIMIT
    match = _SIZE.match(text)
    if not match:
        raise ConfigError(f"${BOUND_ENV}={text!r} is not a size",
                          hint="give bytes or a size such as 500M or 1.5G")
    return min(PROTOBUF_LIMIT, int(float(match[1]) * _UNITS[match[2].upper()]))


def _human(n: int) -> str:
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= scale:
            return f"{n / scale:.1f} {unit}"
    return f"{n} bytes"


def _excerpt(head: bytes) -> str:
    """The first bytes as text when they are text, else in hex."""
    text = head[:24].decode("ascii", errors="replace")
    if text.isprintable():
        return repr(text)
    return " ".join(f"{b:02x}" for b in head[:8])


def _varint(f: BinaryIO, where: str) -> int:
    value = shift = 0
    for _ in range(10):
        byte = f.read(1)
        if not byte:
            raise EOFError(where)
        value |= (byte[0] & 0x7F) << shift
        if byte[0] < 0x80:
            return value
        shift += 7
    raise ValueError(f"{where}: a varint longer than 10 bytes")


def _walk(f: BinaryIO, size: int) -> set[str]:
    """Names of the top-level fields; ValueError (not ONNX) or EOFError (cut short)."""
    fields = _model_fields()
    seen: set[str] = set()
    while f.tell() < size:
        at = f.tell()
        tag = _varint(f, f"the field at byte {at}")
        number, wire = tag >> 3, tag & 7
        known = fields.get(number)
        if known is None:
            raise ValueError(f"byte {at} starts field {number}, which an ONNX model does "
                             "not have")
        name, expected = known
        if wire != expected:
            raise ValueError(f"byte {at}: field {number} ({name}) with wire type {wire}, "
                             f"not {expected}")
        if wire == _VARINT:
            _varint(f, f"field {name} at byte {at}")
        elif wire in (_I32, _I64):
            width = 4 if wire == _I32 else 8
            if f.tell() + width > size:
                raise EOFError(f"field {name} at byte {at} is cut short")
            f.seek(width, os.SEEK_CUR)
        else:
            length = _varint(f, f"field {name} at byte {at}")
            left = size - f.tell()
            if length > left:
                raise EOFError(f"field {name} at byte {at} claims {length} bytes, "
                               f"{left} are left")
            f.seek(length, os.SEEK_CUR)
        seen.add(name)
    return seen


def sniff_model_file(path: str | Path) -> int:
    """The file's size once it looks like an ONNX model (see the module docstring)."""
    path = Path(path)
    try:
        info = path.stat()
    except FileNotFoundError:
        raise BuildError(f"model file {path} does not exist", hint=HINT) from None
    except OSError as exc:
        raise BuildError(f"model file {path} cannot be read: {exc.strerror}",
                         hint=HINT) from None
    if not stat.S_ISREG(info.st_mode):
        raise BuildError(f"model file {path} is not a regular file", hint=HINT)
    size = info.st_size
    if size == 0:
        raise BuildError(f"model file {path} is empty", hint=HINT)
    bound = size_bound()
    if size > bound:
        why = ("one ONNX file holds at most 2 GiB; larger weights go in external data"
               if bound == PROTOBUF_LIMIT else f"raise ${BOUND_ENV} to read larger models")
        raise BuildError(f"model file {path} is {size} bytes ({_human(size)}), over the "
                         f"bound of {bound} bytes for a model file", hint=why)
    head = b""
    try:
        with open(path, "rb") as f:
            head = f.read(32)
            f.seek(0)
            seen = _walk(f, size)
    except OSError as exc:
        raise BuildError(f"model file {path} cannot be read: {exc.strerror or exc}",
                         hint=HINT) from None
    except ValueError as exc:
        raise BuildError(f"{path} is not an ONNX model ({_human(size)}, it starts with "
                         f"{_excerpt(head)}): {exc}", hint=HINT) from None
    except EOFError as exc:
        raise BuildError(f"{path} is not an ONNX model or is truncated ({_human(size)}): "
                         f"{exc}", hint=HINT) from None
    if "graph" not in seen:
        raise BuildError(f"{path} is not an ONNX model ({_human(size)}): it has no graph",
                         hint=HINT)
    return size
