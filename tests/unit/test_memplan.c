/* tests/unit/test_memplan.c — the memory planner.
 *
 * Property (docs/DESIGN.md §13): on the models and on hundreds of random graphs,
 * fused and not, no two tensors that are live at the same step share a
 * byte of the arena (an in-place pair excepted: an elementwise step
 * writing its output over an input that dies there), every offset is
 * aligned and inside the arena, and the arena is at least the lower bound
 * (the most bytes live at one step) and at most the naive sum. Lifetimes
 * are recomputed here independently of format/memplan.c. Then a few random graphs
 * run with and without the plan and must agree bit for bit, which catches
 * a kernel that reads what an in-place write already replaced. Also: the
 * MEMP record round trip and refusal of damaged records.
 */
#include <stdlib.h>
#include <string.h>

#include "codegen/codegen.h"
#include "frontend/frontend.h"
#include "format/plan.h"
#include "passes/passes.h"
#include "runtime/runtime.h"
#include "tests/harness.h"

static rt_backend *be;
static char err[4096];

static uint64_t rs = 0x9E3779B97F4A7C15ull;
static int rnd(int n) { /* uniform in [0, n) */
    rs ^= rs << 13, rs ^= rs >> 7, rs ^= rs << 17;
    return (int)(rs % (uint64_t)n);
}

/* ---- an independent check -------------------------------------------------------------- */

/* Lifetimes straight from the definition: steps in graph order (a group is
 * one step), a tensor from its step to its last reader's step, through
 * views; outputs to the end. Returns the number of violations. */
static int check_plan(const ir_graph *g, const fmt_memplan *m, const char *what) {
    int n = g->n, bad = 0;
    int *step = calloc((size_t)n, sizeof *step), *last = calloc((size_t)n, sizeof *last);
    int s = -1;
    for (int i = 0; i < n; i++) {
        if (ir_is_source(g->nodes[i].op)) {
            step[i] = -1;
            continue;
        }
        if (!(g->nodes[i].group && i && g->nodes[i - 1].group == g->nodes[i].group)) s++;
        step[i] = s;
    }
    int nsteps = s + 1;
    for (int i = 0; i < n; i++) last[i] = step[i];
    for (int i = 0; i < n; i++)
        for (int k = 0; k < g->nodes[i].ninputs; k++) {
            int r = g->nodes[i].input[k];
            while (ir_is_view(g->nodes[r].op)) r = g->nodes[r].input[0];
            if (step[i] > last[r]) last[r] = step[i];
        }
    for (int i = 0; i < n; i++) {
        int r = i;
        while (ir_is_view(g->nodes[r].op)) r = g->nodes[r].input[0];
        if (g->nodes[i].flags & (IR_FLAG_OUTPUT | IR_FLAG_LOSS)) last[r] = nsteps - 1;
    }
    unsigned char *stored = malloc((size_t)n);
    ir_stored(g, stored);
    int64_t maxlive = 0;
    for (int i = 0; i < n; i++) {
        int64_t off = m->offset[i];
        if (off < 0) continue;
        const ir_node *a = &g->nodes[i];
        int64_t size = ir_numel(&a->type) * 4;
        if (ir_is_source(a->op) || ir_is_view(a->op) || a->op == IR_OP_ASSIGN || !stored[i] ||
            (a->flags & IR_FLAG_GRAD)) {
            fprintf(stderr, "  %s: node %d (%s) should not be in the arena\n", what, i,
                    ir_ops[a->op].name);
            bad++;
        }
        if (off % 64 || off + size > m->arena_bytes) {
            fprintf(stderr, "  %s: node %d at %lld+%lld outside arena %lld\n", what, i,
                    (long long)off, (long long)size, (long long)m->arena_bytes);
            bad++;
        }
        if (size > maxlive) maxlive = size;
        for (int j = i + 1; j < n; j++) {
            int64_t oj = m->offset[j];
            if (oj < 0) continue;
            int64_t sj = ir_numel(&g->nodes[j].type) * 4;
            if (oj >= off + size || off >= oj + sj) continue;     /* bytes apart */
            if (step[i] > last[j] || step[j] > last[i]) continue; /* never both live */
            /* in place: j written over i at the step where i dies, i an input of that step */
            int inplace = off == oj && size == sj && last[i] == step[j] && m->inplace[j] == i;
            if (inplace) {
                int reads = 0;
                for (int q = 0; q < n; q++)
                    if (step[q] == step[j])
                        for (int k = 0; k < g->nodes[q].ninputs; k++) {
                            int r = g->nodes[q].input[k];
                            while (ir_is_view(g->nodes[r].op)) r = g->nodes[r].input[0];
                            if (r == i) {
                                reads++;
                                if (!ir_op_expr(g->nodes[q].op) ||
                                    ir_op_access(g->nodes[q].op, k) != 'i')
                                    inplace = 0;
                            }
                        }
                inplace = inplace && reads;
            }
            if (!inplace) {
                fprintf(stderr,
                        "  %s: nodes %d (%s, steps %d-%d) and %d (%s, steps %d-%d) overlap\n", what,
                        i, ir_ops[g->nodes[i].op].name, step[i], last[i], j,
                        ir_ops[g->nodes[j].op].name, step[j], last[j]);
                bad++;
            }
        }
    }
    if (m->arena_bytes < m->lower_bytes || m->lower_bytes < maxlive ||
        m->arena_bytes > m->naive_bytes) {
        fprintf(stderr, "  %s: arena %lld, lower bound %lld, largest %lld, naive %lld\n", what,
                (long long)m->arena_bytes, (long long)m->lower_bytes, (long long)maxlive,
                (long long)m->naive_bytes);
        bad++;
    }
    char why[256];
    if (fmt_memplan_check(m, g, why, sizeof why)) {
        fprintf(stderr, "  %s: fmt_memplan_check: %s\n", what, why);
        bad++;
    }
    free(step), free(last), free(stored);
    return bad;
}

