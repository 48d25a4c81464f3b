"""Real `torch.onnx.export` files of random-init Hugging Face encoders (issue #11): the five
families, each by the TorchScript exporter (opset 14, dynamic batch/sequence axes) and by the
dynamo exporter (opset 18, dynamic shapes, weights in FILE.onnx.data), through the routes on
`local` (CASES; all three routes with FARM_REAL_EXPORTS=all), agreeing with ORT on the file;
and the corpus generators checked against them.

Models are built from tiny configs (random init, nothing downloaded: tests/hf_export.py;
test_real_torch_exports_5x.py runs the same exports under transformers 5.x). The TorchScript files
keep the fresh init (zero biases, unit LayerNorm scales: the exporter shares them through
`Identity` nodes, a pattern the front-end must fold); the dynamo files get every parameter
perturbed, as a trained model's, so biases and scales are checked numerically too.
Needs the `export` extra (torch, transformers); skipped without it.
"""

from __future__ import annotations

import collections
import os
from pathlib import Path

import onnx
import pytest

from farm.models.corpus import corpus_model
from farm.models.frontend import canonicalize, make_spec

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

if not transformers.__version__.startswith("4."):
    # the export extra pins 4.57.6; transformers 5.x files are made in a child process
    # (test_real_torch_exports_5x.py)
    pytest.skip(f"transformers {transformers.__version__}: these tests need the 4.x the "
                "`export` extra pins", allow_module_level=True)

from hf_export import FAMILIES, export  # noqa: E402  (after the skips: it imports torch)
from route_agreement import bench_routes_agree  # noqa: E402

pytestmark = [pytest.mark.slow, pytest.mark.tvm]

EXPORTS = ("torchscript-opset14-dynamic", "dynamo-opset18")
SEQ = 24  # bound at bench time; the export traced 16, so the dynamic axes are really used


# Each bench costs ~3 s of CPU (~7 s wall under load), a TVM build ~5 s more: the suite runs
# each family once, both exporters covered, TVM on one file. FARM_REAL_EXPORTS=all runs every
# family x exporter on all three routes, as measured in
# docs/real-models.md. The canonical graphs TVM builds are checked against the corpus
# generators below, whose files TVM builds in test_real_models.py.
FULL = os.environ.get("FARM_REAL_EXPORTS") == "all"
CASES = ([(f, e) for f in FAMILIES for e in EXPORTS] if FULL else [
    ("bert", "torchscript-opset14-dynamic"),    # Identity-shared params, SDPA at opset 14
    ("distilbert", "dynamo-opset18"),            # SDPA mask without token types
    ("roberta", "dynamo-opset18"),               # int64 CumSum between Casts
    ("albert", "torchscript-opset14-dynamic"),   # gelu_new, shared layer
    ("mobilebert", "dynamo-opset18"),            # external data, 3-D Kᵀ; + TVM
])
TVM_CASES = {("mobilebert", "dynamo-opset18"), ("roberta", "dynamo-opset18")}


def _with_tvm(family: str, exporter: str) -> bool:
    return FULL or (family, exporter) in TVM_CASES


class _Exports:
    """Each (family, exporter) exported once per module, on first use."""

    def __init__(self, out: Path) -> None:
        self.out = out
        self.done: dict[tuple[str, str], Path] = {}

    def __getitem__(self, key: tuple[str, str]) -> Path:
        if key not in self.done:
            self.done[key] = export(*key, self.out)
        return self.done[key]


@pytest.fixture(scope="module")
def exports(tmp_path_factory: pytest.TempPathFactory) -> _Exports:
    return _Exports(tmp_path_factory.mktemp("real_exports"))


@pytest.fixture(autouse=True)
def farm_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FARM_HOME", str(tmp_path / "home"))


@pytest.mark.parametrize(("family", "exporter"), CASES)
def test_real_export_through_the_routes_on_local(family: str, exporter: str, tmp_path: Path,
                                                 exports: _Exports) -> None:
    path = exports[family, exporter]
    if exporter.startswith("dynamo"):  # the dynamo exporter's default: weights beside it
        assert Path(f"{path}.data").is_file()
    routes = ("ort", "tvm", "custom") if _with_tvm(family, exporter) else ("ort", "custom")
    recs = bench_routes_agree(path, routes, tmp_path, SEQ)
    for route in set(routes) - {"ort"}:
        shapes = recs[route]["build_flags"]["input_shapes"]
        assert all(d == [1, SEQ] for d in shapes.values()), shapes


def _canonical_ops(path: Path, out: Path) -> collections.Counter[str]:
    canon = canonicalize(path, make_spec([], None, 16), out)
    return collections.Counter(n.op_type for n in onnx.load(str(canon.path)).graph.node)


@pytest.mark.parametrize(("exporter", "corpus"), [
    # the corpus' opsets 11-17 are the eager attention (transformers' default before SDPA)
    ("torchscript-opset14-dynamic", "opset14-dynamic"),
    ("dynamo-opset18", "opset18-dynamic"),
])
@pytest.mark.parametrize("family", ["bert", "distilbert", "roberta", "albert"])
def test_corpus_generator_matches_the_real_export(family: str, exporter: str, corpus: str,
                                                  tmp_path: Path,
                                                  exports: _Exports) -> None:
    """After the front-end, the generated file and the real one are the same graph (same
    canonical op histogram): the generator reproduces what the routes are given."""
    if exporter.startswith("dynamo"):
        path = exports[family, exporter]  # perturbed already
    else:  # perturbed: a zero bias would let onnxscript drop its Add, as no trained model has
        path = export(family, exporter, tmp_path, "eager", perturb=True)
    real = _canonical_ops(path, tmp_path / "canon")
    gen = _canonical_ops(corpus_model(f"{family}-{corpus}@small", tmp_path / "corpus"),
                         tmp_path / "canon")
    assert real == gen, {op: (real[op], gen[op]) for op in set(real) | set(gen)
                         if real[op] != gen[op]}
