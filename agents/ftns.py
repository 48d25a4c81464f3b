"""FTNS: the tensor file format shared by the host, the route runners and the C executor.

Little-endian. b"FTNS", u32 version (=1), u32 count, then per tensor:
u32 name_len, name (utf-8), u32 dtype (0=f32, 1=i64, 2=i32, 3=i8, 4=u8), u32 ndim,
i64 dims[ndim], u64 nbytes, raw data (C order, little-endian elements).
The C side is kernels/runtime/ftns.h.

Stdlib only; numpy is used when it is importable (runs on the device's Python 3.8+, so no
newer syntax here). API:
  dumps(tensors) -> bytes        tensors: mapping name -> numpy array or Tensor
  loads(data, as_numpy=True)     -> OrderedDict name -> numpy array (or Tensor without numpy)
  write(path, tensors); read(path, as_numpy=True)
A malformed file raises FtnsError (a ValueError) saying what is wrong and at which offset.
"""

import struct
from collections import OrderedDict

try:
    import numpy as _np
except ImportError:  # the device may have no numpy: raw Tensor objects still work
    _np = None

MAGIC = b"FTNS"
VERSION = 1
# dtype code -> (name, itemsize, numpy little-endian dtype string)
DTYPES = {0: ("f32", 4, "<f4"), 1: ("i64", 8, "<i8"), 2: ("i32", 4, "<i4"),
          3: ("i8", 1, "i1"), 4: ("u8", 1, "u1")}
_CODE_BY_NAME = dict((v[0], k) for k, v in DTYPES.items())
_CODE_BY_NUMPY = {"float32": 0, "int64": 1, "int32": 2, "int8": 3, "uint8": 4}
_MAX_NDIM = 16
_MAX_NAME = 4096


class FtnsError(ValueError):
    """A file or buffer that is not valid FTNS."""


class Tensor(object):
    """A tensor without numpy: name, dtype name ('f32', ...), shape tuple, raw LE bytes."""

    __slots__ = ("name", "dtype", "shape", "data")

    def __init__(self, name, dtype, shape, data):
        if dtype not in _CODE_BY_NAME:
            raise FtnsError("tensor %r: unknown dtype %r (use one of %s)"
                            % (name, dtype, ", ".join(sorted(_CODE_BY_NAME))))
        self.name, self.dtype, self.shape, self.data = name, dtype, tuple(shape), bytes(data)
        expect = _numel(self.shape) * DTYPES[_CODE_BY_NAME[dtype]][1]
        if len(self.data) != expect:
            raise FtnsError("tensor %r: %d data bytes for shape %r of %s (expected %d)"
                            % (name, len(self.data), self.shape, dtype, expect))

    def to_numpy(self):
        if _np is None:
            raise FtnsError("numpy is not available")
        np_dtype = DTYPES[_CODE_BY_NAME[self.dtype]][2]
        return _np.frombuffer(self.data, dtype=np_dtype).reshape(self.shape).copy()

    def __repr__(self):
        return "Tensor(%r, %s, %r)" % (self.name, self.dtype, self.shape)


def _numel(shape):
    n = 1
    for d in shape:
        n *= d
    return n


def _encode(name, value):
    """(dtype code, dims, raw bytes) of a numpy array or Tensor."""
    if isinstance(value, Tensor):
        return _CODE_BY_NAME[value.dtype], value.shape, value.data
    if _np is not None:
        arr = _np.asarray(value)
        code = _CODE_BY_NUMPY.get(arr.dtype.name)
        if code is None:
            raise FtnsError("tensor %r: dtype %s is not storable in FTNS (use %s)"
                            % (name, arr.dtype, ", ".join(sorted(_CODE_BY_NUMPY))))
        le = _np.ascontiguousarray(arr.astype(DTYPES[code][2], copy=False))
        return code, arr.shape, le.tobytes()
    raise FtnsError("tensor %r: %s is neither a Tensor nor (numpy missing) an array"
                    % (name, type(value).__name__))


def dumps(tensors):
    parts = [MAGIC, struct.pack("<II", VERSION, len(tensors))]
    for name, value in tensors.items():
        code, dims, raw = _encode(name, value)
        bname = name.encode("utf-8")
        parts.append(struct.pack("<I", len(bname)))
        parts.append(bname)
        parts.append(struct.pack("<II", code, len(dims)))
        parts.append(struct.pack("<%dq" % len(dims), *dims))
        parts.append(struct.pack("<Q", len(raw)))
        parts.append(raw)
    return b"".join(parts)


class _Cursor(object):
    def __init__(self, data):
        self.data, self.pos = data, 0

    def take(self, n, what):
        if self.pos + n > len(self.data):
            raise FtnsError("truncated FTNS: %s needs %d bytes at offset %d, %d left"
                            % (what, n, self.pos, len(self.data) - self.pos))
        chunk = self.data[self.pos:self.pos + n]
        self.pos += n
        return chunk

    def unpack(self, fmt, what):
        return struct.unpack(fmt, self.take(struct.calcsize(fmt), what))


def loads(data, as_numpy=True):
    cur = _Cursor(memoryview(data))
    if bytes(cur.take(4, "magic")) != MAGIC:
        raise FtnsError("not an FTNS file: bad magic %r" % bytes(data[:4]))
    version, count = cur.unpack("<II", "header")
    if version != VERSION:
        raise FtnsError("FTNS version %d is not supported (this reader speaks %d)"
                        % (version, VERSION))
    out = OrderedDict()
    for index in range(count):
        (name_len,) = cur.unpack("<I", "name length of tensor %d" % index)
        if name_len > _MAX_NAME:
            raise FtnsError("tensor %d: name length %d is implausible" % (index, name_len))
        name = bytes(cur.take(name_len, "name of tensor %d" % index)).decode("utf-8")
        code, ndim = cur.unpack("<II", "dtype/ndim of %r" % name)
        if code not in DTYPES:
            raise FtnsError("tensor %r: unknown dtype code %d" % (name, code))
        if ndim > _MAX_NDIM:
            raise FtnsError("tensor %r: ndim %d is implausible" % (name, ndim))
        dims = cur.unpack("<%dq" % ndim, "dims of %r" % name)
        if any(d < 0 for d in dims):
            raise FtnsError("tensor %r: negative dimension in %r" % (name, dims))
        (nbytes,) = cur.unpack("<Q", "byte count of %r" % name)
        tensor = Tensor(name, DTYPES[code][0], dims, cur.take(nbytes, "data of %r" % name))
        if name in out:
            raise FtnsError("tensor name %r appears twice" % name)
        out[name] = tensor.to_numpy() if (as_numpy and _np is not None) else tensor
    if cur.pos != len(cur.data):
        raise FtnsError("%d trailing bytes after the last tensor" % (len(cur.data) - cur.pos))
    return out


def write(path, tensors):
    """Write atomically (temp file + rename) so a reader never sees half a file."""
    import os
    tmp = "%s.tmp%d" % (path, os.getpid())
    with open(tmp, "wb") as f:
        f.write(dumps(tensors))
    os.replace(tmp, path)


def read(path, as_numpy=True):
    with open(path, "rb") as f:
        data = f.read()
    try:
        return loads(data, as_numpy=as_numpy)
    except FtnsError as exc:
        raise FtnsError("%s: %s" % (path, exc))
