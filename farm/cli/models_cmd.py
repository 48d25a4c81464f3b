"""`farm models list` shows presets and variants; `farm models build` builds them (cached)."""

from __future__ import annotations

import argparse
import dataclasses
import json

from rich.console import Console
from rich.table import Table

from farm.cli.shape_opts import add_shape_options
from farm.errors import UsageError
from farm.libout import capture
from farm.models import PRESETS, VARIANTS
from farm.models.config import preset
from farm.paths import state_dir


def register(sub: argparse._SubParsersAction) -> None:
    parser = sub.add_parser("models", help="list and build benchmark models")
    actions = parser.add_subparsers(dest="action", metavar="ACTION")
    listing = actions.add_parser("list", help="presets, variants and models already built")
    listing.add_argument("--output", choices=["table", "json"], default="table")
    listing.set_defaults(func=run_list)
    build = actions.add_parser("build", help="build a preset (or quantize an .onnx file)")
    build.add_argument("model", metavar="PRESET|FILE.onnx")
    build.add_argument("--variant", action="append", choices=list(VARIANTS),
                       help="variant to build (repeatable; default fp32)")
    build.add_argument("--all-variants", action="store_true", help="build every variant")
    build.add_argument("--seq", type=int, help="override the preset's sequence length")
    build.add_argument("--output", choices=["table", "json"], default="table")
    build.set_defaults(func=run_build)
    check = actions.add_parser("check", help="what a model file is and which routes take it")
    check.add_argument("file", metavar="FILE.onnx|PRESET|corpus:NAME",
                       help="an .onnx file, or a model name bench takes (built, then checked)")
    add_shape_options(check)
    check.add_argument("--output", choices=["table", "json"], default="table")
    check.set_defaults(func=run_check)
    parser.set_defaults(func=run_list, output="table")


def _mb(n: float) -> str:
    return f"{n / 1e6:.1f} MB"


def run_list(args: argparse.Namespace) -> int:
    built = sorted((state_dir() / "models").glob("*.onnx"))
    if args.output == "json":
        print(json.dumps({
            "presets": {n: {**c.to_dict(), "params": c.params(), "macs": c.macs()}
                        for n, c in PRESETS.items()},
            "variants": VARIANTS,
            "built": [{"file": str(p), "bytes": p.stat().st_size} for p in built],
        }, indent=2))
        return 0
    console = Console()
    presets = Table(title="presets (batch 1)")
    for col in ("preset", "layers×hidden/heads, ffn, seq, vocab", "params", "GMACs", "fp32"):
        presets.add_column(col, justify="left" if col[0] in "pl" else "right")
    for name, c in PRESETS.items():
        shape = f"{c.layers}×{c.hidden}/{c.heads}, {c.ffn}, {c.seq}, {c.vocab}"
        presets.add_row(name, shape, f"{c.params() / 1e6:.2f} M", f"{c.macs() / 1e9:.3f}",
                        "≈ " + _mb(4 * c.params()))
    console.print(presets)
    variants = Table(title="variants")
    variants.add_column("variant")
    variants.add_column("what")
    for name, what in VARIANTS.items():
        variants.add_row(name, what)
    console.print(variants)
    if built:
        cache = Table(title=f"built ({state_dir() / 'models'})")
        cache.add_column("file")
        cache.add_column("size", justify="right")
        for p in built:
            cache.add_row(p.name, _mb(p.stat().st_size))
        console.print(cache)
    return 0


def run_check(args: argparse.Namespace) -> int:
    """Exit 0 when every route takes the file, 3 when some do, 1 when none does."""
    from pathlib import Path

    from farm.models.build import resolve_model
    from farm.models.check import load_checked
    from farm.models.frontend import make_spec
    from farm.routes import ROUTES
    from farm.routes.check import check_file

    # the file-level judgement every command shares (a missing, empty, oversized or non-ONNX
    # file is one BuildError line, exit 1, as in bench, build and deploy); what the routes
    # then make of a valid file, ORT's refusal included, is the report's
    path = Path(args.file)
    if not path.exists() and (args.file in PRESETS or args.file.startswith("corpus:")):
        # the names bench takes: a preset or corpus file is built (cached) and checked as the
        # file it builds to, so the report names that file
        path = resolve_model(args.file).path
    load_checked(path)
    # the front-end's and TVM's chatter while checking goes to .farm/logs/ (farm.libout)
    with capture("models check") as cap:
        report = check_file(path, ROUTES, make_spec(args.shapes, args.batch, args.seq))
    if cap.summary():
        Console(stderr=True).print(f"farm: {cap.summary()}", markup=False, highlight=False,
                                   soft_wrap=True)
    oks = [v["ok"] for v in report["routes"].values()]
    if args.output == "json":
        print(json.dumps(report, indent=2))
    else:
        console = Console()
        console.print(f"{report['file']}: {report['quantisation']}, "
                      f"{report['params'] / 1e6:.2f} M params, "
                      + (f"{report['macs'] / 1e9:.3f} GMACs" if report.get("macs") else
                         "MACs unknown") + f", bound shapes {report.get('bound_shapes')}",
                      markup=False, highlight=False)
        io = Table(title="inputs and outputs")
        for col in ("kind", "name", "dtype", "shape"):
            io.add_column(col)
        for kind in ("inputs", "outputs"):
            for t in report[kind]:
                io.add_row(kind[:-1], t["name"], t["dtype"],
                           "unknown" if t["shape"] is None else str(t["shape"]))
        console.print(io)
        routes = Table(title="routes")
        for col in ("route", "builds", "stopped at", "why"):
            routes.add_column(col)
        for name, v in report["routes"].items():
            where = f"{v.get('node')} ({v.get('op')})" if v.get("node") else ""
            routes.add_row(name, "yes" if v["ok"] else "NO", where,
                           v.get("warning") or v["reason"])
        console.print(routes)
        for name, v in report["routes"].items():
            if v.get("fallback"):  # nodes a route runs on plain kernels (custom's fallback)
                fb = Table(title=f"{name}: nodes on fallback kernels")
                fb.add_column("node", overflow="fold")  # whole names: users grep for them
                fb.add_column("op", no_wrap=True)
                fb.add_column("why not fused")
                for n in v["fallback"]:
                    fb.add_row(n["node"], n["op"], n["why"])
                console.print(fb)
    return 0 if all(oks) else (3 if any(oks) else 1)


def run_build(args: argparse.Namespace) -> int:
    from farm.models import build_model, resolve_model

    variants = list(VARIANTS) if args.all_variants else (args.variant or ["fp32"])
    if args.seq is not None:
        if args.model not in PRESETS:
            raise UsageError("--seq applies to presets only, not to an .onnx file")
        config = dataclasses.replace(preset(args.model), seq=args.seq)
        infos = [build_model(config, v, name=f"{args.model}-s{args.seq}") for v in variants]
    else:
        infos = [resolve_model(args.model, v) for v in variants]
    if args.output == "json":
        print(json.dumps([{"path": str(i.path), "sha256": i.sha256, "preset": i.preset,
                           "variant": i.variant, "bytes": i.size_bytes,
                           "config": i.config.to_dict() if i.config else None}
                          for i in infos], indent=2))
        return 0
    table = Table(title=f"models for {args.model}")
    for col in ("variant", "sha256", "size", "path"):
        table.add_column(col)
    for i in infos:
        table.add_row(i.variant, i.sha256[:12], _mb(i.size_bytes), str(i.path))
    Console().print(table)
    return 0
