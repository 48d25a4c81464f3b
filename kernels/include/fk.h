/* fk: the farm kernels. Public types and the per-ISA kernel table.
 *
 * Every kernel has a plain-C reference `fk_<name>_generic` (generic/) and, per ISA variant,
 * a SIMD version compiled from arch/x86/fk_x86.c (variants avx2, avx512) or arch/arm/fk_arm.c
 * (variants neon, dotprod). A variant that has no native version of a kernel gets the
 * reference through include/fk_fallback.h. The runtime picks one `fk_kernels` table at start
 * (fk_select, common/fk_cpu.c) from the CPU features it detects, so a binary never executes
 * an instruction the CPU lacks.
 *
 * Threading is not done here: GEMM and attention kernels compute a caller-given sub-range
 * (rows/columns or heads) and the runtime splits the work across its threads.
 */
#ifndef FK_H
#define FK_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Q4_0-style block: 32 weights share one scale; w = d * (q - 8), q in 0..15.
 * qs[j] holds weight j in the low nibble and weight j+16 in the high nibble (ggml layout). */
#define FK_QK 32
typedef struct {
    float d;
    uint8_t qs[FK_QK / 2];
} fk_block_q4_0;

/* Q4_0 weights as the GEMM reads them: one panel of FK_NR=16 columns x one block of 32 k's.
 * d[j] is column j's scale; in 64-byte chunk h (0..3) of qs, byte j*4+t holds column j's
 * weight at k = 4h+t in its low nibble and at k = 16+4h+t in its high nibble, so a chunk
 * unpacks to two 4-k groups in the vpdpbusd/sdot layout (the same as fk_pack_b_i8). */
typedef struct {
    float d[16];
    uint8_t qs[16 * FK_QK / 2];
} fk_panel_q4_0;

/* Activations quantised for the Q4_0 GEMM: 32 int8 values with one scale. */
typedef struct {
    float d;
    int8_t qs[FK_QK];
} fk_block_q8_0;

/* fp32 GEMM weights are packed in panels of FK_NR columns, K-major inside a panel:
 * panel p holds W[k][p*FK_NR + j] at (p*K + k)*FK_NR + j, zero-padded past N. */
#define FK_NR 16

enum fk_epilogue {
    FK_EPI_NONE = 0,          /* C = A.W                            */
    FK_EPI_BIAS = 1,          /* C = A.W + bias                     */
    FK_EPI_BIAS_GELU = 2,     /* C = gelu_erf(A.W + bias)           */
    FK_EPI_BIAS_GELU_TAB = 3, /* C = gelu_table(A.W + bias)         */
    FK_EPI_BIAS_RELU = 4,     /* C = max(A.W + bias, 0)             */
    FK_EPI_BIAS_GELU_TANH = 5, /* C = gelu_tanh(A.W + bias) (gelu_new, FastGelu) */
    FK_EPI_BIAS_RES = 6,      /* C = A.W + bias + res * res_scale (a residual and its NoNorm) */
};

/* One GEMM: C[M][N] (row stride ldc) = epilogue(A[M][K] . W[K][N] + bias).
 * gemm_f32:  A = a (row stride lda), W = w packed in FK_NR panels.
 * gemm_i8:   A = aq int8 [M][K] in [-127, 127] (row stride lda >= FK_K4(K), zero past K) with
 *            per-row scales a_scale; W = w int8 in [-127, 127] packed by fk_pack_b_i8 in
 *            panels of FK_NR columns: panel p, group g of 4 k's, column j, k%4 at
 *            ((p*K4 + g)*FK_NR + j)*4 + k%4 (the layout of VNNI vpdpbusd and ARM sdot),
 *            zero-padded; per-column scales w_scale.
 * gemm_q4_0: A = aq fk_block_q8_0 [M][K/32] (row stride lda blocks, 0 = K/32), W = w fk_panel_q4_0 [ceil(N/16)][K/32]
 *            (K % 32 == 0), from fk_pack_b_q4_0; padding columns have d = 0. */
