/* ir/validate.c — ir_validate (ir/validate.h): a graph and its training
 * section checked the same way whatever they came from. The graphs have
 * passed ir_verify (structure, shape rules, attribute ranges); this is
 * what they mean together. Linear in the nodes (names through sorted
 * arrays), as ir_verify is. */
#include "ir/validate.h"

#include <inttypes.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "base/err.h"
#include "ir/internal.h"

static const char *const prog_names[2] = {"train", "eval"};

typedef struct {
    const ir_train *t;
    ir_where *w;
    char *err;
    size_t errlen;
} vctx;

__attribute__((format(printf, 6, 7))) static int fail_at(vctx *c, const char *field, int program,
                                                         int node, int group, const char *fmt,
                                                         ...) {
    c->w->field = field, c->w->program = program, c->w->node = node, c->w->group = group;
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return base_fail(c->err, c->errlen, "%s", msg);
}

/* ---- names ------------------------------------------------------------- */

static int cmp_names(const void *a, const void *b) {
    return strcmp((*(const ir_node *const *)a)->name, (*(const ir_node *const *)b)->name);
}

/* g's nodes that pass keep, sorted by name (for find). */
static const ir_node **sorted_nodes(const ir_graph *g, int (*keep)(ir_op), int *n) {
    const ir_node **v = malloc(sizeof *v * (size_t)(g->n ? g->n : 1));
    BASE_CHECK_ALLOC(v);
    *n = 0;
    for (int i = 0; i < g->n; i++)
        if (keep(g->nodes[i].op)) v[(*n)++] = &g->nodes[i];
    qsort(v, (size_t)*n, sizeof *v, cmp_names);
    return v;
}

static const ir_node *find(const ir_node **v, int n, const char *name) {
    ir_node key;
    memset(&key, 0, sizeof key);
    snprintf(key.name, sizeof key.name, "%s", name);
    const ir_node *kp = &key, **hit = bsearch(&kp, v, (size_t)n, sizeof *v, cmp_names);
    return hit ? *hit : NULL;
}

static int is_param(ir_op op) { return op == IR_OP_PARAM; }

/* ---- one program ----------------------------------------------------------- */

static int is_update(ir_op op) {
    return op == IR_OP_SGD_MOMENTUM || op == IR_OP_LARS_LR || op == IR_OP_ADAM_M ||
           op == IR_OP_ADAM_V || op == IR_OP_ADAM_DIR || op == IR_OP_BIAS_CORRECTION ||
           op == IR_OP_LAMB_LR || op == IR_OP_DESCEND || op == IR_OP_CLIP_SCALE;
}

/* The inputs the dataset fills: image and label, or tokens and targets
 * (data tokens' windows). */
static int dataset_input(const char *dataset, const char *name) {
    if (!strcmp(dataset, "tokens")) return !strcmp(name, "tokens") || !strcmp(name, "targets");
    return !strcmp(name, "image") || !strcmp(name, "label");
}

/* Every input a node reads is fed: by the data, by the runtime (the
 * dropout key of a training step), or, once the optimizer made them, the
 * scalars the training loop sets every step. The dataset's inputs have
 * the schedule's batch. */
static int check_inputs(vctx *c, const ir_graph *g, int p, int has_update) {
    unsigned char *read = calloc((size_t)g->n + 1, 1);
    BASE_CHECK_ALLOC(read);
    for (int i = 0; i < g->n; i++)
        for (int k = 0; k < g->nodes[i].ninputs; k++) read[g->nodes[i].input[k]] = 1;
    const char *dataset = c->t ? c->t->dataset : "cifar10";
    int rc = 0;
    for (int i = 0; i < g->n && !rc; i++) {
        const ir_node *n = &g->nodes[i];
        if (n->op != IR_OP_INPUT) continue;
        if (!strcmp(n->name, "image") && n->type.dtype == IR_I32 && read[i]) {
            rc = fail_at(c, NULL, p, i, 0, "input 'image' is int; the %s data fills it with pixels",
                         dataset);
            continue;
        }
        if (dataset_input(dataset, n->name)) {
            int want = !c->t ? 0 : p ? c->t->eval_batch : c->t->batch;
            if (want && n->type.dim[0] != want)
                rc = fail_at(c, p ? "eval_batch" : "batch", -1, -1, 0,
                             "the schedule's %s is %d, but the %s program's input '%s' (node %d) "
                             "has batch %" PRId64,
                             p ? "eval batch" : "batch", want, prog_names[p], n->name, i,
                             n->type.dim[0]);
            continue;
        }
        if (!read[i]) continue;
        /* the runtime's, every training step: the dropout key, 1/replicas
         * of a synchronised BatchNorm (passes/lower.c's FMT_REPLICA_SCALE) */
        if (p == 0 && (!strcmp(n->name, IR_DROPOUT_KEY) || !strcmp(n->name, "replica_scale")))
            continue;
        if (has_update &&
            (!strcmp(n->name, "lr") || !strcmp(n->name, "grad_scale") || !strcmp(n->name, "step")))
            continue;
        rc = fail_at(c, NULL, p, i, 0, "input '%s' is never fed: the %s data fills only %s",
                     n->name, dataset,
                     strcmp(dataset, "tokens") ? "'image' and 'label'" : "'tokens' and 'targets'");
    }
    free(read);
    return rc;
}

