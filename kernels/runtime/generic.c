/* Generic fallback kernels (generic.h): plain C, one loop nest per op family, run on the
 * calling thread. They are the executor's coverage, not its speed: the fused ops carry the
 * encoder's GEMMs and attention; what lands here is usually small (masks, positions) or a
 * pattern the lowering does not fuse yet, and the profile shows its time as "fallback".
 *
 * Meta (t0, int64) per kind, after [bound batch, bound seq]:
 *   EW      R, dims[R], nops, strides[nops][R]          (stride 0: broadcast)
 *   COPY    R, dims[R], src_off, src_strides[R], src_mods[R] (0: none; Tile), dst_off,
 *           dst_strides[R], out_numel; operand 0 the base copied first (absent: p1 1 fills
 *           f0, p1 0 leaves it), operand 1 the source
 *   GATHER  p1 0: outer, axis_n, inner, n_idx;  p1 1 (elements): R, idx_dims[R],
 *           data_strides[R], axis, axis_len
 *   MATMUL  R, bdims[R], a_strides[R], b_strides[R], M, K, N
 *   SOFTMAX outer, n, inner                CUMSUM outer, n, inner
 *   REDUCE  R, in_dims[R], out_strides[R], out_numel, count; p1 0 sum 1 mean 2 max 3 min
 *           4 prod 5 sum of squares 6 L2 7 L1 8 log-sum-exp
 *   CONV    N, C, M, G, nd, in[2], out[2], k[2], stride[2], pad[2], dil[2]; operand 0 x,
 *           1 w [M, C/G, k..], 2 bias [M] (optional)
 *   RANGE   n                              INPUT   (nothing; p1 the input slot) */
#include "generic.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

static int gfail(char *err, size_t el, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, el, fmt, ap);
    va_end(ap);
    return -1;
}

static const int64_t *meta_of(const fk_plan *p, const fk_op *op, int64_t *n) {
    if (op->t[0] < 0 || (uint32_t)op->t[0] >= p->n_tensors || p->tensors[op->t[0]].dtype != FK_DT_I64) return NULL;
    *n = (int64_t)(p->tensors[op->t[0]].nbytes / 8);
    return (const int64_t *)fk_plan_data(p, op->t[0]);
}

void fk_generic_bound(const fk_plan *p, const fk_op *op, int *B, int *S) {
    int64_t n;
    const int64_t *m = meta_of(p, op, &n);
    *B = (int)m[0], *S = (int)m[1];
}

/* Elements of buffer id at the bound shape. */
static int64_t buf_elems(const fk_plan *p, int id, int64_t B, int64_t S) {
    const fk_plan_buf *b = &p->bufs[id];
    return (int64_t)b->cols * (b->rows == FK_BUF_SEQS ? B : b->rows == FK_BUF_FLAT ? 1 : B * S);
}

/* Elements of operand i (-1: absent). */
static int64_t operand_elems(const fk_plan *p, const fk_op *op, int i, int64_t B, int64_t S) {
    if (op->in[i] >= 0) return (uint32_t)op->in[i] < p->n_bufs ? buf_elems(p, op->in[i], B, S) : -2;
    const int t = i < 3 ? op->t[1 + i] : -1;
    if (t < 0) return -1;
    if ((uint32_t)t >= p->n_tensors || p->tensors[t].dtype != FK_DT_F32) return -2;
    return (int64_t)(p->tensors[t].nbytes / 4);
}

/* Whether offsets off + sum(i_d * strides[d]), 0 <= i_d < ext[d], stay in [0, n). */
static int span_ok(int r, const int64_t *ext, const int64_t *strides, int64_t off, int64_t n) {
    int64_t lo = off, hi = off;
    for (int d = 0; d < r; d++) {
        if (ext[d] <= 0) return 0;
        const int64_t s = (ext[d] - 1) * strides[d];
        if (s < 0) lo += s; else hi += s;
    }
    return lo >= 0 && hi < n;
}

static int64_t prod(const int64_t *d, int r) {
    int64_t n = 1;
    for (int i = 0; i < r; i++) n *= d[i];
    return n;
}

#define NEED(cond, ...) do { if (!(cond)) return gfail(err, el, __VA_ARGS__); } while (0)

