/* runtime/train/replicas.c — N replicas of a plan, one host thread each
 * (replicas.h).
 *
 * The threads are made once and then wait for jobs: rt_replicas_run hands
 * every thread the same function, each calls it with its replica index, and
 * the caller waits for all. A training step is one such job; so are
 * evaluation and the start-up broadcast of the weights. With one replica
 * the job runs on the caller's thread, exactly as a plain single-device
 * run would.
 */
#include "runtime/env.h"
#include "runtime/train/replicas.h"

#include <cblas.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ir/names.h"
#include "runtime/device/device.h"
#include "runtime/check.h"
#include "runtime/comm/comm.h"
#include "runtime/data/data.h"
#include "runtime/exec/exec.h"
#include "runtime/train/internal.h"

#define ERR_MAX 512

typedef struct rt_replicas rt_replicas;
typedef struct {
    rt_replicas *R;
    int r;
} worker_arg;

struct rt_replicas {
    rt_backend **be;
    const dpc_plan *plan;
    int n;
    int accum; /* micro-batches per step (--accumulate) */
    rt_coll *coll;
    int batch;          /* per replica */
    size_t image_elems; /* floats (token ids) per sample of the first input */
    size_t label_elems; /* labels (targets) per sample */
    const char *x, *y;  /* the inputs: "image" "label", or "tokens" "targets" */
    rt_store **st;
    rt_exec **train, **eval;
    rt_coll_queue **q;
    rt_shard *shard; /* ZeRO-1 (rt_replicas_shard), or NULL */
    /* the thread pool */
    pthread_t *th;
    worker_arg *wargs;
    int nthreads;
    pthread_mutex_t mu;
    pthread_cond_t job_cv, done_cv;
    unsigned long job; /* generation of the current job */
    int pending, stop;
    rt_replica_fn fn;
    void *arg;
    int *rc;
    char (*err)[ERR_MAX];
    int has_step; /* the train program reads the scalar input "step" */
    int has_key;  /* ... and dropout's IR_DROPOUT_KEY */
    int64_t step;
    uint64_t seed;        /* dropout's masks: rt_replicas_set_seed */
    rt_readback **lossrb; /* per replica: the losses read while the next step runs */
};

static void *worker(void *p) {
    rt_replicas *R = ((worker_arg *)p)->R;
    int r = ((worker_arg *)p)->r;
    unsigned long seen = 0;
    for (;;) {
        pthread_mutex_lock(&R->mu);
        while (R->job == seen && !R->stop) pthread_cond_wait(&R->job_cv, &R->mu);
        if (R->stop) {
            pthread_mutex_unlock(&R->mu);
            return NULL;
        }
        seen = R->job;
        rt_replica_fn fn = R->fn;
        void *arg = R->arg;
        pthread_mutex_unlock(&R->mu);
        R->err[r][0] = 0;
        int rc = fn(R, r, arg, R->err[r], ERR_MAX);
        /* The others may be blocked in a collective waiting for us. */
        if (rc && R->coll) rt_coll_abort(R->coll);
        pthread_mutex_lock(&R->mu);
        R->rc[r] = rc;
        if (--R->pending == 0) pthread_cond_broadcast(&R->done_cv);
        pthread_mutex_unlock(&R->mu);
    }
}

static int fail(char *err, size_t errlen, const char *msg, int r, const char *why) {
    return base_fail(err, errlen, "replica %d: %s%s%s", r, msg, why && *why ? ": " : "",
                     why ? why : "");
}

/* A call of replica r's train program without a message of its own
 * (inputs, outputs) failed: msg, and the device's failure when that was
 * why (exec.h's rt_exec_failed). */
static int exec_fail(const rt_replicas *R, char *err, size_t errlen, const char *msg, int r) {
    char why[ERR_MAX - 64] = "";
    rt_exec_failed(R->train[r], why, sizeof why);
    return fail(err, errlen, msg, r, why);
}

/* A failed call of replica r's train step: the step (from 0, as the
 * training loop's messages count) and the replica. */
static int step_fail(const rt_replicas *R, char *err, size_t errlen, int r, const char *why) {
    return base_fail(err, errlen, "step %lld of replica %d: %s", (long long)R->step - 1,
                     rt_replicas_global(R, r), why);
}

