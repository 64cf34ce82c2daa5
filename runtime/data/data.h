/* runtime/data/data.h — datasets and batch preparation.
 *
 * A dataset is `count` records, each an 8-bit image in CHW order plus a
 * class label. The sources: the CIFAR-10 binary files, a built-in
 * synthetic set (10 classes, each a smooth random prototype image plus
 * per-image noise: learnable, CIFAR-shaped, deterministic from a seed), an
 * image folder (train/CLASS/FILE, JPEG or PNG, decoded and resized once, at load)
 * and .npy arrays.
 *
 * A batcher turns records into the float batches a program takes, as the
 * reference article does: scale to [0, 1]; for the training set, zero-pad,
 * random crop and random mirror; then normalise by mean/std. The epoch's
 * order and every random draw are pure functions of (seed, epoch, record),
 * so any batch of any epoch can be prepared by any thread, in any order,
 * with the same result.
 *
 * Usage:
 *     rt_dataset *train = rt_data_cifar10(dir, 1, err, sizeof err);  // or rt_data_synthetic
 *     rt_batcher b;
 *     rt_batcher_init(&b, train, &plan->schedule, 128, RT_BATCH_TRAIN, seed, 3, 32, 32,
 *                     err, sizeof err);
 *     int64_t *order = malloc(train->count * sizeof *order);
 *     rt_batcher_order(&b, epoch, order);            // once per epoch
 *     for (int64_t s = 0; s < b.batches; s++)
 *         rt_batcher_fill(&b, order, epoch, s * 128, 128, images, labels);
 *     rt_dataset_free(train);
 *
 * Training batches are normally prepared ahead by worker threads:
 * runtime/data/data.h.
 */
#ifndef DPC_RT_DATA_DATA_H
#define DPC_RT_DATA_DATA_H

#include <stddef.h>
#include <stdint.h>

#include "ir/ir.h"

typedef struct {
    char name[256]; /* "synthetic" or the folder */
    int64_t count;
    int c, h, w;
    int classes;
    uint8_t *pixels;    /* count x c x h x w */
    uint8_t *labels;    /* count */
    char **class_names; /* NULL, or `classes` names (an image folder's) */
} rt_dataset;

/* Record i: its c*h*w pixels, and its label in *label. */
const uint8_t *rt_dataset_get(const rt_dataset *ds, int64_t i, int *label);
void rt_dataset_free(rt_dataset *ds);

/* The synthetic set: `count` images of c x h x w in 10 classes. Train and
 * test (split 1 / 0) share the class prototypes, not the images. */
rt_dataset *rt_data_synthetic(int64_t count, int c, int h, int w, int split, uint64_t seed);
#define RT_SYNTHETIC_TRAIN 5000
#define RT_SYNTHETIC_TEST  1000
#define RT_SYNTHETIC_SEED  20170608u /* fixed: like a real dataset, not --seed */

/* CIFAR-10 binary: data_batch_1..5.bin (train=1) or test_batch.bin, in dir
 * or in dir/cifar-10-batches-bin. Each file must be a regular, readable,
 * non-empty file of whole 3073-byte records (1 label byte + 3072 CHW
 * bytes) with labels 0-9. NULL and one message naming the file (and the
 * record) otherwise; nothing is half-loaded. */
rt_dataset *rt_data_cifar10(const char *dir, int train, char *err, size_t errlen);
/* The paths rt_data_cifar10 reads for dir: data_batch_1..5.bin, then
 * test_batch.bin (whether or not they exist; dprun refuses outputs that
 * name them). */
#define RT_CIFAR10_FILES 6
void rt_data_cifar10_paths(const char *dir, char paths[RT_CIFAR10_FILES][4200]);
/* One CIFAR-10 batch file already in memory (size bytes at data), checked
 * as rt_data_cifar10 checks each file, with the same messages naming
 * `name`. The dataset copies what it needs; NULL and a message otherwise. */
rt_dataset *rt_data_cifar10_parse(const char *name, const uint8_t *data, size_t size, char *err,
                                  size_t errlen);

/* ---- images: JPEG and PNG decoding (runtime/data/image.c), and image
 * folders (runtime/data/folder.c).
 *
 *     rt_image im;
 *     if (rt_image_load(path, 36, &im, err, sizeof err)) fail(err);  // RGB, h x w x 3
 *     rt_image_fit(&im, 36, 32, 32, chw);   // shorter side to 36, centre 32x32, CHW
 *     rt_image_free(&im);
 *
 * A build without libjpeg/libpng has the same functions; rt_image_load then
 * fails saying so. */