/* ---- the placement by its definition ------------------------------------------------------ */

typedef struct {
    int head, def, last;
    int64_t bytes, off;
} ref_alloc;

typedef struct {
    int64_t lo, hi;
} ref_span;

static int ref_cmp_span(const void *a, const void *b) {
    const ref_span *x = a, *y = b;
    return (x->lo > y->lo) - (x->lo < y->lo);
}

static int ref_mode;
static int ref_cmp(const void *a, const void *b) {
    const ref_alloc *x = *(const ref_alloc *const *)a, *y = *(const ref_alloc *const *)b;
    int64_t kx = x->bytes, ky = y->bytes;
    if (ref_mode) kx *= x->last - x->def + 1, ky *= y->last - y->def + 1;
    if (kx != ky) return kx < ky ? 1 : -1;
    if (x->def != y->def) return x->def - y->def;
    return x->head - y->head;
}

/* Best fit as passes/memplan.c states it, by brute force (what memplan
 * did before its segment tree: every placed allocation looked at): by
 * decreasing size (mode 0) or size x lifetime (1), each allocation into
 * the smallest gap (the lowest of equal ones) between the placed
 * allocations whose lifetimes meet its own, else above them all. Returns
 * the arena. */
static int64_t ref_place(ref_alloc *al, int na, int mode) {
    ref_alloc **order = calloc((size_t)na + 1, sizeof *order);
    ref_span *busy = calloc((size_t)na + 1, sizeof *busy);
    for (int i = 0; i < na; i++) order[i] = &al[i], al[i].off = -1;
    ref_mode = mode;
    qsort(order, (size_t)na, sizeof *order, ref_cmp);
    int64_t top = 0;
    for (int i = 0; i < na; i++) {
        ref_alloc *a = order[i];
        int nb = 0;
        for (int j = 0; j < i; j++) {
            const ref_alloc *b = order[j];
            if (b->def <= a->last && a->def <= b->last)
                busy[nb++] = (ref_span){b->off, b->off + b->bytes};
        }
        qsort(busy, (size_t)nb, sizeof *busy, ref_cmp_span);
        int64_t best = -1, best_gap = INT64_MAX, at = 0;
        for (int j = 0; j < nb; j++) {
            int64_t gap = busy[j].lo - at;
            if (gap >= a->bytes && gap < best_gap) best = at, best_gap = gap;
            if (busy[j].hi > at) at = busy[j].hi;
        }
        a->off = best >= 0 ? best : at;
        if (a->off + a->bytes > top) top = a->off + a->bytes;
    }
    free(order), free(busy);
    return top;
}

/* Whether m places g's allocations (an in-place chain is one, from its
 * head's step to its last member's last) where ref_place puts them, with
 * the arena and the lower bound (most bytes live at one step) it gives. */
