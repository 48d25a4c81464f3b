/* Plan files: what farm.routes.custom writes and the executor runs. Keep in step with
 * farm/routes/custom/plan_format.py (same constants, same record layouts).
 *
 * Layout (little-endian), version 1:
 *   header (64 B): "FKPLAN\0\0", u32 version, u32 header_size, u64 file_size,
 *                  u64 required CPU features (FK_FEAT_* bits), u32 crc32 (zlib) of bytes
 *                  [64, file_size), u32 n_inputs, n_outputs, n_bufs, n_tensors, n_ops, 2 x u32 0
 *   inputs  n_inputs  x {char name[48]; u32 role; u32 pad}
 *   outputs n_outputs x {char name[48]; u32 buf; u32 pad}
 *   bufs    n_bufs    x {u32 cols; u32 rows}   activations [rows][cols] f32; rows FK_BUF_*:
 *                  one per token (B*S, 0: what plans before the pooler wrote in the pad)
 *                  or one per sequence (B: BERT's pooler) or one (2: a fallback op's tensor
 *                  of any shape, cols its elements)
 *   tensors n_tensors x {u64 offset; u64 nbytes; u32 dtype; u32 ndim; i64 dims[4]}
 *   ops     n_ops     x fk_op (176 B)
 *   data    tensors at 64-byte aligned offsets, in the layout the kernels want. */
#ifndef FK_PLAN_H
#define FK_PLAN_H

#include <stddef.h>
#include <stdint.h>

#define FK_PLAN_MAGIC "FKPLAN\0\0"
#define FK_PLAN_VERSION 1
#define FK_PLAN_HEADER 64
#define FK_NAME 48

enum fk_op_kind {
    FK_OP_EMBED = 1,     /* out = (in0 +) sum of table rows; t[i] table, p[i] source (see
                            below); in0, if >= 0, is a base activation (MobileBERT's
                            transformed trigram embedding)                                 */
    FK_OP_LAYERNORM = 2, /* out = LN(in0 (+ in1)) * t0 + t1, eps f0                       */
    FK_OP_FC = 3,        /* out = act(in0 . t0 + t1); p0 wtype, p1 N, p2 K, p3 act; t2 wscale;
                            p4 groups (> 1: fp32 grouped FC, t0 each group's packed [K/G, N/G]) */
    FK_OP_GELU = 4,      /* out = gelu(in0); p0 FK_GELU_* (erf, table, tanh = gelu_new)      */
    FK_OP_ADD = 5,       /* out = in0 + in1                                                */
    FK_OP_ATTENTION = 6, /* out = attention(in0 q, in1 k, in2 v); p0 heads, p1 head_dim,
                            p2/p3/p4 column offsets of q/k/v, p5 mask input or -1,
                            f0 scale, f1/f2 additive mask for mask value 0/1; t0 (optional)
                            a bias [heads, S, S] added to the scaled scores (MPNet);
                            t1/t2, t3/t4 (optional, DeBERTa) the content-to-position and
                            position-to-content terms: a table [heads, D, R] and int32
                            indices [S, S] each (fk_gmm_args), added to the scaled scores;
                            p6 = 1: the mask is m_i * m_j, a padded query row averages V   */
    FK_OP_NONORM = 7,    /* out = (in0 (+ in1)) * t0 + t1: MobileBERT's NoNorm after a residual */
    FK_OP_TRIGRAM = 8,   /* out[t] = concat_j t0[ids[t + p(2+j)]], a zero row where t + p(2+j) is
                            outside the sequence; p0 ids input slot, p1 parts (1..6): the
                            trigram input [i+1, i, i-1] is parts 3, offsets +1, 0, -1      */
    FK_OP_ROW = 9,       /* out[b] = in0[b, pos] (one row per sequence: BERT's pooler reads [CLS]);
                            p0 pos, negative counts from the end of the sequence            */
    FK_OP_GENERIC = 10,  /* the generic fallback: one plain kernel of an ONNX op, shapes bound at
                            build time (runtime/generic.h)                                  */
    FK_OP_MAX = 10
};
/* EMBED sources p[i]: >= 0 input slot (int64 ids), -1 token position s, <= -2 fixed row -(p+2).
 * p[4 + i] > 0 (pad + 1): term i reads RoBERTa's position ids of input slot p[i] instead,
 * row = pad for a padding token, else pad + (non-pad tokens of its sequence up to it).        */
#define FK_SRC_POSITION (-1)
enum fk_wtype { FK_W_F32 = 0, FK_W_I8 = 1, FK_W_Q4_0 = 2 };
enum fk_act { FK_ACT_NONE = 0, FK_ACT_GELU = 1, FK_ACT_GELU_TAB = 2, FK_ACT_RELU = 3, FK_ACT_TANH = 4,
              FK_ACT_GELU_TANH = 5 }; /* TANH, GELU_TANH: a row pass after the GEMM's bias epilogue */
enum fk_buf_rows { FK_BUF_TOKENS = 0, FK_BUF_SEQS = 1, FK_BUF_FLAT = 2 }; /* FLAT: one row of cols (a fallback tensor) */
enum fk_gelu_mode { FK_GELU_ERF = 0, FK_GELU_TABLE = 1, FK_GELU_TANH = 2 }; /* FK_OP_GELU's p0 */
enum fk_role { FK_ROLE_IDS = 0, FK_ROLE_MASK = 1, FK_ROLE_TYPE = 2, FK_ROLE_OTHER = 3 };
enum fk_dtype { FK_DT_F32 = 0, FK_DT_I64 = 1, FK_DT_I32 = 2, FK_DT_I8 = 3, FK_DT_U8 = 4 };

#pragma pack(push, 1)
typedef struct {
    char name[FK_NAME];
    uint32_t role, pad;
} fk_plan_input;
typedef struct {
    char name[FK_NAME];
    uint32_t buf, pad;
} fk_plan_output;
typedef struct {
    uint32_t cols, rows; /* rows: FK_BUF_TOKENS or FK_BUF_SEQS */
} fk_plan_buf;
typedef struct {
    uint64_t offset, nbytes;
    uint32_t dtype, ndim;
    int64_t dims[4];
} fk_plan_tensor;
typedef struct {
    uint32_t kind, flags;
    char name[64];
    int32_t in[4];
    int32_t out;
    int32_t t[8];
    int32_t p[8];
    float f[4];
    uint32_t pad;
} fk_op;
#pragma pack(pop)

typedef struct {
    uint8_t *base; /* whole file, 64-byte aligned */
    size_t size;
    uint64_t features;
    uint32_t n_inputs, n_outputs, n_bufs, n_tensors, n_ops;
    const fk_plan_input *inputs;
    const fk_plan_output *outputs;
    const fk_plan_buf *bufs;
    const fk_plan_tensor *tensors;
    const fk_op *ops;
} fk_plan;

/* Loads and fully validates a plan; on failure returns -1 with a message in err. */
int fk_plan_load(const char *path, fk_plan *plan, char *err, size_t errlen);
void fk_plan_free(fk_plan *plan);
const void *fk_plan_data(const fk_plan *plan, int tensor);
uint32_t fk_crc32(const uint8_t *p, size_t n);
const char *fk_op_category(const fk_op *op);
const char *fk_op_kind_name(uint32_t kind);

#endif