/* IR_FLAG_GRAD: what autodiff flags, PARAM.grad of a parameter, f32, of its
 * shape, one per parameter (partitioning all-reduces these, the memory
 * plan keeps them, the runtime reads them). */
static int check_grads(vctx *c, const ir_graph *g, int p) {
    int np;
    const ir_node **params = sorted_nodes(g, is_param, &np);
    int *seen = calloc((size_t)g->n + 1, sizeof *seen); /* per parameter: its gradient + 1 */
    BASE_CHECK_ALLOC(seen);
    int rc = 0;
    char a[96], b[96];
    for (int i = 0; i < g->n && !rc; i++) {
        const ir_node *n = &g->nodes[i];
        if (!(n->flags & IR_FLAG_GRAD)) continue;
        const char *op = ir_ops[n->op].name;
        size_t len = strlen(n->name);
        char pname[IR_NAME_MAX];
        const ir_node *w = NULL;
        if (len > 5 && !strcmp(n->name + len - 5, ".grad")) {
            memcpy(pname, n->name, len - 5);
            pname[len - 5] = 0;
            w = find(params, np, pname);
        }
        if (p == 1)
            rc = fail_at(c, NULL, p, i, 0,
                         "node %d (%s) is flagged a gradient: the eval program computes none", i,
                         op);
        else if (ir_is_source(n->op) || !w)
            rc = fail_at(c, NULL, p, i, 0,
                         "node %d (%s '%s') is flagged a gradient, but it is not PARAM.grad of a "
                         "parameter",
                         i, op, n->name);
        else if (!ir_type_same_shape(&n->type, &w->type) || n->type.dtype != IR_F32)
            rc = fail_at(c, NULL, p, i, 0,
                         "node %d (%s '%s') is flagged a gradient, but it is %s and parameter "
                         "'%s' %s (a gradient is f32, of its parameter's shape)",
                         i, op, n->name, ir_type_str(&n->type, a, sizeof a), w->name,
                         ir_type_str(&w->type, b, sizeof b));
        else if (seen[w - g->nodes])
            rc = fail_at(c, NULL, p, i, 0,
                         "node %d (%s) is a second gradient of parameter '%s' (the first: "
                         "node %d)",
                         i, op, w->name, seen[w - g->nodes] - 1);
        else
            seen[w - g->nodes] = i + 1;
    }
    free(seen);
    free(params);
    return rc;
}

/* Why codegen cannot fuse node n (!ir_node_fusible). */
static const char *not_fusible(const ir_node *n) {
    if (n->type.dtype == IR_I32) return "its value is i32";
    switch (ir_ops[n->op].fuse) {
    case IR_FUSE_OPAQUE: return "a GEMM runs as a library call of its own";
    case IR_FUSE_WINDOW: return "a pooling window runs as a kernel of its own";
    default: return "codegen has no per-element rule for it";
    }
}

/* A fusion group [lo, hi) with id grp: what codegen renders as one kernel
 * (ir/ir.h's fusion classes and group kinds; passes/fuse.c's rules 1, 2
 * and 6): fusible members,
 * one iteration space, at most IR_GROUP_MAX_NODES nodes and
 * IR_GROUP_MAX_BUFFERS buffers. */
