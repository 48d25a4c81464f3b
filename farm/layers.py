"""The layer order of `farm`'s packages, written once; `tests/test_layers.py` checks every
module against it (docs/ARCHITECTURE.md describes the same order in words).

A module in layer i may import its own package and any package of a layer below i. Packages
sharing a layer are siblings: neither imports the other. Lazy imports inside functions
count like top-level ones: a cycle hidden in a function is still a cycle.
"""

from __future__ import annotations

LAYERS: tuple[tuple[str, ...], ...] = (
    ("__init__", "errors", "paths", "categories", "layers"),  # bottom: any layer uses them
    ("inventory",),
    ("transports", "lab"),     # lab creates devices and writes an inventory
    ("devices",),              # pre-flight check, fan-out over transports
    ("build",),
    ("rpc",),                  # TVM tracker and RPC servers (uses build's RPC part)
    ("deploy",),
    ("protocol",),             # agent wire + host session
    ("results",),              # schema, statistics, store, printers, compare
    ("bench",),                # orchestration: scheduler, backends, recorder
    ("report",),
    ("views",),
    ("testing",),              # the pytest plugin's sessions and results (over bench)
    ("cli", "pytest_plugin"),  # front ends: the CLI, the pytest plugin
)


def layer_of(package: str) -> int:
    """Index of `package` (the name under `farm.`) in LAYERS; ValueError if unknown."""
    for index, members in enumerate(LAYERS):
        if package in members:
            return index
    raise ValueError(f"package farm.{package} is in no layer of farm/layers.py: add it there")
