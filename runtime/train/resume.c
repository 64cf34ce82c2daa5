/* runtime/train/resume.c — a run's checkpoints (runtime/files/files.h
 * holds the file format): writing one at the loop's position, the option
 * checks, and --resume: reading one back after checking it was made by a
 * run of this shape and flags. */
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "base/err.h"
#include "base/file.h"
#include "runtime/check.h"
#include "runtime/clock.h"
#include "base/sha256.h"
#include "runtime/train/internal.h"
#include "runtime/log.h"

/* The flags that change the arithmetic of a step, as the checkpoint keeps
 * them: "--flag=value;..." with the effective values (the plan's when the
 * flag was not given, so `--lr 0.1` equals a plan whose lr is 0.1). Seed,
 * data, batch, shuffling and augmentation have their own keys. */
static void run_flags(const rt_run *r, char *out, size_t len) {
    const rt_train_options *o = r->o;
    /* The shortest decimal that reads back as the same double: exact, and
     * "0.01" rather than 0.010000000000000000208 in a message. */
    double lr = r->t.lr_steps > 0 ? r->t.lr_value[0] : 0.0;
    char lrs[40];
    for (int digits = 1; digits <= 17; digits++) {
        snprintf(lrs, sizeof lrs, "%.*g", digits, lr);
        if (strtod(lrs, NULL) == lr) break;
    }
    snprintf(out, len,
             "--lr=%s;--lr-scaling=%s;--warmup-epochs=%d;--warmup-per-iteration=%s;"
             "--momentum-correction=%s;--on-nan=%s",
             lrs, ir_lr_scaling_names[r->t.lr_scaling], r->t.warmup_epochs,
             o->warmup_per_iteration ? "on" : "off", o->momentum_correction ? "on" : "off",
             o->on_nan_skip ? "skip" : "stop");
    size_t used = strlen(out);
    snprintf(out + used, len - used, ";--accumulate=%d", r->accum);
    /* A cosine/poly curve spans the run's epochs: another --epochs is another curve. */
    used = strlen(out);
    if (r->t.lr_kind != IR_LR_DICT && used < len)
        snprintf(out + used, len - used, ";--epochs=%d", r->t.epochs);
    /* and so is another --schedule-steps (absent when unset: older checkpoints match) */
    used = strlen(out);
    if (r->t.lr_kind != IR_LR_DICT && o->schedule_steps > 0 && used < len)
        snprintf(out + used, len - used, ";--schedule-steps=%ld", o->schedule_steps);
}

/* Every replica's BatchNorm statistics in the job, in global replica order
 * (rt_ckpt_stats_count floats each), on every process: each process fills
 * its own replicas' rows, then broadcasts them in turn (bit-exact, unlike
 * a sum). A collective: every process calls it at the same step. */
static float *gather_stats(rt_run *r) {
    int64_t S = rt_ckpt_stats_count(r->plan, r->st);
    float *stats = malloc(sizeof(float) * (size_t)(S * r->total) + 1);
    RT_CHECK_ALLOC(stats);
    int first = r->o->rank * r->local;
    for (int k = 0; k < r->local; k++)
        rt_ckpt_stats_read(r->plan, rt_replicas_store(r->R, k), stats + (first + k) * S);
    for (int p = 0; p < r->o->ranks && r->o->ranks > 1; p++)
        if (rt_mpi_bcast_bytes(stats + (int64_t)p * r->local * S,
                               sizeof(float) * (size_t)(S * r->local), p)) {
            free(stats);
            return NULL;
        }
    return stats;
}

/* ZeRO-1 under mpirun: the optimizer states whose owner is a replica of
 * another process (rank 0's store has no bytes for them). to_rank0: each
 * goes from its owner's process to rank 0, whose store 0 holds it
 * (rt_store_hold) until release_foreign_shards; else the other way, from
 * rank 0's held copy (just read from a checkpoint) to the owner's store.
 * Broadcasts over MPI in store order: a collective, as gather_stats. */
