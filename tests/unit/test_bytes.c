/* tests/unit/test_bytes.c — base/bytes.h: every writer round-trips through
 * its reader, little endian on any host; reads past the end give 0/NULL
 * and mark the reader bad, never touch memory beyond it. */
#include <stdlib.h>

#include "base/bytes.h"
#include "tests/harness.h"

TEST(round_trip_little_endian) {
    base_wbuf w = {0};
    base_put(&w, "DPCM", 4);
    base_put_u32(&w, 0x01020304u);
    size_t at = w.len;
    base_put_u64(&w, 0);
    base_put_i32(&w, -7);
    base_put_i64(&w, -1234567890123LL);
    base_put_f32(&w, 1.5f);
    base_put_f64(&w, -0.1);
    base_put_str(&w, "conv0.weight");
    for (int i = 0; i < 2000; i++) base_put_u32(&w, (uint32_t)i); /* past the first 4096 bytes */
    base_patch_u64(&w, at, 0x1122334455667788ull);
    CHECK(!w.oom);
    CHECK(w.p[4] == 0x04 && w.p[7] == 0x01 && w.p[8] == 0x88 && w.p[15] == 0x11);
    CHECK(base_le32(w.p + 4) == 0x01020304u && base_le64(w.p + 8) == 0x1122334455667788ull);

    base_rbuf r = {w.p, w.len, 0, 0};
    CHECK(memcmp(base_take(&r, 4), "DPCM", 4) == 0);
    CHECK(base_get_u32(&r) == 0x01020304u);
    CHECK(base_get_u64(&r) == 0x1122334455667788ull);
    CHECK(base_get_i32(&r) == -7);
    CHECK(base_get_i64(&r) == -1234567890123LL);
    CHECK(base_get_f32(&r) == 1.5f);
    CHECK(base_get_f64(&r) == -0.1);
    CHECK(base_get_u32(&r) == 12);
    CHECK(memcmp(base_take(&r, 12), "conv0.weight", 12) == 0);
    uint32_t sum = 0;
    for (int i = 0; i < 2000; i++) sum += base_get_u32(&r) == (uint32_t)i;
    CHECK(sum == 2000 && base_left(&r) == 0 && !r.bad);
    free(w.p);
}

TEST(reads_past_the_end) {
    const unsigned char b[6] = {1, 0, 0, 0, 9, 9};
    base_rbuf r = {b, sizeof b, 0, 0};
    CHECK(base_get_u32(&r) == 1 && !r.bad && base_left(&r) == 2);
    CHECK(base_get_u32(&r) == 0 && r.bad);                 /* only 2 bytes left */
    CHECK(base_take(&r, 0) == NULL && base_left(&r) == 0); /* stays bad */
    base_rbuf huge = {b, sizeof b, 0, 0};
    CHECK(base_take(&huge, SIZE_MAX) == NULL && huge.bad);
    base_wbuf w = {0};
    base_put_u32(&w, 5);
    base_patch_u64(&w, 0, 1); /* not 8 bytes there: ignored */
    CHECK(base_le32(w.p) == 5);
    free(w.p);
}

int main(void) {
    RUN(round_trip_little_endian);
    RUN(reads_past_the_end);
    return harness_done();
}
