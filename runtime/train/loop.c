/* runtime/train/loop.c — the epochs and steps of a run, and --benchmark.
 *
 * One step: take the next global batch from the input pipeline, queue the
 * train program on every replica (step()), read the results of the step
 * before while this one runs (settle(): the losses and the non-finite
 * check, guard.c; the progress bar), write a checkpoint when one is due
 * (resume.c), after reading this step's results too. An epoch ends with
 * its last step's results, its log line, the --eval-every accuracy, its
 * metrics line and its checkpoint; the run with the final accuracies.
 * Where the step's results cannot wait (no overlap: the cpu; --on-nan
 * skip, which undoes a bad step before the next) they are read at once.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/clock.h"
#include "runtime/cuda/cuda.h"
#include "runtime/train/internal.h"
#include "runtime/check.h"
#include "runtime/log.h"

/* A pipeline over `count` batches of b from batch `index` of `epoch`, as
 * the options say. */
rt_pipeline *rt_run_input_at(rt_run *r, const rt_batcher *b, int64_t count, int epoch,
                             int64_t index) {
    rt_pipeline_config cfg = rt_pipeline_defaults();
    cfg.workers = r->o->data_workers;
    cfg.depth = r->o->data_depth;
    cfg.count = count;
    cfg.first_epoch = epoch;
    cfg.first_index = index;
    rt_pipeline *p = rt_pipeline_new(b, &cfg, r->err, sizeof r->err);
    if (!p) rt_run_fail(r, "%s", r->err);
    return p;
}

/* Goyal et al.'s momentum correction: MXNet's velocity carries the lr
 * (v = m*v - lr*g), so when the lr changes from a to b the stored velocity
 * is rescaled by b/a to keep the effective momentum. A host pass over the
 * optimizer state, only on the steps where the lr changes. */
static void correct_momentum(rt_run *r, double lr) {
    if (!r->o->momentum_correction || r->prev_lr <= 0 || lr == r->prev_lr) return;
    float scale = (float)(lr / r->prev_lr);
    for (int k = 0; k < r->local; k++) { /* every replica's state, alike */
        rt_store *st = rt_replicas_store(r->R, k);
        for (int i = 0; i < rt_store_count(st); i++) {
            const char *name = rt_store_name(st, i);
            size_t len = strlen(name);
            if (len < 9 || strcmp(name + len - 9, ".momentum") != 0) continue;
            if (!rt_store_resident(st, i)) continue; /* ZeRO-1: its owner corrects it */
            int64_t n = ir_numel(rt_store_type(st, i));
            float *v = malloc(sizeof *v * (size_t)n);
            RT_CHECK_ALLOC(v);
            rt_store_read(st, i, v);
            for (int64_t j = 0; j < n; j++) v[j] *= scale;
            rt_store_write(st, i, v);
            free(v);
        }
    }
}

/* Queues one optimizer step on the global batch bt. The input slot goes
 * back to the workers as soon as the program has copied it, so they
 * prepare ahead while the step runs: bt must not be read after this
 * returns.
 *
 * With r->overlap (cuda) and next non-NULL, the step is enqueued, then the
 * next batch is taken from the pipeline and its copy enqueued behind the
 * step: the device does not idle while the host takes and stages it. *next
 * is that batch, already in the device's inputs and handed back to the
 * workers: pass it as bt with staged = 1. NULL next (the run's last step),
 * or no overlap: the next batch is the caller's to take, as before.
 *
 * lag (r->lag): the losses are not read here; the caller waits for the
 * step before's (step_losses), then queues this one's (queue_reads): the
 * device runs on meanwhile. Else r->loss holds them when this returns. */
