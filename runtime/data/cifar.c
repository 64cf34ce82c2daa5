/* runtime/data/cifar.c — CIFAR-10 reader, synthetic dataset, batch preparation. */
#include "runtime/data/data.h"
#include "base/err.h"
#include "base/file.h"

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/stat.h>

#include "runtime/check.h"

/* A generator for one (seed, a, b, c) key. Chaining the key through the
 * seeding keeps streams for neighbouring epochs or records unrelated, and
 * makes every draw independent of which thread asks first. */
static rt_rng stream(uint64_t seed, uint64_t a, uint64_t b, uint64_t c) {
    rt_rng r;
    rt_rng_seed(&r, seed);
    rt_rng_seed(&r, rt_rng_next(&r) ^ a);
    rt_rng_seed(&r, rt_rng_next(&r) ^ b);
    rt_rng_seed(&r, rt_rng_next(&r) ^ c);
    return r;
}

/* Stream tags, so no two uses of the seed draw the same numbers. */
enum { TAG_SYNTH_PROTO = 1, TAG_SYNTH_IMAGE, TAG_SHUFFLE, TAG_AUGMENT, TAG_AUGMENT_EVAL };

const uint8_t *rt_dataset_get(const rt_dataset *ds, int64_t i, int *label) {
    if (label) *label = ds->labels[i];
    return ds->pixels + (size_t)i * (size_t)(ds->c * ds->h * ds->w);
}

/* Here, with the dataset that owns its class names, so every reader of
 * data links it (bench/pipeline.sh builds from these sources alone). */
void rt_names_free(char **names, int n) {
    for (int i = 0; names && i < n; i++) free(names[i]);
    free(names);
}

void rt_dataset_free(rt_dataset *ds) {
    if (!ds) return;
    free(ds->pixels);
    free(ds->labels);
    rt_names_free(ds->class_names, ds->classes);
    free(ds);
}

static rt_dataset *dataset_new(int64_t count, int c, int h, int w) {
    rt_dataset *ds = calloc(1, sizeof *ds);
    RT_CHECK_ALLOC(ds);
    ds->count = count, ds->c = c, ds->h = h, ds->w = w, ds->classes = 10;
    ds->pixels = malloc((size_t)count * (size_t)(c * h * w) + 1);
    ds->labels = malloc((size_t)count + 1);
    RT_CHECK_ALLOC(ds->pixels);
    RT_CHECK_ALLOC(ds->labels);
    return ds;
}

/* ---- synthetic ------------------------------------------------------------ */

/* Each class is a 4x4 grid of random colours, bilinearly stretched to h x w:
 * smooth, so a 4-pixel shift or a mirror keeps most of its signature. An
 * image is its class's prototype, shifted by a random brightness per
 * channel (+-40), plus uniform pixel noise (+-64): easy to learn, but not
 * in a handful of steps. */
#define PROTO_GRID 4