int fk_generic_check(const fk_plan *p, const fk_op *op, char *err, size_t el) {
    int64_t n;
    const char *nm = op->name;
    const int64_t *m = meta_of(p, op, &n);
    NEED(m && n >= 2 && m[0] > 0 && m[1] > 0 && m[0] * m[1] <= (1 << 20), "op %s: fallback op without a valid meta tensor", nm);
    NEED(op->p[0] >= 0 && op->p[0] <= FK_GEN_MAX, "op %s: unknown fallback kind %d", nm, op->p[0]);
    NEED(op->out >= 0 && (uint32_t)op->out < p->n_bufs, "op %s: bad output buffer", nm);
    const int64_t B = m[0], S = m[1], out = buf_elems(p, op->out, B, S);
    int64_t e[4];
    for (int i = 0; i < 4; i++) {
        e[i] = operand_elems(p, op, i, B, S);
        NEED(e[i] != -2, "op %s: operand %d is a bad buffer or not an f32 tensor", nm, i);
        NEED(op->in[i] < 0 || op->in[i] != op->out, "op %s: writes over its own input", nm);
    }
    const int64_t *a = m + 2, left = n - 2;
#define HAVE(k) NEED(left >= (k), "op %s: meta too short", nm)
    switch (op->p[0]) {
    case FK_GEN_EW: {
        HAVE(1);
        const int r = (int)a[0];
        NEED(r >= 0 && r <= FK_GEN_RANK, "op %s: rank %d", nm, r);
        HAVE(2 + r);
        const int nops = (int)a[1 + r];
        NEED(nops >= 1 && nops <= 3, "op %s: %d operands", nm, nops);
        HAVE(2 + r + nops * r);
        NEED(prod(a + 1, r) == out, "op %s: output has %lld elements, buffer %lld", nm, (long long)prod(a + 1, r), (long long)out);
        for (int i = 0; i < nops; i++)
            NEED(e[i] > 0 && span_ok(r, a + 1, a + 2 + r + i * r, 0, e[i]), "op %s: operand %d out of range", nm, i);
        const int f = op->p[1];
        NEED((f < 32 && nops == 1) || (f >= 32 && f < 64 && nops == 2) || (f == FK_F_WHERE && nops == 3),
             "op %s: function %d with %d operands", nm, f, nops);
        return 0;
    }
    case FK_GEN_COPY: {
        HAVE(1);
        const int r = (int)a[0];
        NEED(r >= 1 && r <= FK_GEN_RANK, "op %s: rank %d", nm, r);
        HAVE(1 + r + 1 + r + r + 1 + r + 1);
        const int64_t *dims = a + 1, src_off = a[1 + r], *ss = a + 2 + r, *mods = a + 2 + 2 * r;
        const int64_t dst_off = a[2 + 3 * r], *ds = a + 3 + 3 * r, out_n = a[3 + 4 * r];
        NEED(out_n == out, "op %s: output has %lld elements, buffer %lld", nm, (long long)out_n, (long long)out);
        NEED(e[1] > 0, "op %s: no source", nm);
        NEED(e[0] == -1 || e[0] == out, "op %s: base has %lld elements, output %lld", nm, (long long)e[0], (long long)out);
        int64_t ext[FK_GEN_RANK];
        for (int d = 0; d < r; d++) {
            NEED(mods[d] >= 0, "op %s: bad tile", nm);
            ext[d] = mods[d] && mods[d] < dims[d] ? mods[d] : dims[d];
        }
        NEED(span_ok(r, ext, ss, src_off, e[1]), "op %s: source range outside its %lld elements", nm, (long long)e[1]);
        NEED(span_ok(r, dims, ds, dst_off, out), "op %s: destination range outside the output", nm);
        return 0;
    }
    case FK_GEN_GATHER:
        NEED(e[0] > 0 && e[1] > 0, "op %s: missing data or indices", nm);
        if (op->p[1] == 0) {
            HAVE(4);
            NEED(a[0] > 0 && a[1] > 0 && a[2] > 0 && a[0] * a[1] * a[2] == e[0] && a[3] == e[1] && a[0] * a[3] * a[2] == out,
                 "op %s: Gather sizes do not agree", nm);
            return 0;
        } else {
            HAVE(1);
            const int r = (int)a[0];
            NEED(r >= 1 && r <= FK_GEN_RANK, "op %s: rank %d", nm, r);
            HAVE(1 + 2 * r + 2);
            const int ax = (int)a[1 + 2 * r];
            NEED(ax >= 0 && ax < r && a[2 + 2 * r] > 0 && prod(a + 1, r) == out && e[1] == out, "op %s: bad GatherElements", nm);
            int64_t ext[FK_GEN_RANK];
            for (int d = 0; d < r; d++) ext[d] = d == ax ? a[2 + 2 * r] : a[1 + d];
            NEED(span_ok(r, ext, a + 1 + r, 0, e[0]), "op %s: GatherElements data range", nm);
            return 0;
        }
    case FK_GEN_MATMUL: {
        HAVE(1);
        const int r = (int)a[0];
        NEED(r >= 0 && r <= FK_GEN_RANK, "op %s: rank %d", nm, r);
        HAVE(1 + 3 * r + 3);
        const int64_t M = a[1 + 3 * r], K = a[2 + 3 * r], N = a[3 + 3 * r];
        NEED(M > 0 && K > 0 && N > 0 && prod(a + 1, r) * M * N == out, "op %s: MatMul sizes", nm);
        NEED(e[0] > 0 && e[1] > 0 && span_ok(r, a + 1, a + 1 + r, 0, e[0] - M * K + 1) &&
             span_ok(r, a + 1, a + 1 + 2 * r, 0, e[1] - K * N + 1), "op %s: MatMul operands too small", nm);
        return 0;
    }
    case FK_GEN_SOFTMAX: case FK_GEN_CUMSUM:
        HAVE(3);
        NEED(a[0] > 0 && a[1] > 0 && a[2] > 0 && a[0] * a[1] * a[2] == out && e[0] == out, "op %s: sizes", nm);
        return 0;
    case FK_GEN_REDUCE: {
        HAVE(1);
        const int r = (int)a[0];
        NEED(r >= 1 && r <= FK_GEN_RANK, "op %s: rank %d", nm, r);
        HAVE(1 + 2 * r + 2);
        NEED(prod(a + 1, r) == e[0] && a[1 + 2 * r] == out && a[2 + 2 * r] > 0 && span_ok(r, a + 1, a + 1 + r, 0, out),
             "op %s: Reduce sizes", nm);
        NEED(op->p[1] >= 0 && op->p[1] <= 8, "op %s: reduction %d", nm, op->p[1]);
        return 0;
    }
    case FK_GEN_CONV: {
        HAVE(17);
        const int64_t N = a[0], C = a[1], M = a[2], G = a[3], nd = a[4];
        NEED(N > 0 && C > 0 && M > 0 && G > 0 && C % G == 0 && M % G == 0 && (nd == 1 || nd == 2), "op %s: Conv", nm);
        int64_t in = 1, o = 1, k = 1;
        for (int d = 0; d < 2; d++) {
            NEED(a[5 + d] > 0 && a[7 + d] > 0 && a[9 + d] > 0 && a[11 + d] > 0 && a[13 + d] >= 0 && a[15 + d] > 0,
                 "op %s: Conv geometry", nm);
            in *= a[5 + d], o *= a[7 + d], k *= a[9 + d];
        }
        NEED(e[0] == N * C * in && e[1] == M * (C / G) * k && out == N * M * o && (e[2] == -1 || e[2] == M),
             "op %s: Conv operand sizes", nm);
        return 0;
    }
    case FK_GEN_RANGE:
        HAVE(1);
        NEED(a[0] == out && e[0] >= 1 && e[1] >= 1, "op %s: Range", nm);
        return 0;
    case FK_GEN_INPUT:
        NEED(op->p[1] >= 0 && (uint32_t)op->p[1] < p->n_inputs && out == B * S, "op %s: bad input slot", nm);
        return 0;
    }
#undef HAVE
    return gfail(err, el, "op %s: unknown fallback kind", nm);
}