static int move_foreign_shards(rt_run *r, int to_rank0) {
    if (r->o->ranks < 2 || !rt_replicas_shards(r->R)) return 0;
    int rc = 0;
    for (int i = 0; i < rt_store_count(r->st) && !rc; i++) {
        int owner = rt_store_owner(r->st, i), home = owner / r->local;
        if (owner < 0 || home == 0) continue;
        size_t bytes = sizeof(float) * (size_t)ir_numel(rt_store_type(r->st, i));
        float *host = malloc(bytes + 1);
        RT_CHECK_ALLOC(host);
        int from = to_rank0 ? home : 0, to = to_rank0 ? 0 : home;
        if (r->o->rank == from) rt_store_read(r->st, i, host); /* the owner's, in its process */
        rc = rt_mpi_bcast_bytes(host, bytes, from);
        if (!rc && r->o->rank == to) {
            if (to_rank0) rt_store_hold(r->st, i);
            rt_store_write(r->st, i, host);
        }
        free(host);
    }
    return rc;
}

static void release_foreign_shards(rt_run *r) {
    for (int i = 0; i < rt_store_count(r->st); i++) rt_store_release(r->st, i);
}

/* What the run trains on, as a checkpoint records it: the dataset's name
 * (a folder), or a language model's train file. */
static const char *data_name(const rt_run *r) {
    return r->tokens ? r->tok_train->name : r->train_ds->name;
}

/* Writes the checkpoint at s's position (counters filled by the loop; the
 * run's shape filled here). Every process gathers its replicas' statistics
 * (and, with --shard-optimizer, its shards of the optimizer state) to rank
 * 0, which writes one checkpoint for the job; a failure stops every
 * process. */
int rt_run_write_checkpoint(rt_run *r, rt_ckpt_state *s) {
    const rt_train_options *o = r->o;
    if (!o->checkpoint) return 0;
    double t0 = rt_now();
    float *stats = gather_stats(r);
    int bad =
        !stats ? rt_run_fail(r, "checkpoint: cannot gather the BatchNorm statistics over MPI") : 0;
    if (!bad && move_foreign_shards(r, 1))
        bad = rt_run_fail(r, "checkpoint: cannot gather the optimizer state's shards over MPI");
    if (!bad && o->rank == 0) {
        s->steps_per_epoch = (int64_t)r->train_b.batches;
        s->global_batch = r->global;
        s->seed = o->seed;
        snprintf(s->data, sizeof s->data, "%s", data_name(r));
        s->shuffle = r->train_b.shuffle, s->augment = r->train_b.augment;
        s->prev_lr = r->prev_lr;
        /* The metrics file by its content, never its name: a resume
         * checks the file its own --metrics names against these. */
        s->metrics_bytes = -1;
        if (r->metrics) {
            fflush(r->metrics);
            unsigned char d[32];
            base_sha256(r->metrics_len ? r->metrics_buf : "", r->metrics_len, d);
            base_sha256_hex(d, s->metrics_sha256);
            s->metrics_bytes = (int64_t)r->metrics_len;
        } else {
            s->pending = (rt_ckpt_metrics){.epoch = -1};
        }
        run_flags(r, s->flags, sizeof s->flags);
        if (rt_ckpt_write(o->checkpoint, r->plan, r->st, r->total, stats, s, r->err, sizeof r->err))
            bad = rt_run_fail(r, "%s", r->err);
        else if (rt_debug_level() >= 1)
            rt_log(RT_LOG_DEBUG, "checkpoint at step %lld written to %s in %.3f s",
                   (long long)s->step, o->checkpoint, rt_now() - t0);
    }
    release_foreign_shards(r);
    free(stats);
    return rt_mpi_any(bad);
}

