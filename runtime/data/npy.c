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

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/check.h"
#include "runtime/host.h"
#include <unistd.h>

#define NPY_MAX_HEADER      (1 << 20)         /* numpy writes a few hundred bytes */
#define NPY_MAX_LABELS_FILE ((size_t)8 << 30) /* read whole: 8 bytes a label at most */
#define NPY_MAX_RANK        4
#define RT_NPY_MAX_SIDE     4096

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

/* The header of the .npy file `path` of total bytes, from its first have
 * bytes at b, into a: its shape, dtype, and where the data starts (*at);
 * the data's size checked against the shape. a->data points at the data
 * when have == total (all of it in memory). */
static int npy_head(const char *path, const uint8_t *b, size_t have, size_t total, npy_array *a,
                    size_t *at_out, char *err, size_t errlen) {
    memset(a, 0, sizeof *a);
    if (have < 10 || memcmp(b, "\x93NUMPY", 6))
        return base_fail(err, errlen, "%s: not a .npy file (no \\x93NUMPY magic)", path);
    int major = b[6];
    size_t hlen, at;
    if (major == 1) {
        hlen = (size_t)b[8] | (size_t)b[9] << 8, at = 10;
    } else if (major == 2 || major == 3) {
        if (have < 12) return base_fail(err, errlen, "%s: truncated .npy header", path);
        hlen = (size_t)b[8] | (size_t)b[9] << 8 | (size_t)b[10] << 16 | (size_t)b[11] << 24;
        at = 12;
    } else {
        return base_fail(err, errlen, "%s: .npy version %d.%d is not read (1.0 to 3.0)", path,
                         major, b[7]);
    }
    if (hlen > have - at)
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
    a->data = have == total ? b + at + hlen : NULL;
    a->size = total - at - hlen;
    if (n != a->size)
        return base_fail(err, errlen,
                         "%s: the shape and dtype say %zu bytes of data, the file holds %zu "
                         "(truncated?)",
                         path, n, a->size);
    *at_out = at + hlen;
    return 0;
}

