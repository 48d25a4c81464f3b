/* Plan interpretation: shapes come from the inputs (B, S), sizes from the plan; every op is
 * split into tasks for the pool. See exec.h for fused vs unfused. */
#include "exec.h"
#include "generic.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define ROWS_PER_TASK 8
/* quantised activation rows: a multiple of 64 (cache lines) and of sizeof(fk_block_q8_0) */
#define QA_ALIGN 576

double fk_now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec * 1e-6;
}

enum step { S_EMBED, S_LN, S_ADD, S_BIAS, S_GELU, S_QUANT, S_GEMM, S_ATT, S_QK, S_SCALE, S_MASK, S_SOFTMAX, S_PV,
            S_NONORM, S_RELU, S_TRIGRAM, S_TANH, S_RESID, S_ABIAS, S_REL };

typedef struct {
    fk_exec *e;
    const fk_op *op;
    enum step step;
    const float *x, *r;
    float *y;
    int cols;
    int rows; /* rows of this row pass: T (per token) or B (per sequence, after a Row op) */
    fk_gemm_args g;
    int wtype;
    int row_chunks; /* GEMM: row chunks; attention: query rows per task */
    int col_chunks, col_unit, row_unit; /* GEMM: chunks cut on row_unit x col_unit blocks */
    int task_rows; /* row passes: rows per task */
} task_ctx;

static float *B_(const fk_exec *e, int id) { return id < 0 ? NULL : e->buf[id]; }
static int cols_(const fk_exec *e, int id) { return (int)e->plan->bufs[id].cols; }
static int rows_(const fk_exec *e, int id) {
    const uint32_t r = e->plan->bufs[id].rows;
    return r == FK_BUF_SEQS ? e->B : r == FK_BUF_FLAT ? 1 : e->T;
}
static const float *T_(const fk_exec *e, int id) { return (const float *)fk_plan_data(e->plan, id); }

/* RoBERTa's position id of token t (create_position_ids_from_input_ids). */
static int64_t pad_position(const fk_exec *e, int slot, int64_t pad, int t) {
    const int64_t *ids = e->in[slot] + (size_t)(t / e->S) * e->S;
    const int s = t % e->S;
    if (ids[s] == pad) return pad;
    int64_t n = 0;
    for (int j = 0; j <= s; j++) n += ids[j] != pad;
    return pad + n;
}

/* A row-wise step (embedding, norms, adds, activations, quantisation) on rows [r0, r1). */
static void row_step(const task_ctx *c, int r0, int r1) {
    fk_exec *e = c->e;
    const fk_op *op = c->op;
    const fk_kernels *k = e->k;
    const int S = e->S;
    switch (c->step) {
    case S_EMBED:
        for (int t = r0; t < r1; t++) {
            float *y = c->y + (size_t)t * c->cols;
            int first = 1;
            if (op->in[0] >= 0) memcpy(y, e->buf[op->in[0]] + (size_t)t * c->cols, sizeof(float) * c->cols), first = 0;
            for (int i = 0; i < 4; i++) {
                if (op->t[i] < 0) continue;
                int src = op->p[i];
                int64_t row = op->p[4 + i] > 0 ? pad_position(e, src, op->p[4 + i] - 1, t)
                              : src >= 0 ? e->in[src][t] : src == FK_SRC_POSITION ? t % S : -(src + 2);
                const float *tr = T_(e, op->t[i]) + (size_t)row * c->cols;
                if (first) memcpy(y, tr, sizeof(float) * c->cols), first = 0;
                else k->add_f32(c->cols, y, tr, y);
            }
        }
        break;
    case S_TRIGRAM: { /* token t = (b, s): part j copies the row of token s + offset_j of its own sequence */
        const int parts = op->p[1], E = c->cols / parts;
        const float *table = T_(e, op->t[0]);
        for (int t = r0; t < r1; t++) {
            const int b = t / S, s = t % S;
            float *y = c->y + (size_t)t * c->cols;
            for (int j = 0; j < parts; j++) {
                const int src = s + op->p[2 + j];
                if (src < 0 || src >= S) memset(y + (size_t)j * E, 0, sizeof(float) * E);
                else memcpy(y + (size_t)j * E, table + (size_t)e->in[op->p[0]][(size_t)b * S + src] * E, sizeof(float) * E);
            }
        }
        break;
    }
    case S_NONORM: {
        const float *g = T_(e, op->t[0]), *b = T_(e, op->t[1]);
        for (int t = r0; t < r1; t++)
            k->nonorm_f32(c->cols, c->x + (size_t)t * c->cols, c->r ? c->r + (size_t)t * c->cols : NULL, g, b,
                          c->y + (size_t)t * c->cols);
        break;
    }
    case S_RELU:
        for (int t = r0; t < r1; t++) k->relu_f32(c->cols, c->x + (size_t)t * c->cols, c->y + (size_t)t * c->cols);
        break;
    case S_LN: {
        const float *g = T_(e, op->t[0]), *b = T_(e, op->t[1]);
        for (int t = r0; t < r1; t++)
            k->layernorm_f32(c->cols, c->x + (size_t)t * c->cols, c->r ? c->r + (size_t)t * c->cols : NULL, g, b,
                             op->f[0], c->y + (size_t)t * c->cols);
        break;
    }
    case S_ADD:
        for (int t = r0; t < r1; t++)
            k->add_f32(c->cols, c->x + (size_t)t * c->cols, c->r + (size_t)t * c->cols, c->y + (size_t)t * c->cols);
        break;
    case S_BIAS:
        for (int t = r0; t < r1; t++) k->add_f32(c->cols, c->x + (size_t)t * c->cols, c->r, c->y + (size_t)t * c->cols);
        break;
    case S_GELU:
        for (int t = r0; t < r1; t++) {
            const float *x = c->x + (size_t)t * c->cols;
            float *y = c->y + (size_t)t * c->cols;
            if (c->wtype == FK_GELU_TANH) k->gelu_tanh_f32(c->cols, x, y);
            else if (c->wtype) k->gelu_tab_f32(c->cols, x, y);
            else k->gelu_f32(c->cols, x, y);
        }
        break;
    case S_TANH:
        for (int t = r0; t < r1; t++) k->tanh_f32(c->cols, c->x + (size_t)t * c->cols, c->y + (size_t)t * c->cols);
        break;
    case S_RESID: { /* unfused FC residual epilogue, in place on its bias pass's output */
        const float *g = T_(e, op->t[3]);
        for (int t = r0; t < r1; t++) k->residual_f32(c->cols, c->r + (size_t)t * c->cols, g, c->y + (size_t)t * c->cols);
        break;
    }
    case S_QUANT:
        for (int t = r0; t < r1; t++) {
            /* row t at t * qa_stride whatever the FC: in a segment, threads quantise for
             * different FCs at once, each on its own rows */
            if (c->wtype == FK_W_I8) { /* rows padded to a multiple of 4 with zeros (fk.h) */
                int8_t *q = (int8_t *)e->qa + (size_t)t * e->qa_stride;
                k->quantize_row_i8(c->cols, c->x + (size_t)t * c->cols, q, &e->qscale[t]);
                memset(q + c->cols, 0, (size_t)(FK_K4(c->cols) - c->cols));
            }
            else
                k->quantize_row_q8_0(c->cols, c->x + (size_t)t * c->cols, (fk_block_q8_0 *)((char *)e->qa + (size_t)t * e->qa_stride));
        }
        break;
    default: break;
    }
}

