/* Plan loading and validation. Everything an op will index (buffers, tensors, inputs, sizes)
 * is checked here, once, so a corrupt or truncated plan is an error message, never a crash. */
#include "plan.h"

#include <sys/mman.h>

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fk.h"
#include "generic.h"

static uint32_t crc_tab[8][256];

uint32_t fk_crc32(const uint8_t *p, size_t n) {
    if (!crc_tab[0][1]) {
        for (uint32_t i = 0; i < 256; i++) {
            uint32_t c = i;
            for (int k = 0; k < 8; k++) c = c & 1 ? 0xEDB88320u ^ (c >> 1) : c >> 1;
            crc_tab[0][i] = c;
        }
        for (uint32_t i = 0; i < 256; i++)
            for (int t = 1; t < 8; t++) crc_tab[t][i] = (crc_tab[t - 1][i] >> 8) ^ crc_tab[0][crc_tab[t - 1][i] & 0xFF];
    }
    uint32_t c = 0xFFFFFFFFu;
    while (n >= 8) { /* slicing-by-8: about 1 GB/s, so checking a plan costs little */
        uint32_t lo, hi;
        memcpy(&lo, p, 4), memcpy(&hi, p + 4, 4);
        lo ^= c;
        c = crc_tab[7][lo & 0xFF] ^ crc_tab[6][(lo >> 8) & 0xFF] ^ crc_tab[5][(lo >> 16) & 0xFF] ^
            crc_tab[4][lo >> 24] ^ crc_tab[3][hi & 0xFF] ^ crc_tab[2][(hi >> 8) & 0xFF] ^
            crc_tab[1][(hi >> 16) & 0xFF] ^ crc_tab[0][hi >> 24];
        p += 8, n -= 8;
    }
    while (n--) c = crc_tab[0][(c ^ *p++) & 0xFF] ^ (c >> 8);
    return c ^ 0xFFFFFFFFu;
}

const char *fk_op_kind_name(uint32_t kind) {
    static const char *names[] = {"?", "Embed", "LayerNorm", "FC", "Gelu", "Add", "Attention", "NoNorm", "Trigram", "Row", "Fallback"};
    return kind <= FK_OP_MAX ? names[kind] : "?";
}

const char *fk_op_category(const fk_op *op) {
    switch (op->kind) {
    case FK_OP_LAYERNORM: return "layernorm";
    case FK_OP_NONORM: return "layernorm"; /* the normalisation MobileBERT has instead */
    case FK_OP_FC: return "fc"; /* a fused bias+GELU epilogue is counted with its GEMM */
    case FK_OP_GELU: return "gelu";
    case FK_OP_ATTENTION: return "attention";
    case FK_OP_GENERIC: return "fallback";
    default: return "other";
    }
}

static int fail(char *err, size_t errlen, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, errlen, fmt, ap);
    va_end(ap);
    return -1;
}

/* Formats the message first, then frees the plan (the message may use plan fields). */
static int fail_free(fk_plan *p, char *err, size_t errlen, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, errlen, fmt, ap);
    va_end(ap);
    fk_plan_free(p);
    return -1;
}

static uint64_t tensor_elems(const fk_plan_tensor *t) {
    uint64_t n = 1;
    for (uint32_t d = 0; d < t->ndim; d++) n *= (uint64_t)t->dims[d];
    return n;
}

/* Tensor id must be valid, of dtype dt, and hold exactly `bytes` bytes (0 = any). */
static int want_tensor(const fk_plan *p, int id, uint32_t dt, uint64_t bytes) {
    if (id < 0 || (uint32_t)id >= p->n_tensors) return 0;
    const fk_plan_tensor *t = &p->tensors[id];
    return t->dtype == dt && (bytes == 0 || t->nbytes == bytes);
}

