/* x86 kernels, compiled once per variant, each the table of one ISA level (farm/isa.py):
 * FK_VARIANT=avx2 (-mavx2 -mfma -mf16c), FK_VARIANT=avx512 (adds -mavx512f -mavx512bw
 * -mavx512vl -mavx512dq: the fp32 kernels at 512 bits, int8 and Q4 on the AVX2 sign trick, as
 * on a Skylake-SP), FK_VARIANT=avx512vnni (adds -mavx512vnni: table "avx512-vnni") and
 * FK_VARIANT=amx (avx512vnni + -mamx-tile -mamx-int8: the int8 GEMM on AMX tiles, the rest as
 * avx512-vnni). The avx2-vnni level has no table of its own (it runs avx2).
 * Inside each kernel the widest path comes first (AMX, AVX-512), then AVX2, then an
 * unconditional scalar tail. */
#include <immintrin.h>
#include <string.h>

#include "fk.h"
#include "fk_fallback.h"

#if !defined(__AVX2__) || !defined(__FMA__)
#error "fk_x86.c needs at least -mavx2 -mfma"
#endif

static inline float hsum256_ps(__m256 v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}
static inline float hmax256_ps(__m256 v) {
    __m128 s = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_max_ps(s, _mm_movehl_ps(s, s));
    s = _mm_max_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

/* K in blocks of up to 1024 (equal ones), not 256: each block's partial C tiles are stored and
 * re-read, and a 256-k block of a 2-panel tile (32 KB of weights, all of a Zen 4 L1) was not
 * kept in L1 anyway while A's rows streamed through. AVX-512, BERT's K = 384 and 1536 GEMMs on
 * cold weights: 103-105 -> 109-112 GFLOP/s; bench-size encoders end to end 2-6 % faster at 1
 * thread and ~10 % at 2, and ~9 % with the AVX2 table (measured interleaved, 2026-12-06).
 * The arm build keeps the common default (not measured on a real arm core). */
#define FK_KC 1024
#if defined(__AVX512F__)
#define VL 16
/* 8 x 32 fp32 tile (16 zmm accumulators): as fast per flop as 12 x 32 here (FMA-bound
 * either way; 5-10 % faster on MobileBERT's 128-row GEMMs, measured serially), and 128 rows
 * are 16 whole blocks, so a 2-way row cut recomputes no padded block. */
#define FK_MR 8
#define FK_NP 2
/* A's rows broadcast in place ({1to16} operands of the FMAs) instead of packed per KC block:
 * the packing was a scalar transpose costing ~10 % of a K = 512 GEMM */
#ifndef FK_A_ROWS
#define FK_A_ROWS 1
#endif
typedef __m512 vf;
typedef __m512i vi;
#define vload _mm512_loadu_ps
#define vstore _mm512_storeu_ps
#define vset1 _mm512_set1_ps
#define vzero _mm512_setzero_ps
#define vadd _mm512_add_ps
#define vsub _mm512_sub_ps
#define vmul _mm512_mul_ps
#define vdiv _mm512_div_ps
#define vfma _mm512_fmadd_ps
#define vmax _mm512_max_ps
#define vmin _mm512_min_ps
#define vabs _mm512_abs_ps
#define vhsum _mm512_reduce_add_ps
#define vhmax _mm512_reduce_max_ps
#define vround(x) _mm512_roundscale_ps(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC)
#define vcvt_i _mm512_cvtps_epi32
#define vi_add _mm512_add_epi32
#define vi_sub _mm512_sub_epi32
#define vkeep_ge(r, x, t) _mm512_maskz_mov_ps(_mm512_cmp_ps_mask(x, t, _CMP_GE_OQ), r)
/* 1/x: 14-bit estimate + one Newton step (~1 ulp). */
#define vrcp_est _mm512_rcp14_ps
#define vi_load(p) _mm512_loadu_si512((const void *)(p))
#define vcvt_f _mm512_cvtepi32_ps
#define vi_set1 _mm512_set1_epi32
#define vi_sll(x, n) _mm512_slli_epi32(x, n)
#define vcast_f _mm512_castsi512_ps
#define vcast_i _mm512_castps_si512
#define vand_i _mm512_and_si512
#define vor_i _mm512_or_si512
/* Round to nearest even (MXCSR default, as nearbyintf), saturate, store VL int8. */
#define vstore_i8(p, v) _mm_storeu_si128((__m128i *)(p), _mm512_cvtsepi32_epi8(_mm512_cvtps_epi32(v)))
#else
#define VL 8
#define FK_MR 6
/* A broadcast from its rows (vbroadcastss from memory: a load, no shuffle) here too: the
 * packed copy cost 6-8 % of MobileBERT's K = 128 and 512 GEMMs at 256 bits (this Ice Lake
 * capped at avx2: 128 x 128 x 128 94 -> 101 GFLOP/s, 128 x 128 x 512 96 -> 104, 128 x 512 x 128
 * unchanged at 99; attention S=128 D=32 48-49 -> 55; FMA peak 112) */
#ifndef FK_A_ROWS
#define FK_A_ROWS 1
#endif
typedef __m256 vf;
typedef __m256i vi;
#define vload _mm256_loadu_ps
#define vstore _mm256_storeu_ps
#define vset1 _mm256_set1_ps
#define vzero _mm256_setzero_ps
#define vadd _mm256_add_ps
#define vsub _mm256_sub_ps
#define vmul _mm256_mul_ps
#define vdiv _mm256_div_ps
#define vfma _mm256_fmadd_ps
#define vmax _mm256_max_ps
#define vmin _mm256_min_ps
#define vabs(x) _mm256_andnot_ps(_mm256_set1_ps(-0.0f), x)
#define vround(x) _mm256_round_ps(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC)
#define vcvt_i _mm256_cvtps_epi32
#define vi_add _mm256_add_epi32
#define vi_sub _mm256_sub_epi32
#define vkeep_ge(r, x, t) _mm256_and_ps(r, _mm256_cmp_ps(x, t, _CMP_GE_OQ))
#define vrcp_est _mm256_rcp_ps
#define vi_load(p) _mm256_loadu_si256((const __m256i *)(p))
#define vcvt_f _mm256_cvtepi32_ps
#define vi_set1 _mm256_set1_epi32
#define vi_sll(x, n) _mm256_slli_epi32(x, n)
#define vcast_f _mm256_castsi256_ps
#define vcast_i _mm256_castps_si256
#define vand_i _mm256_and_si256
#define vor_i _mm256_or_si256
#define vhsum hsum256_ps
#define vhmax hmax256_ps
static inline void vstore_i8(int8_t *p, __m256 v) {
    __m256i i = _mm256_cvtps_epi32(v);
    __m128i h = _mm_packs_epi32(_mm256_castsi256_si128(i), _mm256_extracti128_si256(i, 1));
    _mm_storel_epi64((__m128i *)p, _mm_packs_epi16(h, h));
}
/* 32 values: the in-lane packs leave 4-byte groups in the order a0 b0 c0 d0 a1 b1 c1 d1 (a0: a's
 * first 4), which one dword permute puts back; ~8 uops where 4 vstore_i8 take 20 (quantising
 * MobileBERT's FC inputs cost ~7 % of its int8 time at avx2) */
#define FK_STORE_I8X4 1
static inline void vstore_i8x4(int8_t *p, __m256 a, __m256 b, __m256 c, __m256 d) {
    const __m256i ab = _mm256_packs_epi32(_mm256_cvtps_epi32(a), _mm256_cvtps_epi32(b));
    const __m256i cd = _mm256_packs_epi32(_mm256_cvtps_epi32(c), _mm256_cvtps_epi32(d));
    const __m256i r = _mm256_packs_epi16(ab, cd);
    _mm256_storeu_si256((__m256i *)p, _mm256_permutevar8x32_epi32(r, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7)));
}
#endif