static void fc_gemm(const fk_kernels *k, int wtype, int groups, const fk_gemm_args *g, int m0, int m1, int n0, int n1);

/* DeBERTa's disentangled attention: the content-to-position and position-to-content terms of
 * query rows [i0, i1) of head h, as gathered products (fk_gmm_args) of q with the table t1 at
 * indices t2 and of k with the table t3 at indices t4, transposed (the tables carry the
 * scores' scale). Written to o (rows i0.. at stride S), or added to it when acc. */
static void rel_terms(const fk_exec *e, const fk_op *op, int h, int i0, int i1, const float *q, int ldq,
                      const float *kk, int ldk, float *o, int acc) {
    const int S = e->S, D = op->p[1];
    if (op->t[1] >= 0) {
        const int R = (int)e->plan->tensors[op->t[1]].dims[2];
        fk_gmm_args g = {S, D, R, q, ldq, T_(e, op->t[1]) + (size_t)h * D * R, R,
                         (const int32_t *)fk_plan_data(e->plan, op->t[2]), S, o, S, 0, acc};
        e->k->gather_mm_f32(&g, i0, i1);
        acc = 1;
    }
    if (op->t[3] >= 0) { /* rows are keys j; the kept columns are the query rows' */
        const int R = (int)e->plan->tensors[op->t[3]].dims[2];
        fk_gmm_args g = {i1 - i0, D, R, kk, ldk, T_(e, op->t[3]) + (size_t)h * D * R, R,
                         (const int32_t *)fk_plan_data(e->plan, op->t[4]) + i0, S, o, S, 1, acc};
        e->k->gather_mm_f32(&g, 0, S);
    }
}

/* DeBERTa masks scores with mask[i] * mask[j] and Where(-FLT_MAX): a padded query row's scores
 * are all equal, so its softmax is uniform and its output the mean of V over every key. */
static void masked_rows(const fk_exec *e, const fk_op *op, int b, int i0, int i1, const float *v, int ldv,
                        float *o, int ldo) {
    const int S = e->S, D = op->p[1];
    const int64_t *m = e->in[op->p[5]] + (size_t)b * S;
    for (int i = i0; i < i1; i++) {
        if (m[i]) continue;
        float *oi = o + (size_t)i * ldo;
        memset(oi, 0, sizeof(float) * D);
        for (int j = 0; j < S; j++) e->k->axpy_f32(D, 1.0f, v + (size_t)j * ldv, oi);
        e->k->scale_f32(D, 1.0f / (float)S, oi);
    }
}

