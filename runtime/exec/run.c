/* runtime/exec/run.c — run a bound program: its steps in order, each
 * call a kernel launch, a GEMM or a library convolution (its alternative
 * when the library declines), the data-parallel buckets started and
 * waited for between them, and on a backend with graphs the step recorded
 * once as segments between host actions and replayed after (rt_exec_run,
 * rt_exec_enqueue, rt_exec_run_partial). DPC_PROFILE's table is made here
 * too, from the seconds each call took.
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>

#include "base/err.h"
#include "runtime/device/device.h"
#include "runtime/check.h"
#include "runtime/clock.h"
#include "runtime/comm/comm.h"
#include "runtime/exec/exec.h"
#include "runtime/exec/internal.h"
#include "runtime/log.h"

typedef struct {
    char what[96];
    double sec, cpu;
    int calls;
} prof_row;

static int cmp_prof(const void *a, const void *b) {
    double x = ((const prof_row *)a)->sec, y = ((const prof_row *)b)->sec;
    return (x < y) - (x > y);
}

/* DPC_PROFILE=1: where a run's time goes, by kernel (GEMMs by the op that
 * made them and their shape), on stderr when the exec is freed. Calls are
 * synchronised one by one, so the figures are per call on any backend.
 * The cpu column is the calling thread's CPU time: with one thread
 * (DPC_THREADS=1: a pool of one) it is the work itself, what
 * other processes on a shared machine do not inflate. */
void rt_exec_print_profile(const rt_exec *ex) {
    const cg_program *p = ex->prog;
    prof_row *rows = calloc((size_t)p->ncalls + 1, sizeof *rows);
    RT_CHECK_ALLOC(rows);
    int nr = 0, ran = 0; /* calls that ran: a library convolution or its alternative */
    double total = 0, cpu = 0;
    for (int si = 0; si < p->nsteps; si++) {
        const cg_step *s = &p->steps[si];
        for (int ci = s->first_call; ci < s->first_call + s->ncalls; ci++) {
            const cg_call *c = &p->calls[ci];
            char what[96];
            if (ex->prof[ci] == 0) continue; /* never ran: a conv or its alternative */
            ran++;
            if (c->kind == CG_CALL_CONV)
                snprintf(what, sizeof what,
                         "conv %s %s %" PRId64 "x%" PRId64 "x%" PRId64 " k%" PRId64 " s%" PRId64
                         "%s", /* grouped: _g, as dpc --cost names it */
                         ir_ops[s->op].name, cg_conv_dir_name(c->conv.dir), c->conv.C, c->conv.H,
                         c->conv.K, c->conv.kh, c->conv.sh, c->conv.G > 1 ? "_g" : "");
            else if (c->kind == CG_CALL_GEMM)
                snprintf(what, sizeof what, "gemm %s %c%c %" PRId64 "x%" PRId64 "x%" PRId64,
                         ir_ops[s->op].name, c->gemm.transa ? 'T' : 'N', c->gemm.transb ? 'T' : 'N',
                         c->gemm.m, c->gemm.n, c->gemm.k);
            else
                snprintf(what, sizeof what, "%s", p->kernels[c->kernel].name);
            int r = 0;
            while (r < nr && strcmp(rows[r].what, what)) r++;
            if (r == nr) snprintf(rows[nr++].what, sizeof rows->what, "%s", what);
            rows[r].sec += ex->prof[ci];
            rows[r].cpu += ex->prof_cpu[ci];
            rows[r].calls++;
            total += ex->prof[ci];
            cpu += ex->prof_cpu[ci];
        }
    }
    qsort(rows, (size_t)nr, sizeof *rows, cmp_prof);
    int runs = ex->runs ? ex->runs : 1;
    /* One message: the heading under the logger's prefix, a row a line
     * below it, unprefixed (tests/gpu/cost_vs_profile.sh reads them). */
    size_t cap = 64 + 200 * (size_t)(nr < 60 ? nr : 60), len = 0;
    char *table = malloc(cap);
    RT_CHECK_ALLOC(table);
    table[0] = 0;
    for (int r = 0; r < nr && r < 60 && len < cap; r++)
        len += (size_t)snprintf(
            table + len, cap - len, "\n  %9.3f ms %5.1f%% %9.3f ms cpu %4d x  %s",
            1e3 * rows[r].sec / runs, 100.0 * rows[r].sec / (total > 0 ? total : 1),
            1e3 * rows[r].cpu / runs, rows[r].calls, rows[r].what);
    rt_log(RT_LOG_INFO,
           "profile of %d run(s): %.2f ms per run (%.2f ms cpu of the calling thread), %d calls%s",
           ex->runs, 1e3 * total / runs, 1e3 * cpu / runs, ran, table);
    free(table);
    free(rows);
}