static int step(rt_run *r, rt_pipeline *in, const rt_batch *bt, int staged, long t, double lr,
                const rt_batch **next, int lag) {
    correct_momentum(r, lr);
    r->prev_lr = lr;
    rt_replicas_set_step(r->R, t); /* the step number, from 1 (lamb, adamw) */
    /* bt holds this process's slice of the global batch (the batcher is
     * sharded); replica r takes samples [r b, (r + 1) b) of it, or with
     * accumulation its micro-batch k [(r K + k) b, (r K + k + 1) b). */
    const rt_batch *nb = NULL;
    if (!r->overlap) {
        if (rt_replicas_step(r->R, bt->images, bt->labels, (float)lr, 1.0f / (float)r->global,
                             r->loss, r->err, sizeof r->err))
            return rt_run_fail(r, "train step failed: %s", r->err);
        rt_pipeline_release(in);
    } else {
        if (rt_replicas_step_enqueue(r->R, staged ? NULL : bt->images, staged ? NULL : bt->labels,
                                     (float)lr, 1.0f / (float)r->global, r->err, sizeof r->err))
            return rt_run_fail(r, "train step failed: %s", r->err);
        if (!staged) rt_pipeline_release(in);
        if (next && !(nb = rt_pipeline_next(in)))
            return rt_run_fail(r, "the input pipeline ended before the run's last step");
        if (rt_replicas_step_finish(r->R, nb ? nb->images : NULL, nb ? nb->labels : NULL,
                                    lag ? NULL : r->loss, r->err, sizeof r->err))
            return rt_run_fail(r, "train step failed: %s", r->err);
        if (nb) rt_pipeline_release(in);
    }
    if (next) *next = nb;
    return 0;
}

/* Queues the reads of step t (from 0), just queued (r->lag): its losses
 * and, for the non-finite check, replica 0's parameters. */
static int queue_reads(rt_run *r, long t, int params) {
    if (rt_replicas_step_reads(r->R, r->err, sizeof r->err))
        return rt_run_fail(r, "step %ld: %s", t, r->err);
    if (params) rt_run_params_read(r);
    return 0;
}

/* Step t's losses (from 0), whose read queue_reads queued, into r->loss. */
static int step_losses(rt_run *r, long t) {
    if (rt_replicas_step_losses(r->R, r->loss, r->err, sizeof r->err))
        return rt_run_fail(r, "reading the losses of step %ld: %s", t, r->err);
    return 0;
}

/* The loss of the whole global batch from r->loss: every process sees the
 * same sum (so all stop together on a non-finite one). */
static double loss_sum(rt_run *r) {
    double s = 0;
    for (int i = 0; i < r->batch * r->local * r->accum; i++) s += r->loss[i];
    rt_mpi_allreduce_sum_f64(&s, 1);
    return s;
}

/* Host waits the cuda backends of this process made so far (the drains and
 * the lagged reads); -1: none is a cuda backend. */
static void host_waits(const rt_run *r, int64_t *drains, int64_t *lagged) {
    *drains = *lagged = -1;
    for (int k = 0; k < r->local; k++) {
        rt_cuda_stats st;
        if (rt_cuda_stats_get(r->bes[k], &st)) continue;
        if (*drains < 0) *drains = *lagged = 0;
        *drains += st.host_waits, *lagged += st.lagged_waits;
    }
}

int64_t rt_run_total_steps(const rt_run *r) {
    int64_t total = (int64_t)r->t.epochs * (int64_t)r->train_b.batches;
    return r->o->steps >= 0 && r->o->steps < total ? r->o->steps : total;
}

int rt_run_benchmark(rt_run *r) {
    double lr = rt_schedule_epoch_lr(&r->sched, 0), t0 = 0;
    r->input = rt_run_input_at(r, &r->train_b, r->o->benchmark + 1, 0, 0);
    if (!r->input) return 1;
    rt_pipeline_stats st0 = {0}, st1;
    const rt_batch *bt, *next = NULL; /* next: staged by the last step (r->overlap) */
    long pending = 0;                 /* a step whose losses are read behind the next (r->lag) */
    while ((bt = next ? next : rt_pipeline_next(r->input))) {
        int64_t seq = bt->seq; /* step() hands bt back to the workers */
        if (rt_run_stop_requested()) return rt_run_stopped(r, "during the benchmark", (long)seq, 0);
        int staged = next != NULL, lag = r->lag && seq > 0;
        next = NULL;
        if (step(r, r->input, bt, staged, (long)seq + 1, lr, seq < r->o->benchmark ? &next : NULL,
                 lag))
            return 1;
        if (pending && step_losses(r, pending - 1)) return 1;
        /* The losses are read and summed as in training (every process
         * joins the allreduce); the benchmark reports only time. */
        if (pending || !lag) loss_sum(r);
        pending = lag ? (long)seq + 1 : 0; /* 1 + its step */
        if (lag && queue_reads(r, (long)seq, 0)) return 1;
        /* Step 0 is the warm-up; the clock runs from its end, and input
         * waits after it count (the workers overlap preparation with the
         * steps). */
        if (seq == 0) t0 = rt_now(), rt_pipeline_get_stats(r->input, &st0);
    }
    if (pending) {
        if (step_losses(r, pending - 1)) return 1;
        loss_sum(r);
    }
    double t = rt_now() - t0;
    rt_pipeline_get_stats(r->input, &st1);
    fprintf(r->o->out,
            "benchmark: %ld steps of batch %d in %.3f seconds (after 1 warm-up step); "
            "input from %d data worker%s, waited %.3f seconds\n",
            r->o->benchmark, r->global, t, r->o->data_workers, r->o->data_workers == 1 ? "" : "s",
            st1.wait_s - st0.wait_s);
    fprintf(r->o->out, "throughput: %.1f img/s\n", (double)r->o->benchmark * r->global / t);
    return 0;
}