static const float *operand(const fk_exec *e, const fk_op *op, int i) {
    if (op->in[i] >= 0) return e->buf[op->in[i]];
    return i < 3 && op->t[1 + i] >= 0 ? (const float *)fk_plan_data(e->plan, op->t[1 + i]) : NULL;
}

static float unary(int f, float x, float lo, float hi) {
    switch (f) {
    case FK_F_IDENTITY: return x;
    case FK_F_NEG: return -x;
    case FK_F_ABS: return fabsf(x);
    case FK_F_SQRT: return sqrtf(x);
    case FK_F_EXP: return expf(x);
    case FK_F_LOG: return logf(x);
    case FK_F_ERF: return erff(x);
    case FK_F_TANH: return tanhf(x);
    case FK_F_SIGMOID: return 1.0f / (1.0f + expf(-x));
    case FK_F_RELU: return x > 0 ? x : 0;
    case FK_F_NOT: return x == 0;
    case FK_F_SIGN: return (float)((x > 0) - (x < 0));
    case FK_F_CEIL: return ceilf(x);
    case FK_F_FLOOR: return floorf(x);
    case FK_F_ROUND: return nearbyintf(x); /* ONNX Round: half to even, the default mode */
    case FK_F_RECIP: return 1.0f / x;
    case FK_F_TRUNC: return isfinite(x) ? truncf(x) : x;
    case FK_F_BOOL: return x != 0;
    case FK_F_CLIP: return x < lo ? lo : x > hi ? hi : x;
    case FK_F_GELU: return 0.5f * x * (1.0f + erff(x * 0.70710678f));
    case FK_F_SOFTPLUS: return x > 20 ? x : log1pf(expf(x));
    case FK_F_SIN: return sinf(x);
    case FK_F_COS: return cosf(x);
    case FK_F_ISNAN: return isnan(x);
    case FK_F_ISINF: return isinf(x) != 0;
    }
    return x;
}