/* v unchanged, hidden from the optimiser: a mul before it and an add after it stay two
 * roundings (GCC contracts intrinsics' mul + add into an FMA under -ffp-contract=fast) */
static inline vf vopaque(vf v) {
    __asm__("" : "+x"(v));
    return v;
}

static inline vf vcopysign(vf mag, vf sgn) {
    vi m = vi_set1(0x7fffffff);
    return vcast_f(vor_i(vand_i(vcast_i(mag), m), vand_i(vcast_i(sgn), vi_set1((int)0x80000000))));
}

static inline vf vrcp(vf x) {
    vf r = vrcp_est(x);
    return vmul(r, vfma(vsub(vzero(), x), r, vset1(2.0f)));
}

/* 2^n for integral n (vexp's scale): the exponent bits built directly. */
static inline vf vpow2i(vf n) { return vcast_f(vi_sll(vi_add(vcvt_i(n), vi_set1(127)), 23)); }

void FK_FN(fk_gelu_tab_f32)(int n, const float *x, float *y);
#include "../../common/fk_simd_f32.inc"

void FK_FN(fk_gelu_tab_f32)(int n, const float *x, float *y) {
    const float inv_h = FK_GELU_TAB_N / (FK_GELU_TAB_HI - FK_GELU_TAB_LO);
    int i = 0;
#if defined(__AVX512F__)
    for (; i + 16 <= n; i += 16) {
        __m512 v = _mm512_loadu_ps(x + i);
        __m512 t = _mm512_mul_ps(_mm512_sub_ps(v, _mm512_set1_ps(FK_GELU_TAB_LO)), _mm512_set1_ps(inv_h));
        t = _mm512_min_ps(_mm512_max_ps(t, _mm512_setzero_ps()), _mm512_set1_ps(FK_GELU_TAB_N));
        __m512i j = _mm512_min_epi32(_mm512_cvttps_epi32(t), _mm512_set1_epi32(FK_GELU_TAB_N - 1));
        __m512 f = _mm512_sub_ps(t, _mm512_cvtepi32_ps(j));
        __m512 g0 = _mm512_i32gather_ps(j, fk_gelu_tab, 4);
        __m512 g1 = _mm512_i32gather_ps(j, fk_gelu_tab + 1, 4);
        __m512 r = _mm512_fmadd_ps(f, _mm512_sub_ps(g1, g0), g0);
        r = _mm512_mask_blend_ps(_mm512_cmp_ps_mask(v, _mm512_set1_ps(FK_GELU_TAB_LO), _CMP_LE_OQ), r, _mm512_setzero_ps());
        r = _mm512_mask_blend_ps(_mm512_cmp_ps_mask(v, _mm512_set1_ps(FK_GELU_TAB_HI), _CMP_GE_OQ), r, v);
        _mm512_storeu_ps(y + i, r);
    }
#endif
    for (; i + 8 <= n; i += 8) {
        __m256 v = _mm256_loadu_ps(x + i);
        __m256 t = _mm256_mul_ps(_mm256_sub_ps(v, _mm256_set1_ps(FK_GELU_TAB_LO)), _mm256_set1_ps(inv_h));
        t = _mm256_min_ps(_mm256_max_ps(t, _mm256_setzero_ps()), _mm256_set1_ps(FK_GELU_TAB_N));
        __m256i j = _mm256_min_epi32(_mm256_cvttps_epi32(t), _mm256_set1_epi32(FK_GELU_TAB_N - 1));
        __m256 f = _mm256_sub_ps(t, _mm256_cvtepi32_ps(j));
        __m256 g0 = _mm256_i32gather_ps(fk_gelu_tab, j, 4);
        __m256 g1 = _mm256_i32gather_ps(fk_gelu_tab + 1, j, 4);
        __m256 r = _mm256_fmadd_ps(f, _mm256_sub_ps(g1, g0), g0);
        r = _mm256_blendv_ps(r, _mm256_setzero_ps(), _mm256_cmp_ps(v, _mm256_set1_ps(FK_GELU_TAB_LO), _CMP_LE_OQ));
        r = _mm256_blendv_ps(r, v, _mm256_cmp_ps(v, _mm256_set1_ps(FK_GELU_TAB_HI), _CMP_GE_OQ));
        _mm256_storeu_ps(y + i, r);
    }
    if (i < n) fk_gelu_tab_f32_generic(n - i, x + i, y + i);
}