typedef struct {
    int w, h;
    uint8_t *rgb; /* h x w x 3 */
} rt_image;

#define RT_IMAGE_MAX_SIDE               16384
#define RT_IMAGE_MAX_PIXELS             (64 << 20)
#define RT_IMAGE_MAX_FILE               ((size_t)256 << 20)
/* A progressive JPEG: at most this many pixels (its coefficients, 2 bytes
 * a pixel and component, are held whole: 192 MB at most) and scans. */
#define RT_IMAGE_MAX_PROGRESSIVE_PIXELS (32 << 20)
#define RT_JPEG_MAX_SCANS               100
/* The bytes the decoders of all threads hold at once (pixels, progressive
 * coefficients); a decoder waits for its share. Above any one image's. */
#define RT_IMAGE_DECODE_BUDGET          ((size_t)1 << 30)
#define RT_MAX_CLASSES                  256 /* labels are bytes */

int rt_image_available(void);
#define RT_IMAGE_MISSING                                                     \
    "dpc was built without libjpeg/libpng, which image files need (install " \
    "libjpeg62-turbo-dev and libpng-dev, then rebuild)"
/* Decodes the JPEG or PNG at path (told apart by its first bytes) to 8-bit
 * RGB: grey is repeated, alpha dropped. `want`: the shorter side the caller
 * will resize to, so a JPEG much larger is decoded at a DCT scale n/8 that
 * keeps at least that (0: full size). 0, or -1 + one message naming path. */
int rt_image_load(const char *path, int want, rt_image *im, char *err, size_t errlen);
/* The same for a file already in memory (size bytes at data), named path. */
int rt_image_decode(const char *path, const uint8_t *data, size_t size, int want, rt_image *im,
                    char *err, size_t errlen);
void rt_image_free(rt_image *im);
/* Bilinear resize of the shorter side to `side` (>= oh, ow), then the centre
 * oh x ow crop, into out as 3 x oh x ow bytes (CHW). */
void rt_image_fit(const rt_image *im, int side, int oh, int ow, uint8_t *out);

/* An image folder: dir/train/CLASS/FILE (train=1) or dir/val/CLASS/FILE;
 * the classes are train's subfolders in strcmp order (val must have the
 * same), files in strcmp order, names starting with '.' skipped. Every
 * image is decoded and fitted (rt_image_fit) to h x w (the caller passes
 * side x side for a random crop to come, else the input's size), on
 * `threads` threads (1: this one only; the same bytes either way). A file
 * that is not a regular file or not an image is refused naming it. stop
 * (NULL: none) is asked before each image; once it says 1, no thread
 * takes another and the load fails ("stopped by a signal"). */
rt_dataset *rt_data_imagefolder(const char *dir, int train, int side, int h, int w, int threads,
                                int (*stop)(void), char *err, size_t errlen);
/* Images paths[0..n) fitted into out (n x 3 x h x w), on `threads`
 * threads, stop as above; 0, or -1 + the message of the first (by index)
 * that failed. */
int rt_images_fit_all(const char *const *paths, int n, int side, int h, int w, int threads,
                      int (*stop)(void), uint8_t *out, char *err, size_t errlen);
/* The class names of a CIFAR-10 folder (its batches.meta.txt's lines),
 * of dir/train (an image folder) or, when path is a file, its lines (blank
 * ones at the end left out): *n names, NULL + message otherwise. Free with
 * rt_names_free. */
char **rt_data_class_names(const char *path, int *n, char *err, size_t errlen);
void rt_names_free(char **names, int n);
/* The files under dir, subfolders included (to depth 8), each folder's
 * entries in strcmp order, hidden names skipped, as paths dir/...: what
 * `dprun predict DIR` classifies. Links to folders are followed, but each
 * folder (by device and inode) is walked once, so a link loop ends; more
 * than RT_PREDICT_MAX_IMAGES files are refused. *n files (at least 1),
 * NULL + message. */
#define RT_PREDICT_MAX_IMAGES 1000000
char **rt_data_image_files(const char *dir, int *n, char *err, size_t errlen);

/* .npy arrays (runtime/data/npy.c): dir/train_x.npy, train_y.npy (train=1)
 * or test_x.npy, test_y.npy. x: uint8 or float32 (scaled by 255 and
 * rounded back to bytes; values must lie in [0, 1]), N x H x W x C or
 * N x C x H x W (C in 1..3; the layout is the one whose channel count
 * matches c); y: N integer labels (u1, i1, i2, i4, i8, u2, u4, u8) in
 * 0 .. RT_MAX_CLASSES-1. Headers are parsed strictly: anything else is
 * refused naming the file. The records (N x C x H x W bytes) must fit in
 * half the host's memory, checked from x's header before they are
 * allocated; x's data is then read through a 4 MB buffer straight into
 * them, never held whole (the labels file is read whole). */
