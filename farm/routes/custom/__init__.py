"""The custom route: ONNX encoder -> plan file (compile.py), the executor binary, and the
route's description (route.py).

Public API (import from the module named):
- `compile.compile_plan(onnx_path, out_path, *, quant=None, gelu="erf", fuse_qkv=True,
  features=()) -> PlanInfo`: lower the model (lower.py), run the passes (passes.py) and write
  the plan (plan_format.py). `quant`: None keeps the model's own weight types (fp32,
  quantize_dynamic int8, MatMulNBits 4-bit; a QDQ model becomes fp32 with its dequantized
  weights); "int8" or "q4_0" quantises fp32 MatMul weights
  here. `gelu`: "erf" (exact) or "table" (lookup). `features`: CPU features the plan demands
  (the executor refuses to run it on a CPU without them).
- `executor_build.build_executor(arch, out_dir) -> Path`: the static fk_exec binary.
An unsupported operator or pattern raises BuildError naming the node and its operator.
"""