/* Option combinations, and a fresh run never overwrites a checkpoint. */
int rt_run_check_checkpoint_options(rt_run *r) {
    const rt_train_options *o = r->o;
    if (!o->checkpoint) {
        if (o->resume)
            return rt_run_fail(r, "--resume needs --checkpoint DIR (the directory to resume from)");
        if (o->checkpoint_every) return rt_run_fail(r, "--checkpoint-every needs --checkpoint DIR");
        return 0;
    }
    if (o->benchmark) return rt_run_fail(r, "--checkpoint and --benchmark do not go together");
    if (o->resume && o->load_params)
        return rt_run_fail(r, "--resume and --load-params both set the parameters; use one");
    /* Only rank 0 reads and writes the job's checkpoint: the directory need
     * exist on its machine alone (a rank that exits ends the job). */
    if (o->rank != 0) return 0;
    char path[4200];
    base_path_join(path, sizeof path, o->checkpoint, RT_CKPT_FILE);
    if (o->resume && !rt_ckpt_exists(o->checkpoint))
        return rt_run_fail(r, "--resume: no checkpoint in %s (%s does not exist)", o->checkpoint,
                           path);
    if (!o->resume && rt_ckpt_exists(o->checkpoint))
        return rt_run_fail(
            r,
            "%s already holds a checkpoint; add --resume to continue it, or remove it or choose "
            "another directory to start afresh",
            o->checkpoint);
    return 0;
}

/* --resume's metrics file: the one this run names (--metrics), never one
 * the checkpoint names. It must start with the bytes the checkpoint's run
 * had written (length and SHA-256), followed only by metrics lines that run
 * wrote after it; those are dropped (the resumed run writes them again).
 * Anything else is refused before a byte is written. The text goes to
 * memory here; the loop writes the file (rt_run_train). Without --metrics
 * no metrics file is written. */
static int resume_metrics(rt_run *r, const char *path) {
    const rt_train_options *o = r->o;
    const rt_ckpt_state *s = &r->resumed;
    if (!o->metrics) {
        if (s->metrics_bytes >= 0)
            rt_log(RT_LOG_NOTE, "the checkpoint's run kept a metrics file; this run writes none "
                                "(add --metrics FILE, naming that file, to continue it)");
        return 0;
    }
    r->metrics_path = o->metrics;
    size_t len = 0;
    unsigned char *old = NULL;
    struct stat sb;
    if (lstat(o->metrics, &sb) == 0) {
        old = base_file_read(o->metrics, (size_t)RT_CKPT_METRICS_MAX, &len, r->err, sizeof r->err);
        if (!old) return rt_run_fail(r, "--metrics %s", r->err);
    }
    if (rt_ckpt_check_metrics(path, s, o->metrics, old, len, r->err, sizeof r->err)) {
        free(old);
        return rt_run_fail(r, "checkpoint refused: %s", r->err);
    }
    int rc = rt_run_open_metrics(r);
    if (!rc && s->metrics_bytes > 0 &&
        fwrite(old, 1, (size_t)s->metrics_bytes, r->metrics) != (size_t)s->metrics_bytes)
        rc = rt_run_fail(r, "--metrics %s: out of memory", o->metrics);
    free(old);
    return rc;
}

/* --resume: the stores, the position and the metrics file from the
 * checkpoint, after checking it was made by a run of this shape. */
