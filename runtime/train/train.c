/* runtime/train/train.c — a training run, phase by phase: the checks, the
 * data, the replicas, --resume, the loop (or --benchmark), the parameter
 * file; runtime/train/internal.h says which file does each.
 *
 * One step: take the next global batch from the input pipeline (worker
 * threads prepared it while the previous steps ran), hand each replica its
 * slice, set lr and grad_scale = 1/global batch, run the train program
 * (forward, backward, all-reduce of the gradients, update: one compiled
 * program per replica, runtime/train/replicas.h), read back the per-sample
 * losses. On cuda (rt_replicas_overlap) the next batch is taken and its
 * copy enqueued behind the step, and the step's losses and non-finite
 * check are read after the next step is queued, so neither waits for the
 * other inside an epoch (loop.c).
 *
 * Data parallelism. `--gpus N` runs N replicas, `mpirun -np P` P processes
 * of them: R = P x N replicas, global batch G = R x b (b: the plan's
 * per-device batch). Global replica g = rank x N + r takes samples
 * [g b, (g+1) b) of every global batch, so the global batch is the same
 * samples, in the same order, whatever R is split into; the gradients are
 * summed over all R replicas and scaled by 1/G. Every replica keeps its own
 * BatchNorm statistics (per-device BatchNorm, as Gluon); evaluation hands
 * the eval batches round-robin to the replicas, each using its own
 * statistics, as Gluon evaluates on a list of devices. Parameter files hold
 * replica 0's tensors. `--accumulate K`: each replica runs K micro-batches
 * per step (replica r's micro-batch k is global replica r*K+k's slice of a
 * run of R*K replicas), G = R x K x b, and the update runs once on the sum
 * of all R*K micro-batches' gradients (docs/DESIGN.md §10.1). Under MPI
 * only rank 0 prints and writes files. The
 * article's log lines go to `out`; a progress bar goes to stderr when it is
 * a terminal.
 */
#include "runtime/train/train.h"

#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "base/bytes.h"
#include "base/err.h"
#include "format/memplan.h"
#include "runtime/check.h"
#include "runtime/exec/exec.h"
#include "runtime/train/internal.h"
#include "runtime/log.h"

rt_train_options rt_train_defaults(void) {
    rt_train_options o;
    memset(&o, 0, sizeof o);
    o.device = "auto";
    o.gpus = 1;
    o.accumulate = 1;
    o.ranks = 1;
    o.lr_scaling = -1;
    o.warmup_epochs = -1;
    o.steps = -1;
    o.final_eval = -1;
    o.progress_every = 60;
    o.data_workers = RT_PIPELINE_WORKERS;
    return o;
}

int rt_train_global_batch(const rt_train_options *o, int batch, char *err, size_t errlen) {
    if (o->gpus < 1) return base_fail(err, errlen, "--gpus must be at least 1, got %d", o->gpus);
    if (o->accumulate < 1)
        return base_fail(err, errlen, "--accumulate must be at least 1, got %d", o->accumulate);
    int ranks = o->ranks < 1 ? 1 : o->ranks, global;
    if (__builtin_mul_overflow(batch, o->gpus, &global) ||
        __builtin_mul_overflow(global, o->accumulate, &global) ||
        __builtin_mul_overflow(global, ranks, &global))
        return base_fail(err, errlen,
                         "the global batch, %d per device x %d replicas (--gpus) x %d processes "
                         "x %d micro-batches (--accumulate), is more than %d",
                         batch, o->gpus, ranks, o->accumulate, INT_MAX);
    return global;
}