/* The array in the len bytes at b (the file `path`), checked. */
static int npy_parse(const char *path, const uint8_t *b, size_t len, npy_array *a, char *err,
                     size_t errlen) {
    size_t at;
    return npy_head(path, b, len, len, a, &at, err, errlen);
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

/* The images' shape, checked: x's layout (*nhwc), count and sides. */
static int image_shape(const char *xpath, const npy_array *x, int c, int *nhwc, char *err,
                       size_t errlen) {
    if (x->rank != 4 || (strcmp(x->descr, "|u1") && strcmp(x->descr, "<f4")))
        return base_fail(err, errlen,
                         "%s: images must be a rank-4 uint8 or float32 array (N,H,W,C or N,C,H,W), "
                         "not rank %d '%s'",
                         xpath, x->rank, x->descr);
    *nhwc = x->shape[3] == c;
    if (!*nhwc && x->shape[1] != c)
        return base_fail(err, errlen,
                         "%s: shape (%lld, %lld, %lld, %lld) has %d channels neither last nor "
                         "second; the program's image input has %d",
                         xpath, (long long)x->shape[0], (long long)x->shape[1],
                         (long long)x->shape[2], (long long)x->shape[3], (int)x->shape[3], c);
    int64_t n = x->shape[0];
    int h = (int)(*nhwc ? x->shape[1] : x->shape[2]), w = (int)(*nhwc ? x->shape[2] : x->shape[3]);
    if (n < 1 || h < 1 || w < 1 || h > RT_NPY_MAX_SIDE || w > RT_NPY_MAX_SIDE)
        return base_fail(err, errlen,
                         "%s: %lld images of %dx%d: expected at least one, at most %d a side",
                         xpath, (long long)n, h, w, RT_NPY_MAX_SIDE);
    return 0;
}

/* That the dataset's bytes (x's element count, one byte each in the
 * records) fit in half the host's memory, checked before they are
 * allocated. */
static int fits_memory(const char *xpath, const npy_array *x, char *err, size_t errlen) {
    int64_t n = x->shape[0], bytes = (int64_t)(x->size / (size_t)x->item), host = rt_host_memory();
    if (host > 0 && bytes > host / 2) {
        char need[32], have[32];
        return base_fail(err, errlen,
                         "%s: %lld images take %s as bytes (they are held in memory), more than "
                         "half of this machine's %s",
                         xpath, (long long)n, base_bytes_str(bytes, need, sizeof need),
                         base_bytes_str(host, have, sizeof have));
    }
    return 0;
}

/* The dataset for x's shape with y's labels, its pixels allocated, not yet
 * filled. NULL + message. */
static rt_dataset *npy_dataset(const char *xpath, const npy_array *x, int nhwc, const char *ypath,
                               const npy_array *y, int c, char *err, size_t errlen) {
    if (y->rank != 1 || y->shape[0] != x->shape[0] || y->descr[1] == 'f') {
        base_fail(err, errlen, "%s: labels must be %lld integers (shape (%lld,)), one per image",
                  ypath, (long long)x->shape[0], (long long)x->shape[0]);
        return NULL;
    }
    int64_t n = x->shape[0];
    int h = (int)(nhwc ? x->shape[1] : x->shape[2]), w = (int)(nhwc ? x->shape[2] : x->shape[3]);
    rt_dataset *ds = calloc(1, sizeof *ds);
    RT_CHECK_ALLOC(ds);
    snprintf(ds->name, sizeof ds->name, "%.250s", xpath);
    ds->count = n, ds->c = c, ds->h = h, ds->w = w;
    size_t rec = (size_t)h * (size_t)w * (size_t)c;
    ds->labels = malloc((size_t)n + 1);
    RT_CHECK_ALLOC(ds->labels);
    int64_t top = -1;
    for (int64_t i = 0; i < n; i++) {
        int64_t l = int_at(y, (size_t)i);
        if (l < 0 || l >= RT_MAX_CLASSES) {
            base_fail(err, errlen, "%s: label %lld of image %lld is outside 0..%d", ypath,
                      (long long)l, (long long)i, RT_MAX_CLASSES - 1);
            rt_dataset_free(ds);
            return NULL;
        }
        ds->labels[i] = (uint8_t)l;
        if (l > top) top = l;
    }
    ds->classes = (int)top + 1;
    ds->pixels = malloc(rec * (size_t)n + 1);
    RT_CHECK_ALLOC(ds->pixels);
    return ds;
}

/* Elements [first, first + count) of x (their bytes at src) into ds's
 * records: CHW bytes, float32 in [0, 1] times 255. */
static int convert(const char *xpath, const npy_array *x, int nhwc, rt_dataset *ds, size_t first,
                   const uint8_t *src, size_t count, char *err, size_t errlen) {
    size_t plane = (size_t)ds->h * (size_t)ds->w, c = (size_t)ds->c, rec = plane * c;
    for (size_t k = 0; k < count; k++) {
        size_t e = first + k, img = e / rec, in = e % rec;
        size_t dst = nhwc ? img * rec + (in % c) * plane + in / c : e;
        if (x->item == 1) {
            ds->pixels[dst] = src[k];
            continue;
        }
        float v;
        memcpy(&v, src + k * 4, 4); /* little endian, as checked */
        if (!(v >= 0 && v <= 1))
            return base_fail(err, errlen,
                             "%s: image %zu has value %g; float32 images lie in [0, 1]", xpath, img,
                             (double)v);
        ds->pixels[dst] = (uint8_t)lrintf(v * 255.0f);
    }
    return 0;
}

/* x's data, from fd at its start, streamed through a small buffer into
 * ds's records: the file's bytes are never held whole. */
static int stream(const char *xpath, int fd, const npy_array *x, int nhwc, rt_dataset *ds,
                  char *err, size_t errlen) {
    size_t total = x->size / (size_t)x->item, chunk = ((size_t)4 << 20) / (size_t)x->item;
    uint8_t *buf = malloc(chunk * (size_t)x->item);
    RT_CHECK_ALLOC(buf);
    int rc = 0;
    for (size_t at = 0; at < total && !rc; at += chunk) {
        size_t k = total - at < chunk ? total - at : chunk;
        int r = base_file_read_exact(fd, buf, k * (size_t)x->item);
        if (r)
            rc = base_fail(err, errlen, "%s: %s", xpath,
                           r < 0 ? strerror(errno) : "the file shrank while being read");
        else
            rc = convert(xpath, x, nhwc, ds, at, buf, k, err, errlen);
    }
    free(buf);
    return rc;
}

/* x's header, read from fd (opened by base_file_open_read, size bytes):
 * at most NPY_MAX_HEADER bytes; fd left at the data. */
static int read_head(const char *xpath, int fd, long long size, npy_array *x, char *err,
                     size_t errlen) {
    uint8_t pre[12];
    size_t have = size < 10 ? (size_t)size : 10, hlen = 0, at;
    if (base_file_read_exact(fd, pre, have))
        return base_fail(err, errlen, "%s: cannot read the .npy header", xpath);
    if (have == 10 && pre[6] == 1) {
        hlen = (size_t)pre[8] | (size_t)pre[9] << 8;
    } else if (have == 10 && (pre[6] == 2 || pre[6] == 3) && size >= 12) {
        if (base_file_read_exact(fd, pre + 10, 2))
            return base_fail(err, errlen, "%s: cannot read the .npy header", xpath);
        have = 12;
        hlen = (size_t)pre[8] | (size_t)pre[9] << 8 | (size_t)pre[10] << 16 | (size_t)pre[11] << 24;
    }
    if (hlen > NPY_MAX_HEADER)
        return base_fail(err, errlen, "%s: a .npy header of %zu bytes; at most %d are read", xpath,
                         hlen, NPY_MAX_HEADER);
    if (hlen > (size_t)size - have) hlen = (size_t)size - have; /* npy_head says it runs past */
    uint8_t *head = malloc(have + hlen + 1);
    RT_CHECK_ALLOC(head);
    memcpy(head, pre, have);
    int rc = base_file_read_exact(fd, head + have, hlen)
                 ? base_fail(err, errlen, "%s: cannot read the .npy header", xpath)
                 : npy_head(xpath, head, have + hlen, (size_t)size, x, &at, err, errlen);
    x->data = NULL;
    free(head);
    return rc;
}

rt_dataset *rt_data_npy(const char *dir, int train, int c, char *err, size_t errlen) {
    char xpath[4200], ypath[4200];
    base_path_join(xpath, sizeof xpath, dir, train ? "train_x.npy" : "test_x.npy");
    base_path_join(ypath, sizeof ypath, dir, train ? "train_y.npy" : "test_y.npy");
    long long xsize = 0;
    size_t ylen = 0;
    npy_array x, y;
    int nhwc = 0;
    rt_dataset *ds = NULL;
    uint8_t *yb = NULL;
    int fd = base_file_open_read(xpath, &xsize, err, errlen);
    if (fd < 0) return NULL;
    if (read_head(xpath, fd, xsize, &x, err, errlen) ||
        image_shape(xpath, &x, c, &nhwc, err, errlen) || fits_memory(xpath, &x, err, errlen))
        goto done;
    yb = base_file_read(ypath, NPY_MAX_LABELS_FILE, &ylen, err, errlen);
    if (!yb || npy_parse(ypath, yb, ylen, &y, err, errlen)) goto done;
    ds = npy_dataset(xpath, &x, nhwc, ypath, &y, c, err, errlen);
    if (ds && stream(xpath, fd, &x, nhwc, ds, err, errlen)) {
        rt_dataset_free(ds);
        ds = NULL;
    }
    if (ds) snprintf(ds->name, sizeof ds->name, "%.250s", dir);
done:
    close(fd);
    free(yb);
    return ds;
}

rt_dataset *rt_data_npy_parse(const char *xpath, const uint8_t *xb, size_t xlen, const char *ypath,
                              const uint8_t *yb, size_t ylen, int c, char *err, size_t errlen) {
    npy_array x, y;
    int nhwc = 0;
    if (npy_parse(xpath, xb, xlen, &x, err, errlen) ||
        npy_parse(ypath, yb, ylen, &y, err, errlen) ||
        image_shape(xpath, &x, c, &nhwc, err, errlen) || fits_memory(xpath, &x, err, errlen))
        return NULL;
    rt_dataset *ds = npy_dataset(xpath, &x, nhwc, ypath, &y, c, err, errlen);
    if (ds && convert(xpath, &x, nhwc, ds, 0, x.data, x.size / (size_t)x.item, err, errlen)) {
        rt_dataset_free(ds);
        return NULL;
    }
    return ds;
}
