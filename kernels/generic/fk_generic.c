/* Plain-C reference kernels (`*_generic`). They define the expected results: every ISA
 * version is checked against these by tests/kernel_test.c. Written for clarity, not speed,
 * but they are also what an ISA without a native version runs (include/fk_fallback.h). */
#include <math.h>
#include <string.h>

#include "fk.h"

float fk_gelu_tab[FK_GELU_TAB_N + 1];

static float gelu_erf1(float x) { return 0.5f * x * (1.0f + erff(x * 0.70710678118654752f)); }

void fk_init(void) {
    static int done;
    if (done) return;
    const double h = (double)(FK_GELU_TAB_HI - FK_GELU_TAB_LO) / FK_GELU_TAB_N;
    for (int i = 0; i <= FK_GELU_TAB_N; i++) {
        double x = FK_GELU_TAB_LO + h * i;
        fk_gelu_tab[i] = (float)(0.5 * x * (1.0 + erf(x * 0.70710678118654752)));
    }
    done = 1;
}

float fk_dot_f32_generic(int n, const float *a, const float *b) {
    float s = 0.0f;
    for (int i = 0; i < n; i++) s += a[i] * b[i];
    return s;
}

void fk_axpy_f32_generic(int n, float alpha, const float *x, float *y) {
    for (int i = 0; i < n; i++) y[i] += alpha * x[i];
}

void fk_add_f32_generic(int n, const float *a, const float *b, float *y) {
    for (int i = 0; i < n; i++) y[i] = a[i] + b[i];
}

void fk_scale_f32_generic(int n, float s, float *x) {
    for (int i = 0; i < n; i++) x[i] *= s;
}

void fk_gelu_f32_generic(int n, const float *x, float *y) {
    for (int i = 0; i < n; i++) y[i] = gelu_erf1(x[i]);
}

void fk_gelu_tab_f32_generic(int n, const float *x, float *y) {
    const float inv_h = FK_GELU_TAB_N / (FK_GELU_TAB_HI - FK_GELU_TAB_LO);
    for (int i = 0; i < n; i++) {
        float v = x[i];
        if (v >= FK_GELU_TAB_HI) {
            y[i] = v;
        } else if (v <= FK_GELU_TAB_LO) {
            y[i] = 0.0f;
        } else {
            float t = (v - FK_GELU_TAB_LO) * inv_h;
            int j = (int)t;
            if (j >= FK_GELU_TAB_N) j = FK_GELU_TAB_N - 1;
            float f = t - (float)j;
            y[i] = fk_gelu_tab[j] + f * (fk_gelu_tab[j + 1] - fk_gelu_tab[j]);
        }
    }
}

void fk_layernorm_f32_generic(int n, const float *x, const float *r, const float *g,
                              const float *b, float eps, float *y) {
    float mean = 0.0f;
    for (int i = 0; i < n; i++) mean += x[i] + (r ? r[i] : 0.0f);
    mean /= (float)n;
    float var = 0.0f;
    for (int i = 0; i < n; i++) {
        float d = x[i] + (r ? r[i] : 0.0f) - mean;
        var += d * d;
    }
    float inv = 1.0f / sqrtf(var / (float)n + eps);
    for (int i = 0; i < n; i++) {
        float d = x[i] + (r ? r[i] : 0.0f) - mean;
        y[i] = d * inv * g[i] + b[i];
    }
}

void fk_relu_f32_generic(int n, const float *x, float *y) {
    for (int i = 0; i < n; i++) y[i] = x[i] > 0.0f ? x[i] : 0.0f;
}

void fk_nonorm_f32_generic(int n, const float *x, const float *r, const float *g, const float *b, float *y) {
    for (int i = 0; i < n; i++) y[i] = (x[i] + (r ? r[i] : 0.0f)) * g[i] + b[i];
}

void fk_tanh_f32_generic(int n, const float *x, float *y) {
    for (int i = 0; i < n; i++) y[i] = tanhf(x[i]);
}

