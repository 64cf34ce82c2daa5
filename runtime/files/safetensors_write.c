/* runtime/files/safetensors_write.c — the safetensors writer: a JSON header
 * (8-byte aligned), then every tensor's F32 data, replacing PATH atomically. */
#include "runtime/files/files.h"
#include "base/err.h"
#include "base/file.h"
#include "runtime/check.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The length of the valid UTF-8 sequence at p (1-4), or 0: shortest form
 * only, no surrogates, nothing past U+10FFFF. */
static int utf8_len(const unsigned char *p) {
    if (p[0] < 0x80) return 1;
    int n = p[0] >= 0xc2 && p[0] <= 0xdf   ? 2
            : p[0] >= 0xe0 && p[0] <= 0xef ? 3
            : p[0] >= 0xf0 && p[0] <= 0xf4 ? 4
                                           : 0;
    for (int i = 1; i < n; i++)
        if ((p[i] & 0xc0) != 0x80) return 0; /* the terminator stops it too */
    if ((p[0] == 0xe0 && p[1] < 0xa0) || (p[0] == 0xed && p[1] > 0x9f) ||
        (p[0] == 0xf0 && p[1] < 0x90) || (p[0] == 0xf4 && p[1] > 0x8f))
        return 0;
    return n;
}

void rt_json_string(FILE *h, const char *s) {
    fputc('"', h);
    for (const unsigned char *p = (const unsigned char *)s; *p;) {
        int n = utf8_len(p);
        if (*p == '"' || *p == '\\')
            fputc('\\', h), fputc(*p, h);
        else if (*p < 0x20 || n == 0)
            fprintf(h, "\\u%04x", *p); /* a control, or a byte outside valid UTF-8 */
        else
            fwrite(p, 1, (size_t)n, h);
        p += n ? n : 1;
    }
    fputc('"', h);
}

static int64_t numel_of(int ndim, const int64_t *shape) {
    int64_t n = 1;
    for (int d = 0; d < ndim; d++) n *= shape[d];
    return n;
}

int rt_st_write(const char *path, const rt_st_entry *t, int n, const char *const *meta, char *err,
                size_t errlen) {
    return rt_st_write_in(NULL, path, t, n, meta, err, errlen);
}

/* dir NULL: path is the user's name (base_file_open), else one of dpc's own
 * in the user's folder dir (base_file_open_in). */
int rt_st_write_in(const char *dir, const char *path, const rt_st_entry *t, int n,
                   const char *const *meta, char *err, size_t errlen) {
    char *text = NULL;
    size_t len = 0;
    FILE *h = open_memstream(&text, &len);
    RT_CHECK_ALLOC(h);
    fputc('{', h);
    int any = meta && meta[0]; /* a member before the next: a comma */
    if (any) {
        fputs("\"__metadata__\":{", h);
        for (int i = 0; meta[i] && meta[i + 1]; i += 2) {
            if (i) fputc(',', h);
            rt_json_string(h, meta[i]);
            fputc(':', h);
            rt_json_string(h, meta[i + 1]);
        }
        fputc('}', h);
    }
    uint64_t off = 0;
    for (int i = 0; i < n; i++) {
        if (t[i].ndim < 0 || t[i].ndim > RT_ST_MAX_DIMS) {
            fclose(h);
            free(text);
            return base_fail(err, errlen, "%s: tensor '%s' has %d dimensions", path, t[i].name,
                             t[i].ndim);
        }
        uint64_t bytes = (uint64_t)numel_of(t[i].ndim, t[i].shape) * sizeof(float);
        if (any) fputc(',', h);
        any = 1;
        rt_json_string(h, t[i].name);
        fputs(":{\"dtype\":\"F32\",\"shape\":[", h);
        for (int d = 0; d < t[i].ndim; d++)
            fprintf(h, d ? ",%lld" : "%lld", (long long)t[i].shape[d]);
        fprintf(h, "],\"data_offsets\":[%llu,%llu]}", (unsigned long long)off,
                (unsigned long long)(off + bytes));
        off += bytes;
    }
    fputc('}', h);
    /* Pad with spaces so the data section starts 8-byte aligned, as the
     * reference writer does; JSON allows trailing whitespace. */
    RT_CHECK_ALLOC(fflush(h) == 0);
    for (size_t pad = (8 - len % 8) % 8; pad > 0; pad--) fputc(' ', h);
    RT_CHECK_ALLOC(fclose(h) == 0);

    /* base_file: a fresh temporary beside PATH, fsynced and renamed over it,
     * so PATH is always the old file or the complete new one. */
    base_file *f =
        dir ? base_file_open_in(dir, path, err, errlen) : base_file_open(path, err, errlen);
    if (!f) {
        free(text);
        return -1;
    }
    unsigned char len8[8];
    for (int i = 0; i < 8; i++) len8[i] = (unsigned char)((uint64_t)len >> (8 * i));
    base_file_write(f, len8, 8);
    base_file_write(f, text, len);
    /* dpc only runs on little-endian hosts, so floats go out as they are. */
    for (int i = 0; i < n; i++)
        base_file_write(f, t[i].data, sizeof(float) * (size_t)numel_of(t[i].ndim, t[i].shape));
    free(text);
    return base_file_commit(f, err, errlen);
}
