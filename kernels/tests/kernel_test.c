/* Kernel harness: checks every ISA table this binary holds (and this CPU runs) against the
 * plain-C references at awkward lengths, so every vector body and scalar tail runs.
 * Prints one line per (table, kernel); exits 1 on any mismatch. Usage: kernel_test [table] */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fk.h"

static const int LENS[] = {1, 2, 3, 5, 7, 15, 16, 17, 31, 33, 63, 64, 65, 127, 129, 255, 257, 511, 513, 1023};
#define NLENS ((int)(sizeof LENS / sizeof LENS[0]))
static const int MS[] = {1, 2, 3, 5, 7, 13, 17};
#define NMS ((int)(sizeof MS / sizeof MS[0]))

static unsigned long long rng = 88172645463325252ull;
static float frand(float lo, float hi) {
    rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
    return lo + (hi - lo) * (float)((rng >> 11) * (1.0 / 9007199254740992.0));
}
static float *fvec(int n, float lo, float hi) {
    float *v = malloc(sizeof(float) * (n > 0 ? n : 1));
    for (int i = 0; i < n; i++) v[i] = frand(lo, hi);
    return v;
}

static int failures;
static const char *cur_table, *cur_kernel;
static int cur_cases;
static double cur_worst;

static void begin(const char *kernel) { cur_kernel = kernel, cur_cases = 0, cur_worst = 0; }
static void end(void) {
    printf("%-4s %-8s %-18s cases=%d worst_err=%.3g\n", cur_worst <= 1.0 ? "ok" : "FAIL",
           cur_table, cur_kernel, cur_cases, cur_worst);
    if (cur_worst > 1.0) failures++;
}
/* Worst |got-want| / (atol + rtol*|want|) over n values; > 1 is a failure. */
static void check(const char *what, int n, const float *got, const float *want, float atol, float rtol) {
    double worst = 0;
    for (int i = 0; i < n; i++) {
        double d = fabs((double)got[i] - want[i]);
        double e = d == 0 ? 0 : d / (atol + rtol * fabs(want[i]));
        if (!(e <= worst)) worst = isnan(e) ? INFINITY : e;
    }
    if (worst > 1.0) fprintf(stderr, "  mismatch %s/%s %s n=%d err=%.3g\n", cur_table, cur_kernel, what, n, worst);
    if (worst > cur_worst) cur_worst = worst;
    cur_cases++;
}