int rt_train_schedule(const dpc_plan *plan, const rt_train_options *o, ir_train *t, char *err,
                      size_t errlen) {
    *t = plan->schedule;
    if (o->lr_scaling >= 0) t->lr_scaling = (ir_lr_scaling)o->lr_scaling;
    if (o->warmup_epochs >= 0) /* replaces the plan's warmup, in steps too */
        t->warmup_epochs = o->warmup_epochs, t->warmup_steps = 0;
    if (o->lr < 0 || isnan(o->lr))
        return base_fail(err, errlen, "--lr must be positive, got %g", o->lr);
    if (o->lr > 0) {
        /* The dict keeps its shape: every entry scales with epoch 0's. */
        if (!(t->lr_value[0] > 0))
            return base_fail(err, errlen, "--lr: the plan's epoch-0 lr is %g", t->lr_value[0]);
        double k = o->lr / t->lr_value[0];
        for (int i = 0; i < t->lr_steps; i++) t->lr_value[i] *= k;
    }
    /* --epochs stops the run early or extends it with the dict's last
     * value; it does not squeeze the schedule, so a warmup is checked
     * against the longer of the two. */
    if (o->epochs > 0 && o->warmup_epochs > o->epochs)
        return base_fail(err, errlen,
                         "--warmup-epochs %d does not fit the %d epoch%s of --epochs %d: the lr "
                         "would never reach its target",
                         o->warmup_epochs, o->epochs, o->epochs == 1 ? "" : "s", o->epochs);
    if (o->epochs > t->epochs) t->epochs = o->epochs;
    if (ir_train_check(t, err, errlen)) return -1;
    if (o->epochs > 0) t->epochs = o->epochs;
    if (o->schedule_steps > 0 && t->lr_kind == IR_LR_DICT)
        return base_fail(err, errlen,
                         "--schedule-steps %ld: the plan's lr is a per-epoch dict, which spans no "
                         "steps; it shapes a cosine or poly schedule",
                         o->schedule_steps);
    if (rt_train_global_batch(o, t->batch, err, errlen) < 0) return -1;
    /* Micro-batches run one after another: a synchronised BatchNorm cannot
     * combine their statistics before each one is normalised. */
    for (int i = 0; o->accumulate > 1 && i < plan->train->n; i++)
        if (plan->train->nodes[i].op == IR_OP_ALLREDUCE && plan->train->nodes[i].iattr[2])
            return base_fail(err, errlen,
                             "--accumulate %d: the plan has synchronised BatchNorm (sync=true or "
                             "dpc --sync-bn), whose statistics span the replicas of one step; "
                             "accumulated micro-batches are normalised one at a time",
                             o->accumulate);
    return 0;
}

void rt_run_free(rt_run *r) {
    /* The snapshot's size comes from replica 0's store: before the replicas go. */
    int count = r->st ? rt_store_count(r->st) : 0;
    for (int i = 0; r->snapshot && i < r->local * count; i++) free(r->snapshot[i]);
    free(r->snapshot);
    free(r->params);
    rt_readback_free(r->param_rb); /* before the backends go */
    rt_pipeline_free(r->input);
    rt_replicas_free(r->R);
    rt_coll_free(r->coll);
    if (r->bes) rt_replicas_close_backends(r->be, r->local, r->bes);
    free(r->bes);
    if (r->be) rt_backend_free(r->be);
    if (r->quiet) fclose(r->quiet);
    rt_dataset_free(r->train_ds);
    rt_dataset_free(r->test_ds);
    rt_tokens_free(r->tok_train);
    rt_tokens_free(r->tok_val);
    free(r->logits), free(r->loss);
    if (r->metrics) fclose(r->metrics);
    free(r->metrics_buf);
}

/* Everything that can be refused before loading data or allocating
 * anything: the device, the options, the plan's programs, the memory. */
int rt_run_check(rt_run *r, const dpc_plan *plan, const rt_train_options *o) {
    if (!(r->be = rt_backend_open(o->device, NULL, r->err, sizeof r->err)))
        return rt_run_fail(r, "%s", r->err);
    if (o->gpus > RT_MAX_LOCAL_REPLICAS)
        return rt_run_fail(
            r, "--gpus %d: at most %d replicas per process (run more processes under mpirun)",
            o->gpus, RT_MAX_LOCAL_REPLICAS);
    if (rt_train_schedule(plan, o, &r->t, r->err, sizeof r->err))
        return rt_run_fail(r, "%s", r->err);
    if (rt_run_check_programs(r) || rt_run_check_checkpoint_options(r)) return 1;
    /* Per replica store + programs, and the training and eval batches in flight. */
    int64_t slots = o->data_depth ? o->data_depth : o->data_workers + 2;
    int64_t images = (int64_t)r->batch * o->gpus * o->accumulate + r->eval_batch;
    int64_t inputs =
        base_bytes_mul(base_bytes_mul(images, ((int64_t)r->c * r->h * r->w + 1) * 4), slots);
    if (rt_memory_check(plan, r->be, o->gpus, o->accumulate, inputs, r->err, sizeof r->err))
        return rt_run_fail(r, "%s", r->err);
    return 0;
}