/* DPC_CUDA_GRAPH=0 turns CUDA graphs off; on by default. */
static int graphs_wanted(void) { return rt_env_flag("DPC_CUDA_GRAPH", 1); }

rt_replicas *rt_replicas_new(rt_backend *const *be, const dpc_plan *plan, int n, rt_coll *coll,
                             char *err, size_t errlen) {
    return rt_replicas_new_accum(be, plan, n, 1, coll, err, errlen);
}

rt_replicas *rt_replicas_new_accum(rt_backend *const *be, const dpc_plan *plan, int n, int accum,
                                   rt_coll *coll, char *err, size_t errlen) {
    if (n < 1 || !plan->train || !plan->eval) {
        base_fail(err, errlen, "replicas: need n >= 1 and a plan with train and eval programs");
        return NULL;
    }
    if (accum < 1 || (accum > 1 && !coll)) {
        base_fail(err, errlen, "replicas: %d micro-batches per step%s", accum,
                  accum > 1 ? " need a communicator" : "");
        return NULL;
    }
    if (coll && rt_coll_local_size(coll) != n) {
        base_fail(err, errlen, "replicas: communicator for %d replicas, not %d",
                  rt_coll_local_size(coll), n);
        return NULL;
    }
    rt_replicas *R = calloc(1, sizeof *R);
    RT_CHECK_ALLOC(R);
    R->plan = plan, R->n = n, R->coll = coll, R->accum = accum;
    for (int i = 0; i < plan->train->n; i++) {
        const ir_node *in = &plan->train->nodes[i];
        R->has_step |= in->op == IR_OP_INPUT && !strcmp(in->name, "step");
        R->has_key |= in->op == IR_OP_INPUT && !strcmp(in->name, IR_DROPOUT_KEY);
    }
    R->be = calloc((size_t)n, sizeof *R->be);
    RT_CHECK_ALLOC(R->be);
    for (int r = 0; r < n; r++) R->be[r] = be[r];
    R->st = calloc((size_t)n, sizeof *R->st);
    R->train = calloc((size_t)n, sizeof *R->train);
    R->eval = calloc((size_t)n, sizeof *R->eval);
    R->q = calloc((size_t)n, sizeof *R->q);
    R->rc = calloc((size_t)n, sizeof *R->rc);
    R->err = calloc((size_t)n, sizeof *R->err);
    R->lossrb = calloc((size_t)n, sizeof *R->lossrb);
    RT_CHECK_ALLOC(R->st && R->train && R->eval && R->q && R->rc && R->err && R->lossrb);
    pthread_mutex_init(&R->mu, NULL);
    pthread_cond_init(&R->job_cv, NULL);
    pthread_cond_init(&R->done_cv, NULL);
    const ir_graph *g = plan->train;
    int tokens = !strcmp(plan->schedule.dataset, "tokens");
    R->x = tokens ? "tokens" : "image", R->y = tokens ? "targets" : "label";
    R->label_elems = 1;
    for (int i = 0; i < g->n; i++) {
        const ir_node *in = &g->nodes[i];
        if (in->op != IR_OP_INPUT || in->type.ndim < 1) continue;
        size_t per = (size_t)(ir_numel(&in->type) / in->type.dim[0]);
        if (!strcmp(in->name, R->x)) R->batch = (int)in->type.dim[0], R->image_elems = per;
        if (!strcmp(in->name, R->y)) R->label_elems = per;
    }
    /* Gradients really travel, or the micro-batches' are summed. */
    int shared = coll && (rt_coll_size(coll) > 1 || accum > 1);
    char why[ERR_MAX];
    if (shared) {
        /* Without allreduce nodes every replica would train on its own
         * slice and silently drift apart. */
        int sums = 0, grads = 0;
        for (int i = 0; i < g->n; i++)
            sums += g->nodes[i].op == IR_OP_ALLREDUCE,
                grads += (g->nodes[i].flags & IR_FLAG_GRAD) != 0;
        if (grads && !sums) {
            base_fail(err, errlen,
                      "the plan's train program has no all-reduce of its gradients (compiled "
                      "by a dpc without the partition pass?): recompile it to run %d replicas "
                      "of %d micro-batches",
                      rt_coll_size(coll), accum);
            rt_replicas_free(R);
            return NULL;
        }
    }
    /* Built one after another on this thread: the compile cache and the
     * backend's module loading are not meant for concurrent callers. */
    for (int r = 0; r < n; r++) {
        R->st[r] = rt_store_new(be[r], plan->train);
        R->train[r] = rt_exec_new(be[r], R->st[r], plan->train, plan, why, sizeof why);
        if (!R->train[r]) {
            fail(err, errlen, "cannot build the train program", r, why);
            goto bad;
        }
        R->eval[r] = rt_exec_new(be[r], R->st[r], plan->eval, plan, why, sizeof why);
        if (!R->eval[r]) {
            fail(err, errlen, "cannot build the eval program", r, why);
            goto bad;
        }
        if (shared) {
            rt_coll_set_backend(coll, r, be[r]);
            R->q[r] = rt_coll_queue_new(coll, r);
            if (rt_coll_queue_set_parts(R->q[r], accum, why, sizeof why) ||
                rt_exec_set_collective(R->train[r], R->q[r], why, sizeof why)) {
                fail(err, errlen, "cannot attach the collective", r, why);
                goto bad;
            }
        }
    }
    rt_replicas_use_graphs(R, graphs_wanted());
    return R;
bad:
    rt_replicas_free(R);
    return NULL;
}