/* fmaf, as the vector kernels' FMA: the fused and unfused executor round alike */
void fk_residual_f32_generic(int n, const float *r, const float *s, float *y) {
    for (int i = 0; i < n; i++) y[i] = fmaf(r[i], s[i], y[i]);
}

void fk_gather_mm_f32_generic(const fk_gmm_args *g, int r0, int r1) {
    for (int r = r0; r < r1; r++)
        for (int n = 0; n < g->N; n++) {
            const int c = g->idx[(size_t)r * g->ldi + n];
            float v = 0.0f;
            for (int d = 0; d < g->D; d++) v += g->a[(size_t)r * g->lda + d] * g->b[(size_t)d * g->ldb + c];
            float *o = g->o + (g->tr ? (size_t)n * g->ldo + (r - r0) : (size_t)(r - r0) * g->ldo + n);
            *o = g->acc ? *o + v : v;
        }
}

/* The definition torch's gelu_new / ORT's FastGelu compute (the reference, not the fastest form). */
void fk_gelu_tanh_f32_generic(int n, const float *x, float *y) {
    for (int i = 0; i < n; i++) {
        const float v = x[i];
        y[i] = 0.5f * v * (1.0f + tanhf(0.7978845608028654f * (v + 0.044715f * v * v * v)));
    }
}

void fk_softmax_f32_generic(int n, float *x, float scale, const float *mask) {
    float mx = -INFINITY;
    for (int i = 0; i < n; i++) {
        x[i] = x[i] * scale + (mask ? mask[i] : 0.0f);
        if (x[i] > mx) mx = x[i];
    }
    float sum = 0.0f;
    for (int i = 0; i < n; i++) {
        x[i] = expf(x[i] - mx);
        sum += x[i];
    }
    float inv = 1.0f / sum;
    for (int i = 0; i < n; i++) x[i] *= inv;
}

void fk_quantize_row_i8_generic(int n, const float *x, int8_t *q, float *scale) {
    float amax = 0.0f;
    for (int i = 0; i < n; i++) amax = fabsf(x[i]) > amax ? fabsf(x[i]) : amax;
    float id = amax > 0.0f ? 127.0f / amax : 0.0f;
    *scale = amax / 127.0f;
    for (int i = 0; i < n; i++) q[i] = (int8_t)nearbyintf(x[i] * id);
}

void fk_quantize_row_q8_0_generic(int n, const float *x, fk_block_q8_0 *y) {
    for (int b = 0; b < n / FK_QK; b++) {
        const float *xb = x + b * FK_QK;
        float amax = 0.0f;
        for (int j = 0; j < FK_QK; j++) amax = fabsf(xb[j]) > amax ? fabsf(xb[j]) : amax;
        float id = amax > 0.0f ? 127.0f / amax : 0.0f;
        y[b].d = amax / 127.0f;
        for (int j = 0; j < FK_QK; j++) y[b].qs[j] = (int8_t)nearbyintf(xb[j] * id);
    }
}

/* Bias and activation (or residual) on row m's segment [n0, n1); shared by the three
 * reference GEMMs. */
static void epilogue(const fk_gemm_args *g, float *c, int m, int n0, int n1) {
    if (g->epi == FK_EPI_NONE) return;
    for (int n = n0; n < n1; n++) {
        float v = c[n] + (g->bias ? g->bias[n] : 0.0f);
        if (g->epi == FK_EPI_BIAS_GELU) v = gelu_erf1(v);
        if (g->epi == FK_EPI_BIAS_RELU && !(v > 0.0f)) v = 0.0f;
        c[n] = v;
    }
    if (g->epi == FK_EPI_BIAS_GELU_TANH) fk_gelu_tanh_f32_generic(n1 - n0, c + n0, c + n0);
    if (g->epi == FK_EPI_BIAS_RES)
        fk_residual_f32_generic(n1 - n0, g->res + (size_t)m * g->ldres + n0, g->res_scale + n0, c + n0);
    if (g->epi == FK_EPI_BIAS_GELU_TAB) fk_gelu_tab_f32_generic(n1 - n0, c + n0, c + n0);
}