typedef struct {
    int M, N, K;
    const float *a;
    int lda;
    const void *aq;
    const float *a_scale;
    const void *w;
    const float *w_scale;
    const float *bias;
    float *c;
    int ldc;
    int epi;
    /* optional: the packed fp32 weights of the GEMM that runs after this one (its first k
     * block is prefetched during this one's last) */
    const void *w_next;
    int k_next;
    /* FK_EPI_BIAS_RES: the residual rows (same row index as C, row stride ldres) and one
     * factor per output column (MobileBERT's NoNorm after a residual Add, folded: the GEMM's
     * weights and bias carry the NoNorm's gamma and beta, the residual is added times gamma) */
    const float *res;
    int ldres;
    const float *res_scale;
} fk_gemm_args;

/* One attention head over Sq query rows and Sk keys:
 * o[i] = sum_j softmax_j(scale * q[i].k[j] + mask[j]) v[j]; mask may be NULL.
 * scratch: at least Sk floats owned by the calling thread (the SIMD versions use their own
 * per-thread buffer and accept NULL). */
typedef struct {
    int Sq, Sk, D;
    const float *q;
    int ldq;
    const float *k;
    int ldk;
    const float *v;
    int ldv;
    const float *mask;
    float scale;
    float *o;
    int ldo;
    /* an additive bias on the scaled scores of query row i, bias + i * ldb (NULL: none):
     * MPNet's relative position bias, computed at build time for the bound length */
    const float *bias;
    int ldb;
    /* the bias row of query row i is bias + (i - bias_row0) * ldb: a caller that computes
     * the bias per block of rows (DeBERTa's relative terms) passes the block's first row */
    int bias_row0;
} fk_attn_args;

/* A gathered product: the elements of a matrix product that a GatherElements along its last
 * axis keeps, computed without the rest (DeBERTa's relative-position terms: Q . posK^T is
 * [S, 2 * span] and keeps S of each row's 2 * span columns).
 * For rows r in [r0, r1) and n in [0, N): v = sum_d a[r * lda + d] * b[d * ldb + idx[r * ldi + n]],
 * written to o[(r - r0) * ldo + n], or to o[n * ldo + (r - r0)] when tr (the transposed
 * product: DeBERTa's position-to-content term), added to what is there when acc.
 * Every idx must lie in [0, R); B is [D][R] with row stride ldb >= R (the MatMul's own
 * right-hand side). The SIMD versions compute a row's products over the range of columns
 * its idx spans (once each, vectorised over the columns, D inner), then gather. */
typedef struct {
    int N, D, R;
    const float *a;
    int lda;
    const float *b;
    int ldb;
    const int32_t *idx;
    int ldi;
    float *o;
    int ldo;
    int tr, acc;
} fk_gmm_args;

