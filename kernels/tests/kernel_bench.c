/* Kernel micro-benchmark, single thread, min-of-repeats timing (robust on a busy machine).
 * Usage: kernel_bench [table] [M N K] [S D]. Each figure is the best of up to 400 calls
 * within 0.5 s. Prints one JSON line per measurement:
 *   fma_peak (vector FMA throughput of the table), gemm_f32/gemm_i8/gemm_q4_0 (M x N x K; the
 *   quantised GEMMs include activation quantisation; gemm_i8_gelu/_noepi do not),
 *   attention (one head, S x S, head dim D), gemm_f32_chain (an FFN chain, below).
 * "gflops" counts 2 flops per multiply-add. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "fk.h"

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static float *fill(size_t n) {
    float *p = aligned_alloc(64, (n * 4 + 63) / 64 * 64);
    for (size_t i = 0; i < n; i++) p[i] = (float)((i * 7919) % 1000) / 1000.0f - 0.5f;
    return p;
}

/* Best time of `reps` calls (at least 3, at most ~0.3 s in total). */
#define BEST(call)                                                         \
    ({                                                                     \
        double best = 1e9, t_end = now() + 0.5;                            \
        for (int r = 0; r < 400 && (r < 3 || now() < t_end); r++) {        \
            double t0 = now();                                             \
            call;                                                          \
            double dt = now() - t0;                                        \
            if (dt < best) best = dt;                                      \
        }                                                                  \
        best;                                                              \
    })

/* `pairs` FFN steps of the chain below over `n` weight pairs (x and y swap each step). */
static void ffn_chain(const fk_kernels *k, int M, int N, int K, int pairs, int n, float **wu, float **wd,
                      const float *bias, const float *bk, const float *rs, float **x, float **y, float *h) {
    for (int i = 0; i < pairs; i++) {
        const int j = i % n, nj = (i + 1) % n;
        fk_gemm_args gu = {M, N, K, *x, K, NULL, NULL, wu[j], NULL, bias, h, N, FK_EPI_BIAS_RELU, wd[j], N, NULL, 0, NULL};
        k->gemm_f32(&gu, 0, M, 0, N);
        fk_gemm_args gd = {M, K, N, h, N, NULL, NULL, wd[j], NULL, bk, *y, K, FK_EPI_BIAS_RES, wu[nj], K, *x, K, rs};
        k->gemm_f32(&gd, 0, M, 0, K);
        float *t = *x;
        *x = *y, *y = t;
    }
}