static int check_group(vctx *c, const ir_graph *g, int p, int lo, int hi,
                       const unsigned char *stored) {
    int grp = g->nodes[lo].group;
    char a[96], b[96];
#define GFAIL(node, ...) fail_at(c, NULL, p, node, grp, __VA_ARGS__)
    if (hi - lo > IR_GROUP_MAX_NODES)
        return GFAIL(lo, "fusion group %d holds %d nodes, at most %d", grp, hi - lo,
                     IR_GROUP_MAX_NODES);
    const ir_type *X = NULL, *R = NULL; /* a channel reduction's input, a row's logits */
    int red = -1;
    for (int m = lo; m < hi; m++) {
        const ir_node *n = &g->nodes[m];
        if (!ir_node_fusible(n))
            return GFAIL(m, "fusion group %d holds node %d (%s), which codegen cannot fuse: %s",
                         grp, m, ir_ops[n->op].name, not_fusible(n));
        ir_fuse_class k = ir_op_fuse(n->op);
        if (n->op == IR_OP_SUMSQ && hi - lo > 1)
            return GFAIL(m, "fusion group %d holds node %d (sumsq), which is never grouped", grp,
                         m);
        const ir_type *in = &g->nodes[n->input[0]].type;
        if (k == IR_FUSE_CHANNEL && X && !ir_type_same_shape(in, X))
            return GFAIL(m, "fusion group %d reduces %s at node %d and %s at node %d", grp,
                         ir_type_str(X, a, sizeof a), red, ir_type_str(in, b, sizeof b), m);
        if (k == IR_FUSE_ROW && R && !ir_type_same_shape(in, R))
            return GFAIL(m,
                         "fusion group %d reduces the rows of %s at node %d and of %s at node %d",
                         grp, ir_type_str(R, a, sizeof a), red, ir_type_str(in, b, sizeof b), m);
        if ((k == IR_FUSE_CHANNEL && R) || (k == IR_FUSE_ROW && X))
            return GFAIL(m, "fusion group %d mixes channel and row reductions (nodes %d and %d)",
                         grp, red, m);
        if (k == IR_FUSE_CHANNEL && !X) X = in, red = m;
        if (k == IR_FUSE_ROW && !R) R = in, red = m;
    }
    /* one iteration space: the type every member is (elementwise), X or
     * one value per channel (channel), or one per row (row) */
    const ir_type *S = &g->nodes[lo].type;
    for (int m = lo; m < hi; m++) {
        const ir_node *n = &g->nodes[m];
        const ir_type *t = &n->type;
        if (ir_op_fuse(n->op) == IR_FUSE_CHANNEL || ir_op_fuse(n->op) == IR_FUSE_ROW) continue;
        int fits = X   ? ir_type_same_shape(t, X) || (t->ndim == 1 && t->dim[0] == X->dim[1])
                   : R ? t->ndim == 1 && t->dim[0] == R->dim[0]
                       : ir_type_same_shape(t, S);
        if (!fits)
            return GFAIL(m,
                         "fusion group %d has no one iteration space: node %d (%s) is %s, not "
                         "%s%s",
                         grp, m, ir_ops[n->op].name, ir_type_str(t, a, sizeof a),
                         X   ? "the reduced shape (or one value per channel of) "
                         : R ? "one value per row of "
                             : "the type of the group's first node, ",
                         ir_type_str(X   ? X
                                     : R ? R
                                         : S,
                                     b, sizeof b));
    }
    /* buffers: what is stored, assign targets, and what members read from outside */
    int buf[IR_GROUP_MAX_NODES * (IR_MAX_INPUTS + 1)], nb = 0;
    for (int m = lo; m < hi; m++) {
        const ir_node *n = &g->nodes[m];
        for (int k = -1; k < n->ninputs; k++) {
            int id = k < 0 ? (n->op == IR_OP_ASSIGN ? n->input[0]
                              : stored[m]           ? m
                                                    : -1)
                           : n->input[k];
            if (id < 0 || (k >= 0 && id >= lo && id < hi)) continue;
            if (k >= 0 && (n->op == IR_OP_ASSIGN ? k != 1 : !ir_op_access(n->op, k)) &&
                ir_op_expr(n->op))
                continue; /* not read */
            int dup = 0;
            for (int j = 0; j < nb && !dup; j++) dup = buf[j] == id;
            if (!dup) buf[nb++] = id;
        }
    }
    if (nb > IR_GROUP_MAX_BUFFERS)
        return GFAIL(lo, "fusion group %d uses %d buffers, at most %d", grp, nb,
                     IR_GROUP_MAX_BUFFERS);
#undef GFAIL
    return 0;
}

