/* Tests for runtime/safetensors: round trip, byte layout, malformed files. */
#include <stdint.h>
#include <stdlib.h>
#include <unistd.h>

#include "runtime/files/files.h"
#include "tests/harness.h"

static char err[512];

static char *tmp_path(const char *tag) {
    static char buf[4][256];
    static int k;
    char *p = buf[k++ % 4];
    snprintf(p, 256, "/tmp/dpc_test_st_%d_%s.safetensors", (int)getpid(), tag);
    return p;
}

/* Builds a file from a header string and `ndata` data bytes (value i & 255). */
static unsigned char *make_file(const char *header, size_t ndata, size_t *len) {
    size_t h = strlen(header);
    *len = 8 + h + ndata;
    unsigned char *b = malloc(*len);
    for (int i = 0; i < 8; i++) b[i] = (unsigned char)((uint64_t)h >> (8 * i));
    memcpy(b + 8, header, h);
    for (size_t i = 0; i < ndata; i++) b[8 + h + i] = (unsigned char)i;
    return b;
}

/* Parses header + data and returns the error (or "" when it parsed). */
static const char *parse_err(const char *header, size_t ndata) {
    size_t len;
    unsigned char *b = make_file(header, ndata, &len);
    err[0] = 0;
    rt_st_file *f = rt_st_parse("x.safetensors", b, len, err, sizeof err);
    free(b);
    if (f) {
        rt_st_free(f);
        return "";
    }
    return err;
}

TEST(round_trip_keeps_order_and_values) {
    float a[6] = {1, 2, 3, 4, 5, 6}, b[3] = {-1.5f, 0.25f, 1e-30f}, c[1] = {42};
    rt_st_entry e[] = {
        {"zeta.weight", 2, (int64_t[]){2, 3}, a},
        {"alpha.bias", 1, (int64_t[]){3}, b},
        {"scalar", 0, NULL, c},
    };
    const char *meta[] = {"model", "test\"net", NULL};
    char *path = tmp_path("rt");
    CHECK(rt_st_write(path, e, 3, meta, err, sizeof err) == 0);
    rt_st_file *f = rt_st_read(path, err, sizeof err);
    CHECK_MSG(f != NULL, "%s", err);
    if (!f) return;
    CHECK(f->n == 3);
    /* Definition order in the header, not sorted. */
    CHECK_STR(f->tensors[0].name, "zeta.weight");
    CHECK_STR(f->tensors[1].name, "alpha.bias");
    CHECK_STR(f->tensors[2].name, "scalar");
    CHECK(f->tensors[0].ndim == 2 && f->tensors[0].shape[0] == 2 && f->tensors[0].shape[1] == 3);
    CHECK(f->tensors[2].ndim == 0 && f->tensors[2].numel == 1);
    CHECK(f->tensors[0].begin == 0 && f->tensors[0].end == 24);
    CHECK(f->tensors[1].begin == 24 && f->tensors[2].begin == 36);
    CHECK(f->data_start % 8 == 0);
    float got[6];
    rt_st_copy(f, rt_st_find(f, "zeta.weight"), got);
    CHECK(memcmp(got, a, sizeof a) == 0);
    rt_st_copy(f, rt_st_find(f, "alpha.bias"), got);
    CHECK(memcmp(got, b, sizeof b) == 0);
    CHECK(rt_st_find(f, "nope") == -1);
    CHECK(f->nmeta == 1 && rt_st_meta(f, "model") && !strcmp(rt_st_meta(f, "model"), "test\"net"));
    CHECK(rt_st_meta(f, "nope") == NULL);
    /* The header text is plain JSON a 20-line reader can use. */
    const char *h = (const char *)f->bytes + 8;
    CHECK(
        strncmp(h,
                "{\"__metadata__\":{\"model\":\"test\\\"net\"},\"zeta.weight\":{\"dtype\":\"F32\","
                "\"shape\":[2,3],\"data_offsets\":[0,24]}",
                96) == 0);
    rt_st_free(f);
    remove(path);
}

