/* runtime/train/guard.c — the non-finite guard: after each step, replica
 * 0's parameters are checked (a non-finite gradient makes them
 * non-finite), from a copy queued behind the step and read while the next
 * one runs (loop.c); a bad step stops the run or, with --on-nan skip, is
 * undone from the host snapshot taken before it. */
#include <math.h>
#include <stdlib.h>

#include "ir/names.h"
#include "runtime/check.h"
#include "runtime/clock.h"
#include "runtime/train/internal.h"
#include "runtime/log.h"

/* Replica 0's parameters, found once. */
static void find_params(rt_run *r) {
    if (r->params) return;
    int count = rt_store_count(r->st);
    r->params = malloc(sizeof(int) * (size_t)(count + 1));
    RT_CHECK_ALLOC(r->params);
    ir_names nodes = ir_names_of_nodes(r->plan->train);
    for (int i = 0; i < count; i++) {
        int n = ir_names_find(&nodes, rt_store_name(r->st, i));
        if (n < 0 || r->plan->train->nodes[n].op != IR_OP_PARAM) continue;
        r->params[r->nparams++] = i;
    }
    ir_names_free(&nodes);
}

static size_t param_bytes(const rt_run *r, int i) {
    const ir_type *t = rt_store_type(r->st, i);
    return (size_t)ir_numel(t) * ir_dtype_size(t->dtype);
}

void rt_run_params_read(rt_run *r) {
    find_params(r);
    if (!r->param_rb) r->param_rb = rt_readback_new(r->bes[0]);
    size_t off = 0;
    for (int p = 0; p < r->nparams; p++) {
        int i = r->params[p];
        rt_readback_add(r->param_rb, off, rt_store_buffer(r->st, i), param_bytes(r, i));
        off += param_bytes(r, i);
    }
    r->params_queued = 1;
}

/* Index of a replica-0 parameter that is not finite after the step, -1
 * when all are, -2 + r->err when the read failed. The update reads every
 * gradient element (w += m v - lr (g s + wd w)), so a non-finite gradient
 * shows here. The read is the one rt_run_params_read queued behind the
 * step, or one made now. */
int rt_run_nonfinite_param(rt_run *r) {
    double t0 = rt_now();
    if (!r->params_queued) rt_run_params_read(r);
    r->params_queued = 0;
    const unsigned char *h = rt_readback_wait(r->param_rb, r->err, sizeof r->err);
    if (!h) return -2;
    size_t off = 0;
    for (int p = 0; p < r->nparams; p++) {
        int i = r->params[p];
        int64_t n = ir_numel(rt_store_type(r->st, i));
        /* All exponent bits set: inf or nan. An or-reduction vectorises. */
        uint32_t bad = 0;
        if (rt_store_type(r->st, i)->dtype == IR_BF16) {
            const uint16_t *bits = (const uint16_t *)(h + off);
            for (int64_t j = 0; j < n; j++) bad |= (bits[j] & 0x7f80u) == 0x7f80u;
        } else {
            const uint32_t *bits = (const uint32_t *)(h + off);
            for (int64_t j = 0; j < n; j++) bad |= (bits[j] & 0x7f800000u) == 0x7f800000u;
        }
        off += param_bytes(r, i);
        if (bad) return i;
    }
    r->check_s += rt_now() - t0;
    return -1;
}

/* --on-nan skip: copies every replica's persistent tensors to the host
 * (take) or back (restore), so a bad step can be undone. */
void rt_run_snapshot(rt_run *r, int restore) {
    double t0 = rt_now();
    int count = rt_store_count(r->st);
    if (!r->snapshot) {
        r->snapshot = calloc((size_t)(r->local * count) + 1, sizeof *r->snapshot);
        RT_CHECK_ALLOC(r->snapshot);
        for (int k = 0; k < r->local; k++)
            for (int i = 0; i < count; i++) {
                r->snapshot[k * count + i] =
                    malloc(sizeof(float) * (size_t)ir_numel(rt_store_type(r->st, i)) + 1);
                RT_CHECK_ALLOC(r->snapshot[k * count + i]);
            }
    }
    for (int k = 0; k < r->local; k++) {
        rt_store *st = rt_replicas_store(r->R, k);
        for (int i = 0; i < count; i++) {
            if (!rt_store_resident(st, i)) continue; /* its owner's snapshot has it */
            if (restore)
                rt_store_write(st, i, r->snapshot[k * count + i]);
            else
                rt_store_read(st, i, r->snapshot[k * count + i]);
        }
    }
    r->snapshot_s += rt_now() - t0;
}

/* After a step whose loss or parameters are not finite: stop (1, with the
 * place) or, with --on-nan skip, undo the step (0). */
int rt_run_nonfinite_step(rt_run *r, double step_loss, int bad_param, double prev_lr, long done,
                          int e, long s, double lr) {
    char what[IR_NAME_MAX + 96];
    if (!isfinite(step_loss))
        snprintf(what, sizeof what, "the loss is %s", isnan(step_loss) ? "nan" : "infinite");
    else
        snprintf(what, sizeof what, "a gradient is not finite (parameter '%s' is after the update)",
                 rt_store_name(r->st, bad_param));
    if (r->o->on_nan_skip) {
        rt_run_snapshot(r, 1);
        r->prev_lr = prev_lr;
        rt_progress_clear(&r->bar);
        rt_log(RT_LOG_WARNING,
               "%s at step %ld (epoch %d, step %ld of the epoch, lr %.6g); skipped "
               "the step (--on-nan skip)",
               what, done, e, s, lr);
        return 0;
    }
    char kept[4200];
    if (r->o->checkpoint && rt_ckpt_exists(r->o->checkpoint))
        snprintf(kept, sizeof kept, "the last good checkpoint stays in %s", r->o->checkpoint);
    else
        snprintf(kept, sizeof kept, "no checkpoint was written (--checkpoint DIR keeps one)");
    return rt_run_fail(
        r,
        "%s at step %ld (epoch %d, step %ld of the epoch, lr %.6g); stopping; %s (a lower lr or "
        "a warmup may help; --on-nan skip skips such steps)",
        what, done, e, s, lr, kept);
}