void fk_gemm_f32_generic(const fk_gemm_args *g, int m0, int m1, int n0, int n1) {
    const float *w = (const float *)g->w;
    for (int m = m0; m < m1; m++) {
        float *c = g->c + (size_t)m * g->ldc;
        for (int n = n0; n < n1; n++) {
            const float *panel = w + (size_t)(n / FK_NR) * g->K * FK_NR + n % FK_NR;
            float s = 0.0f;
            for (int k = 0; k < g->K; k++) s += g->a[(size_t)m * g->lda + k] * panel[k * FK_NR];
            c[n] = s;
        }
        epilogue(g, c, m, n0, n1);
    }
}

void fk_gemm_i8_generic(const fk_gemm_args *g, int m0, int m1, int n0, int n1) {
    const int8_t *aq = (const int8_t *)g->aq, *w = (const int8_t *)g->w;
    for (int m = m0; m < m1; m++) {
        float *c = g->c + (size_t)m * g->ldc;
        for (int n = n0; n < n1; n++) {
            const int8_t *panel = w + (size_t)(n / FK_NR) * FK_K4(g->K) * FK_NR + (n % FK_NR) * 4;
            int32_t s = 0;
            for (int k = 0; k < g->K; k++)
                s += (int32_t)aq[(size_t)m * g->lda + k] * panel[(k / 4) * FK_NR * 4 + k % 4];
            c[n] = (float)s * g->a_scale[m] * g->w_scale[n];
        }
        epilogue(g, c, m, n0, n1);
    }
}

void fk_gemm_q4_0_generic(const fk_gemm_args *g, int m0, int m1, int n0, int n1) {
    const int nb = g->K / FK_QK, lda = g->lda > 0 ? g->lda : nb;
    const fk_block_q8_0 *aq = (const fk_block_q8_0 *)g->aq;
    const fk_panel_q4_0 *w = (const fk_panel_q4_0 *)g->w;
    for (int m = m0; m < m1; m++) {
        float *c = g->c + (size_t)m * g->ldc;
        for (int n = n0; n < n1; n++) {
            const int j = n % FK_NR;
            float s = 0.0f;
            for (int b = 0; b < nb; b++) {
                const fk_panel_q4_0 *wb = &w[(size_t)(n / FK_NR) * nb + b];
                const fk_block_q8_0 *ab = &aq[(size_t)m * lda + b];
                int32_t si = 0;
                for (int h = 0; h < 4; h++)
                    for (int t = 0; t < 4; t++) {
                        uint8_t q = wb->qs[h * 64 + j * 4 + t];
                        si += ((q & 0x0F) - 8) * ab->qs[4 * h + t];
                        si += ((q >> 4) - 8) * ab->qs[16 + 4 * h + t];
                    }
                s += (float)si * wb->d[j] * ab->d;
            }
            c[n] = s;
        }
        epilogue(g, c, m, n0, n1);
    }
}

void fk_attention_f32_generic(const fk_attn_args *a, int i0, int i1, float *scratch) {
    for (int i = i0; i < i1; i++) {
        const float *q = a->q + (size_t)i * a->ldq;
        for (int j = 0; j < a->Sk; j++)
            scratch[j] = fk_dot_f32_generic(a->D, q, a->k + (size_t)j * a->ldk);
        if (a->bias) /* scale first, then the bias: softmax then scales by 1 */
            for (int j = 0; j < a->Sk; j++) scratch[j] = scratch[j] * a->scale + a->bias[(size_t)(i - a->bias_row0) * a->ldb + j];
        fk_softmax_f32_generic(a->Sk, scratch, a->bias ? 1.0f : a->scale, a->mask);
        float *o = a->o + (size_t)i * a->ldo;
        memset(o, 0, sizeof(float) * a->D);
        for (int j = 0; j < a->Sk; j++) fk_axpy_f32_generic(a->D, scratch[j], a->v + (size_t)j * a->ldv, o);
    }
}

