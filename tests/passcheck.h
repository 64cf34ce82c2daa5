/* tests/passcheck.h — the pass harness: a model compiled through two
 * pipelines, each plan run for two training steps and an eval batch on the
 * cpu backend from the same initial weights and the same data, and every
 * value the runtime can read afterwards compared bit for bit (losses,
 * logits, gradients, parameters, momenta, BatchNorm statistics).
 *
 * Usage (inside a unit test, after harness.h):
 *     #include "tests/passcheck.h"
 *     pc_backend = rt_backend_cpu();
 *     CHECK(pc_same("models/cnn_small.net", 8,
 *                   "lower,autodiff,optimizer,partition,precision,fuse,remat,memplan",
 *                   "lower,autodiff,optimizer,partition,precision,fuse,memplan"));
 *
 * A spec is --passes' text (passes/passes.h); the flags' defaults are the
 * registry's. pc_same prints the first difference to stderr and returns 0
 * when the results differ or either pipeline fails (its CHECKs say where).
 * docs/passes.md shows it testing a new pass.
 */
#ifndef DPC_TESTS_PASSCHECK_H
#define DPC_TESTS_PASSCHECK_H

#include <stdlib.h>
#include <string.h>

#include "codegen/codegen.h"
#include "frontend/frontend.h"
#include "format/plan.h"
#include "passes/passes.h"
#include "runtime/exec/exec.h"
#include "runtime/runtime.h"
#include "tests/graphs.h"
#include "tests/oracle/interp.h"

/* (unused in a test that takes only pc_interp_same) */
static rt_backend *pc_backend __attribute__((unused));
static char pc_err[4096] __attribute__((unused));
/* > 0: generated code runs convolutions in chunks of images that fit it
 * (cg_options.scratch_max_bytes), in pc_compile and pc_run alike. */
static size_t pc_scratch_max __attribute__((unused));

static inline cg_options pc_cg_options(void) {
    cg_options co = cg_default_options();
    if (pc_scratch_max) co.scratch_max_bytes = pc_scratch_max;
    return co;
}

/* A plan in memory as dpc makes it from spec: passes, C kernels, memory
 * plans when the pipeline has memplan. NULL (and a failed CHECK) on error. */
static inline dpc_plan *pc_compile(ir_graph *train, ir_graph *eval, const ir_train *t,
                                   const char *spec) {
    dpc_plan *p = calloc(1, sizeof *p);
    p->schedule = *t;
    p->train = train;
    p->eval = eval;
    snprintf(p->model, sizeof p->model, "test");
    pass_options o = pass_default_options();
    pass_pipeline base, pl;
    pass_pipeline_default(&o, &base);
    fmt_memplan *mp[2] = {NULL, NULL};
    pass_env te = {&p->schedule, &mp[0], NULL, NULL}, ee = {NULL, &mp[1], NULL, NULL};
    int ok = pass_pipeline_parse(spec, &base, &pl, pc_err, sizeof pc_err) == 0 &&
             pass_pipeline_run(&pl, PASS_TRAIN, &p->train, &te, pc_err, sizeof pc_err) == 0 &&
             pass_pipeline_run(&pl, PASS_EVAL, &p->eval, &ee, pc_err, sizeof pc_err) == 0;
    CHECK_MSG(ok, "%s: %s", spec, pc_err);
    const ir_graph *progs[2] = {p->train, p->eval};
    for (int want = 0; want < 2 && ok; want++) {
        if (want == 1 && !mp[0]) break; /* no memplan step: a buffer per tensor */
        unsigned char *sec = NULL;
        size_t len = 0;
        for (int i = 0; i < 2 && ok; i++) {
            unsigned char *bytes = NULL;
            size_t n = 0;
            if (want == 0) {
                cg_options co = pc_cg_options();
                cg_program *cp = cg_generate(progs[i], CG_DIALECT_C, &co, pc_err, sizeof pc_err);
                ok = cp && !cg_program_serialize(cp, &bytes, &n);
                cg_program_free(cp);
            } else {
                ok = mp[i] && !fmt_memplan_serialize(mp[i], &bytes, &n);
            }
            sec = realloc(sec, len + n + 1);
            if (n) memcpy(sec + len, bytes, n);
            len += n;
            free(bytes);
        }
        CHECK_MSG(ok, "%s", pc_err);
        if (ok) CHECK(plan_add_section(p, want ? FMT_MEMPLAN_SECTION : "KCPU", sec, len) == 0);
        free(sec);
    }
    fmt_memplan_free(mp[0]);
    fmt_memplan_free(mp[1]);
    if (!ok) {
        plan_free(p);
        return NULL;
    }
    return p;
}

typedef struct {
    int n;
    char name[256][IR_NAME_MAX + 24];
    float *data[256];
    size_t bytes[256];
} pc_snapshot;

static inline void pc_snap(pc_snapshot *s, const char *name, const void *data, size_t bytes) {
    if (s->n == 256) return;
    snprintf(s->name[s->n], sizeof s->name[0], "%s", name);
    s->data[s->n] = malloc(bytes);
    memcpy(s->data[s->n], data, bytes);
    s->bytes[s->n++] = bytes;
}

