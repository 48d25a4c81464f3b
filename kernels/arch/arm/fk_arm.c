/* AArch64 kernels, compiled once per variant: FK_VARIANT=neon (-march=armv8-a) and
 * FK_VARIANT=dotprod (-march=armv8.2-a+dotprod). The integer GEMMs use SDOT when the variant
 * has it (widest first), else widening multiplies, then a scalar tail. */
#include <arm_neon.h>
#include <string.h>

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
#define vround vrndnq_f32
typedef int32x4_t vi; /* int32 lanes: the int8 driver dequantises its tile with these */
#define vi_load vld1q_s32
#define vcvt_f vcvtq_f32_s32

/* Round to nearest even (as nearbyintf), saturate, store VL int8. */
static inline void vstore_i8(int8_t *p, vf v) {
    int16x4_t h = vqmovn_s32(vcvtnq_s32_f32(v));
    uint32_t w = vget_lane_u32(vreinterpret_u32_s8(vqmovn_s16(vcombine_s16(h, h))), 0);
    memcpy(p, &w, 4);
}

static inline vf vcopysign(vf mag, vf sgn) {
    return vbslq_f32(vdupq_n_u32(0x80000000u), sgn, mag);
}

/* 1/x: 8-bit estimate + two Newton steps. */
static inline vf vrcp(vf x) {
    vf r = vrecpeq_f32(x);
    r = vmulq_f32(r, vrecpsq_f32(x, r));
    return vmulq_f32(r, vrecpsq_f32(x, r));
}

/* 2^n for integral n (vexp's scale): the exponent bits built directly. */
static inline vf vpow2i(vf n) {
    return vreinterpretq_f32_s32(vshlq_n_s32(vaddq_s32(vcvtq_s32_f32(n), vdupq_n_s32(127)), 23));
}

/* r where x >= t, else exactly 0 */
#define vkeep_ge(r, x, t) \
    vreinterpretq_f32_u32(vandq_u32(vreinterpretq_u32_f32(r), vcgeq_f32(x, t)))

#include "../../common/fk_simd_f32.inc"

/* int8 GEMM on weights packed in 4-k groups (fk_pack_b_i8): a 16-byte vector holds 4 columns
 * x 4 k's, so SDOT with the row's 4 A bytes duplicated yields 4 column sums at once. Without
 * dotprod: SMULL (8 products) + SADALP pairs, folded with ADDP at the end. */
#if defined(__ARM_FEATURE_DOTPROD)
#define I8_MR 4
static inline void ukernel_i8(int ng, const uint32_t *a, const int8_t *b, int32_t *c) {
    int32x4_t acc[I8_MR][4];
    for (int i = 0; i < I8_MR; i++)
        for (int j = 0; j < 4; j++) acc[i][j] = vdupq_n_s32(0);
    for (int q = 0; q < ng; q++) {
        int8x16_t bv[4];
        for (int j = 0; j < 4; j++) bv[j] = vld1q_s8(b + (size_t)q * 64 + 16 * j);
        for (int i = 0; i < I8_MR; i++) {
            int8x16_t av = vreinterpretq_s8_u32(vdupq_n_u32(a[q * I8_MR + i]));
            for (int j = 0; j < 4; j++) acc[i][j] = vdotq_s32(acc[i][j], bv[j], av);
        }
    }
    for (int i = 0; i < I8_MR; i++)
        for (int j = 0; j < 4; j++) vst1q_s32(c + i * FK_NR + 4 * j, acc[i][j]);
}
#else
#define I8_MR 2
static inline void ukernel_i8(int ng, const uint32_t *a, const int8_t *b, int32_t *c) {
    int32x4_t acc[I8_MR][8];
    for (int i = 0; i < I8_MR; i++)
        for (int j = 0; j < 8; j++) acc[i][j] = vdupq_n_s32(0);
    for (int q = 0; q < ng; q++) {
        int8x16_t bv[4];
        for (int j = 0; j < 4; j++) bv[j] = vld1q_s8(b + (size_t)q * 64 + 16 * j);
        for (int i = 0; i < I8_MR; i++) {
            int8x8_t av = vreinterpret_s8_u32(vdup_n_u32(a[q * I8_MR + i]));
            for (int j = 0; j < 4; j++) {
                acc[i][2 * j] = vpadalq_s16(acc[i][2 * j], vmull_s8(vget_low_s8(bv[j]), av));
                acc[i][2 * j + 1] = vpadalq_s16(acc[i][2 * j + 1], vmull_s8(vget_high_s8(bv[j]), av));
            }
        }
    }
    for (int i = 0; i < I8_MR; i++)
        for (int j = 0; j < 4; j++) vst1q_s32(c + i * FK_NR + 4 * j, vpaddq_s32(acc[i][2 * j], acc[i][2 * j + 1]));
}
#endif

