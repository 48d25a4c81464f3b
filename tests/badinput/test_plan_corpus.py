"""Bad plan files for the custom executor: empty, a text file, cut inside the header,
truncated, padded, of another format version, with a flipped payload byte (bad checksum),
with section counts that overrun the file. Both readers refuse each with a message naming
the file and the problem: `plan_format.read_header` on the host and the real `fk_exec`
binary (`--check`, as the device runs it) with one `{"ev": "error"}` line and exit 1."""

from __future__ import annotations

import json
import os
import struct
import subprocess
from pathlib import Path

import pytest

from farm.errors import BuildError
from farm.models import build_model
from farm.routes.custom.compile import compile_plan
from farm.routes.custom.executor_build import build_executor
from farm.routes.custom.plan_format import HEADER_SIZE, read_header


@pytest.fixture(scope="module")
def good_plan(tmp_path_factory: pytest.TempPathFactory) -> bytes:
    out = tmp_path_factory.mktemp("plan")
    model = build_model("tiny", "fp32", out / "models").path
    return compile_plan(model, out / "tiny.plan").path.read_bytes()


@pytest.fixture(scope="module")
def fk_exec(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_executor(os.uname().machine, tmp_path_factory.mktemp("bin"))


def _mutate(name: str, good: bytes) -> bytes:
    raw = bytearray(good)
    if name == "empty":
        return b""
    if name == "text":
        return b"this is a plan, trust me\n" * 10
    if name == "header_cut":
        return bytes(raw[:40])
    if name == "truncated":
        return bytes(raw[: len(raw) // 2])
    if name == "padded":
        return bytes(raw) + b"\0" * 64
    if name == "wrong_version":
        struct.pack_into("<I", raw, 8, 99)
        return bytes(raw)
    if name == "bad_checksum":
        raw[len(raw) - 7] ^= 0x40
        return bytes(raw)
    if name == "bad_checksum_in_records":
        raw[HEADER_SIZE + 3] ^= 0x01
        return bytes(raw)
    if name == "overrunning_counts":
        struct.pack_into("<5I", raw, 36, 1, 1, 1, 10**9, 10**9)
        return bytes(raw)
    raise AssertionError(name)


# name -> (words the host reader must say, words the executor must say)
CASES = {
    "empty": ("not a plan file", "truncated (0 bytes"),
    "text": ("not a plan file", "not a plan file"),
    "header_cut": ("not a plan file", "truncated (40 bytes"),
    "truncated": ("truncated or corrupt", "truncated or padded"),
    "padded": ("truncated or corrupt", "truncated or padded"),
    "wrong_version": ("plan version 99", "format version 99"),
    "bad_checksum": ("truncated or corrupt", "is corrupt: checksum"),
    "bad_checksum_in_records": ("truncated or corrupt", "is corrupt: checksum"),
    "overrunning_counts": (None, "overruns the file"),  # the host reads the header only
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_host_reader_refuses(name: str, good_plan: bytes, tmp_path: Path) -> None:
    path = tmp_path / f"{name}.plan"
    path.write_bytes(_mutate(name, good_plan))
    words = CASES[name][0]
    if words is None:
        read_header(path)  # documented: the executor re-checks the sections
        return
    with pytest.raises(BuildError, match=words) as info:
        read_header(path)
    assert str(path) in str(info.value)


def _check(fk_exec: Path, path: Path) -> tuple[int, list[dict], str]:
    proc = subprocess.run([str(fk_exec), "--check", str(path)], capture_output=True,
                          text=True, timeout=60)
    lines = [json.loads(line) for line in proc.stdout.splitlines() if line.strip()]
    return proc.returncode, lines, proc.stderr


def test_executor_accepts_the_good_plan(good_plan: bytes, fk_exec: Path, tmp_path: Path) -> None:
    path = tmp_path / "good.plan"
    path.write_bytes(good_plan)
    code, lines, _ = _check(fk_exec, path)
    assert code == 0 and lines[-1]["ev"] == "info" and lines[-1]["plan"] == "ok"
    assert read_header(path).n_ops == lines[-1]["ops"]


@pytest.mark.parametrize("name", sorted(CASES))
def test_executor_refuses_with_one_error_line(name: str, good_plan: bytes, fk_exec: Path,
                                              tmp_path: Path) -> None:
    path = tmp_path / f"{name}.plan"
    path.write_bytes(_mutate(name, good_plan))
    code, lines, stderr = _check(fk_exec, path)
    assert code == 1
    assert [e["ev"] for e in lines] == ["error"]
    message = lines[0]["message"]
    assert CASES[name][1] in message and path.name in message, message
    assert "Segmentation" not in stderr


def test_executor_truncation_message_gives_the_real_size(good_plan: bytes, fk_exec: Path,
                                                         tmp_path: Path) -> None:
    path = tmp_path / "truncated.plan"
    data = _mutate("truncated", good_plan)
    path.write_bytes(data)
    _, lines, _ = _check(fk_exec, path)
    assert f"file has {len(data)}" in lines[0]["message"]
