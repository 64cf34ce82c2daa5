/* runtime/files/safetensors.c — the bounds-checked safetensors reader
 * (safetensors_write.c writes them). */
#include "runtime/files/files.h"
#include "base/err.h"
#include "base/file.h"
#include "base/hash.h"
#include "runtime/check.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>

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

/* ---- reader: a JSON subset parser over [p, end) --------------------------- */

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

static int cmp_begin(const void *a, const void *b) {
    const rt_st_tensor *x = *(const rt_st_tensor *const *)a, *y = *(const rt_st_tensor *const *)b;
    return x->begin < y->begin   ? -1
           : x->begin > y->begin ? 1
                                 : (x->end > y->end) - (x->end < y->end);
}

/* ---- the names' hash set ------------------------------------------------- */

/* FNV-1a from a per-file random seed, then a full avalanche (murmur3's
 * finaliser): the slot depends on every bit, and names that collide for
 * one file do not for the next, so no crafted header makes it quadratic. */
static size_t name_hash(const rt_st_file *f, const char *name) {
    uint64_t h = base_fnv1a_str(f->seed, name);
    h ^= h >> 33, h *= 0xff51afd7ed558ccdull, h ^= h >> 33, h *= 0xc4ceb9fe1a85ec53ull;
    return (size_t)(h ^ h >> 33);
}

static uint64_t random_seed(void) {
    uint64_t seed;
    if (getrandom(&seed, sizeof seed, GRND_NONBLOCK) != (ssize_t)sizeof seed)
        seed = (uint64_t)time(NULL) * 0x9e3779b97f4a7c15ull ^ (uint64_t)(uintptr_t)&seed;
    return seed ^ BASE_FNV1A_INIT;
}

/* name's slot: where it is, or the empty one it would take. */
static size_t name_slot(const rt_st_file *f, const char *name) {
    size_t h = name_hash(f, name) & f->mask;
    while (f->index[h] && strcmp(f->tensors[f->index[h] - 1].name, name)) h = (h + 1) & f->mask;
    return h;
}

/* Shapes agree with byte ranges; ranges tile [0, data_len) exactly; names
 * are unique (indexed as they are checked). */
static int check_layout(rt_st_file *f, const char *name, char *err, size_t errlen) {
    uint64_t data_len = f->size - f->data_start;
    size_t slots = 16;
    while (slots < 2 * (size_t)f->n) slots *= 2; /* at most half full */
    f->index = calloc(slots, sizeof *f->index);
    if (!f->index) return base_fail(err, errlen, "%s: out of memory", name);
    f->mask = slots - 1, f->seed = random_seed();
    for (int i = 0; i < f->n; i++) {
        rt_st_tensor *t = &f->tensors[i];
        uint64_t numel = 1;
        for (int d = 0; d < t->ndim; d++) {
            if (t->shape[d] && numel > (((uint64_t)1 << 61) / (uint64_t)t->shape[d]))
                return base_fail(err, errlen, "%s: tensor '%s' is impossibly large", name,
                                 BASE_ESC(t->name));
            numel *= (uint64_t)t->shape[d];
        }
        t->numel = (int64_t)numel;
        if (t->end < t->begin || t->end > data_len)
            return base_fail(
                err, errlen,
                "%s: tensor '%s' has data_offsets [%llu, %llu] outside the %llu data bytes "
                "(truncated file?)",
                name, BASE_ESC(t->name), (unsigned long long)t->begin, (unsigned long long)t->end,
                (unsigned long long)data_len);
        if (t->end - t->begin != numel * sizeof(float))
            return base_fail(
                err, errlen,
                "%s: tensor '%s': shape holds %llu bytes of F32 but data_offsets span %llu", name,
                BASE_ESC(t->name), (unsigned long long)(numel * sizeof(float)),
                (unsigned long long)(t->end - t->begin));
        size_t h = name_slot(f, t->name);
        if (f->index[h])
            return base_fail(err, errlen, "%s: tensor '%s' appears twice", name, BASE_ESC(t->name));
        f->index[h] = i + 1;
    }
    rt_st_tensor **order = malloc((f->n > 0 ? (size_t)f->n : 1) * sizeof *order);
    if (!order) return base_fail(err, errlen, "%s: out of memory", name);
    for (int i = 0; i < f->n; i++) order[i] = &f->tensors[i];
    qsort(order, (size_t)f->n, sizeof *order, cmp_begin);
    uint64_t at = 0;
    int rc = 0;
    for (int i = 0; i < f->n && !rc; i++) {
        if (order[i]->begin != at)
            rc = base_fail(err, errlen,
                           "%s: tensor '%s' starts at data byte %llu; expected %llu (%s)", name,
                           BASE_ESC(order[i]->name), (unsigned long long)order[i]->begin,
                           (unsigned long long)at,
                           order[i]->begin < at ? "overlaps another tensor" : "a gap before it");
        at = order[i]->end;
    }
    if (!rc && at != data_len)
        rc = base_fail(err, errlen, "%s: %llu data bytes but the tensors cover %llu", name,
                       (unsigned long long)data_len, (unsigned long long)at);
    free(order);
    return rc;
}

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