static void run_task(void *vctx, int task, int thread) {
    task_ctx *c = vctx;
    fk_exec *e = c->e;
    const fk_op *op = c->op;
    const fk_kernels *k = e->k;
    const int S = e->S, H = op->p[0], D = op->p[1];
    int r0 = task * c->task_rows, r1 = r0 + c->task_rows;
    if (r1 > c->rows) r1 = c->rows;
    switch (c->step) {
    case S_EMBED: case S_TRIGRAM: case S_NONORM: case S_RELU: case S_LN: case S_ADD: case S_BIAS: case S_GELU:
    case S_TANH: case S_QUANT: case S_RESID:
        row_step(c, r0, r1);
        break;
    case S_GEMM: {
        int rc = task % c->row_chunks, cc = task / c->row_chunks;
        int row_blocks = (c->g.M + c->row_unit - 1) / c->row_unit;
        int m0 = (int)((int64_t)row_blocks * rc / c->row_chunks) * c->row_unit;
        int m1 = (int)((int64_t)row_blocks * (rc + 1) / c->row_chunks) * c->row_unit;
        if (m1 > c->g.M) m1 = c->g.M;
        int units = (c->g.N + c->col_unit - 1) / c->col_unit;
        int n0 = (int)((int64_t)units * cc / c->col_chunks) * c->col_unit;
        int n1 = (int)((int64_t)units * (cc + 1) / c->col_chunks) * c->col_unit;
        if (n1 > c->g.N) n1 = c->g.N;
        if (m0 >= m1 || n0 >= n1) break;
        fc_gemm(k, c->wtype, op->p[4], &c->g, m0, m1, n0, n1);
        break;
    }
    case S_ATT: case S_QK: case S_PV: case S_REL: {
        int rows = c->row_chunks, chunks = (S + rows - 1) / rows;
        int b = task / (H * chunks), h = (task / chunks) % H, i0 = (task % chunks) * rows;
        int i1 = i0 + rows < S ? i0 + rows : S;
        const float *q = e->buf[op->in[0]], *kk = e->buf[op->in[1]], *v = e->buf[op->in[2]];
        int ldq = cols_(e, op->in[0]), ldk = cols_(e, op->in[1]), ldv = cols_(e, op->in[2]), ldo = H * D;
        q += (size_t)b * S * ldq + op->p[2] + h * D;
        kk += (size_t)b * S * ldk + op->p[3] + h * D;
        v += (size_t)b * S * ldv + op->p[4] + h * D;
        float *o = c->y + (size_t)b * S * ldo + h * D;
        float *sc = e->scores ? e->scores + ((size_t)b * H + h) * S * S : NULL;
        if (c->step == S_ATT) {
            const float *bias = op->t[0] >= 0 ? T_(e, op->t[0]) + (size_t)h * S * S : NULL;
            int bias_row0 = 0;
            if (op->t[1] >= 0 || op->t[3] >= 0) { /* DeBERTa: the relative terms of these rows, then the attention */
                float *blk = e->relb[thread];
                rel_terms(e, op, h, i0, i1, q, ldq, kk, ldk, blk, 0);
                if (bias)
                    for (int i = i0; i < i1; i++) k->add_f32(S, blk + (size_t)(i - i0) * S, bias + (size_t)i * S, blk + (size_t)(i - i0) * S);
                bias = blk, bias_row0 = i0;
            }
            fk_attn_args a = {S, S, D, q, ldq, kk, ldk, v, ldv, op->p[5] >= 0 ? e->mask + (size_t)b * S : NULL,
                              op->f[0], o, ldo, bias, S, bias_row0};
            k->attention_f32(&a, i0, i1, e->scratch[thread]);
            if (op->p[6]) masked_rows(e, op, b, i0, i1, v, ldv, o, ldo);
        } else if (c->step == S_QK) {
            for (int i = i0; i < i1; i++)
                for (int j = 0; j < S; j++) sc[(size_t)i * S + j] = k->dot_f32(D, q + (size_t)i * ldq, kk + (size_t)j * ldk);
        } else if (c->step == S_PV) {
            for (int i = i0; i < i1; i++) {
                float *oi = o + (size_t)i * ldo;
                memset(oi, 0, sizeof(float) * D);
                for (int j = 0; j < S; j++) k->axpy_f32(D, sc[(size_t)i * S + j], v + (size_t)j * ldv, oi);
            }
            if (op->p[6]) masked_rows(e, op, b, i0, i1, v, ldv, o, ldo);
        }
        if (c->step == S_REL) { /* unfused: the relative terms added to the scaled scores */
            rel_terms(e, op, h, i0, i1, q, ldq, kk, ldk, sc + (size_t)i0 * S, 1);
        }
        break;
    }
    case S_SCALE: case S_ABIAS: case S_MASK: case S_SOFTMAX: { /* over score rows: B*H*S rows of S */
        int rows = e->B * H * S, q0 = task * ROWS_PER_TASK * 4, q1 = q0 + ROWS_PER_TASK * 4;
        if (q1 > rows) q1 = rows;
        for (int rr = q0; rr < q1; rr++) {
            float *row = e->scores + (size_t)rr * S;
            if (c->step == S_SCALE) k->scale_f32(S, op->f[0], row);
            else if (c->step == S_MASK) k->add_f32(S, row, e->mask + (size_t)(rr / (H * S)) * S, row);
            else if (c->step == S_ABIAS) k->add_f32(S, row, T_(e, op->t[0]) + (size_t)(rr % (H * S)) * S, row);
            else k->softmax_f32(S, row, 1.0f, NULL);
        }
        break;
    }
    }
}

static void prof_add(fk_exec *e, const fk_op *op, const char *suffix, const char *cat, double ms) {
    fk_prof *p = e->prof;
    if (p->n < FK_PROF_MAX) {
        snprintf(p->name[p->n], sizeof p->name[0], "%s%s", op->name, suffix);
        p->op[p->n] = fk_op_kind_name(op->kind);
        p->cat[p->n] = cat;
        p->ms[p->n] += ms;
        p->n++;
    }
}

/* A fallback op's profile entry names the ONNX-level op it ran. */
static void mark_as(fk_exec *e, const fk_op *op, const char *opname, const char *cat) {
    if (!e->prof) return;
    prof_add(e, op, "", cat, fk_now_ms() - e->t_mark);
    e->prof->op[e->prof->n - 1] = opname;
    e->t_mark = fk_now_ms();
}

static void mark(fk_exec *e, const fk_op *op, const char *suffix, const char *cat) {
    if (!e->prof) return;
    prof_add(e, op, suffix, cat, fk_now_ms() - e->t_mark);
    e->t_mark = fk_now_ms();
}

/* Row-wise passes this small (LayerNorm, embedding, quantisation of a 128 x 128 activation: a
 * few microseconds) get one task per thread, in row order: the pool hands the first rows to
 * the caller and the last to the workers, as it did for the GEMM that wrote them, so each
 * thread reads rows from its own cache (run serially on the caller, they read half their
 * input from the other core and ran slower at 2 threads than at 1). Larger passes are cut
 * into ROWS_PER_TASK-row tasks for balance. */
#define SMALL_PASS_ELEMS 32768

static void rows_pass(fk_exec *e, task_ctx *c, enum step s) {
    const int nth = fk_pool_size(e->pool);
    c->step = s;
    c->task_rows = (size_t)c->rows * (size_t)c->cols <= SMALL_PASS_ELEMS ? (c->rows + nth - 1) / nth : ROWS_PER_TASK;
    if (c->task_rows < 1) c->task_rows = 1;
    fk_pool_run(e->pool, (c->rows + c->task_rows - 1) / c->task_rows, run_task, c);
}

static int k_rows(const fk_kernels *k, int kind) { return k->gemm_rows[kind] > 0 ? k->gemm_rows[kind] : 1; }
/* Column chunks stay on whole FK_NR-column weight panels (every weight type is packed in
 * them), so no two tasks ever write the same column. */
static int k_cols(const fk_kernels *k, int kind) {
    const int c = k->gemm_cols[kind];
    return c > 0 && c % FK_NR == 0 ? c : FK_NR;
}

/* A GEMM's tasks: row_chunks x col_chunks, cut on the kernel's register blocks (a cut
 * inside a block recomputes the block). Every task packs its own rows of A and streams its
 * own columns of W, so a task of r rows and c columns costs about r * c + cut[0] * r +
 * cut[1] * c (fk.h, gemm_cut: fitted per kernel table to serial runs of 2-way row and column
 * cuts of MobileBERT's GEMMs, K = 128 and 512). The choice minimises the slowest thread's
 * modelled time, ceil(tasks / threads) x the largest task; ties go to fewer tasks, then to
 * column cuts. One thread: one task. (The fixed 2 x 4 split used before did 1.3-1.6x the
 * work of one call at 2 threads.) */