/* The job's shape, the outputs checked, the data opened; a fresh run's
 * metrics text started empty (the file is written when the loop starts). */
static int open_run(rt_run *r, rt_train_options *o) {
    int rc = 0;
    if (o->ranks < 1) o->ranks = 1;
    r->local = o->gpus;
    r->total = o->gpus * o->ranks;
    r->accum = o->accumulate;
    r->global = rt_train_global_batch(o, r->batch, r->err, sizeof r->err);
    if (r->global < 0) return rt_run_fail(r, "%s", r->err);
    r->img = (size_t)r->c * (size_t)r->h * (size_t)r->w;
    if (o->rank != 0) {
        /* Only rank 0 speaks: the others' log and progress go nowhere. */
        r->quiet = fopen("/dev/null", "w");
        if (!r->quiet) rc = rt_run_fail(r, "/dev/null: %s", strerror(errno));
        o->out = r->quiet;
        o->metrics = NULL, o->save_params = NULL;
        rt_progress_init(&r->bar, r->quiet);
    }
    r->sched = rt_schedule_make(&r->t, r->global);
    r->sched.warmup_asked = o->warmup_epochs >= 0;
    r->sched.per_iteration = o->warmup_per_iteration;
    r->sched.span_steps = o->schedule_steps;
    r->sched.stop_steps = o->steps;
    if (!rc) rc = rt_run_check_outputs(r);
    if (!rc) rc = rt_run_open_data(r);
    if (!rc) r->sched.steps_per_epoch = (long)r->train_b.batches;
    if (!rc && o->metrics && !o->benchmark && !o->resume) {
        r->metrics_path = o->metrics;
        rc = rt_run_open_metrics(r);
    }
    return rc;
}

/* The images an accuracy pass over b reads. */
static long long images_read(const rt_batcher *b, int batch) {
    long long n = (long long)b->batches * batch, all = (long long)b->ds->count;
    return n < all ? n : all;
}

/* The start-up lines on stderr (rank 0). */
static void banner(const rt_run *r, const dpc_plan *plan) {
    const rt_train_options *o = r->o;
    if (o->rank != 0) return;
    if (r->tokens)
        rt_log(RT_LOG_INFO,
               "%s: %lld parameters, %s backend, %d replica%s x batch %d, %ld steps per "
               "epoch, %lld train / %lld val tokens, windows of %d, val loss over %lld windows",
               plan->model, (long long)ir_num_params(plan->train), r->be->name, r->total,
               r->total > 1 ? "s" : "", r->batch, (long)r->train_b.batches,
               (long long)r->tok_train->count, (long long)r->tok_val->count, r->t.block + 1,
               (long long)(r->test_b.batches * r->eval_batch < r->test_b.windows
                               ? r->test_b.batches * r->eval_batch
                               : r->test_b.windows));
    else
        rt_log(RT_LOG_INFO,
               "%s: %lld parameters, %s backend, %d replica%s x batch %d, %ld steps per "
               "epoch, %lld train / %lld test images (%s)",
               plan->model, (long long)ir_num_params(plan->train), r->be->name, r->total,
               r->total > 1 ? "s" : "", r->batch, (long)r->train_b.batches,
               (long long)r->train_ds->count, (long long)r->test_ds->count, r->train_ds->name);
    if (o->steps != 0) /* --steps 0 only evaluates: no schedule runs */
        rt_schedule_say_notes(&r->sched, o->result ? o->result->note : NULL,
                              o->result ? sizeof o->result->note : 0);
    if (o->eval_batches > 0 && !r->tokens)
        rt_log(RT_LOG_NOTE,
               "--eval-batches %ld: an accuracy pass reads at most the first %lld of "
               "%lld test images, or %lld of %lld train images",
               o->eval_batches, images_read(&r->test_b, r->eval_batch),
               (long long)r->test_ds->count, images_read(&r->train_eval_b, r->eval_batch),
               (long long)r->train_ds->count);
    if (r->total > 1) {
        rt_replicas_banner(r->be->name, r->devices, r->local, o->ranks, r->accum, r->batch);
        fmt_memory need;
        char what[400], each[32], all[32], why[256];
        if (r->local > 1 && !rt_memory_need(plan, &need, why, sizeof why)) {
            /* what each replica holds: what remat (dpc --passes) trades for time */
            fmt_memory_describe(&need, what, sizeof what);
            int64_t one = fmt_memory_total(&need);
            rt_log(RT_LOG_INFO, "memory per replica %s (%s); %d in this process %s",
                   base_bytes_str(one, each, sizeof each), what, r->local,
                   base_bytes_str(base_bytes_mul(one, r->local), all, sizeof all));
        }
        rt_log(RT_LOG_INFO, "gradients summed by the %s collective", rt_coll_name(r->coll));
        const rt_shard *sh = rt_replicas_shards(r->R);
        if (sh) {
            char most[32], total[32];
            rt_log(RT_LOG_INFO,
                   "optimizer state per replica %s sharded (the largest of %d shards), %s "
                   "unsharded",
                   base_bytes_str(rt_shard_state_most(sh), most, sizeof most), sh->replicas,
                   base_bytes_str(sh->state_total, total, sizeof total));
        }
    }
    if (r->accum > 1) {
        char grads[32];
        rt_log(RT_LOG_INFO,
               "each replica accumulates %d micro-batches of %d per step: global batch %d, "
               "as %d replicas without accumulation (ghost BatchNorm per micro-batch); the "
               "gradients of the micro-batches take %s per replica",
               r->accum, r->batch, r->global, r->total * r->accum,
               base_bytes_str(rt_memory_accumulate(plan, r->accum), grads, sizeof grads));
    }
}

