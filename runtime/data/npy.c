/* runtime/data/npy.c — a dataset from NumPy .npy arrays: DIR/train_x.npy
 * with DIR/train_y.npy, DIR/test_x.npy with DIR/test_y.npy.
 *
 * The format (numpy.lib.format, versions 1.0-3.0): "\x93NUMPY", major and
 * minor version bytes, the header's length (u16 for 1.x, u32 after), then
 * the header, a Python dict literal such as
 *     {'descr': '<f4', 'fortran_order': False, 'shape': (100, 32, 32, 3), }
 * padded with spaces to a newline, then the raw array. The header is parsed
 * strictly: exactly those three keys, a dtype from a short list, C order,
 * and a data size that is the file's remaining size to the byte.
 */
#include "runtime/data/data.h"
#include "base/err.h"
#include "base/file.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/check.h"

#define NPY_MAX_FILE    ((size_t)16 << 30)
#define NPY_MAX_RANK    4
#define RT_NPY_MAX_SIDE 4096

typedef struct {
    char descr[8]; /* "|u1", "<f4", ... */
    int rank;
    int64_t shape[NPY_MAX_RANK];
    const uint8_t *data; /* the array's bytes */
    size_t size;         /* their count, checked against the shape */
    int item;            /* bytes per element */
} npy_array;

typedef struct {
    const char *p, *end;
} cursor;

static void skip_ws(cursor *c) {
    while (c->p < c->end && (*c->p == ' ' || *c->p == '\t')) c->p++;
}

static int eat(cursor *c, char ch) {
    skip_ws(c);
    if (c->p < c->end && *c->p == ch) {
        c->p++;
        return 1;
    }
    return 0;
}

/* A quoted string (no escapes) into buf. */
static int quoted(cursor *c, char *buf, size_t len) {
    skip_ws(c);
    if (c->p >= c->end || (*c->p != '\'' && *c->p != '"')) return -1;
    char q = *c->p++;
    size_t n = 0;
    while (c->p < c->end && *c->p != q) {
        if (n + 1 >= len) return -1;
        buf[n++] = *c->p++;
    }
    if (c->p >= c->end) return -1;
    c->p++;
    buf[n] = 0;
    return 0;
}

static int word(cursor *c, const char *w) {
    skip_ws(c);
    size_t n = strlen(w);
    if ((size_t)(c->end - c->p) < n || memcmp(c->p, w, n)) return 0;
    c->p += n;
    return 1;
}

static int item_size(const char *d) {
    static const char *const ok[] = {"|u1", "|i1", "<i2", "<u2", "<i4", "<u4", "<i8", "<u8", "<f4"};
    static const int sizes[] = {1, 1, 2, 2, 4, 4, 8, 8, 4};
    for (size_t i = 0; i < sizeof ok / sizeof *ok; i++)
        if (!strcmp(d, ok[i])) return sizes[i];
    return 0;
}

/* The header dict at [p, end) into a. 0, or -1 + message naming path. */
static int parse_header(const char *path, const char *p, const char *end, npy_array *a, char *err,
                        size_t errlen) {
    cursor c = {p, end};
    int seen[3] = {0, 0, 0};
    if (!eat(&c, '{')) return base_fail(err, errlen, "%s: the .npy header is not a dict", path);
    while (!eat(&c, '}')) {
        char key[32];
        if (quoted(&c, key, sizeof key) || !eat(&c, ':'))
            return base_fail(err, errlen, "%s: bad .npy header (expected 'key': value)", path);
        if (!strcmp(key, "descr") && !seen[0]) {
            seen[0] = 1;
            if (quoted(&c, a->descr, sizeof a->descr) || !(a->item = item_size(a->descr)))
                return base_fail(err, errlen,
                                 "%s: dtype '%s' is not read (expected uint8 '|u1' or float32 "
                                 "'<f4' images, integer labels, little endian)",
                                 path, BASE_ESC(a->descr));
        } else if (!strcmp(key, "fortran_order") && !seen[1]) {
            seen[1] = 1;
            if (word(&c, "True"))
                return base_fail(err, errlen, "%s: fortran_order True; write it C-ordered", path);
            if (!word(&c, "False"))
                return base_fail(err, errlen, "%s: fortran_order is not True or False", path);
        } else if (!strcmp(key, "shape") && !seen[2]) {
            seen[2] = 1;
            if (!eat(&c, '(')) return base_fail(err, errlen, "%s: shape is not a tuple", path);
            while (!eat(&c, ')')) {
                skip_ws(&c);
                if (a->rank == NPY_MAX_RANK)
                    return base_fail(err, errlen, "%s: shape has more than %d dimensions", path,
                                     NPY_MAX_RANK);
                int64_t v = 0;
                int digits = 0;
                while (c.p < c.end && *c.p >= '0' && *c.p <= '9' && v <= INT32_MAX)
                    v = v * 10 + (*c.p++ - '0'), digits++;
                if (!digits || v > INT32_MAX)
                    return base_fail(err, errlen, "%s: bad shape (dimensions 0 .. %d)", path,
                                     INT32_MAX);
                a->shape[a->rank++] = v;
                if (!eat(&c, ',') && !(skip_ws(&c), c.p < c.end && *c.p == ')'))
                    return base_fail(err, errlen, "%s: bad shape tuple", path);
            }
        } else {
            return base_fail(err, errlen,
                             "%s: unexpected .npy header key '%s' (expected descr, fortran_order, "
                             "shape, once each)",
                             path, BASE_ESC(key));
        }
        if (!eat(&c, ',') && !(skip_ws(&c), c.p < c.end && *c.p == '}'))
            return base_fail(err, errlen, "%s: bad .npy header (expected ',' or '}')", path);
    }
    if (!seen[0] || !seen[1] || !seen[2])
        return base_fail(err, errlen, "%s: the .npy header lacks %s", path,
                         !seen[0]   ? "descr"
                         : !seen[1] ? "fortran_order"
                                    : "shape");
    skip_ws(&c);
    while (c.p < c.end && *c.p == '\n') c.p++;
    if (c.p != c.end) return base_fail(err, errlen, "%s: bytes after the .npy header's dict", path);
    return 0;
}