static float binary(int f, float a, float b, int integer) {
    switch (f) {
    case FK_F_ADD: return a + b;
    case FK_F_SUB: return a - b;
    case FK_F_MUL: return a * b;
    case FK_F_DIV: return integer ? (b != 0 ? truncf(a / b) : 0) : a / b;
    case FK_F_POW: return b == 2.0f ? a * a : b == 0.5f ? sqrtf(a) : powf(a, b);
    case FK_F_MIN: return a < b ? a : b;
    case FK_F_MAX: return a > b ? a : b;
    case FK_F_EQUAL: return a == b;
    case FK_F_LESS: return a < b;
    case FK_F_GREATER: return a > b;
    case FK_F_LESS_EQ: return a <= b;
    case FK_F_GREATER_EQ: return a >= b;
    case FK_F_AND: return a != 0 && b != 0;
    case FK_F_OR: return a != 0 || b != 0;
    case FK_F_XOR: return (a != 0) != (b != 0);
    case FK_F_MOD: { /* integer Mod: the sign of the divisor, as Python's */
        if (b == 0) return 0;
        float r = fmodf(a, b);
        return r != 0 && ((r < 0) != (b < 0)) ? r + b : r;
    }
    case FK_F_FMOD: return fmodf(a, b);
    }
    return 0;
}

