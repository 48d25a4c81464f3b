/* The executor's generic fallback (FK_OP_GENERIC): one plain kernel per ONNX op family for
 * the ops the fused patterns do not cover (masks, relative-position gathers, grouped
 * convolutions, heads the lowering does not know). Shapes are bound when the plan is built
 * (the plan is then valid for one [batch, seq] only, checked at init): the op's meta
 * tensor (t0, int64) starts with the bound batch and seq, then the kind's own layout, see
 * generic.c. Values are f32; integer and boolean tensors (ids, positions, masks) are held
 * exactly as floats below 2^24, and integer Div/Cast truncate as ONNX does.
 *
 * Operands: operand i is buffer in[i] when in[i] >= 0, else constant tensor t[1 + i] (f32),
 * else absent. p0 the kind (FK_GEN_*), p1 the function or mode, p2 flags (FK_GEN_INT: the
 * result is an integer tensor), f0/f1 constants (fill value, clip bounds). */
#ifndef FK_GENERIC_H
#define FK_GENERIC_H

#include <stddef.h>

#include "exec.h"

enum fk_gen_kind {
    FK_GEN_EW = 0,      /* elementwise, broadcast over the output: unary, binary, Where, Clip */
    FK_GEN_COPY = 1,    /* strided copy: Transpose, Slice, Expand, Tile, Reshape, Concat, Pad */
    FK_GEN_GATHER = 2,  /* Gather (p1 0) and GatherElements (p1 1) */
    FK_GEN_MATMUL = 3,  /* batched MatMul with broadcast batch dims */
    FK_GEN_SOFTMAX = 4, /* Softmax (p1 0) / LogSoftmax (p1 1) over one axis */
    FK_GEN_REDUCE = 5,  /* Reduce* over any axes */
    FK_GEN_CONV = 6,    /* Conv 1-D/2-D with groups, strides, pads, dilations */
    FK_GEN_CUMSUM = 7,  /* CumSum over one axis; p1 bit0 exclusive, bit1 reverse */
    FK_GEN_RANGE = 8,   /* Range: start operand 0, delta operand 1 */
    FK_GEN_INPUT = 9,   /* an int input (slot p1) as f32 */
    FK_GEN_MAX = 9
};

enum fk_gen_fn {
    /* unary */
    FK_F_IDENTITY = 0, FK_F_NEG, FK_F_ABS, FK_F_SQRT, FK_F_EXP, FK_F_LOG, FK_F_ERF, FK_F_TANH, FK_F_SIGMOID,
    FK_F_RELU, FK_F_NOT, FK_F_SIGN, FK_F_CEIL, FK_F_FLOOR, FK_F_ROUND, FK_F_RECIP, FK_F_TRUNC, FK_F_BOOL,
    FK_F_CLIP, FK_F_GELU, FK_F_SOFTPLUS, FK_F_SIN, FK_F_COS, FK_F_ISNAN, FK_F_ISINF,
    /* binary */
    FK_F_ADD = 32, FK_F_SUB, FK_F_MUL, FK_F_DIV, FK_F_POW, FK_F_MIN, FK_F_MAX, FK_F_EQUAL, FK_F_LESS,
    FK_F_GREATER, FK_F_LESS_EQ, FK_F_GREATER_EQ, FK_F_AND, FK_F_OR, FK_F_XOR, FK_F_MOD, FK_F_FMOD,
    /* ternary */
    FK_F_WHERE = 64
};

#define FK_GEN_INT 1 /* p2 flag: integer result (Div truncates) */
#define FK_GEN_RANK 8

/* Validates meta and operand sizes against the plan's buffers (plan load). */
int fk_generic_check(const fk_plan *p, const fk_op *op, char *err, size_t errlen);
/* The bound [batch, seq] of a generic op (init compares them with the inputs). */
void fk_generic_bound(const fk_plan *p, const fk_op *op, int *B, int *S);
void fk_generic_run(fk_exec *e, const fk_op *op);
/* Floats of packing scratch the op needs (its MatMul's right operand, packed for the kernel
 * table's GEMM); the executor allocates the largest once (fk_exec.gen_pack). */
size_t fk_generic_scratch(const fk_plan *p, const fk_op *op);
/* The ONNX-level name of what the op ran, for the profile. */
const char *fk_generic_name(const fk_op *op);

#endif