TEST(writing_twice_is_byte_identical) {
    float a[4] = {1, 2, 3, 4};
    rt_st_entry e[] = {{"w", 1, (int64_t[]){4}, a}};
    char *p1 = tmp_path("a"), *p2 = tmp_path("b");
    CHECK(rt_st_write(p1, e, 1, NULL, err, sizeof err) == 0);
    CHECK(rt_st_write(p2, e, 1, NULL, err, sizeof err) == 0);
    rt_st_file *f1 = rt_st_read(p1, err, sizeof err), *f2 = rt_st_read(p2, err, sizeof err);
    CHECK(f1 && f2 && f1->size == f2->size && memcmp(f1->bytes, f2->bytes, f1->size) == 0);
    rt_st_free(f1);
    rt_st_free(f2);
    remove(p1);
    remove(p2);
}

TEST(accepts_other_writers_style) {
    /* Whitespace, sorted keys, metadata last, unknown keys, escaped names. */
    CHECK_STR(
        parse_err("{ \"b\" : {\"shape\": [ 2 ], \"dtype\":\"F32\", \"data_offsets\":[8,16]},\n"
                  "  \"a\\u00e9\": {\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8],"
                  "\"extra\":[1,{\"x\":null}]}, \"__metadata__\": {\"format\":\"pt\"}}   ",
                  16),
        "");
    CHECK_STR(parse_err("{}", 0), "");
    /* Metadata strings are kept; other values there are skipped. */
    size_t len;
    unsigned char *b = make_file(
        "{\"__metadata__\":{\"n\":[1,{\"x\":2}],\"format\":\"pt\",\"e\":\"\\u00e9\"}}", 0, &len);
    rt_st_file *f = rt_st_parse("m.safetensors", b, len, err, sizeof err);
    CHECK_MSG(f != NULL, "%s", err);
    if (f) {
        CHECK(f->nmeta == 2 && !strcmp(rt_st_meta(f, "format"), "pt") &&
              !strcmp(rt_st_meta(f, "e"), "\xc3\xa9"));
        CHECK(rt_st_meta(f, "n") == NULL);
        rt_st_free(f);
    }
    free(b);
}

TEST(malformed_headers_are_refused) {
    const char *ok = "{\"w\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}";
    CHECK_STR(parse_err(ok, 8), "");
    CHECK(strstr(parse_err(ok, 4), "outside the 4 data bytes"));
    CHECK(strstr(parse_err(ok, 12), "12 data bytes but the tensors cover 8"));
    CHECK(strstr(parse_err("{\"w\":{\"dtype\":\"F16\",\"shape\":[2],\"data_offsets\":[0,4]}}", 4),
                 "dtype F16; only F32"));
    CHECK(strstr(parse_err("{\"w\":{\"dtype\":\"F32\",\"shape\":[3],\"data_offsets\":[0,8]}}", 8),
                 "shape holds 12 bytes"));
    CHECK(strstr(parse_err("{\"w\":{\"dtype\":\"F32\",\"shape\":[-2],\"data_offsets\":[0,8]}}", 8),
                 "non-negative integer"));
    CHECK(strstr(parse_err("{\"w\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}", 8),
                 "expected '}'"));
    CHECK(strstr(parse_err("{\"w\":{\"dtype\":\"F32\",\"data_offsets\":[0,8]}}", 8),
                 "lacks \"shape\""));
    CHECK(strstr(parse_err("{\"w\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
                           "\"w\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[8,16]}}",
                           16),
                 "appears twice"));
    CHECK(strstr(parse_err("{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
                           "\"b\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[4,12]}}",
                           12),
                 "overlaps"));
    CHECK(strstr(parse_err("{\"w\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}} x", 8),
                 "trailing bytes"));
    CHECK(strstr(parse_err("{\"w\":{\"dtype\":\"F32\",\"shape\":[1,2,3,4,5,6,7,8,9],"
                           "\"data_offsets\":[0,8]}}",
                           8),
                 "more than 8 dimensions"));
    CHECK(strstr(
        parse_err("{\"w\":{\"dtype\":\"F32\",\"shape\":[4611686018427387904,4611686018427387904],"
                  "\"data_offsets\":[0,8]}}",
                  8),
        "impossibly large"));
    CHECK(strstr(parse_err("{\"w\":{\"dtype\":\"F32\",\"shape\":[99999999999999999999],"
                           "\"data_offsets\":[0,8]}}",
                           8),
                 "too large"));
    CHECK(strstr(parse_err("{\"w\x01\":{}}", 0), "control character"));
    CHECK(strstr(parse_err("{\"w\\q\":{}}", 0), "bad escape"));
    CHECK(strstr(parse_err("{\"w", 0), "unterminated string"));
    CHECK(strstr(parse_err("[]", 0), "not a JSON object"));
    /* deeply nested junk in an ignored key must not blow the stack */
    char deep[300] = "{\"__metadata__\":";
    for (int i = 0; i < 100; i++) strcat(deep, "[");
    CHECK(strstr(parse_err(deep, 0), "nested too deeply"));
}

