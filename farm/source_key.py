"""`source_digest(module)`: the sha256 of the source of a project module and of every
project module it imports, transitively (the import reader of farm/layers.py: function-level
and relative imports count), for the keys of builds that are a pure function of their
inputs and of the code that made them (TVM libraries, custom plans). A hand-kept file list
misses a module the builder starts to import (it once missed the front-end's graph.py, which
the TVM QDQ rewrite imports: a change there reused a stale build)."""

from __future__ import annotations

import hashlib
from functools import cache
from pathlib import Path

from farm.layers import all_modules, imports_of

FARM_ROOT = Path(__file__).resolve().parent


def closure(module: str, root: Path = FARM_ROOT) -> list[str]:
    """`module` and every project module it reaches by imports, sorted."""
    modules = all_modules(root)
    if module not in modules:
        raise ValueError(f"{module} is not a module under {root}")
    seen: set[str] = set()
    todo = [module]
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        todo += [t for _, t in imports_of(modules[name], root, modules) if t not in seen]
    return sorted(seen)


def digest_of(module: str, root: Path = FARM_ROOT) -> str:
    modules = all_modules(root)
    digest = hashlib.sha256()
    for name in closure(module, root):
        digest.update(name.encode() + b"\0" + modules[name].read_bytes())
    return digest.hexdigest()


@cache
def source_digest(module: str) -> str:
    """`digest_of` for the installed tree, once per process (the source does not change
    under a running farm)."""
    return digest_of(module)