static int placement_is_the_reference(const ir_graph *g, const fmt_memplan *m, const char *what) {
    int n = g->n, na = 0, bad = 0;
    int *head = calloc((size_t)n + 1, sizeof *head), *slot = calloc((size_t)n + 1, sizeof *slot);
    ref_alloc *al = calloc((size_t)n + 1, sizeof *al), *al2 = calloc((size_t)n + 1, sizeof *al2);
    for (int i = 0; i < n; i++) {
        if (m->offset[i] < 0) continue;
        head[i] = m->inplace[i] >= 0 ? head[m->inplace[i]] : i;
        if (head[i] == i)
            slot[i] = na, al[na++] = (ref_alloc){i, m->def[i], m->last[i], m->bytes[i], -1};
        ref_alloc *a = &al[slot[head[i]]];
        if (m->last[i] > a->last) a->last = m->last[i];
    }
    memcpy(al2, al, sizeof *al * (size_t)na);
    int64_t arena = ref_place(al, na, 0), other = ref_place(al2, na, 1), lower = 0;
    if (other < arena) memcpy(al, al2, sizeof *al * (size_t)na), arena = other;
    for (int s = 0; s < m->nsteps; s++) {
        int64_t live = 0;
        for (int a = 0; a < na; a++) live += al[a].def <= s && s <= al[a].last ? al[a].bytes : 0;
        if (live > lower) lower = live;
    }
    for (int i = 0; i < n && !bad; i++)
        if (m->offset[i] >= 0 && m->offset[i] != al[slot[head[i]]].off) {
            fprintf(stderr, "  %s: node %d at %lld, best fit puts it at %lld\n", what, i,
                    (long long)m->offset[i], (long long)al[slot[head[i]]].off);
            bad++;
        }
    if (m->arena_bytes != arena || m->lower_bytes != lower) {
        fprintf(stderr, "  %s: arena %lld, lower bound %lld; best fit: %lld, %lld\n", what,
                (long long)m->arena_bytes, (long long)m->lower_bytes, (long long)arena,
                (long long)lower);
        bad++;
    }
    free(head), free(slot), free(al), free(al2);
    return bad;
}

/* ---- random graphs ------------------------------------------------------------------------ */

typedef struct {
    ir_graph *g;
    int big[64], nbig;   /* [N,C,H,W] tensors */
    int vec[64], nvec;   /* [C] */
    int flat[16], nflat; /* [N, C*H*W] views */
    int nstates;
} rg;

static int add_ia(rg *r, ir_op op, const int *in, int nin, const int64_t *ia, const double *fa) {
    int id = ir_add_node(r->g, op, in, nin, ia, fa, err, sizeof err);
    if (id < 0) fprintf(stderr, "  random graph: %s: %s\n", ir_ops[op].name, err);
    return id;
}

static int add(rg *r, ir_op op, const int *in, int nin, const double *fa) {
    int id = ir_add_node(r->g, op, in, nin, NULL, fa, err, sizeof err);
    if (id < 0) fprintf(stderr, "  random graph: %s: %s\n", ir_ops[op].name, err);
    return id;
}

static int pick(const int *a, int n) { return a[rnd(n)]; }

