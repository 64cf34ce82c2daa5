/* runtime/exec/exec.c — bind a graph's nodes to buffers, and a program's
 * inputs and outputs. Running the program is run.c's.
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
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/env.h"
#include "base/err.h"
#include "runtime/device/device.h"
#include "runtime/check.h"
#include "runtime/exec/exec.h"
#include "runtime/exec/internal.h"

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
    if (ex->prof && ex->runs) rt_exec_print_profile(ex);
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

int rt_exec_use_graphs(rt_exec *ex, int on) {
    ex->graphs = on && rt_backend_has_graphs(ex->be);
    return ex->graphs;
}

void rt_exec_launches(const rt_exec *ex, int64_t *calls, int64_t *graph_launches) {
    *calls = ex->last_calls;
    *graph_launches = ex->last_graph_launches;
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