static void test_vec(const fk_kernels *k) {
    char what[64];
    begin("dot_f32");
    for (int l = 0; l < NLENS; l++) {
        int n = LENS[l];
        float *a = fvec(n, -1, 1), *b = fvec(n, -1, 1), s = 0;
        for (int i = 0; i < n; i++) s += fabsf(a[i] * b[i]);
        float got = k->dot_f32(n, a, b), want = fk_dot_f32_generic(n, a, b);
        check("", 1, &got, &want, 1e-6f * s + 1e-7f, 0);
        free(a), free(b);
    }
    end();
    begin("axpy/add/scale");
    for (int l = 0; l < NLENS; l++) {
        int n = LENS[l];
        float *x = fvec(n, -2, 2), *y = fvec(n, -2, 2), *y1 = malloc(4 * n), *y2 = malloc(4 * n);
        memcpy(y1, y, 4 * n), memcpy(y2, y, 4 * n);
        k->axpy_f32(n, 0.7f, x, y1), fk_axpy_f32_generic(n, 0.7f, x, y2);
        check("axpy", n, y1, y2, 1e-6f, 1e-6f);
        k->add_f32(n, x, y, y1), fk_add_f32_generic(n, x, y, y2);
        check("add", n, y1, y2, 0, 1e-7f);
        memcpy(y1, y, 4 * n), memcpy(y2, y, 4 * n);
        k->scale_f32(n, -1.3f, y1), fk_scale_f32_generic(n, -1.3f, y2);
        check("scale", n, y1, y2, 0, 1e-7f);
        free(x), free(y), free(y1), free(y2);
    }
    end();
    begin("gelu_f32");
    for (int l = 0; l < NLENS; l++) {
        int n = LENS[l];
        float *x = fvec(n, -10, 10), *y1 = malloc(4 * n), *y2 = malloc(4 * n);
        k->gelu_f32(n, x, y1), fk_gelu_f32_generic(n, x, y2);
        check("", n, y1, y2, 2e-6f, 2e-6f);
        free(x), free(y1), free(y2);
    }
    end();
    begin("gelu_tab_f32");
    for (int l = 0; l < NLENS; l++) {
        int n = LENS[l];
        float *x = fvec(n, -10, 10), *y1 = malloc(4 * n), *y2 = malloc(4 * n);
        k->gelu_tab_f32(n, x, y1), fk_gelu_tab_f32_generic(n, x, y2);
        check("vs table ref", n, y1, y2, 1e-6f, 1e-6f);
        fk_gelu_f32_generic(n, x, y2);
        check("vs erf", n, y1, y2, 2e-6f, 2e-6f);
        free(x), free(y1), free(y2);
    }
    end();
    begin("layernorm_f32");
    for (int l = 0; l < NLENS; l++) {
        int n = LENS[l];
        float *x = fvec(n, -3, 5), *r = fvec(n, -1, 1), *g = fvec(n, 0.5f, 1.5f), *b = fvec(n, -1, 1);
        float *y1 = malloc(4 * n), *y2 = malloc(4 * n);
        for (int res = 0; res < 2; res++) {
            k->layernorm_f32(n, x, res ? r : NULL, g, b, 1e-5f, y1);
            fk_layernorm_f32_generic(n, x, res ? r : NULL, g, b, 1e-5f, y2);
            snprintf(what, sizeof what, "residual=%d", res);
            check(what, n, y1, y2, 2e-5f, 2e-5f);
        }
        free(x), free(r), free(g), free(b), free(y1), free(y2);
    }
    end();
    begin("relu_f32");
    for (int l = 0; l < NLENS; l++) {
        int n = LENS[l];
        float *x = fvec(n, -2, 2), *y1 = malloc(4 * n), *y2 = malloc(4 * n);
        k->relu_f32(n, x, y1), fk_relu_f32_generic(n, x, y2);
        check("", n, y1, y2, 0, 0);
        free(x), free(y1), free(y2);
    }
    end();
    begin("tanh_f32");
    for (int l = 0; l < NLENS; l++) {
        int n = LENS[l];
        float *x = fvec(n, -12, 12), *y1 = malloc(4 * n), *y2 = malloc(4 * n);
        k->tanh_f32(n, x, y1), fk_tanh_f32_generic(n, x, y2);
        check("", n, y1, y2, 2e-7f, 1e-6f);
        memcpy(y1, x, 4 * n); /* in place: the executor runs it on the GEMM's output */
        k->tanh_f32(n, y1, y1);
        check("in place", n, y1, y2, 2e-7f, 1e-6f);
        for (int i = 0; i < n; i++) x[i] *= 0.01f; /* near 0, where e - 1 cancels */
        k->tanh_f32(n, x, y1), fk_tanh_f32_generic(n, x, y2);
        check("small", n, y1, y2, 1e-9f, 1e-6f);
        free(x), free(y1), free(y2);
    }
    end();
    begin("gelu_tanh_f32");
    for (int l = 0; l < NLENS; l++) {
        int n = LENS[l];
        float *x = fvec(n, -10, 10), *y1 = malloc(4 * n), *y2 = malloc(4 * n);
        k->gelu_tanh_f32(n, x, y1), fk_gelu_tanh_f32_generic(n, x, y2);
        check("", n, y1, y2, 2e-6f, 2e-6f);
        memcpy(y1, x, 4 * n);
        k->gelu_tanh_f32(n, y1, y1);
        check("in place", n, y1, y2, 2e-6f, 2e-6f);
        free(x), free(y1), free(y2);
    }
    end();
    begin("nonorm_f32");
    for (int l = 0; l < NLENS; l++) {
        int n = LENS[l];
        float *x = fvec(n, -3, 5), *r = fvec(n, -1, 1), *g = fvec(n, 0.5f, 1.5f), *b = fvec(n, -1, 1);
        float *y1 = malloc(4 * n), *y2 = malloc(4 * n);
        for (int res = 0; res < 2; res++) {
            k->nonorm_f32(n, x, res ? r : NULL, g, b, y1);
            fk_nonorm_f32_generic(n, x, res ? r : NULL, g, b, y2);
            snprintf(what, sizeof what, "residual=%d", res);
            check(what, n, y1, y2, 1e-6f, 1e-6f); /* FMA vs mul+add: one rounding apart */
        }
        memcpy(y1, x, 4 * n), memcpy(y2, x, 4 * n); /* in place: y == x, as the executor may */
        k->nonorm_f32(n, y1, r, g, b, y1), fk_nonorm_f32_generic(n, y2, r, g, b, y2);
        check("in place", n, y1, y2, 1e-6f, 1e-6f);
        free(x), free(r), free(g), free(b), free(y1), free(y2);
    }
    end();
    begin("quantize_i8/q8_0");
    for (int l = 0; l < NLENS; l++) {
        int n = LENS[l], nq = (n + FK_QK - 1) / FK_QK * FK_QK;
        float *x = fvec(nq, -3, 3), s1, s2, f1[1024 + 32], f2[1024 + 32];
        int8_t q1[1024 + 32], q2[1024 + 32];
        k->quantize_row_i8(n, x, q1, &s1), fk_quantize_row_i8_generic(n, x, q2, &s2);
        for (int i = 0; i < n; i++) f1[i] = q1[i], f2[i] = q2[i];
        check("i8 values", n, f1, f2, 0, 0), check("i8 scale", 1, &s1, &s2, 0, 0);
        fk_block_q8_0 b1[33], b2[33];
        k->quantize_row_q8_0(nq, x, b1), fk_quantize_row_q8_0_generic(nq, x, b2);
        for (int b = 0; b < nq / FK_QK; b++) {
            for (int j = 0; j < FK_QK; j++) f1[j] = b1[b].qs[j], f2[j] = b2[b].qs[j];
            check("q8_0 values", FK_QK, f1, f2, 0, 0), check("q8_0 scale", 1, &b1[b].d, &b2[b].d, 0, 0);
        }
        free(x);
    }
    end();
    begin("softmax_f32");
    for (int l = 0; l < NLENS; l++) {
        int n = LENS[l];
        float *x = fvec(n, -8, 8), *mask = fvec(n, 0, 1), *y1 = malloc(4 * n), *y2 = malloc(4 * n);
        for (int i = 0; i < n; i++) mask[i] = (i % 3 == 2 && i != 0) ? -10000.0f : 0.0f;
        for (int m = 0; m < 2; m++) {
            memcpy(y1, x, 4 * n), memcpy(y2, x, 4 * n);
            k->softmax_f32(n, y1, 0.125f, m ? mask : NULL);
            fk_softmax_f32_generic(n, y2, 0.125f, m ? mask : NULL);
            check(m ? "mask" : "nomask", n, y1, y2, 1e-7f, 2e-6f);
        }
        free(x), free(mask), free(y1), free(y2);
    }
    end();
}