int rt_replicas_use_graphs(rt_replicas *R, int on) {
    int used = 0;
    for (int r = 0; r < R->n; r++) used += rt_exec_use_graphs(R->train[r], on);
    return used == R->n;
}

static void stop_threads(rt_replicas *R) {
    if (!R->nthreads) return;
    pthread_mutex_lock(&R->mu);
    R->stop = 1;
    pthread_cond_broadcast(&R->job_cv);
    pthread_mutex_unlock(&R->mu);
    for (int r = 0; r < R->nthreads; r++) pthread_join(R->th[r], NULL);
    R->nthreads = 0;
}

void rt_replicas_free(rt_replicas *R) {
    if (!R) return;
    stop_threads(R);
    free(R->th);
    free(R->wargs);
    /* Queues first: their threads read the executors' buffers. */
    for (int r = 0; r < R->n; r++) rt_coll_queue_free(R->q[r]);
    for (int r = 0; r < R->n; r++) rt_readback_free(R->lossrb[r]);
    for (int r = 0; r < R->n; r++) {
        rt_exec_free(R->train[r]);
        rt_exec_free(R->eval[r]);
        rt_store_free(R->st[r]);
    }
    rt_shard_free(R->shard);
    free(R->q), free(R->train), free(R->eval), free(R->st), free(R->rc), free(R->err), free(R->be);
    free(R->lossrb);
    pthread_mutex_destroy(&R->mu);
    pthread_cond_destroy(&R->job_cv);
    pthread_cond_destroy(&R->done_cv);
    free(R);
}

int rt_replicas_count(const rt_replicas *R) { return R->n; }
int rt_replicas_accumulate(const rt_replicas *R) { return R->accum; }
int64_t rt_replicas_parts_bytes(const rt_replicas *R) {
    return R->q[0] ? rt_coll_queue_parts_bytes(R->q[0]) : 0;
}
rt_store *rt_replicas_store(rt_replicas *R, int r) { return r >= 0 && r < R->n ? R->st[r] : NULL; }
rt_exec *rt_replicas_train(rt_replicas *R, int r) {
    return r >= 0 && r < R->n ? R->train[r] : NULL;
}
rt_exec *rt_replicas_eval(rt_replicas *R, int r) { return r >= 0 && r < R->n ? R->eval[r] : NULL; }
rt_coll *rt_replicas_coll(rt_replicas *R) { return R->coll; }
int rt_replicas_global(const rt_replicas *R, int r) {
    return R->coll ? rt_coll_global_replica(R->coll, r) : r;
}
int rt_replicas_total(const rt_replicas *R) { return R->coll ? rt_coll_size(R->coll) : R->n; }