rt_dataset *rt_data_synthetic(int64_t count, int c, int h, int w, int split, uint64_t seed) {
    rt_dataset *ds = dataset_new(count, c, h, w);
    snprintf(ds->name, sizeof ds->name, "synthetic");
    size_t plane = (size_t)h * (size_t)w, img = (size_t)c * plane;
    float *proto = malloc(10 * img * sizeof *proto);
    RT_CHECK_ALLOC(proto);
    for (int k = 0; k < 10; k++) {
        rt_rng r = stream(seed, TAG_SYNTH_PROTO, (uint64_t)k, 0);
        float grid[PROTO_GRID][PROTO_GRID];
        for (int ch = 0; ch < c; ch++) {
            for (int gy = 0; gy < PROTO_GRID; gy++)
                for (int gx = 0; gx < PROTO_GRID; gx++)
                    grid[gy][gx] = 64 + 128 * rt_rng_uniform(&r);
            for (int y = 0; y < h; y++)
                for (int x = 0; x < w; x++) {
                    float fy = h > 1 ? (float)y * (PROTO_GRID - 1) / (float)(h - 1) : 0;
                    float fx = w > 1 ? (float)x * (PROTO_GRID - 1) / (float)(w - 1) : 0;
                    int y0 = (int)fy, x0 = (int)fx;
                    int y1 = y0 + 1 < PROTO_GRID ? y0 + 1 : y0,
                        x1 = x0 + 1 < PROTO_GRID ? x0 + 1 : x0;
                    float ay = fy - (float)y0, ax = fx - (float)x0;
                    float top = grid[y0][x0] * (1 - ax) + grid[y0][x1] * ax;
                    float bot = grid[y1][x0] * (1 - ax) + grid[y1][x1] * ax;
                    proto[(size_t)k * img + (size_t)ch * plane + (size_t)y * (size_t)w + (size_t)x] =
                        top * (1 - ay) + bot * ay;
                }
        }
    }
    for (int64_t i = 0; i < count; i++) {
        rt_rng r = stream(seed, TAG_SYNTH_IMAGE, (uint64_t)split, (uint64_t)i);
        int k = (int)rt_rng_below(&r, 10);
        ds->labels[i] = (uint8_t)k;
        uint8_t *dst = ds->pixels + (size_t)i * img;
        for (int ch = 0; ch < c; ch++) {
            float shift = rt_rng_uniform_range(&r, -40, 40);
            for (size_t j = (size_t)ch * plane; j < (size_t)(ch + 1) * plane; j++) {
                float v = proto[(size_t)k * img + j] + shift + rt_rng_uniform_range(&r, -64, 64);
                dst[j] = (uint8_t)(v < 0 ? 0 : v > 255 ? 255 : lrintf(v));
            }
        }
    }
    free(proto);
    return ds;
}

/* ---- CIFAR-10 binary -------------------------------------------------------- */

#define CIFAR_RECORD 3073 /* 1 label byte + 3 x 32 x 32 */
#define CIFAR_IMAGE  (CIFAR_RECORD - 1)

/* Checks that a batch file of `size` bytes is non-empty and holds whole
 * records; its record count in *records. `name` is the file, for messages. */
static int check_size(const char *name, size_t size, size_t *records, char *err, size_t errlen) {
    if (size == 0)
        return base_fail(err, errlen,
                         "%s: size 0: the file is empty (a CIFAR-10 batch file holds %d-byte "
                         "records)",
                         name, CIFAR_RECORD);
    if (size % CIFAR_RECORD)
        return base_fail(
            err, errlen,
            "%s: size %zu is not a whole number of %d-byte CIFAR-10 records: "
            "record %zu has only %zu bytes (truncated, extra bytes, or not CIFAR-10 binary?)",
            name, size, CIFAR_RECORD, size / CIFAR_RECORD, size % CIFAR_RECORD);
    *records = size / CIFAR_RECORD;
    return 0;
}

/* Checks record r (CIFAR_RECORD bytes at rec) of file `name` and stores it
 * as record r of labels/pixels. */
static int take_record(const char *name, size_t r, const uint8_t *rec, uint8_t *labels,
                       uint8_t *pixels, char *err, size_t errlen) {
    if (rec[0] > 9)
        return base_fail(err, errlen,
                         "%s: record %zu has label %d; CIFAR-10 labels are 0-9 (byte %zu of "
                         "the file)",
                         name, r, rec[0], r * CIFAR_RECORD);
    labels[r] = rec[0];
    memcpy(pixels + r * CIFAR_IMAGE, rec + 1, CIFAR_IMAGE);
    return 0;
}

/* Checks that path is a non-empty regular file of whole records; its
 * record count in *records. The sizes of every file are checked before any
 * is read, so a bad last file fails in milliseconds, not after 150 MB. */
static int check_file(const char *path, size_t *records, char *err, size_t errlen) {
    struct stat sb;
    if (stat(path, &sb) != 0)
        return base_fail(err, errlen,
                         "%s: %s (a CIFAR-10 binary folder holds data_batch_1..5.bin and "
                         "test_batch.bin)",
                         path, strerror(errno));
    if (S_ISDIR(sb.st_mode))
        return base_fail(err, errlen, "%s: is a folder, not a CIFAR-10 batch file", path);
    /* What it is, by base_file's rule for every reader (a FIFO, a device, a
     * file of /proc or /sys refused), opened and closed: nothing is read. */
    long long size;
    int fd = base_file_open_read(path, &size, err, errlen);
    if (fd < 0) return -1;
    close(fd);
    return check_size(path, (size_t)size, records, err, errlen);
}