static void gemm_split(int M, int N, int row_unit, int col_unit, const short cut[2], int nth, int *row_chunks,
                       int *col_chunks) {
    const int rb = (M + row_unit - 1) / row_unit, cb = (N + col_unit - 1) / col_unit, max_tasks = 4 * nth;
    double best = -1;
    *row_chunks = *col_chunks = 1;
    for (int rc = 1; rc <= rb && rc <= max_tasks; rc++)
        for (int cc = 1; cc <= cb && rc * cc <= max_tasks; cc++) {
            const int rounds = (rc * cc + nth - 1) / nth;
            const double rows = (double)((rb + rc - 1) / rc) * row_unit, cols = (double)((cb + cc - 1) / cc) * col_unit;
            const double t = rounds * (rows * cols + cut[0] * rows + cut[1] * cols);
            if (best < 0 || t < best || (t == best && rc * cc < *row_chunks * *col_chunks))
                best = t, *row_chunks = rc, *col_chunks = cc;
        }
}

/* An FC's GEMM on rows [m0, m1) and columns [n0, n1). A grouped FC (p4 groups > 1, fp32:
 * SqueezeBERT's grouped 1x1 convolutions) is `groups` GEMMs side by side: group j reads input
 * columns [j K/G, (j+1) K/G) and writes output columns [j N/G, (j+1) N/G) with its own
 * packed weights (plan.c checks N/G is whole panels, so column cuts stay on panels). */
static void fc_gemm(const fk_kernels *k, int wtype, int groups, const fk_gemm_args *g, int m0, int m1, int n0, int n1) {
    if (groups > 1) {
        const int kg = g->K / groups, ng = g->N / groups;
        const size_t wsz = fk_packed_b_f32_size(kg, ng);
        for (int j = n0 / ng; j < groups && j * ng < n1; j++) {
            fk_gemm_args s = *g;
            s.K = kg, s.N = ng, s.a = g->a + (size_t)j * kg, s.w = (const float *)g->w + (size_t)j * wsz;
            s.c = g->c + (size_t)j * ng, s.w_next = NULL;
            if (g->bias) s.bias = g->bias + (size_t)j * ng;
            if (g->res) s.res = g->res + (size_t)j * ng, s.res_scale = g->res_scale + (size_t)j * ng;
            const int a0 = n0 > j * ng ? n0 - j * ng : 0, a1 = n1 < (j + 1) * ng ? n1 - j * ng : ng;
            k->gemm_f32(&s, m0, m1, a0, a1);
        }
        return;
    }
    if (wtype == FK_W_F32) k->gemm_f32(g, m0, m1, n0, n1);
    else if (wtype == FK_W_I8) k->gemm_i8(g, m0, m1, n0, n1);
    else k->gemm_q4_0(g, m0, m1, n0, n1);
}

/* The GEMM arguments of an FC op (its A is the quantised activations for int8/4-bit). */
static void fc_args(fk_exec *e, task_ctx *c) {
    const fk_op *op = c->op;
    fk_gemm_args *g = &c->g;
    memset(g, 0, sizeof *g);
    g->M = c->rows, g->N = op->p[1], g->K = op->p[2], g->lda = op->p[2], g->ldc = op->p[1];
    g->w = fk_plan_data(e->plan, op->t[0]), g->w_scale = op->t[2] >= 0 ? T_(e, op->t[2]) : NULL;
    g->bias = op->t[1] >= 0 ? T_(e, op->t[1]) : NULL;
    c->wtype = op->p[0];
    if (c->wtype != FK_W_F32)
        g->aq = e->qa, g->a_scale = e->qscale,
        g->lda = c->wtype == FK_W_I8 ? (int)e->qa_stride : (int)(e->qa_stride / sizeof(fk_block_q8_0));
    else g->a = B_(e, op->in[0]);
    const int act = op->p[3];
    g->epi = act == FK_ACT_GELU ? FK_EPI_BIAS_GELU : act == FK_ACT_GELU_TAB ? FK_EPI_BIAS_GELU_TAB
             : act == FK_ACT_RELU ? FK_EPI_BIAS_RELU : act == FK_ACT_GELU_TANH ? FK_EPI_BIAS_GELU_TANH
             : op->in[1] >= 0 ? FK_EPI_BIAS_RES : g->bias ? FK_EPI_BIAS : FK_EPI_NONE; /* tanh: a pass after */
    if (op->in[1] >= 0) /* a NoNorm after a residual, folded in (plan validated: no activation) */
        g->res = B_(e, op->in[1]), g->ldres = cols_(e, op->in[1]), g->res_scale = T_(e, op->t[3]);
    g->c = B_(e, op->out);
    /* the next fp32 FC's weights, so this GEMM's last block prefetches its first (an
     * inference reads ~100 MB of weights once: each GEMM would start on a cold block) */
    for (const fk_op *nx = op + 1; c->wtype == FK_W_F32 && nx < e->plan->ops + e->plan->n_ops && nx < op + 8; nx++)
        if (nx->kind == FK_OP_FC) {
            if (nx->p[0] == FK_W_F32 && nx->p[4] <= 1) g->w_next = fk_plan_data(e->plan, nx->t[0]), g->k_next = nx->p[2];
            break;
        }
}