/* Integers past what fits are refused, naming the value,
 * not wrapped (2^64 + 128 used to read as 128, 2^64 + 8 as 8). */
TEST(integers_that_overflow_are_refused) {
    const char *e = parse_err("{\"w\":{\"dtype\":\"F32\",\"shape\":[18446744073709551744],"
                              "\"data_offsets\":[0,512]}}",
                              512);
    CHECK_MSG(strstr(e, "integer 18446744073709551744 is too large"), "%s", e);
    e = parse_err("{\"w\":{\"dtype\":\"F32\",\"shape\":[18446744073709551618],"
                  "\"data_offsets\":[0,8]}}",
                  8);
    CHECK_MSG(strstr(e, "integer 18446744073709551618 is too large"), "%s", e);
    e = parse_err("{\"w\":{\"dtype\":\"F32\",\"shape\":[2],"
                  "\"data_offsets\":[0,18446744073709551624]}}",
                  8);
    CHECK_MSG(strstr(e, "integer 18446744073709551624 is too large"), "%s", e);
    e = parse_err("{\"w\":{\"dtype\":\"F32\",\"shape\":[2],"
                  "\"data_offsets\":[18446744073709551616,18446744073709551624]}}",
                  8);
    CHECK_MSG(strstr(e, "integer 18446744073709551616 is too large"), "%s", e);
    /* At the bound: 2^62 reads, 2^62 + 1 does not; a product past 2^61
     * elements is refused whatever the dimensions. */
    e = parse_err("{\"w\":{\"dtype\":\"F32\",\"shape\":[4611686018427387904],"
                  "\"data_offsets\":[0,8]}}",
                  8);
    CHECK_MSG(strstr(e, "impossibly large"), "%s", e);
    e = parse_err("{\"w\":{\"dtype\":\"F32\",\"shape\":[4611686018427387905],"
                  "\"data_offsets\":[0,8]}}",
                  8);
    CHECK_MSG(strstr(e, "integer 4611686018427387905 is too large"), "%s", e);
    e = parse_err("{\"w\":{\"dtype\":\"F32\",\"shape\":[2147483648,2147483648,2147483648],"
                  "\"data_offsets\":[0,8]}}",
                  8);
    CHECK_MSG(strstr(e, "impossibly large"), "%s", e);
    e = parse_err("{\"w\":{\"dtype\":\"F32\",\"shape\":[0,4611686018427387904,2],"
                  "\"data_offsets\":[0,0]}}",
                  0);
    CHECK_MSG(!*e, "%s", e);
    /* a long run of digits is named, cut */
    char big[400] = "{\"w\":{\"dtype\":\"F32\",\"shape\":[";
    for (int i = 0; i < 300; i++) strcat(big, "9");
    strcat(big, "],\"data_offsets\":[0,8]}}");
    e = parse_err(big, 8);
    CHECK_MSG(strstr(e, "integer 99999999999999999999") && strstr(e, "... is too large"), "%s", e);
}