static inline void pc_snap_free(pc_snapshot *s) {
    for (int i = 0; i < s->n; i++) free(s->data[i]);
    s->n = 0;
}

static inline size_t pc_bytes_of(const ir_node *n) { return (size_t)ir_numel(&n->type) * 4; }

/* Two training steps and one eval batch from a fixed init and fixed data;
 * records what the runtime can read afterwards. */
static inline int pc_run(const dpc_plan *p, pc_snapshot *s) {
    rt_store *st = rt_store_new(pc_backend, p->train);
    rt_store_init(st, p->train, &p->schedule, 7);
    cg_options co = pc_cg_options();
    rt_exec *tr = rt_exec_new_opts(pc_backend, st, p->train, p, &co, pc_err, sizeof pc_err);
    rt_exec *ev =
        tr ? rt_exec_new_opts(pc_backend, st, p->eval, p, &co, pc_err, sizeof pc_err) : NULL;
    CHECK_MSG(tr && ev, "%s", pc_err);
    int rc = tr && ev ? 0 : -1;
    rt_rng rng;
    rt_rng_seed(&rng, 99);
    for (int step = 0; step < 2 && !rc; step++) {
        const ir_graph *g = p->train;
        for (int i = 0; i < g->n; i++) {
            const ir_node *n = &g->nodes[i];
            if (n->op != IR_OP_INPUT || ir_numel(&n->type) == 1) continue;
            int64_t cnt = ir_numel(&n->type);
            float *buf = malloc(pc_bytes_of(n));
            for (int64_t j = 0; j < cnt; j++) {
                if (n->type.dtype == IR_I32)
                    ((int32_t *)buf)[j] =
                        (int32_t)rt_rng_below(&rng, (uint64_t)(n->iattr[0] ? n->iattr[0] : 10));
                else
                    buf[j] = rt_rng_uniform_range(&rng, -2.0f, 2.0f);
            }
            CHECK(rt_exec_set_input(tr, n->name, buf, pc_bytes_of(n)) == 0);
            free(buf);
        }
        CHECK(rt_exec_set_scalar(tr, "lr", 0.1f) == 0);
        CHECK(rt_exec_set_scalar(tr, "grad_scale", 0.25f) == 0);
        if (rt_exec_run(tr, pc_err, sizeof pc_err)) {
            CHECK_MSG(0, "%s", pc_err);
            rc = -1;
            break;
        }
        for (int i = 0; i < g->n; i++) {
            const ir_node *n = &g->nodes[i];
            if (!(n->flags & (IR_FLAG_OUTPUT | IR_FLAG_LOSS | IR_FLAG_GRAD))) continue;
            float *buf = malloc(pc_bytes_of(n));
            char name[IR_NAME_MAX + 24];
            snprintf(name, sizeof name, "step %d %s", step % 10, n->name);
            CHECK(rt_exec_get_node(tr, i, buf, pc_bytes_of(n)) == 0);
            pc_snap(s, name, buf, pc_bytes_of(n));
            free(buf);
        }
    }
    for (int k = 0; k < rt_store_count(st) && !rc; k++) {
        size_t b = (size_t)ir_numel(rt_store_type(st, k)) * 4;
        float *buf = malloc(b);
        rt_store_read(st, k, buf);
        pc_snap(s, rt_store_name(st, k), buf, b);
        free(buf);
    }
    if (!rc) {
        const ir_graph *g = p->eval;
        for (int i = 0; i < g->n; i++) {
            const ir_node *n = &g->nodes[i];
            if (n->op != IR_OP_INPUT) continue;
            float *buf = calloc(1, pc_bytes_of(n));
            for (int64_t j = 0; j < ir_numel(&n->type) && n->type.dtype != IR_I32; j++)
                buf[j] = rt_rng_uniform_range(&rng, -2.0f, 2.0f);
            CHECK(rt_exec_set_input(ev, n->name, buf, pc_bytes_of(n)) == 0);
            free(buf);
        }
        rc = rt_exec_run(ev, pc_err, sizeof pc_err);
        int lg = tg_find(g, "logits");
        CHECK(lg >= 0);
        if (lg >= 0) {
            float *buf = malloc(pc_bytes_of(&g->nodes[lg]));
            CHECK(rt_exec_get_node(ev, lg, buf, pc_bytes_of(&g->nodes[lg])) == 0);
            pc_snap(s, "eval logits", buf, pc_bytes_of(&g->nodes[lg]));
            free(buf);
        }
    }
    rt_exec_free(tr);
    rt_exec_free(ev);
    rt_store_free(st);
    return rc;
}

/* Every snapshot entry bit for bit (matched by name: passes reorder
 * nodes); reports the first difference. */