int rt_replicas_run(rt_replicas *R, rt_replica_fn fn, void *arg, char *err, size_t errlen) {
    if (R->n == 1) {
        int rc = fn(R, 0, arg, err, errlen);
        if (rc && R->coll) rt_coll_abort(R->coll);
        return rc ? -1 : 0;
    }
    if (!R->nthreads) {
        R->th = calloc((size_t)R->n, sizeof *R->th);
        R->wargs = calloc((size_t)R->n, sizeof *R->wargs);
        RT_CHECK_ALLOC(R->th && R->wargs);
        for (int r = 0; r < R->n; r++) {
            R->wargs[r] = (worker_arg){R, r};
            if (pthread_create(&R->th[r], NULL, worker, &R->wargs[r])) {
                RT_SYS_FAIL("pthread_create (replica %d)", r);
                abort();
            }
            R->nthreads++;
        }
    }
    pthread_mutex_lock(&R->mu);
    R->fn = fn, R->arg = arg;
    R->pending = R->n;
    R->job++;
    pthread_cond_broadcast(&R->job_cv);
    while (R->pending) pthread_cond_wait(&R->done_cv, &R->mu);
    pthread_mutex_unlock(&R->mu);
    /* The first replica that failed for a reason of its own; replicas that
     * only saw the collective aborted come last. */
    int first = -1;
    for (int r = 0; r < R->n; r++)
        if (R->rc[r] && (first < 0 || (strstr(R->err[first], "collective aborted") &&
                                       !strstr(R->err[r], "collective aborted"))))
            first = r;
    if (first < 0) return 0;
    return base_fail(err, errlen, "%s", R->err[first]);
}

static int sync_one(rt_replicas *R, int r, void *arg, char *err, size_t errlen) {
    (void)arg;
    rt_store *st = R->st[r];
    for (int i = 0; i < rt_store_count(st); i++) {
        const ir_type *t = rt_store_type(st, i);
        size_t bytes = (size_t)ir_numel(t) * ir_dtype_size(t->dtype);
        if (rt_store_owner(st, i) >= 0) continue; /* a shard: its owner's alone */
        if (rt_coll_broadcast(R->coll, r, rt_store_buffer(st, i), bytes, err, errlen)) return -1;
    }
    return 0;
}

/* ZeRO-1's all-gather: every parameter from the replica that updated it. */
static int gather_params(rt_replicas *R, int r, char *err, size_t errlen) {
    rt_store *st = R->st[r];
    ir_names nodes = ir_names_of_nodes(R->plan->train);
    int rc = 0;
    for (int i = 0; i < rt_store_count(st) && !rc; i++) {
        int node = ir_names_find(&nodes, rt_store_name(st, i));
        int owner = node >= 0 ? R->shard->owner[node] : -1;
        if (owner < 0 || R->plan->train->nodes[node].op != IR_OP_PARAM) continue;
        const ir_type *t = rt_store_type(st, i);
        size_t bytes = (size_t)ir_numel(t) * ir_dtype_size(t->dtype);
        rc = rt_coll_broadcast_from(R->coll, r, owner, rt_store_buffer(st, i), bytes, err, errlen);
    }
    ir_names_free(&nodes);
    return rc ? -1 : 0;
}

static int shard_one(rt_replicas *R, int r, void *arg, char *err, size_t errlen) {
    (void)arg;
    int me = rt_replicas_global(R, r), first = rt_replicas_global(R, 0);
    if (rt_exec_set_shard(R->train[r], R->shard, me, err, errlen)) return -1;
    ir_names nodes = ir_names_of_nodes(R->plan->train);
    for (int i = 0; i < rt_store_count(R->st[r]); i++) {
        int node = ir_names_find(&nodes, rt_store_name(R->st[r], i));
        if (node < 0 || R->plan->train->nodes[node].op != IR_OP_STATE) continue;
        int owner = R->shard->owner[node], home = owner - first;
        if (owner >= 0)
            rt_store_shard(R->st[r], i, owner, me, home >= 0 && home < R->n ? R->st[home] : NULL);
    }
    ir_names_free(&nodes);
    return 0;
}

int rt_replicas_shard(rt_replicas *R, char *err, size_t errlen) {
    R->shard = rt_shard_new(R->plan->train, rt_replicas_total(R), err, errlen);
    if (!R->shard) return -1;
    /* One thread: the stores alias each other's bytes while they change. */
    for (int r = 0; r < R->n; r++)
        if (shard_one(R, r, NULL, err, errlen)) return -1;
    return 0;
}

