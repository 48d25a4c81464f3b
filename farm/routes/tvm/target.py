"""The TVM target of a device, as the dict TVM 0.27 accepts (string targets with options are
rejected there).

`target_spec(device)` -> {"kind": "llvm", "mtriple": ..., "mattr": [...], "num-cores": N,
"mcpu"?: ..., "vector-width"?: bits}. aarch64 devices get LLVM attributes from their inventory
features (neon → +neon, dotprod → +dotprod, ...); x86-64 devices likewise (avx2 → +avx2, ...).
The `local` device additionally gets `mcpu` = the CPU LLVM detects here, so it is compiled for
its real micro-architecture. The spec is canonical JSON-able: it is part of the artifact key.

An ISA cap (`device.isa`, farm/isa.py) takes the features it removes out of `mattr` and adds
them as `-attr`s: `mcpu` (an Ice Lake's `icelake-server`) implies all of its CPU's features,
and only an explicit `-avx512f` keeps LLVM from emitting them. x86 targets below AVX-512
carry `vector-width` (the level's 256): TVM 0.27's
`llvm_get_vector_width` answers 512 for every x86-64 target whatever its CPU or attributes
(checked for haswell, znver3 and x86-64), so without it the default schedules
(api_rules.py) tiled an AVX2 target for 16 lanes (2 ymm registers a vector) with the
16-accumulator budget meant for AVX-512's 32 registers.
"""

from __future__ import annotations

import json
from typing import Any

from farm import isa
from farm.errors import BuildError
from farm.inventory.device import Device

# farm feature name (devices.yaml) -> LLVM target attribute
_LLVM_ATTRS = {
    "aarch64": {"neon": "+neon", "dotprod": "+dotprod", "i8mm": "+i8mm", "sve": "+sve",
                "fp16": "+fullfp16"},
    "x86_64": {"avx2": "+avx2", "fma": "+fma", "avx512f": "+avx512f", "avx512bw": "+avx512bw",
               "avx512vnni": "+avx512vnni", "avxvnni": "+avxvnni", "f16c": "+f16c",
               "sse4.2": "+sse4.2", "amx-tile": "+amx-tile", "amx-int8": "+amx-int8"},
}
# what TVM 0.27 assumes for any x86-64 target; a spec says otherwise only where it differs,
# so AVX-512 targets (and their tuning databases, keyed by the spec) stay as they were
TVM_X86_VECTOR_BITS = 512
# cross compilers for exporting a library for an arch other than the host's
CROSS_CC = {"aarch64": "aarch64-linux-gnu-gcc"}


def target_spec(device: Device, host_cpu: str | None = None) -> dict[str, Any]:
    """Dict target for `device`; `host_cpu` (LLVM CPU name) is used for the local device."""
    attrs = _LLVM_ATTRS.get(device.arch)
    if attrs is None:
        raise BuildError(f"device {device.name!r}: no TVM target for arch {device.arch!r}",
                         hint=f"supported arches: {', '.join(_LLVM_ATTRS)}")
    mattr = sorted(attrs[f] for f in device.isa_features if f in attrs)
    if device.arch == "aarch64" and "+neon" not in mattr:
        mattr.insert(0, "+neon")  # Armv8-A always has Advanced SIMD
    mattr += ["-" + attrs[f][1:] for f in isa.removed_features(device.arch, device.isa)
              if f in attrs]
    spec: dict[str, Any] = {"kind": "llvm", "mtriple": device.triple, "num-cores": device.cores}
    if mattr:
        spec["mattr"] = mattr
    if device.is_local and host_cpu:
        spec["mcpu"] = host_cpu
    if device.arch == "x86_64" and _vector_bits(device) != TVM_X86_VECTOR_BITS:
        spec["vector-width"] = _vector_bits(device)
    return spec


def _vector_bits(device: Device) -> int:
    name = device.isa_level
    return isa.level(name).vector_bits if name in isa.all_names() else 128


def spec_json(spec: dict[str, Any]) -> str:
    return json.dumps(spec, sort_keys=True, separators=(",", ":"))


def cross_compiler(device: Device, host_arch: str) -> str | None:
    """The C cross compiler needed to link a library for `device`, or None when native."""
    if device.arch == host_arch:
        return None
    try:
        return CROSS_CC[device.arch]
    except KeyError:
        raise BuildError(f"device {device.name!r}: no cross compiler known for {device.arch}",
                         hint=f"known: {', '.join(CROSS_CC)}") from None
