/* runtime/train/checkpoint.h — training checkpoints: what a run needs to continue
 * bit-identically to one that was never interrupted.
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
 * runtime/train/train.c). Statistics therefore go in and out as one host array,
 * replica after replica, S = rt_ckpt_stats_count floats each.
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
#ifndef DPC_RT_TRAIN_CHECKPOINT_H
#define DPC_RT_TRAIN_CHECKPOINT_H

#include <stddef.h>
#include <stdint.h>

#include "format/plan.h"
#include "runtime/train/safetensors.h"

#define RT_CKPT_FILE        "checkpoint.safetensors"
/* 3: the metrics file is the run's own (--metrics), checked by its prefix's
 * length and SHA-256; the pending metrics line as numbers; no path. */
#define RT_CKPT_VERSION     "3"
/* The longest metrics file a resume reads back. */
#define RT_CKPT_METRICS_MAX ((int64_t)1 << 30)

typedef struct rt_store rt_store;

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

#endif
