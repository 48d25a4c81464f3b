"""`--shape NAME=D0,D1,...` (repeatable), `--batch N`, `--seq N`: the input-shape options of
build, bench, triangle, tune and models check (bound by farm/models/frontend)."""

from __future__ import annotations

import argparse
from typing import Any


def add_shape_options(p: argparse.ArgumentParser, *, reference: bool = False) -> None:
    p.add_argument("--shape", action="append", dest="shapes", metavar="NAME=D0,D1,...",
                   help="bind an input's dims (repeatable); symbolic dims are bound before "
                        "the TVM and custom builds")
    p.add_argument("--batch", type=int, metavar="N", help="dim 0 of every symbolic input")
    p.add_argument("--seq", type=int, metavar="N", help="dim 1 (sequence) of symbolic inputs")
    if reference:
        p.add_argument("--reference", metavar="FILE.onnx",
                       help="fp32 model a pre-quantised --model is judged against (default: "
                            "onnxruntime's run of the same file)")


def shape_kwargs(args: argparse.Namespace) -> dict[str, Any]:
    """BenchConfig fields from the parsed options (validated by make_spec)."""
    from farm.models.frontend.shapes import make_spec

    spec = make_spec(getattr(args, "shapes", None), getattr(args, "batch", None),
                     getattr(args, "seq", None))
    return {"shapes": tuple(sorted(spec.shapes.items())), "batch": spec.batch, "seq": spec.seq,
            "reference": getattr(args, "reference", None)}