static void run_ew(fk_exec *e, const fk_op *op, const int64_t *a) {
    const int r = (int)a[0], nops = (int)a[1 + r], f = op->p[1], integer = op->p[2] & FK_GEN_INT;
    const int64_t *dims = a + 1, *st = a + 2 + r, total = prod(dims, r);
    const float *x[3] = {operand(e, op, 0), operand(e, op, 1), operand(e, op, 2)};
    float *y = e->buf[op->out];
    int64_t idx[FK_GEN_RANK] = {0}, off[3] = {0, 0, 0};
    /* the last dim in an inner loop: contiguous or broadcast operands, no index arithmetic */
    const int64_t inner = r ? dims[r - 1] : 1;
    for (int64_t o = 0; o < total; o += inner) {
        const int64_t s0 = r ? st[r - 1] : 0, s1 = r && nops > 1 ? st[r + r - 1] : 0, s2 = r && nops > 2 ? st[2 * r + r - 1] : 0;
        /* the output is never an operand's buffer (fk_generic_check) */
        float *restrict yo = y + o;
        const float *restrict a0 = x[0] + off[0], *restrict a1 = nops > 1 ? x[1] + off[1] : NULL;
        /* both operands contiguous (mean pooling's tokens x mask): a loop the compiler vectorises */
#define FK_EW2(OPR) do {                                                                  \
            if (s0 == 1 && s1 == 1) for (int64_t j = 0; j < inner; j++) yo[j] = a0[j] OPR a1[j];   \
            else for (int64_t j = 0; j < inner; j++) yo[j] = a0[j * s0] OPR a1[j * s1];             \
        } while (0)
        if (nops == 2 && !integer && f <= FK_F_DIV) /* the common arithmetic: no call per element */
            switch (f) {
            case FK_F_ADD: FK_EW2(+); break;
            case FK_F_SUB: FK_EW2(-); break;
            case FK_F_MUL: FK_EW2(*); break;
            default: FK_EW2(/); break;
            }
#undef FK_EW2
        else if (nops == 1 && f == FK_F_IDENTITY && s0 == 1) /* Cast to f32 (masks): a copy */
            memcpy(yo, a0, sizeof(float) * (size_t)inner);
        else if (nops == 1 && f == FK_F_IDENTITY)
            for (int64_t j = 0; j < inner; j++) yo[j] = a0[j * s0];
        else if (nops == 1)
            for (int64_t j = 0; j < inner; j++) yo[j] = unary(f, x[0][off[0] + j * s0], op->f[0], op->f[1]);
        else if (nops == 2)
            for (int64_t j = 0; j < inner; j++) yo[j] = binary(f, x[0][off[0] + j * s0], x[1][off[1] + j * s1], integer);
        else
            for (int64_t j = 0; j < inner; j++) yo[j] = x[0][off[0] + j * s0] != 0 ? x[1][off[1] + j * s1] : x[2][off[2] + j * s2];
        for (int d = r - 2; d >= 0; d--) { /* odometer over the outer dims */
            idx[d]++;
            for (int i = 0; i < nops; i++) off[i] += st[i * r + d];
            if (idx[d] < dims[d]) break;
            for (int i = 0; i < nops; i++) off[i] -= st[i * r + d] * dims[d];
            idx[d] = 0;
        }
    }
}

static void run_copy(fk_exec *e, const fk_op *op, const int64_t *a) {
    const int r = (int)a[0];
    const int64_t *dims = a + 1, src_off = a[1 + r], *ss = a + 2 + r, *mods = a + 2 + 2 * r;
    const int64_t dst_off = a[2 + 3 * r], *ds = a + 3 + 3 * r, out_n = a[3 + 4 * r];
    float *y = e->buf[op->out];
    const float *base = operand(e, op, 0), *src = operand(e, op, 1);
    if (base) memcpy(y, base, sizeof(float) * (size_t)out_n);
    else if (op->p[1] == 1)
        for (int64_t i = 0; i < out_n; i++) y[i] = op->f[0];
    int64_t idx[FK_GEN_RANK] = {0};
    const int64_t total = prod(dims, r), inner = dims[r - 1];
    const int contiguous = ss[r - 1] == 1 && ds[r - 1] == 1 && (mods[r - 1] == 0 || mods[r - 1] >= inner);
    for (int64_t o = 0; o < total; o += inner) {
        int64_t so = src_off, dof = dst_off;
        for (int d = 0; d < r - 1; d++) so += (mods[d] ? idx[d] % mods[d] : idx[d]) * ss[d], dof += idx[d] * ds[d];
        if (contiguous) memcpy(y + dof, src + so, sizeof(float) * (size_t)inner);
        else if (mods[r - 1])
            for (int64_t j = 0; j < inner; j++) y[dof + j * ds[r - 1]] = src[so + (j % mods[r - 1]) * ss[r - 1]];
        else
            for (int64_t j = 0; j < inner; j++) y[dof + j * ds[r - 1]] = src[so + j * ss[r - 1]];
        for (int d = r - 2; d >= 0; d--) {
            if (++idx[d] < dims[d]) break;
            idx[d] = 0;
        }
    }
}

static int64_t clamp_index(float v, int64_t n) {
    int64_t i = (int64_t)v;
    if (i < 0) i += n;
    return i < 0 ? 0 : i >= n ? n - 1 : i; /* out of range: clamped (no error path at run time) */
}

