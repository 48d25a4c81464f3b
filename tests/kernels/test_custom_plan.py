"""Plan compiler output and the executor's handling of damaged plans."""

from __future__ import annotations

import random
import struct
import subprocess
import zlib
from pathlib import Path

import onnx
import pytest
from fkhelpers import run_exec

from farm.errors import BuildError
from farm.models import write_inputs
from farm.routes.custom.compile import compile_plan
from farm.routes.custom.plan_format import HEADER_SIZE, read_header


@pytest.fixture
def fp32_plan(tiny, tmp_path) -> tuple[Path, Path]:
    model = tiny("fp32")
    plan = tmp_path / "fp32.plan"
    compile_plan(model, plan)
    return model, plan


def test_plan_info_and_determinism(tiny, tmp_path) -> None:
    model = tiny("fp32")
    info = compile_plan(model, tmp_path / "a.plan")
    assert info.op_counts == {"Embed": 1, "LayerNorm": 5, "FC": 8, "Attention": 2}
    assert info.merged_qkv == 2 and info.weight_types == {"fp32": 8}
    unmerged = compile_plan(model, tmp_path / "b.plan", fuse_qkv=False)
    assert unmerged.op_counts["FC"] == 12
    compile_plan(model, tmp_path / "c.plan")
    assert (tmp_path / "a.plan").read_bytes() == (tmp_path / "c.plan").read_bytes()
    hdr = read_header(tmp_path / "a.plan")
    assert hdr.n_ops == 16 and hdr.version == 1
    assert compile_plan(tiny("int4"), tmp_path / "q.plan").weight_types == {"q4_0": 8}
    assert compile_plan(tiny("int8-dynamic"), tmp_path / "i.plan").weight_types == {"int8": 8}


def test_unfused_operator_falls_back_by_name(tiny, tmp_path) -> None:
    """An op outside the fused patterns runs as a fallback kernel, named in PlanInfo (issue
    28; a node no kernel runs: tests/test_custom_fallback.py)."""
    model = onnx.load(str(tiny("fp32")))
    erf = next(n for n in model.graph.node if n.op_type == "Erf")
    erf.op_type = "Tanh"
    path = tmp_path / "tanh.onnx"
    onnx.save(model, str(path))
    info = compile_plan(path, tmp_path / "x.plan")
    assert (erf.name, "Tanh") in info.fallback
    assert info.op_counts.get("Fallback")


def test_unfused_pattern_falls_back_by_name(tiny, tmp_path) -> None:
    model = onnx.load(str(tiny("fp32")))
    sm = next(n for n in model.graph.node if n.op_type == "Softmax")
    sm.attribute[0].i = 1  # softmax over heads is not attention
    path = tmp_path / "axis.onnx"
    onnx.save(model, str(path))
    info = compile_plan(path, tmp_path / "x.plan")
    assert (sm.name, "Softmax") in info.fallback


def _expect_error(res, *words: str) -> None:
    assert res.rc == 1, (res.rc, res.stderr)
    msg = res.ev("error")[0]["message"]
    for w in words:
        assert w in msg, msg