static int resume_checked(rt_run *r, float *stats) {
    const rt_train_options *o = r->o;
    rt_ckpt_state *s = &r->resumed;
    if (rt_ckpt_read(o->checkpoint, r->plan, r->st, r->total, stats, s, r->err, sizeof r->err))
        return rt_run_fail(r, "%s", r->err);
    const char *d = o->checkpoint;
    if (s->seed != o->seed)
        return rt_run_fail(
            r,
            "checkpoint refused: %s was written with --seed %llu; this run has --seed %llu "
            "(resume with the same flags)",
            d, (unsigned long long)s->seed, (unsigned long long)o->seed);
    if (strcmp(s->data, data_name(r)))
        return rt_run_fail(r, "checkpoint refused: %s was written training on %s; this run has %s",
                           d, BASE_ESC(s->data), BASE_ESC(data_name(r)));
    if (s->global_batch != r->global || s->steps_per_epoch != (int64_t)r->train_b.batches)
        return rt_run_fail(
            r,
            "checkpoint refused: %s was written with global batch %d (%lld steps per epoch); "
            "this run has %d (%lld)",
            d, s->global_batch, (long long)s->steps_per_epoch, r->global,
            (long long)r->train_b.batches);
    if (s->shuffle != r->train_b.shuffle || s->augment != r->train_b.augment)
        return rt_run_fail(
            r,
            "checkpoint refused: %s was written %s shuffling and %s augmentation; resume with the "
            "same --no-shuffle / --no-augment",
            d, s->shuffle ? "with" : "without", s->augment ? "with" : "without");
    char mine[1024], path[4200];
    run_flags(r, mine, sizeof mine);
    base_path_join(path, sizeof path, d, RT_CKPT_FILE);
    if (rt_ckpt_check_flags(path, s->flags, mine, r->err, sizeof r->err))
        return rt_run_fail(r, "checkpoint refused: %s", r->err);
    /* A checkpoint past this run's last step would make it do nothing. */
    int64_t total = rt_run_total_steps(r);
    if (s->step > total) {
        char limit[64];
        if (o->steps >= 0 && o->steps == total)
            snprintf(limit, sizeof limit, "--steps %ld", o->steps);
        else
            snprintf(limit, sizeof limit, "%d epochs of %lld steps", r->t.epochs,
                     (long long)r->train_b.batches);
        return rt_run_fail(
            r, "checkpoint refused: %s: 'step' is %lld, past this run's last step %lld (%s)", path,
            (long long)s->step, (long long)total, limit);
    }
    if (resume_metrics(r, path)) return 1;
    if (s->step == total)
        rt_log(RT_LOG_NOTE,
               "the checkpoint's run has made all %lld of its steps: nothing is left to "
               "train; the run ends with its final evaluation (more --epochs or --steps go on)",
               (long long)total);
    long spe = (long)r->train_b.batches;
    rt_log(RT_LOG_INFO, "resumed from %s: %lld steps restored (epoch %lld, step %lld of %ld)", path,
           (long long)s->step, (long long)(s->step / spe), (long long)(s->step % spe), spe);
    return 0;
}

/* --resume: rank 0 reads and checks the job's checkpoint (only its machine
 * needs the directory); the position, replica 0's tensors and every
 * replica's statistics then reach every process and replica, and each
 * shard of the optimizer state its owner's process. */
int rt_run_resume(rt_run *r) {
    const rt_train_options *o = r->o;
    int64_t S = rt_ckpt_stats_count(r->plan, r->st);
    float *stats = malloc(sizeof(float) * (size_t)(S * r->total) + 1);
    RT_CHECK_ALLOC(stats);
    if (o->rank == 0 && o->ranks > 1 && rt_replicas_shards(r->R)) /* room for every shard */
        for (int i = 0; i < rt_store_count(r->st); i++) rt_store_hold(r->st, i);
    int bad = o->rank == 0 ? resume_checked(r, stats) : 0;
    if (rt_mpi_any(bad)) {
        release_foreign_shards(r);
        free(stats);
        return 1;
    }
    bad = move_foreign_shards(r, 0);
    release_foreign_shards(r);
    if (bad) {
        free(stats);
        return rt_run_fail(r, "--resume: cannot send the optimizer state's shards over MPI");
    }
    if (o->ranks > 1 && (rt_mpi_bcast_bytes(&r->resumed, sizeof r->resumed, 0) ||
                         rt_mpi_bcast_bytes(stats, sizeof(float) * (size_t)(S * r->total), 0))) {
        free(stats);
        return rt_run_fail(r,
                           "--resume: cannot send the checkpoint to the other processes over MPI");
    }
    r->prev_lr = r->resumed.prev_lr;
    bad = rt_replicas_sync(r->R, r->err, sizeof r->err) ? rt_run_fail(r, "%s", r->err) : 0;
    for (int k = 0; k < r->local && !bad; k++)
        rt_ckpt_stats_write(r->plan, rt_replicas_store(r->R, k),
                            stats + (o->rank * r->local + k) * S);
    free(stats);
    return bad;
}