float fk_fma_loop_generic(long iters, int *lanes) {
    float a[12], m = 0.999f, c = 1e-3f;
    for (int i = 0; i < 12; i++) a[i] = (float)i;
    for (long it = 0; it < iters; it++)
        for (int i = 0; i < 12; i++) a[i] = fmaf(a[i], m, c);
    float s = 0;
    for (int i = 0; i < 12; i++) s += a[i];
    *lanes = 1;
    return s;
}

size_t fk_packed_b_i8_size(int K, int N) { return (size_t)((N + FK_NR - 1) / FK_NR) * FK_NR * FK_K4(K); }

void fk_pack_b_i8(int K, int N, const int8_t *wt, int8_t *packed) {
    const int K4 = FK_K4(K), np = (N + FK_NR - 1) / FK_NR;
    for (int p = 0; p < np; p++)
        for (int k = 0; k < K4; k++)
            for (int j = 0; j < FK_NR; j++) {
                int n = p * FK_NR + j;
                packed[(((size_t)p * (K4 / 4) + k / 4) * FK_NR + j) * 4 + k % 4] =
                    (n < N && k < K) ? wt[(size_t)n * K + k] : 0;
            }
}

size_t fk_packed_b_q4_0_size(int K, int N) {
    return (size_t)((N + FK_NR - 1) / FK_NR) * (K / FK_QK) * sizeof(fk_panel_q4_0);
}

void fk_pack_b_q4_0(int K, int N, const fk_block_q4_0 *w, fk_panel_q4_0 *packed) {
    const int nb = K / FK_QK, np = (N + FK_NR - 1) / FK_NR;
    for (int p = 0; p < np; p++)
        for (int b = 0; b < nb; b++) {
            fk_panel_q4_0 *dst = &packed[(size_t)p * nb + b];
            for (int j = 0; j < FK_NR; j++) {
                const int n = p * FK_NR + j;
                const fk_block_q4_0 *src = n < N ? &w[(size_t)n * nb + b] : NULL;
                dst->d[j] = src ? src->d : 0.0f;
                for (int h = 0; h < 4; h++)
                    for (int t = 0; t < 4; t++) {
                        int k = 4 * h + t; /* low nibble: k, high nibble: k + 16 */
                        uint8_t lo = src ? (src->qs[k] & 0x0F) : 8, hi = src ? (src->qs[k] >> 4) : 8;
                        dst->qs[h * 64 + j * 4 + t] = (uint8_t)(lo | (hi << 4));
                    }
            }
        }
}

size_t fk_packed_b_f32_size(int K, int N) { return (size_t)((N + FK_NR - 1) / FK_NR) * K * FK_NR; }

void fk_pack_b_f32(int K, int N, const float *w, int ldw, float *packed) {
    int np = (N + FK_NR - 1) / FK_NR;
    for (int p = 0; p < np; p++)
        for (int k = 0; k < K; k++)
            for (int j = 0; j < FK_NR; j++) {
                int n = p * FK_NR + j;
                packed[((size_t)p * K + k) * FK_NR + j] = n < N ? w[(size_t)k * ldw + n] : 0.0f;
            }
}

const fk_kernels fk_kernels_generic = {
    "generic", 0,
    fk_dot_f32_generic, fk_axpy_f32_generic, fk_add_f32_generic, fk_scale_f32_generic,
    fk_gelu_f32_generic, fk_gelu_tab_f32_generic, fk_layernorm_f32_generic,
    fk_softmax_f32_generic, fk_quantize_row_i8_generic, fk_quantize_row_q8_0_generic,
    fk_gemm_f32_generic, fk_gemm_i8_generic, fk_gemm_q4_0_generic, fk_attention_f32_generic,
    fk_fma_loop_generic, fk_relu_f32_generic, fk_nonorm_f32_generic,
    fk_tanh_f32_generic, fk_gelu_tanh_f32_generic, fk_residual_f32_generic, fk_gather_mm_f32_generic,
    {1, 1, 1}, {FK_NR, FK_NR, FK_NR}, {{0, 0}, {0, 0}, {0, 0}}, /* row at a time: any row cut is free */
};