/* Element size of a step slot's buffer (scratch holds floats). */
static size_t slot_elem(const rt_exec *ex, const cg_step *s, int slot) {
    int id = s->buf[slot];
    return id == CG_SCRATCH ? sizeof(float) : ir_dtype_size(ex->g->nodes[id].type.dtype);
}

static void *slot_ptr(const rt_exec *ex, const cg_step *s, int slot) {
    int id = s->buf[slot];
    return id == CG_SCRATCH ? ex->scratch : ex->buf[id];
}

/* After a failed call on a backend whose calls run asynchronously (cuda),
 * unless each is synchronised: the failure may be an earlier call's. */
static const char *async_hint(const rt_exec *ex) {
    return ex->be->async_copy && !ex->sync_each
               ? " (calls run asynchronously, so an earlier one may have failed: rerun with "
                 "DPC_SYNC=1 to stop at the one that did)"
               : "";
}

typedef enum { RUN_EAGER, RUN_CAPTURE, RUN_REPLAY } run_mode;

/* Device work is about to be issued: a capture starts recording a new
 * segment; a replay launches the segment's graph (and issues nothing). */
static int seg_open(rt_exec *ex, run_mode m, int cur, char *err, size_t errlen) {
    if (m == RUN_EAGER || ex->seg_is_open) return 0;
    ex->seg_is_open = 1;
    if (m == RUN_CAPTURE) return rt_backend_graph_begin(ex->be, err, errlen);
    if (cur >= ex->nseg)
        return base_fail(err, errlen, "graph segment %d of %d: the step changed", cur, ex->nseg);
    ex->last_graph_launches++;
    if (!rt_backend_graph_launch(ex->be, ex->seg[cur], err, errlen)) return 0;
    char why[768];
    snprintf(why, sizeof why, "%s", err);
    return base_fail(err, errlen, "the step's CUDA graph (segment %d of %d): %s%s", cur + 1,
                     ex->nseg, why, async_hint(ex));
}

/* A host action follows (or the step ends): a capture keeps the segment
 * and runs it at once, so the recording step computes like any other. */
static int seg_close(rt_exec *ex, run_mode m, int *cur, char *err, size_t errlen) {
    if (!ex->seg_is_open) return 0;
    ex->seg_is_open = 0;
    (*cur)++;
    if (m != RUN_CAPTURE) return 0;
    rt_graph *g = rt_backend_graph_end(ex->be, err, errlen);
    if (!g) return -1;
    if (ex->nseg == ex->seg_cap) {
        ex->seg_cap = ex->seg_cap ? 2 * ex->seg_cap : 4;
        ex->seg = realloc(ex->seg, sizeof *ex->seg * (size_t)ex->seg_cap);
        RT_CHECK_ALLOC(ex->seg);
    }
    ex->seg[ex->nseg++] = g;
    ex->last_graph_launches++;
    return rt_backend_graph_launch(ex->be, g, err, errlen);
}

/* "kernel k3_relu" or "gemm NT 64x10x512": what a failure names. */
static void call_name(const rt_exec *ex, const cg_step *s, const cg_call *c, char *buf,
                      size_t len) {
    (void)s;
    if (c->kind == CG_CALL_CONV)
        snprintf(buf, len,
                 "conv %s %" PRId64 "x%" PRId64 "x%" PRId64 "x%" PRId64 " k%" PRId64 " g%" PRId64,
                 cg_conv_dir_name(c->conv.dir), c->conv.N, c->conv.C, c->conv.H, c->conv.W,
                 c->conv.kh, c->conv.G);
    else if (c->kind == CG_CALL_GEMM)
        snprintf(buf, len, "gemm %c%c %" PRId64 "x%" PRId64 "x%" PRId64, c->gemm.transa ? 'T' : 'N',
                 c->gemm.transb ? 'T' : 'N', c->gemm.m, c->gemm.n, c->gemm.k);
    else
        snprintf(buf, len, "kernel %s", ex->prog->kernels[c->kernel].name);
}

