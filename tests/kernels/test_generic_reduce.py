"""The fallback Reduce kernel (kernels/runtime/generic.c, `run_reduce`) against ORT: every
reduction the lowering maps (generic_meta.REDUCES) over the last axis (one accumulator per
row), a middle or the first axis (the kept last axis as a row), two axes and all of them, at
awkward lengths so no row is a whole number of vectors; once on the emulated aarch64 CPU.
One small graph, one executor run: token ids -> a Gather from a random table -> Reshape to
[S, A, L] -> each Reduce an output."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
from fkhelpers import run_exec
from onnx import TensorProto, helper, numpy_helper

from farm.models import ftns_module, make_inputs
from farm.models.frontend import canonicalize, make_spec
from farm.routes.custom.compile import compile_plan

OPS = ("ReduceSum", "ReduceMean", "ReduceMax", "ReduceMin", "ReduceProd", "ReduceSumSquare",
       "ReduceL2", "ReduceL1", "ReduceLogSumExp")
AXES = ([2], [1], [0], [0, 2], None)  # None: every axis


def _graph(seq: int, a: int, inner: int, vocab: int = 50) -> onnx.ModelProto:
    rng = np.random.default_rng(3)
    # values near 1, either sign: ReduceProd over a whole tensor stays in range
    table = (rng.uniform(0.9, 1.1, (vocab, a * inner))
             * rng.choice([-1.0, 1.0], (vocab, a * inner))).astype(np.float32)
    nodes = [helper.make_node("Gather", ["table", "input_ids"], ["emb"], name="embed"),
             helper.make_node("Reshape", ["emb", "shape"], ["x"], name="reshape")]
    inits = [numpy_helper.from_array(table, "table"),
             numpy_helper.from_array(np.array([seq, a, inner], np.int64), "shape")]
    outputs = []
    for op in OPS:
        for k, axes in enumerate(AXES):
            ins = ["x"]
            if axes is not None:
                inits.append(numpy_helper.from_array(np.array(axes, np.int64), f"ax_{op}_{k}"))
                ins.append(f"ax_{op}_{k}")
            out = f"{op}_{k}"
            nodes.append(helper.make_node(op, ins, [out], name=out, keepdims=k % 2))
            outputs.append(helper.make_tensor_value_info(out, TensorProto.FLOAT, None))
    ids = helper.make_tensor_value_info("input_ids", TensorProto.INT64, [1, seq])
    graph = helper.make_graph(nodes, "reduce", [ids], outputs, inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])


@pytest.mark.parametrize("exe,seq,a,inner", [
    ("exe_x86", 5, 3, 1), ("exe_x86", 7, 2, 17), ("exe_x86", 3, 5, 33),
    pytest.param("exe_arm", 7, 2, 17, marks=pytest.mark.aarch64)])
def test_fallback_reduce_matches_ort(request: pytest.FixtureRequest, tmp_path: Path, exe: str,
                                     seq: int, a: int, inner: int) -> None:
    import onnxruntime as ort

    exe_argv: list[str] = request.getfixturevalue(exe)

    src = tmp_path / "reduce.onnx"
    onnx.save(_graph(seq, a, inner), str(src))
    canon = canonicalize(src, make_spec(seq=seq), tmp_path / "canon").path
    plan = tmp_path / "model.plan"
    compile_plan(canon, plan)
    res = run_exec(exe_argv, plan, canon, tmp_path)
    assert res.rc == 0, res.stderr
    got = ftns_module().read(str(res.out_file))
    sess = ort.InferenceSession(str(src), providers=["CPUExecutionProvider"])
    feeds = make_inputs(canon, 0)
    want = dict(zip([o.name for o in sess.get_outputs()], sess.run(None, feeds), strict=True))
    for name, w in want.items():
        np.testing.assert_allclose(got[name].reshape(w.shape), w, rtol=1e-5, atol=1e-5,
                                   err_msg=name)
