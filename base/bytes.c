/* base/bytes.c — little-endian writer and reader (bytes.h). */
#include "base/bytes.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void base_put(base_wbuf *w, const void *data, size_t n) {
    if (w->oom) return;
    if (n > w->cap - w->len) {
        size_t cap = w->cap ? w->cap : 4096;
        while (cap - w->len < n) {
            if (cap > SIZE_MAX / 2) {
                w->oom = 1;
                return;
            }
            cap *= 2;
        }
        unsigned char *q = realloc(w->p, cap);
        if (!q) {
            w->oom = 1;
            return;
        }
        w->p = q;
        w->cap = cap;
    }
    if (n) memcpy(w->p + w->len, data, n);
    w->len += n;
}

void base_put_u32(base_wbuf *w, uint32_t v) {
    unsigned char b[4];
    for (int i = 0; i < 4; i++) b[i] = (unsigned char)(v >> (8 * i));
    base_put(w, b, 4);
}

void base_put_u64(base_wbuf *w, uint64_t v) {
    unsigned char b[8];
    for (int i = 0; i < 8; i++) b[i] = (unsigned char)(v >> (8 * i));
    base_put(w, b, 8);
}

void base_put_i32(base_wbuf *w, int32_t v) { base_put_u32(w, (uint32_t)v); }
void base_put_i64(base_wbuf *w, int64_t v) { base_put_u64(w, (uint64_t)v); }

void base_put_f32(base_wbuf *w, float v) {
    uint32_t u;
    memcpy(&u, &v, sizeof u);
    base_put_u32(w, u);
}

void base_put_f64(base_wbuf *w, double v) {
    uint64_t u;
    memcpy(&u, &v, sizeof u);
    base_put_u64(w, u);
}

void base_put_str(base_wbuf *w, const char *s) {
    size_t n = strlen(s);
    base_put_u32(w, (uint32_t)n);
    base_put(w, s, n);
}

void base_patch_u64(base_wbuf *w, size_t at, uint64_t v) {
    if (w->oom || at > w->len || w->len - at < 8) return;
    for (int i = 0; i < 8; i++) w->p[at + (size_t)i] = (unsigned char)(v >> (8 * i));
}

uint32_t base_le32(const unsigned char *p) {
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

uint64_t base_le64(const unsigned char *p) {
    return base_le32(p) | (uint64_t)base_le32(p + 4) << 32;
}

const unsigned char *base_take(base_rbuf *r, size_t n) {
    if (r->bad || r->pos > r->len || n > r->len - r->pos) {
        r->bad = 1;
        return NULL;
    }
    const unsigned char *p = r->p + r->pos;
    r->pos += n;
    return p;
}

size_t base_left(const base_rbuf *r) { return r->bad || r->pos > r->len ? 0 : r->len - r->pos; }

uint32_t base_get_u32(base_rbuf *r) {
    const unsigned char *p = base_take(r, 4);
    return p ? base_le32(p) : 0;
}

uint64_t base_get_u64(base_rbuf *r) {
    const unsigned char *p = base_take(r, 8);
    return p ? base_le64(p) : 0;
}

int32_t base_get_i32(base_rbuf *r) { return (int32_t)base_get_u32(r); }
int64_t base_get_i64(base_rbuf *r) { return (int64_t)base_get_u64(r); }

float base_get_f32(base_rbuf *r) {
    uint32_t u = base_get_u32(r);
    float v;
    memcpy(&v, &u, sizeof v);
    return v;
}

double base_get_f64(base_rbuf *r) {
    uint64_t u = base_get_u64(r);
    double v;
    memcpy(&v, &u, sizeof v);
    return v;
}

/* ---- byte counts --------------------------------------------------------------- */

int64_t base_bytes_add(int64_t a, int64_t b) { return a > INT64_MAX - b ? INT64_MAX : a + b; }

int64_t base_bytes_mul(int64_t a, int64_t k) {
    return k > 0 && a > INT64_MAX / k ? INT64_MAX : a * k;
}

const char *base_bytes_str(int64_t bytes, char *buf, size_t n) {
    static const char *const units[] = {"KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
    if (bytes < 1024) {
        snprintf(buf, n, "%" PRId64 " bytes", bytes);
        return buf;
    }
    double v = (double)bytes / 1024;
    int u = 0;
    while (v >= 1024 && u < 5) v /= 1024, u++;
    snprintf(buf, n, "%.1f %s", v, units[u]);
    return buf;
}