/* DPC_SYNC after a bucket's start: its all-reduce waited for and the
 * device synchronised, so a failure names the collective. */
static int sync_bucket(rt_exec *ex, int b, int si, char *err, size_t errlen) {
    if (!rt_coll_queue_wait(ex->coll, b, err, errlen) && !rt_backend_sync(ex->be, err, errlen))
        return 0;
    char why[768];
    snprintf(why, sizeof why, "%s", err);
    return base_fail(err, errlen, "all-reduce of bucket %d (node %d, allreduce): %s", b,
                     ex->prog->steps[si].node, why);
}

/* Runs kernel or GEMM call ci of step s; DPC_SYNC and DPC_PROFILE each
 * call finished and checked before the next, so a failure names its call. */
static int run_call(rt_exec *ex, const cg_step *s, int ci, char *err, size_t errlen) {
    const cg_call *c = &ex->prog->calls[ci];
    rt_backend *be = ex->be;
    void *args[CG_MAX_ARGS];
    int rc;
    double t0 = ex->prof ? rt_now() : 0, c0 = ex->prof ? rt_clock_s(CLOCK_THREAD_CPUTIME_ID) : 0;
    if (c->kind == CG_CALL_CONV) {
        for (int j = 0; j < 3; j++) /* the weights may be a copy within the scratch */
            args[j] = (char *)slot_ptr(ex, s, c->arg[j]) +
                      (size_t)c->off[j] * slot_elem(ex, s, c->arg[j]);
        rc = rt_backend_conv(be, &c->conv, args[0], args[1], args[2], err, errlen);
    } else if (c->kind == CG_CALL_GEMM) {
        rc = rt_backend_gemm(be, &c->gemm, slot_ptr(ex, s, c->arg[0]), slot_ptr(ex, s, c->arg[1]),
                             slot_ptr(ex, s, c->arg[2]), err, errlen);
    } else {
        for (int j = 0; j < c->nargs; j++)
            args[j] = (char *)slot_ptr(ex, s, c->arg[j]) +
                      (size_t)c->off[j] * slot_elem(ex, s, c->arg[j]);
        rc = rt_backend_launch(be, ex->kern[c->kernel], args, c->nargs, c->count, &c->launch, err,
                               errlen);
    }
    if (rc == 1) return 1; /* a convolution the library declines: nothing ran */
    if (!rc && ex->sync_each) rc = rt_backend_sync(be, err, errlen);
    if (!rc && ex->prof) {
        ex->prof[ci] += rt_now() - t0;
        ex->prof_cpu[ci] += rt_clock_s(CLOCK_THREAD_CPUTIME_ID) - c0;
    }
    if (rc) {
        char why[768], what[160];
        snprintf(why, sizeof why, "%s", err);
        call_name(ex, s, c, what, sizeof what);
        return base_fail(err, errlen, "%s (call %d: node %d, %s): %s%s", what, ci, s->node,
                         ir_ops[s->op].name, why, async_hint(ex));
    }
    ex->last_calls++;
    return 0;
}

/* The alternative of conv call ci: the calls after it. */
static int run_alternative(rt_exec *ex, const cg_step *s, int ci, char *err, size_t errlen) {
    for (int a = ci + 1; a <= ci + ex->prog->calls[ci].conv.nalt; a++)
        if (run_call(ex, s, a, err, errlen)) return -1;
    return 0;
}

enum { TUNE_TIMINGS = 3 }; /* timings of each way for a tuned convolution */

/* Library convolution ci: the library, or the alternative when the backend
 * has none, declines the shape, or (tune) was measured slower. A tuned
 * descriptor is timed once per process, both ways (the best of
 * TUNE_TIMINGS turns each), after one untimed library call (which makes
 * its primitive); the choice is shared by every replica (rt_conv_choice),
 * so replicas run the same arithmetic. *skip: how many calls after ci not
 * to run. */