/* The array in the len bytes at b (the file `path`), checked. */
static int npy_parse(const char *path, const uint8_t *b, size_t len, npy_array *a, char *err,
                     size_t errlen) {
    memset(a, 0, sizeof *a);
    if (len < 10 || memcmp(b, "\x93NUMPY", 6))
        return base_fail(err, errlen, "%s: not a .npy file (no \\x93NUMPY magic)", path);
    int major = b[6];
    size_t hlen, at;
    if (major == 1) {
        hlen = (size_t)b[8] | (size_t)b[9] << 8, at = 10;
    } else if (major == 2 || major == 3) {
        if (len < 12) return base_fail(err, errlen, "%s: truncated .npy header", path);
        hlen = (size_t)b[8] | (size_t)b[9] << 8 | (size_t)b[10] << 16 | (size_t)b[11] << 24;
        at = 12;
    } else {
        return base_fail(err, errlen, "%s: .npy version %d.%d is not read (1.0 to 3.0)", path,
                         major, b[7]);
    }
    if (hlen > len - at)
        return base_fail(err, errlen, "%s: the .npy header (%zu bytes) runs past the end", path,
                         hlen);
    if (memchr(b + at, 0, hlen))
        return base_fail(err, errlen, "%s: a NUL byte in the .npy header", path);
    if (parse_header(path, (const char *)b + at, (const char *)b + at + hlen, a, err, errlen))
        return -1;
    size_t n = (size_t)a->item;
    for (int i = 0; i < a->rank; i++)
        if (__builtin_mul_overflow(n, (size_t)a->shape[i], &n))
            return base_fail(err, errlen, "%s: the shape's size overflows", path);
    a->data = b + at + hlen;
    a->size = len - at - hlen;
    if (n != a->size)
        return base_fail(err, errlen,
                         "%s: the shape and dtype say %zu bytes of data, the file holds %zu "
                         "(truncated?)",
                         path, n, a->size);
    return 0;
}

/* Element i of an integer array as int64. */
static int64_t int_at(const npy_array *a, size_t i) {
    const uint8_t *p = a->data + i * (size_t)a->item;
    uint64_t u = 0;
    for (int k = a->item - 1; k >= 0; k--) u = u << 8 | p[k];
    if (a->descr[1] == 'i' && a->item < 8 && (u >> (a->item * 8 - 1) & 1))
        u |= ~(uint64_t)0 << (a->item * 8); /* sign-extend */
    return a->descr[1] == 'u' && (int64_t)u < 0 ? INT64_MAX : (int64_t)u;
}

