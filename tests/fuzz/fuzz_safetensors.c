/* libFuzzer target: the safetensors reader (--load-params, checkpoints).
 *
 * Two ways in, for every input: the input as a file; and the input as a
 * script that writes a well-formed file around the semantic fields, so
 * that byte mutations reach them instead of breaking the JSON: names drawn
 * from a pool with duplicates, control characters (raw, \u-escaped, UTF-8
 * C1) and long ones; dtypes; shapes of up to 9 dimensions whose values sit
 * at the overflow boundaries (2^31, 2^32, 2^61, 2^62, 2^63, 2^64 and past
 * it); data_offsets right, off by a little, swapped or from those values;
 * metadata; a wrong header length or data size. Whatever is accepted must
 * hold what the reader promises (shapes match ranges, ranges within the
 * data, names unique and found, no more tensors than the bound); every
 * refusal must be one printable line. */
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/err.h"
#include "runtime/files/files.h"

/* A message or escaped name reaches a terminal: printable ASCII only. */
static void printable(const char *s) {
    for (const unsigned char *p = (const unsigned char *)s; *p; p++)
        if (*p < 0x20 || *p >= 0x7f) {
            fprintf(stderr, "unescaped byte 0x%02x in: %s\n", *p, s);
            abort();
        }
}

static void check(const uint8_t *data, size_t size, int max) {
    char err[512];
    err[0] = 0;
    rt_st_file *f = max < 0 ? rt_st_parse("fuzz.safetensors", data, size, err, sizeof err)
                            : rt_st_parse_max("fuzz.safetensors", data, size, max, err, sizeof err);
    if (!f) {
        if (!err[0]) abort();
        printable(err);
        return;
    }
    if (max >= 0 && f->n > max) abort();
    uint64_t data_len = f->size - f->data_start;
    for (int i = 0; i < f->n; i++) { /* every accepted tensor must be readable */
        const rt_st_tensor *t = &f->tensors[i];
        if (t->ndim < 0 || t->ndim > RT_ST_MAX_DIMS || t->numel < 0) abort();
        uint64_t numel = 1;
        for (int d = 0; d < t->ndim; d++) {
            if (t->shape[d] < 0) abort();
            numel *= (uint64_t)t->shape[d];
        }
        if (numel != (uint64_t)t->numel || t->begin > t->end || t->end > data_len ||
            t->end - t->begin != numel * sizeof(float))
            abort();
        if (rt_st_find(f, t->name) != i) abort(); /* unique, and found */
        printable(BASE_ESC(t->name));
        if (t->numel > (1 << 20)) continue;
        float *host = malloc(sizeof *host * (size_t)(t->numel ? t->numel : 1));
        if (!host) abort();
        rt_st_copy(f, i, host);
        free(host);
    }
    rt_st_free(f);
}

/* ---- the script: bytes of the input choose the fields ------------------ */

typedef struct {
    const uint8_t *p, *end;
} script;

static unsigned next(script *s) { return s->p < s->end ? *s->p++ : 0; }

typedef struct {
    char *s;
    size_t n, cap;
} out;

static void put(out *o, const char *s, size_t n) {
    if (o->n + n + 1 > o->cap) {
        o->cap = (o->n + n + 1) * 2;
        o->s = realloc(o->s, o->cap);
        if (!o->s) abort();
    }
    memcpy(o->s + o->n, s, n);
    o->n += n;
    o->s[o->n] = 0;
}
static void puts_(out *o, const char *s) { put(o, s, strlen(s)); }

static const char *const NAMES[] = {
    "w",
    "b",
    "w",
    "conv0.weight",
    "",
    "__metadata__",
    "a\\u001b[31mb",
    "x\\ny",
    "\\u009b2J",
    "\xc2\x9b"
    "2J",
    "\\u007f",
    "tab\\there",
    "q\\\"uote",
    "\xc3\xa9",
    "back\\\\slash",
    "\\u0007bell",
};
static const char *const DTYPES[] = {
    "F32",
    "F32",
    "F32",
    "F16",
    "BF16",
    "I64",
    "",
    "f32",
    "F32\\u001b[0m",
    "F32 ",
    "\\u001b]0;title\\u0007",
};
/* The numbers around every boundary the reader must not wrap at. */
static const char *const NUMBERS[] = {
    "0",
    "1",
    "2",
    "3",
    "4",
    "8",
    "255",
    "65536",
    "2147483647",
    "2147483648",
    "4294967295",
    "4294967296",
    "2305843009213693951",
    "2305843009213693952",
    "2305843009213693953",
    "4611686018427387903",
    "4611686018427387904",
    "4611686018427387905",
    "9223372036854775807",
    "9223372036854775808",
    "18446744073709551615",
    "18446744073709551616",
    "18446744073709551617",
    "18446744073709551744",
    "18446744073709551620",
    "36893488147419103232",
    "99999999999999999999999999",
    "-1",
    "1.5",
    "1e3",
    "01",
    "",
};
#define COUNT(a) (sizeof(a) / sizeof *(a))

