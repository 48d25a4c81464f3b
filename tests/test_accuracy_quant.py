"""Quantized variants against the fp32 reference: a whole-tensor bound, not element-wise."""

from __future__ import annotations

import numpy as np

from farm.bench.accuracy import compare_outputs


def test_quantization_noise_with_outliers_passes_against_fp32_but_not_elementwise():
    rng = np.random.default_rng(0)
    ref = rng.standard_normal((1, 32, 64)).astype(np.float32)
    cand = ref + rng.normal(0, 0.02, ref.shape).astype(np.float32)
    cand[0, 0, :3] += 0.5  # a few outliers carry the maximum, as int8 QDQ does
    elementwise = compare_outputs(cand, ref, "int8-qdq")
    assert not elementwise.ok and elementwise.rule == "elementwise"
    sane = compare_outputs(cand, ref, "int8-qdq", against_fp32=True)
    assert sane.ok and sane.rule == "quantized-vs-fp32" and sane.rel_rms < 0.15


def test_garbage_fails_against_fp32():
    rng = np.random.default_rng(1)
    ref = rng.standard_normal((4, 64)).astype(np.float32)
    garbage = rng.standard_normal((4, 64)).astype(np.float32)
    result = compare_outputs(garbage, ref, "int4", against_fp32=True)
    assert not result.ok and "cosine" in result.detail


def test_fp32_keeps_the_elementwise_rule_even_against_fp32():
    ref = np.ones((8,), np.float32)
    result = compare_outputs(ref + 0.01, ref, "fp32", against_fp32=True)
    assert not result.ok and result.rule == "elementwise"
