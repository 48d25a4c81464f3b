"""Build the custom executor (and the kernel harness) for one target with make + gcc.

`build_executor(arch, out_dir) -> Path` returns ``out_dir/fk_exec-<arch>-<key12>``: a static
binary (x86_64 natively, aarch64 with aarch64-linux-gnu-gcc). The key is the sha256 of every
source under kernels/ plus the arch and the compiler's version, so an unchanged tree costs one
hash and a changed one rebuilds. `build_kernel_test` does the same for the harness.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import tempfile
import threading
import time
from pathlib import Path

from farm.errors import BuildError
from farm.paths import kernels_dir

ARCHES = {"x86_64": "gcc", "aarch64": "aarch64-linux-gnu-gcc"}
_SOURCE_SUFFIXES = {".c", ".h", ".inc"}


def _compiler(arch: str) -> str:
    if arch not in ARCHES:
        raise BuildError(f"unknown executor arch {arch!r}", hint=f"use one of {', '.join(ARCHES)}")
    cc = "gcc" if arch == os.uname().machine else ARCHES[arch]
    if shutil.which(cc) is None:
        raise BuildError(f"compiler {cc} for {arch} not found",
                         hint="apt-get install gcc-aarch64-linux-gnu" if arch == "aarch64" else
                         "apt-get install gcc make")
    return cc


def source_key(arch: str) -> str:
    cc = _compiler(arch)
    h = hashlib.sha256(arch.encode())
    root = kernels_dir()
    files = sorted(
        p for p in root.rglob("*")
        if p.is_file() and "build" not in p.relative_to(root).parts
        and (p.suffix in _SOURCE_SUFFIXES or p.name == "Makefile"))
    for p in files:
        h.update(str(p.relative_to(root)).encode() + b"\0" + p.read_bytes())
    version = subprocess.run([cc, "--version"], capture_output=True, text=True, check=False).stdout
    h.update(version.encode())
    return h.hexdigest()


def compile_seconds(binary: Path) -> float:
    """Wall-clock seconds the cached `binary` took to compile when it was built (0.0 when
    unknown): a cache hit still reports what the artifact cost."""
    try:
        return float(json.loads(binary.with_name(binary.name + ".json").read_text())["compile_s"])
    except (OSError, ValueError, KeyError, TypeError):
        return 0.0


def _build(arch: str, target: str, out_dir: str | os.PathLike[str]) -> Path:
    cc = _compiler(arch)
    out = Path(out_dir) / f"{target}-{arch}-{source_key(arch)[:12]}"
    if out.is_file():
        return out
    out.parent.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix=f"fk-{arch}-") as tmp:
        cmd = ["make", "-s", "-C", str(kernels_dir()), f"ARCH={arch}", f"CC={cc}", f"BUILD={tmp}",
               f"{tmp}/{target}"]
        res = subprocess.run(cmd, capture_output=True, text=True, check=False)
        if res.returncode != 0:
            raise BuildError(f"building {target} for {arch} failed:\n{res.stderr.strip()[-3000:]}",
                             hint=f"run: {' '.join(cmd)}")
        # a name of its own: benches of several devices (or processes sharing a build
        # cache) may build the same binary at once; the last rename wins, same bytes
        staged = out.with_name(f"{out.name}.tmp{os.getpid()}-{threading.get_ident()}")
        shutil.copy2(Path(tmp) / target, staged)
        out.with_name(out.name + ".json").write_text(
            json.dumps({"compile_s": round(time.perf_counter() - started, 3)}))
        staged.replace(out)
    return out


def build_executor(arch: str, out_dir: str | os.PathLike[str]) -> Path:
    """The fk_exec binary for `arch` ('x86_64' or 'aarch64'), cached by source hash."""
    return _build(arch, "fk_exec", out_dir)


def build_kernel_test(arch: str, out_dir: str | os.PathLike[str]) -> Path:
    """The kernel harness (kernels/tests/kernel_test.c) for `arch`, cached the same way."""
    return _build(arch, "kernel_test", out_dir)


def build_kernel_bench(arch: str, out_dir: str | os.PathLike[str]) -> Path:
    """The single-thread kernel micro-benchmark (kernels/tests/kernel_bench.c) for `arch`."""
    return _build(arch, "kernel_bench", out_dir)
