"""Every module under farm/ imports only downwards (farm/layers.py), route packages never
import one another, and no module is part of an import cycle: read with `ast`, so imports
inside functions, relative imports and `import_module` count too."""

from __future__ import annotations

from pathlib import Path

import pytest

from farm.layers import (
    LAYERS,
    SIBLING_SUBPACKAGES,
    all_modules,
    cycles,
    import_graph,
    imports_of,
    layer_of,
)

FARM = Path(__file__).resolve().parents[1] / "farm"
PACKAGES = {p for layer in LAYERS for p in layer}


def package_of(module: str) -> str:
    """`farm.bench.runner` -> `bench`; `farm.errors` -> `errors`; `farm` -> `__init__`."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "__init__"


def upward_imports(root: Path = FARM) -> list[str]:
    bad = []
    modules = all_modules(root)
    for name, path in modules.items():
        package = package_of(name)
        mine = layer_of(package)
        for line, target in imports_of(path, root, modules):
            theirs_package = package_of(target)
            if theirs_package == package:
                subs = SIBLING_SUBPACKAGES.get(package, ())
                a, b = name.split(".")[2:3], target.split(".")[2:3]
                if a and b and a != b and a[0] in subs and b[0] in subs:
                    bad.append(f"{path.relative_to(root.parent)}:{line} imports {target} "
                               f"(sibling sub-packages of farm.{package})")
                continue
            theirs = layer_of(theirs_package)
            if theirs >= mine:
                why = "a sibling" if theirs == mine else "a higher layer"
                bad.append(f"{path.relative_to(root.parent)}:{line} imports {target} "
                           f"({why}: {package} is layer {mine}, {theirs_package} layer "
                           f"{theirs})")
    return bad


def test_every_package_has_a_layer() -> None:
    packages = {package_of(m) for m in all_modules(FARM)}
    assert packages <= PACKAGES, f"packages missing from farm/layers.py: {packages - PACKAGES}"


def test_no_import_goes_up_a_layer() -> None:
    bad = upward_imports()
    assert not bad, "imports that go up (or sideways) a layer:\n" + "\n".join(bad)


def test_no_import_cycle_anywhere() -> None:
    found = cycles(import_graph(FARM))
    assert not found, "import cycles:\n" + "\n".join(" <-> ".join(c) for c in found)


def _tree(root: Path, files: dict[str, str]) -> Path:
    for rel, text in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return root


def test_the_check_sees_lazy_upward_imports(tmp_path: Path) -> None:
    """The rule is not vacuous: a function-level import of a higher layer is caught."""
    root = _tree(tmp_path / "farm", {
        "results/store.py": "def f():\n    from farm.bench.runner import Bench\n    return Bench\n",
        "bench/runner.py": "Bench = 1\n",
        "models/x.py": "import farm.lab.lab\n",
        "lab/lab.py": "",
    })
    bad = upward_imports(root)
    assert len(bad) == 1 and "farm/results/store.py:2 imports farm.bench.runner" in bad[0]


def test_the_check_sees_relative_import_module_and_route_siblings(tmp_path: Path) -> None:
    root = _tree(tmp_path / "farm", {
        "results/__init__.py": "",
        "results/store.py": "from ..bench import runner\n",
        "results/load.py": "import importlib\nimportlib.import_module('farm.report.html')\n",
        "results/lazy.py": "import importlib\n"
                           "def f(n):\n    return importlib.import_module(f'farm.views.{n}')\n",
        "bench/__init__.py": "", "bench/runner.py": "",
        "report/html.py": "", "views/__init__.py": "",
        "routes/__init__.py": "", "routes/tvm/__init__.py": "",
        "routes/tvm/route.py": "from farm.routes.custom import lower\n",
        "routes/custom/__init__.py": "", "routes/custom/lower.py": "",
    })
    bad = "\n".join(upward_imports(root))
    assert "farm/results/store.py:1 imports farm.bench.runner" in bad
    assert "farm/results/load.py:2 imports farm.report.html" in bad
    assert "farm/results/lazy.py:3 imports farm.views" in bad
    assert "imports farm.routes.custom.lower (sibling sub-packages of farm.routes)" in bad


def test_the_cycle_check_sees_cycles_inside_a_package(tmp_path: Path) -> None:
    root = _tree(tmp_path / "farm", {
        "bench/__init__.py": "",
        "bench/a.py": "from farm.bench import b\n",
        "bench/b.py": "from typing import TYPE_CHECKING\n"
                      "if TYPE_CHECKING:\n    from farm.bench.c import C\n",
        "bench/c.py": "def f():\n    from . import a\n",
        "bench/d.py": "from farm.bench import a\n",
    })
    assert cycles(import_graph(root)) == [["farm.bench.a", "farm.bench.b", "farm.bench.c"]]


@pytest.mark.parametrize("package", ["errors", "cli"])
def test_layer_of_ends(package: str) -> None:
    assert layer_of(package) in (0, len(LAYERS) - 1)