/* The loop's position and what it carries from epoch to epoch. */
typedef struct {
    long spe, done; /* steps per epoch; steps done */
    int64_t total;  /* steps the run makes */
    double total_time, test_acc;
    long test_acc_done;      /* the step count test_acc was measured at */
    rt_ckpt_metrics pending; /* the last epoch's metrics (epoch -1: none), written later */
    long saved;              /* the step the checkpoint holds; -1: none */
    const rt_batch *next;    /* staged by the last step (r->overlap) */
    /* Whether a step has changed the parameters (a resumed run's had): with
     * --on-nan skip every step may be undone, and such a run saves nothing. */
    int progress;
    /* r->lag: the step whose results (losses, the parameters' check) are
     * read after the next one is queued, or before anything that needs
     * them (a checkpoint, a stop, the epoch's end). */
    struct {
        int on;
        long done, s; /* L->done before it (its 0-based number); its step in epoch e */
        int e;
        double lr, prev_lr;
    } pend;
} loop_state;

/* One epoch's sums. */
typedef struct {
    int e;
    double t0, loss_sum, t_before;
    long steps, skipped;
    rt_pipeline_stats st0, st1;
} epoch_state;

/* The accuracy pass's result as the log says it: a classifier's test
 * accuracy, or a language model's val loss and bits per token (the loss
 * in nats / ln 2). */
static void say_eval(const rt_run *r, FILE *f, const char *sep, double v) {
    if (r->tokens)
        fprintf(f, "%sval loss %.4f | bits/token %.4f", sep, v, v / M_LN2);
    else
        fprintf(f, "%stest accuracy %.4f", sep, v);
}

static const char *eval_what(const rt_run *r) { return r->tokens ? "val loss" : "test accuracy"; }

/* --log-every's metrics row for step `done` (from 1): its mean loss
 * (null when not finite), lr and the images per second since the last
 * row. Rows start with "epoch" as every metrics line does (a resume checks
 * the lines after its checkpoint by that). The file is rewritten at most
 * every few seconds, and at every epoch's end. */
static int step_row(rt_run *r, long done, int epoch, double loss_sum, double lr) {
    double now = rt_now(), dt = now - r->row_t, val = -1;
    /* A language model's row carries the val loss: every process takes
     * part in the pass (a collective); rank 0 writes the row. */
    if (r->tokens && rt_run_accuracy(r, &r->test_b, "val loss", &val, 0)) return 1;
    if (!r->metrics) return 0;
    char loss[32] = "null", vals[96] = "";
    if (isfinite(loss_sum)) snprintf(loss, sizeof loss, "%.9g", loss_sum / r->global);
    if (r->tokens && isfinite(val))
        snprintf(vals, sizeof vals, ", \"val_loss\": %.9g, \"val_bits_per_token\": %.9g", val,
                 val / M_LN2);
    fprintf(r->metrics,
            "{\"epoch\": %d, \"step\": %ld, \"loss\": %s, \"lr\": %.9g, \"img_per_s\": "
            "%.1f%s}\n",
            epoch, done, loss, lr,
            r->row_t > 0 && dt > 0 ? (double)(done - r->row_done) * r->global / dt : 0.0, vals);
    r->row_t = now, r->row_done = done;
    if (now - r->metrics_written_t < RT_METRICS_WRITE_SECONDS) return 0;
    r->metrics_written_t = now;
    return rt_run_flush_metrics(r);
}

