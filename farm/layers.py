"""The layer order of `farm`'s packages, written once, and the reader of the imports that
`tests/test_layers.py` checks against it (docs/ARCHITECTURE.md describes the same order in
words).

A module in layer i may import its own package and any package of a layer below i. Packages
sharing a layer are siblings: neither imports the other. Inside a package the same holds
for the sub-packages listed in SIBLING_SUBPACKAGES (one route never imports another). And
no module takes part in an import cycle, inside a package too: the modules form a DAG.

What counts as an import (`imports_of`): `import x`, `from x import y` (y itself when it is
a module), relative imports resolved against the module's package, and
`importlib.import_module("farm...")` / `import_module(f"farm.pkg.{...}")` (the constant
prefix); imports inside functions and under TYPE_CHECKING count like top-level ones: a cycle
hidden in a function, or kept alive by a type annotation, is still a cycle.
"""

from __future__ import annotations

import ast
from pathlib import Path

LAYERS: tuple[tuple[str, ...], ...] = (
    # bottom: any layer uses them
    ("__init__", "errors", "paths", "categories", "layers", "followup", "process"),
    # what the routes built (for deploy); build-key digests; libraries' output to logs;
    # ISA levels (caps)
    ("artifacts", "source_key", "libout", "isa"),
    ("inventory",),
    ("transports", "lab"),     # lab creates devices and writes an inventory
    ("devices",),              # pre-flight check, fan-out over transports
    ("models",),               # loading, front-end, quantisation, the corpus
    ("routes",),               # one package per route (ort, tvm, custom) + the registry
    ("rpc",),                  # TVM tracker and RPC servers (uses the tvm route's RPC part)
    ("deploy",),
    ("protocol",),             # agent wire + host session
    ("results",),              # schema, statistics, store, printers, compare
    ("bench",),                # orchestration: scheduler, backends, recorder
    ("report",),
    ("views",),
    ("testing",),              # the pytest plugin's sessions and results (over bench)
    ("cli", "pytest_plugin"),  # front ends: the CLI, the pytest plugin
)

# package -> its sub-packages that must not import one another
SIBLING_SUBPACKAGES: dict[str, tuple[str, ...]] = {"routes": ("ort", "tvm", "custom")}


def layer_of(package: str) -> int:
    """Index of `package` (the name under `farm.`) in LAYERS; ValueError if unknown."""
    for index, members in enumerate(LAYERS):
        if package in members:
            return index
    raise ValueError(f"package farm.{package} is in no layer of farm/layers.py: add it there")


def module_name(path: Path, root: Path) -> str:
    """`<root>/bench/runner.py` -> `farm.bench.runner`; a package's `__init__.py` -> the
    package (`farm.routes`); `<root>/__init__.py` -> `farm`."""
    parts = list(path.relative_to(root).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join([root.name, *parts])


def all_modules(root: Path) -> dict[str, Path]:
    return {module_name(p, root): p for p in sorted(root.rglob("*.py"))}


def _import_module_target(call: ast.Call) -> str | None:
    func = call.func
    name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", None)
    if name != "import_module" or not call.args:
        return None
    arg = call.args[0]
    if isinstance(arg, ast.Constant) and isinstance(arg.value, str):
        return arg.value
    if isinstance(arg, ast.JoinedStr) and arg.values and isinstance(arg.values[0], ast.Constant):
        return str(arg.values[0].value).rstrip(".") or None  # the constant prefix
    return None


def imports_of(path: Path, root: Path, modules: dict[str, Path]) -> list[tuple[int, str]]:
    """(line, imported project module) of every import in the file, however deep; a name
    imported from a package is the module itself when it is one."""
    me = module_name(path, root)
    package = me if path.name == "__init__.py" else me.rpartition(".")[0]
    found: list[tuple[int, str]] = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        targets: list[str] = []
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[:len(base) - (node.level - 1)]
                source = ".".join(base + ([node.module] if node.module else []))
            else:
                source = node.module or ""
            targets = [f"{source}.{a.name}" if f"{source}.{a.name}" in modules else source
                       for a in node.names]
        elif isinstance(node, ast.Call):
            target = _import_module_target(node)
            targets = [target] if target else []
        for target in targets:
            # the deepest project module the name reaches (`farm.x.y.Name` -> `farm.x.y`)
            while target and target not in modules:
                target = target.rpartition(".")[0]
            if target and target != me:
                found.append((node.lineno, target))
    return found


def import_graph(root: Path) -> dict[str, set[str]]:
    modules = all_modules(root)
    return {name: {t for _, t in imports_of(path, root, modules)}
            for name, path in modules.items()}


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in graph.get(node, ()):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return sorted(found)
