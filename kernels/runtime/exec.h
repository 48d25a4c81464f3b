/* Runs a validated plan on one input set. Fused mode runs each plan op as one kernel call
 * (GEMM with its bias/GELU epilogue, LayerNorm with its residual, attention per head without
 * the score matrix), and the row-local ops between two attentions as one pool job (a
 * segment: each thread takes its token rows through all of them; exec.c). Unfused mode runs the same plan as separate steps with every
 * intermediate materialised (GEMM, bias add, GELU; Add then LayerNorm; QK^T into a full
 * [B,H,S,S] score tensor, scale, mask, softmax, .V), for the fusion experiment. */
#ifndef FK_EXEC_H
#define FK_EXEC_H

#include <stddef.h>
#include <stdint.h>

#include "fk.h"
#include "ftns.h"
#include "plan.h"
#include "pool.h"

#define FK_PROF_MAX 4096

typedef struct {
    int n;        /* steps recorded in the last run */
    int runs;     /* runs accumulated */
    char name[FK_PROF_MAX][80];
    const char *op[FK_PROF_MAX];
    const char *cat[FK_PROF_MAX];
    double ms[FK_PROF_MAX];
} fk_prof;

typedef struct {
    const fk_plan *plan;
    const fk_kernels *k;
    fk_pool *pool;
    int fused;
    int B, S, T;
    int64_t **in;     /* per plan input: B*S ids (NULL if absent) */
    float **buf;      /* per plan buffer: T x cols */
    float *mask;      /* B*S additive mask, rebuilt per attention op */
    void *qa;         /* quantised activations, row t at t * qa_stride bytes */
    size_t qa_stride;
    float *qscale;
    float *tmp1, *tmp2, *scores;
    float **scratch;  /* per thread, S floats */
    float **relb;     /* fused, relative attention terms: per thread, S x S floats */
    double *seg_ms;   /* fused: per thread x seg_max, each op's profiled time in a segment */
    int seg_max;      /* ops in the longest segment */
    float *gen_pack;  /* fallback MatMuls: the right operand packed for the GEMM kernel */
    fk_prof *prof;    /* non-NULL while profiling */
    double t_mark;
} fk_exec;

int fk_exec_init(fk_exec *e, const fk_plan *plan, const fk_kernels *k, fk_pool *pool, int fused,
                 const ftns_file *inputs, char *err, size_t errlen);
void fk_exec_run(fk_exec *e, fk_prof *prof);
void fk_exec_free(fk_exec *e);
/* Borrowed views of the plan outputs as FTNS tensors [B, S, cols], or [B, cols] for a
 * per-sequence buffer (data points into e). */
uint32_t fk_exec_outputs(const fk_exec *e, ftns_tensor *out, uint32_t max);
double fk_now_ms(void);

#endif