static void run_fc(fk_exec *e, task_ctx *c) {
    const fk_op *op = c->op;
    const int N = op->p[1], K = op->p[2], nth = fk_pool_size(e->pool), M = c->rows;
    fk_gemm_args *g = &c->g;
    fc_args(e, c);
    if (c->wtype != FK_W_F32) {
        c->x = B_(e, op->in[0]), c->cols = K;
        rows_pass(e, c, S_QUANT);
        if (!e->fused) mark(e, op, "/quantize", "fc");
    }
    const int act = op->p[3];
    float *out = B_(e, op->out);
    if (!e->fused) { /* every step materialised: the GEMM alone, then bias, then activation */
        g->epi = FK_EPI_NONE;
        g->c = (g->bias || act) ? e->tmp1 : out;
    }
    const int kind = c->wtype == FK_W_F32 ? FK_GEMM_F32 : c->wtype == FK_W_I8 ? FK_GEMM_I8 : FK_GEMM_Q4;
    c->row_unit = k_rows(e->k, kind), c->col_unit = k_cols(e->k, kind);
    gemm_split(M, N, c->row_unit, c->col_unit, e->k->gemm_cut[kind], nth, &c->row_chunks, &c->col_chunks);
    c->step = S_GEMM;
    fk_pool_run(e->pool, c->row_chunks * c->col_chunks, run_task, c);
    if (e->fused && act == FK_ACT_TANH) { /* the pooler's: one row per sequence, a pass over C */
        c->x = out, c->y = out, c->cols = N;
        rows_pass(e, c, S_TANH);
    }
    if (e->fused) return mark(e, op, "", "fc");
    mark(e, op, "/matmul", "fc");
    c->cols = N;
    if (g->bias) {
        c->x = e->tmp1, c->r = g->bias, c->y = act ? e->tmp2 : out;
        rows_pass(e, c, S_BIAS);
        mark(e, op, "/bias", "fc");
    }
    if (g->res) { /* the folded NoNorm's residual, out += r * gamma: MobileBERT's layernorm row */
        c->r = g->res, c->y = out;
        rows_pass(e, c, S_RESID);
        mark(e, op, "/residual", "layernorm");
    } else if (act == FK_ACT_RELU) { /* ReLU is charged to the gelu category: the FFN activation's row */
        c->x = g->bias ? e->tmp2 : e->tmp1, c->y = out;
        rows_pass(e, c, S_RELU);
        mark(e, op, "/relu", "gelu");
    } else if (act == FK_ACT_TANH) { /* the pooler's activation: not the FFN's, so "other" */
        c->x = g->bias ? e->tmp2 : e->tmp1, c->y = out;
        rows_pass(e, c, S_TANH);
        mark(e, op, "/tanh", "other");
    } else if (act) {
        c->x = g->bias ? e->tmp2 : e->tmp1, c->y = out, c->wtype = act == FK_ACT_GELU_TANH ? FK_GELU_TANH : act == FK_ACT_GELU_TAB ? FK_GELU_TABLE : FK_GELU_ERF;
        rows_pass(e, c, S_GELU);
        mark(e, op, "/gelu", "gelu");
    }
}

static void run_attention(fk_exec *e, task_ctx *c) {
    const fk_op *op = c->op;
    const int H = op->p[0], S = e->S;
    if (op->p[5] >= 0) {
        const int64_t *m = e->in[op->p[5]];
        for (int t = 0; t < e->T; t++) e->mask[t] = m[t] ? op->f[2] : op->f[1];
    }
    c->y = B_(e, op->out);
    /* Query rows per task: whole heads when they share out evenly or are many (each task
     * packs its head's K and V, which at head dim 32 costs about a third of a 64-row half
     * head: splitting MobileBERT's 4 heads over 2 threads into 8 half heads cost more than it
     * balanced), else split rows so every thread gets about four tasks. */
    const int nth = fk_pool_size(e->pool), heads = e->B * H;
    int per_head = heads % nth == 0 || heads >= 4 * nth ? 1 : (4 * nth + heads - 1) / heads;
    int rows = (S + per_head - 1) / per_head;
    c->row_chunks = rows < 16 ? (S < 16 ? S : 16) : rows;
    int tasks = e->B * H * ((S + c->row_chunks - 1) / c->row_chunks);
    if (e->fused) {
        c->step = S_ATT;
        fk_pool_run(e->pool, tasks, run_task, c);
        return mark(e, op, "", "attention");
    }
    int score_tasks = (e->B * H * S + ROWS_PER_TASK * 4 - 1) / (ROWS_PER_TASK * 4);
    c->step = S_QK, fk_pool_run(e->pool, tasks, run_task, c), mark(e, op, "/qk", "attention");
    c->step = S_SCALE, fk_pool_run(e->pool, score_tasks, run_task, c), mark(e, op, "/scale", "attention");
    if (op->t[1] >= 0 || op->t[3] >= 0) c->step = S_REL, fk_pool_run(e->pool, tasks, run_task, c), mark(e, op, "/relative", "attention");
    if (op->t[0] >= 0) c->step = S_ABIAS, fk_pool_run(e->pool, score_tasks, run_task, c), mark(e, op, "/bias", "attention");
    if (op->p[5] >= 0) c->step = S_MASK, fk_pool_run(e->pool, score_tasks, run_task, c), mark(e, op, "/mask", "attention");
    c->step = S_SOFTMAX, fk_pool_run(e->pool, score_tasks, run_task, c), mark(e, op, "/softmax", "attention");
    c->step = S_PV, fk_pool_run(e->pool, tasks, run_task, c), mark(e, op, "/pv", "attention");
}


/* Fused mode runs each run of consecutive row-local ops (everything but attention and the
 * per-sequence ops after a Row) as ONE pool job, a "segment": each task takes a block of token
 * rows through every op of the segment in plan order (quantise, GEMM on its rows and all
 * columns, norm, residual, ...), since no such op reads another row of its input. An encoder
 * layer is then two jobs (its row-local ops, its attention) instead of one per op and step
 * (~35 per MobileBERT layer at int8, each a wake-up and a wait on a VM whose vCPUs are
 * time-shared), and a thread's rows stay in its own cache from op to op. Rows are cut on the
 * GEMMs' register blocks, so the per-row arithmetic, hence the output, is the same at any
 * thread count. Profiling: each op's time is measured inside every task, and the segment's
 * wall time is shared out in proportion (the runner's per-op total still sums to the run). */
static int row_local(const fk_exec *e, const fk_op *op) {
    switch (op->kind) {
    case FK_OP_EMBED: case FK_OP_TRIGRAM: case FK_OP_LAYERNORM: case FK_OP_NONORM: case FK_OP_ADD:
    case FK_OP_GELU: case FK_OP_FC: break;
    default: return 0;
    }
    if (e->plan->bufs[op->out].rows == FK_BUF_SEQS) return 0;
    for (int i = 0; i < 4; i++)
        if (op->in[i] >= 0 && (uint32_t)op->in[i] < e->plan->n_bufs && e->plan->bufs[op->in[i]].rows == FK_BUF_SEQS) return 0;
    return 1;
}

/* What the quantised-activation rows of a segment task hold: the buffer and weight type
 * they were quantised from (-1: nothing reusable). FCs that read the same input (MobileBERT's
 * two bottlenecks and V read one hidden state) then quantise it once. */
typedef struct {
    int buf, wtype;
} qa_holds;

