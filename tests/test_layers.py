"""Every module under farm/ imports only downwards (farm/layers.py): read with `ast`, so
imports inside functions count too."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from farm.layers import LAYERS, layer_of

FARM = Path(__file__).resolve().parents[1] / "farm"
PACKAGES = {p for layer in LAYERS for p in layer}


def package_of(path: Path, root: Path = FARM) -> str:
    """`farm/bench/runner.py` -> `bench`; `farm/errors.py` -> `errors`; `farm/__init__.py`
    (the version) -> `__init__`, which sits in the bottom layer."""
    return path.relative_to(root).parts[0].removesuffix(".py")


def farm_imports(path: Path) -> list[tuple[int, str]]:
    """(line, imported farm package) of every import in the file, however deep."""
    found: list[tuple[int, str]] = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names = [node.module]
            if node.module == "farm":  # `from farm import bench` or `__version__`
                names = [f"farm.{alias.name}" for alias in node.names]
                names = [n if n.split(".")[1] in PACKAGES else "farm.__init__"
                         for n in names]
        else:
            continue
        found += [(node.lineno, n.split(".")[1]) for n in names
                  if n.startswith("farm.") and n.count(".") >= 1]
    return found


def upward_imports(root: Path = FARM) -> list[str]:
    bad = []
    for path in sorted(root.rglob("*.py")):
        package = package_of(path, root)
        mine = layer_of(package)
        for line, target in farm_imports(path):
            if target == package:
                continue
            theirs = layer_of(target)
            if theirs >= mine:
                why = "a sibling" if theirs == mine else "a higher layer"
                bad.append(f"{path.relative_to(root.parent)}:{line} imports farm.{target} "
                           f"({why}: {package} is layer {mine}, {target} layer {theirs})")
    return bad


def test_every_package_has_a_layer() -> None:
    packages = {package_of(p) for p in FARM.rglob("*.py")}
    assert packages <= PACKAGES, f"packages missing from farm/layers.py: {packages - PACKAGES}"


def test_no_import_goes_up_a_layer() -> None:
    bad = upward_imports()
    assert not bad, "imports that go up (or sideways) a layer:\n" + "\n".join(bad)


def test_the_check_sees_lazy_upward_imports(tmp_path: Path) -> None:
    """The rule is not vacuous: a function-level import of a higher layer is caught."""
    root = tmp_path / "farm"
    (root / "results").mkdir(parents=True)
    (root / "results" / "store.py").write_text(
        "def f():\n    from farm.bench.runner import Bench\n    return Bench\n")
    (root / "build").mkdir()
    (root / "build" / "x.py").write_text("import farm.lab.lab\n")
    bad = upward_imports(root)
    assert len(bad) == 1 and "farm/results/store.py:2 imports farm.bench" in bad[0]


@pytest.mark.parametrize("package", ["errors", "cli"])
def test_layer_of_ends(package: str) -> None:
    assert layer_of(package) in (0, len(LAYERS) - 1)
