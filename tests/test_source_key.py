"""Build cache keys follow the code: the digest of a builder covers every project module it
imports, transitively, and nothing else."""

from __future__ import annotations

import shutil
from pathlib import Path

from farm.source_key import closure, digest_of, remembered_digest

FARM = Path(__file__).resolve().parents[1] / "farm"


def _copy(tmp_path: Path) -> Path:
    root = tmp_path / "farm"
    shutil.copytree(FARM, root, ignore=shutil.ignore_patterns("__pycache__"))
    return root


def test_tvm_key_covers_the_front_end_graph_it_imports(tmp_path: Path) -> None:
    root = _copy(tmp_path)
    assert "farm.models.frontend.graph" in closure("farm.routes.tvm.builder", root)
    before = digest_of("farm.routes.tvm.builder", root)
    custom_before = digest_of("farm.routes.custom.compile", root)
    # an edit in a module the TVM builder reaches only through qdq.py's import
    graph = root / "models" / "frontend" / "graph.py"
    graph.write_text(graph.read_text() + "\n# changed\n")
    assert digest_of("farm.routes.tvm.builder", root) != before
    # a module neither builder imports leaves both keys alone
    live = root / "views" / "live.py"
    after = digest_of("farm.routes.tvm.builder", root)
    live.write_text(live.read_text() + "\n# changed\n")
    assert digest_of("farm.routes.tvm.builder", root) == after
    assert "farm.views.live" not in closure("farm.routes.custom.compile", root)
    assert digest_of("farm.routes.custom.compile", root) == custom_before  # graph.py: TVM's


def test_custom_key_covers_its_lowering_modules(tmp_path: Path) -> None:
    root = _copy(tmp_path)
    before = digest_of("farm.routes.custom.compile", root)
    pooler = root / "routes" / "custom" / "lower_pooler.py"
    pooler.write_text(pooler.read_text() + "\n# changed\n")
    assert digest_of("farm.routes.custom.compile", root) != before


def test_remembered_digest_follows_edits_and_new_imports(tmp_path: Path) -> None:
    """The closure saved by one process is reused by the next only while the modules it
    names are unchanged: an edit, or an import of a module it did not reach, is seen."""
    root = _copy(tmp_path)
    first = remembered_digest("farm.routes.custom.compile", root)
    assert first == digest_of("farm.routes.custom.compile", root)
    assert remembered_digest("farm.routes.custom.compile", root) == first  # the saved one
    pooler = root / "routes" / "custom" / "lower_pooler.py"
    pooler.write_text(pooler.read_text() + "\nfrom farm.views import live  # noqa\n")
    edited = remembered_digest("farm.routes.custom.compile", root)
    assert edited != first and edited == digest_of("farm.routes.custom.compile", root)
    # the new import's target is in the closure now: editing it changes the key
    live = root / "views" / "live.py"
    live.write_text(live.read_text() + "\n# changed\n")
    assert remembered_digest("farm.routes.custom.compile", root) != edited


def test_remembered_digest_sees_a_new_module_file(tmp_path: Path) -> None:
    """`from farm.routes.custom import x` names a module only once x.py exists."""
    root = _copy(tmp_path)
    compile_py = root / "routes" / "custom" / "compile.py"
    compile_py.write_text(compile_py.read_text()
                          + "\nfrom farm.routes.custom import brand_new  # noqa\n")
    before = remembered_digest("farm.routes.custom.compile", root)
    (root / "routes" / "custom" / "brand_new.py").write_text("X = 1\n")
    after = remembered_digest("farm.routes.custom.compile", root)
    assert after != before
    assert "farm.routes.custom.brand_new" in closure("farm.routes.custom.compile", root)
