"""Default CPU schedules for Relax-legalized kernels, applied without tuning.

Private helper of `farm.routes.tvm.api` (the only module that imports it): TVM 0.27's
`s_tir.dlight` CPU rules cover GEMV and row reductions (softmax, layer norm) but have no
GEMM rule, and untuned matmuls run as naive triple loops (~60x slower than ORT). The two
rules here fill that gap:

- `CpuMatmul`: one reduction block with spatial axes S... and reduction axes R...
  (matmul, batched matmul, with fused prologue/epilogue). Register tile `ti x tj` of the
  last two spatial axes (tj = two vectors, vectorised; ti rows unrolled, as many as the
  ISA's vector registers hold as accumulators: 8 x 32 fp32 on AVX-512), reduction loop
  outside the tile, accumulator in a local buffer written back through the inlined
  epilogue, outer spatial loops fused and parallel. A constant weight B[..., k, n] (a
  parameter listed in the PrimFunc's `layout_free_buffers`) is read from panels
  [..., n // tj, k, n % tj], so each k step loads one contiguous row of the tile: the
  repacking is a `meta_schedule.layout_rewrite_preproc` block that the build splits out
  (SplitLayoutRewritePreproc) and runs on the constants at build time (FoldConstant).
- `CpuInjective`: elementwise/layout kernels: fuse all loops, parallel outer, vectorise
  the inner chunk.

A rule returns None when the kernel does not match; the caller tries the next rule.
"""

from __future__ import annotations

from typing import Any

from tvm import s_tir, tirx
from tvm.s_tir.dlight.analysis import normalize_prim_func
from tvm.s_tir.dlight.base import get_extent
from tvm.s_tir.dlight.cpu.base import CPUScheduleRule
from tvm.script import tirx as T
from tvm.target import Target
from tvm.target.codegen import llvm_get_vector_width