typedef struct fk_kernels {
    /* "generic", "avx2", "avx512", "avx512-vnni", "amx", "neon", "dotprod": the x86 tables
     * are named after the ISA level (fk_isa_setup) they need */
    const char *name;
    uint64_t needs;    /* FK_FEAT_* bits the variant executes */
    float (*dot_f32)(int n, const float *a, const float *b);
    void (*axpy_f32)(int n, float alpha, const float *x, float *y);
    void (*add_f32)(int n, const float *a, const float *b, float *y);
    void (*scale_f32)(int n, float s, float *x);
    void (*gelu_f32)(int n, const float *x, float *y);
    void (*gelu_tab_f32)(int n, const float *x, float *y);
    void (*layernorm_f32)(int n, const float *x, const float *r, const float *g, const float *b,
                          float eps, float *y);
    void (*softmax_f32)(int n, float *x, float scale, const float *mask);
    void (*quantize_row_i8)(int n, const float *x, int8_t *q, float *scale);
    void (*quantize_row_q8_0)(int n, const float *x, fk_block_q8_0 *y);
    void (*gemm_f32)(const fk_gemm_args *g, int m0, int m1, int n0, int n1);
    void (*gemm_i8)(const fk_gemm_args *g, int m0, int m1, int n0, int n1);
    void (*gemm_q4_0)(const fk_gemm_args *g, int m0, int m1, int n0, int n1);
    void (*attention_f32)(const fk_attn_args *a, int i0, int i1, float *scratch);
    /* Throughput probe, not a model kernel: `iters` rounds of 12 independent vector FMAs
     * (2 * 12 * lanes flops a round); returns one lane of the result. */
    float (*fma_loop)(long iters, int *lanes);
    /* MobileBERT: y = max(x, 0), and NoNorm after a residual, y = (x + r) * g + b (r may be
     * NULL): an elementwise affine, no statistics (the LayerNorm category's op there). */
    void (*relu_f32)(int n, const float *x, float *y);
    void (*nonorm_f32)(int n, const float *x, const float *r, const float *g, const float *b, float *y);
    /* BERT's pooler: y = tanh(x); ALBERT's gelu_new: y = 0.5 x (1 + tanh(sqrt(2/pi)(x + 0.044715 x^3))).
     * Both run as a row pass after the GEMM (y may equal x), not as a GEMM epilogue. */
    void (*tanh_f32)(int n, const float *x, float *y);
    void (*gelu_tanh_f32)(int n, const float *x, float *y);
    /* y = fma(r, s, y): the residual of a NoNorm folded into the FC before it (the GEMM's
     * FK_EPI_BIAS_RES epilogue and the unfused step both call it, so they round alike) */
    void (*residual_f32)(int n, const float *r, const float *s, float *y);
    /* the gathered product over rows [r0, r1) (fk_gmm_args) */
    void (*gather_mm_f32)(const fk_gmm_args *g, int r0, int r1);
    /* Register blocking of gemm_f32, gemm_i8, gemm_q4_0 (index FK_GEMM_*): rows and columns
     * one micro-kernel call covers. The executor cuts a GEMM into tasks on these boundaries:
     * a cut inside a block recomputes the whole block (padded rows/columns), so unaligned
     * tasks cost more work than the GEMM itself. gemm_cut: what a task costs beyond its
     * rows x columns of compute, per row (packing its rows of A: repeated when columns are
     * cut) and per column (streaming its columns of W: repeated when rows are cut), in units
     * of one row x column; measured per table on 2-way cuts (runtime/exec.c, gemm_split). */
    int gemm_rows[3], gemm_cols[3];
    short gemm_cut[3][2];
} fk_kernels;

enum { FK_GEMM_F32, FK_GEMM_I8, FK_GEMM_Q4 };

/* CPU features, arch-neutral bit numbers (the plan file stores the same bits). */
#define FK_FEAT_AVX2      (1ull << 0)
#define FK_FEAT_FMA       (1ull << 1)
#define FK_FEAT_AVX512F   (1ull << 2)
#define FK_FEAT_AVX512BW  (1ull << 3)
#define FK_FEAT_AVX512VL  (1ull << 4)
#define FK_FEAT_AVX512DQ  (1ull << 5)
#define FK_FEAT_F16C      (1ull << 6)
#define FK_FEAT_AVX512VNNI (1ull << 7)
#define FK_FEAT_AMX_TILE  (1ull << 8) /* usable: CPUID + XCR0 tile state + Linux permission */
#define FK_FEAT_AMX_INT8  (1ull << 9)
#define FK_FEAT_AVXVNNI   (1ull << 10) /* AVX-VNNI (VEX vpdpbusd on ymm): no table uses it yet */
#define FK_FEAT_NEON      (1ull << 16)
#define FK_FEAT_DOTPROD   (1ull << 17)
#define FK_FEAT_I8MM      (1ull << 18)
#define FK_FEAT_SVE       (1ull << 19)
#define FK_FEAT_KNOWN_MASK 0x00000000000F07FFull

