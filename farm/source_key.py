"""`source_digest(module)`: the sha256 of the source of a project module and of every
project module it imports, transitively (the import reader of farm/layers.py: function-level
and relative imports count), for the keys of builds that are a pure function of their
inputs and of the code that made them (TVM libraries, custom plans). A hand-kept file list
misses a module the builder starts to import (it once missed the front-end's graph.py, which
the TVM QDQ rewrite imports: a change there reused a stale build).

Reading the imports means parsing every module of the closure (~0.15 s each for the TVM
builder and the plan compiler, paid by every bench whose builds were all cached), so
`source_digest` remembers the closure it found in `<build cache>/source-keys/`: when the
modules it names still hash to the digest it saved, with the same set of module files
around them, the imports in them are the same and so is the closure; only then is the
saved digest used. Any edit, added or removed module reads the imports again.
"""

from __future__ import annotations

import hashlib
import json
import os
from functools import cache
from pathlib import Path

from farm.layers import all_modules, imports_of
from farm.paths import build_cache_dir

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


def _digest(names: list[str], modules: dict[str, Path]) -> str:
    digest = hashlib.sha256()
    for name in names:
        digest.update(name.encode() + b"\0" + modules[name].read_bytes())
    return digest.hexdigest()


def digest_of(module: str, root: Path = FARM_ROOT) -> str:
    return _digest(closure(module, root), all_modules(root))


def _saved_path(module: str, root: Path) -> Path:
    where = hashlib.sha256(str(root).encode()).hexdigest()[:12]
    return build_cache_dir() / "source-keys" / f"{where}-{module}.json"


def remembered_digest(module: str, root: Path = FARM_ROOT) -> str:
    """`digest_of`, reusing the closure saved by an earlier process when still valid."""
    modules = all_modules(root)
    layout = hashlib.sha256("\n".join(modules).encode()).hexdigest()
    path = _saved_path(module, root)
    try:
        saved = json.loads(path.read_text())
        names = [str(n) for n in saved["closure"]]
        if saved["layout"] == layout and all(n in modules for n in names) \
                and _digest(names, modules) == saved["digest"]:
            return str(saved["digest"])
    except (OSError, ValueError, KeyError, TypeError):
        pass  # nothing saved, or from another farm: read the imports
    names = closure(module, root)
    digest = _digest(names, modules)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f"{path.name}.tmp{os.getpid()}")
    tmp.write_text(json.dumps({"layout": layout, "closure": names, "digest": digest}))
    tmp.replace(path)
    return digest


@cache
def source_digest(module: str) -> str:
    """`remembered_digest` for the installed tree, once per process (the source does not
    change under a running farm)."""
    return remembered_digest(module)