static ir_graph *random_graph(int size) {
    rg r = {.g = ir_new()};
    ir_type S = ir_shape4(2, 3, 4, 4);
    r.big[r.nbig++] = ir_add_input(r.g, "x", S, 0);
    r.big[r.nbig++] = ir_add_input(r.g, "y", S, 0);
    r.vec[r.nvec++] = ir_add_param(r.g, "p0", ir_shape1(3), IR_INIT_XAVIER);
    r.vec[r.nvec++] = ir_add_param(r.g, "pos1", ir_shape1(3), IR_INIT_ONE);
    int w = ir_add_param(r.g, "w", ir_shape2(5, 48), IR_INIT_XAVIER);
    int assigns[8][2], na = 0;
    for (int k = 0; k < size; k++) {
        int id = -1, a = pick(r.big, r.nbig), b = pick(r.big, r.nbig), v = pick(r.vec, r.nvec);
        switch (rnd(14)) {
        case 0: id = add(&r, IR_OP_RELU, &a, 1, NULL); break;
        case 1: id = add(&r, IR_OP_ADD, (int[]){a, b}, 2, NULL); break;
        case 2: id = add(&r, IR_OP_BIAS_ADD, (int[]){a, v}, 2, NULL); break;
        case 3: id = add(&r, IR_OP_RELU_GRAD, (int[]){a, b}, 2, NULL); break;
        case 4: {
            int m = add(&r, IR_OP_BN_MEAN, &a, 1, NULL);
            int s = add(&r, IR_OP_BN_VAR, (int[]){a, m}, 2, NULL);
            r.vec[r.nvec++ % 64] = m;
            r.vec[r.nvec++ % 64] = s;
            if (r.nvec > 64) r.nvec = 64;
            id = add(&r, IR_OP_BN_APPLY, (int[]){a, m, s, v, pick(r.vec, r.nvec)}, 5,
                     (double[]){1e-5});
            if (na < 8 && rnd(2)) { /* a running statistic */
                char name[16];
                snprintf(name, sizeof name, "st%d", r.nstates++);
                int st = ir_add_state(r.g, name, ir_shape1(3), IR_INIT_ZERO);
                int e = add(&r, IR_OP_EMA, (int[]){st, m}, 2, (double[]){0.9, 1.0});
                assigns[na][0] = st, assigns[na++][1] = e;
            }
            break;
        }
        case 5: {
            int s = add(&r, IR_OP_BIAS_GRAD, &a, 1, NULL);
            if (r.nvec < 64) r.vec[r.nvec++] = s;
            if (rnd(3) == 0) r.g->nodes[s].flags |= IR_FLAG_GRAD;
            break;
        }
        case 6:
            if (r.nflat < 16) r.flat[r.nflat++] = add(&r, IR_OP_FLATTEN, &a, 1, NULL);
            break;
        case 7:
            if (r.nflat)
                id = add(&r, IR_OP_RESHAPE_LIKE, (int[]){pick(r.flat, r.nflat), a}, 2, NULL);
            break;
        case 8:
            if (r.nflat) {
                int d = add(&r, IR_OP_DENSE, (int[]){pick(r.flat, r.nflat), w}, 2, NULL);
                if (rnd(2)) r.g->nodes[d].flags |= IR_FLAG_OUTPUT;
            }
            break;
        case 9: {
            int gp = add(&r, IR_OP_GLOBAL_AVGPOOL, &a, 1, NULL);
            id = add_ia(&r, IR_OP_GLOBAL_AVGPOOL_GRAD, &gp, 1, (int64_t[]){4, 4}, NULL);
            break;
        }
        case 10:
            id = add(&r, IR_OP_BN_GRAD_DATA,
                     (int[]){a, b, v, pick(r.vec, r.nvec), v, pick(r.vec, r.nvec), v}, 7,
                     (double[]){1e-5});
            break;
        case 11:
            id = add(&r, IR_OP_BN_GRAD_GAMMA, (int[]){a, b, v, pick(r.vec, r.nvec)}, 4,
                     (double[]){1e-5});
            if (id >= 0 && r.nvec < 64) r.vec[r.nvec++] = id;
            id = -1;
            break;
        case 12: id = add_ia(&r, IR_OP_MAXPOOL, &a, 1, (int64_t[]){3, 1, 1}, NULL); break;
        default: id = add(&r, IR_OP_ADD, (int[]){a, a}, 2, NULL); break;
        }
        if (id >= 0 && r.nbig < 64) r.big[r.nbig++] = id;
        if (id >= 0 && rnd(6) == 0) r.g->nodes[id].flags |= IR_FLAG_OUTPUT;
    }
    for (int k = 0; k < na; k++) add(&r, IR_OP_ASSIGN, assigns[k], 2, NULL);
    return r.g;
}

TEST(random_graphs_never_overlap_live_tensors) {
    int graphs = 0, bad = 0, inplace = 0;
    for (int t = 0; t < 300; t++) {
        ir_graph *g = random_graph(5 + rnd(t % 10 ? 40 : 300));
        if (ir_verify(g, err, sizeof err)) {
            fprintf(stderr, "  random graph %d: %s\n", t, err);
            bad++;
            ir_free(g);
            continue;
        }
        if (t % 2 && pass_fuse(&g, err, sizeof err)) {
            fprintf(stderr, "  random graph %d: fuse: %s\n", t, err);
            bad++;
        }
        fmt_memplan *m = pass_memplan_run(g, err, sizeof err);
        CHECK(m != NULL);
        if (m) {
            char what[64];
            snprintf(what, sizeof what, "random graph %d%s", t, t % 2 ? " (fused)" : "");
            bad += check_plan(g, m, what);
            bad += placement_is_the_reference(g, m, what);
            for (int i = 0; i < g->n; i++) inplace += m->inplace[i] >= 0;
            graphs++;
        }
        fmt_memplan_free(m);
        ir_free(g);
    }
    CHECK(bad == 0);
    CHECK(graphs == 300);
    CHECK(inplace > 50); /* the generator does exercise in-place reuse */
}