#include "../../common/fk_i8_driver.inc"

/* 4-bit GEMM on fk_panel_q4_0: per 32-k block and 4-k group, 4 vectors of the panel's nibbles
 * are unpacked in registers to int8 (q - 8) and dotted with the Q8_0 activations (SDOT, or
 * SMULL + SADALP without dotprod); block sums are scaled by d_w * d_a into float accumulators. */
#define Q4_MR 2
#define Q4_XOR 0u
/* The 4 vectors of k-group h of a block (low nibbles for h < 4, high for h >= 4) as q - 8. */
static inline void q4_unpack(const fk_panel_q4_0 *blk, int h, int8x16_t wv[4]) {
    for (int j = 0; j < 4; j++) {
        uint8x16_t v = vld1q_u8(blk->qs + 64 * (h & 3) + 16 * j);
        v = h < 4 ? vandq_u8(v, vdupq_n_u8(0x0F)) : vshrq_n_u8(v, 4);
        wv[j] = vsubq_s8(vreinterpretq_s8_u8(v), vdupq_n_s8(8));
    }
}

static inline void ukernel_q4(int nb, const uint32_t *a, const float *ad, const fk_panel_q4_0 *w, float *c) {
    float32x4_t facc[Q4_MR][4];
    for (int i = 0; i < Q4_MR; i++)
        for (int j = 0; j < 4; j++) facc[i][j] = vdupq_n_f32(0.0f);
    for (int b = 0; b < nb; b++) {
        const uint32_t *ab = a + (size_t)b * 8 * Q4_MR;
#if defined(__ARM_FEATURE_DOTPROD)
        int32x4_t acc[Q4_MR][4];
        for (int i = 0; i < Q4_MR; i++)
            for (int j = 0; j < 4; j++) acc[i][j] = vdupq_n_s32(0);
        for (int h = 0; h < 8; h++) {
            int8x16_t wv[4];
            q4_unpack(&w[b], h, wv);
            for (int i = 0; i < Q4_MR; i++) {
                int8x16_t av = vreinterpretq_s8_u32(vdupq_n_u32(ab[h * Q4_MR + i]));
                for (int j = 0; j < 4; j++) acc[i][j] = vdotq_s32(acc[i][j], wv[j], av);
            }
        }
#else
        int32x4_t pr[Q4_MR][8];
        for (int i = 0; i < Q4_MR; i++)
            for (int j = 0; j < 8; j++) pr[i][j] = vdupq_n_s32(0);
        for (int h = 0; h < 8; h++) {
            int8x16_t wv[4];
            q4_unpack(&w[b], h, wv);
            for (int i = 0; i < Q4_MR; i++) {
                int8x8_t av = vreinterpret_s8_u32(vdup_n_u32(ab[h * Q4_MR + i]));
                for (int j = 0; j < 4; j++) {
                    pr[i][2 * j] = vpadalq_s16(pr[i][2 * j], vmull_s8(vget_low_s8(wv[j]), av));
                    pr[i][2 * j + 1] = vpadalq_s16(pr[i][2 * j + 1], vmull_s8(vget_high_s8(wv[j]), av));
                }
            }
        }
        int32x4_t acc[Q4_MR][4];
        for (int i = 0; i < Q4_MR; i++)
            for (int j = 0; j < 4; j++) acc[i][j] = vpaddq_s32(pr[i][2 * j], pr[i][2 * j + 1]);
#endif
        for (int i = 0; i < Q4_MR; i++) {
            const float sa = ad[b * Q4_MR + i];
            for (int j = 0; j < 4; j++)
                facc[i][j] = vfmaq_f32(facc[i][j], vcvtq_f32_s32(acc[i][j]), vmulq_n_f32(vld1q_f32(w[b].d + 4 * j), sa));
        }
    }
    for (int i = 0; i < Q4_MR; i++)
        for (int j = 0; j < 4; j++) vst1q_f32(c + i * FK_NR + 4 * j, facc[i][j]);
}

#include "../../common/fk_q4_driver.inc"

const fk_kernels FK_FN(fk_kernels) = {
#if defined(__ARM_FEATURE_DOTPROD)
    "dotprod", FK_FEAT_NEON | FK_FEAT_DOTPROD,
#else
    "neon", FK_FEAT_NEON,
#endif
    FK_SIMD_KERNELS
    {FK_MR, I8_MR, Q4_MR}, {FK_NR * FK_NP, FK_NR, FK_NR}, {{16, 4}, {16, 4}, {16, 4}},
};
