/* passes/optimizer.c — the SGD-with-momentum update as graph ops.
 *
 * Appending the update to the graph makes a whole training step one
 * program: the update fuses with the backward pass's tail and no parameter
 * makes a round trip to the host. MXNet's rule, wd on every parameter as
 * Gluon's Trainer applies it (docs/DESIGN.md §5.4):
 *
 *     v' = sgd_momentum(w, w.grad, v, lr, grad_scale){momentum, wd}
 *        = momentum*v - lr*(grad*grad_scale + wd*w)
 *     w' = add(w, v')
 *     assign(w.momentum, v'); assign(w, w')
 *
 * lr and grad_scale (1/global batch) are scalar inputs the training loop
 * sets every step, so warmup and lr schedules need no recompilation. The
 * momentum of parameter P is a state "P.momentum", zero initialised; the
 * states and updates are appended in parameter definition order (the order
 * the runtime's store lists them), and the assigns come last, after every
 * read of the old values.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ir/err.h"
#include "passes/passes.h"

static int source_named(const ir_graph *g, const char *name) {
    for (int i = 0; i < g->n; i++) {
        ir_op op = g->nodes[i].op;
        if (ir_is_source(op) && strcmp(g->nodes[i].name, name) == 0) return i;
    }
    return -1;
}

static int grad_of(const ir_graph *g, const char *param) {
    char want[IR_NAME_MAX + 8];
    snprintf(want, sizeof want, "%s.grad", param);
    for (int i = 0; i < g->n; i++)
        if ((g->nodes[i].flags & IR_FLAG_GRAD) && strcmp(g->nodes[i].name, want) == 0) return i;
    return -1;
}

/* Adds a source, refusing a name that is already taken (ir_verify would
 * reject the duplicate later with a less helpful message). */
static int add_source(ir_graph *g, ir_op op, const char *name, ir_type t, char *err,
                      size_t errlen) {
    if (strlen(name) >= IR_NAME_MAX)
        return ir_fail(err, errlen, "optimizer: name '%s' is too long", name);
    if (source_named(g, name) >= 0)
        return ir_fail(err, errlen, "optimizer: the graph already has a tensor named '%s'", name);
    return op == IR_OP_INPUT ? ir_add_input(g, name, t, 0) : ir_add_state(g, name, t, IR_INIT_ZERO);
}

static int emit(ir_graph *g, ir_op op, const int *in, int nin, const double *fattr, char *err,
                size_t errlen) {
    char why[200];
    int id = ir_add_node(g, op, in, nin, NULL, fattr, why, sizeof why);
    if (id < 0) ir_fail(err, errlen, "optimizer: %s", why);
    return id;
}

static int build(ir_graph *g, const ir_train *t, char *err, size_t errlen) {
    int nparams = g->n; /* the nodes that can be parameters: those there now */
    int *assigns = malloc(sizeof *assigns * 4 * (size_t)(nparams ? nparams : 1));
    IR_CHECK_ALLOC(assigns);
    int nassigns = 0, rc = -1;
    int lr = add_source(g, IR_OP_INPUT, "lr", ir_shape1(1), err, errlen);
    int scale = lr < 0 ? -1 : add_source(g, IR_OP_INPUT, "grad_scale", ir_shape1(1), err, errlen);
    if (scale < 0) goto done;
    for (int p = 0; p < nparams; p++) {
        if (g->nodes[p].op != IR_OP_PARAM) continue;
        char pname[IR_NAME_MAX], name[IR_NAME_MAX + 16];
        memcpy(pname, g->nodes[p].name, IR_NAME_MAX); /* adding nodes moves g->nodes */
        int grad = grad_of(g, pname);
        if (grad < 0) {
            ir_fail(err, errlen, "optimizer: parameter '%s' has no gradient (run autodiff first)",
                    pname);
            goto done;
        }
        snprintf(name, sizeof name, "%s.momentum", pname);
        int v = add_source(g, IR_OP_STATE, name, g->nodes[p].type, err, errlen);
        if (v < 0) goto done;
        int v2 = emit(g, IR_OP_SGD_MOMENTUM, (int[]){p, grad, v, lr, scale}, 5,
                      (double[]){t->momentum, t->wd}, err, errlen);
        int w2 = v2 < 0 ? -1 : emit(g, IR_OP_ADD, (int[]){p, v2}, 2, NULL, err, errlen);
        if (w2 < 0) goto done;
        int *a = assigns + 4 * nassigns++;
        a[0] = v, a[1] = v2, a[2] = p, a[3] = w2;
    }
    for (int k = 0; k < nassigns; k++)
        for (int j = 0; j < 2; j++)
            if (emit(g, IR_OP_ASSIGN, assigns + 4 * k + 2 * j, 2, NULL, err, errlen) < 0) goto done;
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
    return ir_replace(gp, g, build(g, t, err, errlen));
}
