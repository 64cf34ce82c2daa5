/* runtime/train/safetensors.h — read and write the safetensors format.
 *
 * A file is: u64 little-endian header length N, N bytes of JSON header, then
 * the raw tensor bytes. The header maps each tensor's name to
 *     {"dtype": "F32", "shape": [64, 3, 7, 7], "data_offsets": [BEGIN, END]}
 * (offsets relative to the first byte after the header) plus an optional
 * "__metadata__" object of string values. The format itself orders nothing;
 * the writer keeps the caller's order (definition order) both in the header
 * and in the data, and any reader (Python's `safetensors`, or json + numpy)
 * can load the result. Only F32 is read or written: dpc's master weights
 * and running statistics are F32.
 *
 * Usage:
 *     rt_st_entry e[] = {{"conv0.weight", 4, (int64_t[]){64, 3, 7, 7}, w}, ...};
 *     if (rt_st_write("p.safetensors", e, n, meta, err, sizeof err)) ...;
 *
 *     rt_st_file *f = rt_st_read("p.safetensors", err, sizeof err);  // NULL + message
 *     int i = rt_st_find(f, "conv0.weight");
 *     rt_st_copy(f, i, host_floats);        // f->tensors[i].shape says how many
 *     const char *m = rt_st_meta(f, "model");   // a "__metadata__" string, or NULL
 *     rt_st_free(f);
 *
 * The reader trusts nothing: only a regular file is read (a FIFO or
 * /dev/zero is refused at once), the header is checked against the file's
 * size before the data is read, the header length is bounded by the file, the
 * JSON subset parser checks every byte it reads, shapes must match the byte
 * ranges, ranges must tile the data section exactly (no overlaps, no holes,
 * as the reference implementation requires) and names must be unique.
 * Integers above 2^62 are refused by value, never wrapped. The names are
 * indexed by a hash set (seeded per file, so that no crafted names collide
 * by design): checking and finding them is linear, and a reader that knows
 * how many tensors it can use (rt_st_read_max) refuses a header listing
 * more as soon as it reads one too many. Names in messages go through
 * BASE_ESC (base/err.h): a file's control characters never reach a terminal.
 */
#ifndef DPC_RT_TRAIN_SAFETENSORS_H
#define DPC_RT_TRAIN_SAFETENSORS_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#define RT_ST_MAX_DIMS    8
/* The reference implementation refuses headers above 100 MB; so do we. */
#define RT_ST_MAX_HEADER  100000000ull
/* Tensors in any file (a header of 100 MB holds at most ~2 million). */
#define RT_ST_MAX_TENSORS (1 << 20)

typedef struct {
    const char *name;
    int ndim;
    const int64_t *shape;
    const float *data; /* numel floats */
} rt_st_entry;

/* Writes atomically through base_file (a fresh temporary, fsync, rename;
 * no planted link followed). meta: NULL, or pairs of
 * strings ending with NULL ({"model", "resnet18_v1", NULL}). 0 or -1 + err. */
/* s as a JSON string, with the escapes the grammar requires. */
void rt_json_string(FILE *f, const char *s);
int rt_st_write(const char *path, const rt_st_entry *t, int n, const char *const *meta, char *err,
                size_t errlen);
/* The same for dir/name, name one of dpc's own (base_file_open_in). */
int rt_st_write_in(const char *dir, const char *name, const rt_st_entry *t, int n,
                   const char *const *meta, char *err, size_t errlen);

typedef struct {
    char *name;
    int ndim;
    int64_t shape[RT_ST_MAX_DIMS];
    int64_t numel;
    uint64_t begin, end; /* byte range within the data section */
} rt_st_tensor;

typedef struct {
    int n; /* tensors, in header order */
    rt_st_tensor *tensors;
    unsigned char *bytes; /* the whole file */
    size_t size;
    size_t data_start; /* 8 + header length */
    int nmeta;         /* "__metadata__" string pairs, in header order */
    char **meta_keys, **meta_values;
    int *index; /* open addressing: tensor index + 1, 0 empty; mask + 1 slots */
    size_t mask;
    uint64_t seed;
} rt_st_file;

/* At most RT_ST_MAX_TENSORS tensors; _max: at most max_tensors (what the
 * caller can use), refused early. */
rt_st_file *rt_st_read(const char *path, char *err, size_t errlen);
rt_st_file *rt_st_read_max(const char *path, int max_tensors, char *err, size_t errlen);
/* Parses a copy of buf; name is used in messages (tests, fuzzing). */
rt_st_file *rt_st_parse(const char *name, const unsigned char *buf, size_t len, char *err,
                        size_t errlen);
rt_st_file *rt_st_parse_max(const char *name, const unsigned char *buf, size_t len, int max_tensors,
                            char *err, size_t errlen);
void rt_st_free(rt_st_file *f);
int rt_st_find(const rt_st_file *f, const char *name); /* -1 if absent */
/* The "__metadata__" string value of key, or NULL. */
const char *rt_st_meta(const rt_st_file *f, const char *key);
/* Copies tensor i's numel floats to host (any alignment in the file). */
void rt_st_copy(const rt_st_file *f, int i, float *host);

#endif