static void run_gather(fk_exec *e, const fk_op *op, const int64_t *a) {
    const float *x = operand(e, op, 0), *ix = operand(e, op, 1);
    float *y = e->buf[op->out];
    if (op->p[1] == 0) {
        const int64_t outer = a[0], n = a[1], inner = a[2], m = a[3];
        for (int64_t o = 0; o < outer; o++)
            for (int64_t j = 0; j < m; j++)
                memcpy(y + (o * m + j) * inner, x + (o * n + clamp_index(ix[j], n)) * inner, sizeof(float) * (size_t)inner);
        return;
    }
    const int r = (int)a[0], ax = (int)a[1 + 2 * r];
    const int64_t *dims = a + 1, *ds = a + 1 + r, n = a[2 + 2 * r], total = prod(dims, r);
    int64_t idx[FK_GEN_RANK] = {0};
    if (ax == r - 1) { /* along the last axis (DeBERTa's relative positions): row by row */
        const int64_t inner = dims[r - 1], sa = ds[r - 1];
        for (int64_t o = 0; o < total; o += inner) {
            int64_t base = 0;
            for (int d = 0; d < r - 1; d++) base += idx[d] * ds[d];
            for (int64_t j = 0; j < inner; j++) y[o + j] = x[base + clamp_index(ix[o + j], n) * sa];
            for (int d = r - 2; d >= 0; d--) {
                if (++idx[d] < dims[d]) break;
                idx[d] = 0;
            }
        }
        return;
    }
    for (int64_t o = 0; o < total; o++) {
        int64_t off = 0;
        for (int d = 0; d < r; d++) off += (d == ax ? clamp_index(ix[o], n) : idx[d]) * ds[d];
        y[o] = x[off];
        for (int d = r - 1; d >= 0; d--) {
            if (++idx[d] < dims[d]) break;
            idx[d] = 0;
        }
    }
}

size_t fk_generic_scratch(const fk_plan *p, const fk_op *op) {
    int64_t n;
    const int64_t *m = meta_of(p, op, &n), *a = m + 2;
    if (op->p[0] != FK_GEN_MATMUL) return 0;
    const int r = (int)a[0];
    return fk_packed_b_f32_size((int)a[2 + 3 * r], (int)a[3 + 3 * r]);
}

/* Each batch: the right operand packed, then the kernel table's fp32 GEMM (the SIMD one the
 * fused FCs use), so a fallback MatMul (attention a fused pattern did not take) is not a
 * scalar loop. */
static void run_matmul(fk_exec *e, const fk_op *op, const int64_t *a) {
    const int r = (int)a[0];
    const int64_t *bd = a + 1, *as = a + 1 + r, *bs = a + 1 + 2 * r, M = a[1 + 3 * r], K = a[2 + 3 * r], N = a[3 + 3 * r];
    const float *A = operand(e, op, 0), *Bm = operand(e, op, 1);
    float *y = e->buf[op->out];
    int64_t idx[FK_GEN_RANK] = {0};
    const int64_t batches = prod(bd, r);
    for (int64_t b = 0; b < batches; b++) {
        int64_t ao = 0, bo = 0;
        for (int d = 0; d < r; d++) ao += idx[d] * as[d], bo += idx[d] * bs[d];
        float *yb = y + b * M * N;
        fk_pack_b_f32((int)K, (int)N, Bm + bo, (int)N, e->gen_pack);
        fk_gemm_args g;
        memset(&g, 0, sizeof g);
        g.M = (int)M, g.N = (int)N, g.K = (int)K, g.a = A + ao, g.lda = (int)K, g.w = e->gen_pack, g.c = yb;
        g.ldc = (int)N, g.epi = FK_EPI_NONE;
        e->k->gemm_f32(&g, 0, (int)M, 0, (int)N);
        for (int d = r - 1; d >= 0; d--) {
            if (++idx[d] < bd[d]) break;
            idx[d] = 0;
        }
    }
}

static void run_softmax(fk_exec *e, const fk_op *op, const int64_t *a) {
    const int64_t outer = a[0], n = a[1], inner = a[2];
    const float *x = operand(e, op, 0);
    float *y = e->buf[op->out];
    if (inner == 1 && op->p[1] == 0) { /* over the last axis (attention scores a fused
                                          pattern did not take): the kernel table's SIMD row
                                          softmax, the fused attention's own */
        for (int64_t o = 0; o < outer; o++) {
            if (y != x) memcpy(y + o * n, x + o * n, sizeof(float) * (size_t)n);
            e->k->softmax_f32((int)n, y + o * n, 1.0f, NULL);
        }
        return;
    }
    for (int64_t o = 0; o < outer; o++)
        for (int64_t i = 0; i < inner; i++) {
            const float *xs = x + o * n * inner + i;
            float *ys = y + o * n * inner + i;
            float mx = -INFINITY, sum = 0;
            for (int64_t j = 0; j < n; j++) mx = xs[j * inner] > mx ? xs[j * inner] : mx;
            for (int64_t j = 0; j < n; j++) sum += ys[j * inner] = expf(xs[j * inner] - mx);
            if (op->p[1] == 1)
                for (int64_t j = 0; j < n; j++) ys[j * inner] = xs[j * inner] - mx - logf(sum);
            else
                for (int64_t j = 0; j < n; j++) ys[j * inner] /= sum;
        }
}