/* Reads `records` records of path into labels/pixels, checking labels.
 * Record by record through stdio's buffer: no second copy of the file. */
static int read_records(const char *path, size_t records, uint8_t *labels, uint8_t *pixels,
                        char *err, size_t errlen) {
    /* Opened as a regular file again (base_file_open_read: O_NONBLOCK, then
     * fstat), so one swapped for a FIFO since check_file cannot hang us. */
    long long size;
    int fd = base_file_open_read(path, &size, err, errlen);
    if (fd < 0) return -1;
    FILE *f = fdopen(fd, "rb");
    if (!f) {
        close(fd);
        return base_fail(err, errlen, "%s: cannot open: %s", path, strerror(errno));
    }
    uint8_t rec[CIFAR_RECORD];
    int rc = 0;
    for (size_t r = 0; r < records && !rc; r++) {
        size_t got = fread(rec, 1, CIFAR_RECORD, f);
        if (got != CIFAR_RECORD)
            rc = base_fail(err, errlen, "%s: record %zu: read %zu of %d bytes: %s", path, r, got,
                           CIFAR_RECORD,
                           ferror(f) ? strerror(errno) : "the file shrank while being read");
        else
            rc = take_record(path, r, rec, labels, pixels, err, errlen);
    }
    fclose(f);
    return rc;
}

rt_dataset *rt_data_cifar10_parse(const char *name, const uint8_t *data, size_t size, char *err,
                                  size_t errlen) {
    size_t records;
    if (check_size(name, size, &records, err, errlen)) return NULL;
    rt_dataset *ds = dataset_new((int64_t)records, 3, 32, 32);
    snprintf(ds->name, sizeof ds->name, "%.250s", name);
    for (size_t r = 0; r < records; r++)
        if (take_record(name, r, data + r * CIFAR_RECORD, ds->labels, ds->pixels, err, errlen)) {
            rt_dataset_free(ds);
            return NULL;
        }
    return ds;
}

/* The five training batches, then the test batch. */
static const char *const cifar_files[RT_CIFAR10_FILES] = {"data_batch_1.bin", "data_batch_2.bin",
                                                          "data_batch_3.bin", "data_batch_4.bin",
                                                          "data_batch_5.bin", "test_batch.bin"};

/* Accept the folder the archive unpacks to, or its parent. */
static void cifar_base(const char *dir, char *base, size_t len) {
    char path[4200];
    base_path_join(path, sizeof path, dir, "cifar-10-batches-bin/test_batch.bin");
    struct stat sb;
    if (stat(path, &sb) == 0)
        base_path_join(base, len, dir, "cifar-10-batches-bin");
    else
        snprintf(base, len, "%s", dir);
}

void rt_data_cifar10_paths(const char *dir, char paths[RT_CIFAR10_FILES][4200]) {
    char base[4096];
    cifar_base(dir, base, sizeof base);
    for (int f = 0; f < RT_CIFAR10_FILES; f++) base_path_join(paths[f], 4200, base, cifar_files[f]);
}

rt_dataset *rt_data_cifar10(const char *dir, int train, char *err, size_t errlen) {
    char base[4096], path[4200];
    cifar_base(dir, base, sizeof base);
    struct stat sb;
    if (stat(base, &sb) != 0 || !S_ISDIR(sb.st_mode)) {
        base_fail(err, errlen,
                  "%s: not a folder (--data takes a CIFAR-10 binary folder or 'synthetic')", dir);
        return NULL;
    }
    const char *const *names = train ? cifar_files : cifar_files + 5;
    int nfiles = train ? 5 : 1;
    size_t records[5], total = 0;
    for (int f = 0; f < nfiles; f++) {
        base_path_join(path, sizeof path, base, names[f]);
        if (check_file(path, &records[f], err, errlen)) return NULL;
        total += records[f];
    }
    rt_dataset *ds = dataset_new((int64_t)total, 3, 32, 32);
    snprintf(ds->name, sizeof ds->name, "%.250s", base);
    size_t at = 0;
    for (int f = 0; f < nfiles; f++) {
        base_path_join(path, sizeof path, base, names[f]);
        if (read_records(path, records[f], ds->labels + at, ds->pixels + at * CIFAR_IMAGE, err,
                         errlen)) {
            rt_dataset_free(ds);
            return NULL;
        }
        at += records[f];
    }
    return ds;
}