int main(int argc, char **argv) {
    const char *name = argc > 1 ? argv[1] : "auto";
    int M = argc > 4 ? atoi(argv[2]) : 128, N = argc > 4 ? atoi(argv[3]) : 2048, K = argc > 4 ? atoi(argv[4]) : 128;
    int S = argc > 6 ? atoi(argv[5]) : 128, D = argc > 6 ? atoi(argv[6]) : 32;
    char err[512];
    if (fk_isa_setup(NULL, err, sizeof err)) return fprintf(stderr, "kernel_bench: %s\n", err), 2;
    const fk_kernels *k = fk_select(name); /* "auto": the best table within $FARM_ISA */
    if (!k) return fprintf(stderr, "kernel table %s unknown or unsupported here\n", name), 1;
    int lanes = 1;
    long iters = 1000000; /* ~3 ms a call: many repeats, so the min escapes a busy machine */
    volatile float sink = 0;
    double t = BEST(sink += k->fma_loop(iters, &lanes));
    printf("{\"kernel\": \"fma_peak\", \"table\": \"%s\", \"gflops\": %.2f}\n", k->name, 2.0 * 12 * lanes * iters / t / 1e9);

    K = (K + FK_QK - 1) / FK_QK * FK_QK;
    float *a = fill((size_t)M * K), *w = fill((size_t)K * N), *bias = fill(N), *c = fill((size_t)M * N);
    float *wp = aligned_alloc(64, fk_packed_b_f32_size(K, N) * 4 + 64);
    fk_pack_b_f32(K, N, w, N, wp);
    fk_gemm_args g = {M, N, K, a, K, NULL, NULL, wp, NULL, bias, c, N, FK_EPI_BIAS, NULL, 0, NULL, 0, NULL};
    double flops = 2.0 * M * N * K;
    t = BEST(k->gemm_f32(&g, 0, M, 0, N));
    printf("{\"kernel\": \"gemm_f32\", \"table\": \"%s\", \"M\": %d, \"N\": %d, \"K\": %d, \"gflops\": %.2f}\n", k->name, M, N, K, flops / t / 1e9);
    g.epi = FK_EPI_BIAS_GELU;
    t = BEST(k->gemm_f32(&g, 0, M, 0, N));
    printf("{\"kernel\": \"gemm_f32_gelu\", \"table\": \"%s\", \"M\": %d, \"N\": %d, \"K\": %d, \"gflops\": %.2f}\n", k->name, M, N, K, flops / t / 1e9);
    /* An FFN chain as a model runs it: x (M x K) -> up (K -> N, ReLU) -> down (N -> K, the
     * residual epilogue), each GEMM prefetching the next one's weights (w_next), over `sets`
     * weight pairs: 1 (hot: all in L2) and enough for 64 MB (cold: read from DRAM each pass,
     * as a 100 MB model's are; the figure the weight prefetch is judged by). */
    {
        const size_t up = fk_packed_b_f32_size(K, N), down = fk_packed_b_f32_size(N, K);
        const int cold = (int)((64u << 20) / ((up + down) * sizeof(float))) + 1;
        float **wu = malloc(sizeof(float *) * cold), **wd = malloc(sizeof(float *) * cold);
        float *wdn = fill((size_t)N * K), *x = fill((size_t)M * K), *h = fill((size_t)M * N), *y = fill((size_t)M * K);
        float *bk = fill(K), *rs = fill(K);
        for (int i = 0; i < cold; i++) {
            wu[i] = aligned_alloc(64, up * 4 + 64), wd[i] = aligned_alloc(64, down * 4 + 64);
            fk_pack_b_f32(K, N, w, N, wu[i]), fk_pack_b_f32(N, K, wdn, K, wd[i]);
        }
        const int sets[2] = {1, cold};
        for (int s = 0; s < 2; s++) {
            const int n = sets[s], pairs = cold; /* the same work either way */
            t = BEST(ffn_chain(k, M, N, K, pairs, n, wu, wd, bias, bk, rs, &x, &y, h));
            printf("{\"kernel\": \"gemm_f32_chain\", \"table\": \"%s\", \"M\": %d, \"N\": %d, \"K\": %d, \"weights\": \"%s\", \"weight_mb\": %.1f, \"gflops\": %.2f}\n",
                   k->name, M, N, K, s ? "cold" : "hot", n * (up + down) * 4.0 / (1 << 20), 4.0 * M * N * K * pairs / t / 1e9);
        }
    }

    float *gx = fill((size_t)M * N);
    for (size_t i = 0; i < (size_t)M * N; i++) gx[i] *= 8.0f;
    t = BEST(k->gelu_f32(M * N, gx, c));
    printf("{\"kernel\": \"gelu_f32\", \"table\": \"%s\", \"n\": %d, \"ns_per_elem\": %.3f}\n", k->name, M * N, t / (M * N) * 1e9);

    int8_t *aq = malloc((size_t)M * K), *wq = malloc((size_t)N * K);
    float *as = fill(M), *ws = fill(N);
    for (size_t i = 0; i < (size_t)N * K; i++) wq[i] = (int8_t)(i * 31 % 255 - 127);
    int8_t *wpk = malloc(fk_packed_b_i8_size(K, N));
    fk_pack_b_i8(K, N, wq, wpk);
    fk_gemm_args gi = {M, N, K, NULL, K, aq, as, wpk, ws, bias, c, N, FK_EPI_BIAS, NULL, 0, NULL, 0, NULL};
    t = BEST({
        for (int m = 0; m < M; m++) k->quantize_row_i8(K, a + (size_t)m * K, aq + (size_t)m * K, &as[m]);
        k->gemm_i8(&gi, 0, M, 0, N);
    });
    printf("{\"kernel\": \"gemm_i8\", \"table\": \"%s\", \"M\": %d, \"N\": %d, \"K\": %d, \"gflops\": %.2f}\n", k->name, M, N, K, flops / t / 1e9);
    gi.epi = FK_EPI_BIAS_GELU;
    t = BEST(k->gemm_i8(&gi, 0, M, 0, N));
    printf("{\"kernel\": \"gemm_i8_gelu\", \"table\": \"%s\", \"M\": %d, \"N\": %d, \"K\": %d, \"gflops\": %.2f}\n", k->name, M, N, K, flops / t / 1e9);
    gi.epi = FK_EPI_NONE;
    t = BEST(k->gemm_i8(&gi, 0, M, 0, N));
    printf("{\"kernel\": \"gemm_i8_noepi\", \"table\": \"%s\", \"M\": %d, \"N\": %d, \"K\": %d, \"gflops\": %.2f}\n", k->name, M, N, K, flops / t / 1e9);
    t = BEST(for (int m = 0; m < M; m++) k->quantize_row_i8(K, a + (size_t)m * K, aq + (size_t)m * K, &as[m]));
    printf("{\"kernel\": \"quantize_i8\", \"table\": \"%s\", \"n\": %d, \"ns_per_elem\": %.3f}\n", k->name, M * K, t / ((double)M * K) * 1e9);

    int nb = K / FK_QK;
    fk_block_q8_0 *a8 = malloc(sizeof(fk_block_q8_0) * M * nb);
    fk_block_q4_0 *w4 = malloc(sizeof(fk_block_q4_0) * N * nb);
    for (int i = 0; i < N * nb; i++) {
        w4[i].d = 0.01f;
        for (int j = 0; j < 16; j++) w4[i].qs[j] = (uint8_t)(i * 13 + j * 7);
    }
    fk_panel_q4_0 *w4p = malloc(fk_packed_b_q4_0_size(K, N));
    fk_pack_b_q4_0(K, N, w4, w4p);
    fk_gemm_args g4 = {M, N, K, NULL, 0, a8, NULL, w4p, NULL, bias, c, N, FK_EPI_BIAS, NULL, 0, NULL, 0, NULL};
    t = BEST({
        for (int m = 0; m < M; m++) k->quantize_row_q8_0(K, a + (size_t)m * K, a8 + (size_t)m * nb);
        k->gemm_q4_0(&g4, 0, M, 0, N);
    });
    printf("{\"kernel\": \"gemm_q4_0\", \"table\": \"%s\", \"M\": %d, \"N\": %d, \"K\": %d, \"gflops\": %.2f}\n", k->name, M, N, K, flops / t / 1e9);

    float *q = fill((size_t)S * D), *kk = fill((size_t)S * D), *v = fill((size_t)S * D), *o = fill((size_t)S * D);
    float *scratch = fill(S);
    fk_attn_args at = {S, S, D, q, D, kk, D, v, D, NULL, 0.125f, o, D, NULL, 0, 0};
    t = BEST(k->attention_f32(&at, 0, S, scratch));
    printf("{\"kernel\": \"attention\", \"table\": \"%s\", \"S\": %d, \"D\": %d, \"gflops\": %.2f}\n", k->name, S, D, 4.0 * S * S * D / t / 1e9);
    /* DeBERTa's content-to-position term: S rows keep S of 2 * 256 relative positions */
    const int R = 512;
    float *pb = fill((size_t)D * (R + 16)), *rel = fill((size_t)S * S);
    int32_t *ix = malloc(sizeof(int32_t) * S * S);
    for (int i = 0; i < S; i++)
        for (int j = 0; j < S; j++) ix[i * S + j] = i - j + R / 2;
    fk_gmm_args gm = {S, D, R, q, D, pb, R + 16, ix, S, rel, S, 0, 0}; /* rows padded as plans store them */
    t = BEST(k->gather_mm_f32(&gm, 0, S));
    printf("{\"kernel\": \"gather_mm\", \"table\": \"%s\", \"S\": %d, \"D\": %d, \"R\": %d, \"gflops\": %.2f}\n", k->name, S, D, R, 2.0 * S * S * D / t / 1e9);
    printf("sink %g\n", (double)sink * 0);
    return 0;
}