rt_dataset *rt_data_npy(const char *dir, int train, int c, char *err, size_t errlen);
/* The same for the two files already in memory. */
rt_dataset *rt_data_npy_parse(const char *xname, const uint8_t *x, size_t xsize, const char *yname,
                              const uint8_t *y, size_t ysize, int c, char *err, size_t errlen);

/* How a batcher treats its dataset. */
typedef enum {
    RT_BATCH_TRAIN,      /* shuffled, augmented; the last partial batch is dropped */
    RT_BATCH_EVAL,       /* dataset order, normalise only; the last batch is padded */
    RT_BATCH_TRAIN_EVAL, /* the training set augmented as in training, dataset
                          * order, last batch padded: the article's train accuracy */
} rt_batch_mode;

typedef struct {
    const rt_dataset *ds;
    rt_batch_mode mode;
    int shuffle, augment;  /* from the mode, then --no-shuffle / --no-augment */
    int pad, crop, mirror; /* augmentation from the train section */
    int oc, oh, ow;        /* output image shape (the program's input) */
    float lut[3][256];     /* pixel value -> normalised float, per channel */
    uint64_t seed;
    int batch;
    int64_t batches; /* per epoch */
    /* Batch k of an epoch is positions [k*stride + offset, + batch) of the
     * epoch's order: stride = batch and offset 0, unless sharded. */
    int64_t stride, offset;
    /* A token batcher (rt_batcher_tokens): ds is NULL; a sample is a
     * window, its `block` token ids (int32, in the float-sized slots of
     * images: oc = oh = 1, ow = block) and its `block` targets in labels. */
    const struct rt_tokens *tok;
    int64_t block;
    int64_t windows; /* RT_BATCH_EVAL: the validation windows read */
    int label_elems; /* labels per sample: 1, or block */
} rt_batcher;

/* Checks the dataset fits the program's image input (c, h, w) and the train
 * section's augmentation. 0, or -1 with a message. */
int rt_batcher_init(rt_batcher *b, const rt_dataset *ds, const ir_train *t, int batch,
                    rt_batch_mode mode, uint64_t seed, int c, int h, int w, char *err,
                    size_t errlen);
/* Data parallelism across processes: b (made with the batch of this
 * process's replicas) delivers this process's slice of every global batch,
 * positions [k*global + offset, + b->batch) of the epoch's order, with as
 * many batches per epoch as the global batch has. So P processes see
 * together exactly the samples one process with the global batch sees.
 * 0, or -1 with a message. */
int rt_batcher_shard(rt_batcher *b, int global, int offset, char *err, size_t errlen);
/* The epoch's record order (ds->count entries): a seeded Fisher-Yates
 * shuffle, or the identity when not shuffling. */
void rt_batcher_order(const rt_batcher *b, int epoch, int64_t *order);
/* Where one sample's pixels come from: the top-left corner (oy, ox) of the
 * crop in the zero-padded image (0 .. h + 2 pad - crop), and whether the
 * crop is mirrored left-right. */
typedef struct {
    int oy, ox;
    int flip;
} rt_augment;

/* The draws for record `rec` in `epoch`: random when augmenting (a pure
 * function of seed, mode, epoch, record), else the centre crop, no mirror. */
void rt_batcher_draw(const rt_batcher *b, int epoch, int64_t rec, rt_augment *a);
/* Record `rec` as the program's input (oc x oh x ow floats): scale to
 * [0, 1], zero-pad, crop at a, mirror if a->flip, normalise. */
void rt_batcher_prepare(const rt_batcher *b, int64_t rec, const rt_augment *a, float *out);

/* Fills n samples, positions [first, first + n) of the epoch's order, into
 * images (n x oc x oh x ow floats) and labels. Positions past the end are
 * zero images with label 0. Returns the number of real samples. Thread
 * safe: reads only b, order and the dataset. */
int rt_batcher_fill(const rt_batcher *b, const int64_t *order, int epoch, int64_t first, int n,
                    float *images, int32_t *labels);