/* Runs one GEMM through the table in two column halves (split at a panel boundary) and
 * two row halves, as the runtime's threads would, and through the reference in one call. */
static void run_gemm(const fk_kernels *k, void (*ref)(const fk_gemm_args *, int, int, int, int),
                     void (*fn)(const fk_gemm_args *, int, int, int, int), fk_gemm_args *g, float atol) {
    float *want = calloc((size_t)g->M * g->N, 4), *got = calloc((size_t)g->M * g->N, 4);
    (void)k;
    g->c = want, ref(g, 0, g->M, 0, g->N);
    int nsplit = (g->N / 2) / FK_NR * FK_NR, msplit = g->M / 2;
    g->c = got;
    fn(g, 0, msplit, 0, nsplit), fn(g, 0, msplit, nsplit, g->N);
    fn(g, msplit, g->M, 0, nsplit), fn(g, msplit, g->M, nsplit, g->N);
    char what[96];
    snprintf(what, sizeof what, "M=%d N=%d K=%d epi=%d", g->M, g->N, g->K, g->epi);
    check(what, g->M * g->N, got, want, atol, 1e-5f);
    free(want), free(got);
}

static void gemm_case(const fk_kernels *k, int kind, int M, int N, int K, int epi) {
    fk_gemm_args g = {0};
    g.M = M, g.N = N, g.K = K, g.ldc = N, g.epi = epi;
    float *a = fvec(M * K, -1, 1), *w = fvec(K * N, -1, 1), *bias = fvec(N, -1, 1);
    float *res = fvec(M * (N + 3), -2, 2), *res_scale = fvec(N, -1, 1);
    g.bias = bias, g.res = res, g.ldres = N + 3, g.res_scale = res_scale; /* used by FK_EPI_BIAS_RES */
    void *wq = NULL, *aq = NULL;
    float *as = NULL, *ws = NULL;
    float atol = 1e-5f * sqrtf((float)K);
    if (kind == 0) {
        float *p = malloc(4 * fk_packed_b_f32_size(K, N));
        fk_pack_b_f32(K, N, w, N, p);
        g.a = a, g.lda = K, g.w = wq = p;
        run_gemm(k, fk_gemm_f32_generic, k->gemm_f32, &g, atol);
    } else if (kind == 1) {
        const int K4 = FK_K4(K);
        int8_t *q = calloc((size_t)M * K4, 1), *wt = malloc((size_t)N * K), *wp = malloc(fk_packed_b_i8_size(K, N));
        as = malloc(4 * M), ws = malloc(4 * N);
        for (int m = 0; m < M; m++) k->quantize_row_i8(K, a + (size_t)m * K, q + (size_t)m * K4, &as[m]);
        for (int n = 0; n < N; n++) {
            float *col = malloc(4 * K);
            for (int kk = 0; kk < K; kk++) col[kk] = w[(size_t)kk * N + n];
            fk_quantize_row_i8_generic(K, col, wt + (size_t)n * K, &ws[n]);
            free(col);
        }
        fk_pack_b_i8(K, N, wt, wp);
        free(wt);
        g.aq = aq = q, g.lda = K4, g.a_scale = as, g.w = wq = wp, g.w_scale = ws;
        run_gemm(k, fk_gemm_i8_generic, k->gemm_i8, &g, atol);
    } else {
        int nb = K / FK_QK;
        fk_block_q8_0 *q = malloc(sizeof(fk_block_q8_0) * M * nb);
        fk_block_q4_0 *wt = malloc(sizeof(fk_block_q4_0) * N * nb);
        fk_panel_q4_0 *wp = malloc(fk_packed_b_q4_0_size(K, N));
        for (int m = 0; m < M; m++) k->quantize_row_q8_0(K, a + (size_t)m * K, q + (size_t)m * nb);
        for (int n = 0; n < N; n++)
            for (int b = 0; b < nb; b++) {
                fk_block_q4_0 *blk = &wt[(size_t)n * nb + b];
                blk->d = frand(0.01f, 0.2f);
                for (int j = 0; j < FK_QK / 2; j++) blk->qs[j] = (uint8_t)(int)frand(0, 255.99f);
            }
        fk_pack_b_q4_0(K, N, wt, wp);
        free(wt);
        g.aq = aq = q, g.w = wq = wp;
        run_gemm(k, fk_gemm_q4_0_generic, k->gemm_q4_0, &g, atol);
    }
    free(a), free(w), free(bias), free(wq), free(aq), free(as), free(ws), free(res), free(res_scale);
}