/* The pending step's results: its losses and replica 0's parameters
 * checked (a bad step stops the run or, with --on-nan skip, is undone), its
 * loss added to the epoch's, its debug line and the progress bar. E->steps
 * counts it already. 0, or 1 (the run's error is recorded). */
static int settle(rt_run *r, loop_state *L, epoch_state *E) {
    const rt_train_options *o = r->o;
    L->pend.on = 0;
    long done = L->pend.done;
    if (r->lag && step_losses(r, done)) return 1;
    double step_loss = loss_sum(r);
    int bad_param = isfinite(step_loss) ? rt_run_nonfinite_param(r) : -1;
    if (bad_param == -2)
        return rt_run_fail(r, "reading the parameters after step %ld: %s", done, r->err);
    if (!isfinite(step_loss) || bad_param >= 0) {
        if (rt_run_nonfinite_step(r, step_loss, bad_param, L->pend.prev_lr, done, L->pend.e,
                                  L->pend.s, L->pend.lr))
            return 1;
        E->skipped++;
    } else {
        E->loss_sum += step_loss;
        L->progress = 1;
    }
    if (rt_debug_level() >= 2 && o->rank == 0)
        rt_log(RT_LOG_DEBUG, "step %ld loss %.17g", done, step_loss / r->global);
    if (o->log_every > 0 && (r->metrics || r->tokens) && (done + 1) % o->log_every == 0 &&
        step_row(r, done + 1, L->pend.e, step_loss, L->pend.lr))
        return 1;
    double el = rt_now() - E->t0;
    long counted = E->steps - E->skipped;
    rt_progress_update(&r->bar, E->steps, el > 0 ? (double)E->steps * r->global / el : 0,
                       counted ? E->loss_sum / ((double)counted * r->global) : NAN);
    return 0;
}

/* Step s of the epoch: 0, or the exit status the run ends with (an error,
 * or 128 + signal after the checkpoint). With r->lag the step is queued
 * and the previous one's results are read while it runs; the host waits
 * for the device only where the results are needed: a checkpoint, a stop,
 * the epoch's end (end_epoch). */
static int train_step(rt_run *r, loop_state *L, epoch_state *E, long s) {
    const rt_train_options *o = r->o;
    int64_t w0, l0;
    host_waits(r, &w0, &l0);
    /* With r->overlap the previous step took this batch and staged it on
     * the device (it may have been the previous epoch's last step: the
     * pipeline runs on across epochs). */
    int staged = L->next != NULL;
    const rt_batch *bt = staged ? L->next : rt_pipeline_next(r->input);
    L->next = NULL;
    if (!bt)
        return rt_run_fail(r, "the input pipeline ended after %ld steps of %lld", L->done,
                           (long long)L->total);
    /* The epoch's clock starts at its first batch, as the article's. */
    if (!E->t0) E->t0 = rt_now() - E->t_before, rt_pipeline_get_stats(r->input, &E->st1);
    double lr = rt_schedule_step_lr(&r->sched, E->e, s, L->spe), prev_lr = r->prev_lr;
    if (o->on_nan_skip) rt_run_snapshot(r, 0);
    if (step(r, r->input, bt, staged, L->done + 1, lr, L->done + 1 < L->total ? &L->next : NULL,
             r->lag))
        return 1;
    /* The step before, read now that this one keeps the device busy; then
     * this one's reads, queued behind it. */
    if (L->pend.on && settle(r, L, E)) return 1;
    if (r->lag && queue_reads(r, L->done, 1)) return 1;
    L->pend.on = 1, L->pend.done = L->done, L->pend.e = E->e, L->pend.s = s;
    L->pend.lr = lr, L->pend.prev_lr = prev_lr;
    E->steps++, L->done++;
    if (!r->lag && settle(r, L, E)) return 1;
    /* Mid-epoch checkpoints (after the step's results are read); the
     * epoch's last step gets the epoch's. */
    int stop = rt_run_stop_requested();
    int every = o->checkpoint_every > 0 && L->done % o->checkpoint_every == 0;
    if (s + 1 < L->spe && (stop || L->done == L->total || every)) {
        if (L->pend.on && settle(r, L, E)) return 1;
        if (stop || (L->progress && (L->done == L->total || every))) {
            rt_ckpt_state cs = {.step = L->done,
                                .epoch_loss_sum = E->loss_sum,
                                .epoch_skipped = E->skipped,
                                .epoch_seconds = rt_now() - E->t0,
                                .total_seconds = L->total_time,
                                .pending = L->pending};
            if (rt_run_write_checkpoint(r, &cs)) return 1;
            if (o->checkpoint) L->saved = L->done;
        }
    }
    if (stop && s + 1 < L->spe) {
        char where[64];
        snprintf(where, sizeof where, "at epoch %d step %ld", E->e, s + 1);
        return rt_run_stopped(r, where, L->done, L->saved == L->done);
    }
    int64_t w1, l1;
    host_waits(r, &w1, &l1);
    if (w1 >= 0 && rt_debug_level() >= 2 && o->rank == 0)
        rt_log(RT_LOG_DEBUG,
               "host waits in step %ld: %lld (and %lld for an earlier step's results "
               "while the device ran on)",
               L->done - 1, (long long)(w1 - w0), (long long)(l1 - l0));
    return 0;
}

