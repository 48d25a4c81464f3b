"""Issue 28: DeBERTa's disentangled attention runs in the fused attention op
(farm/routes/custom/lower_deberta.py): no node of an attention block on the generic fallback,
in fp32 and in both quantised forms; the executor's fused and unfused paths (the relative
terms as gathered products, the 2-D mask's padded query rows) agree with ORT on inputs with
padding, on x86 at every ISA level the host has and on the emulated aarch64 CPU. The kernel
itself is checked against its reference at awkward shapes by the harness
(kernels/tests/kernel_test.c, test_gather_mm)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
from fkhelpers import run_exec

from farm.models import ftns_module, make_inputs
from farm.models.corpus import corpus_model
from farm.models.frontend import canonicalize, make_spec
from farm.routes.custom.compile import compile_plan
from farm.routes.custom.lower import lower
from farm.routes.custom.passes import drop_dead
from farm.routes.custom.plan_format import OP_ATTENTION

pytestmark = pytest.mark.slow
pytest.importorskip("transformers")  # the `export` extra builds the corpus's HF files

SEQ = 24  # bound for the dynamic axes: not the generator's 16


@pytest.fixture(scope="module")
def made(tmp_path_factory: pytest.TempPathFactory):
    root = tmp_path_factory.mktemp("deberta")
    cache: dict[str, tuple[Path, Path, Path]] = {}

    def make(tool: str) -> tuple[Path, Path, Path]:
        if tool not in cache:
            work = root / (tool.strip("+") or "fp32")
            src = corpus_model(f"deberta-opset18-dynamic{tool}@small", work / "src")
            canon = canonicalize(src, make_spec(seq=SEQ), work / "canon").path
            plan = work / "model.plan"
            compile_plan(canon, plan)
            cache[tool] = (canon, plan, src)
        return cache[tool]

    return make


@pytest.mark.parametrize("tool", ["", "+qdynamic", "+qdq"])
def test_attention_lowers_without_fallback(made, tool: str) -> None:
    ir = lower(onnx.load(str(made(tool)[0])))
    drop_dead(ir)
    att = [op for op in ir.ops if op.kind == OP_ATTENTION]
    assert len(att) == 2  # one per layer, each with both relative terms and the 2-D mask
    for op in att:
        assert all(a is not None for a in op.arrays[1:5]) and op.params[6] == 1, op.name
    attention = [f for f in ir.fallback if "/attention/" in f[0]]
    assert not attention, attention
    # the embeddings' mask product is all that is left (Mul of the LayerNorm rows by the mask)
    assert {op for _, op, _ in ir.fallback} <= {"Mul", "Cast"}, ir.fallback


def _ort(src: Path, feeds: dict[str, np.ndarray]) -> np.ndarray:
    import onnxruntime as ort

    sess = ort.InferenceSession(str(src), providers=["CPUExecutionProvider"])
    return sess.run(None, feeds)[0]


@pytest.mark.parametrize("isa", ["native", "avx2", "generic"])
def test_fused_and_unfused_agree_with_ort(made, exe_x86: list[str], tmp_path: Path,
                                          isa: str) -> None:
    from farm.inventory.builtin import local_device

    if isa == "avx2" and "avx2" not in local_device().isa_features:
        pytest.skip("the host has no AVX2")
    canon, plan, src = made("")
    feeds = make_inputs(canon, 0)
    assert (feeds["attention_mask"] == 0).any()  # padded query rows: the 2-D mask's rows
    want = _ort(src, feeds)
    extra = () if isa == "native" else ("--isa", isa)
    for mode in ((), ("--unfused",)):
        res = run_exec(exe_x86, plan, canon, tmp_path, *extra, *mode)
        assert res.rc == 0, res.stderr
        got = next(iter(ftns_module().read(str(res.out_file)).values()))
        np.testing.assert_allclose(got.reshape(want.shape), want, atol=1e-4, err_msg=str(mode))


def test_aarch64_agrees_with_ort(made, exe_arm: list[str], tmp_path: Path) -> None:
    canon, plan, src = made("")
    want = _ort(src, make_inputs(canon, 0))
    res = run_exec(exe_arm, plan, canon, tmp_path)
    assert res.rc == 0, res.stderr
    got = next(iter(ftns_module().read(str(res.out_file)).values()))
    np.testing.assert_allclose(got.reshape(want.shape), want, atol=1e-4)
