/* runtime/files/safetensors_json.c — the safetensors reader's header
 * parser: a JSON subset parser that checks every byte it reads, and the
 * header object it parses into an rt_st_file (the tensors' names, dtypes,
 * shapes and byte ranges, the "__metadata__" strings). The layout those
 * describe is checked by safetensors.c. */
#include "runtime/files/internal.h"
#include "base/err.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* A growable string: jstring decodes into it. */
typedef struct {
    char *s;
    size_t n, cap;
} sbuf;

static void sb_putn(sbuf *b, const char *s, size_t n) {
    if (b->n + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 256;
        while (cap < b->n + n + 1) cap *= 2;
        char *p = realloc(b->s, cap);
        RT_CHECK_ALLOC(p);
        b->s = p, b->cap = cap;
    }
    memcpy(b->s + b->n, s, n);
    b->n += n;
    b->s[b->n] = 0;
}

static void sb_puts(sbuf *b, const char *s) { sb_putn(b, s, strlen(s)); }

/* ---- a JSON subset parser over [p, end) ----------------------------------- */

typedef struct {
    const char *start, *p, *end;
    const char *file;
    char *err;
    size_t errlen;
    int max_tensors;
} jparse;

static int jfail(jparse *j, const char *what) {
    /* Offsets count from the first byte after the 8 length bytes. */
    return base_fail(j->err, j->errlen, "%s: bad safetensors header at byte %ld: %s", j->file,
                     (long)(j->p - j->start), what);
}

static void jws(jparse *j) {
    while (j->p < j->end && (*j->p == ' ' || *j->p == '\t' || *j->p == '\n' || *j->p == '\r'))
        j->p++;
}

static int jexpect(jparse *j, char c) {
    jws(j);
    if (j->p >= j->end || *j->p != c) {
        char msg[64];
        snprintf(msg, sizeof msg, "expected '%c'%s", c,
                 j->p >= j->end ? " but the header ended" : "");
        return jfail(j, msg);
    }
    j->p++;
    return 0;
}

/* Opens an object or array: 1 when members follow, 0 when it is empty
 * (closed too), -1 on error. */
static int jopen(jparse *j, char open, char close) {
    if (jexpect(j, open)) return -1;
    jws(j);
    if (j->p < j->end && *j->p == close) {
        j->p++;
        return 0;
    }
    return 1;
}

/* After a member: 1 when a ',' (another member) follows, 0 when the
 * closing character does, -1 otherwise. */
static int jnext(jparse *j, char close) {
    jws(j);
    if (j->p < j->end && *j->p == ',') {
        j->p++;
        return 1;
    }
    return jexpect(j, close) ? -1 : 0;
}

