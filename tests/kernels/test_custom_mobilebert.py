"""The custom route on the real MobileBERT graph (small dims): lowering (trigram op, NoNorm
folded into GEMMs, after a residual into the FC's epilogue, ReLU epilogue, shared Q/K merged)
and the executor's output against ONNX Runtime, natively (fused, unfused, 2 threads) and
under qemu."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
from fkhelpers import int4_block32, ort_outputs, run_exec

from farm.models import build_model
from farm.models.corpus.mobilebert_config import MobileBertConfig
from farm.routes.custom.compile import compile_plan

SMALL = MobileBertConfig(layers=2, hidden=64, embedding=32, bottleneck=32, heads=2,
                         intermediate=64, seq=16, vocab=512, max_positions=64)
# (max abs, mean abs) vs ORT on the same model file (int8: per-row vs per-tensor activations)
TOL = {"fp32": (1e-4, 1e-5), "int8-dynamic": (0.1, 0.02), "int4": (0.02, 1e-3)}


@pytest.fixture(scope="module")
def small(tmp_path_factory: pytest.TempPathFactory) -> Callable[[str], Path]:
    out = tmp_path_factory.mktemp("mobilebert")
    cache: dict[str, Path] = {}

    def get(variant: str) -> Path:
        """int4: the 32-block file (the q4 GEMM's arithmetic, fkhelpers.KERNEL_Q4_OPTIONS)."""
        if variant not in cache:
            cache[variant] = (int4_block32(get("fp32"), out) if variant == "int4"
                              else build_model(SMALL, variant, out).path)
        return cache[variant]

    return get


def _close(got: np.ndarray, want: np.ndarray, variant: str) -> None:
    diff = np.abs(got - want)
    mx, mean = TOL[variant]
    assert got.shape == want.shape and diff.max() <= mx and diff.mean() <= mean, (
        variant, diff.max(), diff.mean())


def test_plan_has_mobilebert_ops_and_folds_nonorm(small, tmp_path) -> None:
    info = compile_plan(small("fp32"), tmp_path / "p.plan")
    # bottlenecks, qk, v, attention out, 2 per FFN, output bottleneck
    per_layer_fc = 2 + 1 + 1 + 1 + 2 * SMALL.ffns + 1
    assert info.op_counts == {"Trigram": 1, "Embed": 1, "FC": 1 + SMALL.layers * per_layer_fc,
                              "Attention": SMALL.layers}
    # NoNorm after a GEMM (embeddings, both bottlenecks) is folded into weights; the ones after
    # a residual Add (attention output, each FFN, output bottleneck) into the FC before them,
    # as its residual epilogue; Q and K (shared input) are one GEMM, V reads the hidden state
    assert info.folded_norms == SMALL.layers * (SMALL.ffns + 2)
    assert info.merged_qkv == SMALL.layers
    unmerged = compile_plan(small("fp32"), tmp_path / "u.plan", fuse_qkv=False)
    assert unmerged.op_counts["FC"] == info.op_counts["FC"] + SMALL.layers
    # a QDQ model's int8 weights stay int8 for the int8 GEMM (qdq.py)
    for variant, wtype in (("int8-dynamic", "int8"), ("int4", "q4_0"), ("int8-qdq", "int8")):
        assert compile_plan(small(variant), tmp_path / f"{variant}.plan").weight_types == {
            wtype: info.op_counts["FC"]}


@pytest.mark.parametrize("variant", ["fp32", "int8-dynamic", "int4"])
def test_matches_ort_fused_unfused_and_threads(small, tmp_path, exe_x86, variant) -> None:
    model = small(variant)
    plan = tmp_path / f"{variant}.plan"
    compile_plan(model, plan)
    # int4: ORT at accuracy_level 4 on 32-blocks (int8 activations per block), the executor's
    # arithmetic
    want = ort_outputs(model, int8_compute=variant == "int4")
    fused = run_exec(exe_x86, plan, model, tmp_path, "--threads", "2", "--profile-runs", "1")
    unfused = run_exec(exe_x86, plan, model, tmp_path, "--unfused", "--profile-runs", "1")
    assert fused.rc == 0 and unfused.rc == 0, fused.stderr + unfused.stderr
    _close(fused.output(), want, variant)
    np.testing.assert_allclose(unfused.output(), fused.output(), atol=1e-4)
    f_cat, u_cat = fused.ev("ops")[0]["categories"], unfused.ev("ops")[0]["categories"]
    # ReLU and the residual NoNorm are GEMM epilogues when fused (their time is fc), steps of
    # their own unfused, charged to gelu and layernorm (NoNorm's row)
    assert f_cat["gelu"] == 0.0 < u_cat["gelu"]
    assert f_cat["layernorm"] == 0.0 < u_cat["layernorm"]
    steps = {n["name"].rsplit("/", 1)[-1] for n in unfused.ev("ops")[0]["nodes"]}
    assert {"relu", "residual", "bias"} <= steps
    ops = {n["op"] for n in fused.ev("ops")[0]["nodes"]}
    assert {"Trigram", "FC", "Attention", "Embed"} <= ops and "NoNorm" not in ops


def test_every_isa_agrees(small, tmp_path, exe_x86) -> None:
    model = small("fp32")
    plan = tmp_path / "isa.plan"
    compile_plan(model, plan)
    want = ort_outputs(model)
    for isa in ("generic", "avx2", "auto"):
        res = run_exec(exe_x86, plan, model, tmp_path, "--isa", isa)
        assert res.rc == 0, res.stderr
        _close(res.output(), want, "fp32")


def test_qdq_model_runs_as_accurately_as_ort(small, tmp_path, exe_x86) -> None:
    model = small("int8-qdq")
    plan = tmp_path / "qdq.plan"
    compile_plan(model, plan)
    res = run_exec(exe_x86, plan, model, tmp_path)
    assert res.rc == 0, res.stderr
    ref, ort_q = ort_outputs(small("fp32")), ort_outputs(model)
    ours, theirs = np.abs(res.output() - ref).mean(), np.abs(ort_q - ref).mean()
    assert ours <= 1.5 * theirs, (ours, theirs)


@pytest.mark.parametrize("quant", ["int8", "q4_0"])
def test_quantised_here_from_fp32(small, tmp_path, exe_x86, quant) -> None:
    """NoNorm folded into weights quantised by the plan compiler: still close to fp32."""
    plan = tmp_path / f"{quant}.plan"
    compile_plan(small("fp32"), plan, quant=quant)
    res = run_exec(exe_x86, plan, small("fp32"), tmp_path)
    assert res.rc == 0, res.stderr
    ref = ort_outputs(small("fp32"))
    cos = float((res.output() * ref).sum() / np.linalg.norm(res.output()) / np.linalg.norm(ref))
    assert cos > (0.99 if quant == "int8" else 0.95), cos


@pytest.mark.aarch64
@pytest.mark.parametrize("variant", ["fp32", "int8-dynamic", "int4"])
def test_aarch64_matches_ort_under_qemu(small, tmp_path, exe_arm, variant) -> None:
    model = small(variant)
    plan = tmp_path / f"arm-{variant}.plan"
    compile_plan(model, plan)
    for extra in ((), ("--unfused",)):
        res = run_exec(exe_arm, plan, model, tmp_path, "--threads", "2", *extra)
        assert res.rc == 0, res.stderr
        _close(res.output(), ort_outputs(model, int8_compute=variant == "int4"), variant)


def test_residual_epilogue_with_an_activation_is_refused(small, tmp_path, exe_x86) -> None:
    """The loader takes an FC with a residual input only as FK_EPI_BIAS_RES (bias, then the
    residual times its scale, no activation): a plan that asks for both names the op."""
    import subprocess

    import onnx

    from farm.routes.custom.ir import finalize
    from farm.routes.custom.lower import lower
    from farm.routes.custom.passes import allocate, fold_residual_norms, merge_qkv
    from farm.routes.custom.plan_format import ACT_RELU, OP_FC, serialize

    ir = lower(onnx.load(str(small("fp32"))))
    merge_qkv(ir)
    assert fold_residual_norms(ir) == SMALL.layers * (SMALL.ffns + 2)
    fc = next(op for op in ir.ops if op.kind == OP_FC and op.res_scale is not None)
    fc.params[3] = ACT_RELU
    plan = tmp_path / "bad.plan"
    plan.write_bytes(serialize(finalize(ir, *allocate(ir), set())))
    out = subprocess.run([*exe_x86, "--check", str(plan)], capture_output=True, text=True,
                         timeout=60)
    assert out.returncode == 1
    assert fc.name[:40] in out.stdout and "residual input" in out.stdout, out.stdout