/* ---- worker threads that prepare batches ahead of the
 * training step, so the step never waits on input in steady state.
 *
 * A pipeline delivers `count` batches of one batcher in sequence: with
 * p = first_index + k, batch k of the sequence is batch p % batches of
 * epoch first_epoch + p / batches (the epoch's own shuffled order,
 * reshuffled every epoch); first_index > 0 starts mid-epoch (a resumed run). `workers`
 * threads fill a ring of `depth` slots ahead of the consumer, across epoch
 * boundaries too, so the first batch of an epoch is ready while the last
 * one of the previous epoch (or an evaluation) runs.
 *
 * Every batch's content is a pure function of (seed, epoch, index) — see
 * runtime/data/data.h — so which thread prepares which batch, and when, never
 * changes what the consumer sees: 0, 1 or 8 workers give identical bytes.
 *
 * Usage:
 *     rt_pipeline_config cfg = rt_pipeline_defaults();  // 2 workers, 4 slots
 *     cfg.count = epochs * b.batches;
 *     rt_pipeline *p = rt_pipeline_new(&b, &cfg, err, sizeof err);
 *     const rt_batch *bt;
 *     while ((bt = rt_pipeline_next(p))) {           // blocks only if not ready yet
 *         copy bt->images / bt->labels to the device;
 *         rt_pipeline_release(p);                    // the slot goes back to the workers
 *         run the step;
 *     }
 *     rt_pipeline_stats st; rt_pipeline_get_stats(p, &st);  // how long next() waited
 *     rt_pipeline_free(p);                           // stops and joins the workers, any time
 *
 * One consumer thread only. The slots are host memory from cfg.host_alloc
 * (default: 64-byte aligned malloc), so a backend that wants page-locked
 * memory for its copies can supply its own allocator.
 */

typedef struct rt_pipeline rt_pipeline;

/* One prepared batch. images and labels are valid from rt_pipeline_next
 * until rt_pipeline_release (then the workers refill that memory); the
 * other fields until the next rt_pipeline_next. */
typedef struct {
    const float *images;   /* batch x oc x oh x ow */
    const int32_t *labels; /* batch */
    int real;              /* samples that are real; the rest is padding (eval) */
    int epoch;
    int64_t index; /* batch index within the epoch */
    int64_t seq;   /* position in the pipeline's sequence */
} rt_batch;

typedef struct {
    int workers;         /* threads; 0 prepares each batch inside rt_pipeline_next */
    int depth;           /* slots (batches in flight); at least 2, 0 for workers + 2 */
    int first_epoch;     /* epoch of the sequence's first batch */
    int64_t first_index; /* its index in that epoch (0 .. batches-1) */
    int64_t count;       /* batches to deliver */
    void *(*host_alloc)(void *ctx, size_t bytes); /* NULL: aligned malloc */
    void (*host_free)(void *ctx, void *ptr);
    void *alloc_ctx;
} rt_pipeline_config;

/* How long the consumer waited for input, over all next() calls so far. */
typedef struct {
    int64_t delivered; /* batches handed out */
    int64_t stalls;    /* next() calls that had to wait */
    double wait_s;     /* total time next() waited */
    double max_wait_s; /* longest single wait */
} rt_pipeline_stats;

#define RT_PIPELINE_WORKERS     2
#define RT_PIPELINE_MAX_WORKERS 64

rt_pipeline_config rt_pipeline_defaults(void);
/* Starts the workers. NULL + message when the configuration is invalid or
 * a thread cannot be started. */
rt_pipeline *rt_pipeline_new(const rt_batcher *b, const rt_pipeline_config *cfg, char *err,
                             size_t errlen);
/* The next batch of the sequence, waiting for it if needed; NULL after the
 * last. Releases the previous batch if the caller has not. */
const rt_batch *rt_pipeline_next(rt_pipeline *p);
/* Hands the current batch's slot back to the workers. */
void rt_pipeline_release(rt_pipeline *p);
void rt_pipeline_get_stats(rt_pipeline *p, rt_pipeline_stats *st);
/* Stops the workers (each finishes the batch in hand), joins them, frees
 * everything. NULL is fine. */
void rt_pipeline_free(rt_pipeline *p);

/* ---- token files (runtime/data/tokens.c): a language model's data.
 *
 * Little-endian uint16 ids (nanoGPT's train.bin / val.bin), held whole.
 * Sample j of a training step is the window of T+1 tokens at
 * rt_tokens_offset(seed, step, j) (tokens = w[0:T], targets = w[1:T+1]);
 * replica r fills samples r*local .. r*local + local - 1 of the step's
 * global batch, so the replicas' shares are disjoint and no draw depends
 * on which worker or thread fills a sample. Validation window k is at
 * offset k*T.
 *
 *     rt_tokens *tr = rt_tokens_load(path, T, vocab, err, sizeof err);
 *     rt_tokens_fill_train(tr, T, seed, step, replica, local, 0, local, tok, tgt);
 *     rt_tokens_free(tr);
 */
