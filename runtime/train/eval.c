/* runtime/train/eval.c — accuracy: the eval program (BatchNorm in
 * inference mode) over a batcher's images, on one replica or round-robin
 * on all of them; for a language model (data tokens) the same pass gives
 * the val loss, the mean cross-entropy of every target token. */
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
    double right[RT_MAX_LOCAL_REPLICAS], seen[RT_MAX_LOCAL_REPLICAS];
} eval_job;

/* The first `real` samples' score into *sum and *count: a classifier's
 * right answers (the largest logit, ties to the first class) of its
 * samples; a language model's cross-entropy (log-sum-exp less the
 * target's logit, in double) summed over its T tokens a sample. */
static void score(const rt_run *r, const float *logits, const int32_t *lab, int real, double *sum,
                  double *count) {
    int V = r->classes;
    if (!r->tokens) {
        for (int i = 0; i < real; i++) {
            const float *l = logits + (size_t)i * (size_t)V;
            int best = 0;
            for (int c = 1; c < V; c++)
                if (l[c] > l[best]) best = c;
            *sum += best == lab[i];
        }
        *count += real;
        return;
    }
    size_t rows = (size_t)real * r->lab;
    for (size_t i = 0; i < rows; i++) {
        const float *l = logits + i * (size_t)V;
        float m = l[0];
        for (int c = 1; c < V; c++)
            if (l[c] > m) m = l[c];
        double z = 0;
        for (int c = 0; c < V; c++) z += exp((double)l[c] - m);
        *sum += log(z) + m - l[lab[i]];
    }
    *count += (double)rows;
}

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
    int32_t *lab = malloc(sizeof(int32_t) * n * r->lab);
    float *logits = r->logits + (size_t)k * n * r->logit_elems;
    RT_CHECK_ALLOC(img && lab);
    label_eval(r->bes[k], rt_replicas_global(R, k));
    int rc = 0;
    for (int64_t bi = rt_replicas_global(R, k); bi < b->batches && !rc; bi += r->total) {
        if (j->stoppable && rt_run_stop_pending()) break; /* the caller stops the run */
        int real = rt_batcher_fill(b, NULL, 0, bi * (int64_t)n, (int)n, img, lab);
        if (rt_exec_set_input(ex, r->xname, img, sizeof(float) * r->img * n) ||
            (r->eval_has_label &&
             rt_exec_set_input(ex, r->yname, lab, sizeof(int32_t) * n * r->lab))) {
            eval_fail(ex, err, errlen, "the eval program refused its inputs");
            rc = -1;
        } else if (rt_exec_run(ex, err, errlen)) {
            rc = -1;
        } else if (rt_exec_get(ex, "logits", logits, sizeof(float) * n * r->logit_elems)) {
            eval_fail(ex, err, errlen, "cannot read the eval program's logits");
            rc = -1;
        }
        if (!rc) score(r, logits, lab, real, &j->right[k], &j->seen[k]);
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
    for (int k = 0; k < r->local; k++) count[0] += j.right[k], count[1] += j.seen[k];
    rt_mpi_allreduce_sum_f64(count, 2);
    *acc = count[1] > 0 ? count[0] / count[1] : 0;
    return 0;
}

/* Fraction of the batcher's images whose largest logit is the label (ties:
 * the first class), with the eval program (BatchNorm inference mode); a
 * language model's mean token cross-entropy (score()).
 * stoppable: a stop request ends the pass at the next batch, and the
 * caller, seeing it, stops the run without using *acc. */
int rt_run_accuracy(rt_run *r, const rt_batcher *b, const char *what, double *acc, int stoppable) {
    if (r->total > 1) return accuracy_replicas(r, b, acc, stoppable);
    rt_exec *eval = rt_replicas_eval(r->R, 0);
    size_t img = (size_t)r->c * (size_t)r->h * (size_t)r->w;
    rt_pipeline *in = rt_run_input_at(r, b, b->batches, 0, 0);
    if (!in) return 1;
    double right = 0, seen = 0;
    int64_t total = 0;
    int rc = 0;
    double t0 = rt_now();
    label_eval(r->bes[0], 0);
    rt_progress_begin(&r->bar, what, (long)b->batches);
    const rt_batch *bt;
    while (!rc && !(stoppable && rt_run_stop_pending()) && (bt = rt_pipeline_next(in))) {
        if (rt_exec_set_input(eval, r->xname, bt->images,
                              sizeof(float) * img * (size_t)r->eval_batch) ||
            (r->eval_has_label &&
             rt_exec_set_input(eval, r->yname, bt->labels,
                               sizeof(int32_t) * (size_t)r->eval_batch * r->lab))) {
            eval_fail(eval, r->err, sizeof r->err, "the eval program refused its inputs");
            rc = rt_run_fail(r, "%s", r->err);
            break;
        }
        /* Labels are needed after the run: keep the slot until then. */
        if (rt_exec_run(eval, r->err, sizeof r->err)) {
            rc = rt_run_fail(r, "eval failed: %s", r->err);
            break;
        }
        size_t lbytes = sizeof(float) * (size_t)r->eval_batch * r->logit_elems;
        if (rt_exec_get(eval, "logits", r->logits, lbytes)) {
            eval_fail(eval, r->err, sizeof r->err, "cannot read the eval program's logits");
            rc = rt_run_fail(r, "%s", r->err);
            break;
        }
        score(r, r->logits, bt->labels, bt->real, &right, &seen);
        total += bt->real;
        rt_progress_update(&r->bar, (long)(bt->index + 1), (double)total / (rt_now() - t0), NAN);
    }
    rt_progress_clear(&r->bar);
    rt_pipeline_free(in);
    *acc = seen > 0 ? right / seen : 0;
    return rc;
}
