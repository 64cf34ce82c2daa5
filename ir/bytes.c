/* ir/bytes.c — little-endian writer and reader (bytes.h). */
#include "ir/bytes.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void ir_put(ir_wbuf *w, const void *data, size_t n) {
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

void ir_put_u32(ir_wbuf *w, uint32_t v) {
    unsigned char b[4];
    for (int i = 0; i < 4; i++) b[i] = (unsigned char)(v >> (8 * i));
    ir_put(w, b, 4);
}

void ir_put_u64(ir_wbuf *w, uint64_t v) {
    unsigned char b[8];
    for (int i = 0; i < 8; i++) b[i] = (unsigned char)(v >> (8 * i));
    ir_put(w, b, 8);
}

void ir_put_i32(ir_wbuf *w, int32_t v) { ir_put_u32(w, (uint32_t)v); }
void ir_put_i64(ir_wbuf *w, int64_t v) { ir_put_u64(w, (uint64_t)v); }

void ir_put_f32(ir_wbuf *w, float v) {
    uint32_t u;
    memcpy(&u, &v, sizeof u);
    ir_put_u32(w, u);
}

void ir_put_f64(ir_wbuf *w, double v) {
    uint64_t u;
    memcpy(&u, &v, sizeof u);
    ir_put_u64(w, u);
}

void ir_put_str(ir_wbuf *w, const char *s) {
    size_t n = strlen(s);
    ir_put_u32(w, (uint32_t)n);
    ir_put(w, s, n);
}

void ir_patch_u64(ir_wbuf *w, size_t at, uint64_t v) {
    if (w->oom || at > w->len || w->len - at < 8) return;
    for (int i = 0; i < 8; i++) w->p[at + (size_t)i] = (unsigned char)(v >> (8 * i));
}

uint32_t ir_le32(const unsigned char *p) {
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

uint64_t ir_le64(const unsigned char *p) { return ir_le32(p) | (uint64_t)ir_le32(p + 4) << 32; }

const unsigned char *ir_take(ir_rbuf *r, size_t n) {
    if (r->bad || r->pos > r->len || n > r->len - r->pos) {
        r->bad = 1;
        return NULL;
    }
    const unsigned char *p = r->p + r->pos;
    r->pos += n;
    return p;
}

size_t ir_left(const ir_rbuf *r) { return r->bad || r->pos > r->len ? 0 : r->len - r->pos; }

uint32_t ir_get_u32(ir_rbuf *r) {
    const unsigned char *p = ir_take(r, 4);
    return p ? ir_le32(p) : 0;
}

uint64_t ir_get_u64(ir_rbuf *r) {
    const unsigned char *p = ir_take(r, 8);
    return p ? ir_le64(p) : 0;
}

int32_t ir_get_i32(ir_rbuf *r) { return (int32_t)ir_get_u32(r); }
int64_t ir_get_i64(ir_rbuf *r) { return (int64_t)ir_get_u64(r); }

float ir_get_f32(ir_rbuf *r) {
    uint32_t u = ir_get_u32(r);
    float v;
    memcpy(&v, &u, sizeof v);
    return v;
}

double ir_get_f64(ir_rbuf *r) {
    uint64_t u = ir_get_u64(r);
    double v;
    memcpy(&v, &u, sizeof v);
    return v;
}

/* ---- byte counts --------------------------------------------------------------- */

int64_t ir_bytes_add(int64_t a, int64_t b) { return a > INT64_MAX - b ? INT64_MAX : a + b; }

int64_t ir_bytes_mul(int64_t a, int64_t k) {
    return k > 0 && a > INT64_MAX / k ? INT64_MAX : a * k;
}

const char *ir_bytes_str(int64_t bytes, char *buf, size_t n) {
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