static inline int pc_equal(const pc_snapshot *a, const pc_snapshot *b, const char *what) {
    if (a->n != b->n) {
        fprintf(stderr, "  %s: %d vs %d tensors\n", what, a->n, b->n);
        return 0;
    }
    for (int i = 0; i < a->n; i++) {
        int k = 0;
        while (k < b->n && strcmp(a->name[i], b->name[k])) k++;
        if (k == b->n || a->bytes[i] != b->bytes[k]) {
            fprintf(stderr, "  %s: no matching %s\n", what, a->name[i]);
            return 0;
        }
        if (memcmp(a->data[i], b->data[k], a->bytes[i])) {
            size_t j = 0;
            while (a->data[i][j] == b->data[k][j] ||
                   (a->data[i][j] != a->data[i][j] && b->data[k][j] != b->data[k][j]))
                j++;
            fprintf(stderr, "  %s: %s differs at [%zu]: %.9g vs %.9g\n", what, a->name[i], j,
                    a->data[i][j], b->data[k][j]);
            return 0;
        }
    }
    return 1;
}

/* The snapshot of a parsed model at batch through pipeline spec: 0, or -1
 * (with a failed CHECK) when it does not compile or run. */
static inline int pc_snapshot_program(const fe_program *fp, int batch, const char *spec,
                                      pc_snapshot *s) {
    ir_train t = *fe_train(fp);
    t.batch = t.eval_batch = batch;
    dpc_plan *p = pc_compile(fe_build_graph(fp, batch, 1), fe_build_graph(fp, batch, 0), &t, spec);
    int rc = p ? pc_run(p, s) : -1;
    if (p) plan_free(p);
    return rc;
}

/* got against the baseline ref, bit for bit; label, batch and the two
 * pipelines name it in the report. */
static inline int pc_same_snapshot(const pc_snapshot *got, const pc_snapshot *ref,
                                   const char *label, int batch, const char *on, const char *off) {
    char what[1400];
    snprintf(what, sizeof what, "%s batch %d: '%s' vs '%s'", label, batch, on, off);
    return ref->n > 10 && pc_equal(got, ref, what);
}

/* A parsed model at batch through pipeline `on` and pipeline `off`: 1 when
 * every result is bit-identical; label names it in the report. */
static inline int pc_same_program(const fe_program *fp, const char *label, int batch,
                                  const char *on, const char *off) {
    pc_snapshot ref = {0}, got = {0};
    int same = pc_snapshot_program(fp, batch, off, &ref) == 0 &&
               pc_snapshot_program(fp, batch, on, &got) == 0 &&
               pc_same_snapshot(&got, &ref, label, batch, on, off);
    pc_snap_free(&ref);
    pc_snap_free(&got);
    return same;
}

/* The .net file model, as pc_same_program. */
static inline int pc_same(const char *model, int batch, const char *on, const char *off) {
    fe_program *fp = fe_parse_file(model);
    CHECK_MSG(fp != NULL, "%s", model);
    int same = fp && pc_same_program(fp, model, batch, on, off);
    fe_free(fp);
    return same;
}

/* The reference interpreter (double precision, naive loops; its tensors
 * are logical, so a layout is only storage to it) on graphs a and b from
 * the same random sources, matched by name: the number of gradients,
 * losses, parameters and states compared, all bit-identical, or -1 (and
 * the first difference on stderr). */
static inline int pc_interp_same(const ir_graph *a, const ir_graph *b) {
    oracle_interp *ia = oracle_interp_new(a), *ib = oracle_interp_new(b);
    uint64_t seed = 0x2545F4914F6CDD1Dull;
    int compared = 0;
    for (int i = 0; i < a->n && compared >= 0; i++) {
        const ir_node *n = &a->nodes[i];
        if (!ir_is_source(n->op)) continue;
        int j = tg_find(b, n->name);
        if (j < 0) {
            fprintf(stderr, "  interp: no source '%s' in the other graph\n", n->name);
            compared = -1;
            break;
        }
        double *x = oracle_interp_buffer(ia, i);
        for (int64_t e = 0; e < ir_numel(&n->type); e++) {
            double v = tg_rnd(&seed);
            x[e] = n->type.dtype == IR_I32   ? (double)((int)((v + 1) * 5) % 10)
                   : ir_numel(&n->type) == 1 ? 0.1
                   : n->op == IR_OP_STATE && strstr(n->name, "running_var") ? 1.5 + v
                                                                            : v;
        }
        memcpy(oracle_interp_buffer(ib, j), x, sizeof(double) * (size_t)ir_numel(&n->type));
    }
    if (compared >= 0) {
        oracle_interp_run(ia);
        oracle_interp_run(ib);
    }
    for (int i = 0; i < a->n && compared >= 0; i++) {
        const ir_node *n = &a->nodes[i];
        int src = n->op == IR_OP_PARAM || n->op == IR_OP_STATE;
        if (!src && !(n->flags & (IR_FLAG_GRAD | IR_FLAG_LOSS))) continue;
        int j = tg_find(b, n->name);
        if (j < 0) continue;
        if (memcmp(oracle_interp_buffer(ia, i), oracle_interp_buffer(ib, j),
                   sizeof(double) * (size_t)ir_numel(&n->type))) {
            fprintf(stderr, "  interp: %s differs\n", n->name);
            compared = -1;
        } else {
            compared++;
        }
    }
    oracle_interp_free(ia), oracle_interp_free(ib);
    return compared;
}

#endif