const rt_shard *rt_replicas_shards(const rt_replicas *R) { return R->shard; }

int rt_replicas_sync(rt_replicas *R, char *err, size_t errlen) {
    if (!R->coll || rt_coll_size(R->coll) == 1) return 0;
    return rt_replicas_run(R, sync_one, NULL, err, errlen);
}

typedef struct {
    const float *images;
    const int32_t *labels;
    float lr, grad_scale;
    float *losses;
} step_arg;

/* Replica r's micro-batch k of images/labels into its train program's
 * inputs: the slice of global replica r*K+k of a run without accumulation. */
static size_t slice_of(const rt_replicas *R, int r, int k) {
    return ((size_t)r * (size_t)R->accum + (size_t)k) * (size_t)R->batch;
}

static int set_batch(rt_replicas *R, int r, int k, const float *images, const int32_t *labels) {
    rt_exec *ex = R->train[r];
    size_t b = (size_t)R->batch, off = slice_of(R, r, k);
    return rt_exec_set_input(ex, R->x, images + off * R->image_elems,
                             sizeof(float) * b * R->image_elems) ||
           rt_exec_set_input(ex, R->y, labels + off * R->label_elems,
                             sizeof(int32_t) * b * R->label_elems);
}

/* Reads micro-batch k's losses (waits for the step). */
static int losses_one(rt_replicas *R, int r, int k, float *losses, char *err, size_t errlen) {
    size_t b = (size_t)R->batch, off = slice_of(R, r, k);
    if (losses && rt_exec_get(R->train[r], "loss", losses + off, sizeof(float) * b))
        return exec_fail(R, err, errlen, "cannot read the train program's loss", r);
    return 0;
}

/* Dropout's key for replica r's micro-batch k of the current step: a pure
 * function of the seed, the step and the micro-batch's place in the global
 * batch (global replica r*K + k of a run without accumulation), so
 * --accumulate K drops what K times the replicas drop, and a resumed run
 * what the uninterrupted one did. Four 16-bit chunks, low first (ir.h). */
static int set_key(rt_replicas *R, int r, int k) {
    uint64_t id = (uint64_t)rt_replicas_global(R, r) * (uint64_t)R->accum + (uint64_t)k;
    uint64_t key = rt_rng_key(R->seed ^ 0x64726f706f7574ull /* "dropout" */, (uint64_t)R->step, id);
    float chunk[4];
    for (int j = 0; j < 4; j++) chunk[j] = (float)((key >> (16 * j)) & 0xffff);
    return rt_exec_set_input(R->train[r], IR_DROPOUT_KEY, chunk, sizeof chunk);
}

/* Sets the inputs (images NULL: already set) and enqueues the step; with
 * accumulation, micro-batches 0..K-2 run (forward and backward, their
 * gradients kept) and their losses are read first. */
static int enqueue_one(rt_replicas *R, int r, const step_arg *a, char *err, size_t errlen) {
    rt_exec *ex = R->train[r];
    rt_backend *be = R->be[r];
    char what[96]; /* a failure found later names the step */
    snprintf(what, sizeof what, "step %lld of replica %d", (long long)R->step - 1,
             rt_replicas_global(R, r));
    rt_backend_label(be, what);
    if (rt_exec_set_scalar(ex, "lr", a->lr) ||
        rt_exec_set_scalar(ex, "grad_scale", a->grad_scale) ||
        (R->has_step && rt_exec_set_scalar(ex, "step", (float)R->step)))
        return exec_fail(R, err, errlen, "the train program refused its inputs", r);
    char why[ERR_MAX - 64];
    for (int k = 0; k < R->accum; k++) {
        if ((a->images && set_batch(R, r, k, a->images, a->labels)) ||
            (R->has_key && set_key(R, r, k)))
            return exec_fail(R, err, errlen, "the train program refused its inputs", r);
        if (k == R->accum - 1) break;
        if (rt_exec_run_partial(ex, k, why, sizeof why)) return step_fail(R, err, errlen, r, why);
        if (losses_one(R, r, k, a->losses, err, errlen)) return -1;
    }
    if (rt_exec_enqueue(ex, why, sizeof why)) return step_fail(R, err, errlen, r, why);
    if (R->shard && gather_params(R, r, why, sizeof why))
        return fail(err, errlen, "all-gather of the parameters failed", r, why);
    return 0;
}