rt_dataset *rt_data_npy(const char *dir, int train, int c, char *err, size_t errlen) {
    char xpath[4200], ypath[4200];
    const char *split = train ? "train" : "test";
    snprintf(xpath, sizeof xpath, "%s/%s_x.npy", dir, split);
    snprintf(ypath, sizeof ypath, "%s/%s_y.npy", dir, split);
    size_t xlen = 0, ylen = 0;
    uint8_t *xb = base_file_read(xpath, NPY_MAX_FILE, &xlen, err, errlen);
    uint8_t *yb = xb ? base_file_read(ypath, NPY_MAX_FILE, &ylen, err, errlen) : NULL;
    rt_dataset *ds =
        yb ? rt_data_npy_parse(xpath, xb, xlen, ypath, yb, ylen, c, err, errlen) : NULL;
    free(xb);
    free(yb);
    if (ds) snprintf(ds->name, sizeof ds->name, "%.250s", dir);
    return ds;
}

rt_dataset *rt_data_npy_parse(const char *xpath, const uint8_t *xb, size_t xlen, const char *ypath,
                              const uint8_t *yb, size_t ylen, int c, char *err, size_t errlen) {
    npy_array x, y;
    rt_dataset *ds = NULL;
    if (npy_parse(xpath, xb, xlen, &x, err, errlen) || npy_parse(ypath, yb, ylen, &y, err, errlen))
        return NULL;
    if (x.rank != 4 || (strcmp(x.descr, "|u1") && strcmp(x.descr, "<f4"))) {
        base_fail(err, errlen,
                  "%s: images must be a rank-4 uint8 or float32 array (N,H,W,C or N,C,H,W), not "
                  "rank %d '%s'",
                  xpath, x.rank, x.descr);
        return NULL;
    }
    int nhwc = x.shape[3] == c;
    if (!nhwc && x.shape[1] != c) {
        base_fail(err, errlen,
                  "%s: shape (%lld, %lld, %lld, %lld) has %d channels neither last nor second; the "
                  "program's image input has %d",
                  xpath, (long long)x.shape[0], (long long)x.shape[1], (long long)x.shape[2],
                  (long long)x.shape[3], (int)x.shape[3], c);
        return NULL;
    }
    if (y.rank != 1 || y.shape[0] != x.shape[0] || y.descr[1] == 'f') {
        base_fail(err, errlen, "%s: labels must be %lld integers (shape (%lld,)), one per image",
                  ypath, (long long)x.shape[0], (long long)x.shape[0]);
        return NULL;
    }
    int64_t n = x.shape[0];
    int h = (int)(nhwc ? x.shape[1] : x.shape[2]), w = (int)(nhwc ? x.shape[2] : x.shape[3]);
    if (n < 1 || h < 1 || w < 1 || h > RT_NPY_MAX_SIDE || w > RT_NPY_MAX_SIDE) {
        base_fail(err, errlen, "%s: %lld images of %dx%d: expected at least one, at most %d a side",
                  xpath, (long long)n, h, w, RT_NPY_MAX_SIDE);
        return NULL;
    }
    ds = calloc(1, sizeof *ds);
    RT_CHECK_ALLOC(ds);
    snprintf(ds->name, sizeof ds->name, "%.250s", xpath);
    ds->count = n, ds->c = c, ds->h = h, ds->w = w;
    size_t plane = (size_t)h * (size_t)w, rec = plane * (size_t)c;
    ds->pixels = malloc(rec * (size_t)n + 1);
    ds->labels = malloc((size_t)n + 1);
    RT_CHECK_ALLOC(ds->pixels && ds->labels);
    int64_t top = -1;
    for (int64_t i = 0; i < n; i++) {
        int64_t l = int_at(&y, (size_t)i);
        if (l < 0 || l >= RT_MAX_CLASSES) {
            base_fail(err, errlen, "%s: label %lld of image %lld is outside 0..%d", ypath,
                      (long long)l, (long long)i, RT_MAX_CLASSES - 1);
            goto fail;
        }
        ds->labels[i] = (uint8_t)l;
        if (l > top) top = l;
    }
    ds->classes = (int)top + 1;
    /* To CHW bytes, the record layout; float32 in [0, 1] times 255. */
    for (size_t i = 0; i < (size_t)n * rec; i++) {
        size_t img = i / rec, k = i % rec, ch = k / plane, yx = k % plane;
        size_t src = nhwc ? img * rec + yx * (size_t)c + ch : i;
        if (x.item == 1) {
            ds->pixels[i] = x.data[src];
            continue;
        }
        float v;
        memcpy(&v, x.data + src * 4, 4); /* little endian, as checked */
        if (!(v >= 0 && v <= 1)) {
            base_fail(err, errlen, "%s: image %zu has value %g; float32 images lie in [0, 1]",
                      xpath, img, (double)v);
            goto fail;
        }
        ds->pixels[i] = (uint8_t)lrintf(v * 255.0f);
    }
    return ds;
fail:
    rt_dataset_free(ds);
    return NULL;
}
