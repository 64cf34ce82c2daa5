/* ir/shape_seq.c — the shape rules of the sequence ops (ir/ir.h):
 * embedding's gather and its gradient's scatter. Beside ir/shape.c, which
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