#if defined(__AMX_INT8__)
/* int8 GEMM on AMX tiles (variant amx). A tile is 16 rows x 64 bytes; TDPBSSD adds
 * A[16][64 k] . B[16 groups of 4 k][16 columns x 4 k] into an int32 16 x 16 tile, and B's layout
 * is exactly one 64-k block of a weight panel (fk_pack_b_i8): 16 groups x 64 bytes, contiguous.
 * Register blocking 32 rows x 32 columns: C in tiles 0-3, A in 4-5, B in 6-7. A is loaded from
 * the activations when its tiles are whole, else copied per task into 1 KB tiles (rows past
 * m1 and k past K4 zero); a panel's last, partial k block is
 * copied into a zero-padded tile too (the panel may end the weight buffer). Signed x signed:
 * no offset correction. The int32 tiles are stored to L1 and scaled, biased and activated per
 * 16-column row. The tile state is configured per call and released before returning, so a
 * context switch between ops saves no 8 KB of tile data. */
typedef struct {
    uint8_t palette, start_row, reserved[14];
    uint16_t colsb[16];
    uint8_t rows[16];
} amx_tilecfg;

#define AMX_TB 1024 /* bytes of one 16 x 64 tile */

static inline void amx_epilogue(const fk_gemm_args *g, const int32_t *ct, int m, int mr, int col, int nc,
                                int fuse) {
    const __mmask16 keep = (__mmask16)((1u << nc) - 1);
    const __m512 ws = _mm512_maskz_loadu_ps(keep, g->w_scale + col);
    float bt[FK_NR];
    FK_FN(bias_tile)(g, col, nc, bt);
    const __m512 bv = _mm512_loadu_ps(bt);
    for (int i = 0; i < mr; i++) {
        __m512 v = _mm512_mul_ps(_mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_loadu_si512((const void *)(ct + i * 32))),
                                               _mm512_set1_ps(g->a_scale[m + i])), ws);
        if (fuse) {
            v = _mm512_add_ps(v, bv);
            v = FK_FN(epi_act)(g->epi, v);
        }
        float *c = g->c + (size_t)(m + i) * g->ldc + col;
        _mm512_mask_storeu_ps(c, keep, v);
        if (!fuse) FK_FN(epilogue_row)(g, c, m + i, col, nc);
    }
}

void FK_FN(fk_gemm_i8)(const fk_gemm_args *g, int m0, int m1, int n0, int n1) {
    if (m1 <= m0 || n1 <= n0) return;
    const int K4 = FK_K4(g->K), ng = K4 / 4, nkb = (ng + 15) / 16, tail = ng % 16;
    const int p0 = n0 / FK_NR, p1 = (n1 + FK_NR - 1) / FK_NR, rows = m1 - m0, nrt = (rows + 31) / 32 * 2;
    const size_t a_bytes = (size_t)nrt * nkb * AMX_TB, t_bytes = tail ? (size_t)(p1 - p0) * AMX_TB : 0;
    int8_t *ap = (int8_t *)FK_FN(tls_floats)((a_bytes + t_bytes + AMX_TB * 4) / 4), *bt = ap + a_bytes;
    int32_t *ct = (int32_t *)(bt + t_bytes); /* 32 x 32 int32 = 4 tiles */
    /* A tiles straight from aq when every tile is whole (64-k blocks, 32-row blocks) and the
     * task has fewer columns than k's (a copy of A would not pay for itself: measured, FFN-down
     * 128x128x2048 906 -> 1371 GOP/s), else copied into contiguous tiles (faster to stream when
     * reused over many panels): tile (rt, kb) at ap + (rt * nkb + kb) * 1 KB, row stride 64. */
    const int direct = K4 % 64 == 0 && rows % 32 == 0 && (p1 - p0) * FK_NR < K4;
    const int8_t *abase = direct ? (const int8_t *)g->aq + (size_t)m0 * g->lda : ap;
    const size_t a_rt = direct ? (size_t)16 * g->lda : (size_t)nkb * AMX_TB, a_kb = direct ? 64 : AMX_TB;
    const int a_ld = direct ? g->lda : 64;
    for (int rt = 0; !direct && rt < nrt; rt++)
        for (int r = 0; r < 16; r++) {
            const int row = m0 + rt * 16 + r;
            const int8_t *src = (const int8_t *)g->aq + (size_t)row * g->lda;
            for (int kb = 0; kb < nkb; kb++) {
                int8_t *dst = ap + ((size_t)rt * nkb + kb) * AMX_TB + r * 64;
                const int nk = row < m1 ? (K4 - kb * 64 < 64 ? K4 - kb * 64 : 64) : 0;
                memcpy(dst, src + kb * 64, (size_t)nk);
                memset(dst + nk, 0, (size_t)(64 - nk));
            }
        }
    const int8_t *w = (const int8_t *)g->w;
    for (int p = p0; tail && p < p1; p++) {
        int8_t *dst = bt + (size_t)(p - p0) * AMX_TB;
        memcpy(dst, w + ((size_t)p * ng + (nkb - 1) * 16) * 64, (size_t)tail * 64);
        memset(dst + tail * 64, 0, (size_t)(16 - tail) * 64);
    }
#define B_TILE(p, kb) (tail && (kb) == nkb - 1 ? bt + (size_t)((p) - p0) * AMX_TB : w + ((size_t)(p) * ng + (kb) * 16) * 64)
    amx_tilecfg cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.palette = 1;
    for (int t = 0; t < 8; t++) cfg.colsb[t] = 64, cfg.rows[t] = 16;
    _tile_loadconfig(&cfg);
    const int fuse = FK_FN(epi_in_regs)(g);
    for (int p = p0; p < p1; p += 2) {
        const int two = p + 1 < p1;
        for (int rt = 0; rt < nrt; rt += 2) {
            const int m = m0 + rt * 16, mr = m1 - m < 32 ? m1 - m : 32, hi = mr > 16;
            _tile_zero(0);
            _tile_zero(1);
            _tile_zero(2);
            _tile_zero(3);
            for (int kb = 0; kb < nkb; kb++) {
                const int8_t *a0 = abase + rt * a_rt + kb * a_kb;
                _tile_loadd(4, a0, a_ld);
                _tile_loadd(6, B_TILE(p, kb), 64);
                _tile_dpbssd(0, 4, 6);
                if (hi) {
                    _tile_loadd(5, a0 + a_rt, a_ld);
                    _tile_dpbssd(2, 5, 6);
                }
                if (two) {
                    _tile_loadd(7, B_TILE(p + 1, kb), 64);
                    _tile_dpbssd(1, 4, 7);
                    if (hi) _tile_dpbssd(3, 5, 7);
                }
            }
            _tile_stored(0, ct, 128);
            _tile_stored(1, ct + 16, 128);
            _tile_stored(2, ct + 16 * 32, 128);
            _tile_stored(3, ct + 16 * 32 + 16, 128);
            for (int h = 0; h <= two; h++) {
                const int col = (p + h) * FK_NR, nc = n1 - col < FK_NR ? n1 - col : FK_NR;
                amx_epilogue(g, ct + h * 16, m, mr, col, nc, fuse);
            }
        }
    }
#undef B_TILE
    _tile_release();
}
#else
/* int8 GEMM on weights packed in 4-k groups (fk_pack_b_i8). AVX-512 VNNI: vpdpbusd with the
 * weights made unsigned (+128) and 128 * the row's sum of A subtracted before scaling. AVX2
 * (and AVX-512 without VNNI): vpmaddwd on int16, A packed once per call (below). */
