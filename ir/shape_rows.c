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

/* dense(x[...,F], w[U,F]) -> [...,U]; dense_grad_data(dy[...,U], w[U,F])
 * -> [...,F]; dense_grad_weight(dy[...,U], x[...,F]) -> [U,F]; bias_add_last
 * (x[...,C], b[C]) -> x. "..." is one or two leading axes. */
int ir_infer_dense_rows(const ir_graph *g, const ir_node *n, ir_type *out, char *err,
                        size_t errlen) {
    const char *op = ir_ops[n->op].name;
    const ir_type *a = &g->nodes[n->input[0]].type, *b = &g->nodes[n->input[1]].type;
    const char *aname = n->op == IR_OP_DENSE || n->op == IR_OP_BIAS_ADD_LAST ? "input" : "dy";
    if (a->ndim < 2 || a->ndim > 3 || a->dtype == IR_I32) {
        if (n->op == IR_OP_DENSE)
            return base_fail(err, errlen,
                             "dense: expects a float [batch, features] or [batch, tokens, "
                             "features] input, got %s (use flatten first)",
                             TYPE_STR(a));
        return need_rows(op, aname, a, err, errlen);
    }
    int64_t last = a->dim[a->ndim - 1];
    if (n->op == IR_OP_BIAS_ADD_LAST) {
        if (need_row_vector(op, "bias", b, last, err, errlen)) return -1;
        *out = *a;
        return 0;
    }
    int wt = n->op == IR_OP_DENSE_GRAD_WEIGHT;
    if (wt ? b->ndim != a->ndim || b->dtype == IR_I32 : b->ndim != 2 || b->dtype == IR_I32)
        return base_fail(err, errlen, "%s: %s must be a float tensor of rank %d, got %s", op,
                         wt ? "input" : "weight", wt ? a->ndim : 2, TYPE_STR(b));
    int fits = n->op == IR_OP_DENSE ? b->dim[1] == last : !wt ? b->dim[0] == last : 1;
    for (int d = 0; wt && d + 1 < a->ndim; d++) fits &= a->dim[d] == b->dim[d];
    if (!fits)
        return base_fail(err, errlen, "%s: %s %s does not fit %s %s", op,
                         n->op == IR_OP_DENSE ? "weight" : "dy",
                         TYPE_STR(n->op == IR_OP_DENSE ? b : a), wt ? "input" : "weight",
                         TYPE_STR(n->op == IR_OP_DENSE ? a : b));
    if (wt) {
        *out = ir_shape2(last, b->dim[b->ndim - 1]);
        return 0;
    }
    *out = *a;
    out->dtype = IR_F32;
    out->dim[a->ndim - 1] = n->op == IR_OP_DENSE ? b->dim[0] : b->dim[1];
    return 0;
}

/* matmul(a, b) ta,tb: op(a) [..., M, K] · op(b) [..., K, N] -> [..., M, N],
 * the leading axes equal. */
int ir_infer_matmul(const ir_graph *g, const ir_node *n, ir_type *out, char *err, size_t errlen) {
    const ir_type *a = &g->nodes[n->input[0]].type, *b = &g->nodes[n->input[1]].type;
    int64_t ta = n->iattr[0], tb = n->iattr[1];
    if ((ta != 0 && ta != 1) || (tb != 0 && tb != 1))
        return base_fail(err, errlen, "matmul: ta and tb must be 0 or 1, got %" PRId64 ", %" PRId64,
                         ta, tb);
    if (a->ndim < 2 || b->ndim < 2 || a->dtype == IR_I32 || b->dtype == IR_I32)
        return base_fail(err, errlen,
                         "matmul: operands must be float tensors of rank 2 or more, "
                         "got %s and %s",
                         TYPE_STR(a), TYPE_STR(b));
    int r = a->ndim, same = b->ndim == r;
    for (int d = 0; same && d < r - 2; d++) same = a->dim[d] == b->dim[d];
    if (!same)
        return base_fail(err, errlen,
                         "matmul: the leading axes of %s and %s differ "
                         "(they must be equal: no broadcasting)",
                         TYPE_STR(a), TYPE_STR(b));
    int64_t K = a->dim[r - 1 - ta], Kb = b->dim[r - 2 + (int)tb];
    if (K != Kb)
        return base_fail(err, errlen,
                         "matmul: %s does not fit %s (inner dimensions %" PRId64 " and %" PRId64
                         ")",
                         TYPE_STR(b), TYPE_STR(a), Kb, K);
    *out = *a;
    out->dtype = IR_F32;
    out->dim[r - 2] = a->dim[r - 2 + (int)ta];
    out->dim[r - 1] = b->dim[r - 1 - (int)tb];
    return 0;
}