/* One row-local op on token rows [r0, r1). */
static void op_rows(fk_exec *e, const fk_op *op, int r0, int r1, qa_holds *held) {
    task_ctx c = {.e = e, .op = op, .y = B_(e, op->out), .cols = cols_(e, op->out), .rows = rows_(e, op->out)};
    switch (op->kind) {
    case FK_OP_EMBED: c.step = S_EMBED; break;
    case FK_OP_TRIGRAM: c.step = S_TRIGRAM; break;
    case FK_OP_LAYERNORM: c.step = S_LN, c.x = B_(e, op->in[0]), c.r = B_(e, op->in[1]); break;
    case FK_OP_NONORM: c.step = S_NONORM, c.x = B_(e, op->in[0]), c.r = B_(e, op->in[1]); break;
    case FK_OP_ADD: c.step = S_ADD, c.x = B_(e, op->in[0]), c.r = B_(e, op->in[1]); break;
    case FK_OP_GELU: c.step = S_GELU, c.x = B_(e, op->in[0]), c.wtype = op->p[0]; break;
    case FK_OP_FC: {
        fc_args(e, &c);
        if (c.wtype != FK_W_F32 && (held->buf != op->in[0] || held->wtype != c.wtype)) {
            task_ctx q = c;
            q.step = S_QUANT, q.x = B_(e, op->in[0]), q.cols = op->p[2];
            row_step(&q, r0, r1);
            held->buf = op->in[0], held->wtype = c.wtype;
        }
        fc_gemm(e->k, c.wtype, op->p[4], &c.g, r0, r1, 0, c.g.N);
        const int act = op->p[3];
        if (op->out == held->buf) held->buf = -1; /* wrote over its own input */
        if (act != FK_ACT_TANH) return;
        c.x = c.y, c.cols = op->p[1], c.step = S_TANH;
        break;
    }
    default: return;
    }
    if (op->out == held->buf) held->buf = -1;
    row_step(&c, r0, r1);
}

typedef struct {
    fk_exec *e;
    uint32_t first, last; /* ops [first, last) */
    int tasks, unit;
} seg_ctx;

static void seg_task(void *vctx, int task, int thread) {
    const seg_ctx *s = vctx;
    fk_exec *e = s->e;
    const int blocks = (e->T + s->unit - 1) / s->unit;
    int r0 = (int)((int64_t)blocks * task / s->tasks) * s->unit, r1 = (int)((int64_t)blocks * (task + 1) / s->tasks) * s->unit;
    if (r1 > e->T) r1 = e->T;
    if (r0 >= r1) return;
    double *ms = e->prof ? e->seg_ms + (size_t)thread * e->seg_max : NULL, t = ms ? fk_now_ms() : 0;
    qa_holds held = {-1, -1};
    for (uint32_t i = s->first; i < s->last; i++) {
        op_rows(e, &e->plan->ops[i], r0, r1, &held);
        if (ms) {
            const double now = fk_now_ms();
            ms[i - s->first] += now - t, t = now;
        }
    }
}

static const char *fused_cat(const fk_op *op) {
    switch (op->kind) {
    case FK_OP_FC: return "fc";
    case FK_OP_LAYERNORM: case FK_OP_NONORM: return "layernorm";
    case FK_OP_GELU: return "gelu";
    default: return "other";
    }
}

/* Rows per block: a multiple of every GEMM kind's register block (capped), so no task cut
 * falls inside one. */
static int seg_unit(const fk_kernels *k) {
    int u = 1;
    for (int kind = 0; kind < 3; kind++) {
        int a = u, b = k_rows(k, kind);
        while (b) { const int t = a % b; a = b, b = t; }
        u = u / a * k_rows(k, kind);
    }
    return u > 32 ? 32 : u;
}

static void run_segment(fk_exec *e, uint32_t first, uint32_t last) {
    const int nth = fk_pool_size(e->pool), unit = seg_unit(e->k), blocks = (e->T + unit - 1) / unit;
    seg_ctx s = {.e = e, .first = first, .last = last, .tasks = nth < blocks ? nth : blocks, .unit = unit};
    if (e->prof) memset(e->seg_ms, 0, sizeof(double) * (size_t)nth * e->seg_max);
    fk_pool_run(e->pool, s.tasks, seg_task, &s);
    if (!e->prof) return;
    const double now = fk_now_ms(), wall = now - e->t_mark;
    double sum = 0;
    for (uint32_t i = 0; i < last - first; i++)
        for (int th = 0; th < nth; th++) sum += e->seg_ms[(size_t)th * e->seg_max + i];
    for (uint32_t i = first; i < last; i++) {
        double op_ms = 0;
        for (int th = 0; th < nth; th++) op_ms += e->seg_ms[(size_t)th * e->seg_max + (i - first)];
        prof_add(e, &e->plan->ops[i], "", fused_cat(&e->plan->ops[i]), sum > 0 ? wall * op_ms / sum : 0);
    }
    e->t_mark = fk_now_ms();
}

void fk_exec_run(fk_exec *e, fk_prof *prof) {
    e->prof = prof;
    if (prof) prof->n = 0, prof->runs++;
    e->t_mark = fk_now_ms();
    for (uint32_t i = 0; i < e->plan->n_ops; i++) {
        const fk_op *op = &e->plan->ops[i];
        if (e->fused && row_local(e, op)) {
            uint32_t j = i + 1;
            while (j < e->plan->n_ops && row_local(e, &e->plan->ops[j])) j++;
            run_segment(e, i, j);
            i = j - 1;
            continue;
        }
        task_ctx c = {.e = e, .op = op, .y = B_(e, op->out), .cols = cols_(e, op->out), .rows = rows_(e, op->out)};
        switch (op->kind) {
        case FK_OP_ROW: { /* B row copies: too small for the pool */
            const int pos = op->p[0] >= 0 ? op->p[0] : e->S + op->p[0];
            for (int b = 0; b < e->B; b++)
                memcpy(c.y + (size_t)b * c.cols, B_(e, op->in[0]) + ((size_t)b * e->S + pos) * c.cols, sizeof(float) * c.cols);
            mark(e, op, "", "other");
            break;
        }
        case FK_OP_EMBED: rows_pass(e, &c, S_EMBED), mark(e, op, "", "other"); break;
        case FK_OP_LAYERNORM:
            c.x = B_(e, op->in[0]), c.r = B_(e, op->in[1]);
            if (!e->fused && c.r) {
                c.y = e->tmp1, rows_pass(e, &c, S_ADD), mark(e, op, "/add", "other");
                c.x = e->tmp1, c.r = NULL, c.y = B_(e, op->out);
            }
            rows_pass(e, &c, S_LN), mark(e, op, "", "layernorm");
            break;
        case FK_OP_NONORM:
            c.x = B_(e, op->in[0]), c.r = B_(e, op->in[1]);
            if (!e->fused && c.r) {
                c.y = e->tmp1, rows_pass(e, &c, S_ADD), mark(e, op, "/add", "other");
                c.x = e->tmp1, c.r = NULL, c.y = B_(e, op->out);
            }
            rows_pass(e, &c, S_NONORM), mark(e, op, "", "layernorm");
            break;
        case FK_OP_TRIGRAM: rows_pass(e, &c, S_TRIGRAM), mark(e, op, "", "other"); break;
        case FK_OP_ADD: c.x = B_(e, op->in[0]), c.r = B_(e, op->in[1]), rows_pass(e, &c, S_ADD), mark(e, op, "", "other"); break;
        case FK_OP_GELU: c.x = B_(e, op->in[0]), c.wtype = op->p[0], rows_pass(e, &c, S_GELU), mark(e, op, "", "gelu"); break;
        case FK_OP_FC: run_fc(e, &c); break;
        case FK_OP_ATTENTION: run_attention(e, &c); break;
        case FK_OP_GENERIC: fk_generic_run(e, op), mark_as(e, op, fk_generic_name(op), "fallback"); break;
        }
    }
    e->prof = NULL;
}

