"""Every kernel table against the plain-C references at awkward lengths (kernels/tests), at
every ISA level (farm/isa.py) the host can run: the harness takes $FARM_ISA like the
executor, so each level is one capped run (~1 s natively, ~8 s under qemu). x86 levels the
host lacks are skipped naming its level; the NEON levels run under qemu's `max` CPU (it has
dotprod and i8mm), capped."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest
from fkhelpers import TABLES_OF_LEVEL, env_without_cap, host_x86_level

from farm import isa
from farm.inventory.builtin import local_device

X86_LEVELS = [lv.name for lv in reversed(isa.LEVELS["x86_64"])]
ARM_LEVELS = [lv.name for lv in reversed(isa.LEVELS["aarch64"])]


def _run(argv: list[str], env: dict[str, str] | None = None) -> str:
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=300, env=env)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return proc.stdout


def _tested(out: str) -> set[str]:
    return set(re.findall(r"^ok   (\S+)", out, re.M))


def _capped(level: str) -> dict[str, str]:
    return {**env_without_cap(), isa.ENV: level}


def test_x86_tables_match_reference(harness_x86: Path) -> None:
    """As the suite runs (uncapped, or at its $FARM_ISA): every table of that level."""
    out = _run([str(harness_x86)])
    assert "PASSED" in out and "FAIL" not in out
    assert _tested(out) == set(TABLES_OF_LEVEL[host_x86_level()])
    assert "gemm_q4_0" in out and "attention_f32" in out
    assert "relu_f32" in out and "nonorm_f32" in out  # MobileBERT's ReLU and NoNorm
    # BERT's pooler and ALBERT's tanh GELU
    assert "ok   avx2     tanh_f32" in out and "ok   avx2     gelu_tanh_f32" in out


@pytest.mark.parametrize("level", X86_LEVELS)
def test_x86_tables_at_each_level(harness_x86: Path, level: str) -> None:
    """Capped at `level`, the harness tests exactly the tables within it and says why it
    skips the wider ones: the cap, not the CPU."""
    host = local_device()
    if level not in isa.runnable("x86_64", host.features):
        pytest.skip(f"this host's level is {host.level}: it cannot run {level}")
    out = _run([str(harness_x86)], _capped(level))
    assert f"isa cap {level}" in out and "PASSED" in out and "FAIL" not in out
    assert _tested(out) == set(TABLES_OF_LEVEL[level])
    wider = set(TABLES_OF_LEVEL["amx"]) - set(TABLES_OF_LEVEL[level])
    for table in wider:
        assert re.search(rf"^skip {re.escape(table)} +\((above the isa cap {level}|cpu lacks)",
                         out, re.M), (table, out)


def test_a_cap_above_the_host_is_an_error_naming_its_level(harness_x86: Path) -> None:
    host = local_device()
    above = [lv for lv in X86_LEVELS if lv not in isa.runnable("x86_64", host.features)]
    if not above:
        pytest.skip("this host runs every x86 level")
    proc = subprocess.run([str(harness_x86)], capture_output=True, text=True, timeout=60,
                          env=_capped(above[-1]))
    assert proc.returncode == 2
    assert f"its level is {host.level}" in proc.stderr, proc.stderr


@pytest.mark.skipif(not shutil.which("qemu-x86_64"), reason="qemu-x86_64 missing")
def test_cpu_without_avx512_or_amx_skips_those_tables(harness_x86: Path) -> None:
    """Under qemu's Haswell (AVX2, no AVX-512, no AMX) the binary must pick avx2, never SIGILL."""
    out = _run(["qemu-x86_64", "-cpu", "Haswell", str(harness_x86)], env_without_cap())
    assert "skip amx" in out and "skip avx512" in out and "level avx2," in out
    assert "ok   avx2" in out and "PASSED: 2 tables" in out


@pytest.mark.aarch64
@pytest.mark.parametrize("level", ARM_LEVELS)
def test_neon_tables_at_each_level_under_qemu(harness_arm: Path, level: str) -> None:
    """qemu's `max` CPU has every NEON level; capped at `level` the harness runs its tables
    (i8mm has no table of its own yet: it runs dotprod's)."""
    out = _run(["qemu-aarch64", "-cpu", "max", str(harness_arm)], _capped(level))
    assert f"isa cap {level}" in out and "PASSED" in out and "FAIL" not in out
    assert _tested(out) == set(TABLES_OF_LEVEL[level])
    if level == "baseline":
        assert "skip dotprod  (above the isa cap baseline)" in out
    assert "ok   neon     nonorm_f32" in out and "ok   neon     tanh_f32" in out


@pytest.mark.aarch64
def test_cpu_without_dotprod_skips_that_table(harness_arm: Path) -> None:
    """A real baseline CPU (qemu's Cortex-A53): detected, not capped; and $FARM_ISA is
    host-wide: an x86 level in it leaves the aarch64 binary uncapped."""
    out = _run(["qemu-aarch64", "-cpu", "cortex-a53", str(harness_arm)],
               {**os.environ, isa.ENV: "avx2"})
    assert "level baseline, isa cap none" in out and "skip dotprod" in out
    assert _tested(out) == set(TABLES_OF_LEVEL["baseline"]) and "PASSED" in out