/* A loss far above a uniform guess's, ln(classes), is a diverged run,
 * whatever it prints next: said once, at the first such epoch. */
static void warn_diverged(rt_run *r, int e, double mean, double lr) {
    const rt_train_options *o = r->o;
    double uniform = log(r->classes > 1 ? r->classes : 2);
    if (r->diverged || !(mean > RT_DIVERGED_FACTOR * uniform)) return;
    r->diverged = 1;
    if (o->result) o->result->diverged = 1;
    if (o->rank != 0) return;
    rt_log(RT_LOG_WARNING,
           "epoch %d: train loss %.3g is over %d times a uniform guess's (%.3g for "
           "%d classes): the run has diverged; try a lower lr (--lr; this epoch's was %.4g) or "
           "a longer warmup (--warmup-epochs); --on-nan stop, the default, ends a run only at a "
           "non-finite loss",
           e, mean, RT_DIVERGED_FACTOR, uniform, r->classes, lr);
}

/* The epoch's end: its log line, --eval-every accuracy, metrics line and
 * checkpoint. 0, or the exit status the run ends with. */
static int end_epoch(rt_run *r, loop_state *L, epoch_state *E) {
    const rt_train_options *o = r->o;
    FILE *out = o->out;
    int e = E->e;
    if (L->pend.on && settle(r, L, E)) return 1; /* its last step's results */
    long counted = E->steps - E->skipped;
    /* No step ran when a resume found this epoch's steps done but not its
     * end (--steps stopped it mid-epoch): its clock stands where it was. */
    if (!E->t0) E->t0 = rt_now() - E->t_before;
    double dt = rt_now() - E->t0,
           mean = counted ? E->loss_sum / ((double)counted * r->global) : NAN;
    rt_pipeline_stats st2 = E->st1;
    if (r->input) rt_pipeline_get_stats(r->input, &st2);
    rt_progress_clear(&r->bar);
    L->total_time += dt;
    rt_train_result *res = o->result;
    if (res) res->epochs = e + 1, res->train_loss = mean, res->seconds = L->total_time;
    double lr = rt_schedule_epoch_lr(&r->sched, e);
    fprintf(out,
            "EPOCH %2d: train loss %4.2g | batch %4d | lr %.3f | Time per epoch %.2f seconds\n", e,
            mean, r->global, lr, dt);
    rt_run_flush_log(r);
    warn_diverged(r, e, mean, lr);
    double wait = st2.wait_s - E->st1.wait_s;
    if (rt_debug_level() >= 1)
        rt_log(RT_LOG_DEBUG,
               "epoch %d input: the steps waited %.4f s in %lld of %ld steps, "
               "%.4f s before the first batch; %d data worker%s",
               e, wait, (long long)(st2.stalls - E->st1.stalls), E->steps,
               E->st1.wait_s - E->st0.wait_s, o->data_workers, o->data_workers == 1 ? "" : "s");
    if (rt_debug_level() >= 1)
        rt_log(RT_LOG_DEBUG,
               "epoch %d: non-finite check %.4f s, --on-nan skip copies %.4f s, in %.4f s "
               "of steps",
               e, r->check_s, r->snapshot_s, dt);
    r->check_s = r->snapshot_s = 0;
    double acc = -1;
    /* Not stoppable: the epoch's end is one piece (a signal waits for it). */
    if (o->eval_every > 0 && (e + 1) % o->eval_every == 0) {
        if (rt_run_accuracy(r, &r->test_b, eval_what(r), &acc, 0)) return 1;
        fprintf(out, "EPOCH %2d: ", e);
        say_eval(r, out, "", acc);
        fputc('\n', out);
        rt_run_flush_log(r);
        L->test_acc = acc, L->test_acc_done = L->done;
    }
    if (r->metrics) {
        if (L->pending.epoch >= 0) {
            char line[512];
            rt_run_metrics_line(line, sizeof line, &L->pending, r->tokens);
            fprintf(r->metrics, "%s}\n", line);
        }
        L->pending = (rt_ckpt_metrics){.epoch = e,
                                       .lr = lr,
                                       .train_loss = mean,
                                       .batch = r->global,
                                       .steps = E->steps,
                                       .seconds = dt,
                                       .input_wait_s = wait,
                                       .test_accuracy = acc};
        /* Only the run's last epoch waits, for the final accuracies. */
        if (L->done < L->total) {
            char line[512];
            rt_run_metrics_line(line, sizeof line, &L->pending, r->tokens);
            fprintf(r->metrics, "%s}\n", line);
            L->pending = (rt_ckpt_metrics){.epoch = -1};
        }
        r->metrics_written_t = rt_now();
        if (rt_run_flush_metrics(r)) return 1;
    }
    if (E->steps == L->spe && L->progress) { /* a whole epoch: its checkpoint */
        rt_ckpt_state cs = {.step = L->done, .total_seconds = L->total_time, .pending = L->pending};
        if (rt_run_write_checkpoint(r, &cs)) return 1;
        if (o->checkpoint) L->saved = L->done;
        if (rt_run_stop_requested()) {
            char where[64];
            snprintf(where, sizeof where, "at epoch %d step 0", e + 1);
            return rt_run_stopped(r, where, L->done, L->saved == L->done);
        }
    }
    return 0;
}