#if defined(__AVX512VNNI__)
/* VNNI: 8 rows x 32 columns (two adjacent weight panels) in 16 zmm accumulators, the epilogue
 * on the accumulators. vpdpbusd multiplies unsigned by signed bytes and broadcasts only its
 * signed operand from memory, so the weights are the unsigned side (w ^ 0x80 = w + 128, flipped
 * in the register after each load) and the activations the signed, broadcast one: one
 * instruction per 4 k's of a row and 16 columns, no broadcast register, no packed copy of A
 * (the rows are read in place). The + 128 comes back as 128 * (the row's sum of A), subtracted
 * per row. The previous 12 x 16 tile (A made unsigned and packed, a broadcast register per row,
 * the tile stored and re-read for its epilogue) ran MobileBERT's int8 FCs at about half of
 * vpdpbusd's peak on an AVX-512 VNNI EPYC. */
#define I8_MR 8
#define I8_NP 2
/* One 8 x (16 * np) tile: int32 sums into t (row stride 32). The accumulators are named
 * variables, not an array: with an array GCC copied every accumulator on every k step. */
#define I8_ROW(i)                                                          \
    {                                                                      \
        int32_t x4;                                                        \
        memcpy(&x4, r##i + 4 * q, 4);                                      \
        const __m512i av = _mm512_set1_epi32(x4);                          \
        c##i##0 = _mm512_dpbusd_epi32(c##i##0, w0, av);                    \
        if (np == 2) c##i##1 = _mm512_dpbusd_epi32(c##i##1, w1, av);       \
    }
#define I8_STORE(i)                                                        \
    _mm512_storeu_si512((void *)(t + (i) * 32), c##i##0);                  \
    if (np == 2) _mm512_storeu_si512((void *)(t + (i) * 32 + 16), c##i##1);
static inline __attribute__((always_inline)) void i8_tile(int ng, const int8_t *const *ar, const int8_t *b0,
                                                           const int8_t *b1, const int np, int32_t *t) {
    const __m512i flip = _mm512_set1_epi8((char)0x80);
    const int8_t *r0 = ar[0], *r1 = ar[1], *r2 = ar[2], *r3 = ar[3], *r4 = ar[4], *r5 = ar[5], *r6 = ar[6],
                 *r7 = ar[7];
    __m512i c00 = _mm512_setzero_si512(), c01 = c00, c10 = c00, c11 = c00, c20 = c00, c21 = c00, c30 = c00,
            c31 = c00, c40 = c00, c41 = c00, c50 = c00, c51 = c00, c60 = c00, c61 = c00, c70 = c00, c71 = c00;
    for (int q = 0; q < ng; q++) {
        const __m512i w0 = _mm512_xor_si512(_mm512_loadu_si512((const void *)(b0 + (size_t)q * 64)), flip);
        const __m512i w1 =
            np == 2 ? _mm512_xor_si512(_mm512_loadu_si512((const void *)(b1 + (size_t)q * 64)), flip) : w0;
        I8_ROW(0) I8_ROW(1) I8_ROW(2) I8_ROW(3) I8_ROW(4) I8_ROW(5) I8_ROW(6) I8_ROW(7)
    }
    I8_STORE(0) I8_STORE(1) I8_STORE(2) I8_STORE(3) I8_STORE(4) I8_STORE(5) I8_STORE(6) I8_STORE(7)
}
static void i8_tile1(int ng, const int8_t *const *ar, const int8_t *b0, int32_t *t) { i8_tile(ng, ar, b0, b0, 1, t); }
static void i8_tile2(int ng, const int8_t *const *ar, const int8_t *b0, const int8_t *b1, int32_t *t) {
    i8_tile(ng, ar, b0, b1, 2, t);
}

/* 128 * the sum of a row of n int8 (n a multiple of 4; the row is zero past K). */
static int32_t i8_rowsum128(const int8_t *r, int n) {
    const __m512i ones = _mm512_set1_epi8(1);
    __m512i acc = _mm512_setzero_si512();
    int k = 0;
    for (; k + 64 <= n; k += 64) acc = _mm512_dpbusd_epi32(acc, ones, _mm512_loadu_si512((const void *)(r + k)));
    if (k < n) acc = _mm512_dpbusd_epi32(acc, ones, _mm512_maskz_loadu_epi8(((__mmask64)1 << (n - k)) - 1, r + k));
    return _mm512_reduce_add_epi32(acc) * 128;
}

void FK_FN(fk_gemm_i8)(const fk_gemm_args *g, int m0, int m1, int n0, int n1) {
    if (m1 <= m0 || n1 <= n0) return;
    const int K4 = FK_K4(g->K), ng = K4 / 4, nmb = (m1 - m0 + I8_MR - 1) / I8_MR;
    const int8_t *aq = (const int8_t *)g->aq, *w = (const int8_t *)g->w;
    int32_t *rs = (int32_t *)FK_FN(tls_floats)((size_t)(m1 - m0));
    for (int m = m0; m < m1; m++) rs[m - m0] = i8_rowsum128(aq + (size_t)m * g->lda, K4);
    const int fuse = FK_FN(epi_in_regs)(g), res = g->epi == FK_EPI_BIAS_RES;
    const size_t pstride = (size_t)ng * 64; /* bytes of one weight panel */
    for (int p = n0 / FK_NR, np; p * FK_NR < n1; p += np) {
        const int col = p * FK_NR, rem = n1 - col;
        np = rem > FK_NR ? 2 : 1;
        const int8_t *b0 = w + (size_t)p * pstride, *b1 = b0 + pstride;
        __m512 ws[I8_NP], bv[I8_NP];
        __mmask16 keep[I8_NP];
        for (int j = 0; j < I8_NP; j++) {
            const int nc = rem - j * FK_NR;
            keep[j] = j < np ? (nc >= FK_NR ? (__mmask16)0xFFFF : (__mmask16)((1u << nc) - 1)) : 0;
            ws[j] = _mm512_maskz_loadu_ps(keep[j], g->w_scale + col + j * FK_NR);
            bv[j] = (fuse || res) && g->bias ? _mm512_maskz_loadu_ps(keep[j], g->bias + col + j * FK_NR) : _mm512_setzero_ps();
        }
        /* the next pair of panels, a slice per row block (read once from L3/DRAM) */
        const char *next = (const char *)(b0 + (size_t)np * pstride);
        const int lines = (int)(pstride * 2 / 64), per = (lines + nmb - 1) / nmb;
        for (int mb = 0; mb < nmb; mb++) {
            const int m = m0 + mb * I8_MR, mr = m1 - m < I8_MR ? m1 - m : I8_MR;
            const int8_t *ar[I8_MR];
            for (int i = 0; i < I8_MR; i++) /* rows past m1 repeat a real one; results dropped */
                ar[i] = aq + (size_t)(i < mr ? m + i : m1 - 1) * g->lda;
            for (int l = mb * per; l < (mb + 1) * per && l < lines; l++) __builtin_prefetch(next + (size_t)l * 64, 0, 3);
            int32_t acc[I8_MR * 32];
            if (np == 2) i8_tile2(ng, ar, b0, b1, acc);
            else i8_tile1(ng, ar, b0, acc);
            for (int i = 0; i < mr; i++) {
                const __m512i corr = _mm512_set1_epi32(rs[m + i - m0]);
                const __m512 sa = _mm512_set1_ps(g->a_scale[m + i]);
                float *c = g->c + (size_t)(m + i) * g->ldc + col;
                for (int j = 0; j < np; j++) {
                    const __m512i sum = _mm512_loadu_si512((const void *)(acc + i * 32 + j * FK_NR));
                    __m512 v = _mm512_mul_ps(_mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_sub_epi32(sum, corr)), sa), ws[j]);
                    /* an add with explicit rounding is never contracted into an FMA with the
                     * scale: the same float result as the reference kernel */
                    if (fuse) v = FK_FN(epi_act)(g->epi, _mm512_add_round_ps(v, bv[j], _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
                    if (res) { /* bias, then the residual's FMA: as the unfused steps round */
                        const float *r = g->res + (size_t)(m + i) * g->ldres + col + j * FK_NR;
                        v = _mm512_add_round_ps(v, bv[j], _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
                        v = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(keep[j], r),
                                            _mm512_maskz_loadu_ps(keep[j], g->res_scale + col + j * FK_NR), v);
                    }
                    _mm512_mask_storeu_ps(c + j * FK_NR, keep[j], v);
                }
                if (!fuse && !res) FK_FN(epilogue_row)(g, c, m + i, col, rem < np * FK_NR ? rem : np * FK_NR);
            }
        }
    }
}
#else
/* Without VNNI (avx2 and avx512 tables): VPMADDWD on 16-bit values, MLAS's U8U8 AVX2 scheme
 * (QgemmU8U8KernelAvx2.S) for signed bytes. A is sign-extended to int16 once, when its rows
 * are packed; a weight group (16 bytes: 4 columns x 4 k's) is sign-extended by one VPMOVSXBW
 * from memory and shared by the I8_MR rows; each VPMADDWD multiplies 8 pairs of int16 and
 * sums each pair into int32 (lane 2j: column j, k 0-1; lane 2j+1: k 2-3), and a VPHADDD at
 * the end of the tile folds the two halves. Products of int8 in int16 and pair sums in int32
 * cannot overflow, for any int8 (-128 included), so the sums are exact without any bound on
 * the quantisation. The sign trick it replaces (VPMADDUBSW(|a|, sign(w, a)) + VPMADDWD) cost
 * 9 vector uops per 64 products (7 of them on the two multiply ports); this costs 2 per 16
 * (VPMADDWD + VPADDD, the add on any of three ports) plus 2 VPMOVSXBW per group shared by the
 * tile's rows: ~22 products a cycle on 3 vector ports instead of ~18. VPMADDUBSW alone (ORT's
 * U8S8 path, 32 products in 3 uops) is faster but its int16 pair sums saturate. */
/* 4 rows, not 6: 6 x 8 would fill the 16 registers (12 accumulators) and needs fewer weight
 * extensions per product, but 128-row GEMMs (and 64-row tasks) are whole 4-row blocks and
 * pay for 2-4 padding rows in 6-row ones: 4 rows measured 1-2 % faster on MobileBERT shapes. */
#define I8_MR 4
#define I8_NP 1
/* I8_MR rows x 16 columns as two 8-column halves (2 accumulators a row each, 2 weight
 * registers, 2 temporaries). a: per 4-k group q and row i, 4 int16 at
 * a + (q * I8_MR + i) * 4. c: I8_MR x FK_NR int32. A row's broadcast, products and adds are
 * one asm statement: in C, GCC (12) hoisted all six broadcasts to the top of the k loop and
 * kept the accumulators on the stack, whatever the accumulators' form. */
#define I8W_ROW(i)                                                                  \
    __asm__("vpbroadcastq %[a], %[t]\n\t"                                            \
            "vpmaddwd %[b0], %[t], %[u]\n\t"                                         \
            "vpaddd %[u], %[x0], %[x0]\n\t"                                          \
            "vpmaddwd %[b1], %[t], %[t]\n\t"                                         \
            "vpaddd %[t], %[x1], %[x1]"                                              \
            : [x0] "+x"(c##i##0), [x1] "+x"(c##i##1), [t] "=&x"(t), [u] "=&x"(u)      \
            : [a] "m"(*(const long long *)(aq + (i) * 4)), [b0] "x"(b0), [b1] "x"(b1));
#define I8W_STORE(i) /* [c0 c1 c4 c5 | c2 c3 c6 c7] -> c0..c7 */                     \
    _mm256_storeu_si256((__m256i *)(c + (i) * FK_NR + h * 8),                        \
                        _mm256_permute4x64_epi64(_mm256_hadd_epi32(c##i##0, c##i##1), 0xD8));
static void ukernel_i8w(int ng, const int16_t *a, const int8_t *b, int32_t *c) {
    for (int h = 0; h < 2; h++) {
        __m256i c00 = _mm256_setzero_si256(), c01 = c00, c10 = c00, c11 = c00, c20 = c00, c21 = c00, c30 = c00,
                c31 = c00;
        const int8_t *bh = b + h * 32;
        for (int q = 0; q < ng; q++) {
            const __m256i b0 = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)(bh + (size_t)q * 64)));
            const __m256i b1 = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)(bh + (size_t)q * 64 + 16)));
            const int16_t *aq = a + (size_t)q * I8_MR * 4;
            __m256i t, u;
            I8W_ROW(0) I8W_ROW(1) I8W_ROW(2) I8W_ROW(3)
        }
        I8W_STORE(0) I8W_STORE(1) I8W_STORE(2) I8W_STORE(3)
    }
}
#undef I8W_ROW
#undef I8W_STORE

void FK_FN(fk_gemm_i8)(const fk_gemm_args *g, int m0, int m1, int n0, int n1) {
    if (m1 <= m0 || n1 <= n0) return;
    const int ng = FK_K4(g->K) / 4, nmb = (m1 - m0 + I8_MR - 1) / I8_MR;
    /* A packed once per call: I8_MR-row micro-panels, int16 (2 floats of scratch per group and row) */
    int16_t *ap = (int16_t *)FK_FN(tls_floats)((size_t)nmb * I8_MR * ng * 2);
    for (int mb = 0; mb < nmb; mb++) {
        int16_t *dst = ap + (size_t)mb * ng * I8_MR * 4;
        for (int i = 0; i < I8_MR; i++) {
            int row = m0 + mb * I8_MR + i;
            if (row >= m1) row = m1 - 1; /* padding rows repeat a real one; results dropped */
            const int8_t *src = (const int8_t *)g->aq + (size_t)row * g->lda;
            int q = 0;
            for (; q + 4 <= ng; q += 4) { /* 16 bytes -> 4 groups of 4 int16 */
                const __m256i w = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)(src + 4 * q)));
                _mm_storel_epi64((__m128i *)(dst + ((size_t)q * I8_MR + i) * 4), _mm256_castsi256_si128(w));
                _mm_storeh_pd((double *)(dst + ((size_t)(q + 1) * I8_MR + i) * 4),
                              _mm_castsi128_pd(_mm256_castsi256_si128(w)));
                _mm_storel_epi64((__m128i *)(dst + ((size_t)(q + 2) * I8_MR + i) * 4), _mm256_extracti128_si256(w, 1));
                _mm_storeh_pd((double *)(dst + ((size_t)(q + 3) * I8_MR + i) * 4),
                              _mm_castsi128_pd(_mm256_extracti128_si256(w, 1)));
            }
            for (; q < ng; q++)
                for (int t = 0; t < 4; t++) dst[((size_t)q * I8_MR + i) * 4 + t] = src[4 * q + t];
        }
    }
    int32_t tile[I8_MR * FK_NR];
    const int fuse = FK_FN(epi_in_regs)(g), res = g->epi == FK_EPI_BIAS_RES;
    for (int p = n0 / FK_NR; p * FK_NR < n1; p++) {
        const int col = p * FK_NR, nc = n1 - col < FK_NR ? n1 - col : FK_NR;
        const int8_t *b = (const int8_t *)g->w + (size_t)p * ng * 64;
        float ws[FK_NR];
        for (int j = 0; j < FK_NR; j++) ws[j] = j < nc ? g->w_scale[col + j] : 0.0f;
        float bt[FK_NR];
        FK_FN(bias_tile)(g, col, nc, bt);
        for (int mb = 0; mb < nmb; mb++) {
            const int m = m0 + mb * I8_MR, mr = m1 - m < I8_MR ? m1 - m : I8_MR;
            ukernel_i8w(ng, ap + (size_t)mb * ng * I8_MR * 4, b, tile);
            for (int i = 0; i < mr; i++) {
                float *c = g->c + (size_t)(m + i) * g->ldc + col, out[FK_NR];
                /* a whole panel is stored straight to C (a memcpy call per row cost ~10 % of
                 * a 128 x 128 x 128 GEMM); a partial one through out */
                float *dst = nc == FK_NR ? c : out;
                const int res_here = res && dst == c; /* the residual on a whole panel in registers */
                const vf sa = vset1(g->a_scale[m + i]);
                const float *r = res_here ? g->res + (size_t)(m + i) * g->ldres + col : NULL;
                for (int j = 0; j < FK_NR; j += VL) {
                    /* opaque: the bias add is never contracted into an FMA with the scale, so
                     * the float result is the reference kernel's (and the unfused steps') */
                    vf v = vopaque(vmul(vmul(vcvt_f(vi_load(tile + i * FK_NR + j)), sa), vload(ws + j)));
                    if (fuse) v = FK_FN(epi_act)(g->epi, vadd(v, vload(bt + j)));
                    if (res_here) v = vfma(vload(r + j), vload(g->res_scale + col + j), vopaque(vadd(v, vload(bt + j))));
                    vstore(dst + j, v);
                }
                if (dst == out) memcpy(c, out, sizeof(float) * nc);
                if (!fuse && !res_here) FK_FN(epilogue_row)(g, c, m + i, col, nc);
            }
        }
    }
}
#endif /* __AVX512VNNI__ */
#endif /* __AMX_INT8__ */