static void *xcalloc(size_t n, size_t sz, int *oom) {
    void *p = calloc(n ? n : 1, sz);
    if (!p) *oom = 1;
    return p;
}

int fk_exec_init(fk_exec *e, const fk_plan *p, const fk_kernels *k, fk_pool *pool, int fused,
                 const ftns_file *inputs, char *err, size_t el) {
    memset(e, 0, sizeof *e);
    e->plan = p, e->k = k, e->pool = pool, e->fused = fused;
    int oom = 0;
    e->in = xcalloc(p->n_inputs, sizeof(int64_t *), &oom);
    for (uint32_t i = 0; i < p->n_inputs && !oom; i++) {
        const ftns_tensor *t = ftns_find(inputs, p->inputs[i].name);
        if (!t) return snprintf(err, el, "input %s is missing from the inputs file", p->inputs[i].name), -1;
        if (t->ndim != 2 || (t->dtype != FTNS_I64 && t->dtype != FTNS_I32))
            return snprintf(err, el, "input %s must be int64 or int32 [batch, seq]", t->name), -1;
        if (e->B == 0) e->B = (int)t->dims[0], e->S = (int)t->dims[1];
        if (t->dims[0] != e->B || t->dims[1] != e->S || e->B <= 0 || e->S <= 0 || (int64_t)e->B * e->S > (1 << 20))
            return snprintf(err, el, "input %s has shape [%lld, %lld]; inputs must share one [batch, seq] shape", t->name,
                            (long long)t->dims[0], (long long)t->dims[1]), -1;
        e->in[i] = xcalloc((size_t)e->B * e->S, sizeof(int64_t), &oom);
        for (int64_t j = 0; !oom && j < (int64_t)e->B * e->S; j++)
            e->in[i][j] = t->dtype == FTNS_I64 ? ((const int64_t *)t->data)[j] : ((const int32_t *)t->data)[j];
    }
    if (p->n_inputs == 0) return snprintf(err, el, "plan has no inputs"), -1;
    e->T = e->B * e->S;
    for (uint32_t i = 0; i < p->n_ops; i++) /* fallback ops were sized for one [batch, seq] */
        if (p->ops[i].kind == FK_OP_GENERIC) {
            int b, s;
            fk_generic_bound(p, &p->ops[i], &b, &s);
            if (b != e->B || s != e->S)
                return snprintf(err, el, "op %s: the plan was built for batch %d x seq %d (its fallback ops bind shapes), "
                                "the inputs are %d x %d: rebuild the plan for this shape (--batch/--seq)",
                                p->ops[i].name, b, s, e->B, e->S), -1;
        }
    /* Every index an op will use is checked here, so a bad id is an error, not a wild read. */
    size_t qa = 0, tmp = 0, scores = 0;
    int rel = 0;
    for (uint32_t i = 0; i < p->n_ops; i++) {
        const fk_op *op = &p->ops[i];
        if (op->kind == FK_OP_EMBED)
            for (int j = 0; j < 4; j++) {
                if (op->t[j] < 0) continue;
                int64_t rows = p->tensors[op->t[j]].dims[0];
                if (op->p[j] == FK_SRC_POSITION && e->S > rows)
                    return snprintf(err, el, "op %s: sequence length %d exceeds the %lld positions of the model", op->name, e->S, (long long)rows), -1;
                for (int t = 0; op->p[j + 4] > 0 && !oom && t < e->T; t++) {
                    const int64_t r = pad_position(e, op->p[j], op->p[j + 4] - 1, t);
                    if (r < 0 || r >= rows)
                        return snprintf(err, el, "op %s: position id %lld of input %s is outside the %lld positions of the model",
                                        op->name, (long long)r, p->inputs[op->p[j]].name, (long long)rows), -1;
                }
                for (int64_t t = 0; op->p[j] >= 0 && op->p[j + 4] == 0 && !oom && t < e->T; t++)
                    if (e->in[op->p[j]][t] < 0 || e->in[op->p[j]][t] >= rows)
                        return snprintf(err, el, "op %s: input %s holds index %lld outside [0, %lld)", op->name,
                                        p->inputs[op->p[j]].name, (long long)e->in[op->p[j]][t], (long long)rows), -1;
            }
        if (op->kind == FK_OP_FC) {
            size_t K = (size_t)op->p[2], N = (size_t)op->p[1];
            size_t q = op->p[0] == FK_W_I8 ? (size_t)FK_K4(K) : op->p[0] == FK_W_Q4_0 ? K / FK_QK * sizeof(fk_block_q8_0) : 0;
            if (q > qa) qa = q;
            if (N > tmp) tmp = N;
        }
        if ((op->kind == FK_OP_LAYERNORM || op->kind == FK_OP_NONORM) && p->bufs[op->out].cols > tmp) tmp = p->bufs[op->out].cols;
        if (op->kind == FK_OP_TRIGRAM) {
            const int64_t rows = p->tensors[op->t[0]].dims[0];
            for (int64_t t = 0; t < e->T; t++)
                if (e->in[op->p[0]][t] < 0 || e->in[op->p[0]][t] >= rows)
                    return snprintf(err, el, "op %s: input %s holds index %lld outside [0, %lld)", op->name,
                                    p->inputs[op->p[0]].name, (long long)e->in[op->p[0]][t], (long long)rows), -1;
        }
        if (op->kind == FK_OP_ATTENTION && (size_t)op->p[0] > scores) scores = (size_t)op->p[0];
        if (op->kind == FK_OP_ATTENTION && op->t[0] >= 0 && p->tensors[op->t[0]].dims[1] != e->S)
            return snprintf(err, el, "op %s: the attention bias was computed for seq %lld, the inputs have %d: rebuild "
                            "the plan for this shape (--seq)", op->name, (long long)p->tensors[op->t[0]].dims[1], e->S), -1;
        for (int r = 2; op->kind == FK_OP_ATTENTION && r <= 4; r += 2)
            if (op->t[r] >= 0 && p->tensors[op->t[r]].dims[0] != e->S)
                return snprintf(err, el, "op %s: the relative positions were computed for seq %lld, the inputs have %d: "
                                "rebuild the plan for this shape (--seq)", op->name, (long long)p->tensors[op->t[r]].dims[0], e->S), -1;
        if (op->kind == FK_OP_ATTENTION && (op->t[1] >= 0 || op->t[3] >= 0)) rel = 1;
        if (op->kind == FK_OP_ROW && (op->p[0] >= e->S || op->p[0] < -e->S))
            return snprintf(err, el, "op %s: row %d is outside a sequence of %d tokens", op->name, op->p[0], e->S), -1;
    }
    size_t gen_pack = 0;
    for (uint32_t i = 0; i < p->n_ops; i++)
        if (p->ops[i].kind == FK_OP_GENERIC && fk_generic_scratch(p, &p->ops[i]) > gen_pack)
            gen_pack = fk_generic_scratch(p, &p->ops[i]);
    if (gen_pack) e->gen_pack = xcalloc(gen_pack, sizeof(float), &oom);
    e->buf = xcalloc(p->n_bufs, sizeof(float *), &oom);
    for (uint32_t i = 0; i < p->n_bufs && !oom; i++) e->buf[i] = xcalloc((size_t)rows_(e, (int)i) * p->bufs[i].cols, sizeof(float), &oom);
    e->qa_stride = (qa + QA_ALIGN - 1) / QA_ALIGN * QA_ALIGN;
    e->qa = xcalloc((size_t)e->T, e->qa_stride ? e->qa_stride : 1, &oom);
    e->qscale = xcalloc((size_t)e->T, sizeof(float), &oom);
    e->mask = xcalloc((size_t)e->T, sizeof(float), &oom);
    if (!fused) {
        e->tmp1 = xcalloc((size_t)e->T * tmp, sizeof(float), &oom);
        e->tmp2 = xcalloc((size_t)e->T * tmp, sizeof(float), &oom);
        e->scores = xcalloc((size_t)e->B * scores * e->S * e->S, sizeof(float), &oom);
    }
    if (fused) { /* per thread, per op of the longest segment: profiled times */
        uint32_t run = 0;
        for (uint32_t i = 0; i < p->n_ops; i++) {
            run = row_local(e, &p->ops[i]) ? run + 1 : 0;
            if ((int)run > e->seg_max) e->seg_max = (int)run;
        }
        e->seg_ms = xcalloc((size_t)fk_pool_size(pool) * (size_t)(e->seg_max ? e->seg_max : 1), sizeof(double), &oom);
    }
    e->scratch = xcalloc((size_t)fk_pool_size(pool), sizeof(float *), &oom);
    for (int i = 0; i < fk_pool_size(pool) && !oom; i++) e->scratch[i] = xcalloc((size_t)e->S, sizeof(float), &oom);
    if (rel && fused) { /* per thread: the relative terms of a task's rows (at most S of them) */
        e->relb = xcalloc((size_t)fk_pool_size(pool), sizeof(float *), &oom);
        for (int i = 0; i < fk_pool_size(pool) && !oom; i++) e->relb[i] = xcalloc((size_t)e->S * e->S, sizeof(float), &oom);
    }
    if (oom) return snprintf(err, el, "out of memory allocating activations for batch %d x seq %d", e->B, e->S), -1;
    return 0;
}

