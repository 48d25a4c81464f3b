"""agents/ftns.py: the byte layout of the contract, round trips, and refusal of bad files."""

from __future__ import annotations

import ast
import struct
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from farm.models import ftns_module
from farm.paths import agents_dir

ftns = ftns_module()
FTNS_PY = agents_dir() / "ftns.py"


def test_byte_layout_matches_the_documented_format() -> None:
    data = ftns.dumps({"ids": np.array([[1, 2]], dtype=np.int64)})
    want = (b"FTNS" + struct.pack("<II", 1, 1) + struct.pack("<I", 3) + b"ids"
            + struct.pack("<II", 1, 2) + struct.pack("<qq", 1, 2) + struct.pack("<Q", 16)
            + struct.pack("<qq", 1, 2))
    assert data == want


@pytest.mark.parametrize("dtype", ["float32", "int64", "int32", "int8", "uint8"])
def test_round_trip_every_dtype(dtype: str, tmp_path: Path) -> None:
    arr = (np.arange(24) - 5).astype(dtype).reshape(2, 3, 4)
    tensors = {"t": arr, "scalar": np.array(7, dtype=dtype), "empty": np.zeros((0, 3), dtype)}
    path = tmp_path / "x.ftns"
    ftns.write(str(path), tensors)
    back = ftns.read(str(path))
    assert list(back) == ["t", "scalar", "empty"]
    for name, value in tensors.items():
        assert back[name].dtype == value.dtype and back[name].shape == value.shape
        assert np.array_equal(back[name], value)


def test_non_contiguous_and_big_endian_arrays_are_stored_little_endian_c_order() -> None:
    arr = np.arange(12, dtype=">f4").reshape(3, 4).T  # transposed, big-endian
    back = ftns.loads(ftns.dumps({"ü": arr}))["ü"]
    assert np.array_equal(back, arr) and back.dtype == np.dtype("<f4")


@settings(max_examples=40, deadline=None)
@given(st.lists(st.integers(0, 4), min_size=0, max_size=4), st.sampled_from(
    ["float32", "int64", "int8"]), st.text(min_size=1, max_size=8))
def test_round_trip_property(shape: list[int], dtype: str, name: str) -> None:
    arr = np.random.default_rng(0).integers(-100, 100, size=shape).astype(dtype)
    back = ftns.loads(ftns.dumps({name: arr}))
    assert np.array_equal(back[name], arr) and back[name].shape == arr.shape


def test_tensor_objects_without_numpy_path() -> None:
    t = ftns.Tensor("x", "i32", (2,), struct.pack("<ii", 3, -4))
    raw = ftns.loads(ftns.dumps({"x": t}), as_numpy=False)["x"]
    assert (raw.dtype, raw.shape, raw.data) == ("i32", (2,), t.data)
    with pytest.raises(ftns.FtnsError, match="data bytes"):
        ftns.Tensor("x", "f32", (3,), b"\0" * 8)


def test_malformed_buffers_are_refused() -> None:
    good = ftns.dumps({"a": np.ones((2, 2), np.float32), "b": np.zeros(3, np.int64)})
    for cut in range(len(good)):  # every truncation point is caught
        with pytest.raises(ftns.FtnsError):
            ftns.loads(good[:cut])
    with pytest.raises(ftns.FtnsError, match="bad magic"):
        ftns.loads(b"NOPE" + good[4:])
    with pytest.raises(ftns.FtnsError, match="version 2"):
        ftns.loads(good[:4] + struct.pack("<I", 2) + good[8:])
    with pytest.raises(ftns.FtnsError, match="trailing"):
        ftns.loads(good + b"\0")
    dup = ftns.dumps({"a": np.ones(1, np.int8)})
    twice = dup[:8] + struct.pack("<I", 2) + dup[12:] + dup[12:]
    with pytest.raises(ftns.FtnsError, match="twice"):
        ftns.loads(twice)
    with pytest.raises(ftns.FtnsError, match="not storable"):
        ftns.dumps({"h": np.ones(2, np.float16)})


def test_read_names_the_file(tmp_path: Path) -> None:
    bad = tmp_path / "bad.ftns"
    bad.write_bytes(b"FTNS\x01\x00")
    with pytest.raises(ftns.FtnsError, match=str(bad)):
        ftns.read(str(bad))


def test_works_without_numpy_and_parses_as_python38() -> None:
    ast.parse(FTNS_PY.read_text(), feature_version=(3, 8))
    code = (
        "import sys; sys.modules['numpy'] = None; sys.path.insert(0, sys.argv[1]); import ftns\n"
        "t = ftns.Tensor('m', 'u8', (2,), b'\\x01\\x02')\n"
        "back = ftns.loads(ftns.dumps({'m': t}))['m']\n"
        "assert isinstance(back, ftns.Tensor) and back.data == b'\\x01\\x02', back\n"
        "print('ok')\n"
    )
    out = subprocess.run([sys.executable, "-c", code, str(agents_dir())], capture_output=True,
                         text=True, check=True)
    assert out.stdout.strip() == "ok"
