/* runtime/files/files.h — the files of a run: safetensors (the format),
 * checkpoints (a run's position and tensors in one safetensors file) and
 * parameter files (--save-params, --load-params).
 *
 * The room reads and writes files and checks every byte it reads; it
 * knows plans, parameter stores and backends (format/, runtime/exec/,
 * runtime/device/) but not the training loop: the run that writes a
 * checkpoint, resumes from one or loads parameters (runtime/train/) calls
 * in here, never the other way.
 *
 *     safetensors.c        the reader: the file, its layout, the names' index
 *     safetensors_json.c   the reader's JSON subset parser of the header
 *     safetensors_write.c  the writer
 *     checkpoint.c         a checkpoint's tensors, written and loaded
 *     checkpoint_meta.c    a checkpoint's metadata read back: every value checked
 *     checkpoint_match.c   a checkpoint against the run resuming it: flags, metrics file
 *     params.c             parameter files
 */
#ifndef DPC_RT_FILES_H
#define DPC_RT_FILES_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "format/plan.h"

typedef struct rt_store rt_store;

/* ---- safetensors: read and write the format.
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

/* s as a JSON string, with the escapes the grammar requires, and valid
 * UTF-8 whatever s holds: a byte not part of a valid UTF-8 sequence (a
 * file name's \xff) is written \u00XX, XX its value. */
void rt_json_string(FILE *f, const char *s);
/* Writes atomically through base_file (a fresh temporary, fsync, rename;
 * no planted link followed). meta: NULL, or pairs of
 * strings ending with NULL ({"model", "resnet18_v1", NULL}). 0 or -1 + err. */
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

/* ---- checkpoints: what a run needs to continue bit-identically to one
 * that was never interrupted.
 *
 * A checkpoint is one safetensors file, DIR/checkpoint.safetensors, holding
 *   - every persistent tensor of replica 0 (parameters, BatchNorm running
 *     statistics, optimizer state) under its own name; parameters and
 *     optimizer state are identical on every replica after a step;
 *   - the BatchNorm statistics of replicas 1..n-1 as "replica.K/NAME"
 *     (per-device BatchNorm: they differ per replica);
 *   - in "__metadata__": the plan it belongs to (model name and the plan
 *     file's checksum), the run's position and counters (rt_ckpt_state),
 *     and "checksum": FNV-1a 64 over the metadata, the tensor table and
 *     all tensor bytes.
 * No random-generator state is stored: the epoch's order and every
 * augmentation draw are pure functions of (seed, epoch, record)
 * (runtime/data/data.h), so the seed and the step count place the data stream
 * exactly; the init generator is spent once the parameters exist.
 *
 * Writing is atomic (base/file.h: a fresh temporary, fsync, rename, an fsync
 * of DIR), so DIR always holds the previous complete checkpoint or the new
 * one, and no link planted in DIR is followed.
 *
 * Under mpirun the checkpoint is the job's: rank 0 writes one file holding
 * every process's replicas' statistics (gathered before the write) and
 * reads it on resume for every process (the tensors then travel over MPI:
 * runtime/train/resume.c). Statistics therefore go in and out as one host
 * array, replica after replica, S = rt_ckpt_stats_count floats each.
 *
 * Usage:
 *     rt_ckpt_state s = {...};                    // position and counters
 *     int64_t S = rt_ckpt_stats_count(plan, store0);
 *     float *stats = ...;                          // total * S
 *     rt_ckpt_stats_read(plan, store_r, stats + r * S);   // each replica r
 *     if (rt_ckpt_write(dir, plan, store0, total, stats, &s, err, sizeof err)) ...;
 *     if (rt_ckpt_exists(dir)) ...;               // before a fresh run: refuse
 *     if (rt_ckpt_read(dir, plan, store0, total, stats, &s, err, sizeof err)) ...;
 *     // then every replica's parameters become store0's, and
 *     rt_ckpt_stats_write(plan, store_r, stats + r * S);  // each replica r
 *
 * rt_ckpt_read checks everything (format, checksum, plan, replica count,
 * every tensor and shape, and every metadata value: each known key exactly
 * once, no other, each value in its range: a step count, flags, finite
 * losses and rates) before it writes a byte into the stores, and names what
 * is wrong: a corrupt, truncated or foreign checkpoint is refused, never
 * half-loaded. The checksum guards against damage only (anyone can
 * recompute it): a checkpoint is data, and nothing in it names a file that
 * dprun writes.
 */

#define RT_CKPT_FILE        "checkpoint.safetensors"
/* 3: the metrics file is the run's own (--metrics), checked by its prefix's
 * length and SHA-256; the pending metrics line as numbers; no path. */
#define RT_CKPT_VERSION     "3"
/* The longest metrics file a resume reads back. */
#define RT_CKPT_METRICS_MAX ((int64_t)1 << 30)

/* One epoch's metrics line (runtime/train/report.c writes it from these
 * numbers): the last finished epoch's is written when the next epoch ends or
 * the run finishes, so a checkpoint carries it. */
typedef struct {
    int64_t epoch;         /* -1: none */
    double lr, train_loss; /* train_loss NaN: every step of the epoch was skipped */
    int64_t batch, steps;
    double seconds, input_wait_s;
    double test_accuracy; /* -1: not measured (--eval-every) */
} rt_ckpt_metrics;

/* Where the run stands. The caller fills and checks the run-shape fields
 * (seed, data, batch) against its own options on resume. */