/* --benchmark or the training; then --save-params. */
static int run_it(rt_run *r, const dpc_plan *plan, const rt_train_options *o) {
    int rc = o->benchmark ? rt_run_benchmark(r) : rt_run_train(r);
    if (!rc && o->save_params && rt_params_save(plan, r->st, o->save_params, r->err, sizeof r->err))
        rc = rt_run_fail(r, "%s", r->err);
    return rc;
}

int rt_train(const dpc_plan *plan, const rt_train_options *opt, char *err, size_t errlen) {
    rt_train_options o = *opt;
    if (!o.out) o.out = stdout;
    rt_run *r = calloc(1, sizeof *r);
    RT_CHECK_ALLOC(r);
    r->plan = plan, r->o = &o;
    rt_progress_init(&r->bar, stderr);
    rt_progress_lines(&r->bar, o.progress_every);
    if (o.result) {
        memset(o.result, 0, sizeof *o.result);
        o.result->train_loss = NAN;
        o.result->train_accuracy = o.result->test_accuracy = -1;
    }
    /* Signals stop the run in order from here on (stop.c). */
    struct sigaction old[RT_STOP_SIGNALS];
    rt_run_catch_signals(old);
    int rc = rt_run_check(r, plan, &o);
    if (!rc) rc = open_run(r, &o);
    if (!rc) rc = rt_run_build(r);
    if (!rc && o.resume) rc = rt_run_resume(r);
    rc = rt_run_setup_stopped(r, rc);
    if (!rc) banner(r, plan);
    if (!rc) rc = run_it(r, plan, &o);
    /* A signal after the last check point (the final writes) still makes
     * the run end non-zero: a caught signal never exits 0. */
    if (!rc && rt_run_stop_requested())
        rc = rt_run_stopped(r, "after the run finished (every output was written)", 0, -1);
    rt_run_free(r);
    rt_run_release_signals(old);
    if (o.result) {
        o.result->status = rc;
        if (rc) { /* cut to fit; snprintf here draws a truncation warning */
            size_t n = strnlen(r->error, sizeof o.result->error - 1);
            memcpy(o.result->error, r->error, n);
            o.result->error[n] = 0;
        }
    }
    if (errlen) err[0] = 0;
    if (rc && r->error[0]) base_fail(err, errlen, "%s", r->error);
    free(r);
    return rc;
}
