/* runtime/train/eval.c — accuracy: the eval program (BatchNorm in
 * inference mode) over a batcher's images, on one replica or round-robin
 * on all of them. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/check.h"
#include "runtime/clock.h"
#include "runtime/train/internal.h"

/* Accuracy with several replicas: eval batch i goes to global replica
 * i mod R, which prepares it itself (batch preparation is a pure function
 * of the batch index) and classifies it with its own parameters and
 * BatchNorm statistics. */
typedef struct {
    rt_run *r;
    const rt_batcher *b;
    int stoppable;
    int64_t right[RT_MAX_LOCAL_REPLICAS], seen[RT_MAX_LOCAL_REPLICAS];
} eval_job;

/* A failure found later names the evaluation, not the last train step. */
/* A call without a message of its own failed: msg, and the device's
 * failure when that was why (rt_exec_failed). Returns -1. */
static int eval_fail(const rt_exec *ex, char *err, size_t errlen, const char *msg) {
    char why[1024] = "";
    rt_exec_failed(ex, why, sizeof why);
    return base_fail(err, errlen, "%s%s%s", msg, *why ? ": " : "", why);
}

static void label_eval(rt_backend *be, int replica) {
    char what[64];
    snprintf(what, sizeof what, "the evaluation on replica %d", replica);
    rt_backend_label(be, what);
}

static int eval_replica(rt_replicas *R, int k, void *arg, char *err, size_t errlen) {
    eval_job *j = arg;
    rt_run *r = j->r;
    const rt_batcher *b = j->b;
    rt_exec *ex = rt_replicas_eval(R, k);
    size_t n = (size_t)r->eval_batch;
    float *img = malloc(sizeof(float) * r->img * n);
    int32_t *lab = malloc(sizeof(int32_t) * n);
    float *logits = r->logits + (size_t)k * n * (size_t)r->classes;
    RT_CHECK_ALLOC(img && lab);
    label_eval(r->bes[k], rt_replicas_global(R, k));
    int rc = 0;
    for (int64_t bi = rt_replicas_global(R, k); bi < b->batches && !rc; bi += r->total) {
        if (j->stoppable && rt_run_stop_pending()) break; /* the caller stops the run */
        int real = rt_batcher_fill(b, NULL, 0, bi * (int64_t)n, (int)n, img, lab);
        if (rt_exec_set_input(ex, "image", img, sizeof(float) * r->img * n) ||
            (r->eval_has_label && rt_exec_set_input(ex, "label", lab, sizeof(int32_t) * n))) {
            eval_fail(ex, err, errlen, "the eval program refused its inputs");
            rc = -1;
        } else if (rt_exec_run(ex, err, errlen)) {
            rc = -1;
        } else if (rt_exec_get(ex, "logits", logits, sizeof(float) * n * (size_t)r->classes)) {
            eval_fail(ex, err, errlen, "cannot read the eval program's logits");
            rc = -1;
        }
        for (int i = 0; i < real && !rc; i++) {
            const float *l = logits + (size_t)i * (size_t)r->classes;
            int best = 0;
            for (int c = 1; c < r->classes; c++)
                if (l[c] > l[best]) best = c;
            j->right[k] += best == lab[i];
        }
        j->seen[k] += real;
    }
    free(img);
    free(lab);
    return rc;
}

static int accuracy_replicas(rt_run *r, const rt_batcher *b, double *acc, int stoppable) {
    eval_job j;
    memset(&j, 0, sizeof j);
    j.r = r, j.b = b, j.stoppable = stoppable;
    if (rt_replicas_run(r->R, eval_replica, &j, r->err, sizeof r->err))
        return rt_run_fail(r, "eval failed: %s", r->err);
    double count[2] = {0, 0};
    for (int k = 0; k < r->local; k++)
        count[0] += (double)j.right[k], count[1] += (double)j.seen[k];
    rt_mpi_allreduce_sum_f64(count, 2);
    *acc = count[1] > 0 ? count[0] / count[1] : 0;
    return 0;
}

/* Fraction of the batcher's images whose largest logit is the label (ties:
 * the first class), with the eval program (BatchNorm inference mode).
 * stoppable: a stop request ends the pass at the next batch, and the
 * caller, seeing it, stops the run without using *acc. */
int rt_run_accuracy(rt_run *r, const rt_batcher *b, const char *what, double *acc, int stoppable) {
    if (r->total > 1) return accuracy_replicas(r, b, acc, stoppable);
    rt_exec *eval = rt_replicas_eval(r->R, 0);
    size_t img = (size_t)r->c * (size_t)r->h * (size_t)r->w;
    rt_pipeline *in = rt_run_input_at(r, b, b->batches, 0, 0);
    if (!in) return 1;
    int64_t right = 0, total = 0;
    int rc = 0;
    double t0 = rt_now();
    label_eval(r->bes[0], 0);
    rt_progress_begin(&r->bar, what, (long)b->batches);
    const rt_batch *bt;
    while (!rc && !(stoppable && rt_run_stop_pending()) && (bt = rt_pipeline_next(in))) {
        if (rt_exec_set_input(eval, "image", bt->images,
                              sizeof(float) * img * (size_t)r->eval_batch) ||
            (r->eval_has_label && rt_exec_set_input(eval, "label", bt->labels,
                                                    sizeof(int32_t) * (size_t)r->eval_batch))) {
            eval_fail(eval, r->err, sizeof r->err, "the eval program refused its inputs");
            rc = rt_run_fail(r, "%s", r->err);
            break;
        }
        /* Labels are needed after the run: keep the slot until then. */
        if (rt_exec_run(eval, r->err, sizeof r->err)) {
            rc = rt_run_fail(r, "eval failed: %s", r->err);
            break;
        }
        size_t lbytes = sizeof(float) * (size_t)r->eval_batch * (size_t)r->classes;
        if (rt_exec_get(eval, "logits", r->logits, lbytes)) {
            eval_fail(eval, r->err, sizeof r->err, "cannot read the eval program's logits");
            rc = rt_run_fail(r, "%s", r->err);
            break;
        }
        for (int i = 0; i < bt->real; i++) {
            const float *l = r->logits + (size_t)i * (size_t)r->classes;
            int best = 0;
            for (int k = 1; k < r->classes; k++)
                if (l[k] > l[best]) best = k;
            right += best == bt->labels[i];
        }
        total += bt->real;
        rt_progress_update(&r->bar, (long)(bt->index + 1), (double)total / (rt_now() - t0), NAN);
    }
    rt_progress_clear(&r->bar);
    rt_pipeline_free(in);
    *acc = total ? (double)right / (double)total : 0;
    return rc;
}