static int step_one(rt_replicas *R, int r, void *p, char *err, size_t errlen) {
    const step_arg *a = p;
    return enqueue_one(R, r, a, err, errlen) ||
                   losses_one(R, r, R->accum - 1, a->losses, err, errlen)
               ? -1
               : 0;
}

void rt_replicas_set_step(rt_replicas *R, int64_t t) { R->step = t; }
void rt_replicas_set_seed(rt_replicas *R, uint64_t seed) { R->seed = seed; }

int rt_replicas_step(rt_replicas *R, const float *images, const int32_t *labels, float lr,
                     float grad_scale, float *losses, char *err, size_t errlen) {
    step_arg a = {images, labels, lr, grad_scale, losses};
    return rt_replicas_run(R, step_one, &a, err, errlen);
}

static int enqueue_job(rt_replicas *R, int r, void *p, char *err, size_t errlen) {
    return enqueue_one(R, r, p, err, errlen);
}

int rt_replicas_step_enqueue(rt_replicas *R, const float *images, const int32_t *labels, float lr,
                             float grad_scale, char *err, size_t errlen) {
    step_arg a = {images, labels, lr, grad_scale, NULL};
    return rt_replicas_run(R, enqueue_job, &a, err, errlen);
}

/* The next batch's copy goes on the stream behind this step, then the
 * losses are read (losses NULL: not yet, rt_replicas_step_reads). */
static int finish_job(rt_replicas *R, int r, void *p, char *err, size_t errlen) {
    const step_arg *a = p;
    if (a->images && set_batch(R, r, 0, a->images, a->labels))
        return exec_fail(R, err, errlen, "the train program refused its inputs", r);
    return a->losses ? losses_one(R, r, 0, a->losses, err, errlen) : 0;
}

int rt_replicas_step_finish(rt_replicas *R, const float *next_images, const int32_t *next_labels,
                            float *losses, char *err, size_t errlen) {
    step_arg a = {next_images, next_labels, 0, 0, losses};
    return rt_replicas_run(R, finish_job, &a, err, errlen);
}

/* On this thread, replica by replica (no job for the threads). */
int rt_replicas_step_reads(rt_replicas *R, char *err, size_t errlen) {
    for (int r = 0; r < R->n; r++) {
        size_t bytes = 0;
        const void *loss = rt_exec_buffer(R->train[r], "loss", &bytes);
        if (!loss || bytes != sizeof(float) * (size_t)R->batch)
            return exec_fail(R, err, errlen, "cannot read the train program's loss", r);
        if (!R->lossrb[r]) R->lossrb[r] = rt_readback_new(R->be[r]);
        rt_readback_add(R->lossrb[r], 0, loss, bytes);
    }
    return 0;
}

int rt_replicas_step_losses(rt_replicas *R, float *losses, char *err, size_t errlen) {
    for (int r = 0; r < R->n; r++) {
        char why[ERR_MAX - 64];
        const void *p = R->lossrb[r] ? rt_readback_wait(R->lossrb[r], why, sizeof why) : NULL;
        if (!R->lossrb[r]) snprintf(why, sizeof why, "no read was started");
        if (!p) return base_fail(err, errlen, "replica %d: %s", rt_replicas_global(R, r), why);
        memcpy(losses + slice_of(R, r, 0), p, sizeof(float) * (size_t)R->batch);
    }
    return 0;
}

/* DPC_INPUT_OVERLAP=0 keeps the copies in step order on every backend;
 * =1 takes the overlapping order on any (on the cpu a copy is done when it
 * returns, so this only tests train.c's order with it). */
int rt_replicas_overlap(const rt_replicas *R) {
    int v = rt_env_int("DPC_INPUT_OVERLAP", -1);
    if (R->accum > 1) return 0; /* the micro-batches' inputs are set one by one */
    if (v >= 0) return v;
    for (int r = 0; r < R->n; r++)
        if (!R->be[r]->async_copy) return 0;
    return 1;
}