static void reduce_one(int f, float *o, float v) {
    switch (f) {
    case 0: case 1: *o += v; break;
    case 2: *o = v > *o ? v : *o; break;
    case 3: *o = v < *o ? v : *o; break;
    case 4: *o *= v; break;
    case 5: case 6: *o += v * v; break;
    case 7: *o += fabsf(v); break;
    case 8: *o = *o == -INFINITY ? v : (v > *o ? v + log1pf(expf(*o - v)) : *o + log1pf(expf(v - *o))); break;
    }
}

/* The last dim in an inner loop, as run_ew: reduced over it (one accumulator) or kept (the
 * output row, contiguous). Each output element still takes its inputs in index order, so the
 * sums are the per-element loop's to the bit; sums skip the odometer and the switch per
 * element (mean pooling's ReduceSum over [1, 128, 384]'s sequence: 0.13 -> 0.01 ms). */
static void run_reduce(fk_exec *e, const fk_op *op, const int64_t *a) {
    const int r = (int)a[0], f = op->p[1];
    const int64_t *dims = a + 1, *os = a + 1 + r, out_n = a[1 + 2 * r], count = a[2 + 2 * r], total = prod(dims, r);
    const float *x = operand(e, op, 0);
    float *y = e->buf[op->out];
    const float init = f == 2 || f == 8 ? -INFINITY : f == 3 ? INFINITY : f == 4 ? 1.0f : 0.0f; /* 8, log-sum-exp: max first, for range */
    for (int64_t i = 0; i < out_n; i++) y[i] = init;
    const int64_t inner = r ? dims[r - 1] : 1, si = r ? os[r - 1] : 0; /* a rank-0 input: one element */
    const int sum = f == 0 || f == 1;
    int64_t idx[FK_GEN_RANK] = {0}, off = 0;
    for (int64_t t = 0; t < total; t += inner) {
        const float *restrict xv = x + t;
        float *restrict o = y + off;
        if (si == 0 && sum) {
            float acc = *o;
            for (int64_t j = 0; j < inner; j++) acc += xv[j];
            *o = acc;
        } else if (si == 1 && sum) {
            for (int64_t j = 0; j < inner; j++) o[j] += xv[j];
        } else {
            for (int64_t j = 0; j < inner; j++) reduce_one(f, o + j * si, xv[j]);
        }
        for (int d = r - 2; d >= 0; d--) { /* odometer over the outer dims */
            off += os[d];
            if (++idx[d] < dims[d]) break;
            off -= os[d] * dims[d];
            idx[d] = 0;
        }
    }
    if (f == 1)
        for (int64_t i = 0; i < out_n; i++) y[i] /= (float)count;
    if (f == 6)
        for (int64_t i = 0; i < out_n; i++) y[i] = sqrtf(y[i]);
}