uint32_t fk_exec_outputs(const fk_exec *e, ftns_tensor *out, uint32_t max) {
    uint32_t n = 0;
    for (uint32_t i = 0; i < e->plan->n_outputs && n < max; i++, n++) {
        const fk_plan_output *po = &e->plan->outputs[i];
        ftns_tensor *t = &out[n];
        memset(t, 0, sizeof *t);
        snprintf(t->name, sizeof t->name, "%s", po->name);
        const int64_t cols = e->plan->bufs[po->buf].cols;
        t->dtype = FTNS_F32;
        if (e->plan->bufs[po->buf].rows == FK_BUF_FLAT) /* a fallback tensor: its shape is the plan's */
            t->ndim = 1, t->dims[0] = cols, t->nbytes = (uint64_t)cols * 4;
        else if (e->plan->bufs[po->buf].rows == FK_BUF_SEQS) /* [B, cols]: the pooler's output */
            t->ndim = 2, t->dims[0] = e->B, t->dims[1] = cols, t->nbytes = (uint64_t)e->B * cols * 4;
        else
            t->ndim = 3, t->dims[0] = e->B, t->dims[1] = e->S, t->dims[2] = cols, t->nbytes = (uint64_t)e->T * cols * 4;
        t->data = e->buf[po->buf];
    }
    return n;
}

void fk_exec_free(fk_exec *e) {
    const fk_plan *p = e->plan;
    if (!p) return;
    for (uint32_t i = 0; e->in && i < p->n_inputs; i++) free(e->in[i]);
    for (uint32_t i = 0; e->buf && i < p->n_bufs; i++) free(e->buf[i]);
    for (int i = 0; e->scratch && i < fk_pool_size(e->pool); i++) free(e->scratch[i]);
    for (int i = 0; e->relb && i < fk_pool_size(e->pool); i++) free(e->relb[i]);
    free(e->relb);
    free(e->in), free(e->buf), free(e->scratch), free(e->qa), free(e->qscale), free(e->mask);
    free(e->tmp1), free(e->tmp2), free(e->scores), free(e->seg_ms), free(e->gen_pack);
    memset(e, 0, sizeof *e);
}
