"""ISA levels: named caps on the vector instructions farm's own routes may use.

A level is a set of farm feature names (the names of devices.yaml and of
`farm.inventory.builtin`'s /proc/cpuinfo map) and a vector width:

    x86_64   avx2         avx2, fma                                256 bits
             avx2-vnni    avx2 + avxvnni (VEX vpdpbusd)            256
             avx512       avx2 + avx512f, avx512bw                 512
             avx512-vnni  avx512 + avx512vnni                      512
             amx          avx512-vnni + amx-tile, amx-int8         512
    aarch64  baseline     neon                                     128
             dotprod      neon, dotprod                            128
             i8mm         dotprod + i8mm                           128

A device *runs* a level when it has all of the level's features; its own level is the first
of its arch's list (widest first) it runs. Capping a device at a level removes the features
the levels govern (`GOVERNED`) that the level lacks: the custom executor then dispatches no
wider kernel table (kernels/common/fk_cpu.c holds the same table: keep them in step) and
TVM's target loses those attributes (farm/routes/tvm/target.py). ORT dispatches on the CPU
by itself and cannot be capped, so its records keep the device's own level.

Why named levels and not a free feature list: they are the machines that exist (an AVX2
Zen 3, an AVX-512 VNNI Zen 4 or Ice Lake, a Sapphire Rapids with AMX; phones with dotprod
but not i8mm, like a Pixel 7's cores), so a capped run on a wide host stands for one of them.

`FARM_ISA=LEVEL` caps the `local` device (and is the default of `--isa` on bench, build and
triangle, which caps every selected device of the level's arch); `native` (or an empty
value) is no cap. Stdlib only: every layer uses it.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from dataclasses import dataclass

from farm.errors import UsageError

ENV = "FARM_ISA"
NATIVE = "native"


@dataclass(frozen=True)
class Level:
    name: str
    arch: str
    features: frozenset[str]
    vector_bits: int


_AVX2 = frozenset({"avx2", "fma"})
_AVX512 = _AVX2 | {"avx512f", "avx512bw"}
_NEON = frozenset({"neon"})

# widest first within an arch (the order a device's own level is looked up in); avx2-vnni
# is a side branch of avx2 (Alder Lake), below amx but not below avx512
LEVELS: dict[str, tuple[Level, ...]] = {
    "x86_64": (
        Level("amx", "x86_64", _AVX512 | {"avx512vnni", "amx-tile", "amx-int8"}, 512),
        Level("avx512-vnni", "x86_64", _AVX512 | {"avx512vnni"}, 512),
        Level("avx512", "x86_64", _AVX512, 512),
        Level("avx2-vnni", "x86_64", _AVX2 | {"avxvnni"}, 256),
        Level("avx2", "x86_64", _AVX2, 256),
    ),
    "aarch64": (
        Level("i8mm", "aarch64", _NEON | {"dotprod", "i8mm"}, 128),
        Level("dotprod", "aarch64", _NEON | {"dotprod"}, 128),
        Level("baseline", "aarch64", _NEON, 128),
    ),
}
# what a cap may remove: the features the levels add, and wider ones no level has (SVE)
GOVERNED: dict[str, frozenset[str]] = {
    "x86_64": frozenset({"avxvnni", "avx512f", "avx512bw", "avx512vnni", "amx-tile",
                         "amx-int8"}),
    "aarch64": frozenset({"dotprod", "i8mm", "sve"}),
}
# the name of a device below every level of its arch
BELOW = {"x86_64": "x86-64", "aarch64": "armv8-a"}


def all_names() -> list[str]:
    return [lv.name for levels in LEVELS.values() for lv in reversed(levels)]


def level(name: str) -> Level:
    for levels in LEVELS.values():
        for lv in levels:
            if lv.name == name:
                return lv
    raise UsageError(f"unknown ISA level {name!r}",
                     hint=f"use one of {', '.join(all_names())} (or {NATIVE}: no cap)")


def native_level(arch: str, features: Iterable[str]) -> str:
    """The widest level a device with `features` runs (BELOW[arch] under the first)."""
    have = set(features)
    for lv in LEVELS.get(arch, ()):
        if lv.features <= have:
            return lv.name
    return BELOW.get(arch, arch)


def runnable(arch: str, features: Iterable[str]) -> list[str]:
    """Every level of `arch` a device with `features` runs, narrowest first."""
    have = set(features)
    return [lv.name for lv in reversed(LEVELS.get(arch, ())) if lv.features <= have]


def cap_features(arch: str, features: Iterable[str], name: str | None) -> tuple[str, ...]:
    """`features` with what the level `name` lacks of `GOVERNED` removed (None: all kept)."""
    if name is None:
        return tuple(features)
    drop = GOVERNED.get(arch, frozenset()) - level(name).features
    return tuple(f for f in features if f not in drop)


def removed_features(arch: str, name: str | None) -> tuple[str, ...]:
    """The governed features a cap at `name` takes away, sorted (for TVM's `-attr`s)."""
    if name is None:
        return ()
    return tuple(sorted(GOVERNED.get(arch, frozenset()) - level(name).features))


def requested(value: str | None = None) -> str | None:
    """The level asked for: `value` (an option), else $FARM_ISA; None for no cap."""
    text = (value if value is not None else os.environ.get(ENV, "")).strip()
    if not text or text == NATIVE:
        return None
    level(text)  # unknown names fail here, before any device is looked at
    return text


def check(name: str, arch: str, features: Iterable[str], device: str) -> Level:
    """The level `name` for a device of `arch` with `features`; UsageError when the name
    is unknown, of another arch, or needs a feature the device lacks (naming its level)."""
    lv = level(name)
    if lv.arch != arch:
        own = ", ".join(x.name for x in reversed(LEVELS.get(arch, ())))
        raise UsageError(f"ISA level {name} is an {lv.arch} level; device {device!r} is "
                         f"{arch}", hint=f"{arch} levels: {own or 'none'}")
    have = set(features)
    lacks = sorted(lv.features - have)
    if lacks:
        can = runnable(arch, have)
        raise UsageError(
            f"device {device!r} cannot run ISA level {name}: it lacks "
            f"{', '.join(lacks)}; its level is {native_level(arch, have)}",
            hint=f"cap it at one of {', '.join(can)}" if can else
            f"it runs no {arch} level farm names")
    return lv