/* 4-bit GEMM on fk_panel_q4_0: per 32-k block, the panel's nibbles are unpacked in registers
 * into eight 4-k groups of int8 (q - 8), multiplied with the Q8_0 activations like the int8
 * GEMM (VNNI: A + 128 and a column-sum correction; AVX2: sign trick), and the block's int32
 * sums are scaled by d_w * d_a into float accumulators. Weights never exist unpacked in memory. */
#if defined(__AVX512VNNI__)
#define Q4_MR 8
#define Q4_XOR 0x80808080u
static inline void ukernel_q4(int nb, const uint32_t *a, const float *ad, const fk_panel_q4_0 *w, float *c) {
    __m512 facc[Q4_MR];
    for (int i = 0; i < Q4_MR; i++) facc[i] = _mm512_setzero_ps();
    const __m512i m4 = _mm512_set1_epi8(0x0F), s8 = _mm512_set1_epi8(8), ones = _mm512_set1_epi8(1);
    for (int b = 0; b < nb; b++) {
        __m512i wv[8], cs = _mm512_setzero_si512();
        for (int h = 0; h < 4; h++) {
            __m512i v = _mm512_loadu_si512((const void *)(w[b].qs + 64 * h));
            wv[h] = _mm512_sub_epi8(_mm512_and_si512(v, m4), s8);
            wv[h + 4] = _mm512_sub_epi8(_mm512_and_si512(_mm512_srli_epi16(v, 4), m4), s8);
        }
        for (int h = 0; h < 8; h++) cs = _mm512_dpbusd_epi32(cs, ones, wv[h]);
        cs = _mm512_slli_epi32(cs, 7);
        const __m512 wd = _mm512_loadu_ps(w[b].d);
        const uint32_t *ab = a + (size_t)b * 8 * Q4_MR;
        for (int i = 0; i < Q4_MR; i++) {
            __m512i acc = _mm512_setzero_si512();
            for (int h = 0; h < 8; h++) acc = _mm512_dpbusd_epi32(acc, _mm512_set1_epi32((int)ab[h * Q4_MR + i]), wv[h]);
            __m512 sc = _mm512_mul_ps(wd, _mm512_set1_ps(ad[b * Q4_MR + i]));
            facc[i] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_sub_epi32(acc, cs)), sc, facc[i]);
        }
    }
    for (int i = 0; i < Q4_MR; i++) _mm512_storeu_ps(c + i * FK_NR, facc[i]);
}
#else
/* Without VNNI: the nibbles stay unsigned (q in 0..15, no - 8) as VPMADDUBSW's unsigned side
 * and the Q8_0 activations are its signed side; the - 8 comes back as 8 * the block's sum of
 * A (Q4_ASUM: the driver packs one per row and block), subtracted in int32. A pair sum is at
 * most 2 * 15 * 128 = 3840 in magnitude, so VPMADDUBSW never saturates and a block's 8 groups
 * add up in int16 (at most 30720 < 32767) before one VPMADDWD widens them: 2 uops per 32
 * products (VPMADDUBSW + VPADDW) where the sign trick took 4.5 (VPABSB, VPSIGNB, VPMADDUBSW,
 * VPMADDWD, VPADDD). Tile 4 rows x 16 columns: 8 int16 accumulators, 4 weight registers and
 * 2 broadcasts; the fp32 sums of the blocks live in the C tile (L1), touched once a block. */
