"""Every kernel table against the plain-C references at awkward lengths (kernels/tests)."""

from __future__ import annotations

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


@pytest.mark.aarch64
def test_neon_and_dotprod_tables_under_qemu(harness_arm: Path) -> None:
    out = _run([*QEMU, str(harness_arm)])
    assert "PASSED" in out and "FAIL" not in out
    for table in ("dotprod", "neon", "generic"):
        assert f"ok   {table}" in out


@pytest.mark.aarch64
def test_cpu_without_dotprod_skips_that_table(harness_arm: Path) -> None:
    out = _run(["qemu-aarch64", "-cpu", "cortex-a53", str(harness_arm)])
    assert "skip dotprod" in out and "ok   neon" in out and "PASSED" in out