static int hexval(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

/* Parses a string into a fresh heap copy (UTF-8; \u escapes decoded). */
static int jstring(jparse *j, char **out) {
    *out = NULL;
    jws(j);
    if (j->p >= j->end || *j->p != '"') return jfail(j, "expected a string");
    j->p++;
    sbuf b = {0};
    sb_puts(&b, "");
    for (;;) {
        if (j->p >= j->end) {
            free(b.s);
            return jfail(j, "unterminated string");
        }
        unsigned char c = (unsigned char)*j->p++;
        if (c == '"') break;
        if (c < 0x20) {
            free(b.s);
            return jfail(j, "control character in a string");
        }
        if (c != '\\') {
            sb_putn(&b, (const char *)&c, 1);
            continue;
        }
        if (j->p >= j->end) {
            free(b.s);
            return jfail(j, "unterminated string");
        }
        char e = *j->p++;
        const char *simple = strchr("\"\\/bfnrt", e);
        if (e && simple) {
            static const char repl[] = "\"\\/\b\f\n\r\t";
            sb_putn(&b, &repl[simple - "\"\\/bfnrt"], 1);
            continue;
        }
        if (e != 'u' || j->end - j->p < 4) {
            free(b.s);
            return jfail(j, "bad escape in a string");
        }
        unsigned cp = 0;
        for (int i = 0; i < 4; i++) {
            int h = hexval(j->p[i]);
            if (h < 0) {
                free(b.s);
                return jfail(j, "bad \\u escape in a string");
            }
            cp = cp * 16 + (unsigned)h;
        }
        j->p += 4;
        if (cp == 0 || (cp >= 0xD800 && cp <= 0xDFFF)) {
            /* NUL would truncate names; surrogates never name dpc tensors. */
            free(b.s);
            return jfail(j, "unsupported \\u escape in a string");
        }
        char u[3];
        if (cp < 0x80) {
            u[0] = (char)cp;
            sb_putn(&b, u, 1);
        } else if (cp < 0x800) {
            u[0] = (char)(0xC0 | (cp >> 6)), u[1] = (char)(0x80 | (cp & 63));
            sb_putn(&b, u, 2);
        } else {
            u[0] = (char)(0xE0 | (cp >> 12)), u[1] = (char)(0x80 | ((cp >> 6) & 63));
            u[2] = (char)(0x80 | (cp & 63));
            sb_putn(&b, u, 3);
        }
    }
    *out = b.s;
    return 0;
}

/* A member's key and its ':'; 0, or -1 (nothing to free). */
static int jkey(jparse *j, char **key) {
    if (jstring(j, key)) return -1;
    if (jexpect(j, ':')) {
        free(*key);
        return -1;
    }
    return 0;
}

/* A non-negative integer without sign, fraction or exponent, at most 2^62
 * (shapes are int64_t; byte offsets and element counts stay far from
 * wrapping). A larger one is refused by its digits, checked before each
 * step so that it can never wrap (2^64 + 128 is not 128). */
static int juint(jparse *j, uint64_t *out) {
    const uint64_t max = (uint64_t)1 << 62;
    jws(j);
    const char *s = j->p;
    while (j->p < j->end && *j->p >= '0' && *j->p <= '9') j->p++;
    int n = (int)(j->p - s < 1000 ? j->p - s : 1000);
    if (!n) return jfail(j, "expected a non-negative integer");
    if (j->p < j->end && (*j->p == '.' || *j->p == 'e' || *j->p == 'E'))
        return jfail(j, "expected an integer, got a fraction");
    uint64_t v = 0;
    for (const char *q = s; q < j->p; q++) {
        uint64_t d = (uint64_t)(*q - '0');
        if (v > (max - d) / 10) {
            char msg[96];
            snprintf(msg, sizeof msg, "integer %.*s%s is too large (at most 2^62)", n > 24 ? 24 : n,
                     s, n > 24 ? "..." : "");
            j->p = s;
            return jfail(j, msg);
        }
        v = v * 10 + d;
    }
    *out = v;
    return 0;
}

/* Skips any JSON value (for keys we do not use); depth-limited. */
static int jskip(jparse *j, int depth) {
    if (depth > 32) return jfail(j, "nested too deeply");
    jws(j);
    if (j->p >= j->end) return jfail(j, "expected a value but the header ended");
    char c = *j->p;
    if (c == '"') {
        char *s;
        if (jstring(j, &s)) return -1;
        free(s);
        return 0;
    }
    if (c == '{' || c == '[') {
        char close = c == '{' ? '}' : ']';
        j->p++;
        jws(j);
        if (j->p < j->end && *j->p == close) {
            j->p++;
            return 0;
        }
        for (;;) {
            if (c == '{') {
                char *k;
                if (jstring(j, &k)) return -1;
                free(k);
                if (jexpect(j, ':')) return -1;
            }
            if (jskip(j, depth + 1)) return -1;
            jws(j);
            if (j->p < j->end && *j->p == ',') {
                j->p++;
                continue;
            }
            return jexpect(j, close);
        }
    }
    /* numbers, true, false, null: a run of their characters */
    const char *start = j->p;
    while (j->p < j->end && strchr("0123456789+-.eEtruefalsn", *j->p)) j->p++;
    if (j->p == start) return jfail(j, "unexpected character");
    return 0;
}

/* A tensor's "shape": [d, ...]. */
static int jshape(jparse *j, rt_st_tensor *t) {
    t->ndim = 0;
    int more = jopen(j, '[', ']');
    for (; more > 0; more = jnext(j, ']')) {
        uint64_t d;
        if (juint(j, &d)) return -1;
        if (t->ndim == RT_ST_MAX_DIMS) {
            char msg[256];
            snprintf(msg, sizeof msg, "tensor '%s' has more than %d dimensions", BASE_ESC(t->name),
                     RT_ST_MAX_DIMS);
            return jfail(j, msg);
        }
        t->shape[t->ndim++] = (int64_t)d;
    }
    return more;
}

/* A tensor's entry: {"dtype": ..., "shape": [...], "data_offsets": [b, e]}. */
static int jtensor(jparse *j, rt_st_tensor *t) {
    int have_dtype = 0, have_shape = 0, have_off = 0;
    char msg[BASE_ESC_MAX + 128];
    int more = jopen(j, '{', '}');
    for (; more > 0; more = jnext(j, '}')) {
        char *key;
        if (jkey(j, &key)) return -1;
        int rc = 0;
        if (!strcmp(key, "dtype")) {
            char *dt;
            rc = jstring(j, &dt);
            if (!rc && strcmp(dt, "F32") != 0) {
                snprintf(msg, sizeof msg, "tensor '%s' has dtype %s; only F32 is supported",
                         BASE_ESC(t->name), base_esc((char[48]){0}, 48, dt));
                rc = jfail(j, msg);
            }
            free(dt);
            have_dtype = 1;
        } else if (!strcmp(key, "shape")) {
            rc = jshape(j, t);
            have_shape = 1;
        } else if (!strcmp(key, "data_offsets")) {
            rc = jexpect(j, '[') || juint(j, &t->begin) || jexpect(j, ',') || juint(j, &t->end) ||
                 jexpect(j, ']');
            have_off = 1;
        } else {
            rc = jskip(j, 1);
        }
        free(key);
        if (rc) return -1;
    }
    if (more < 0) return -1;
    if (!have_dtype || !have_shape || !have_off) {
        snprintf(msg, sizeof msg, "tensor '%s' lacks %s", BASE_ESC(t->name),
                 !have_dtype   ? "\"dtype\""
                 : !have_shape ? "\"shape\""
                               : "\"data_offsets\"");
        return jfail(j, msg);
    }
    return 0;
}

/* ---- the header object ----------------------------------------------------- */

/* The "__metadata__" object: its string values are kept (rt_st_meta);
 * anything else in it is skipped, as other writers may put it there. */
static int jmetadata(jparse *j, rt_st_file *f) {
    jws(j);
    if (j->p >= j->end || *j->p != '{') return jskip(j, 1);
    int more = jopen(j, '{', '}');
    for (; more > 0; more = jnext(j, '}')) {
        char *key, *value = NULL;
        if (jkey(j, &key)) return -1;
        jws(j);
        int rc = j->p < j->end && *j->p == '"' ? jstring(j, &value) : jskip(j, 2);
        if (!rc && value) {
            char **nk = realloc(f->meta_keys, sizeof *nk * (size_t)(f->nmeta + 1));
            if (nk) f->meta_keys = nk;
            char **nv = nk ? realloc(f->meta_values, sizeof *nv * (size_t)(f->nmeta + 1)) : NULL;
            if (nv) f->meta_values = nv;
            if (!nk || !nv) {
                rc = jfail(j, "out of memory");
            } else {
                f->meta_keys[f->nmeta] = key, f->meta_values[f->nmeta] = value;
                f->nmeta++;
                key = value = NULL;
            }
        }
        free(key);
        free(value);
        if (rc) return -1;
    }
    return more;
}

/* A new tensor named key in f (key is f's from here, or freed on failure);
 * one more than the reader can use is refused here, before the rest. */
static rt_st_tensor *new_tensor(jparse *j, rt_st_file *f, int *cap, char *key) {
    if (f->n >= j->max_tensors) {
        char msg[128];
        snprintf(msg, sizeof msg, "more than %d tensors, the most %s", j->max_tensors,
                 j->max_tensors < RT_ST_MAX_TENSORS ? "this run can use" : "dpc reads");
        free(key);
        jfail(j, msg);
        return NULL;
    }
    if (f->n == *cap) {
        int grown = *cap ? 2 * *cap : 64;
        rt_st_tensor *nt = realloc(f->tensors, (size_t)grown * sizeof *nt);
        if (!nt) {
            free(key);
            jfail(j, "out of memory");
            return NULL;
        }
        f->tensors = nt, *cap = grown;
    }
    rt_st_tensor *t = &f->tensors[f->n++];
    memset(t, 0, sizeof *t);
    t->name = key;
    return t;
}

/* The header object: "__metadata__" and the tensors' entries. */
static int jheader(jparse *j, rt_st_file *f) {
    int cap = 0, more = jopen(j, '{', '}');
    for (; more > 0; more = jnext(j, '}')) {
        char *key;
        if (jkey(j, &key)) return -1;
        if (!strcmp(key, "__metadata__")) {
            free(key);
            if (jmetadata(j, f)) return -1;
            continue;
        }
        rt_st_tensor *t = new_tensor(j, f, &cap, key);
        if (!t || jtensor(j, t)) return -1;
    }
    if (more < 0) return -1;
    jws(j);
    if (j->p != j->end) return jfail(j, "trailing bytes after the JSON object");
    return 0;
}

int rt_st_parse_header(const char *file, const char *h, size_t len, int max_tensors, rt_st_file *f,
                       char *err, size_t errlen) {
    jparse j = {h, h, h + len, file, err, errlen, max_tensors};
    return jheader(&j, f);
}
