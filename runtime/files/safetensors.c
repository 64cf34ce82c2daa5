/* runtime/files/safetensors.c — the bounds-checked safetensors reader: the
 * file read in two parts (header, then data), the header length checked
 * against the file, the tensors' layout (shapes against byte ranges,
 * ranges tiling the data) and their names' index, and the lookups
 * (safetensors_json.c parses the header; safetensors_write.c writes). */
#include "runtime/files/internal.h"
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
    if (rt_st_parse_header(name, h, (size_t)hlen, max_tensors, f, err, errlen) ||
        check_layout(f, name, err, errlen)) {
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