static int check_groups(vctx *c, const ir_graph *g, int p) {
    int any = 0;
    for (int i = 0; i < g->n && !any; i++) any = g->nodes[i].group != 0;
    if (!any) return 0;
    unsigned char *stored = malloc((size_t)g->n + 1);
    BASE_CHECK_ALLOC(stored);
    ir_stored(g, stored);
    int rc = 0;
    for (int lo = 0; lo < g->n && !rc;) {
        int hi = lo + 1;
        if (g->nodes[lo].group) { /* contiguous: ir_verify */
            while (hi < g->n && g->nodes[hi].group == g->nodes[lo].group) hi++;
            rc = check_group(c, g, p, lo, hi, stored);
        }
        lo = hi;
    }
    free(stored);
    return rc;
}

/* The eval program evaluates: it changes nothing that outlives it. */
static int check_eval(vctx *c, const ir_graph *g) {
    for (int i = 0; i < 2 * g->n; i++) { /* what writes first, then what is training only */
        const ir_node *n = &g->nodes[i % g->n];
        const char *why = i < g->n ? (n->op == IR_OP_ASSIGN ? "writes %s '%s' (an assign)"
                                      : n->op == IR_OP_BATCHNORM && n->iattr[0]
                                          ? "updates running statistics (a batchnorm in "
                                            "training mode)"
                                          : NULL)
                          : n->op == IR_OP_DROPOUT ? "drops activations (dropout is training only)"
                          : is_update(n->op)       ? "holds an optimizer update"
                                                   : NULL;
        if (!why) continue;
        char what[200];
        const ir_node *dst = &g->nodes[n->input[0]];
        snprintf(what, sizeof what, why, ir_ops[dst->op].name, dst->name);
        return fail_at(c, NULL, 1, i % g->n, 0,
                       "node %d (%s): the eval program %s; evaluating must not change the model "
                       "(is it the train program?)",
                       i % g->n, ir_ops[n->op].name, what);
    }
    return 0;
}

static int is_persistent(ir_op op) { return ir_is_persistent(op); }

/* Both programs bind the same parameter and state buffers (docs/DESIGN.md
 * §6), so each of eval's must be one of train's, by name, kind and type. */
static int check_shared(vctx *c, const ir_graph *train, const ir_graph *eval) {
    int ns;
    const ir_node **sorted = sorted_nodes(train, is_persistent, &ns);
    int rc = 0;
    for (int i = 0; i < eval->n && !rc; i++) {
        const ir_node *e = &eval->nodes[i];
        if (!ir_is_persistent(e->op)) continue;
        const ir_node *hit = find(sorted, ns, e->name);
        char a[96], b[96];
        if (!hit)
            rc = fail_at(c, NULL, 1, i, 0, "%s '%s' is not in the train program",
                         ir_ops[e->op].name, e->name);
        else if (hit->op != e->op || !ir_type_equal(&hit->type, &e->type))
            rc = fail_at(c, NULL, 1, i, 0, "%s '%s' %s differs from the train program's %s %s",
                         ir_ops[e->op].name, e->name, ir_type_str(&e->type, a, sizeof a),
                         ir_ops[hit->op].name, ir_type_str(&hit->type, b, sizeof b));
    }
    free(sorted);
    return rc;
}

/* The train program's update is the schedule's optimizer
 * (passes/optimizer.c), its hyper-parameters the schedule's: what the
 * plan says it trains with is what it trains with. */