static void run_conv(fk_exec *e, const fk_op *op, const int64_t *a) {
    const int64_t N = a[0], C = a[1], M = a[2], G = a[3];
    const int64_t IH = a[5], IW = a[6], OH = a[7], OW = a[8], KH = a[9], KW = a[10];
    const int64_t SH = a[11], SW = a[12], PH = a[13], PW = a[14], DH = a[15], DW = a[16];
    const float *x = operand(e, op, 0), *w = operand(e, op, 1), *bias = operand(e, op, 2);
    float *y = e->buf[op->out];
    const int64_t cg = C / G, mg = M / G;
    for (int64_t n = 0; n < N; n++)
        for (int64_t m = 0; m < M; m++) {
            const int64_t g = m / mg;
            float *ym = y + (n * M + m) * OH * OW;
            for (int64_t i = 0; i < OH * OW; i++) ym[i] = bias ? bias[m] : 0.0f;
            for (int64_t c = 0; c < cg; c++) {
                const float *xc = x + (n * C + g * cg + c) * IH * IW, *wc = w + (m * cg + c) * KH * KW;
                for (int64_t kh = 0; kh < KH; kh++)
                    for (int64_t kw = 0; kw < KW; kw++) {
                        const float wv = wc[kh * KW + kw];
                        for (int64_t oh = 0; oh < OH; oh++) {
                            const int64_t ih = oh * SH - PH + kh * DH;
                            if (ih < 0 || ih >= IH) continue;
                            const float *xr = xc + ih * IW;
                            float *yr = ym + oh * OW;
                            if (SW == 1 && DW == 1 && PW == 0 && OW + kw <= IW) { /* 1x1 / valid rows: a stream */
                                for (int64_t ow = 0; ow < OW; ow++) yr[ow] += wv * xr[ow + kw];
                                continue;
                            }
                            for (int64_t ow = 0; ow < OW; ow++) {
                                const int64_t iw = ow * SW - PW + kw * DW;
                                if (iw >= 0 && iw < IW) yr[ow] += wv * xr[iw];
                            }
                        }
                    }
            }
        }
}

static void run_cumsum(fk_exec *e, const fk_op *op, const int64_t *a) {
    const int64_t outer = a[0], n = a[1], inner = a[2];
    const int exclusive = op->p[1] & 1, reverse = op->p[1] & 2;
    const float *x = operand(e, op, 0);
    float *y = e->buf[op->out];
    if (inner == 1 && op->p[1] == 0) { /* over the last axis (attention scores a fused
                                          pattern did not take): the kernel table's SIMD row
                                          softmax, the fused attention's own */
        for (int64_t o = 0; o < outer; o++) {
            if (y != x) memcpy(y + o * n, x + o * n, sizeof(float) * (size_t)n);
            e->k->softmax_f32((int)n, y + o * n, 1.0f, NULL);
        }
        return;
    }
    for (int64_t o = 0; o < outer; o++)
        for (int64_t i = 0; i < inner; i++) {
            float acc = 0;
            for (int64_t jj = 0; jj < n; jj++) {
                const int64_t j = reverse ? n - 1 - jj : jj, at = (o * n + j) * inner + i;
                const float v = x[at];
                if (exclusive) y[at] = acc, acc += v;
                else acc += v, y[at] = acc;
            }
        }
}

void fk_generic_run(fk_exec *e, const fk_op *op) {
    int64_t n;
    const int64_t *m = meta_of(e->plan, op, &n), *a = m + 2;
    switch (op->p[0]) {
    case FK_GEN_EW: run_ew(e, op, a); break;
    case FK_GEN_COPY: run_copy(e, op, a); break;
    case FK_GEN_GATHER: run_gather(e, op, a); break;
    case FK_GEN_MATMUL: run_matmul(e, op, a); break;
    case FK_GEN_SOFTMAX: run_softmax(e, op, a); break;
    case FK_GEN_REDUCE: run_reduce(e, op, a); break;
    case FK_GEN_CONV: run_conv(e, op, a); break;
    case FK_GEN_CUMSUM: run_cumsum(e, op, a); break;
    case FK_GEN_RANGE: {
        const float start = operand(e, op, 0)[0], delta = operand(e, op, 1)[0];
        float *y = e->buf[op->out];
        for (int64_t i = 0; i < a[0]; i++) y[i] = start + (float)i * delta;
        break;
    }
    case FK_GEN_INPUT: {
        const int64_t *ids = e->in[op->p[1]];
        float *y = e->buf[op->out];
        for (int64_t i = 0; i < (int64_t)e->T; i++) y[i] = (float)ids[i];
        break;
    }
    }
}

const char *fk_generic_name(const fk_op *op) {
    static const char *kinds[] = {"Elementwise", "Copy", "Gather", "MatMul", "Softmax", "Reduce", "Conv", "CumSum",
                                  "Range", "Input"};
    if (op->p[0] == FK_GEN_GATHER && op->p[1] == 1) return "GatherElements";
    if (op->p[0] == FK_GEN_EW && op->p[1] == FK_F_WHERE) return "Where";
    return op->p[0] >= 0 && op->p[0] <= FK_GEN_MAX ? kinds[op->p[0]] : "?";
}