/* int8 sums exact at the extremes of the range: A and W all +-127 with runs of one sign, so
 * every adjacent pair of products is 2 * 127 * 127 (and a product's unsigned-side form,
 * a + 128 = 255, would give 2 * 255 * 127): a scheme whose int16 pair sums saturate
 * (VPMADDUBSW on u8 x s8, ORT's U8S8 AVX2 path) fails here. Scales of 1 keep every sum an
 * integer below 2^24, so the float outputs are compared exactly. */
static void gemm_i8_extremes(const fk_kernels *k, int M, int N, int K) {
    const int K4 = FK_K4(K);
    int8_t *q = calloc((size_t)M * K4, 1), *wt = malloc((size_t)N * K), *wp = malloc(fk_packed_b_i8_size(K, N));
    float *as = malloc(4 * M), *ws = malloc(4 * N), *want = calloc((size_t)M * N, 4), *got = calloc((size_t)M * N, 4);
    for (int m = 0; m < M; m++) {
        as[m] = 1.0f;
        for (int kk = 0; kk < K; kk++) q[(size_t)m * K4 + kk] = (int8_t)(((kk / 8 + m) & 1) ? -127 : 127);
    }
    for (int n = 0; n < N; n++) {
        ws[n] = 1.0f;
        for (int kk = 0; kk < K; kk++) wt[(size_t)n * K + kk] = (int8_t)(((kk / 4 + n) % 3) ? 127 : -127);
    }
    fk_pack_b_i8(K, N, wt, wp);
    fk_gemm_args g = {0};
    g.M = M, g.N = N, g.K = K, g.ldc = N, g.epi = FK_EPI_NONE, g.aq = q, g.lda = K4, g.a_scale = as, g.w = wp,
    g.w_scale = ws;
    g.c = want, fk_gemm_i8_generic(&g, 0, M, 0, N);
    g.c = got, k->gemm_i8(&g, 0, M, 0, N);
    char what[96];
    snprintf(what, sizeof what, "extremes M=%d N=%d K=%d", M, N, K);
    check(what, M * N, got, want, 0.0f, 0.0f);
    free(q), free(wt), free(wp), free(as), free(ws), free(want), free(got);
}