static int run_conv(rt_exec *ex, const cg_step *s, int ci, int *skip, char *err, size_t errlen) {
    const cg_call *c = &ex->prog->calls[ci];
    *skip = c->conv.nalt;
    int choice = !ex->be->conv  ? RT_CONV_ALTERNATIVE /* spares the tuning's timings */
                 : c->conv.tune ? rt_conv_choice_get(rt_conv_where(ex->be), &c->conv)
                                : RT_CONV_LIBRARY;
    if (choice == RT_CONV_ALTERNATIVE) return run_alternative(ex, s, ci, err, errlen);
    if (choice == RT_CONV_LIBRARY) {
        int rc = run_call(ex, s, ci, err, errlen);
        return rc == 1 ? run_alternative(ex, s, ci, err, errlen) : rc;
    }
    /* not measured yet: warm, then time the library and the alternative */
    int rc = run_call(ex, s, ci, err, errlen);
    if (rc == 1) {
        rt_conv_choice_set(rt_conv_where(ex->be), &c->conv, RT_CONV_ALTERNATIVE, 0, 0);
        return run_alternative(ex, s, ci, err, errlen);
    }
    if (rc || rt_backend_sync(ex->be, err, errlen)) return -1;
    /* each way's best of TUNE_TIMINGS, taken in turns: one timing is at the
     * mercy of whatever else the machine did meanwhile */
    double lib = 1e30, alt = 1e30;
    for (int t = 0; t < TUNE_TIMINGS; t++) {
        double t0 = rt_now();
        if (run_call(ex, s, ci, err, errlen) || rt_backend_sync(ex->be, err, errlen)) return -1;
        double t1 = rt_now();
        if (run_alternative(ex, s, ci, err, errlen) || rt_backend_sync(ex->be, err, errlen))
            return -1;
        double t2 = rt_now();
        if (t1 - t0 < lib) lib = t1 - t0;
        if (t2 - t1 < alt) alt = t2 - t1;
    }
    int way = lib <= alt ? RT_CONV_LIBRARY : RT_CONV_ALTERNATIVE;
    rt_conv_choice_set(rt_conv_where(ex->be), &c->conv, way, lib, alt);
    /* the output as the chosen way computes it, as every later step will */
    return way == RT_CONV_LIBRARY ? run_call(ex, s, ci, err, errlen) : 0;
}

/* The step's calls, eagerly or through graphs. Collective actions of a
 * stream-ordered queue (nccl) are device work like the calls: captured and
 * replayed with them. A host queue's (local, mpi) are host actions that
 * end a segment; while recording, a bucket is waited for right after its
 * start, so its thread never touches the compute stream during a capture. */
static int run_steps(rt_exec *ex, run_mode m, char *err, size_t errlen) {
    const cg_program *p = ex->prog;
    int stream_coll = ex->coll && rt_coll_queue_stream_ordered(ex->coll);
    int cur = 0;
    for (int si = 0; si < p->nsteps; si++) {
        const cg_step *s = &p->steps[si];
        if (ex->partial && (ex->after_sum[si] || s->op == IR_OP_ALLREDUCE)) continue;
        for (int b = 0; b < ex->nbuckets && !ex->partial; b++) {
            if (ex->wait_at[b] != si) continue;
            if (stream_coll ? seg_open(ex, m, cur, err, errlen)
                            : seg_close(ex, m, &cur, err, errlen))
                return -1;
            if (m != RUN_REPLAY || !stream_coll)
                if (rt_coll_queue_wait(ex->coll, b, err, errlen)) return -1;
        }
        if (ex->skip && ex->skip[si]) continue; /* another replica's update */
        if (s->op == IR_OP_ALLREDUCE) {
            /* No kernel: one replica shares the gradient's bytes; replicas
             * hand the bucket to the communication queue. */
            for (int b = 0; b < ex->nbuckets; b++) {
                if (ex->start_at[b] != si) continue;
                if (stream_coll ? seg_open(ex, m, cur, err, errlen)
                                : seg_close(ex, m, &cur, err, errlen))
                    return -1;
                if (m == RUN_REPLAY && stream_coll) continue;
                rt_coll_queue_start(ex->coll, b);
                if (m == RUN_CAPTURE && !stream_coll &&
                    rt_coll_queue_wait(ex->coll, b, err, errlen))
                    return -1;
                /* DPC_SYNC: the bucket's sum, done and checked here. */
                if (ex->sync_each && m == RUN_EAGER && sync_bucket(ex, b, si, err, errlen))
                    return -1;
            }
            continue;
        }
        if (seg_open(ex, m, cur, err, errlen)) return -1;
        if (m == RUN_REPLAY) continue;
        for (int ci = s->first_call; ci < s->first_call + s->ncalls; ci++) {
            int skip = 0; /* a library convolution that ran: its alternative does not */
            if (p->calls[ci].kind == CG_CALL_CONV ? run_conv(ex, s, ci, &skip, err, errlen)
                                                  : run_call(ex, s, ci, err, errlen))
                return -1;
            ci += skip;
        }
    }
    if (ex->partial) return 0;
    /* Sums nobody reads within the step must still be complete when the
     * caller looks at them; a stream queue's waits also join its stream
     * back into a capture. */
    if (ex->coll && stream_coll) {
        if (seg_open(ex, m, cur, err, errlen)) return -1;
        if (m != RUN_REPLAY && rt_coll_queue_wait_all(ex->coll, err, errlen)) return -1;
    }
    if (seg_close(ex, m, &cur, err, errlen)) return -1;
    if (ex->coll && !stream_coll && rt_coll_queue_wait_all(ex->coll, err, errlen)) return -1;
    if (m == RUN_REPLAY && cur != ex->nseg)
        return base_fail(err, errlen, "replayed %d graph segments of %d: the step changed", cur,
                         ex->nseg);
    return 0;
}