/* Epoch e from the loop's position; 0, or the exit status. */
static int train_epoch(rt_run *r, loop_state *L, int e) {
    /* A resumed run starts at the checkpoint's step, mid-epoch perhaps,
     * with that epoch's loss sum and time so far. */
    int resumed = L->done % L->spe != 0; /* this epoch began before the checkpoint */
    epoch_state E = {.e = e,
                     .loss_sum = resumed ? r->resumed.epoch_loss_sum : 0,
                     .t_before = resumed ? r->resumed.epoch_seconds : 0,
                     .steps = L->done % L->spe,
                     .skipped = resumed ? (long)r->resumed.epoch_skipped : 0};
    if (r->input) rt_pipeline_get_stats(r->input, &E.st0);
    char label[48];
    snprintf(label, sizeof label, "epoch %d", e);
    long left = L->spe - E.steps;
    rt_progress_begin(&r->bar, label,
                      (long)(L->total - L->done < left ? L->total - L->done : left));
    for (long s = E.steps; s < L->spe && L->done < L->total; s++) {
        int rc = train_step(r, L, &E, s);
        if (rc) return rc;
    }
    return end_epoch(r, L, &E);
}

/* A stop asked for during the final evaluation: the run ends there, its
 * last checkpoint (at the last step) redoes the evaluation on resume. */
static int stopped_evaluating(rt_run *r, loop_state *L) {
    return rt_run_stopped(r, "during the final evaluation", L->done, L->saved == L->done);
}

/* --final-eval, or its default: the article's both accuracies when the
 * whole schedule ran (or --steps 0 asked only to evaluate), none when
 * --steps cut it short. */
static int final_eval(const rt_run *r, const loop_state *L) {
    const rt_train_options *o = r->o;
    if (o->final_eval >= 0) return o->final_eval;
    if (o->steps <= 0 || L->total >= (int64_t)r->t.epochs * L->spe) return RT_FINAL_EVAL_BOTH;
    if (o->rank == 0)
        rt_log(RT_LOG_NOTE,
               "--steps %ld ends the run before its schedule does: no final evaluation "
               "(--final-eval test|train|both asks for one)",
               o->steps);
    return RT_FINAL_EVAL_NONE;
}

/* After the last epoch: the final accuracies asked for, their line and
 * metrics. */