static void test_gemm(const fk_kernels *k) {
    static const char *names[] = {"gemm_f32", "gemm_i8", "gemm_q4_0"};
    for (int kind = 0; kind < 3; kind++) {
        begin(names[kind]);
        for (int l = 0; l < NLENS; l++) {
            int L = LENS[l], M = MS[l % NMS], epi = l % 4;
            int Kfix = kind == 2 ? 64 : 33, Kvar = kind == 2 ? FK_QK * (l < 10 ? L : l) : L;
            gemm_case(k, kind, M, L, Kfix, epi);      /* column tails */
            gemm_case(k, kind, M, 37, Kvar, 3 - epi); /* K tails (blocks for q4) */
        }
        gemm_case(k, kind, 33, 70, kind == 2 ? 288 : 300, FK_EPI_BIAS_GELU); /* multi K-block */
        /* Past one 32 x 32 AMX block: row blocks with a partial second 16-row tile, partial
         * 64-k tiles, an odd panel count (a lone last panel) and a column tail. */
        gemm_case(k, kind, 47, 83, kind == 2 ? 96 : 65, FK_EPI_BIAS);
        gemm_case(k, kind, 70, 50, kind == 2 ? 224 : 200, FK_EPI_NONE);
        gemm_case(k, kind, 64, 32, kind == 2 ? 128 : 128, FK_EPI_BIAS_GELU_TAB);
        /* MobileBERT's ReLU epilogue: column tails, a multi K-block and past one AMX block */
        for (int l = 0; l < NLENS; l += 3) gemm_case(k, kind, MS[l % NMS], LENS[l], kind == 2 ? 64 : 33, FK_EPI_BIAS_RELU);
        gemm_case(k, kind, 33, 70, kind == 2 ? 288 : 300, FK_EPI_BIAS_RELU);
        gemm_case(k, kind, 47, 83, kind == 2 ? 96 : 65, FK_EPI_BIAS_RELU);
        /* ALBERT's tanh GELU (gelu_new): column tails, a multi K-block, past one AMX block */
        for (int l = 1; l < NLENS; l += 3) gemm_case(k, kind, MS[l % NMS], LENS[l], kind == 2 ? 64 : 33, FK_EPI_BIAS_GELU_TANH);
        gemm_case(k, kind, 33, 70, kind == 2 ? 288 : 300, FK_EPI_BIAS_GELU_TANH);
        gemm_case(k, kind, 47, 83, kind == 2 ? 96 : 65, FK_EPI_BIAS_GELU_TANH);
        /* MobileBERT's residual + NoNorm epilogue: column tails, multi K-block, past AMX blocks */
        for (int l = 2; l < NLENS; l += 3) gemm_case(k, kind, MS[l % NMS], LENS[l], kind == 2 ? 64 : 33, FK_EPI_BIAS_RES);
        gemm_case(k, kind, 33, 70, kind == 2 ? 288 : 300, FK_EPI_BIAS_RES);
        gemm_case(k, kind, 47, 83, kind == 2 ? 96 : 65, FK_EPI_BIAS_RES);
        /* Several K blocks where the fp32 GEMM blocks K by up to 1024 (x86): three equal blocks
         * of 700 (704 for q4), partial C tiles stored and re-read, every epilogue on the last */
        static const int EPIS[] = {FK_EPI_NONE, FK_EPI_BIAS, FK_EPI_BIAS_GELU, FK_EPI_BIAS_RELU,
                                   FK_EPI_BIAS_GELU_TANH, FK_EPI_BIAS_GELU_TAB, FK_EPI_BIAS_RES};
        for (int e = 0; e < (int)(sizeof EPIS / sizeof EPIS[0]); e++)
            gemm_case(k, kind, e % 2 ? 33 : 16, e % 3 ? 70 : 64, kind == 2 ? 2112 : 2100, EPIS[e]);
        if (kind == 1) gemm_i8_extremes(k, 13, 37, 65), gemm_i8_extremes(k, 64, 32, 512);
        end();
    }
}