static int check_optimizer(vctx *c, const ir_graph *g) {
    const ir_train *t = c->t;
    int first[IR_OP_COUNT], cnt[IR_OP_COUNT] = {0}, nest = 0, plain = 0;
    for (int i = g->n - 1; i >= 0; i--) first[g->nodes[i].op] = i, cnt[g->nodes[i].op]++;
    const char *opt = ir_optimizer_names[t->optimizer];
    /* the ops each optimizer may not hold */
    static const ir_op foreign[][6] = {
        [IR_OPT_SGD] = {IR_OP_LARS_LR, IR_OP_ADAM_DIR, IR_OP_LAMB_LR, IR_OP_DESCEND, IR_OP_ADAM_M},
        [IR_OPT_LARS] = {IR_OP_ADAM_DIR, IR_OP_LAMB_LR, IR_OP_DESCEND, IR_OP_ADAM_M, IR_OP_ADAM_V},
        [IR_OPT_LAMB] = {IR_OP_SGD_MOMENTUM, IR_OP_LARS_LR},
        [IR_OPT_ADAMW] = {IR_OP_SGD_MOMENTUM, IR_OP_LARS_LR, IR_OP_LAMB_LR},
    };
    for (int k = 0; k < 6; k++) {
        ir_op f = foreign[t->optimizer][k];
        if (f && cnt[f])
            return fail_at(c, "optimizer", -1, -1, 0,
                           "the schedule's optimizer is %s, but the train program updates with "
                           "%s (node %d)",
                           opt, ir_ops[f].name, first[f]);
    }
    int sgd_like = t->optimizer == IR_OPT_SGD || t->optimizer == IR_OPT_LARS;
    for (int i = 0; i < g->n; i++) {
        const ir_node *n = &g->nodes[i];
        const double *f = n->fattr;
        const char *bad = NULL, *field = NULL;
        double want = 0, got = 0;
#define WANT(slot, v, key)                                 \
    if (!bad && f[slot] != (v)) {                          \
        bad = key, field = key, want = (v), got = f[slot]; \
    }
        /* excluded parameters (exclude=...) get wd 0 */
#define WANT_WD(slot)                                                \
    if (!bad && f[slot] != t->wd && !(t->exclude && f[slot] == 0)) { \
        bad = "wd", field = "wd", want = t->wd, got = f[slot];       \
    }
        switch (n->op) {
        case IR_OP_SGD_MOMENTUM:
            WANT(0, t->momentum, "momentum");
            WANT_WD(1);
            if (g->nodes[n->input[2]].op == IR_OP_SGD_MOMENTUM)
                nest++;
            else
                plain++;
            break;
        case IR_OP_LARS_LR:
            WANT(0, t->eta, "eta");
            WANT_WD(1);
            WANT(2, t->eps, "eps");
            break;
        case IR_OP_ADAM_M: WANT(0, t->beta1, "beta1"); break;
        case IR_OP_ADAM_V: WANT(0, t->beta2, "beta2"); break;
        case IR_OP_BIAS_CORRECTION: /* one for each moment */
            if (f[0] != t->beta1 && f[0] != t->beta2)
                return fail_at(c, "beta1", 0, i, 0,
                               "node %d (bias_correction) has beta=%.17g, the schedule's beta1 "
                               "is %.17g and beta2 %.17g",
                               i, f[0], t->beta1, t->beta2);
            break;
        case IR_OP_ADAM_DIR:
            WANT(0, t->eps, "eps");
            WANT_WD(1);
            break;
        case IR_OP_CLIP_SCALE: WANT(0, t->clip_norm, "clip_norm"); break;
        default: break;
        }
#undef WANT
#undef WANT_WD
        if (bad)
            return fail_at(c, field, 0, i, 0,
                           "node %d (%s) has %s=%.17g, the schedule's %s is %.17g", i,
                           ir_ops[n->op].name, bad, got, bad, want);
    }
    if ((t->clip_norm > 0) != (cnt[IR_OP_CLIP_SCALE] == 1))
        return fail_at(c, "clip_norm", -1, -1, 0,
                       "the schedule's clip_grad_norm is %g, but the train program has %d "
                       "clip_scale nodes",
                       t->clip_norm, cnt[IR_OP_CLIP_SCALE]);
    if (sgd_like && (t->nesterov ? nest != plain : nest != 0))
        return fail_at(c, "nesterov", -1, -1, 0,
                       "the schedule says nesterov=%d, but the train program's update %s",
                       t->nesterov,
                       t->nesterov ? "is not nesterov's (one sgd_momentum per parameter)"
                                   : "is nesterov's (two sgd_momentum per parameter)");
    return 0;
}

static int check_program(vctx *c, const ir_graph *g, int p) {
    int has_update = 0;
    for (int i = 0; i < g->n && !has_update; i++) has_update = is_update(g->nodes[i].op);
    if (check_inputs(c, g, p, has_update) || (p == 1 && check_eval(c, g)) || check_grads(c, g, p) ||
        check_groups(c, g, p))
        return -1;
    return p == 0 && c->t && has_update ? check_optimizer(c, g) : 0;
}

int ir_validate(const ir_train *t, const ir_graph *train, const ir_graph *eval, ir_where *w,
                char *err, size_t errlen) {
    ir_where spare;
    if (!w) w = &spare;
    *w = (ir_where){NULL, -1, -1, 0};
    vctx c = {t, w, err, errlen};
    const char *field;
    if (t && ir_train_check_field(t, &field, err, errlen)) {
        w->field = field;
        return -1;
    }
    if ((train && check_program(&c, train, 0)) || (eval && check_program(&c, eval, 1))) return -1;
    return train && eval ? check_shared(&c, train, eval) : 0;
}