static int check_op(const fk_plan *p, const fk_op *op, char *err, size_t el) {
    const char *nm = op->name;
    if (op->kind < 1 || op->kind > FK_OP_MAX) return fail(err, el, "op %s: unknown kind %u", nm, op->kind);
    if (op->out < 0 || (uint32_t)op->out >= p->n_bufs) return fail(err, el, "op %s: bad output buffer", nm);
    for (int i = 0; i < 4; i++)
        if (op->in[i] < -1 || op->in[i] >= (int32_t)p->n_bufs) return fail(err, el, "op %s: bad input buffer", nm);
    for (int i = 0; i < 8; i++)
        if (op->t[i] < -1 || op->t[i] >= (int32_t)p->n_tensors) return fail(err, el, "op %s: bad tensor id", nm);
    const uint32_t oc = p->bufs[op->out].cols, orows = p->bufs[op->out].rows;
    /* a fallback op reads and writes any row kind: its meta gives the elements (generic.c) */
    if (op->kind == FK_OP_GENERIC) return fk_generic_check(p, op, err, el);
    for (int i = 0; i < 4; i++)
        if ((op->in[i] >= 0 && p->bufs[op->in[i]].rows == FK_BUF_FLAT) || orows == FK_BUF_FLAT)
            return fail(err, el, "op %s: %s reads or writes a fallback tensor", nm, fk_op_kind_name(op->kind));
#define IN_COLS(i) (op->in[i] >= 0 ? p->bufs[op->in[i]].cols : 0u)
    /* Row kinds: only Row turns token rows into sequence rows; every other op keeps its
     * inputs' kind, and the ops that index tokens (embeddings, attention) need token rows. */
    for (int i = 0; i < 4; i++)
        if (op->in[i] >= 0 && op->kind != FK_OP_ROW && p->bufs[op->in[i]].rows != orows)
            return fail(err, el, "op %s: input %d and output rows differ (per token vs per sequence)", nm, i);
    if (orows != FK_BUF_TOKENS && op->kind != FK_OP_ROW && op->kind != FK_OP_FC && op->kind != FK_OP_ADD &&
        op->kind != FK_OP_GELU && op->kind != FK_OP_LAYERNORM && op->kind != FK_OP_NONORM)
        return fail(err, el, "op %s: %s needs per-token rows", nm, fk_op_kind_name(op->kind));
    switch (op->kind) {
    case FK_OP_ROW:
        if (op->in[0] < 0 || op->in[0] == op->out || IN_COLS(0) != oc || p->bufs[op->in[0]].rows != FK_BUF_TOKENS ||
            orows != FK_BUF_SEQS)
            return fail(err, el, "op %s: Row needs a per-token input and a per-sequence output of %u columns", nm, oc);
        return 0;
    case FK_OP_EMBED:
        for (int i = 0; i < 4; i++) {
            if (op->t[i] < 0) continue;
            const fk_plan_tensor *t = &p->tensors[op->t[i]];
            if (t->dtype != FK_DT_F32 || t->ndim != 2 || t->dims[1] != oc)
                return fail(err, el, "op %s: embedding table %d is not f32 [rows, %u]", nm, i, oc);
            if (op->p[i] >= (int32_t)p->n_inputs || (op->p[i] <= -2 && -(op->p[i] + 2) >= t->dims[0]) ||
                op->p[4 + i] < 0 || (op->p[4 + i] > 0 && (op->p[i] < 0 || op->p[4 + i] > t->dims[0])))
                return fail(err, el, "op %s: bad index source %d (positions mode %d)", nm, op->p[i], op->p[4 + i]);
        }
        if (op->t[0] < 0) return fail(err, el, "op %s: no embedding table", nm);
        if (op->in[0] >= 0 && (op->in[0] == op->out || IN_COLS(0) != oc))
            return fail(err, el, "op %s: base activation does not have %u columns", nm, oc);
        return 0;
    case FK_OP_NONORM:
        if (op->in[0] < 0 || IN_COLS(0) != oc || (op->in[1] >= 0 && IN_COLS(1) != oc) ||
            !want_tensor(p, op->t[0], FK_DT_F32, 4ull * oc) || !want_tensor(p, op->t[1], FK_DT_F32, 4ull * oc))
            return fail(err, el, "op %s: NoNorm shapes do not agree (%u columns)", nm, oc);
        return 0;
    case FK_OP_TRIGRAM: {
        const fk_plan_tensor *t = op->t[0] >= 0 ? &p->tensors[op->t[0]] : NULL;
        if (!t || t->dtype != FK_DT_F32 || t->ndim != 2 || op->p[1] < 1 || op->p[1] > 6 ||
            (uint64_t)t->dims[1] * (uint64_t)op->p[1] != oc || op->p[0] < 0 || op->p[0] >= (int32_t)p->n_inputs)
            return fail(err, el, "op %s: Trigram table, parts or ids input do not agree (%u columns)", nm, oc);
        return 0;
    }
    case FK_OP_LAYERNORM:
        if (op->in[0] < 0 || IN_COLS(0) != oc || (op->in[1] >= 0 && IN_COLS(1) != oc) ||
            !want_tensor(p, op->t[0], FK_DT_F32, 4ull * oc) || !want_tensor(p, op->t[1], FK_DT_F32, 4ull * oc))
            return fail(err, el, "op %s: LayerNorm shapes do not agree (%u columns)", nm, oc);
        return 0;
    case FK_OP_FC: {
        const uint32_t N = (uint32_t)op->p[1], K = (uint32_t)op->p[2];
        if (op->in[0] < 0 || op->in[0] == op->out || N != oc || K != IN_COLS(0) || K == 0 || N == 0)
            return fail(err, el, "op %s: FC shapes do not agree (N=%u K=%u)", nm, N, K);
        if (op->t[1] >= 0 && !want_tensor(p, op->t[1], FK_DT_F32, 4ull * N))
            return fail(err, el, "op %s: bias is not f32 [%u]", nm, N);
        if (op->p[3] < 0 || op->p[3] > FK_ACT_GELU_TANH) return fail(err, el, "op %s: bad activation %d", nm, op->p[3]);
        /* a residual epilogue (a NoNorm folded in): + in[1] * t[3] after the bias, no activation */
        if (op->in[1] >= 0 && (op->in[1] == op->out || IN_COLS(1) != oc || op->p[3] != FK_ACT_NONE ||
                               !want_tensor(p, op->t[3], FK_DT_F32, 4ull * N)))
            return fail(err, el, "op %s: residual input must be another buffer of %u columns with an f32 [%u] scale "
                        "and no activation", nm, N, N);
        int ok;
        const int32_t G = op->p[4];
        if (G > 1) /* grouped: fp32 only, whole panels per group (exec.c fc_gemm) */
            ok = op->p[0] == FK_W_F32 && K % (uint32_t)G == 0 && N % (uint32_t)G == 0 && (N / G) % FK_NR == 0 &&
                 want_tensor(p, op->t[0], FK_DT_F32, 4ull * G * fk_packed_b_f32_size((int)(K / G), (int)(N / G)));
        else if (G < 0) ok = 0;
        else if (op->p[0] == FK_W_F32) ok = want_tensor(p, op->t[0], FK_DT_F32, 4ull * fk_packed_b_f32_size(K, N));
        else if (op->p[0] == FK_W_I8)
            ok = want_tensor(p, op->t[0], FK_DT_I8, fk_packed_b_i8_size((int)K, (int)N)) &&
                 want_tensor(p, op->t[2], FK_DT_F32, 4ull * N);
        else if (op->p[0] == FK_W_Q4_0)
            ok = K % FK_QK == 0 && want_tensor(p, op->t[0], FK_DT_U8, fk_packed_b_q4_0_size((int)K, (int)N));
        else ok = 0;
        return ok ? 0 : fail(err, el, "op %s: weights do not match type %d, N=%u, K=%u", nm, op->p[0], N, K);
    }
    case FK_OP_GELU:
        if (op->in[0] < 0 || IN_COLS(0) != oc || op->p[0] < 0 || op->p[0] > FK_GELU_TANH)
            return fail(err, el, "op %s: bad Gelu", nm);
        return 0;
    case FK_OP_ADD:
        if (op->in[0] < 0 || op->in[1] < 0 || IN_COLS(0) != oc || IN_COLS(1) != oc)
            return fail(err, el, "op %s: Add shapes do not agree", nm);
        return 0;
    case FK_OP_ATTENTION: {
        const int32_t H = op->p[0], D = op->p[1];
        if (H <= 0 || D <= 0 || (int64_t)H * D != oc || op->p[5] < -1 || op->p[5] >= (int32_t)p->n_inputs)
            return fail(err, el, "op %s: bad attention heads/mask", nm);
        if (op->t[0] >= 0 && (p->tensors[op->t[0]].dtype != FK_DT_F32 || p->tensors[op->t[0]].ndim != 3 ||
                              p->tensors[op->t[0]].dims[0] != H || p->tensors[op->t[0]].dims[1] != p->tensors[op->t[0]].dims[2]))
            return fail(err, el, "op %s: attention bias is not f32 [%d, S, S]", nm, H);
        /* DeBERTa's relative terms: t1/t3 a table [H, D, R] (B of the gathered product),
         * t2/t4 its indices [S, S] int32, each in [0, R): checked here, so no read is wild */
        for (int r = 1; r <= 3; r += 2) {
            if ((op->t[r] >= 0) != (op->t[r + 1] >= 0))
                return fail(err, el, "op %s: relative term %d needs a table and its indices", nm, r / 2);
            if (op->t[r] < 0) continue;
            const fk_plan_tensor *tb = &p->tensors[op->t[r]], *ti = &p->tensors[op->t[r + 1]];
            if (tb->dtype != FK_DT_F32 || tb->ndim != 3 || tb->dims[0] != H || tb->dims[1] != D ||
                ti->dtype != FK_DT_I32 || ti->ndim != 2 || ti->dims[0] != ti->dims[1])
                return fail(err, el, "op %s: relative term %d is not an f32 [%d, %d, R] table with int32 [S, S] "
                            "indices", nm, r / 2, H, D);
            const int32_t *ix = fk_plan_data(p, op->t[r + 1]);
            for (int64_t i = 0; i < ti->dims[0] * ti->dims[1]; i++)
                if (ix[i] < 0 || ix[i] >= tb->dims[2])
                    return fail(err, el, "op %s: relative index %d outside the table's %lld rows", nm, ix[i],
                                (long long)tb->dims[2]);
        }
        if (op->p[6] != 0 && (op->p[6] != 1 || op->p[5] < 0))
            return fail(err, el, "op %s: a query-row mask (p6) needs the mask input", nm);
        for (int i = 0; i < 3; i++)
            if (op->in[i] < 0 || op->in[i] == op->out || op->p[2 + i] < 0 ||
                (uint64_t)op->p[2 + i] + (uint64_t)H * D > IN_COLS(i))
                return fail(err, el, "op %s: q/k/v input %d too narrow for %d heads x %d", nm, i, H, D);
        return 0;
    }
    }
#undef IN_COLS
    return 0;
}