/* Features the kernels may use: what the CPU has, masked by the ISA cap (fk_isa_setup). */
uint64_t fk_cpu_features(void);
/* What the CPU has, whatever the cap. */
uint64_t fk_cpu_detected(void);
const char *fk_feature_name(int bit);
/* ISA levels (x86: avx2, avx2-vnni, avx512, avx512-vnni, amx; AArch64: baseline, dotprod,
 * i8mm): the same names and features as farm/isa.py. fk_isa_setup caps the kernels at one:
 * `level` (NULL or "" = $FARM_ISA, where a level of the other arch is no cap; unset, "" or
 * "native" = no cap). Returns -1 with a message
 * in err for a level unknown on this arch or one that needs features the CPU lacks (the
 * message names the CPU's own level). Call it before choosing a table. */
int fk_isa_setup(const char *level, char *err, size_t errlen);
/* The cap in force (NULL: none) and the highest level a feature set reaches ("x86-64" /
 * "armv8-a" below the first level). */
const char *fk_isa_cap(void);
const char *fk_isa_level(uint64_t features);
/* Tables compiled into this binary, best first, NULL-terminated. */
const fk_kernels *const *fk_all_kernels(void);
/* Best table the CPU can run, or by name ("generic", "avx2", ...); NULL if unknown or
 * the CPU lacks a feature the named variant needs. */
const fk_kernels *fk_select(const char *name);

/* Shared GELU lookup table (built once by fk_init from erf, linear interpolation). */
#define FK_GELU_TAB_N 8192
#define FK_GELU_TAB_LO (-8.0f)
#define FK_GELU_TAB_HI (8.0f)
extern float fk_gelu_tab[FK_GELU_TAB_N + 1];
void fk_init(void);

/* Plain-C references. */
extern const fk_kernels fk_kernels_generic;
float fk_dot_f32_generic(int n, const float *a, const float *b);
void fk_axpy_f32_generic(int n, float alpha, const float *x, float *y);
void fk_add_f32_generic(int n, const float *a, const float *b, float *y);
void fk_scale_f32_generic(int n, float s, float *x);
void fk_gelu_f32_generic(int n, const float *x, float *y);
void fk_gelu_tab_f32_generic(int n, const float *x, float *y);
void fk_layernorm_f32_generic(int n, const float *x, const float *r, const float *g,
                              const float *b, float eps, float *y);
void fk_softmax_f32_generic(int n, float *x, float scale, const float *mask);
void fk_quantize_row_i8_generic(int n, const float *x, int8_t *q, float *scale);
void fk_quantize_row_q8_0_generic(int n, const float *x, fk_block_q8_0 *y);
void fk_gemm_f32_generic(const fk_gemm_args *g, int m0, int m1, int n0, int n1);
void fk_gemm_i8_generic(const fk_gemm_args *g, int m0, int m1, int n0, int n1);
void fk_gemm_q4_0_generic(const fk_gemm_args *g, int m0, int m1, int n0, int n1);
void fk_attention_f32_generic(const fk_attn_args *a, int i0, int i1, float *scratch);
float fk_fma_loop_generic(long iters, int *lanes);
void fk_relu_f32_generic(int n, const float *x, float *y);
void fk_nonorm_f32_generic(int n, const float *x, const float *r, const float *g, const float *b, float *y);
void fk_tanh_f32_generic(int n, const float *x, float *y);
void fk_gelu_tanh_f32_generic(int n, const float *x, float *y);
void fk_residual_f32_generic(int n, const float *r, const float *s, float *y);
void fk_gather_mm_f32_generic(const fk_gmm_args *g, int r0, int r1);

/* Helpers used by tests and the runtime (generic only). */
#define FK_K4(K) (((K) + 3) / 4 * 4)
void fk_pack_b_i8(int K, int N, const int8_t *wt, int8_t *packed); /* wt [N][K] rows */
size_t fk_packed_b_i8_size(int K, int N); /* bytes */
void fk_pack_b_q4_0(int K, int N, const fk_block_q4_0 *w, fk_panel_q4_0 *packed); /* w [N][K/32] */
size_t fk_packed_b_q4_0_size(int K, int N); /* bytes */
void fk_pack_b_f32(int K, int N, const float *w, int ldw, float *packed);
size_t fk_packed_b_f32_size(int K, int N); /* floats */

#ifdef __cplusplus
}
#endif
#endif
