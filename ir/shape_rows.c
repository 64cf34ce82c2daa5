/* ir/shape_rows.c — the shape rules of the row ops (ir/ir.h): layernorm
 * and its primitives, softmax and its gradient, over the last axis of a
 * rank-2 or rank-3 tensor. */
#include <inttypes.h>
#include <math.h>

#include "base/err.h"
#include "ir/internal.h"

/* x of rank 2 or 3, float: its rows are the last axis. */
static int need_rows(const char *op, const char *what, const ir_type *x, char *err, size_t errlen) {
    if (x->ndim < 2 || x->ndim > 3 || x->dtype == IR_I32)
        return base_fail(err, errlen, "%s: %s must be a float tensor of rank 2 or 3, got %s", op,
                         what, TYPE_STR(x));
    return 0;
}

/* v is [len] and float. */
static int need_row_vector(const char *op, const char *what, const ir_type *v, int64_t len,
                           char *err, size_t errlen) {
    if (v->ndim != 1 || v->dim[0] != len || v->dtype == IR_I32)
        return base_fail(err, errlen, "%s: %s must be [%" PRId64 "], got %s", op, what, len,
                         TYPE_STR(v));
    return 0;
}

static int64_t rows_of(const ir_type *x) { return ir_numel(x) / x->dim[x->ndim - 1]; }

int ir_infer_rows(const ir_graph *g, const ir_node *n, ir_type *out, char *err, size_t errlen) {
    const char *op = ir_ops[n->op].name;
    int ln_grad = n->op == IR_OP_LAYERNORM_GRAD_DATA || n->op == IR_OP_LAYERNORM_GRAD_GAMMA;
    int grad = ln_grad || n->op == IR_OP_SOFTMAX_GRAD;
    const ir_type *x = &g->nodes[n->input[grad]].type; /* the gradients' x (y) follows dy */
    if (need_rows(op, n->op == IR_OP_SUM_LEADING ? "dy" : "x", x, err, errlen)) return -1;
    int64_t C = x->dim[x->ndim - 1], R = rows_of(x);
    if ((n->op == IR_OP_LAYERNORM || n->op == IR_OP_LAYERNORM_STATS) &&
        !(n->fattr[0] > 0 && isfinite(n->fattr[0])))
        return base_fail(err, errlen, "%s: eps must be positive and finite, got %g", op,
                         n->fattr[0]);
    const ir_type *dy = &g->nodes[n->input[0]].type;
    if (grad && !ir_type_same_shape(dy, x))
        return base_fail(err, errlen, "%s: dy %s does not fit %s %s", op, TYPE_STR(dy),
                         ln_grad ? "x" : "y", TYPE_STR(x));
    if (ln_grad) {
        const ir_type *st = &g->nodes[n->input[2]].type;
        if (st->ndim != 2 || st->dim[0] != R || st->dim[1] != 2 || st->dtype == IR_I32)
            return base_fail(err, errlen, "%s: stats must be [%" PRId64 ",2], got %s", op, R,
                             TYPE_STR(st));
    }
    switch (n->op) {
    case IR_OP_LAYERNORM:
        if (need_row_vector(op, "gamma", &g->nodes[n->input[1]].type, C, err, errlen) ||
            need_row_vector(op, "beta", &g->nodes[n->input[2]].type, C, err, errlen))
            return -1;
        *out = *x;
        return 0;
    case IR_OP_LAYERNORM_STATS: *out = ir_shape2(R, 2); return 0;
    case IR_OP_SOFTMAX:
    case IR_OP_SOFTMAX_GRAD: *out = *x; return 0;
    case IR_OP_LAYERNORM_GRAD_DATA:
        if (need_row_vector(op, "gamma", &g->nodes[n->input[3]].type, C, err, errlen)) return -1;
        *out = *x;
        return 0;
    case IR_OP_LAYERNORM_GRAD_GAMMA:
    case IR_OP_SUM_LEADING: *out = ir_shape1(C); return 0;
    default: return base_fail(err, errlen, "%s: not a row op", op);
    }
}
