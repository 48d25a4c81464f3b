/* x86 kernels, compiled once per variant: FK_VARIANT=avx2 (-mavx2 -mfma -mf16c) and
 * FK_VARIANT=avx512 (adds -mavx512f -mavx512bw -mavx512vl -mavx512dq). Inside each kernel the
 * widest path comes first (AVX-512), then AVX2, then an unconditional scalar tail. */
#include <immintrin.h>

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

#if defined(__AVX512F__)
#define VL 16
#define FK_MR 12
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
#define vi_set1 _mm512_set1_epi32
#define vi_sll(x, n) _mm512_slli_epi32(x, n)
#define vcast_f _mm512_castsi512_ps
#define vcast_i _mm512_castps_si512
#define vand_i _mm512_and_si512
#define vor_i _mm512_or_si512
#else
#define VL 8
#define FK_MR 6
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
#define vi_set1 _mm256_set1_epi32
#define vi_sll(x, n) _mm256_slli_epi32(x, n)
#define vcast_f _mm256_castsi256_ps
#define vcast_i _mm256_castps_si256
#define vand_i _mm256_and_si256
#define vor_i _mm256_or_si256
#define vhsum hsum256_ps
#define vhmax hmax256_ps
#endif

static inline vf vcopysign(vf mag, vf sgn) {
    vi m = vi_set1(0x7fffffff);
    return vcast_f(vor_i(vand_i(vcast_i(mag), m), vand_i(vcast_i(sgn), vi_set1((int)0x80000000))));
}

/* exp(x): Cody-Waite range reduction + Cephes degree-5 polynomial. */
static inline vf vexp(vf x) {
    x = vmin(vmax(x, vset1(-87.3f)), vset1(88.3f));
    vf n = vround(vmul(x, vset1(1.44269504088896341f)));
    vf r = vfma(n, vset1(-0.693359375f), x);
    r = vfma(n, vset1(2.12194440e-4f), r);
    vf p = vset1(1.9875691500E-4f);
    p = vfma(p, r, vset1(1.3981999507E-3f));
    p = vfma(p, r, vset1(8.3334519073E-3f));
    p = vfma(p, r, vset1(4.1665795894E-2f));
    p = vfma(p, r, vset1(1.6666665459E-1f));
    p = vfma(p, r, vset1(5.0000001201E-1f));
    p = vfma(p, vmul(r, r), vadd(r, vset1(1.0f)));
    vi e = vi_sll(vi_add(vcvt_i(n), vi_set1(127)), 23);
    return vmul(p, vcast_f(e));
}

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

static inline int hsum_i32_8(__m256i v) {
    __m128i s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0x4e));
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0xb1));
    return _mm_cvtsi128_si32(s);
}

/* int8 GEMM: one row of A against four weight rows (columns of W) per pass, so each A chunk
 * is loaded once; products widened to int16 and summed in pairs by (v)pmaddwd, exact. */
void FK_FN(fk_gemm_i8)(const fk_gemm_args *g, int m0, int m1, int n0, int n1) {
    const int K = g->K;
    const int8_t *wall = (const int8_t *)g->w;
    for (int m = m0; m < m1; m++) {
        const int8_t *a = (const int8_t *)g->aq + (size_t)m * g->lda;
        float *c = g->c + (size_t)m * g->ldc;
        const float sa = g->a_scale[m];
        int n = n0;
        for (; n < n1; n += 4) {
            const int nw = n1 - n < 4 ? n1 - n : 4;
            const int8_t *w[4];
            for (int j = 0; j < 4; j++) w[j] = wall + (size_t)(n + (j < nw ? j : 0)) * K;
            int32_t s[4] = {0, 0, 0, 0};
            int k = 0;
#if defined(__AVX512BW__)
            __m512i z0 = _mm512_setzero_si512(), z1 = z0, z2 = z0, z3 = z0;
            for (; k + 32 <= K; k += 32) {
                __m512i av = _mm512_cvtepi8_epi16(_mm256_loadu_si256((const __m256i *)(a + k)));
                z0 = _mm512_add_epi32(z0, _mm512_madd_epi16(av, _mm512_cvtepi8_epi16(_mm256_loadu_si256((const __m256i *)(w[0] + k)))));
                z1 = _mm512_add_epi32(z1, _mm512_madd_epi16(av, _mm512_cvtepi8_epi16(_mm256_loadu_si256((const __m256i *)(w[1] + k)))));
                z2 = _mm512_add_epi32(z2, _mm512_madd_epi16(av, _mm512_cvtepi8_epi16(_mm256_loadu_si256((const __m256i *)(w[2] + k)))));
                z3 = _mm512_add_epi32(z3, _mm512_madd_epi16(av, _mm512_cvtepi8_epi16(_mm256_loadu_si256((const __m256i *)(w[3] + k)))));
            }
            s[0] += _mm512_reduce_add_epi32(z0);
            s[1] += _mm512_reduce_add_epi32(z1);
            s[2] += _mm512_reduce_add_epi32(z2);
            s[3] += _mm512_reduce_add_epi32(z3);
#endif
            __m256i y0 = _mm256_setzero_si256(), y1 = y0, y2 = y0, y3 = y0;
            for (; k + 16 <= K; k += 16) {
                __m256i av = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)(a + k)));
                y0 = _mm256_add_epi32(y0, _mm256_madd_epi16(av, _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)(w[0] + k)))));
                y1 = _mm256_add_epi32(y1, _mm256_madd_epi16(av, _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)(w[1] + k)))));
                y2 = _mm256_add_epi32(y2, _mm256_madd_epi16(av, _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)(w[2] + k)))));
                y3 = _mm256_add_epi32(y3, _mm256_madd_epi16(av, _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)(w[3] + k)))));
            }
            s[0] += hsum_i32_8(y0), s[1] += hsum_i32_8(y1), s[2] += hsum_i32_8(y2), s[3] += hsum_i32_8(y3);
            for (; k < K; k++)
                for (int j = 0; j < 4; j++) s[j] += (int32_t)a[k] * w[j][k];
            for (int j = 0; j < nw; j++) c[n + j] = (float)s[j] * sa * g->w_scale[n + j];
        }
        FK_FN(epilogue_row)(g, c + n0, n0, n1 - n0);
    }
}

