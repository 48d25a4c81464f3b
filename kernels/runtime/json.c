/* Recursive-descent reader for the request file (see json.h). Bounded: depth 8, 128 values. */
#include "json.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    const char *s;
    size_t i;
    fk_json *out;
    char *err;
    size_t errlen;
} parser;

static void ws(parser *p) {
    while (p->s[p->i] == ' ' || p->s[p->i] == '\n' || p->s[p->i] == '\r' || p->s[p->i] == '\t') p->i++;
}

static int bad(parser *p, const char *what) {
    snprintf(p->err, p->errlen, "request JSON: %s at byte %zu", what, p->i);
    return -1;
}

static int string(parser *p, char *dst, size_t cap) {
    size_t n = 0;
    if (p->s[p->i] != '"') return bad(p, "expected a string");
    p->i++;
    for (;;) {
        char c = p->s[p->i++];
        if (c == 0) return bad(p, "unterminated string");
        if (c == '"') break;
        if (c == '\\') {
            char e = p->s[p->i++];
            if (e == 'n') c = '\n';
            else if (e == 't') c = '\t';
            else if (e == 'r') c = '\r';
            else if (e == 'b') c = '\b';
            else if (e == 'f') c = '\f';
            else if (e == 'u') {
                unsigned v = 0;
                for (int k = 0; k < 4; k++) {
                    char h = p->s[p->i++];
                    v = v * 16 + (unsigned)(h >= '0' && h <= '9' ? h - '0' : (h | 32) - 'a' + 10);
                }
                c = v < 128 ? (char)v : '?'; /* paths here are ASCII; anything else is replaced */
            } else if (e == 0) return bad(p, "bad escape");
            else c = e;
        }
        if (n + 1 < cap) dst[n++] = c;
    }
    dst[n] = 0;
    return 0;
}

static int value(parser *p, const char *path, int depth);

static int object(parser *p, const char *path, int depth) {
    p->i++;
    ws(p);
    if (p->s[p->i] == '}') return p->i++, 0;
    for (;;) {
        char key[96], sub[96];
        ws(p);
        if (string(p, key, sizeof key)) return -1;
        ws(p);
        if (p->s[p->i++] != ':') return bad(p, "expected ':'");
        snprintf(sub, sizeof sub, "%s%s%s", path, *path ? "." : "", key);
        if (value(p, sub, depth + 1)) return -1;
        ws(p);
        char c = p->s[p->i++];
        if (c == '}') return 0;
        if (c != ',') return bad(p, "expected ',' or '}'");
    }
}

static int array(parser *p, const char *path, int depth) {
    p->i++;
    ws(p);
    if (p->s[p->i] == ']') return p->i++, 0;
    for (;;) {
        if (value(p, "", depth + 1)) return -1; /* array items are not addressable */
        ws(p);
        char c = p->s[p->i++];
        if (c == ']') return 0;
        if (c != ',') return bad(p, "expected ',' or ']'");
    }
    (void)path;
}

static int value(parser *p, const char *path, int depth) {
    if (depth > 8) return bad(p, "nested too deep");
    ws(p);
    char c = p->s[p->i];
    if (c == '{') return object(p, path, depth);
    if (c == '[') return array(p, path, depth);
    fk_json *j = p->out;
    int slot = (*path && j->n < FK_JSON_MAX) ? j->n : -1;
    char scratch[1024];
    char *dst = slot >= 0 ? j->val[slot] : scratch;
    if (c == '"') {
        if (string(p, dst, sizeof scratch)) return -1;
    } else {
        size_t n = 0;
        while (p->s[p->i] && strchr("+-.0123456789eEtruefalsn", p->s[p->i]) && n + 1 < sizeof scratch) dst[n++] = p->s[p->i++];
        dst[n] = 0;
        if (n == 0) return bad(p, "expected a value");
    }
    if (slot >= 0) {
        snprintf(j->key[slot], sizeof j->key[slot], "%s", path);
        j->is_str[slot] = c == '"';
        j->n++;
    }
    return 0;
}

int fk_json_parse(const char *text, fk_json *out, char *err, size_t errlen) {
    memset(out, 0, sizeof *out);
    parser p = {text, 0, out, err, errlen};
    ws(&p);
    if (text[p.i] != '{') return bad(&p, "expected an object");
    if (value(&p, "", 0)) return -1;
    ws(&p);
    if (text[p.i] != 0) return bad(&p, "trailing data");
    return 0;
}

const char *fk_json_str(const fk_json *j, const char *path) {
    for (int i = 0; i < j->n; i++)
        if (strcmp(j->key[i], path) == 0) return strcmp(j->val[i], "null") == 0 && !j->is_str[i] ? NULL : j->val[i];
    return NULL;
}

double fk_json_num(const fk_json *j, const char *path, double fallback) {
    const char *v = fk_json_str(j, path);
    if (!v) return fallback;
    if (strcmp(v, "true") == 0) return 1;
    if (strcmp(v, "false") == 0) return 0;
    char *end;
    double d = strtod(v, &end);
    return end == v ? fallback : d;
}

/* Length of the valid UTF-8 sequence at s (1-4), or 0 if the bytes are not valid UTF-8. */
static int utf8_len(const unsigned char *s) {
    int n = s[0] >= 0xF0 && s[0] <= 0xF4 ? 4 : s[0] >= 0xE0 ? 3 : s[0] >= 0xC2 && s[0] <= 0xDF ? 2 : 0;
    for (int i = 1; i < n; i++)
        if ((s[i] & 0xC0) != 0x80) return 0;
    return n;
}

void fk_json_quote(const char *s, char *buf, size_t len) {
    size_t n = 0;
    if (len < 3) return;
    buf[n++] = '"';
    for (const unsigned char *p = (const unsigned char *)s; *p && n + 8 < len; p++) {
        unsigned char c = *p;
        if (c == '"' || c == '\\') buf[n++] = '\\', buf[n++] = (char)c;
        else if (c < 0x20) n += (size_t)snprintf(buf + n, len - n, "\\u%04x", c);
        else if (c < 0x80) buf[n++] = (char)c;
        else {
            /* Names come from files and may be damaged: pass valid UTF-8, replace the rest. */
            int k = utf8_len(p);
            if (k == 0) {
                buf[n++] = '?';
            } else {
                for (int i = 0; i < k; i++) buf[n++] = (char)p[i];
                p += k - 1;
            }
        }
    }
    buf[n++] = '"';
    buf[n] = 0;
}
