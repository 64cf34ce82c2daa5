/* runtime/exec/exec.c — bind a graph's nodes to buffers and run its program.
 *
 * The program (cg_program) is always rendered here from the graph; the
 * plan's kernel section, when it holds a program for this graph, must be
 * that program exactly or the plan is refused (load_program). Which
 * buffer each node lives in is decided in bind_buffers() alone: parameters
 * and states in the store, views and assigns in the storage they
 * alias, fused values nothing outside their group reads nowhere, and every
 * other tensor at its offset in one arena when the plan holds a memory plan
 * for this graph (section MEMP), else in a buffer of its own (no plan, or
 * compiled with --no-memplan; tests that read every node after a step rely
 * on that).
 */
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "runtime/env.h"
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
static void print_profile(const rt_exec *ex) {
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

/* The plan's memory plan for this graph, NULL when it has none (a
 * malformed one is an error: -1). */
static int load_memplan(const ir_graph *g, const dpc_plan *plan, fmt_memplan **out, char *err,
                        size_t errlen) {
    *out = NULL;
    const plan_section *sec = plan ? plan_find_section(plan, FMT_MEMPLAN_SECTION) : NULL;
    if (!sec) return 0;
    char why[512];
    int rc = fmt_memplan_section_find(sec->data, sec->len, g, out, why, sizeof why);
    if (rc < 0) return base_fail(err, errlen, "plan section %s: %s", FMT_MEMPLAN_SECTION, why);
    return 0;
}

/* Every node's buffer (see the top of this file). */
static int bind_buffers(rt_exec *ex, const dpc_plan *plan, char *err, size_t errlen) {
    const ir_graph *g = ex->g;
    fmt_memplan *mp = NULL;
    if (load_memplan(g, plan, &mp, err, errlen)) return -1;
    unsigned char *stored = malloc((size_t)g->n + 1);
    RT_CHECK_ALLOC(stored);
    ir_stored(g, stored);
    int rc = 0;
    if (mp && mp->arena_bytes > 0) {
        ex->arena = rt_backend_alloc(ex->be, (size_t)mp->arena_bytes, err, errlen);
        ex->arena_bytes = mp->arena_bytes;
        if (!ex->arena) rc = -1;
    }
    for (int i = 0; i < g->n && !rc; i++) {
        const ir_node *n = &g->nodes[i];
        if (ir_is_persistent(n->op)) {
            int k = rt_store_find(ex->st, n->name);
            if (k < 0)
                rc = base_fail(err, errlen, "%s '%s' is not in the parameter store",
                               ir_ops[n->op].name, n->name);
            else if (!ir_type_equal(rt_store_type(ex->st, k), &n->type))
                rc = base_fail(err, errlen, "'%s' has another shape in the parameter store",
                               n->name);
            else
                ex->buf[i] = rt_store_buffer(ex->st, k);
        } else if (n->op == IR_OP_ALLREDUCE) {
            /* One replica: the sum is the gradient itself, so share its
             * bytes and skip the step; rt_exec_set_collective gives the sum
             * a buffer of its own. */
            ex->buf[i] = ex->buf[n->input[0]];
        } else if (ir_storage_of(g, i) != i) {
            ex->buf[i] = ex->buf[ir_storage_of(g, i)]; /* a view or an assign */
        } else if (!stored[i]) {
            ex->buf[i] = NULL; /* lives in a fused kernel's registers */
        } else if (mp && mp->offset[i] >= 0) {
            ex->buf[i] = (char *)ex->arena + mp->offset[i];
        } else {
            ex->buf[i] = rt_backend_alloc(ex->be, (size_t)fmt_node_bytes(n), err, errlen);
            ex->owned[i] = 1;
            if (!ex->buf[i]) rc = -1;
        }
    }
    free(stored);
    fmt_memplan_free(mp);
    /* Every buffer a step names must exist. */
    for (int si = 0; si < ex->prog->nsteps && !rc; si++) {
        const cg_step *s = &ex->prog->steps[si];
        for (int c = s->first_call; c < s->first_call + s->ncalls && !rc; c++)
            for (int j = 0; j < ex->prog->calls[c].nargs && !rc; j++) {
                int id = s->buf[ex->prog->calls[c].arg[j]];
                if (id != CG_SCRATCH && !ex->buf[id])
                    rc = base_fail(err, errlen, "step %d (%s) uses node %d, which has no buffer",
                                   si, ir_ops[s->op].name, id);
            }
    }
    if (!rc && ex->prog->scratch > 0 &&
        !(ex->scratch =
              rt_backend_alloc(ex->be, sizeof(float) * (size_t)ex->prog->scratch, err, errlen)))
        rc = -1;
    return rc;
}

/* dprun never compiles source it did not render: the kernels come from
 * the graph, through the same cg_generate (default options) dpc renders
 * them with, and a plan section holding a program for this graph must be
 * that program byte for byte (source, calls, counts, offsets, GEMMs), or
 * the plan is refused. A plan's checksum is no signature, anyone can
 * recompute it; the embedded sources are there to be read (dpc
 * --emit-kernels), never to be run. A section without this graph's
 * program (an older dpc's format) is simply not used; a malformed section
 * is an error. */
static cg_program *load_program(rt_backend *be, const ir_graph *g, const dpc_plan *plan,
                                const cg_options *o, char *err, size_t errlen) {
    const char *pname = plan && plan->name[0] ? plan->name : "plan";
    char why[512];
    cg_program *gen = cg_generate(g, be->dialect, o, why, sizeof why);
    if (!gen) {
        if (plan)
            base_fail(err, errlen, "%s: cannot render its kernels: %s", pname, why);
        else
            base_fail(err, errlen, "%s", why);
        return NULL;
    }
    const plan_section *sec = plan ? plan_find_section(plan, cg_section_tag(be->dialect)) : NULL;
    if (sec) {
        cg_program *p = NULL;
        int rc = cg_section_find(sec->data, sec->len, g, &p, why, sizeof why);
        if (rc < 0) {
            base_fail(err, errlen, "%s: plan section %s: %s", pname, sec->tag, why);
            cg_program_free(gen);
            return NULL;
        }
        if (rc == 0 && cg_program_diff(p, gen, why, sizeof why)) {
            base_fail(err, errlen,
                      "%s: plan section %s is not what its graph renders (%s): the plan was "
                      "edited or made by another dpc; refusing to run it (recompile the model)",
                      pname, sec->tag, why);
            cg_program_free(p);
            cg_program_free(gen);
            return NULL;
        }
        if (rc != 0 && rt_debug_level() >= 1)
            rt_log(RT_LOG_INFO,
                   "%s: plan section %s has no program for this graph; "
                   "using the kernels rendered from it",
                   be->name, sec->tag);
        cg_program_free(p);
    }
    return gen;
}

rt_exec *rt_exec_new(rt_backend *be, rt_store *st, const ir_graph *g, const dpc_plan *plan,
                     char *err, size_t errlen) {
    return rt_exec_new_opts(be, st, g, plan, NULL, err, errlen);
}

rt_exec *rt_exec_new_opts(rt_backend *be, rt_store *st, const ir_graph *g, const dpc_plan *plan,
                          const cg_options *o, char *err, size_t errlen) {
    if (errlen) err[0] = 0;
    if (ir_verify(g, err, errlen) || rt_backend_failed(be, err, errlen)) return NULL;
    rt_exec *ex = calloc(1, sizeof *ex);
    RT_CHECK_ALLOC(ex);
    ex->be = be;
    ex->st = st;
    ex->g = ir_clone(g);
    ex->buf = calloc((size_t)g->n + 1, sizeof *ex->buf);
    ex->owned = calloc((size_t)g->n + 1, 1);
    RT_CHECK_ALLOC(ex->buf);
    RT_CHECK_ALLOC(ex->owned);
    ex->prog = load_program(be, g, plan, o, err, errlen);
    if (!ex->prog || cg_program_check(ex->prog, g, err, errlen)) goto fail;
    ex->mod = rt_backend_compile(be, ex->prog->source, err, errlen);
    if (!ex->mod) goto fail;
    ex->kern = calloc((size_t)ex->prog->nkernels + 1, sizeof *ex->kern);
    RT_CHECK_ALLOC(ex->kern);
    for (int k = 0; k < ex->prog->nkernels; k++) {
        const cg_kernel *kd = &ex->prog->kernels[k];
        ex->kern[k] = rt_backend_kernel(be, ex->mod, kd->name, kd->nargs, err, errlen);
        if (!ex->kern[k]) goto fail;
    }
    if (bind_buffers(ex, plan, err, errlen)) goto fail;
    rt_exec_set_scalar(ex, FMT_REPLICA_SCALE, 1.0f); /* one replica until a collective */
    ex->sync_each = rt_env_flag("DPC_SYNC", 0) || rt_env_flag("DPC_PROFILE", 0);
    if (rt_env_flag("DPC_PROFILE", 0)) {
        ex->prof = calloc((size_t)ex->prog->ncalls + 1, sizeof *ex->prof);
        ex->prof_cpu = calloc((size_t)ex->prog->ncalls + 1, sizeof *ex->prof_cpu);
        RT_CHECK_ALLOC(ex->prof);
        RT_CHECK_ALLOC(ex->prof_cpu);
    }
    if (rt_debug_level() >= 1) {
        int gemms = 0;
        for (int c = 0; c < ex->prog->ncalls; c++) gemms += ex->prog->calls[c].kind == CG_CALL_GEMM;
        rt_log(RT_LOG_INFO,
               "%s: %d steps, %d kernels, %d calls (%d gemm), scratch %.1f MiB, "
               "arena %.1f MiB",
               be->name, ex->prog->nsteps, ex->prog->nkernels, ex->prog->ncalls, gemms,
               (double)ex->prog->scratch * 4.0 / (1 << 20), (double)ex->arena_bytes / (1 << 20));
    }
    return ex;
fail:
    rt_exec_free(ex);
    return NULL;
}

void rt_exec_free(rt_exec *ex) {
    if (!ex) return;
    if (ex->prof && ex->runs) print_profile(ex);
    for (int i = 0; i < ex->nseg; i++) rt_backend_graph_free(ex->be, ex->seg[i]);
    free(ex->seg);
    free(ex->prof);
    free(ex->prof_cpu);
    for (int i = 0; ex->g && i < ex->g->n; i++)
        if (ex->owned[i]) rt_backend_dealloc(ex->be, ex->buf[i]);
    rt_backend_dealloc(ex->be, ex->scratch);
    rt_backend_dealloc(ex->be, ex->arena);
    rt_backend_module_free(ex->be, ex->mod);
    free(ex->kern);
    free(ex->start_at);
    free(ex->wait_at);
    free(ex->after_sum);
    free(ex->skip);
    free(ex->buf);
    free(ex->owned);
    cg_program_free(ex->prog);
    ir_free(ex->g);
    free(ex);
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

int rt_exec_use_graphs(rt_exec *ex, int on) {
    ex->graphs = on && rt_backend_has_graphs(ex->be);
    return ex->graphs;
}

void rt_exec_launches(const rt_exec *ex, int64_t *calls, int64_t *graph_launches) {
    *calls = ex->last_calls;
    *graph_launches = ex->last_graph_launches;
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

static int find_input(const rt_exec *ex, const char *name) {
    for (int i = 0; i < ex->g->n; i++)
        if (ex->g->nodes[i].op == IR_OP_INPUT && !strcmp(ex->g->nodes[i].name, name)) return i;
    return -1;
}

int rt_exec_set_input(rt_exec *ex, const char *name, const void *host, size_t bytes) {
    int i = find_input(ex, name);
    if (i < 0 || (size_t)fmt_node_bytes(&ex->g->nodes[i]) != bytes) return -1;
    return rt_backend_copy_in(ex->be, ex->buf[i], host, bytes, NULL, 0);
}

int rt_exec_failed(const rt_exec *ex, char *err, size_t errlen) {
    return rt_backend_failed(ex->be, err, errlen);
}

int rt_exec_set_scalar(rt_exec *ex, const char *name, float value) {
    int i = find_input(ex, name);
    if (i < 0 || ir_numel(&ex->g->nodes[i].type) != 1 || ex->g->nodes[i].type.dtype != IR_F32)
        return -1;
    return rt_backend_copy_in(ex->be, ex->buf[i], &value, sizeof value, NULL, 0);
}

int rt_exec_get_node(rt_exec *ex, int node, void *host, size_t bytes) {
    if (node < 0 || node >= ex->g->n || (size_t)fmt_node_bytes(&ex->g->nodes[node]) != bytes)
        return -1;
    if (!ex->buf[node]) return -1; /* a fused value that is never stored */
    return rt_backend_copy_out(ex->be, host, ex->buf[node], bytes, NULL, 0);
}

/* Sources by their unique name first, then the first node with that label. */
static int find_named(const rt_exec *ex, const char *name) {
    const ir_graph *g = ex->g;
    int found = -1;
    for (int i = 0; i < g->n && found < 0; i++) {
        ir_op op = g->nodes[i].op;
        if (ir_is_source(op) && !strcmp(g->nodes[i].name, name)) found = i;
    }
    for (int i = 0; i < g->n && found < 0; i++)
        if (!strcmp(g->nodes[i].name, name)) found = i;
    return found;
}

int rt_exec_get(rt_exec *ex, const char *name, void *host, size_t bytes) {
    return rt_exec_get_node(ex, find_named(ex, name), host, bytes);
}

const void *rt_exec_buffer(const rt_exec *ex, const char *name, size_t *bytes) {
    int i = find_named(ex, name);
    if (i < 0 || !ex->buf[i]) return NULL;
    *bytes = (size_t)fmt_node_bytes(&ex->g->nodes[i]);
    return ex->buf[i];
}