/* ---- batches ------------------------------------------------------------- */

int rt_batcher_init(rt_batcher *b, const rt_dataset *ds, const ir_train *t, int batch,
                    rt_batch_mode mode, uint64_t seed, int c, int h, int w, char *err,
                    size_t errlen) {
    memset(b, 0, sizeof *b);
    b->ds = ds, b->mode = mode, b->seed = seed, b->batch = batch;
    b->stride = batch, b->offset = 0;
    b->oc = c, b->oh = h, b->ow = w;
    b->label_elems = 1;
    b->shuffle = mode == RT_BATCH_TRAIN;
    b->augment = mode != RT_BATCH_EVAL && (t->pad > 0 || t->random_crop > 0 || t->random_mirror);
    b->pad = t->pad, b->crop = t->random_crop, b->mirror = t->random_mirror;
    if (batch <= 0) return base_fail(err, errlen, "batch must be positive, got %d", batch);
    if (ds->count <= 0) return base_fail(err, errlen, "%s: the dataset is empty", ds->name);
    if (c != ds->c || c < 1 || c > 3)
        return base_fail(err, errlen,
                         "%s: images have %d channels but the program's image input has %d",
                         ds->name, ds->c, c);
    if (b->crop > 0 && (b->crop != h || b->crop != w))
        return base_fail(err, errlen, "random_crop %d does not give the program's %dx%d images",
                         b->crop, h, w);
    if (b->crop > 0 && (b->crop > ds->h + 2 * b->pad || b->crop > ds->w + 2 * b->pad))
        return base_fail(err, errlen, "random_crop %d is larger than the padded %dx%d images",
                         b->crop, ds->h + 2 * b->pad, ds->w + 2 * b->pad);
    if (b->crop == 0 && (ds->h != h || ds->w != w))
        return base_fail(err, errlen,
                         "%s: images are %dx%dx%d but the program's image input is %dx%dx%d",
                         ds->name, ds->c, ds->h, ds->w, c, h, w);
    for (int ch = 0; ch < c; ch++)
        for (int v = 0; v < 256; v++) {
            float x = (float)v / 255.0f;
            b->lut[ch][v] = t->normalize ? (float)((x - t->mean[ch]) / t->std[ch]) : x;
        }
    if (mode == RT_BATCH_TRAIN) {
        b->batches = ds->count / batch;
        if (b->batches == 0)
            return base_fail(err, errlen, "%s: %lld training images do not fill one batch of %d",
                             ds->name, (long long)ds->count, batch);
    } else {
        b->batches = (ds->count + batch - 1) / batch;
    }
    return 0;
}

int rt_batcher_shard(rt_batcher *b, int global, int offset, char *err, size_t errlen) {
    if (global < b->batch || offset < 0 || offset + b->batch > global)
        return base_fail(err, errlen,
                         "a slice of %d samples at %d does not fit a global batch of %d", b->batch,
                         offset, global);
    int64_t count = b->tok ? b->tok->count / (b->block + 1) : b->ds->count; /* records, windows */
    int64_t batches = b->mode == RT_BATCH_TRAIN ? count / global : (count + global - 1) / global;
    if (batches == 0)
        return base_fail(err, errlen, "%s: %lld training %s do not fill one global batch of %d",
                         b->tok ? b->tok->name : b->ds->name, (long long)count,
                         b->tok ? "windows" : "images", global);
    b->stride = global, b->offset = offset, b->batches = batches;
    return 0;
}

void rt_batcher_order(const rt_batcher *b, int epoch, int64_t *order) {
    int64_t n = b->ds->count;
    for (int64_t i = 0; i < n; i++) order[i] = i;
    if (!b->shuffle) return;
    rt_rng r = stream(b->seed, TAG_SHUFFLE, (uint64_t)epoch, 0);
    for (int64_t i = n - 1; i > 0; i--) {
        int64_t j = (int64_t)rt_rng_below(&r, (uint64_t)i + 1);
        int64_t tmp = order[i];
        order[i] = order[j];
        order[j] = tmp;
    }
}

