/* ir/shape_seq.c — the shape rules of the sequence ops (ir/ir.h):
 * embedding's gather and its gradient's scatter, the sequence loss and
 * its gradient. Beside ir/shape.c, which
 * dispatches to them.
 */
#include <inttypes.h>

#include "base/err.h"
#include "ir/internal.h"

/* ids i32 of rank 1..3 (the output adds D); w, dy float. */
static int ids_ok(const ir_type *ids, const char *op, char *err, size_t errlen) {
    if (ids->dtype != IR_I32 || ids->ndim < 1 || ids->ndim > IR_MAX_DIMS - 1)
        return base_fail(err, errlen, "%s: ids must be an int tensor of rank 1 to %d, got %s", op,
                         IR_MAX_DIMS - 1, TYPE_STR(ids));
    return 0;
}

int ir_infer_embedding(const ir_graph *g, const ir_node *n, ir_type *out, char *err,
                       size_t errlen) {
    const char *op = ir_ops[n->op].name;
    if (n->op == IR_OP_EMBEDDING) { /* (ids, w[V, D]) -> [ids..., D] */
        const ir_type *ids = &g->nodes[n->input[0]].type, *w = &g->nodes[n->input[1]].type;
        if (ids_ok(ids, op, err, errlen)) return -1;
        if (w->ndim != 2 || w->dtype == IR_I32)
            return base_fail(err, errlen, "%s: weight must be a float [vocab, dim], got %s", op,
                             TYPE_STR(w));
        *out = *ids;
        out->dim[out->ndim++] = w->dim[1];
        out->dtype = w->dtype;
        return 0;
    }
    /* embedding_grad(dy[ids..., D], ids) vocab -> [vocab, D] */
    const ir_type *dy = &g->nodes[n->input[0]].type, *ids = &g->nodes[n->input[1]].type;
    if (ids_ok(ids, op, err, errlen)) return -1;
    int same = dy->dtype != IR_I32 && dy->ndim == ids->ndim + 1;
    for (int d = 0; same && d < ids->ndim; d++) same = dy->dim[d] == ids->dim[d];
    if (!same)
        return base_fail(err, errlen, "%s: dy %s does not match ids %s", op, TYPE_STR(dy),
                         TYPE_STR(ids));
    if (n->iattr[0] < 1)
        return base_fail(err, errlen, "%s: vocab must be positive, got %" PRId64, op, n->iattr[0]);
    *out = ir_shape2(n->iattr[0], dy->dim[dy->ndim - 1]);
    return 0;
}

/* seq_cross_entropy(logits[N, T, V], targets[N, T] i32) -> [N];
 * seq_ce_grad(logits, targets, dloss[N]) -> logits. */
int ir_infer_seq_ce(const ir_graph *g, const ir_node *n, ir_type *out, char *err, size_t errlen) {
    const char *op = ir_ops[n->op].name;
    const ir_type *x = &g->nodes[n->input[0]].type, *y = &g->nodes[n->input[1]].type;
    if (x->ndim != 3 || x->dtype == IR_I32)
        return base_fail(err, errlen, "%s: logits must be a float [batch, time, vocab], got %s", op,
                         TYPE_STR(x));
    if (y->ndim != 2 || y->dtype != IR_I32 || y->dim[0] != x->dim[0] || y->dim[1] != x->dim[1])
        return base_fail(err, errlen,
                         "%s: targets must be int [%" PRId64 ", %" PRId64
                         "] to fit logits %s, got %s",
                         op, x->dim[0], x->dim[1], TYPE_STR(x), TYPE_STR(y));
    if (n->op == IR_OP_SEQ_CE) {
        *out = ir_shape1(x->dim[0]);
        return 0;
    }
    const ir_type *d = &g->nodes[n->input[2]].type;
    if (d->ndim != 1 || d->dim[0] != x->dim[0] || d->dtype == IR_I32)
        return base_fail(err, errlen, "%s: dloss must be a float [%" PRId64 "], got %s", op,
                         x->dim[0], TYPE_STR(d));
    *out = *x;
    return 0;
}

/* positions(x[N, T, ...], w[L, D]) -> [N, T, D];
 * positions_grad(dy[N, T, D]) length -> [length, D]. */
int ir_infer_positions(const ir_graph *g, const ir_node *n, ir_type *out, char *err,
                       size_t errlen) {
    const char *op = ir_ops[n->op].name;
    const ir_type *x = &g->nodes[n->input[0]].type;
    if (n->op == IR_OP_POSITIONS_GRAD) {
        if (x->ndim != 3 || x->dtype == IR_I32)
            return base_fail(err, errlen, "%s: dy must be a float [N, T, D], got %s", op,
                             TYPE_STR(x));
        if (n->iattr[0] < x->dim[1])
            return base_fail(err, errlen, "%s: length %" PRId64 " is shorter than dy %s", op,
                             n->iattr[0], TYPE_STR(x));
        *out = ir_shape2(n->iattr[0], x->dim[2]);
        out->dtype = x->dtype;
        return 0;
    }
    const ir_type *w = &g->nodes[n->input[1]].type;
    if (x->ndim < 2)
        return base_fail(err, errlen, "%s: x must be [N, T, ...], got %s", op, TYPE_STR(x));
    if (w->ndim != 2 || w->dtype == IR_I32)
        return base_fail(err, errlen, "%s: weight must be a float [length, dim], got %s", op,
                         TYPE_STR(w));
    if (x->dim[1] > w->dim[0])
        return base_fail(err, errlen,
                         "%s: x %s has %" PRId64 " positions, the table only %" PRId64 " (length)",
                         op, TYPE_STR(x), x->dim[1], w->dim[0]);
    *out = ir_shape2(x->dim[0], x->dim[1]);
    out->dim[out->ndim++] = w->dim[1];
    out->dtype = w->dtype;
    return 0;
}
