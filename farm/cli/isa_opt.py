"""`--isa LEVEL` of bench, triangle and build: cap farm's own routes (custom, TVM) at an ISA
level (farm/isa.py). The default is $FARM_ISA; `native` is no cap, also over $FARM_ISA."""

from __future__ import annotations

import argparse
from collections.abc import Sequence

from farm import isa
from farm.inventory.capped import require_arch
from farm.inventory.device import Device


def add_isa_option(p: argparse.ArgumentParser) -> None:
    p.add_argument("--isa", metavar="LEVEL", choices=[*isa.all_names(), isa.NATIVE],
                   help="cap the custom executor's kernels and TVM's target at this ISA level "
                        f"({', '.join(isa.all_names())}; default ${isa.ENV}, '{isa.NATIVE}' = "
                        "none); ORT cannot be capped")


def isa_from(args: argparse.Namespace, devices: Sequence[Device]) -> str | None:
    """The level asked for (the option, else $FARM_ISA); a level the user named that fits
    no selected device's arch is a UsageError (it would cap nothing)."""
    given = getattr(args, "isa", None)
    level = isa.requested(given)
    if given is not None:
        require_arch(devices, level)
    return level
