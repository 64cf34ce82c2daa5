/* ir/bytes.h — little-endian serialisation: a growing byte writer and a
 * bounds-checked reader, shared by the plan file (ir/plan.c) and the
 * records inside its sections (memory plans, kernel programs).
 *
 * Usage:
 *     ir_wbuf w = {0};
 *     ir_put(&w, "DPCM", 4);
 *     ir_put_u32(&w, 1);
 *     size_t at = w.len;
 *     ir_put_u64(&w, 0);                       // patched once the length is known
 *     ir_put_str(&w, "conv0.weight");          // u32 length, then the bytes
 *     ir_patch_u64(&w, at, w.len);
 *     if (w.oom) ... ;                         // an allocation failed: w.p is incomplete
 *     free(w.p);
 *
 *     ir_rbuf r = {bytes, len, 0, 0};
 *     uint32_t v = ir_get_u32(&r);             // 0 once past the end
 *     const unsigned char *s = ir_take(&r, n); // NULL past the end
 *     if (r.bad) ... ;                         // the bytes ended early
 */
#ifndef DPC_IR_BYTES_H
#define DPC_IR_BYTES_H

#include <stddef.h>
#include <stdint.h>

typedef struct {
    unsigned char *p;
    size_t len, cap;
    int oom; /* an allocation failed; later writes are dropped */
} ir_wbuf;

void ir_put(ir_wbuf *w, const void *data, size_t n);
void ir_put_u32(ir_wbuf *w, uint32_t v);
void ir_put_u64(ir_wbuf *w, uint64_t v);
void ir_put_i32(ir_wbuf *w, int32_t v);
void ir_put_i64(ir_wbuf *w, int64_t v);
void ir_put_f32(ir_wbuf *w, float v);
void ir_put_f64(ir_wbuf *w, double v);
void ir_put_str(ir_wbuf *w, const char *s); /* u32 length, then the bytes (no NUL) */
/* Overwrites the 8 bytes at offset `at` (already written). */
void ir_patch_u64(ir_wbuf *w, size_t at, uint64_t v);

/* Decoding at a known-valid position. */
uint32_t ir_le32(const unsigned char *p);
uint64_t ir_le64(const unsigned char *p);

typedef struct {
    const unsigned char *p;
    size_t len, pos;
    int bad; /* a read went past the end; later reads give 0 / NULL */
} ir_rbuf;

/* The next n bytes, or NULL (and bad set) when fewer are left. */
const unsigned char *ir_take(ir_rbuf *r, size_t n);
size_t ir_left(const ir_rbuf *r);
uint32_t ir_get_u32(ir_rbuf *r);
uint64_t ir_get_u64(ir_rbuf *r);
int32_t ir_get_i32(ir_rbuf *r);
int64_t ir_get_i64(ir_rbuf *r);
float ir_get_f32(ir_rbuf *r);
double ir_get_f64(ir_rbuf *r);

/* ---- byte counts (memory needs and limits) ---- */
/* Adds without overflowing: INT64_MAX when the sum would pass it. */
int64_t ir_bytes_add(int64_t a, int64_t b);
/* a x k, saturating like ir_bytes_add (a, k >= 0). */
int64_t ir_bytes_mul(int64_t a, int64_t k);
/* "12.4 GiB", "512.0 MiB", "100 bytes" into buf; returns buf. */
const char *ir_bytes_str(int64_t bytes, char *buf, size_t n);

#endif
