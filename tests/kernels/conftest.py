"""Fixtures for the custom route: built executors and harnesses, tiny models."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from fkhelpers import QEMU, have_aarch64, int4_block32

from farm.models import build_model
from farm.routes.custom.executor_build import build_executor, build_kernel_test


@pytest.fixture(scope="session")
def bin_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("fk-bin")


@pytest.fixture(scope="session")
def exe_x86(bin_dir: Path) -> list[str]:
    return [str(build_executor("x86_64", bin_dir))]


@pytest.fixture(scope="session")
def exe_arm(bin_dir: Path) -> list[str]:
    if not have_aarch64():
        pytest.skip("aarch64-linux-gnu-gcc or qemu-aarch64 missing")
    return [*QEMU, str(build_executor("aarch64", bin_dir))]


@pytest.fixture(scope="session")
def harness_x86(bin_dir: Path) -> Path:
    return build_kernel_test("x86_64", bin_dir)


@pytest.fixture(scope="session")
def harness_arm(bin_dir: Path) -> Path:
    if not have_aarch64():
        pytest.skip("aarch64-linux-gnu-gcc or qemu-aarch64 missing")
    return build_kernel_test("aarch64", bin_dir)


@pytest.fixture(scope="session")
def model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("fk-models")


@pytest.fixture(scope="session")
def tiny(model_dir: Path) -> Callable[[str], Path]:
    """variant -> path of the tiny preset built by farm.models (cached per session);
    "int4-b32": the fp32 build quantised with the q4 GEMM's own arithmetic (fkhelpers)."""
    cache: dict[str, Path] = {}

    def get(variant: str) -> Path:
        if variant not in cache:
            cache[variant] = (int4_block32(get("fp32"), model_dir) if variant == "int4-b32"
                              else build_model("tiny", variant, model_dir).path)
        return cache[variant]

    return get
