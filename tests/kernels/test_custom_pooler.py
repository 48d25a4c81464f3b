"""The custom executor on corpus files with a pooler (BERT, ALBERT, RoBERTa) against ORT on the
source file: the Row op + FC (M = batch) + Tanh, ALBERT's tanh GELU, RoBERTa's position ids
from the padding mask, batch > 1, fused and unfused, natively and under qemu-aarch64."""

from __future__ import annotations

import struct
import zlib
from pathlib import Path

import numpy as np
import pytest
from fkhelpers import run_exec

from farm.models import ftns_module, make_inputs
from farm.models.corpus import corpus_model
from farm.models.frontend import canonicalize, make_spec
from farm.routes.custom.compile import compile_plan
from farm.routes.custom.plan_format import BUF_SEQS, HEADER_SIZE, read_header

OUTPUTS = ("last_hidden_state", "pooler_output")


def _prepare(tmp: Path, name: str, batch: int | None = None, seq: int | None = None
             ) -> tuple[Path, Path, dict[str, np.ndarray]]:
    """(canonical model, plan, ORT's outputs on the source file for the same inputs)."""
    import onnxruntime as ort

    src = corpus_model(name, tmp / "corpus")
    canon = canonicalize(src, make_spec(batch=batch, seq=seq), tmp / "canon").path
    plan = tmp / f"{canon.stem}.plan"
    info = compile_plan(canon, plan)
    assert info.op_counts.get("Row") == 1, info.op_counts
    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    sess = ort.InferenceSession(str(src), so, providers=["CPUExecutionProvider"])
    want = dict(zip([o.name for o in sess.get_outputs()],
                    sess.run(None, make_inputs(canon, 0)), strict=True))
    return canon, plan, want


def _check(res, want: dict[str, np.ndarray], atol: float = 1e-4) -> None:
    assert res.rc == 0, res.stderr
    got = ftns_module().read(str(res.out_file))
    for name in OUTPUTS:
        assert got[name].shape == want[name].shape, (name, got[name].shape, want[name].shape)
        np.testing.assert_allclose(got[name], want[name], atol=atol, rtol=0, err_msg=name)


@pytest.mark.parametrize("name", ["bert-opset14-fixed@small", "albert-opset14-fixed@small",
                                  "roberta-opset14-fixed@small", "bert-opset18-fixed@small",
                                  "albert-opset17-fixed+ortopt@small",  # FastGelu expanded
                                  "roberta-opset14-fixed+ortopt@small"])
def test_pooler_and_tanh_gelu_match_ort(tmp_path: Path, exe_x86: list[str], name: str) -> None:
    canon, plan, want = _prepare(tmp_path, name)
    for extra in ((), ("--unfused",), ("--threads", "2"), ("--isa", "generic")):
        _check(run_exec(exe_x86, plan, canon, tmp_path, *extra), want)


@pytest.mark.parametrize("name", ["bert-opset14-fixed+qdynamic@small",
                                  "bert-opset14-fixed+q4@small"])
def test_quantised_pooler_within_int8_bounds(tmp_path: Path, exe_x86: list[str], name: str) -> None:
    """The pooler's FC on int8 / Q4_0 weights with M = batch: the int8 bounds of
    test_custom_executor.TOL against ORT on the same file (per-row vs per-tensor activations)."""
    canon, plan, want = _prepare(tmp_path, name)
    res = run_exec(exe_x86, plan, canon, tmp_path)
    assert res.rc == 0, res.stderr
    got = ftns_module().read(str(res.out_file))
    for out in OUTPUTS:
        diff = np.abs(got[out] - want[out])
        assert diff.max() <= 0.25 and diff.mean() <= 0.03, (out, diff.max(), diff.mean())


def test_pooler_rows_per_sequence_with_batch_2(tmp_path: Path, exe_x86: list[str]) -> None:
    canon, plan, want = _prepare(tmp_path, "bert-opset14-dynamic@small", batch=2, seq=12)
    assert want["pooler_output"].shape[0] == 2
    res = run_exec(exe_x86, plan, canon, tmp_path, "--profile-runs", "1")
    _check(res, want)
    nodes = {n["name"]: n for n in res.ev("ops")[0]["nodes"]}
    assert nodes["/pooler/Gather"]["category"] == "other", nodes["/pooler/Gather"]


@pytest.mark.aarch64
@pytest.mark.parametrize("name", ["bert-opset14-fixed@small", "albert-opset14-fixed@small"])
def test_pooler_and_tanh_gelu_under_qemu(tmp_path: Path, exe_arm: list[str], name: str) -> None:
    canon, plan, want = _prepare(tmp_path, name)
    for isa in ("auto", "neon"):
        _check(run_exec(exe_arm, plan, canon, tmp_path, "--isa", isa, timeout=300), want)


def test_plan_mixing_row_kinds_is_refused(tmp_path: Path, exe_x86: list[str]) -> None:
    """Every buffer marked per-sequence: the loader names the op that needs per-token rows."""
    canon, plan, _ = _prepare(tmp_path, "bert-opset14-fixed@small")
    h = read_header(plan)
    data = bytearray(plan.read_bytes())
    first_buf = HEADER_SIZE + 56 * (h.n_inputs + h.n_outputs)
    for i in range(h.n_bufs):
        data[first_buf + 8 * i + 4: first_buf + 8 * i + 8] = struct.pack("<I", BUF_SEQS)
    data[32:36] = struct.pack("<I", zlib.crc32(bytes(data[HEADER_SIZE:])))
    bad = tmp_path / "rows.plan"
    bad.write_bytes(bytes(data))
    res = run_exec(exe_x86, bad, canon, tmp_path)
    assert res.rc == 1, res.stderr
    assert "needs per-token rows" in res.ev("error")[0]["message"]