#define Q4_MR 4
#define Q4_XOR 0u
#define Q4_ASUM 1
/* one row of one 4-k group pair (h, h + 4): in asm, as the int8 kernel's rows, so the eight
 * int16 accumulators stay in registers (GCC hoisted the broadcasts and spilled them) */
#define Q4_ROW(i)                                                                                      \
    __asm__("vpbroadcastd %[al], %[t]\n\t"                                                              \
            "vpmaddubsw %[t], %[l0], %[u]\n\t"                                                          \
            "vpaddw %[u], %[x0], %[x0]\n\t"                                                             \
            "vpmaddubsw %[t], %[l1], %[t]\n\t"                                                          \
            "vpaddw %[t], %[x1], %[x1]\n\t"                                                             \
            "vpbroadcastd %[ah], %[t]\n\t"                                                              \
            "vpmaddubsw %[t], %[u0], %[u]\n\t"                                                          \
            "vpaddw %[u], %[x0], %[x0]\n\t"                                                             \
            "vpmaddubsw %[t], %[u1], %[t]\n\t"                                                          \
            "vpaddw %[t], %[x1], %[x1]"                                                                 \
            : [x0] "+x"(s##i##0), [x1] "+x"(s##i##1), [t] "=&x"(t), [u] "=&x"(u)                        \
            : [al] "m"(ab[h * Q4_MR + (i)]), [ah] "m"(ab[(h + 4) * Q4_MR + (i)]), [l0] "x"(l0), [l1] "x"(l1), \
              [u0] "x"(u0), [u1] "x"(u1));
#define Q4_ACC(i)                                                                                      \
    {                                                                                                  \
        const __m256i corr = _mm256_set1_epi32(8 * as[b * Q4_MR + (i)]);                               \
        const __m256 sa = _mm256_set1_ps(ad[b * Q4_MR + (i)]);                                         \
        const __m256 x0 = _mm256_cvtepi32_ps(_mm256_sub_epi32(_mm256_madd_epi16(s##i##0, ones), corr)); \
        const __m256 x1 = _mm256_cvtepi32_ps(_mm256_sub_epi32(_mm256_madd_epi16(s##i##1, ones), corr)); \
        float *ci = c + (i) * FK_NR;                                                                   \
        _mm256_storeu_ps(ci, _mm256_fmadd_ps(x0, _mm256_mul_ps(wd0, sa), _mm256_loadu_ps(ci)));         \
        _mm256_storeu_ps(ci + 8, _mm256_fmadd_ps(x1, _mm256_mul_ps(wd1, sa), _mm256_loadu_ps(ci + 8))); \
    }
static void ukernel_q4s(int nb, const uint32_t *a, const float *ad, const int32_t *as, const fk_panel_q4_0 *w,
                        float *c) {
    memset(c, 0, sizeof(float) * Q4_MR * FK_NR);
    const __m256i m4 = _mm256_set1_epi8(0x0F), ones = _mm256_set1_epi16(1);
    for (int b = 0; b < nb; b++) {
        const uint32_t *ab = a + (size_t)b * 8 * Q4_MR;
        __m256i s00 = _mm256_setzero_si256(), s01 = s00, s10 = s00, s11 = s00, s20 = s00, s21 = s00, s30 = s00,
                s31 = s00;
        for (int h = 0; h < 4; h++) {
            const __m256i v0 = _mm256_loadu_si256((const __m256i *)(w[b].qs + 64 * h));
            const __m256i v1 = _mm256_loadu_si256((const __m256i *)(w[b].qs + 64 * h + 32));
            const __m256i l0 = _mm256_and_si256(v0, m4), l1 = _mm256_and_si256(v1, m4);
            const __m256i u0 = _mm256_and_si256(_mm256_srli_epi16(v0, 4), m4);
            const __m256i u1 = _mm256_and_si256(_mm256_srli_epi16(v1, 4), m4);
            __m256i t, u;
            Q4_ROW(0) Q4_ROW(1) Q4_ROW(2) Q4_ROW(3)
        }
        const __m256 wd0 = _mm256_loadu_ps(w[b].d), wd1 = _mm256_loadu_ps(w[b].d + 8);
        Q4_ACC(0) Q4_ACC(1) Q4_ACC(2) Q4_ACC(3)
    }
}
#undef Q4_ROW
#undef Q4_ACC
#endif

#include "../../common/fk_q4_driver.inc"

const fk_kernels FK_FN(fk_kernels) = {
#if defined(__AMX_INT8__)
    "amx", FK_FEAT_AVX2 | FK_FEAT_FMA | FK_FEAT_F16C | FK_FEAT_AVX512F | FK_FEAT_AVX512BW | FK_FEAT_AVX512VL |
               FK_FEAT_AVX512DQ | FK_FEAT_AVX512VNNI | FK_FEAT_AMX_TILE | FK_FEAT_AMX_INT8,
#elif defined(__AVX512VNNI__)
    "avx512-vnni", FK_FEAT_AVX2 | FK_FEAT_FMA | FK_FEAT_F16C | FK_FEAT_AVX512F | FK_FEAT_AVX512BW |
                       FK_FEAT_AVX512VL | FK_FEAT_AVX512DQ | FK_FEAT_AVX512VNNI,
#elif defined(__AVX512F__)
    "avx512", FK_FEAT_AVX2 | FK_FEAT_FMA | FK_FEAT_F16C | FK_FEAT_AVX512F | FK_FEAT_AVX512BW |
                  FK_FEAT_AVX512VL | FK_FEAT_AVX512DQ,
#else
    "avx2", FK_FEAT_AVX2 | FK_FEAT_FMA | FK_FEAT_F16C,
#endif
    FK_SIMD_KERNELS
#if defined(__AMX_INT8__) /* AMX: 32 rows x 2 panels per register block; a column cut costs
                            * 1.2-1.4x at N >= 256 (A copied into tiles per task), a row cut 1.01-1.07x */
    {FK_MR, 32, Q4_MR}, {FK_NR * FK_NP, 2 * FK_NR, FK_NR}, {{16, 4}, {64, 8}, {16, 4}},
#else
    {FK_MR, I8_MR, Q4_MR}, {FK_NR * FK_NP, FK_NR * I8_NP, FK_NR}, {{16, 4}, {16, 4}, {16, 4}},
#endif
};