typedef struct rt_tokens {
    char name[256]; /* the file, for messages */
    int64_t count;  /* tokens */
    uint16_t *tok;
} rt_tokens;

#define RT_TOKENS_MAX_FILE ((size_t)4 << 30)
/* path: a regular file of an even size, at most RT_TOKENS_MAX_FILE bytes,
 * at least block + 1 tokens, every token below vocab (vocab 0: any). NULL
 * and one message naming the file (and a bad token's value and place). */
rt_tokens *rt_tokens_load(const char *path, int64_t block, int64_t vocab, char *err, size_t errlen);
void rt_tokens_free(rt_tokens *t);
/* The window offset of global sample `sample` of training step `step`, in
 * [0, count - block - 1]: a pure function of its arguments. */
int64_t rt_tokens_offset(const rt_tokens *t, int64_t block, uint64_t seed, int64_t step,
                         int64_t sample);
/* Samples first .. first+n-1 of replica's local batch of `local` samples
 * into tokens / targets [local, block] (rows first..first+n-1). */
void rt_tokens_fill_train(const rt_tokens *t, int64_t block, uint64_t seed, int64_t step,
                          int replica, int64_t local, int64_t first, int64_t n, int32_t *tokens,
                          int32_t *targets);
/* The whole validation windows of the file, and windows first..first+n-1. */
int64_t rt_tokens_val_windows(const rt_tokens *t, int64_t block);
void rt_tokens_fill_val(const rt_tokens *t, int64_t block, int64_t first, int64_t n,
                        int32_t *tokens, int32_t *targets);

/* A batcher of token windows for the pipeline (runtime/data/data.h's
 * rt_batch: images holds the tokens as int32, labels the targets).
 * RT_BATCH_TRAIN: batch k of epoch e is training step e*batches + k, its
 * sample j the window of global sample (k*stride + offset + j) % stride
 * (rt_tokens_offset), so a shard (rt_batcher_shard) fills its own part of
 * every global batch; batches = windows of T+1 in the file / batch.
 * RT_BATCH_EVAL: window p at p*T, the first max_windows (0: all), the last
 * batch padded. 0, or -1 + message. */
int rt_batcher_tokens(rt_batcher *b, const rt_tokens *t, int64_t block, int batch,
                      rt_batch_mode mode, uint64_t seed, int64_t max_windows, char *err,
                      size_t errlen);
/* rt_batcher_fill for a token batcher: the windows, the real count. */
int rt_tokens_batch_fill(const rt_batcher *b, int epoch, int64_t first, int n, int32_t *tokens,
                         int32_t *targets);

/* ---- the deterministic generator behind every random draw
 * (parameter init now; shuffling and augmentation later).
 *
 * xoshiro256** seeded through splitmix64, so any 64-bit seed (0 included)
 * gives a well-mixed state, and the same seed gives the same stream on
 * every machine.
 *
 * Usage:
 *     rt_rng r;
 *     rt_rng_seed(&r, seed);
 *     uint64_t x = rt_rng_next(&r);
 *     float u = rt_rng_uniform(&r);             // [0, 1)
 *     float v = rt_rng_uniform_range(&r, -a, a);
 *     rt_rng child = rt_rng_split(&r);           // an independent stream
 */

typedef struct {
    uint64_t s[4];
} rt_rng;

void rt_rng_seed(rt_rng *r, uint64_t seed);
uint64_t rt_rng_next(rt_rng *r);
/* 24 random bits as a float in [0, 1): every value exactly representable. */
float rt_rng_uniform(rt_rng *r);
/* lo + (hi - lo) * u in double, rounded once to float. */
float rt_rng_uniform_range(rt_rng *r, float lo, float hi);
/* Uniform integer in [0, n) without modulo bias; n >= 1. */
uint64_t rt_rng_below(rt_rng *r, uint64_t n);
/* A new generator seeded from this one's next output. */
rt_rng rt_rng_split(rt_rng *r);
/* A 64-bit key that is a pure function of (seed, a, b), splitmix64 chained:
 * dropout's per-step, per-replica mask key (runtime/train/replicas.c). */
uint64_t rt_rng_key(uint64_t seed, uint64_t a, uint64_t b);

#endif