def test_truncated_and_corrupt_plans(fp32_plan, tmp_path, exe_x86) -> None:
    model, plan = fp32_plan
    data = plan.read_bytes()
    bad = tmp_path / "bad.plan"
    for cut in (0, 7, HEADER_SIZE - 1, HEADER_SIZE, 300, len(data) // 2, len(data) - 1):
        bad.write_bytes(data[:cut])
        _expect_error(run_exec(exe_x86, bad, model, tmp_path), "plan")
    flipped = bytearray(data)
    flipped[len(data) // 3] ^= 0x40
    bad.write_bytes(bytes(flipped))
    _expect_error(run_exec(exe_x86, bad, model, tmp_path), "checksum")
    with pytest.raises(BuildError):
        read_header(bad)
    v2 = bytearray(data)
    v2[8:12] = struct.pack("<I", 2)
    bad.write_bytes(bytes(v2))
    _expect_error(run_exec(exe_x86, bad, model, tmp_path), "version 2")


def test_fuzzed_plans_with_valid_checksum_never_crash(fp32_plan, tmp_path, exe_x86) -> None:
    """Random metadata damage with a recomputed CRC: an error or a run, never a signal."""
    model, plan = fp32_plan
    data = plan.read_bytes()
    h = read_header(plan)
    records = 56 * (h.n_inputs + h.n_outputs + h.n_tensors) + 8 * h.n_bufs + 176 * h.n_ops
    meta_end = HEADER_SIZE + records
    rng = random.Random(7)
    bad = tmp_path / "fuzz.plan"
    errors = 0
    for _ in range(60):
        buf = bytearray(data)
        for _ in range(rng.randint(1, 4)):
            pos = rng.randrange(HEADER_SIZE, meta_end)
            buf[pos] = rng.choice([0, 1, 0x7F, 0x80, 0xFF, buf[pos] ^ (1 << rng.randrange(8))])
        buf[32:36] = struct.pack("<I", zlib.crc32(bytes(buf[HEADER_SIZE:])))
        bad.write_bytes(bytes(buf))
        res = run_exec(exe_x86, bad, model, tmp_path, timeout=60)
        assert res.rc in (0, 1), f"executor died with {res.rc}: {res.stderr[-500:]}"
        errors += res.rc
        if res.rc:
            assert res.ev("error"), res.stderr
    assert errors > 10  # most damage is caught by validation


def test_check_mode_reports_plan(fp32_plan, exe_x86) -> None:
    _, plan = fp32_plan
    out = subprocess.run([*exe_x86, "--check", str(plan)], capture_output=True, text=True,
                         check=True)
    assert '"plan": "ok"' in out.stdout and '"ops": 16' in out.stdout


def test_bad_request_and_inputs_are_errors(fp32_plan, tmp_path, exe_x86) -> None:
    model, plan = fp32_plan
    req = tmp_path / "req.json"
    req.write_text('{"model": "x", "inputs": ')
    proc = subprocess.run([*exe_x86, "--request", str(req)], capture_output=True, text=True)
    assert proc.returncode == 1 and "request JSON" in proc.stdout
    inputs = write_inputs(model, 0, tmp_path)
    cut = tmp_path / "cut.ftns"
    cut.write_bytes(inputs.read_bytes()[:-7])
    proc = subprocess.run([*exe_x86, "--plan", str(plan), "--inputs", str(cut)],
                          capture_output=True, text=True)
    assert proc.returncode == 1 and "truncated" in proc.stdout


def test_residual_norm_fold_moves_the_residual_producer_or_leaves_it() -> None:
    """fold_residual_norms on a hand-made IR: a residual made after the FC is moved before it
    when its inputs allow (then the NoNorm is gone), else the NoNorm stays an op."""
    import numpy as np

    from farm.routes.custom.ir import FcWeights, Ir, IrOp
    from farm.routes.custom.passes import fold_residual_norms
    from farm.routes.custom.plan_format import ACT_NONE, OP_ADD, OP_FC, OP_NONORM, W_F32

    def fc(name: str, ins: list[int], out: int) -> IrOp:
        return IrOp(OP_FC, name, ins, out, fc=FcWeights(W_F32, np.ones((4, 4), np.float32)),
                    bias=np.zeros(4, np.float32), params=[W_F32, 4, 4, ACT_NONE])

    def ir_with(ops: list[IrOp]) -> Ir:
        return Ir(inputs=[("x", 0)], outputs=[("y", ops[-1].out)], cols=[4] * 6, ops=ops)

    gamma, beta = np.full(4, 2.0, np.float32), np.full(4, 0.5, np.float32)
    a, r = fc("a", [0], 1), fc("r", [0], 2)
    ir = ir_with([a, r, IrOp(OP_NONORM, "norm", [1, 2], 3, arrays=[gamma, beta])])
    assert fold_residual_norms(ir) == 1
    assert [op.name for op in ir.ops] == ["r", "a"]  # r moved before the FC that reads it
    assert a.ins == [0, 2] and a.out == 3 and np.allclose(a.res_scale, gamma)
    assert np.allclose(a.fc.w, 2.0) and np.allclose(a.bias, 0.5)
    # r reads a value made after the FC: it cannot move, the NoNorm stays
    a, r = fc("a", [0], 1), fc("r", [4], 2)
    ir = ir_with([a, IrOp(OP_ADD, "late", [0, 0], 4), r,
                  IrOp(OP_NONORM, "norm", [1, 2], 3, arrays=[gamma, beta])])
    assert fold_residual_norms(ir) == 0
    assert [op.name for op in ir.ops] == ["a", "late", "r", "norm"]