/* Unpack 32 4-bit weights into int8 in [-8, 7], q8_0 order (low nibbles then high). */
static inline __m256i unpack_q4(const uint8_t *qs) {
    __m128i v = _mm_loadu_si128((const __m128i *)qs);
    __m256i both = _mm256_set_m128i(_mm_srli_epi16(v, 4), v);
    return _mm256_sub_epi8(_mm256_and_si256(both, _mm256_set1_epi8(0x0F)), _mm256_set1_epi8(8));
}

/* Signed int8 dot in 8 int32 lanes via the |x|, sign(y,x) trick for vpmaddubsw. */
static inline __m256i dot_i8_32(__m256i x, __m256i y) {
    __m256i p16 = _mm256_maddubs_epi16(_mm256_sign_epi8(x, x), _mm256_sign_epi8(y, x));
    return _mm256_madd_epi16(p16, _mm256_set1_epi16(1));
}

/* 4-bit GEMM: weights unpacked in registers right before the multiply, never to memory. */
void FK_FN(fk_gemm_q4_0)(const fk_gemm_args *g, int m0, int m1, int n0, int n1) {
    const int nb = g->K / FK_QK;
    const fk_block_q4_0 *wall = (const fk_block_q4_0 *)g->w;
    for (int m = m0; m < m1; m++) {
        const fk_block_q8_0 *a = (const fk_block_q8_0 *)g->aq + (size_t)m * nb;
        float *c = g->c + (size_t)m * g->ldc;
        for (int n = n0; n < n1; n += 4) {
            const int nw = n1 - n < 4 ? n1 - n : 4;
            const fk_block_q4_0 *w[4];
            for (int j = 0; j < 4; j++) w[j] = wall + (size_t)(n + (j < nw ? j : 0)) * nb;
            __m256 acc[4] = {_mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps()};
            for (int b = 0; b < nb; b++) {
                __m256i av = _mm256_loadu_si256((const __m256i *)a[b].qs);
                for (int j = 0; j < 4; j++) {
                    __m256 d = _mm256_set1_ps(w[j][b].d * a[b].d);
                    __m256 p = _mm256_cvtepi32_ps(dot_i8_32(unpack_q4(w[j][b].qs), av));
                    acc[j] = _mm256_fmadd_ps(d, p, acc[j]);
                }
            }
            for (int j = 0; j < nw; j++) c[n + j] = hsum256_ps(acc[j]);
        }
        FK_FN(epilogue_row)(g, c + n0, n0, n1 - n0);
    }
}

const fk_kernels FK_FN(fk_kernels) = {
#if defined(__AVX512F__)
    "avx512", FK_FEAT_AVX2 | FK_FEAT_FMA | FK_FEAT_F16C | FK_FEAT_AVX512F | FK_FEAT_AVX512BW |
                  FK_FEAT_AVX512VL | FK_FEAT_AVX512DQ,
#else
    "avx2", FK_FEAT_AVX2 | FK_FEAT_FMA | FK_FEAT_F16C,
#endif
    FK_FN(fk_dot_f32), FK_FN(fk_axpy_f32), FK_FN(fk_add_f32), FK_FN(fk_scale_f32),
    FK_FN(fk_gelu_f32), FK_FN(fk_gelu_tab_f32), FK_FN(fk_layernorm_f32),
    FK_FN(fk_softmax_f32), FK_FN(fk_quantize_row_i8), FK_FN(fk_quantize_row_q8_0),
    FK_FN(fk_gemm_f32), FK_FN(fk_gemm_i8), FK_FN(fk_gemm_q4_0), FK_FN(fk_attention_f32),
};
