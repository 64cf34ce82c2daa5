/* passes/optimizer.c — the optimizer update as graph ops.
 *
 * Appending the update to the graph makes a whole training step one
 * program: the update fuses with the backward pass's tail and no parameter
 * makes a round trip to the host. g below is grad*grad_scale (the
 * all-reduced sum over 1/global batch); the rules are README's train
 * section and docs/DESIGN.md §5.4. SGD, MXNet's rule, wd on every parameter
 * as Gluon's Trainer applies it:
 *
 *     v' = sgd_momentum(w, w.grad, v, lr, grad_scale){momentum, wd}
 *        = momentum*v - lr*(grad*grad_scale + wd*w)
 *     w' = add(w, v')                (nesterov: add(w, sgd_momentum(w, grad, v', ...)))
 *     assign(w.momentum, v'); assign(w, w')
 *
 * LARS is the same with lr·trust from lars_lr(sumsq(w), sumsq(grad), ...);
 * LAMB and AdamW keep the moments w.adam_m, w.adam_v and read the scalar
 * input "step" (t, from 1) through bias_correction:
 *
 *     m' = adam_m(m, grad, grad_scale), v' = adam_v(v, ...)
 *     u  = adam_dir(w, m', v', c1, c2){eps, wd}
 *     w' = descend(w, u, lamb_lr(sumsq(w), sumsq(u), lr))   (adamw: lr)
 *
 * A parameter of an excluded class (exclude=(bn, bias, norm): a BatchNorm
 * gamma or beta, a bias_add's bias, a layernorm gamma or beta; told by what
 * reads it) gets wd 0 and no
 * adaptation: lars trust 1, lamb r 1.
 *
 * lr, grad_scale and step are scalar inputs the training loop sets every
 * step, so warmup and lr schedules need no recompilation. The states are
 * zero initialised and appended in parameter definition order (the order
 * the runtime's store lists them), and the assigns come last, after every
 * read of the old values.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/err.h"
#include "ir/names.h"
#include "passes/passes.h"

/* The graph's names: sources (updated as the pass adds them) and
 * gradients, so that a model with many parameters takes no scan per
 * parameter. */
typedef struct {
    ir_names sources, grads;
    unsigned char *cls; /* per node: its exclude class (param_class) */
} names;

static int grad_of(const names *nm, const char *param) {
    char want[IR_NAME_MAX + 8];
    snprintf(want, sizeof want, "%s.grad", param);
    return ir_names_find(&nm->grads, want);
}

/* Adds a source, refusing a name that is already taken (ir_verify would
 * reject the duplicate later with a less helpful message). */
static int add_source(ir_graph *g, names *nm, ir_op op, const char *name, ir_type t, char *err,
                      size_t errlen) {
    if (strlen(name) >= IR_NAME_MAX)
        return base_fail(err, errlen, "optimizer: name '%s' is too long", name);
    if (ir_names_find(&nm->sources, name) >= 0)
        return base_fail(err, errlen, "optimizer: the graph already has a tensor named '%s'", name);
    int id =
        op == IR_OP_INPUT ? ir_add_input(g, name, t, 0) : ir_add_state(g, name, t, IR_INIT_ZERO);
    if (id >= 0) ir_names_add(&nm->sources, id);
    return id;
}

static int emit(ir_graph *g, ir_op op, const int *in, int nin, const double *fattr, char *err,
                size_t errlen) {
    char why[200];
    int id = ir_add_node(g, op, in, nin, NULL, fattr, why, sizeof why);
    if (id < 0) base_fail(err, errlen, "optimizer: %s", why);
    return id;
}

/* The exclude class of every node as a parameter, by what reads it
 * (IR_EXCLUDE_*, 0: none): the first such reader in graph order decides. */
static unsigned char *param_classes(const ir_graph *g) {
    unsigned char *cls = calloc((size_t)(g->n ? g->n : 1), 1),
                  *seen = calloc((size_t)(g->n ? g->n : 1), 1);
    BASE_CHECK_ALLOC(cls && seen);
    for (int i = 0; i < g->n; i++) {
        const ir_node *n = &g->nodes[i];
        for (int k = 0; k < n->ninputs; k++) {
            int p = n->input[k], c = 0;
            if ((n->op == IR_OP_BN_APPLY || n->op == IR_OP_BATCHNORM) && (k == 3 || k == 4))
                c = IR_EXCLUDE_BN;
            else if (n->op == IR_OP_BATCHNORM && (k == 1 || k == 2))
                c = IR_EXCLUDE_BN;
            else if ((n->op == IR_OP_BIAS_ADD || n->op == IR_OP_BIAS_ADD_LAST) && k == 1)
                c = IR_EXCLUDE_BIAS;
            else if (n->op == IR_OP_LAYERNORM && (k == 1 || k == 2))
                c = IR_EXCLUDE_NORM;
            if (c && !seen[p]) cls[p] = (unsigned char)c, seen[p] = 1;
        }
    }
    free(seen);
    return cls;
}

