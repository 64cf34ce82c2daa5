/* base/bytes.h — little-endian serialisation: a growing byte writer and a
 * bounds-checked reader, shared by the plan file (format/plan.c) and the
 * records inside its sections (memory plans, kernel programs).
 *
 * Usage:
 *     base_wbuf w = {0};
 *     base_put(&w, "DPCM", 4);
 *     base_put_u32(&w, 1);
 *     size_t at = w.len;
 *     base_put_u64(&w, 0);                       // patched once the length is known
 *     base_put_str(&w, "conv0.weight");          // u32 length, then the bytes
 *     base_patch_u64(&w, at, w.len);
 *     if (w.oom) ... ;                         // an allocation failed: w.p is incomplete
 *     free(w.p);
 *
 *     base_rbuf r = {bytes, len, 0, 0};
 *     uint32_t v = base_get_u32(&r);             // 0 once past the end
 *     const unsigned char *s = base_take(&r, n); // NULL past the end
 *     if (r.bad) ... ;                         // the bytes ended early
 */
#ifndef DPC_BASE_BYTES_H
#define DPC_BASE_BYTES_H

#include <stddef.h>
#include <stdint.h>

typedef struct {
    unsigned char *p;
    size_t len, cap;
    int oom; /* an allocation failed; later writes are dropped */
} base_wbuf;

void base_put(base_wbuf *w, const void *data, size_t n);
void base_put_u32(base_wbuf *w, uint32_t v);
void base_put_u64(base_wbuf *w, uint64_t v);
void base_put_i32(base_wbuf *w, int32_t v);
void base_put_i64(base_wbuf *w, int64_t v);
void base_put_f32(base_wbuf *w, float v);
void base_put_f64(base_wbuf *w, double v);
void base_put_str(base_wbuf *w, const char *s); /* u32 length, then the bytes (no NUL) */
/* Overwrites the 8 bytes at offset `at` (already written). */
void base_patch_u64(base_wbuf *w, size_t at, uint64_t v);

/* Decoding at a known-valid position. */
uint32_t base_le32(const unsigned char *p);
uint64_t base_le64(const unsigned char *p);

typedef struct {
    const unsigned char *p;
    size_t len, pos;
    int bad; /* a read went past the end; later reads give 0 / NULL */
} base_rbuf;

/* The next n bytes, or NULL (and bad set) when fewer are left. */
const unsigned char *base_take(base_rbuf *r, size_t n);
size_t base_left(const base_rbuf *r);
uint32_t base_get_u32(base_rbuf *r);
uint64_t base_get_u64(base_rbuf *r);
int32_t base_get_i32(base_rbuf *r);
int64_t base_get_i64(base_rbuf *r);
float base_get_f32(base_rbuf *r);
double base_get_f64(base_rbuf *r);

/* ---- byte counts (memory needs and limits) ---- */
/* Adds without overflowing: INT64_MAX when the sum would pass it. */
int64_t base_bytes_add(int64_t a, int64_t b);
/* a x k, saturating like base_bytes_add (a, k >= 0). */
int64_t base_bytes_mul(int64_t a, int64_t k);
/* "12.4 GiB", "512.0 MiB", "100 bytes" into buf; returns buf. */
const char *base_bytes_str(int64_t bytes, char *buf, size_t n);

#endif