void rt_batcher_draw(const rt_batcher *b, int epoch, int64_t rec, rt_augment *a) {
    const rt_dataset *ds = b->ds;
    /* Without augmentation a crop is taken from the centre (a no-op when
     * the image already has the program's size). */
    a->oy = b->pad + (ds->h - b->oh) / 2;
    a->ox = b->pad + (ds->w - b->ow) / 2;
    a->flip = 0;
    if (!b->augment) return;
    uint64_t tag = b->mode == RT_BATCH_TRAIN ? TAG_AUGMENT : TAG_AUGMENT_EVAL;
    rt_rng r = stream(b->seed, tag, (uint64_t)epoch, (uint64_t)rec);
    if (b->crop > 0) {
        a->oy = (int)rt_rng_below(&r, (uint64_t)(ds->h + 2 * b->pad - b->crop + 1));
        a->ox = (int)rt_rng_below(&r, (uint64_t)(ds->w + 2 * b->pad - b->crop + 1));
    }
    if (b->mirror) a->flip = (int)rt_rng_below(&r, 2);
}

void rt_batcher_prepare(const rt_batcher *b, int64_t rec, const rt_augment *a, float *out) {
    const rt_dataset *ds = b->ds;
    const uint8_t *src = rt_dataset_get(ds, rec, NULL);
    /* Output (y, x) reads padded (y + oy, x' + ox), x' = x or ow-1-x when
     * mirrored, i.e. source (y + dy, x' + dx); outside the source is the
     * zero padding. [x0, x1) is where the source column is inside. */
    int dy = a->oy - b->pad, dx = a->ox - b->pad;
    int x0, x1;
    if (!a->flip) {
        x0 = -dx, x1 = ds->w - dx;
    } else {
        x0 = b->ow - ds->w + dx, x1 = b->ow + dx;
    }
    if (x0 < 0) x0 = 0;
    if (x1 > b->ow) x1 = b->ow;
    for (int c = 0; c < b->oc; c++) {
        const uint8_t *plane = src + (size_t)c * (size_t)(ds->h * ds->w);
        const float *lut = b->lut[c];
        for (int y = 0; y < b->oh; y++) {
            int sy = y + dy;
            float *row = out + ((size_t)c * (size_t)b->oh + (size_t)y) * (size_t)b->ow;
            if (sy < 0 || sy >= ds->h || x0 >= x1) {
                for (int x = 0; x < b->ow; x++) row[x] = lut[0];
                continue;
            }
            const uint8_t *srow = plane + (size_t)sy * (size_t)ds->w;
            for (int x = 0; x < x0; x++) row[x] = lut[0];
            if (!a->flip)
                for (int x = x0; x < x1; x++) row[x] = lut[srow[x + dx]];
            else
                for (int x = x0; x < x1; x++) row[x] = lut[srow[b->ow - 1 - x + dx]];
            for (int x = x1; x < b->ow; x++) row[x] = lut[0];
        }
    }
}

int rt_batcher_fill(const rt_batcher *b, const int64_t *order, int epoch, int64_t first, int n,
                    float *images, int32_t *labels) {
    if (b->tok) /* ids in the float-sized slots: a token batch's input is i32 */
        return rt_tokens_batch_fill(b, epoch, first, n, (int32_t *)(void *)images, labels);
    size_t img = (size_t)b->oc * (size_t)b->oh * (size_t)b->ow;
    int real = 0;
    for (int i = 0; i < n; i++) {
        int64_t pos = first + i;
        float *out = images + (size_t)i * img;
        if (pos < 0 || pos >= b->ds->count) {
            memset(out, 0, img * sizeof *out);
            labels[i] = 0;
            continue;
        }
        int64_t rec = order ? order[pos] : pos;
        labels[i] = b->ds->labels[rec];
        rt_augment a;
        rt_batcher_draw(b, epoch, rec, &a);
        rt_batcher_prepare(b, rec, &a, out);
        real++;
    }
    return real;
}