/* What one parameter's update needs: its sources and the run-wide scalars. */
typedef struct {
    int lr, scale, c1, c2; /* c1, c2: the bias corrections (lamb, adamw) */
} scalars;

/* Emits parameter p's update; its assigns (state, value pairs) into a,
 * their count returned (-1 on failure). */
static int update(ir_graph *g, names *nm, const ir_train *t, const scalars *s, int p, int grad,
                  int *a, char *err, size_t errlen) {
    char pname[IR_NAME_MAX], name[IR_NAME_MAX + 16];
    memcpy(pname, g->nodes[p].name, IR_NAME_MAX); /* adding nodes moves g->nodes */
    ir_type type = g->nodes[p].type;
    int excluded = (nm->cls[p] & t->exclude) != 0;
    double wd = excluded ? 0 : t->wd;
    if (t->optimizer == IR_OPT_SGD || t->optimizer == IR_OPT_LARS) {
        snprintf(name, sizeof name, "%s.momentum", pname);
        int v = add_source(g, nm, IR_OP_STATE, name, type, err, errlen), lr = s->lr;
        if (v >= 0 && t->optimizer == IR_OPT_LARS && !excluded) {
            int wsq = emit(g, IR_OP_SUMSQ, &p, 1, NULL, err, errlen);
            int gsq = wsq < 0 ? -1 : emit(g, IR_OP_SUMSQ, &grad, 1, NULL, err, errlen);
            lr = gsq < 0 ? -1
                         : emit(g, IR_OP_LARS_LR, (int[]){wsq, gsq, s->lr, s->scale}, 4,
                                (double[]){t->eta, wd, t->eps}, err, errlen);
        }
        const double hyper[] = {t->momentum, wd};
        int v2 = v < 0 || lr < 0 ? -1
                                 : emit(g, IR_OP_SGD_MOMENTUM, (int[]){p, grad, v, lr, s->scale}, 5,
                                        hyper, err, errlen);
        int d = v2;
        if (v2 >= 0 && t->nesterov)
            d = emit(g, IR_OP_SGD_MOMENTUM, (int[]){p, grad, v2, lr, s->scale}, 5, hyper, err,
                     errlen);
        int w2 = d < 0 ? -1 : emit(g, IR_OP_ADD, (int[]){p, d}, 2, NULL, err, errlen);
        if (w2 < 0) return -1;
        a[0] = v, a[1] = v2, a[2] = p, a[3] = w2;
        return 2;
    }
    int mv[2], mv2[2];
    for (int j = 0; j < 2; j++) {
        snprintf(name, sizeof name, "%s.adam_%c", pname, j ? 'v' : 'm');
        mv[j] = add_source(g, nm, IR_OP_STATE, name, type, err, errlen);
        mv2[j] = mv[j] < 0
                     ? -1
                     : emit(g, j ? IR_OP_ADAM_V : IR_OP_ADAM_M, (int[]){mv[j], grad, s->scale}, 3,
                            (double[]){j ? t->beta2 : t->beta1}, err, errlen);
        if (mv2[j] < 0) return -1;
    }
    int u = emit(g, IR_OP_ADAM_DIR, (int[]){p, mv2[0], mv2[1], s->c1, s->c2}, 5,
                 (double[]){t->eps, wd}, err, errlen);
    int lr = s->lr;
    if (u >= 0 && t->optimizer == IR_OPT_LAMB && !excluded) {
        int wsq = emit(g, IR_OP_SUMSQ, &p, 1, NULL, err, errlen);
        int usq = wsq < 0 ? -1 : emit(g, IR_OP_SUMSQ, &u, 1, NULL, err, errlen);
        lr = usq < 0 ? -1 : emit(g, IR_OP_LAMB_LR, (int[]){wsq, usq, s->lr}, 3, NULL, err, errlen);
    }
    int w2 = u < 0 || lr < 0 ? -1 : emit(g, IR_OP_DESCEND, (int[]){p, u, lr}, 3, NULL, err, errlen);
    if (w2 < 0) return -1;
    a[0] = mv[0], a[1] = mv2[0], a[2] = mv[1], a[3] = mv2[1], a[4] = p, a[5] = w2;
    return 3;
}

