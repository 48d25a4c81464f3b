/* FTNS tensor files (docs/ARCHITECTURE.md), shared with agents/ftns.py. Little-endian:
 * "FTNS", u32 version (=1), u32 count, then per tensor: u32 name_len, name, u32 dtype
 * (0=f32, 1=i64, 2=i32, 3=i8, 4=u8), u32 ndim, i64 dims[ndim], u64 nbytes, raw C-order data.
 * Header-only; readers validate every length against the file size and never trust it. */
#ifndef FK_FTNS_H
#define FK_FTNS_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define FTNS_VERSION 1
#define FTNS_MAX_DIMS 8
#define FTNS_MAX_TENSORS 64

enum { FTNS_F32 = 0, FTNS_I64 = 1, FTNS_I32 = 2, FTNS_I8 = 3, FTNS_U8 = 4 };

typedef struct {
    char name[128];
    uint32_t dtype, ndim;
    int64_t dims[FTNS_MAX_DIMS];
    uint64_t nbytes;
    void *data; /* owned (malloc) */
} ftns_tensor;

typedef struct {
    uint32_t count;
    ftns_tensor t[FTNS_MAX_TENSORS];
} ftns_file;

static inline size_t ftns_dtype_size(uint32_t dt) {
    static const size_t sz[] = {4, 8, 4, 1, 1};
    return dt < 5 ? sz[dt] : 0;
}

static inline void ftns_free(ftns_file *f) {
    for (uint32_t i = 0; i < f->count; i++) free(f->t[i].data);
    f->count = 0;
}

/* Returns 0 on success, else writes a message to err. */
static inline int ftns_read(const char *path, ftns_file *f, char *err, size_t errlen) {
    memset(f, 0, sizeof *f);
    FILE *fp = fopen(path, "rb");
    if (!fp) return snprintf(err, errlen, "cannot open tensor file %s", path), -1;
    char magic[4];
    uint32_t hdr[2];
    int rc = -1;
    if (fread(magic, 1, 4, fp) != 4 || memcmp(magic, "FTNS", 4) != 0 || fread(hdr, 4, 2, fp) != 2) {
        snprintf(err, errlen, "%s is not an FTNS file (bad magic or short header)", path);
        goto out;
    }
    if (hdr[0] != FTNS_VERSION) {
        snprintf(err, errlen, "%s has FTNS version %u, this executor reads version %d", path, hdr[0], FTNS_VERSION);
        goto out;
    }
    if (hdr[1] > FTNS_MAX_TENSORS) {
        snprintf(err, errlen, "%s holds %u tensors, more than %d", path, hdr[1], FTNS_MAX_TENSORS);
        goto out;
    }
    for (uint32_t i = 0; i < hdr[1]; i++) {
        ftns_tensor *t = &f->t[i];
        uint32_t nl;
        if (fread(&nl, 4, 1, fp) != 1 || nl >= sizeof t->name || fread(t->name, 1, nl, fp) != nl ||
            fread(&t->dtype, 4, 1, fp) != 1 || fread(&t->ndim, 4, 1, fp) != 1 || t->ndim > FTNS_MAX_DIMS ||
            ftns_dtype_size(t->dtype) == 0 || fread(t->dims, 8, t->ndim, fp) != t->ndim ||
            fread(&t->nbytes, 8, 1, fp) != 1) {
            snprintf(err, errlen, "%s: tensor %u has a bad or truncated header", path, i);
            goto out;
        }
        uint64_t n = 1;
        for (uint32_t d = 0; d < t->ndim; d++) {
            if (t->dims[d] < 0 || t->dims[d] > (1ll << 40)) n = UINT64_MAX;
            else if (n != UINT64_MAX) n *= (uint64_t)t->dims[d];
        }
        if (n == UINT64_MAX || n * ftns_dtype_size(t->dtype) != t->nbytes || t->nbytes > (1ull << 34)) {
            snprintf(err, errlen, "%s: tensor %s: nbytes %llu does not match its dims", path, t->name,
                     (unsigned long long)t->nbytes);
            goto out;
        }
        t->data = malloc(t->nbytes ? t->nbytes : 1);
        f->count = i + 1;
        if (!t->data || fread(t->data, 1, t->nbytes, fp) != t->nbytes) {
            snprintf(err, errlen, "%s: tensor %s: data truncated", path, t->name);
            goto out;
        }
    }
    rc = 0;
out:
    fclose(fp);
    if (rc) ftns_free(f);
    return rc;
}

static inline const ftns_tensor *ftns_find(const ftns_file *f, const char *name) {
    for (uint32_t i = 0; i < f->count; i++)
        if (strcmp(f->t[i].name, name) == 0) return &f->t[i];
    return NULL;
}

/* Writes count tensors; data pointers are borrowed. Returns 0 on success. */
static inline int ftns_write(const char *path, const ftns_tensor *ts, uint32_t count) {
    FILE *fp = fopen(path, "wb");
    if (!fp) return -1;
    uint32_t hdr[2] = {FTNS_VERSION, count};
    int ok = fwrite("FTNS", 1, 4, fp) == 4 && fwrite(hdr, 4, 2, fp) == 2;
    for (uint32_t i = 0; ok && i < count; i++) {
        const ftns_tensor *t = &ts[i];
        uint32_t nl = (uint32_t)strlen(t->name);
        ok = fwrite(&nl, 4, 1, fp) == 1 && fwrite(t->name, 1, nl, fp) == nl &&
             fwrite(&t->dtype, 4, 1, fp) == 1 && fwrite(&t->ndim, 4, 1, fp) == 1 &&
             fwrite(t->dims, 8, t->ndim, fp) == t->ndim && fwrite(&t->nbytes, 8, 1, fp) == 1 &&
             fwrite(t->data, 1, t->nbytes, fp) == t->nbytes;
    }
    return (fclose(fp) == 0 && ok) ? 0 : -1;
}

#endif