typedef struct {
    int64_t step; /* optimizer steps done: the next step's index */
    int64_t steps_per_epoch;
    int global_batch;
    uint64_t seed;
    char data[256]; /* dataset name ("synthetic" or the folder) */
    int shuffle, augment;
    double epoch_loss_sum; /* the current epoch's summed per-sample losses so far */
    int64_t epoch_skipped; /* steps of the current epoch dropped by --on-nan skip */
    double prev_lr;        /* the last step's lr (--momentum-correction) */
    double epoch_seconds;  /* the current epoch's time so far */
    double total_seconds;  /* the finished epochs' time */
    /* The metrics file as it was at this step: its length and the SHA-256 of
     * those bytes (hex). -1 and "": the run wrote none. A checkpoint names
     * no file: a resume writes the file its own --metrics names, after
     * checking that it starts with these bytes (rt_ckpt_check_metrics). */
    int64_t metrics_bytes;
    char metrics_sha256[65];
    rt_ckpt_metrics pending; /* the last finished epoch's line, not yet in the file */
    char flags[1024]; /* the flags that change the arithmetic: "--lr=0.1;--on-nan=stop;..." */
} rt_ckpt_state;

/* 1 when DIR holds a checkpoint file (valid or not), else 0. */
int rt_ckpt_exists(const char *dir);
/* Floats of one replica's BatchNorm running statistics (the tensors that
 * differ between replicas), and copies of them out of and into a store,
 * in store order. */
int64_t rt_ckpt_stats_count(const dpc_plan *plan, rt_store *st);
void rt_ckpt_stats_read(const dpc_plan *plan, rt_store *st, float *out);
void rt_ckpt_stats_write(const dpc_plan *plan, rt_store *st, const float *in);
/* Writes DIR/checkpoint.safetensors (creating DIR if needed) from replica
 * 0's store (parameters, optimizer state: every replica's) and the
 * statistics of all n replicas of the job (stats: n * S floats; replica 0's
 * are taken from store0). 0, or -1 + message; the previous checkpoint
 * stays. */
int rt_ckpt_write(const char *dir, const dpc_plan *plan, rt_store *store0, int n,
                  const float *stats, const rt_ckpt_state *s, char *err, size_t errlen);
/* Loads DIR's checkpoint of an n-replica job into store0 (everything of
 * replica 0), stats (every replica's statistics, n * S floats, replica 0's
 * first) and *s. 0, or -1 + message (store0 untouched). */
int rt_ckpt_read(const char *dir, const dpc_plan *plan, rt_store *store0, int n, float *stats,
                 rt_ckpt_state *s, char *err, size_t errlen);
/* The same from a checkpoint file's bytes (name: for messages; fuzzing). */
int rt_ckpt_load(const char *name, const unsigned char *buf, size_t len, const dpc_plan *plan,
                 rt_store *store0, int n, float *stats, rt_ckpt_state *s, char *err, size_t errlen);

/* The checks of a checkpoint against the run that resumes it, each 0 or
 * -1 + a message naming the checkpoint (path) and what differs. */
/* Its flags ("--k=v;...") against the run's: the same keys, each once,
 * with the same values. */
int rt_ckpt_check_flags(const char *path, const char *saved, const char *mine, char *err,
                        size_t errlen);
/* The metrics file `metrics` (its text: text, len; NULL when it does not
 * exist) against the prefix s recorded: at least s->metrics_bytes long,
 * those bytes hashing to s->metrics_sha256, and anything after them whole
 * metrics lines of the kind dprun writes (a run that went on after the
 * checkpoint), which the resumed run writes again. */
int rt_ckpt_check_metrics(const char *path, const rt_ckpt_state *s, const char *metrics,
                          const unsigned char *text, size_t len, char *err, size_t errlen);
/* The checkpoint's FNV-1a 64 checksum of a parsed file (every metadata
 * pair but "checksum", the tensor table, the bytes): what "checksum" holds. */
uint64_t rt_ckpt_checksum(const rt_st_file *f);

/* ---- parameter files: --save-params, --load-params.
 *
 * --save-params writes replica 0's parameters and BatchNorm statistics
 * (what the eval program holds: no optimizer state) in definition order;
 * --load-params reads them back after checking every name, shape and
 * value: all of them, or with a name map, allowed-missing patterns and
 * allow_unused a foreign or partial file, as PyTorch's
 * load_state_dict(strict=False) reports missing and unexpected keys.
 *
 * Usage:
 *     if (rt_params_save(plan, st, "p.safetensors", err, sizeof err)) ...;
 *     rt_params_load_options lo = {.path = "p.safetensors"};
 *     if (rt_params_load(plan, st, &lo, err, sizeof err)) ...;
 */
typedef struct {
    const char *path; /* the safetensors file */
    /* NULL, or a file of `DPC_NAME FILE_NAME` lines (`#` comments) saying
     * under which name the file holds a parameter. */
    const char *name_map;
    /* fnmatch globs over dpc names whose parameters the file may lack
     * (they keep the values the store holds: the seeded ones). */
    const char *const *allow_missing;
    int n_allow_missing;
    int allow_unused; /* the file's tensors no parameter takes are skipped (else refused) */
} rt_params_load_options;

/* 0 or -1 + err. */
int rt_params_save(const dpc_plan *plan, rt_store *st, const char *path, char *err, size_t errlen);
/* o->path into st; a report of what was loaded, initialised and skipped on
 * stderr (rt_log, runtime/log.h: each line under the program's prefix). 0 or -1 + err (st may then hold some of the file's tensors). */
int rt_params_load(const dpc_plan *plan, rt_store *st, const rt_params_load_options *o, char *err,
                   size_t errlen);

#endif