int rt_exec_run(rt_exec *ex, char *err, size_t errlen) {
    if (rt_exec_enqueue(ex, err, errlen)) return -1;
    return rt_backend_sync(ex->be, err, errlen);
}

int rt_exec_enqueue(rt_exec *ex, char *err, size_t errlen) {
    /* Run 1 is eager (the warm-up: cuBLAS chooses its kernels, modules
     * load); run 2 records; profiling and DPC_SYNC synchronise call by
     * call, so never. */
    run_mode m = !ex->graphs || ex->sync_each || ex->runs == 0 ? RUN_EAGER
                 : ex->captured                                ? RUN_REPLAY
                                                               : RUN_CAPTURE;
    ex->last_calls = ex->last_graph_launches = 0;
    int rc = run_steps(ex, m, err, errlen);
    if (rc && ex->seg_is_open && m == RUN_CAPTURE) { /* leave the backend recording nothing */
        char why[64];
        rt_graph *g = rt_backend_graph_end(ex->be, why, sizeof why);
        rt_backend_graph_free(ex->be, g);
    }
    ex->seg_is_open = 0;
    /* A capture the driver refuses (an operation it cannot record, a
     * capture invalidated) costs the graphs, not the run: when it fails in
     * the first segment nothing of the step has run (a segment runs once
     * it is kept), so the step runs eagerly, as every later one will. Not
     * with a stream-ordered collective queue: its buckets may have started
     * inside the capture. */
    if (rc && m == RUN_CAPTURE && ex->nseg == 0 &&
        !(ex->coll && rt_coll_queue_stream_ordered(ex->coll))) {
        int n = (int)strcspn(err, "\n");
        rt_log(RT_LOG_INFO,
               "%s: the step's CUDA graph could not be recorded (%.*s): eager from now on",
               ex->be->name, n > 300 ? 300 : n, err);
        ex->graphs = 0;
        m = RUN_EAGER;
        ex->last_calls = ex->last_graph_launches = 0;
        rc = run_steps(ex, m, err, errlen);
    }
    if (rc) return -1;
    if (m == RUN_CAPTURE) ex->captured = 1;
    ex->runs++;
    if (rt_debug_level() >= 1 && ex->runs <= 3)
        rt_log(RT_LOG_INFO,
               "%s: run %d (%s): %" PRId64 " kernel and GEMM calls, %" PRId64 " graph launches",
               ex->be->name, ex->runs,
               m == RUN_EAGER     ? "eager"
               : m == RUN_CAPTURE ? "recorded"
                                  : "replayed",
               ex->last_calls, ex->last_graph_launches);
    return 0;
}

int rt_exec_run_partial(rt_exec *ex, int part, char *err, size_t errlen) {
    if (!ex->coll || !ex->after_sum)
        return base_fail(err, errlen, "a partial run needs the collective attached");
    ex->partial = 1;
    int rc = run_steps(ex, RUN_EAGER, err, errlen);
    ex->partial = 0;
    if (rc) return -1;
    rt_coll_queue_keep(ex->coll, part);
    return rt_backend_sync(ex->be, err, errlen);
}
