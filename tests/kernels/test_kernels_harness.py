"""Every kernel table against the plain-C references at awkward lengths (kernels/tests)."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
from fkhelpers import QEMU


def _run(argv: list[str]) -> str:
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return proc.stdout


def test_x86_tables_match_reference(harness_x86: Path) -> None:
    out = _run([str(harness_x86)])
    assert "PASSED" in out and "FAIL" not in out
    for table in ("avx2", "generic"):  # every x86-64 host with AVX2 runs both
        assert f"ok   {table}" in out
    assert "gemm_q4_0" in out and "attention_f32" in out
    assert "relu_f32" in out and "nonorm_f32" in out  # MobileBERT's ReLU and NoNorm
    # BERT's pooler and ALBERT's tanh GELU
    assert "ok   avx2     tanh_f32" in out and "ok   avx2     gelu_tanh_f32" in out


def _host_has(flag: str) -> bool:
    return any(flag in line.split() for line in Path("/proc/cpuinfo").read_text().splitlines()
               if line.startswith("flags"))


def test_amx_table_runs_where_the_cpu_has_amx(harness_x86: Path) -> None:
    if not _host_has("amx_int8"):
        pytest.skip("this CPU has no AMX-INT8")
    out = _run([str(harness_x86), "amx"])
    assert "ok   amx      gemm_i8" in out and "PASSED: 1 tables" in out


@pytest.mark.skipif(not shutil.which("qemu-x86_64"), reason="qemu-x86_64 missing")
def test_cpu_without_avx512_or_amx_skips_those_tables(harness_x86: Path) -> None:
    """Under qemu's Haswell (AVX2, no AVX-512, no AMX) the binary must pick avx2, never SIGILL."""
    out = _run(["qemu-x86_64", "-cpu", "Haswell", str(harness_x86)])
    assert "skip amx" in out and "skip avx512" in out
    assert "ok   avx2" in out and "PASSED: 2 tables" in out


@pytest.mark.aarch64
def test_neon_and_dotprod_tables_under_qemu(harness_arm: Path) -> None:
    out = _run([*QEMU, str(harness_arm)])
    assert "PASSED" in out and "FAIL" not in out
    for table in ("dotprod", "neon", "generic"):
        assert f"ok   {table}" in out
    assert "ok   neon     nonorm_f32" in out and "ok   dotprod  relu_f32" in out
    assert "ok   neon     tanh_f32" in out and "ok   dotprod  gelu_tanh_f32" in out


@pytest.mark.aarch64
def test_cpu_without_dotprod_skips_that_table(harness_arm: Path) -> None:
    out = _run(["qemu-aarch64", "-cpu", "cortex-a53", str(harness_arm)])
    assert "skip dotprod" in out and "ok   neon" in out and "PASSED" in out