static int finish(rt_run *r, loop_state *L) {
    const rt_train_options *o = r->o;
    if (!L->progress && L->done > 0)
        return rt_run_fail(
            r,
            "all %ld steps were skipped (--on-nan skip): each had a non-finite loss or gradient, "
            "so the parameters never changed; nothing was saved (a lower lr or a warmup may help)",
            L->done);
    rt_pipeline_free(r->input);
    r->input = NULL;
    int want = final_eval(r, L);
    /* A language model's "train accuracy" would be a train loss on fixed
     * windows: the log has the train loss already. */
    int want_train = !r->tokens && (want == RT_FINAL_EVAL_TRAIN || want == RT_FINAL_EVAL_BOTH);
    int want_test = want == RT_FINAL_EVAL_TEST || want == RT_FINAL_EVAL_BOTH;
    double train_acc = -1;
    if (want_train && rt_run_accuracy(r, &r->train_eval_b, "train accuracy", &train_acc, 1))
        return 1;
    if (rt_run_stop_requested()) return stopped_evaluating(r, L);
    /* The last --eval-every pass measured these very parameters. */
    if (want_test && L->test_acc_done != L->done &&
        rt_run_accuracy(r, &r->test_b, eval_what(r), &L->test_acc, 1))
        return 1;
    if (rt_run_stop_requested()) return stopped_evaluating(r, L);
    if (L->test_acc_done != L->done && !want_test)
        L->test_acc = -1; /* an older pass's: not these parameters' */
    /* The training time only when steps ran (here or before a --resume):
     * an evaluation alone (--steps 0) prints just its accuracies. */
    const char *sep = "";
    if (L->done > 0) fprintf(o->out, "Training time %.2f seconds", L->total_time), sep = " | ";
    if (train_acc >= 0) fprintf(o->out, "%strain accuracy %.4f", sep, train_acc), sep = " | ";
    if (L->test_acc >= 0) say_eval(r, o->out, sep, L->test_acc), sep = " | ";
    if (*sep) fputc('\n', o->out);
    rt_run_flush_log(r);
    rt_train_result *res = o->result;
    if (res) res->finished = 1, res->train_accuracy = train_acc, res->test_accuracy = L->test_acc;
    if (r->metrics && L->pending.epoch >= 0) {
        char line[512];
        if (L->pending.test_accuracy < 0) L->pending.test_accuracy = L->test_acc;
        rt_run_metrics_line(line, sizeof line, &L->pending, r->tokens);
        if (train_acc >= 0)
            fprintf(r->metrics, "%s, \"train_accuracy\": %.6f}\n", line, train_acc);
        else
            fprintf(r->metrics, "%s}\n", line);
        if (rt_run_flush_metrics(r)) return 1;
    }
    return 0;
}

int rt_run_train(rt_run *r) {
    const rt_train_options *o = r->o;
    loop_state L = {.spe = (long)r->train_b.batches,
                    .done = (long)r->resumed.step,
                    .total_time = r->resumed.total_seconds,
                    .test_acc = -1,
                    .test_acc_done = -1,
                    .pending = {.epoch = -1},
                    .saved = o->resume ? (long)r->resumed.step : -1};
    L.total = rt_run_total_steps(r);
    /* A resumed run's metrics carry on from the checkpoint's line. */
    if (r->metrics && o->resume) L.pending = r->resumed.pending;
    L.progress = L.done > 0;
    r->row_t = rt_now(), r->row_done = L.done; /* --log-every's first row counts from here */
    /* The metrics file is first written here, after every check and the
     * set-up: a run refused or stopped before leaves it as it was. */
    if (r->metrics && rt_run_flush_metrics(r)) return 1;
    if (L.total > L.done) {
        r->input = rt_run_input_at(r, &r->train_b, L.total - L.done, (int)(L.done / L.spe),
                                   L.done % L.spe);
        if (!r->input) return 1;
    }
    /* A checkpoint mid-epoch whose steps are all done (--steps stopped
     * there, then the process died before the end) still owes that epoch's
     * end: its log and metrics lines, as the run that was not stopped. */
    int first = (int)(L.done / L.spe), owed = L.done % L.spe != 0;
    for (int e = first; e < r->t.epochs && (L.done < L.total || (e == first && owed)); e++) {
        int rc = train_epoch(r, &L, e);
        if (rc) return rc;
    }
    return finish(r, &L);
}
