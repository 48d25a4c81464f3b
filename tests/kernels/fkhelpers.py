"""Helpers shared by the custom-route tests: run the executor, read its events and outputs."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import numpy as np

from farm.models import ftns_module, make_inputs, write_inputs

QEMU = ["qemu-aarch64", "-cpu", "cortex-a76"]

# ISA level (farm/isa.py) -> the kernel table fk_exec's "auto" picks there (kernels/README.md:
# levels without a table of their own run the one below)
TABLE_OF_LEVEL = {"avx2": "avx2", "avx2-vnni": "avx2", "avx512": "avx512",
                  "avx512-vnni": "avx512-vnni", "amx": "amx",
                  "baseline": "neon", "dotprod": "dotprod", "i8mm": "dotprod"}
# the tables a level runs, narrowest first (generic everywhere)
TABLES_OF_LEVEL = {"avx2": ["generic", "avx2"], "avx2-vnni": ["generic", "avx2"],
                   "avx512": ["generic", "avx2", "avx512"],
                   "avx512-vnni": ["generic", "avx2", "avx512", "avx512-vnni"],
                   "amx": ["generic", "avx2", "avx512", "avx512-vnni", "amx"],
                   "baseline": ["generic", "neon"], "dotprod": ["generic", "neon", "dotprod"],
                   "i8mm": ["generic", "neon", "dotprod"]}


def host_x86_level() -> str:
    """The level the x86 executor runs at in this test session: $FARM_ISA's cap, else the
    host's own (what `auto` picks; farm.inventory.builtin reads the same environment)."""
    from farm.inventory.builtin import local_device

    return local_device().isa_level


def env_without_cap() -> dict[str, str]:
    """This environment less $FARM_ISA: for runs on an emulated CPU that may lack the level
    the suite is capped at (qemu's Haswell has no AVX-512)."""
    return {k: v for k, v in os.environ.items() if k != "FARM_ISA"}


def have_aarch64() -> bool:
    return bool(shutil.which("aarch64-linux-gnu-gcc") and shutil.which("qemu-aarch64"))


# MatMulNBits with the custom q4 GEMM's own arithmetic: 32-weight blocks, symmetric, and
# accuracy_level 4 (ORT quantises the activations to int8 per block of the same 32), so the
# two may differ by float rounding only. The int4 variant farm builds uses 128-weight blocks
# (ORT's faster path on x86 here, quantize.py): there ORT quantises activations per 128, the
# executor per 32, and the comparison is looser (INT4_PRODUCT_TOL).
KERNEL_Q4_OPTIONS = {"bits": 4, "block_size": 32, "is_symmetric": True, "accuracy_level": 4}


def int4_block32(fp32_model: Path, out_dir: Path) -> Path:
    """`fp32_model` quantised by ORT's MatMulNBitsQuantizer with KERNEL_Q4_OPTIONS."""
    import onnx
    from onnxruntime.quantization.matmul_nbits_quantizer import MatMulNBitsQuantizer

    out = out_dir / f"{fp32_model.stem}-int4-b32.onnx"
    if not out.is_file():
        quant = MatMulNBitsQuantizer(onnx.load(str(fp32_model)), **KERNEL_Q4_OPTIONS)
        quant.process()
        onnx.save(quant.model.model, str(out))
    return out


def ort_outputs(model: Path, seed: int = 0, *, int8_compute: bool = False) -> np.ndarray:
    """ORT's output on `model`. `int8_compute`: MatMulNBits nodes run at accuracy_level 4
    (activations quantised to int8 per block), the arithmetic of the custom q4 GEMM on
    32-weight blocks (KERNEL_Q4_OPTIONS)."""
    import onnx
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    source: str | bytes = str(model)
    if int8_compute:
        proto = onnx.load(str(model))
        for node in proto.graph.node:
            if node.op_type == "MatMulNBits":  # level 0 is the default: often not written
                kept = [a for a in node.attribute if a.name != "accuracy_level"]
                del node.attribute[:]
                node.attribute.extend([*kept, onnx.helper.make_attribute("accuracy_level", 4)])
        source = proto.SerializeToString()
    sess = ort.InferenceSession(source, so, providers=["CPUExecutionProvider"])
    return sess.run(None, make_inputs(model, seed))[0]


class RunResult:
    def __init__(self, proc: subprocess.CompletedProcess, out_file: Path) -> None:
        self.rc = proc.returncode
        self.stderr = proc.stderr
        self.events = [json.loads(line) for line in proc.stdout.splitlines() if line.strip()]
        self.out_file = out_file

    def ev(self, kind: str) -> list[dict]:
        return [e for e in self.events if e["ev"] == kind]

    def output(self) -> np.ndarray:
        return ftns_module().read(str(self.out_file))["last_hidden_state"]


def run_exec(exe: list[str], plan: Path, model: Path, tmp: Path, *extra: str,
             timeout: float = 120) -> RunResult:
    inputs = write_inputs(model, 0, tmp)
    out = tmp / f"out-{plan.stem}-{abs(hash(extra))}.ftns"
    argv = [*exe, "--plan", str(plan), "--inputs", str(inputs), "--outputs", str(out),
            "--runs", "2"]
    proc = subprocess.run([*argv, *extra], capture_output=True, text=True, timeout=timeout)
    return RunResult(proc, out)