/* Names and strings from the file reach messages with
 * control characters escaped: one line, no raw ESC. */
TEST(names_in_messages_are_escaped) {
    const char *e = parse_err(
        "{\"a\\u001b[31mb\\nc\":{\"dtype\":\"F32\",\"shape\":[3],\"data_offsets\":[0,8]}}", 8);
    CHECK_MSG(strstr(e, "tensor 'a\\x1b[31mb\\x0ac': shape holds 12 bytes"), "%s", e);
    CHECK(!strchr(e, '\033') && !strchr(e, '\n'));
    e = parse_err(
        "{\"w\":{\"dtype\":\"F\\u001b]0;x\\u0007\",\"shape\":[2],\"data_offsets\":[0,8]}}", 8);
    CHECK_MSG(strstr(e, "dtype F\\x1b]0;x\\x07; only F32"), "%s", e);
    CHECK(!strchr(e, '\033') && !strchr(e, '\a'));
    /* UTF-8 C1 controls (U+009B is CSI to some terminals), DEL, backslash */
    e = parse_err(
        "{\"\\u009b2J\\u007f\\\\\":{\"dtype\":\"F32\",\"shape\":[3],\"data_offsets\":[0,8]}}", 8);
    CHECK_MSG(strstr(e, "tensor '\\xc2\\x9b2J\\x7f\\\\': shape"), "%s", e);
    /* A long name is cut with "...", and the message keeps its end. */
    static char hdr[61000];
    strcpy(hdr, "{\"");
    for (int i = 0; i < 10000; i++) memcpy(hdr + 2 + 6 * i, "\\u001b", 7);
    strcat(hdr, "\":{\"dtype\":\"F32\",\"shape\":[3],\"data_offsets\":[0,8]}}");
    e = parse_err(hdr, 8);
    CHECK_MSG(strstr(e, "\\x1b\\x1b...': shape holds 12 bytes of F32 but data_offsets span 8"),
              "%s", e);
    CHECK(!strchr(e, '\033'));
}

/* A header of n tensors "t0".."t{n-1}" of one float each (dup: the last
 * one named as the first). */
static unsigned char *many_tensors(int n, int dup, size_t *len) {
    size_t cap = (size_t)n * 80 + 64, h = 0;
    char *hdr = malloc(cap);
    h += (size_t)snprintf(hdr + h, cap - h, "{");
    for (int i = 0; i < n; i++)
        h +=
            (size_t)snprintf(hdr + h, cap - h,
                             "%s\"t%d\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[%d,%d]}",
                             i ? "," : "", dup && i == n - 1 ? 0 : i, 4 * i, 4 * i + 4);
    snprintf(hdr + h, cap - h, "}");
    unsigned char *b = make_file(hdr, (size_t)n * 4, len);
    free(hdr);
    return b;
}

/* 200,000 names are checked for duplicates in linear
 * time (the pairwise check took minutes: alarm() fails the test, as a
 * hang), and a reader that knows how many tensors it can use refuses a
 * longer header early. */