int fk_plan_load(const char *path, fk_plan *p, char *err, size_t el) {
    memset(p, 0, sizeof *p);
    FILE *fp = fopen(path, "rb");
    if (!fp) return fail(err, el, "cannot open plan %s", path);
    fseek(fp, 0, SEEK_END);
    long sz = ftell(fp);
    fseek(fp, 0, SEEK_SET);
    if (sz < FK_PLAN_HEADER) {
        fclose(fp);
        return fail(err, el, "plan %s is truncated (%ld bytes, header needs %d)", path, sz, FK_PLAN_HEADER);
    }
    /* 2 MB-aligned and, where Linux offers it, on transparent huge pages: the weights are
     * read once per inference from L3/DRAM, and with 4 KB pages every 32 KB weight block
     * costs page walks (measured: fp32 GEMMs on cold weights 5 % faster with huge pages) */
    const size_t huge = (size_t)2 << 20, rounded = ((size_t)sz + huge - 1) / huge * huge;
    if (posix_memalign((void **)&p->base, huge, rounded) != 0) {
        fclose(fp);
        return fail(err, el, "out of memory loading plan %s (%ld bytes)", path, sz);
    }
#ifdef MADV_HUGEPAGE
    madvise(p->base, rounded, MADV_HUGEPAGE); /* advice only: refused, the plan still loads */
#endif
    p->size = (size_t)sz;
    size_t got = fread(p->base, 1, p->size, fp);
    fclose(fp);
    if (got != p->size) return fail_free(p, err, el, "short read on plan %s", path);
    const uint8_t *h = p->base;
    uint32_t version, hsize, crc, cnt[5];
    uint64_t fsize;
    memcpy(&version, h + 8, 4), memcpy(&hsize, h + 12, 4), memcpy(&fsize, h + 16, 8);
    memcpy(&p->features, h + 24, 8), memcpy(&crc, h + 32, 4), memcpy(cnt, h + 36, 20);
    if (memcmp(h, FK_PLAN_MAGIC, 8) != 0)
        return fail_free(p, err, el, "%s is not a plan file (bad magic)", path);
    if (version != FK_PLAN_VERSION)
        return fail_free(p, err, el, "plan %s has format version %u, this executor reads version %d: rebuild the plan or the executor", path, version, FK_PLAN_VERSION);
    if (hsize != FK_PLAN_HEADER || fsize != p->size)
        return fail_free(p, err, el, "plan %s is truncated or padded: header says %llu bytes, file has %zu", path, (unsigned long long)fsize, p->size);
    uint32_t actual = fk_crc32(p->base + FK_PLAN_HEADER, p->size - FK_PLAN_HEADER);
    if (actual != crc)
        return fail_free(p, err, el, "plan %s is corrupt: checksum %08x, header says %08x; rebuild and redeploy it", path, actual, crc);
    p->n_inputs = cnt[0], p->n_outputs = cnt[1], p->n_bufs = cnt[2], p->n_tensors = cnt[3], p->n_ops = cnt[4];
    uint64_t off = FK_PLAN_HEADER;
    const uint64_t sizes[5] = {sizeof(fk_plan_input), sizeof(fk_plan_output), sizeof(fk_plan_buf), sizeof(fk_plan_tensor), sizeof(fk_op)};
    const void **dst[5] = {(const void **)&p->inputs, (const void **)&p->outputs, (const void **)&p->bufs,
                           (const void **)&p->tensors, (const void **)&p->ops};
    for (int s = 0; s < 5; s++) {
        if (cnt[s] > (1u << 20) || off + (uint64_t)cnt[s] * sizes[s] > p->size)
            return fail_free(p, err, el, "plan %s: section %d overruns the file", path, s);
        *dst[s] = p->base + off;
        off += (uint64_t)cnt[s] * sizes[s];
    }
    for (uint32_t i = 0; i < p->n_tensors; i++) {
        const fk_plan_tensor *t = &p->tensors[i];
        uint64_t esz = t->dtype == FK_DT_F32 || t->dtype == FK_DT_I32 ? 4 : t->dtype == FK_DT_I64 ? 8 : 1;
        int dims_ok = t->ndim >= 1 && t->ndim <= 4 && t->dtype <= FK_DT_U8;
        for (uint32_t d = 0; dims_ok && d < t->ndim; d++) dims_ok = t->dims[d] > 0 && t->dims[d] < (1ll << 32);
        if (!dims_ok || t->offset % 64 || t->offset < off || t->nbytes > p->size || t->offset > p->size - t->nbytes ||
            tensor_elems(t) * esz != t->nbytes)
            return fail_free(p, err, el, "plan %s: tensor %u has bad dtype, dims or placement", path, i);
    }
    for (uint32_t i = 0; i < p->n_bufs; i++)
        if (p->bufs[i].cols == 0 || p->bufs[i].cols > (1u << 24) || p->bufs[i].rows > FK_BUF_FLAT)
            return fail_free(p, err, el, "plan %s: buffer %u has %u columns, row kind %u", path, i, p->bufs[i].cols,
                             p->bufs[i].rows);
    for (uint32_t i = 0; i < p->n_outputs; i++)
        if (p->outputs[i].buf >= p->n_bufs || !memchr(p->outputs[i].name, 0, FK_NAME))
            return fail_free(p, err, el, "plan %s: output %u is bad", path, i);
    for (uint32_t i = 0; i < p->n_inputs; i++)
        if (!memchr(p->inputs[i].name, 0, FK_NAME) || p->inputs[i].role > FK_ROLE_OTHER)
            return fail_free(p, err, el, "plan %s: input %u is bad", path, i);
    if (p->n_ops == 0 || p->n_outputs == 0) return fail_free(p, err, el, "plan %s has no ops or outputs", path);
    for (uint32_t i = 0; i < p->n_ops; i++) {
        fk_op *op = (fk_op *)&p->ops[i];
        op->name[sizeof op->name - 1] = 0; /* names are display-only: force termination */
        char sub[400];
        if (check_op(p, op, sub, sizeof sub)) return fail_free(p, err, el, "plan %s: %s", path, sub);
    }
    return 0;
}

void fk_plan_free(fk_plan *p) {
    free(p->base);
    memset(p, 0, sizeof *p);
}

const void *fk_plan_data(const fk_plan *p, int tensor) {
    return tensor < 0 ? NULL : p->base + p->tensors[tensor].offset;
}