static void test_attention(const fk_kernels *k) {
    static const int DS[] = {1, 3, 16, 17, 32, 64};
    begin("attention_f32");
    for (int l = 0; l < NLENS; l++) {
        int Sk = LENS[l], Sq = l % 3 == 0 ? 29 : 3, D = DS[l % 6], ld = D + 5;
        float *q = fvec(Sq * ld, -1, 1), *kk = fvec(Sk * ld, -1, 1), *v = fvec(Sk * ld, -1, 1);
        float *mask = fvec(Sk, 0, 1), *o1 = calloc(Sq * ld, 4), *o2 = calloc(Sq * ld, 4);
        float *scratch = malloc(4 * Sk);
        for (int j = 0; j < Sk; j++) mask[j] = (j > 0 && j % 4 == 3) ? -1e9f : 0.0f;
        /* every other length with an additive score bias (MPNet's), rows Sk + 2 apart */
        float *bias = (l & 2) ? fvec(Sq * (Sk + 2), -2, 2) : NULL;
        fk_attn_args a = {Sq, Sk, D, q, ld, kk, ld, v, ld, (l & 1) ? mask : NULL, 1.0f / sqrtf((float)D), o1, ld,
                          bias, Sk + 2, 0};
        k->attention_f32(&a, 0, 1, scratch), k->attention_f32(&a, 1, Sq, scratch);
        a.o = o2;
        fk_attention_f32_generic(&a, 0, Sq, scratch);
        char what[64];
        snprintf(what, sizeof what, "Sk=%d D=%d%s", Sk, D, bias ? " bias" : "");
        check(what, Sq * ld, o1, o2, 1e-6f, 1e-5f);
        free(q), free(kk), free(v), free(mask), free(o1), free(o2), free(scratch), free(bias);
    }
    end();
}

