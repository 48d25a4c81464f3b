"""Build the runtime-only TVM runner (`agents/runners/tvm_runner.cc`) for an arch.

The runner links libtvm_runtime + libtvm_ffi only (no compiler library, which `import tvm`
loads: ~200 MB), so its peak memory is the TVM runtime's. Output: a self-contained directory
`.farm/runners/tvm/<arch>-<hash>/` with `tvm_runner` and both libraries (rpath `$ORIGIN`),
ready to be copied to a device's `runners/` dir as a unit; `build_runner` also lists the
three files in the build registry as `runners/tvm-<arch>/<name>` for `farm deploy`.

Libraries come from the installed wheels for the host arch; for another arch (aarch64 on
an x86-64 host) the matching `apache-tvm`/`apache-tvm-ffi` wheels are fetched once with
`pip download` into `$FARM_CACHE/wheels/` (default ~/.cache/farm) and the two libraries
extracted from them. The C++ compiler is `g++` natively and `<triple>-g++` across
(Debian: g++-aarch64-linux-gnu).
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import importlib.util
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import zipfile
from dataclasses import dataclass
from pathlib import Path

from farm import artifacts
from farm.errors import BuildError
from farm.paths import agents_dir, build_cache_dir

LIBS = ("libtvm_runtime.so", "libtvm_ffi.so")
_CXX = {"x86_64": "x86_64-linux-gnu-g++", "aarch64": "aarch64-linux-gnu-g++"}
_WHEEL_PLATFORM = {"x86_64": "manylinux_2_28_x86_64", "aarch64": "manylinux_2_28_aarch64"}


@dataclass(frozen=True)
class RunnerBundle:
    arch: str
    directory: Path
    binary: Path
    libs: tuple[Path, ...]


def _package_dir(name: str) -> Path:
    spec = importlib.util.find_spec(name)  # locates the package without importing it
    if spec is None or not spec.submodule_search_locations:
        raise BuildError(f"Python package {name!r} is not installed",
                         hint="pip install 'apache-tvm==0.27.0.post1' "
                              "'apache-tvm-ffi==0.1.14.post1'")
    return Path(next(iter(spec.submodule_search_locations)))


def _cache_dir() -> Path:
    """Downloads shared by every FARM_HOME: $FARM_CACHE, else ~/.cache/farm."""
    return Path(os.environ.get("FARM_CACHE") or Path.home() / ".cache" / "farm")


def _host_arch() -> str:
    machine = platform.machine()
    return "aarch64" if machine in ("arm64", "aarch64") else machine


def _fetch_foreign_libs(arch: str) -> dict[str, Path]:
    """The two runtime libraries for `arch`, extracted from the matching PyPI wheels."""
    out = _cache_dir() / "tvm-libs" / arch
    if all((out / lib).is_file() for lib in LIBS):
        return {lib: out / lib for lib in LIBS}
    wheels = _cache_dir() / "wheels"
    wheels.mkdir(parents=True, exist_ok=True)
    pins = [f"{dist}=={importlib.metadata.version(dist)}"
            for dist in ("apache-tvm", "apache-tvm-ffi")]
    pyver = f"{sys.version_info.major}.{sys.version_info.minor}"
    cmd = [sys.executable, "-m", "pip", "download", "--quiet", "--no-deps",
           "--only-binary=:all:", "--platform", _WHEEL_PLATFORM[arch],
           "--python-version", pyver, "-d", str(wheels), *pins]
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise BuildError(f"could not fetch the {arch} TVM wheels ({' '.join(pins)}): "
                         f"{proc.stderr.strip()[-400:]}",
                         hint="needs PyPI access once; the libraries are cached afterwards")
    out.mkdir(parents=True, exist_ok=True)
    members = {"libtvm_runtime.so": ("apache-tvm", "tvm/lib/libtvm_runtime.so"),
               "libtvm_ffi.so": ("apache-tvm-ffi", "tvm_ffi/lib/libtvm_ffi.so")}
    for lib, (dist, member) in members.items():
        stem = f"{dist.replace('-', '_')}-{importlib.metadata.version(dist)}-"
        candidates = sorted(wheels.glob(f"{stem}*{arch}*.whl"))
        if not candidates:
            raise BuildError(f"no {arch} wheel {stem}* for {lib} in {wheels}")
        with zipfile.ZipFile(candidates[-1]) as wheel, wheel.open(member) as src:
            (out / lib).write_bytes(src.read())
    return {lib: out / lib for lib in LIBS}


def _libs_for(arch: str) -> dict[str, Path]:
    if arch == _host_arch():
        return {"libtvm_runtime.so": _package_dir("tvm") / "lib" / "libtvm_runtime.so",
                "libtvm_ffi.so": _package_dir("tvm_ffi") / "lib" / "libtvm_ffi.so"}
    if arch not in _WHEEL_PLATFORM:
        raise BuildError(f"no TVM runtime wheel for arch {arch!r}")
    return _fetch_foreign_libs(arch)


def _compiler(arch: str) -> str:
    candidates = [_CXX.get(arch, "")] + (["g++"] if arch == _host_arch() else [])
    for cxx in candidates:
        if cxx and shutil.which(cxx):
            return cxx
    raise BuildError(f"no C++ compiler for {arch} (tried {', '.join(c for c in candidates if c)})",
                     hint="apt-get install g++-aarch64-linux-gnu" if arch == "aarch64" else
                     "apt-get install g++")


def build_runner(arch: str | None = None) -> RunnerBundle:
    """Compile the runner for `arch` (default: this machine's) unless already built."""
    arch = arch or _host_arch()
    source = agents_dir() / "runners" / "tvm_runner.cc"
    libs = _libs_for(arch)
    cxx = _compiler(arch)
    digest = hashlib.sha256(source.read_bytes())
    for path in libs.values():
        digest.update(path.read_bytes())
    digest.update(cxx.encode())
    directory = build_cache_dir() / "runners" / "tvm" / f"{arch}-{digest.hexdigest()[:12]}"
    binary = directory / "tvm_runner"
    bundle = RunnerBundle(arch, directory, binary, tuple(directory / lib for lib in LIBS))
    if binary.is_file() and all(p.is_file() for p in bundle.libs):
        return _register(bundle)
    # a directory of its own (several benches or processes may build the same runner at once)
    directory.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=directory.name + ".tmp", dir=directory.parent))
    for name, path in libs.items():
        shutil.copy2(path, tmp / name)
    ffi = _package_dir("tvm_ffi")
    cmd = [cxx, "-std=c++17", "-O2", "-o", str(tmp / "tvm_runner"), str(source),
           f"-I{ffi / 'include'}", f"-I{ffi / '3rdparty' / 'dlpack' / 'include'}",
           # without --no-as-needed the linker drops libtvm_runtime (no symbol is referenced
           # directly) and the Relax VM loader is never registered
           f"-L{tmp}", "-Wl,--no-as-needed", "-ltvm_ffi", "-ltvm_runtime", "-Wl,--as-needed",
           "-Wl,-rpath,$ORIGIN"]
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        shutil.rmtree(tmp, ignore_errors=True)
        raise BuildError(f"compiling {source.name} for {arch} failed:\n{proc.stderr[-2000:]}")
    if binary.is_file():  # another builder finished first: same inputs, same bundle
        shutil.rmtree(tmp, ignore_errors=True)
        return _register(bundle)
    shutil.rmtree(directory, ignore_errors=True)
    tmp.replace(directory)
    return _register(bundle)


def _register(bundle: RunnerBundle) -> RunnerBundle:
    """List the runner directory for `farm deploy`: `runners/tvm-<arch>/` under fixed names
    (the binary finds its libraries through rpath $ORIGIN; the binary must stay executable)."""
    for path in (bundle.binary, *bundle.libs):
        artifacts.register(artifacts.make_artifact("runner", path, f"runners/tvm-{bundle.arch}",
                                                  target=bundle.arch, content_name=False))
    return bundle