/* The models at a small batch, fused and not; with the resnet18 targets
 * (planned <= 50% of naive, within 1.2x of the lower bound) checked at the
 * batch the README reports (sizes only: no kernels run). */
TEST(models_plans_are_sound) {
    static const char *models[] = {"models/mlp.net", "models/cnn_small.net", "models/resnet18.net",
                                   "models/resnet18_cifar.net", "tests/nets/se_small.net"};
    for (size_t k = 0; k < sizeof models / sizeof *models; k++) {
        fe_program *fp = fe_parse_file(models[k]);
        CHECK(fp != NULL);
        if (!fp) continue;
        for (int fuse = 0; fuse < 2; fuse++)
            for (int training = 0; training < 2; training++) {
                int batch = strstr(models[k], "resnet18.net") ? 128 : 16;
                ir_graph *g = fe_build_graph(fp, batch, training);
                pass_options o = pass_default_options();
                o.fuse = fuse;
                int rc = training ? pass_run_train(&g, fe_train(fp), &o, err, sizeof err)
                                  : pass_run_eval(&g, &o, err, sizeof err);
                CHECK_MSG(rc == 0, "%s", err);
                fmt_memplan *m = rc ? NULL : pass_memplan_run(g, err, sizeof err);
                CHECK(m != NULL);
                if (m) {
                    char what[128];
                    snprintf(what, sizeof what, "%s %s fuse %d", models[k],
                             training ? "train" : "eval", fuse);
                    CHECK_MSG(check_plan(g, m, what) == 0, "%s", what);
                    CHECK_MSG(placement_is_the_reference(g, m, what) == 0, "%s", what);
                    if (strstr(models[k], "resnet18.net") && training && fuse) {
                        CHECK_MSG(2 * m->arena_bytes <= m->naive_bytes, "%lld of %lld",
                                  (long long)m->arena_bytes, (long long)m->naive_bytes);
                        CHECK_MSG(10 * m->arena_bytes <= 12 * m->lower_bytes, "%lld vs %lld",
                                  (long long)m->arena_bytes, (long long)m->lower_bytes);
                    }
                }
                fmt_memplan_free(m);
                ir_free(g);
            }
        fe_free(fp);
    }
}

TEST(section_round_trip_and_refusal) {
    ir_graph *g = random_graph(30);
    fmt_memplan *m = pass_memplan_run(g, err, sizeof err);
    CHECK(m != NULL);
    if (!m) return;
    unsigned char *b;
    size_t len;
    CHECK(fmt_memplan_serialize(m, &b, &len) == 0);
    fmt_memplan *q = NULL;
    CHECK(fmt_memplan_section_find(b, len, g, &q, err, sizeof err) == 0);
    if (q) {
        CHECK(q->arena_bytes == m->arena_bytes && q->lower_bytes == m->lower_bytes);
        CHECK(memcmp(q->offset, m->offset, sizeof *m->offset * (size_t)g->n) == 0);
        fmt_memplan_free(q);
    }
    /* truncated */
    CHECK(fmt_memplan_section_find(b, len - 3, g, &q, err, sizeof err) == -1 && q == NULL);
    /* another graph */
    ir_graph *h = random_graph(10);
    CHECK(fmt_memplan_section_find(b, len, h, &q, err, sizeof err) == 1 && q == NULL);
    ir_free(h);
    /* two live tensors put on the same bytes */
    int a = -1, c = -1;
    fmt_memplan *L = fmt_memplan_lifetimes(g);
    for (int i = 0; i < g->n && c < 0; i++)
        for (int j = i + 1; j < g->n && c < 0; j++)
            if (m->offset[i] >= 0 && m->offset[j] >= 0 && L->def[j] <= L->last[i] &&
                L->def[i] <= L->last[j])
                a = i, c = j;
    CHECK(c >= 0);
    if (c >= 0) {
        memcpy(b + 52 + 8 * (size_t)c, b + 52 + 8 * (size_t)a, 8);
        CHECK(fmt_memplan_section_find(b, len, g, &q, err, sizeof err) == -1);
        CHECK(strstr(err, "share bytes") != NULL);
    }
    fmt_memplan_free(L);
    free(b);
    fmt_memplan_free(m);
    ir_free(g);
}