/* clip_grad_norm C (PyTorch's clip_grad_norm_ on g = grad·grad_scale,
 * before the update and its weight decay): every update reads
 * clip_scale(Σ sumsq(grad), grad_scale){C} = grad_scale·min(1, C/(‖g‖ +
 * 1e-6)) as its grad_scale, so no gradient is rewritten. partition makes
 * each sumsq read the all-reduced sum: the norm of the global gradient,
 * the same bits under --gpus N as --accumulate N. */
static int clip(ir_graph *g, names *nm, int nparams, scalars *s, double max_norm, char *err,
                size_t errlen) {
    int total = -1;
    for (int p = 0; p < nparams; p++) {
        if (g->nodes[p].op != IR_OP_PARAM) continue;
        int grad = grad_of(nm, g->nodes[p].name);
        if (grad < 0) continue; /* build() names it */
        int sq = emit(g, IR_OP_SUMSQ, &grad, 1, NULL, err, errlen);
        total =
            sq < 0 || total < 0 ? sq : emit(g, IR_OP_ADD, (int[]){total, sq}, 2, NULL, err, errlen);
        if (total < 0) return -1;
    }
    if (total < 0) return 0; /* no parameters */
    s->scale =
        emit(g, IR_OP_CLIP_SCALE, (int[]){total, s->scale}, 2, (double[]){max_norm}, err, errlen);
    return s->scale < 0 ? -1 : 0;
}

static int build(ir_graph *g, names *nm, const ir_train *t, char *err, size_t errlen) {
    int nparams = g->n; /* the nodes that can be parameters: those there now */
    int *assigns = malloc(sizeof *assigns * 6 * (size_t)(nparams ? nparams : 1));
    BASE_CHECK_ALLOC(assigns);
    int nassigns = 0, rc = -1;
    scalars s = {-1, -1, -1, -1};
    s.lr = add_source(g, nm, IR_OP_INPUT, "lr", ir_shape1(1), err, errlen);
    s.scale =
        s.lr < 0 ? -1 : add_source(g, nm, IR_OP_INPUT, "grad_scale", ir_shape1(1), err, errlen);
    if (s.scale < 0) goto done;
    if (t->optimizer == IR_OPT_LAMB || t->optimizer == IR_OPT_ADAMW) {
        int step = add_source(g, nm, IR_OP_INPUT, "step", ir_shape1(1), err, errlen);
        s.c1 = step < 0
                   ? -1
                   : emit(g, IR_OP_BIAS_CORRECTION, &step, 1, (double[]){t->beta1}, err, errlen);
        s.c2 = s.c1 < 0
                   ? -1
                   : emit(g, IR_OP_BIAS_CORRECTION, &step, 1, (double[]){t->beta2}, err, errlen);
        if (s.c2 < 0) goto done;
    }
    if (t->clip_norm > 0 && clip(g, nm, nparams, &s, t->clip_norm, err, errlen)) goto done;
    for (int p = 0; p < nparams; p++) {
        if (g->nodes[p].op != IR_OP_PARAM) continue;
        int grad = grad_of(nm, g->nodes[p].name);
        if (grad < 0) {
            base_fail(err, errlen, "optimizer: parameter '%s' has no gradient (run autodiff first)",
                      g->nodes[p].name);
            goto done;
        }
        int k = update(g, nm, t, &s, p, grad, assigns + 2 * nassigns, err, errlen);
        if (k < 0) goto done;
        nassigns += k;
    }
    for (int k = 0; k < nassigns; k++)
        if (emit(g, IR_OP_ASSIGN, assigns + 2 * k, 2, NULL, err, errlen) < 0) goto done;
    rc = 0;
done:
    free(assigns);
    return rc;
}

int pass_optimizer(ir_graph **gp, const ir_train *t, char *err, size_t errlen) {
    ir_train defaults;
    if (!t) {
        ir_train_defaults(&defaults);
        t = &defaults;
    }
    ir_graph *g = ir_clone(*gp); /* a failed pass leaves the caller's graph intact */
    names nm = {ir_names_nodes(g, (size_t)g->n), ir_names_nodes(g, (size_t)g->n), param_classes(g)};
    for (int i = 0; i < g->n; i++) {
        if (ir_is_source(g->nodes[i].op)) ir_names_add(&nm.sources, i);
        if (g->nodes[i].flags & IR_FLAG_GRAD) ir_names_add(&nm.grads, i);
    }
    int rc = build(g, &nm, t, err, errlen);
    ir_names_free(&nm.sources), ir_names_free(&nm.grads), free(nm.cls);
    return ir_replace(gp, g, rc);
}