/* One of the pool, or up to 15 bytes of the input (a byte below 0x20 as
 * \u00XX, or raw, as the script says). */
static void name(script *s, out *o) {
    unsigned c = next(s);
    if (c < 0xc0) {
        puts_(o, NAMES[c % COUNT(NAMES)]);
        return;
    }
    if (c >= 0xf8) { /* a long name */
        for (unsigned i = 0, n = 40 * (c - 0xf7); i < n; i++) puts_(o, "\\u001bx");
        return;
    }
    for (unsigned i = 0, n = c & 15; i < n; i++) {
        unsigned b = next(s);
        char buf[8];
        if (b == '"' || b == '\\' || (b < 0x20 && !(c & 16)))
            snprintf(buf, sizeof buf, "\\u%04x", b ? b : 1);
        else
            buf[0] = (char)b, buf[1] = 0;
        puts_(o, buf);
    }
}

static void number(script *s, out *o, uint64_t exact, int use_exact) {
    char buf[32];
    if (use_exact) {
        snprintf(buf, sizeof buf, "%llu", (unsigned long long)exact);
        puts_(o, buf);
    } else {
        puts_(o, NUMBERS[next(s) % COUNT(NUMBERS)]);
    }
}

/* Writes the file the script describes into *o; 0, or -1 when it would be
 * too large to bother. */
static int build(script *s, out *o) {
    out h = {0};
    int n = 1 + (int)(next(s) % 12);
    unsigned flags = next(s);
    uint64_t at = 0;
    puts_(&h, "{");
    if (flags & 1) {
        puts_(&h, "\"__metadata__\":{\"");
        name(s, &h);
        puts_(&h, "\":\"");
        name(s, &h);
        puts_(&h, flags & 2 ? "\",\"n\":[1,{\"x\":null}]}," : "\"},");
    }
    for (int i = 0; i < n; i++) {
        if (i) puts_(&h, flags & 4 ? " ,\n " : ",");
        puts_(&h, "\"");
        name(s, &h);
        puts_(&h, "\":{\"dtype\":\"");
        puts_(&h, DTYPES[next(s) % COUNT(DTYPES)]);
        puts_(&h, "\",\"shape\":[");
        unsigned ndim = next(s) % 10, exact = next(s);
        uint64_t numel = 1;
        for (unsigned d = 0; d < ndim; d++) {
            if (d) puts_(&h, ",");
            unsigned v = next(s);
            if (v < 0x80) { /* small and exact */
                uint64_t dim = v % 5;
                number(s, &h, dim, 1);
                numel = numel * dim;
            } else {
                number(s, &h, 0, 0);
                numel = (uint64_t)1 << 40; /* not exact: never what the offsets say */
            }
        }
        puts_(&h, "],\"data_offsets\":[");
        uint64_t bytes = numel < ((uint64_t)1 << 40) ? numel * 4 : 0;
        int64_t delta = (exact & 0x30) == 0x30 ? (int64_t)(exact & 7) - 4 : 0;
        if ((exact & 0xc0) == 0xc0) { /* from the table */
            number(s, &h, 0, 0);
            puts_(&h, ",");
            number(s, &h, 0, 0);
        } else if ((exact & 0xc0) == 0x80) { /* swapped */
            number(s, &h, at + bytes, 1);
            puts_(&h, ",");
            number(s, &h, at, 1);
        } else {
            number(s, &h, at, 1);
            puts_(&h, ",");
            number(s, &h, (uint64_t)((int64_t)(at + bytes) + delta), 1);
        }
        at += bytes;
        puts_(&h, flags & 8 ? "],\"extra\":{\"k\":[true,false,null,-1.5e3]}}" : "]}");
    }
    puts_(&h, "}");
    if (at > (1 << 20)) {
        free(h.s);
        return -1;
    }
    unsigned tail = next(s);
    uint64_t hlen = h.n + ((flags & 0x30) == 0x30 ? (tail & 3) : 0); /* a wrong length */
    unsigned char len8[8];
    for (int i = 0; i < 8; i++) len8[i] = (unsigned char)(hlen >> (8 * i));
    put(o, (const char *)len8, 8);
    put(o, h.s, h.n);
    free(h.s);
    uint64_t data = at + ((flags & 0xc0) == 0xc0 ? (tail >> 2 & 7) : 0); /* trailing bytes */
    if ((flags & 0xc0) == 0x80 && data) data--;                          /* truncated */
    for (uint64_t i = 0; i < data; i++) put(o, "\x3f", 1);
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    check(data, size, -1);
    script s = {data, data + size};
    out o = {0};
    if (build(&s, &o) == 0) {
        check((const uint8_t *)o.s, o.n, -1);
        check((const uint8_t *)o.s, o.n, (int)(size ? data[size - 1] % 8 : 0));
    }
    free(o.s);
    return 0;
}