/* ---- running random graphs with and without the plan ------------------------------------ */

static dpc_plan *plan_of(ir_graph *g, int memplan) {
    dpc_plan *p = calloc(1, sizeof *p);
    ir_train_defaults(&p->schedule);
    p->train = ir_clone(g);
    p->eval = ir_clone(g);
    unsigned char *bytes;
    size_t len;
    cg_program *cp = cg_generate(g, CG_DIALECT_C, NULL, err, sizeof err);
    CHECK(cp != NULL);
    if (cp && !cg_program_serialize(cp, &bytes, &len)) {
        plan_add_section(p, "KCPU", bytes, len);
        free(bytes);
    }
    cg_program_free(cp);
    if (memplan) {
        fmt_memplan *m = pass_memplan_run(g, err, sizeof err);
        if (m && !fmt_memplan_serialize(m, &bytes, &len)) {
            plan_add_section(p, FMT_MEMPLAN_SECTION, bytes, len);
            free(bytes);
        }
        fmt_memplan_free(m);
    }
    return p;
}

/* Outputs and states after one run, from fixed inputs. */
static float *run_outputs(ir_graph *g, int memplan, size_t *nout) {
    dpc_plan *p = plan_of(g, memplan);
    rt_store *st = rt_store_new(be, g);
    rt_store_init(st, g, NULL, 3);
    rt_exec *ex = rt_exec_new(be, st, g, p, err, sizeof err);
    CHECK_MSG(ex != NULL, "%s", err);
    size_t total = 0;
    for (int i = 0; i < g->n; i++) total += (size_t)ir_numel(&g->nodes[i].type);
    float *out = calloc(total + 1, sizeof *out);
    *nout = 0;
    if (ex) {
        rt_rng rng;
        rt_rng_seed(&rng, 5);
        for (int i = 0; i < g->n; i++) {
            const ir_node *n = &g->nodes[i];
            if (n->op != IR_OP_INPUT) continue;
            size_t cnt = (size_t)ir_numel(&n->type);
            float *buf = malloc(cnt * 4);
            for (size_t j = 0; j < cnt; j++) buf[j] = rt_rng_uniform_range(&rng, -1.0f, 1.0f);
            rt_exec_set_input(ex, n->name, buf, cnt * 4);
            free(buf);
        }
        CHECK(rt_exec_run(ex, err, sizeof err) == 0);
        for (int i = 0; i < g->n; i++) {
            const ir_node *n = &g->nodes[i];
            if (!(n->flags & (IR_FLAG_OUTPUT | IR_FLAG_GRAD))) continue;
            size_t cnt = (size_t)ir_numel(&n->type);
            CHECK(rt_exec_get_node(ex, i, out + *nout, cnt * 4) == 0);
            *nout += cnt;
        }
        for (int k = 0; k < rt_store_count(st); k++) {
            rt_store_read(st, k, out + *nout);
            *nout += (size_t)ir_numel(rt_store_type(st, k));
        }
    }
    rt_exec_free(ex);
    rt_store_free(st);
    plan_free(p);
    return out;
}

TEST(random_graphs_run_the_same_planned) {
    int ran = 0;
    for (int t = 0; t < 8; t++) {
        ir_graph *g = random_graph(25);
        g->nodes[g->n - 1].flags |= IR_FLAG_OUTPUT;
        if (t % 2) CHECK(pass_fuse(&g, err, sizeof err) == 0);
        size_t na, nb;
        float *a = run_outputs(g, 0, &na), *b = run_outputs(g, 1, &nb);
        CHECK(na == nb && na > 0);
        CHECK_MSG(na == nb && memcmp(a, b, na * 4) == 0, "random graph %d", t);
        ran += na == nb && na > 0;
        free(a);
        free(b);
        ir_free(g);
    }
    CHECK(ran == 8);
}

int main(void) {
    be = rt_backend_cpu();
    RUN(random_graphs_never_overlap_live_tensors);
    RUN(models_plans_are_sound);
    RUN(section_round_trip_and_refusal);
    RUN(random_graphs_run_the_same_planned);
    rt_backend_free(be);
    return harness_done();
}