/* The gathered product at awkward sizes: relative-position indices (the span a row keeps is
 * contiguous, clipped at both ends of B) and random ones (the span is most of B), stored,
 * accumulated and transposed, against the reference. */
static void test_gather_mm(const fk_kernels *k) {
    static const int DS[] = {1, 3, 16, 17, 32, 64};
    begin("gather_mm_f32");
    for (int l = 0; l < NLENS; l++) {
        const int N = LENS[l], D = DS[l % 6], rows = MS[l % NMS] + 2, R = l % 3 == 0 ? 2 * N + 3 : N / 2 + 1;
        const int lda = D + 3, ldb = R + 5, ldi = N + 1, tr = l & 1, acc = (l >> 1) & 1;
        const int ldo = tr ? rows + 2 : N + 2, osz = tr ? N * ldo : rows * ldo;
        float *a = fvec(rows * lda, -1, 1), *b = fvec(D * ldb, -1, 1), *o1 = fvec(osz, -1, 1), *o2 = malloc(4 * osz);
        int32_t *idx = malloc(sizeof(int32_t) * rows * ldi);
        for (int r = 0; r < rows; r++)
            for (int n = 0; n < N; n++) {
                int c = l % 4 == 3 ? (int)frand(0, (float)R) : r - n + R / 2;
                idx[r * ldi + n] = c < 0 ? 0 : c >= R ? R - 1 : c;
            }
        memcpy(o2, o1, 4 * osz);
        /* rows in two calls: the second writes from its own first row, one row further on */
        const size_t step = tr ? 1 : (size_t)ldo;
        fk_gmm_args g = {N, D, R, a, lda, b, ldb, idx, ldi, o1, ldo, tr, acc};
        k->gather_mm_f32(&g, 0, 1), g.o = o1 + step, k->gather_mm_f32(&g, 1, rows);
        g.o = o2, fk_gather_mm_f32_generic(&g, 0, 1), g.o = o2 + step, fk_gather_mm_f32_generic(&g, 1, rows);
        char what[80];
        snprintf(what, sizeof what, "N=%d D=%d R=%d rows=%d%s%s", N, D, R, rows, tr ? " tr" : "", acc ? " acc" : "");
        check(what, osz, o1, o2, 1e-5f, 1e-5f);
        free(a), free(b), free(o1), free(o2), free(idx);
    }
    end();
}

int main(int argc, char **argv) {
    char err[512];
    /* $FARM_ISA caps the tables tested like the executor's: the suite runs this harness once
     * per level the CPU has (tests/kernels/test_kernels_harness.py) */
    if (fk_isa_setup(NULL, err, sizeof err)) return fprintf(stderr, "kernel_test: %s\n", err), 2;
    fk_init();
    const fk_kernels *const *all = fk_all_kernels();
    printf("cpu features: 0x%llx, level %s, isa cap %s\n", (unsigned long long)fk_cpu_detected(),
           fk_isa_level(fk_cpu_detected()), fk_isa_cap() ? fk_isa_cap() : "none");
    int tested = 0;
    for (int i = 0; all[i]; i++) {
        const fk_kernels *k = all[i];
        if (argc > 1 && strcmp(argv[1], k->name) != 0) continue;
        if ((k->needs & fk_cpu_detected()) != k->needs) {
            printf("skip %-8s (cpu lacks features 0x%llx)\n", k->name,
                   (unsigned long long)(k->needs & ~fk_cpu_detected()));
            continue;
        }
        if ((k->needs & fk_cpu_features()) != k->needs) {
            printf("skip %-8s (above the isa cap %s)\n", k->name, fk_isa_cap());
            continue;
        }
        cur_table = k->name;
        test_vec(k), test_gemm(k), test_attention(k), test_gather_mm(k);
        tested++;
    }
    printf("%s: %d tables tested, %d failures\n", failures ? "FAILED" : "PASSED", tested, failures);
    return failures || !tested ? 1 : 0;
}
