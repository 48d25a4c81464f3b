"""Build cache keys follow the code: the digest of a builder covers every project module it
imports, transitively, and nothing else."""

from __future__ import annotations

import shutil
from pathlib import Path

from farm.source_key import closure, digest_of

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