TEST(many_tensors_parse_in_linear_time) {
    enum { N = 200000 };
    size_t len;
    unsigned char *b = many_tensors(N, 0, &len);
    alarm(20);
    rt_st_file *f = rt_st_parse("many.safetensors", b, len, err, sizeof err);
    CHECK_MSG(f != NULL, "%s", err);
    if (f) {
        CHECK(f->n == N);
        int found = 0;
        for (int i = 0; i < N; i += 997) {
            char name[32];
            snprintf(name, sizeof name, "t%d", i);
            found += rt_st_find(f, name) == i;
        }
        CHECK(found == (N + 996) / 997 && rt_st_find(f, "t200000") == -1);
        rt_st_free(f);
    }
    free(b);
    b = many_tensors(N, 1, &len);
    CHECK(rt_st_parse("dup.safetensors", b, len, err, sizeof err) == NULL);
    CHECK_MSG(strstr(err, "dup.safetensors: tensor 't0' appears twice"), "%s", err);
    CHECK(rt_st_parse_max("few.safetensors", b, len, 10, err, sizeof err) == NULL);
    CHECK_MSG(strstr(err, "few.safetensors: bad safetensors header at byte") &&
                  strstr(err, "more than 10 tensors"),
              "%s", err);
    alarm(0);
    free(b);
    b = many_tensors(10, 0, &len);
    f = rt_st_parse_max("ten.safetensors", b, len, 10, err, sizeof err);
    CHECK_MSG(f && f->n == 10, "%s", err);
    rt_st_free(f);
    free(b);
}

TEST(truncated_and_tiny_files_are_refused) {
    unsigned char b[16] = {0};
    CHECK(rt_st_parse("t", b, 0, err, sizeof err) == NULL && strstr(err, "too short"));
    CHECK(rt_st_parse("t", b, 7, err, sizeof err) == NULL && strstr(err, "too short"));
    b[0] = 200; /* header length larger than the file */
    CHECK(rt_st_parse("t", b, 16, err, sizeof err) == NULL && strstr(err, "does not fit"));
    memset(b, 0xff, 8); /* 2^64 - 1 */
    CHECK(rt_st_parse("t", b, 16, err, sizeof err) == NULL && strstr(err, "does not fit"));

    /* Every truncation of a valid file fails cleanly. */
    float a[5] = {1, 2, 3, 4, 5};
    rt_st_entry e[] = {{"w", 1, (int64_t[]){5}, a}, {"v", 1, (int64_t[]){0}, a}};
    char *path = tmp_path("trunc");
    CHECK(rt_st_write(path, e, 2, NULL, err, sizeof err) == 0);
    rt_st_file *f = rt_st_read(path, err, sizeof err);
    CHECK(f != NULL);
    if (!f) return;
    int refused = 0;
    for (size_t n = 0; n < f->size; n++) {
        rt_st_file *g = rt_st_parse("t", f->bytes, n, err, sizeof err);
        refused += g == NULL;
        rt_st_free(g);
    }
    CHECK(refused == (int)f->size);
    /* Every single-byte corruption of the header parses or fails cleanly
     * (under ASan this is a small fuzz). */
    for (size_t i = 0; i < f->data_start; i++) {
        for (int v = 0; v < 256; v += 7) {
            unsigned char *c = malloc(f->size);
            memcpy(c, f->bytes, f->size);
            c[i] = (unsigned char)v;
            rt_st_free(rt_st_parse("t", c, f->size, err, sizeof err));
            free(c);
        }
    }
    rt_st_free(f);
    remove(path);
    CHECK(rt_st_read("/nonexistent/x.safetensors", err, sizeof err) == NULL);
    CHECK(strstr(err, "/nonexistent/x.safetensors: cannot open") != NULL);
}

TEST(write_to_missing_dir_fails_cleanly) {
    float a[1] = {0};
    rt_st_entry e[] = {{"w", 1, (int64_t[]){1}, a}};
    CHECK(rt_st_write("/nonexistent/dir/p.safetensors", e, 1, NULL, err, sizeof err) == -1);
    CHECK(strstr(err, "cannot write") != NULL);
}

int main(void) {
    RUN(round_trip_keeps_order_and_values);
    RUN(writing_twice_is_byte_identical);
    RUN(accepts_other_writers_style);
    RUN(malformed_headers_are_refused);
    RUN(integers_that_overflow_are_refused);
    RUN(names_in_messages_are_escaped);
    RUN(many_tensors_parse_in_linear_time);
    RUN(truncated_and_tiny_files_are_refused);
    RUN(write_to_missing_dir_fails_cleanly);
    return harness_done();
}