/* The 8-byte little-endian header length, checked against the file. */
static int header_length(const char *name, const unsigned char *buf, size_t len, size_t total,
                         uint64_t *hlen, char *err, size_t errlen) {
    if (len < 8)
        return base_fail(err, errlen,
                         "%s: not a safetensors file: %zu bytes, too short for the header length",
                         name, len);
    *hlen = 0;
    for (int i = 7; i >= 0; i--) *hlen = *hlen << 8 | buf[i];
    if (*hlen > RT_ST_MAX_HEADER || *hlen > len - 8)
        return base_fail(
            err, errlen,
            "%s: not a safetensors file: header length %llu does not fit the %zu-byte file", name,
            (unsigned long long)*hlen, total);
    if (*hlen < 2 || buf[8] != '{')
        return base_fail(err, errlen, "%s: not a safetensors file: the header is not a JSON object",
                         name);
    return 0;
}

/* Parses buf, taking ownership of it (freed on failure too). buf holds
 * the first len bytes of a total-byte file (len == total, or at least the
 * whole header); the layout is checked against total. */
static rt_st_file *parse_owned(const char *name, unsigned char *buf, size_t len, size_t total,
                               int max_tensors, char *err, size_t errlen) {
    uint64_t hlen = 0;
    if (header_length(name, buf, len, total, &hlen, err, errlen)) {
        free(buf);
        return NULL;
    }
    rt_st_file *f = calloc(1, sizeof *f);
    if (!f) {
        free(buf);
        base_fail(err, errlen, "%s: out of memory", name);
        return NULL;
    }
    f->bytes = buf, f->size = total, f->data_start = 8 + (size_t)hlen;
    const char *h = (const char *)buf + 8;
    if (max_tensors < 0 || max_tensors > RT_ST_MAX_TENSORS) max_tensors = RT_ST_MAX_TENSORS;
    jparse j = {h, h, h + hlen, name, err, errlen, max_tensors};
    if (jheader(&j, f) || check_layout(f, name, err, errlen)) {
        rt_st_free(f);
        return NULL;
    }
    return f;
}

/* A regular file only (a FIFO or /dev/zero is refused at once), read in
 * two parts: the header, checked against the file's size (the tensors
 * must cover the data exactly, so a file larger or smaller than its header
 * declares is refused before its data is read), then the data. */
rt_st_file *rt_st_read(const char *path, char *err, size_t errlen) {
    return rt_st_read_max(path, RT_ST_MAX_TENSORS, err, errlen);
}

