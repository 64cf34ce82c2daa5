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
 * Writing is atomic (ir/file.h: a fresh temporary, fsync, rename, an fsync
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
 * every tensor and shape) before it writes a byte into the stores, and
 * names what is wrong: a corrupt, truncated or foreign checkpoint is
 * refused, never half-loaded.
 */
#ifndef DPC_RT_TRAIN_CHECKPOINT_H
#define DPC_RT_TRAIN_CHECKPOINT_H

#include <stddef.h>
#include <stdint.h>

#include "ir/plan.h"

#define RT_CKPT_FILE    "checkpoint.safetensors"
#define RT_CKPT_VERSION "2" /* 2: metrics_path and flags */

typedef struct rt_store rt_store;

/* Where the run stands. The caller fills and checks the run-shape fields
 * (seed, data, batch) against its own options on resume. */
typedef struct {
    int64_t step; /* optimizer steps done: the next step's index */
    int64_t steps_per_epoch;
    int global_batch;
    uint64_t seed;
    char data[256]; /* dataset name ("synthetic" or the folder) */
    int shuffle, augment;
    double epoch_loss_sum;     /* the current epoch's summed per-sample losses so far */
    int64_t epoch_skipped;     /* steps of the current epoch dropped by --on-nan skip */
    double prev_lr;            /* the last step's lr (--momentum-correction) */
    double epoch_seconds;      /* the current epoch's time so far */
    double total_seconds;      /* the finished epochs' time */
    int64_t metrics_bytes;     /* length of the metrics file at this point; -1: none */
    char metrics_pending[512]; /* the last finished epoch's metrics line, not yet written */
    char metrics_path[4096];   /* the metrics file, absolute; "": none */
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

#endif