def _vec_lanes(target: Target, bits: int = 32) -> int:
    width = llvm_get_vector_width(target)
    return max((width if width > 0 else 128) // bits, 2)


def _accumulator_budget(target: Target) -> int:
    """Vector registers a register tile may fill with accumulators: AVX-512 and AArch64 have
    32, leaving room for the B vectors and the A broadcast; AVX2/SSE have 16, of which 12
    accumulators (6 rows x 2 vectors, the tile of BLIS's and OpenBLAS's Haswell SGEMM
    kernels) leave 2 for B and 1 for the broadcast. 8 (4 rows) is exactly FMA latency x FMA
    ports (4 x 2): any late load stalls it."""
    triple = str(target.attrs.get("mtriple", ""))
    if triple.startswith("aarch64") or llvm_get_vector_width(target) >= 512:
        return 16
    return 12


def _row_tile(ext_i: int, budget_rows: int, narrow: bool) -> int | None:
    """Rows of the register tile: the most within `budget_rows` that divide `ext_i`. On a
    16-register target (`narrow`) the full budget wins even when it does not divide the
    rows, the last tile masked: 6 rows over MobileBERT's 128 tokens (21 tiles and a
    2-row one) ran 1.09-1.11x faster than 4 dividing rows on AVX2 (a chain of 128x512x128
    and 128x128x512 GEMMs: 81-84 -> 89-93 GFLOP/s at p10)."""
    rows = tuple(r for r in (12, 8, 6, 4, 3, 2, 1) if r <= budget_rows)
    ti = _largest_divisor(ext_i, rows)
    if narrow and ti is not None and ti < rows[0] and ext_i >= 4 * rows[0]:
        return rows[0]
    return ti


def _tile_write_back(sch: Any, main: Any, infos: list[Any], outer: Any,
                     scope: str) -> Any | None:
    """The accumulator tile (`scope`) written back per tile of the parallel `outer` loop,
    with the epilogue blocks after `main` (bias add, scale, GELU) fused into it: the chain
    inlined into its last block, that block into the write-back (or computed at the tile
    loop when it cannot be inlined). None when the chain cannot be inlined: the rule then
    does not apply."""
    acc = sch.cache_write(main.block_rv, 0, scope)
    sch.reverse_compute_at(acc, outer, preserve_unit_loops=True)
    epilogues = infos[infos.index(main) + 1:]
    if not _inline_all_but_last(sch, epilogues):
        return None
    if epilogues:
        try:
            sch.reverse_compute_inline(epilogues[-1].block_rv)
        except Exception:
            sch.reverse_compute_at(epilogues[-1].block_rv, outer, preserve_unit_loops=True)
    return acc


def _inline_all_but_last(sch: Any, blocks: list[Any]) -> bool:
    """Inline every block but the last into its consumer; False when one cannot be."""
    for b in blocks[:-1]:
        try:
            sch.compute_inline(b.block_rv)
        except Exception:  # TVM raises its own ScheduleError subclasses
            return False
    return True


def _vectorize_innermost(sch: Any, block: Any) -> None:
    loops = sch.get_loops(block)
    if len(loops) > 1:
        sch.vectorize(loops[-1])


def _largest_divisor(extent: int, candidates: tuple[int, ...]) -> int | None:
    for c in candidates:
        if c <= extent and extent % c == 0:
            return c
    return None


# the repacking block's annotation value: 1, not True, because a tuning record stores the
# trace as JSON and replays True as 1, and the build recognises a seeded default schedule by
# structural equality with the one computed here
PREPROC = 1


def _pack_weight(sch: s_tir.Schedule, main: Any, n_s: int, tj: int,
                 func: tirx.PrimFunc) -> bool:
    """Read a constant weight B[..., k, n] of the main block from panels
    [..., n // tj, k, n % tj] through a layout-rewrite block; False when there is none."""
    free = func.attrs.get("layout_free_buffers") if func.attrs is not None else None
    if not free:
        return False
    weights = [func.params[int(i)] for i in free]
    block = sch.get(main.block_rv)
    row, col = block.iter_vars[n_s - 2].var, block.iter_vars[n_s - 1].var
    reduce_vars = [iv.var for iv in block.iter_vars[n_s:]]
    for idx, region in enumerate(block.reads):
        buf = region.source  # 0.27 (tirx): the parameter itself
        if not any(buf.same_as(w) for w in weights):
            continue
        mins = [r.min for r in region.region]
        # only B[..., k, n]: n the tiled output column, k a reduction axis, no row index
        if len(mins) < 2 or not mins[-1].same_as(col) or int(buf.shape[-1]) % tj or \
                not any(mins[-2].same_as(k) for k in reduce_vars) or \
                any(m.same_as(row) for m in mins):
            continue
        cached = sch.cache_read(main.block_rv, idx, "global")
        sch.annotate(cached, "meta_schedule.layout_rewrite_preproc", PREPROC)

        def panels(*ax: Any) -> tuple[Any, ...]:
            return (*ax[:-2], ax[-1] // tj, ax[-2], ax[-1] % tj)

        sch.transform_layout(main.block_rv, ("read", idx), panels)
        return True
    return False



def _one_reduction(func: tirx.PrimFunc) -> tuple[s_tir.Schedule, list[Any], Any] | None:
    """(schedule, normalised block infos, the one reduction block) of a function with
    exactly one reduction block (the GEMM and the full-reduction rules start here)."""
    sch = s_tir.Schedule(func)
    infos = normalize_prim_func(sch)
    if not infos:
        return None
    reductions = [b for b in infos if not b.is_injective()]
    if len(reductions) != 1:
        return None
    return sch, infos, reductions[0]

class CpuMatmul(CPUScheduleRule):
    """Register-tiled, vectorised, parallel schedule for (batched) matmul kernels."""

    def apply(self, func: tirx.PrimFunc, target: Target, _tunable: bool):  # type: ignore[override]
        if not isinstance(func, tirx.PrimFunc) or not self.is_target_available(target):
            return None
        try:
            return self._schedule(func, target, pack=True)
        except Exception:  # a weight access the repacking cannot rewrite: tile it unpacked
            return self._schedule(func, target, pack=False)

    def _schedule(self, func: tirx.PrimFunc, target: Target, *,
                  pack: bool) -> s_tir.Schedule | None:
        found = _one_reduction(func)
        if found is None:
            return None
        sch, infos, main = found
        kinds = main.dom_kind()
        n_s = len(kinds) - len(kinds.lstrip("S"))
        if n_s < 2 or set(kinds[n_s:]) != {"R"}:
            return None
        extents = [get_extent(sch, it.loop_rv) for it in main.iters]
        if not all(isinstance(e, int) for e in extents):
            return None  # dynamic shapes: leave to the generic path
        # inline the injective prologue (e.g. transposes feeding the matmul) where possible
        for b in infos[: infos.index(main)]:
            try:
                sch.compute_inline(b.block_rv)
            except Exception:  # schedule primitives raise when the pattern does not fit
                return None
        lanes = _vec_lanes(target)
        ext_i, ext_j = extents[n_s - 2], extents[n_s - 1]
        tj = _largest_divisor(ext_j, (2 * lanes, lanes))
        if tj is None:
            return None
        # rows: the most that fit the accumulator budget (8 x 32 fp32 on AVX-512 ran
        # 1.15-1.3x faster than 4 x 32 on farm's mini encoder GEMMs)
        budget = _accumulator_budget(target)
        ti = _row_tile(ext_i, budget // (tj // lanes), narrow=budget < 16)
        if ti is None:
            return None
        if pack:
            _pack_weight(sch, main, n_s, tj, func)
        loops = sch.get_loops(main.block_rv)
        spatial, reduce_loops = loops[:n_s], loops[n_s:]
        io, ii = sch.split(spatial[n_s - 2], factors=[None, ti])
        jo, ji = sch.split(spatial[n_s - 1], factors=[None, tj])
        k = sch.fuse(*reduce_loops) if len(reduce_loops) > 1 else reduce_loops[0]
        sch.reorder(*spatial[: n_s - 2], io, jo, k, ii, ji)
        outer = sch.fuse(*spatial[: n_s - 2], io, jo)
        sch.parallel(outer)
        acc = _tile_write_back(sch, main, infos, outer, "local")
        if acc is None:
            return None
        sch.unroll(ii)
        sch.vectorize(ji)
        _vectorize_innermost(sch, acc)
        # decompose last: vectorize needs the block to still be a complete reduction
        init = sch.decompose_reduction(main.block_rv, k)
        sch.vectorize(sch.get_loops(init)[-1])
        return sch


def _u8s8_dot_desc(cols: int, kstep: int) -> tirx.PrimFunc:
    """The semantics a u8 x s8 tensor intrinsic implements: `cols` int32 lanes += `kstep`
    products each, C[i] += A[k] * B[i, k]. For 16 x 4 it is TVM's
    `dot_product_16x4_u8i8i32_desc` (tvm/s_tir/tensor_intrin/x86.py), written here:
    importing it runs `tvm.s_tir.tensor_intrin`'s `__init__`, which parses every target's
    intrinsics (CUDA, Hexagon, ...) with a TVMScript parser that calls `inspect.stack()` per
    function: 50-100 s of CPU in each process's first build (more with many modules
    loaded), for one 16x4 dot product."""

    @T.prim_func(s_tir=True)
    def desc(
        A: T.Buffer((kstep,), "uint8", offset_factor=1),
        B: T.Buffer((cols, kstep), "int8", offset_factor=1),
        C: T.Buffer((cols,), "int32", offset_factor=1),
    ) -> None:
        with T.sblock("root"):
            T.reads(C[0:cols], A[0:kstep], B[0:cols, 0:kstep])
            T.writes(C[0:cols])
            for i in T.serial(0, cols):
                for k in T.serial(0, kstep):
                    with T.sblock("update"):
                        vi, vk = T.axis.remap("SR", [i, k])
                        C[vi] = C[vi] + T.cast(A[vk], "int32") * T.cast(B[vi, vk], "int32")

    return desc


@T.prim_func(s_tir=True)
def _vnni_16x4_impl(a: T.handle, b: T.handle, c: T.handle) -> None:
    """TVM's `dot_16x4_vnni` body with the operand types of LLVM >= 20's vpdpbusd
    (<64 x i8> sources): TVM 0.27 still passes <16 x i32> and its bundled LLVM 22 rejects
    the module ("Call parameter type does not match function signature")."""
    A = T.match_buffer(a, (4,), "uint8", offset_factor=1)
    B = T.match_buffer(b, (16, 4), "int8", offset_factor=1)
    C = T.match_buffer(c, (16,), "int32", offset_factor=1)
    with T.sblock("root"):
        T.reads(C[0:16], A[0:4], B[0:16, 0:4])
        T.writes(C[0:16])
        a_i32 = T.reinterpret(A.vload([0], "uint8x4"), dtype="int32")
        C[T.ramp(T.int32(0), 1, 16)] = T.call_llvm_pure_intrin(
            T.llvm_lookup_intrinsic_id("llvm.x86.avx512.vpdpbusd.512"),
            C.vload([0], dtype="int32x16"),
            T.reinterpret(T.broadcast(a_i32, 16), dtype="int8x64"),
            B.vload([0, 0], dtype="int8x64"),
            dtype="int32x16")


def _register_vnni() -> str:
    """Name of the 16x4 u8 x s8 VNNI intrinsic for the LLVM TVM was built with (registered
    on first use; schedules and MetaSchedule traces refer to it by name)."""
    from tvm.s_tir import TensorIntrin
    from tvm.target.codegen import llvm_version_major
    if llvm_version_major() < 20:
        # TVM's own intrinsic is right for these LLVMs (registered by its module's import)
        from tvm.s_tir.tensor_intrin.x86 import VNNI_DOT_16x4_INTRIN
        return VNNI_DOT_16x4_INTRIN
    if TensorIntrin.get(VNNI_INTRIN, allow_missing=True) is None:
        TensorIntrin.register(VNNI_INTRIN, _u8s8_dot_desc(16, 4), _vnni_16x4_impl)
    return VNNI_INTRIN


VNNI_INTRIN = "farm_dot_16x4_vnni"


def register_intrinsics() -> None:
    """Register farm's tensor intrinsics (before replaying tuning records that use them)."""
    _register_vnni()
    _register_pmaddwd()


def has_vnni(target: Target) -> bool:
    """Whether the target may use AVX-512 VNNI (vpdpbusd), from its `mattr`."""
    return "+avx512vnni" in [str(a) for a in (target.attrs.get("mattr") or [])]


class CpuMatmulVnni(CPUScheduleRule):
    """u8 x s8 -> i32 GEMM (ONNX MatMulInteger as `api._u8s8_matmul_integer` imports it)
    with a constant int8 weight, on AVX-512 VNNI: the weight is repacked at build time to
    [N // 16, K // 4, 16, 4] (one 64-byte vector per 16 columns x 4 k), and the inner
    16-column x 4-k step is tensorized with TVM's `dot_16x4_vnni` intrinsic (one vpdpbusd:
    16 int32 lanes += 4 u8 x s8 products each). Register tile `ti` rows x `16 * nv`
    columns of int32 accumulators, k outside the tile, epilogue (zero-point correction,
    dequantising scale, bias, activation) applied on the accumulator write-back, as
    `CpuMatmul` does for fp32. Returns None (the next rule takes the kernel) when the
    kernel is not such a GEMM or its sizes do not divide (K % 4, N % 16)."""

    def apply(self, func: tirx.PrimFunc, target: Target, _tunable: bool):  # type: ignore[override]
        if not isinstance(func, tirx.PrimFunc) or not self.is_target_available(target) or \
                not has_vnni(target):
            return None
        try:
            return self._schedule(func)
        except Exception:  # a kernel the primitives cannot take: the fp32-style rule runs
            return None

    @staticmethod
    def _schedule(func: tirx.PrimFunc) -> s_tir.Schedule | None:
        # accumulators: ti x nv zmm registers of 32, leaving room for B vectors and the A
        # broadcast
        return _schedule_u8s8(func, _register_vnni(), cols=16, kstep=4, max_acc=16,
                              rows=(8, 6, 4, 3, 2, 1))


def _schedule_u8s8(func: tirx.PrimFunc, intrin: str, *, cols: int, kstep: int, max_acc: int,
                   rows: tuple[int, ...],
                   vecs: tuple[int, ...] = (2, 1)) -> s_tir.Schedule | None:
    """The u8 x s8 -> i32 GEMM with a constant int8 [K, N] weight, tensorized by `intrin`
    (`cols` int32 lanes += `kstep` products each): the weight repacked at build time to
    [N // cols, K // kstep, cols, kstep]; a register tile of `ti` rows (from `rows`) x `nv`
    vectors (the first of `vecs` that divides the columns), ti * nv <= max_acc; k outside
    the tile; the epilogue on the accumulator write-back. None when the kernel is not such a
    GEMM or its sizes do not divide."""
    found = _one_reduction(func)
    if found is None:
        return None
    sch, infos, main = found
    kinds = main.dom_kind()
    n_s = len(kinds) - 1
    if n_s < 2 or kinds != "S" * n_s + "R":
        return None
    extents = [get_extent(sch, it.loop_rv) for it in main.iters]
    if not all(isinstance(e, int) for e in extents):
        return None
    ext_i, ext_j, ext_k = extents[n_s - 2], extents[n_s - 1], extents[n_s]
    if ext_k % kstep or ext_j % cols:
        return None
    block = sch.get(main.block_rv)
    if len(block.writes) != 1 or str(block.writes[0].source.dtype) != "int32":
        return None
    free = func.attrs.get("layout_free_buffers") if func.attrs is not None else None
    weights = [func.params[int(i)] for i in free or ()]
    col, k = block.iter_vars[n_s - 1].var, block.iter_vars[n_s].var
    dtypes = {str(r.source.dtype) for r in block.reads}
    if dtypes != {"uint8", "int8"} or len(block.reads) != 2:
        return None
    widx = next((i for i, r in enumerate(block.reads)
                 if str(r.source.dtype) == "int8"
                 and any(r.source.same_as(w) for w in weights)
                 and len(r.region) == 2 and r.region[0].min.same_as(k)
                 and r.region[1].min.same_as(col)), None)
    if widx is None:
        return None  # the int8 operand is not a constant [K, N] weight: cannot prepack
    nv = next(v for v in vecs if ext_j % (v * cols) == 0)
    ti = _largest_divisor(ext_i, tuple(r for r in rows if r * nv <= max_acc))
    if ti is None:
        return None
    cached = sch.cache_read(main.block_rv, widx, "global")
    sch.annotate(cached, "meta_schedule.layout_rewrite_preproc", PREPROC)
    sch.transform_layout(main.block_rv, ("read", widx),
                         lambda kk, nn: (nn // cols, kk // kstep, nn % cols, kk % kstep))
    loops = sch.get_loops(main.block_rv)
    spatial, red = loops[:n_s], loops[n_s]
    io, ii = sch.split(spatial[n_s - 2], factors=[None, ti])
    jo, jv, jc = sch.split(spatial[n_s - 1], factors=[None, nv, cols])
    ko, kk = sch.split(red, factors=[None, kstep])
    sch.reorder(*spatial[: n_s - 2], io, jo, ko, ii, jv, jc, kk)
    outer = sch.fuse(*spatial[: n_s - 2], io, jo)
    sch.parallel(outer)
    # "global": the intrinsic's accumulator buffer is declared in global scope and
    # tensorize matches scopes; the tile-sized buffer is still a stack array LLVM keeps
    # in registers
    acc = _tile_write_back(sch, main, infos, outer, "global")
    if acc is None:
        return None
    init = sch.decompose_reduction(main.block_rv, ko)
    sch.tensorize(jc, intrin)
    sch.unroll(ii)
    sch.unroll(jv)
    sch.vectorize(sch.get_loops(init)[-1])
    _vectorize_innermost(sch, acc)
    return sch


@T.prim_func(s_tir=True)
def _pmaddwd_8x2_impl(a: T.handle, b: T.handle, c: T.handle) -> None:
    """8 int32 lanes += 2 products each, exact: the 2 u8 activations zero-extended to int16
    and broadcast as one int32, the 8 x 2 weights sign-extended to int16, one vpmaddwd
    (products <= 255 * 128 fit int16 operands' int32 pair sums, no saturation)."""
    A = T.match_buffer(a, (2,), "uint8", offset_factor=1)
    B = T.match_buffer(b, (8, 2), "int8", offset_factor=1)
    C = T.match_buffer(c, (8,), "int32", offset_factor=1)
    with T.sblock("root"):
        T.reads(C[0:8], A[0:2], B[0:8, 0:2])
        T.writes(C[0:8])
        a_i32 = T.reinterpret(T.cast(A.vload([0], "uint8x2"), "int16x2"), dtype="int32")
        C[T.ramp(T.int32(0), 1, 8)] = C.vload([0], dtype="int32x8") + T.call_llvm_pure_intrin(
            T.llvm_lookup_intrinsic_id("llvm.x86.avx2.pmadd.wd"),
            T.reinterpret(T.broadcast(a_i32, 8), dtype="int16x16"),
            T.cast(B.vload([0, 0], dtype="int8x16"), "int16x16"),
            dtype="int32x8")


PMADDWD_INTRIN = "farm_dot_8x2_pmaddwd"
# 2 rows x 4 vectors (8 ymm accumulators): each row's A pair costs 3 shuffle-port uops a k
# pair (zero-extend, move, broadcast) and each weight vector 1 (sign-extend), so 2 x 4 needs 10
# a step of 64 products where 4 x 2 needs 14; MobileBERT's 128 x 512 x 128 at avx2, 1 thread:
# 39 GOP/s (LLVM's one product per int32 lane) -> 60 (4 x 2) -> 70-77 (2 x 4; 1 x 8: 70)
_PM_ROWS, _PM_VECS = (2, 1), (4, 2, 1)


def _register_pmaddwd() -> str:
    from tvm.s_tir import TensorIntrin
    if TensorIntrin.get(PMADDWD_INTRIN, allow_missing=True) is None:
        TensorIntrin.register(PMADDWD_INTRIN, _u8s8_dot_desc(8, 2), _pmaddwd_8x2_impl)
    return PMADDWD_INTRIN


class CpuMatmulPmaddwd(CPUScheduleRule):
    """The same u8 x s8 -> i32 GEMM as `CpuMatmulVnni`, on x86 with AVX2 and no VNNI: the
    weight repacked to [N // 8, K // 2, 8, 2] and each 8-column x 2-k step one exact
    vpmaddwd on int16 (`_pmaddwd_8x2_impl`); at most 8 ymm accumulators (2 rows x 4
    vectors, `_PM_ROWS`), leaving the other 8 of 16 registers for weights, the A pair and
    products.
    Without it LLVM widened each u8 and s8 to int32 and did one product per 32-bit lane
    (MobileBERT's 128 x 512 x 128 at avx2: ~40 GOP/s, TVM's int8 build 2x slower than its
    fp32)."""

    def apply(self, func: tirx.PrimFunc, target: Target, _tunable: bool):  # type: ignore[override]
        if not isinstance(func, tirx.PrimFunc) or not self.is_target_available(target) or \
                has_vnni(target) or not str(target.attrs.get("mtriple", "")).startswith("x86_64") \
                or llvm_get_vector_width(target) < 256:
            return None
        try:
            return _schedule_u8s8(func, _register_pmaddwd(), cols=8, kstep=2, max_acc=8,
                                  rows=_PM_ROWS, vecs=_PM_VECS)
        except Exception:  # a kernel the primitives cannot take: the fp32-style rule runs
            return None


class CpuInjective(CPUScheduleRule):
    """Fused, parallel, vectorised loops for elementwise and layout kernels."""

    def apply(self, func: tirx.PrimFunc, target: Target, _tunable: bool):  # type: ignore[override]
        if not isinstance(func, tirx.PrimFunc) or not self.is_target_available(target):
            return None
        sch = s_tir.Schedule(func)
        infos = normalize_prim_func(sch)
        if not infos or not all(b.is_injective() for b in infos):
            return None
        if not _inline_all_but_last(sch, infos):
            return None
        last = infos[-1].block_rv
        loops = sch.get_loops(last)
        if not loops:
            return None
        fused = sch.fuse(*loops) if len(loops) > 1 else loops[0]
        extent = get_extent(sch, fused)
        lanes = _vec_lanes(target)
        if isinstance(extent, int) and extent % lanes == 0 and extent >= 4 * lanes:
            outer, inner = sch.split(fused, factors=[None, lanes])
            sch.parallel(outer)
            sch.vectorize(inner)
        else:
            sch.parallel(fused)
        return sch


class CpuFullReduction(CPUScheduleRule):
    """A whole-tensor reduction to a scalar (the min/max of ONNX DynamicQuantizeLinear, which
    int8-dynamic models run before every quantized MatMul): dlight's Reduction wants a
    spatial row axis and left these as naive scalar loops. The fused reduction loop is split
    into `lanes`-wide chunks reduced into a vector of partials (rfactor), vectorised, then
    the partials are reduced to the scalar. One thread: the tensors are an activation
    (<= 64K elements on mobilebert), a few microseconds, less than a parallel hand-off."""

    def apply(self, func: tirx.PrimFunc, target: Target, _tunable: bool):  # type: ignore[override]
        if not isinstance(func, tirx.PrimFunc) or not self.is_target_available(target):
            return None
        found = _one_reduction(func)
        if found is None:
            return None
        sch, infos, main = found
        # no spatial axis but unit ones (normalisation keeps a 1-extent leading axis)
        if "R" not in main.dom_kind() or any(
                it.kind == "S" and get_extent(sch, it.loop_rv) != 1 for it in main.iters):
            return None
        for b in infos[: infos.index(main)]:  # prologue (e.g. a cast) read inside the scan
            try:
                sch.compute_inline(b.block_rv)
            except Exception:
                return None
        loops = [it.loop_rv for it in main.iters if it.kind == "R"]
        k = sch.fuse(*loops) if len(loops) > 1 else loops[0]
        extent = get_extent(sch, k)
        lanes = _vec_lanes(target)
        if isinstance(extent, int) and extent % lanes == 0 and extent >= 4 * lanes:
            _ko, ki = sch.split(k, factors=[None, lanes])
            partial = sch.rfactor(ki, 0)
            ko_rf, ki_rf = sch.get_loops(partial)[-2:]  # (unit axes...), chunk, lane
            sch.vectorize(ki_rf)  # before decomposing: it needs a complete reduction block
            init = sch.decompose_reduction(partial, ko_rf)
            sch.vectorize(sch.get_loops(init)[-1])
        # a scalar epilogue (e.g. min(0, x)) after the reduction has no loop to schedule
        return sch


class CpuRowSoftmax(CPUScheduleRule):
    """Row-wise kernels made of several blocks over the same rows, at least one of them a
    reduction along the row (softmax: max, exp, sum, divide): one parallel loop over the
    rows with every block computed inside it, each row pass vectorised, the reductions
    through `lanes` vector partials (rfactor). dlight's Reduction left attention's softmax
    scalar: 11 ms of int8 MobileBERT against ORT's 4 ms for all of attention."""

    def apply(self, func: tirx.PrimFunc, target: Target, _tunable: bool):  # type: ignore[override]
        if not isinstance(func, tirx.PrimFunc) or not self.is_target_available(target):
            return None
        try:
            return self._schedule(func, _vec_lanes(target))
        except Exception:  # a kernel of another shape: the next rule takes it
            return None

    @staticmethod
    def _schedule(func: tirx.PrimFunc, lanes: int) -> s_tir.Schedule | None:
        sch = s_tir.Schedule(func)
        infos = normalize_prim_func(sch)
        if not infos or len(infos) < 2 or not infos[-1].is_injective() or \
                all(b.is_injective() for b in infos):
            return None
        kinds = [b.dom_kind() for b in infos]
        rank = len(kinds[-1])
        # every block: the same rows, then one row axis (spatial, or the reduction)
        if any(len(k) != rank or k[:-1] != "S" * (rank - 1) for k in kinds):
            return None
        extents = [[get_extent(sch, it.loop_rv) for it in b.iters] for b in infos]
        if any(e != extents[-1] for e in extents) or \
                not all(isinstance(e, int) for e in extents[-1]):
            return None
        width = extents[-1][-1]
        if width % lanes:
            return None
        # reductions first (rfactor wants the block alone in its loop nest): each into
        # `lanes` vector partials, reduced to the row's scalar by its original block
        partials = []
        for b in infos:
            if not b.is_injective():
                _outer, vec = sch.split(sch.get_loops(b.block_rv)[-1], factors=[None, lanes])
                partials.append(sch.rfactor(vec, 0))
        blocks = sch.get_child_blocks(sch.get_sblock("root"))
        last = blocks[-1]
        loops = sch.get_loops(last)
        row = sch.fuse(*loops[:-1]) if rank > 2 else loops[0]
        sch.parallel(row)
        kept = [last]
        for block in reversed(blocks[:-1]):
            # a row pass read by one block only (softmax's x - max) is recomputed where it
            # is read; one read twice (exp, by the sum and the division) is kept
            if not any(sch.get(block).same_as(sch.get(p)) for p in partials) and \
                    _injective(sch, block) and len(sch.get_consumers(block)) == 1:
                try:
                    sch.compute_inline(block)
                    continue
                except Exception:  # e.g. a reduction's write-back: computed in the row
                    pass
            sch.compute_at(block, row, preserve_unit_loops=True)
            kept.append(block)
        for block in kept:
            inner = sch.get_loops(block)[-1]
            if any(sch.get(block).same_as(sch.get(p)) for p in partials):
                # compute_at regenerates the loops (lane and chunk in either order): the
                # lane loop is the one vectorize takes, innermost; before decomposing, as
                # vectorize needs a complete reduction block
                ko, ki = sch.get_loops(block)[-2:]
                try:
                    sch.vectorize(ki)
                except Exception:
                    sch.reorder(ki, ko)
                    ko, ki = ki, ko
                    sch.vectorize(ki)
                init = sch.decompose_reduction(block, ko)
                sch.vectorize(sch.get_loops(init)[-1])
            elif _injective(sch, block) and get_extent(sch, inner) == width:
                _outer, vec = sch.split(inner, factors=[None, lanes])
                sch.vectorize(vec)
        return sch


def _injective(sch: s_tir.Schedule, block: Any) -> bool:
    return all(iv.iter_type == tirx.IterVar.DataPar for iv in sch.get(block).iter_vars)


class CpuScalar(CPUScheduleRule):
    """Kernels over 0-d tensors (the dynamic quantisation's scale and zero point): no loop
    to tile or parallelise; the chain of scalar blocks is inlined into one expression."""

    def apply(self, func: tirx.PrimFunc, target: Target, _tunable: bool):  # type: ignore[override]
        if not isinstance(func, tirx.PrimFunc) or not self.is_target_available(target):
            return None
        sch = s_tir.Schedule(func)
        infos = normalize_prim_func(sch)
        if not infos or any(sch.get_loops(b.block_rv) for b in infos):
            return None
        if not _inline_all_but_last(sch, infos):
            return None
        return sch


def rules_after() -> list[CPUScheduleRule]:
    """Rules tried after the GEMM/GEMV/row-reduction/injective ones (api._default_schedule)."""
    return [CpuFullReduction(), CpuScalar()]