rt_st_file *rt_st_read_max(const char *path, int max_tensors, char *err, size_t errlen) {
    long long size;
    int fd = base_file_open_read(path, &size, err, errlen);
    if (fd < 0) return NULL;
    unsigned char head[8];
    size_t total = (size_t)size, hlen = 0;
    if (total >= 8) {
        int rc = base_file_read_exact(fd, head, 8);
        if (rc) {
            int e = errno;
            close(fd);
            base_fail(err, errlen, "%s: cannot read: %s", path,
                      rc < 0 ? strerror(e) : "the file shrank");
            return NULL;
        }
        uint64_t h = 0;
        for (int i = 7; i >= 0; i--) h = h << 8 | head[i];
        /* parse_owned names a header that does not fit */
        hlen = h <= RT_ST_MAX_HEADER && h <= total - 8 ? (size_t)h : 0;
    }
    size_t first = total >= 8 ? 8 + hlen : total;
    unsigned char *buf = malloc(first + 1);
    if (!buf) {
        close(fd);
        base_fail(err, errlen, "%s: out of memory", path);
        return NULL;
    }
    if (total >= 8)
        memcpy(buf, head, 8);
    else if (base_file_read_exact(fd, buf, total))
        first = 0;
    if (total >= 8 && base_file_read_exact(fd, buf + 8, hlen)) first = 0;
    if (!first && total) {
        close(fd);
        free(buf);
        base_fail(err, errlen, "%s: cannot read: the file changed while being read", path);
        return NULL;
    }
    rt_st_file *f = parse_owned(path, buf, first, total, max_tensors, err, errlen);
    if (f && total > first) {
        unsigned char *all = realloc(f->bytes, total + 1);
        if (!all) {
            base_fail(err, errlen, "%s: out of memory (%zu bytes)", path, total);
            rt_st_free(f);
            f = NULL;
        } else {
            f->bytes = all;
            /* One byte more must not come: the file grew while read. */
            if (base_file_read_exact(fd, all + first, total - first) ||
                base_file_read_exact(fd, all + total, 1) != 1) {
                base_fail(err, errlen, "%s: cannot read: the file changed while being read", path);
                rt_st_free(f);
                f = NULL;
            }
        }
    }
    close(fd);
    return f;
}

rt_st_file *rt_st_parse(const char *name, const unsigned char *buf, size_t len, char *err,
                        size_t errlen) {
    return rt_st_parse_max(name, buf, len, RT_ST_MAX_TENSORS, err, errlen);
}

rt_st_file *rt_st_parse_max(const char *name, const unsigned char *buf, size_t len, int max_tensors,
                            char *err, size_t errlen) {
    unsigned char *copy = malloc(len ? len : 1);
    if (!copy) {
        base_fail(err, errlen, "%s: out of memory", name);
        return NULL;
    }
    if (len) memcpy(copy, buf, len);
    return parse_owned(name, copy, len, len, max_tensors, err, errlen);
}

void rt_st_free(rt_st_file *f) {
    if (!f) return;
    for (int i = 0; i < f->n; i++) free(f->tensors[i].name);
    for (int i = 0; i < f->nmeta; i++) free(f->meta_keys[i]), free(f->meta_values[i]);
    free(f->meta_keys);
    free(f->meta_values);
    free(f->tensors);
    free(f->index);
    free(f->bytes);
    free(f);
}

int rt_st_find(const rt_st_file *f, const char *name) {
    return f->index ? f->index[name_slot(f, name)] - 1 : -1;
}

const char *rt_st_meta(const rt_st_file *f, const char *key) {
    for (int i = 0; i < f->nmeta; i++)
        if (!strcmp(f->meta_keys[i], key)) return f->meta_values[i];
    return NULL;
}

void rt_st_copy(const rt_st_file *f, int i, float *host) {
    const rt_st_tensor *t = &f->tensors[i];
    memcpy(host, f->bytes + f->data_start + t->begin, (size_t)(t->end - t->begin));
}
