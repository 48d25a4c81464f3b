/* AArch64 kernels, compiled once per variant: FK_VARIANT=neon (-march=armv8-a) and
 * FK_VARIANT=dotprod (-march=armv8.2-a+dotprod). The integer GEMMs use SDOT when the variant
 * has it (widest first), else widening multiplies, then a scalar tail. */
#include <arm_neon.h>

#include "fk.h"
#include "fk_fallback.h"

#define VL 4
#define FK_MR 6
typedef float32x4_t vf;
#define vload vld1q_f32
#define vstore vst1q_f32
#define vset1 vdupq_n_f32
#define vzero() vdupq_n_f32(0.0f)
#define vadd vaddq_f32
#define vsub vsubq_f32
#define vmul vmulq_f32
#define vdiv vdivq_f32
#define vfma(a, b, c) vfmaq_f32(c, a, b)
#define vmax vmaxq_f32
#define vmin vminq_f32
#define vabs vabsq_f32
#define vhsum vaddvq_f32
#define vhmax vmaxvq_f32

static inline vf vcopysign(vf mag, vf sgn) {
    return vbslq_f32(vdupq_n_u32(0x80000000u), sgn, mag);
}

/* exp(x): Cody-Waite range reduction + Cephes degree-5 polynomial (same as x86). */
static inline vf vexp(vf x) {
    x = vmin(vmax(x, vset1(-87.3f)), vset1(88.3f));
    vf n = vrndnq_f32(vmul(x, vset1(1.44269504088896341f)));
    vf r = vfma(n, vset1(-0.693359375f), x);
    r = vfma(n, vset1(2.12194440e-4f), r);
    vf p = vset1(1.9875691500E-4f);
    p = vfma(p, r, vset1(1.3981999507E-3f));
    p = vfma(p, r, vset1(8.3334519073E-3f));
    p = vfma(p, r, vset1(4.1665795894E-2f));
    p = vfma(p, r, vset1(1.6666665459E-1f));
    p = vfma(p, r, vset1(5.0000001201E-1f));
    p = vfma(p, vmul(r, r), vadd(r, vset1(1.0f)));
    int32x4_t e = vshlq_n_s32(vaddq_s32(vcvtq_s32_f32(n), vdupq_n_s32(127)), 23);
    return vmul(p, vreinterpretq_f32_s32(e));
}

#include "../../common/fk_simd_f32.inc"

/* Sum of the 16 int8 products a[i]*b[i] into int32 lanes. */
static inline int32x4_t dot16(int32x4_t acc, int8x16_t a, int8x16_t b) {
#if defined(__ARM_FEATURE_DOTPROD)
    return vdotq_s32(acc, a, b);
#else
    int16x8_t lo = vmull_s8(vget_low_s8(a), vget_low_s8(b));
    int16x8_t hi = vmull_high_s8(a, b);
    return vpadalq_s16(vpadalq_s16(acc, lo), hi);
#endif
}

/* int8 GEMM: one row of A against four weight rows per pass (A chunk loaded once). */
void FK_FN(fk_gemm_i8)(const fk_gemm_args *g, int m0, int m1, int n0, int n1) {
    const int K = g->K;
    const int8_t *wall = (const int8_t *)g->w;
    for (int m = m0; m < m1; m++) {
        const int8_t *a = (const int8_t *)g->aq + (size_t)m * g->lda;
        float *c = g->c + (size_t)m * g->ldc;
        for (int n = n0; n < n1; n += 4) {
            const int nw = n1 - n < 4 ? n1 - n : 4;
            const int8_t *w[4];
            for (int j = 0; j < 4; j++) w[j] = wall + (size_t)(n + (j < nw ? j : 0)) * K;
            int32x4_t s0 = vdupq_n_s32(0), s1 = s0, s2 = s0, s3 = s0;
            int k = 0;
            for (; k + 16 <= K; k += 16) {
                int8x16_t av = vld1q_s8(a + k);
                s0 = dot16(s0, av, vld1q_s8(w[0] + k));
                s1 = dot16(s1, av, vld1q_s8(w[1] + k));
                s2 = dot16(s2, av, vld1q_s8(w[2] + k));
                s3 = dot16(s3, av, vld1q_s8(w[3] + k));
            }
            int32_t s[4] = {vaddvq_s32(s0), vaddvq_s32(s1), vaddvq_s32(s2), vaddvq_s32(s3)};
            for (; k < K; k++)
                for (int j = 0; j < 4; j++) s[j] += (int32_t)a[k] * w[j][k];
            for (int j = 0; j < nw; j++) c[n + j] = (float)s[j] * g->a_scale[m] * g->w_scale[n + j];
        }
        FK_FN(epilogue_row)(g, c + n0, n0, n1 - n0);
    }
}

/* 4-bit GEMM: nibbles unpacked in registers right before the multiply. */
void FK_FN(fk_gemm_q4_0)(const fk_gemm_args *g, int m0, int m1, int n0, int n1) {
    const int nb = g->K / FK_QK;
    const fk_block_q4_0 *wall = (const fk_block_q4_0 *)g->w;
    const uint8x16_t m4 = vdupq_n_u8(0x0F);
    const int8x16_t s8 = vdupq_n_s8(8);
    for (int m = m0; m < m1; m++) {
        const fk_block_q8_0 *a = (const fk_block_q8_0 *)g->aq + (size_t)m * nb;
        float *c = g->c + (size_t)m * g->ldc;
        for (int n = n0; n < n1; n += 4) {
            const int nw = n1 - n < 4 ? n1 - n : 4;
            const fk_block_q4_0 *w[4];
            for (int j = 0; j < 4; j++) w[j] = wall + (size_t)(n + (j < nw ? j : 0)) * nb;
            float32x4_t acc[4] = {vzero(), vzero(), vzero(), vzero()};
            for (int b = 0; b < nb; b++) {
                int8x16_t a0 = vld1q_s8(a[b].qs), a1 = vld1q_s8(a[b].qs + 16);
                for (int j = 0; j < 4; j++) {
                    uint8x16_t q = vld1q_u8(w[j][b].qs);
                    int8x16_t lo = vsubq_s8(vreinterpretq_s8_u8(vandq_u8(q, m4)), s8);
                    int8x16_t hi = vsubq_s8(vreinterpretq_s8_u8(vshrq_n_u8(q, 4)), s8);
                    int32x4_t p = dot16(dot16(vdupq_n_s32(0), lo, a0), hi, a1);
                    acc[j] = vfmaq_n_f32(acc[j], vcvtq_f32_s32(p), w[j][b].d * a[b].d);
                }
            }
            for (int j = 0; j < nw; j++) c[n + j] = vaddvq_f32(acc[j]);
        }
        FK_FN(epilogue_row)(g, c + n0, n0, n1 - n0);
    }
}

const fk_kernels FK_FN(fk_kernels) = {
#if defined(__ARM_FEATURE_DOTPROD)
    "dotprod", FK_FEAT_NEON | FK_FEAT_DOTPROD,
#else
    "neon", FK_FEAT_NEON,
#endif
    FK_FN(fk_dot_f32), FK_FN(fk_axpy_f32), FK_FN(fk_add_f32), FK_FN(fk_scale_f32),
    FK_FN(fk_gelu_f32), FK_FN(fk_gelu_tab_f32), FK_FN(fk_layernorm_f32),
    FK_FN(fk_softmax_f32), FK_FN(fk_quantize_row_i8), FK_FN(fk_quantize_row_q8_0),
    FK_FN(fk_gemm_f32), FK_FN(fk_gemm_i8), FK_FN(fk_gemm_q4_0), FK_FN(fk_attention_f32),
};
