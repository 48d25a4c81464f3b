"""Default CPU schedules for Relax-legalized kernels, applied without tuning.

Private helper of `farm.build.tvm.api` (the only module that imports it): TVM 0.27's
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
from tvm.target import Target
from tvm.target.codegen import llvm_get_vector_width


def _vec_lanes(target: Target, bits: int = 32) -> int:
    width = llvm_get_vector_width(target)
    return max((width if width > 0 else 128) // bits, 2)


def _accumulator_budget(target: Target) -> int:
    """Vector registers a register tile may fill with accumulators: AVX-512 and AArch64 have
    32, leaving room for the B vectors and the A broadcast; AVX2/SSE have 16."""
    triple = str(target.attrs.get("mtriple", ""))
    if triple.startswith("aarch64") or llvm_get_vector_width(target) >= 512:
        return 16
    return 8


def _largest_divisor(extent: int, candidates: tuple[int, ...]) -> int | None:
    for c in candidates:
        if c <= extent and extent % c == 0:
            return c
    return None


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
        sch.annotate(cached, "meta_schedule.layout_rewrite_preproc", True)

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
        budget = _accumulator_budget(target) // (tj // lanes)
        ti = _largest_divisor(ext_i, tuple(r for r in (12, 8, 6, 4, 3, 2, 1) if r <= budget))
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
        acc = sch.cache_write(main.block_rv, 0, "local")
        sch.reverse_compute_at(acc, outer, preserve_unit_loops=True)
        # epilogue blocks (bias add, scale, GELU): inline the chain into its last block,
        # then that block into the accumulator write-back of each tile
        epilogues = infos[infos.index(main) + 1:]
        for b in epilogues[:-1]:
            try:
                sch.compute_inline(b.block_rv)
            except Exception:
                return None
        if epilogues:
            try:
                sch.reverse_compute_inline(epilogues[-1].block_rv)
            except Exception:
                sch.reverse_compute_at(epilogues[-1].block_rv, outer, preserve_unit_loops=True)
        sch.unroll(ii)
        sch.vectorize(ji)
        acc_loops = sch.get_loops(acc)
        if len(acc_loops) > 1:
            sch.vectorize(acc_loops[-1])
        # decompose last: vectorize needs the block to still be a complete reduction
        init = sch.decompose_reduction(main.block_rv, k)
        sch.vectorize(sch.get_loops(init)[-1])
        return sch


class CpuInjective(CPUScheduleRule):
    """Fused, parallel, vectorised loops for elementwise and layout kernels."""

    def apply(self, func: tirx.PrimFunc, target: Target, _tunable: bool):  # type: ignore[override]
        if not isinstance(func, tirx.PrimFunc) or not self.is_target_available(target):
            return None
        sch = s_tir.Schedule(func)
        infos = normalize_prim_func(sch)
        if not infos or not all(b.is_injective() for b in infos):
            return None
        for b in infos[:-1]:
            try:
                sch.compute_inline(b.block_rv)
            except Exception:
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
        for b in infos[:-1]:
            try:
                sch.compute_inline(b.block_rv)
            except Exception:
                return None
        return sch


def rules_after() -> list[CPUScheduleRule]:
    """Rules tried after the GEMM/GEMV/row-reduction/injective ones (api._default_schedule)."""
    return [CpuFullReduction(), CpuScalar()]
