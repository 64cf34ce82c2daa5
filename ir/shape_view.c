/* ir/shape_view.c — the shape rules of the ops that move elements without
 * arithmetic (ir/ir.h): reshape, permute, slice and its gradient, concat
 * on any axis, and the causal mask. Beside ir/shape.c, which dispatches
 * to them.
 */
#include <inttypes.h>

#include "base/err.h"
#include "ir/internal.h"

/* A float tensor of rank lo..4. */
static int float_rank(const ir_type *x, int lo, const char *op, char *err, size_t errlen) {
    if (x->dtype == IR_I32 || x->ndim < lo || x->ndim > IR_MAX_DIMS)
        return base_fail(err, errlen, "%s: input must be a float tensor of rank %d to %d, got %s",
                         op, lo, IR_MAX_DIMS, TYPE_STR(x));
    return 0;
}

/* reshape d1,d2,d3: [N, d...] with the element count of x. */
static int infer_reshape(const ir_type *x, const ir_node *n, ir_type *out, char *err,
                         size_t errlen) {
    if (float_rank(x, 2, "reshape", err, errlen)) return -1;
    *out = *x;
    out->ndim = 1;
    for (int k = 0; k < 3 && n->iattr[k]; k++) {
        if (n->iattr[k] < 1)
            return base_fail(err, errlen, "reshape: dimension %d must be positive, got %" PRId64,
                             k + 1, n->iattr[k]);
        out->dim[out->ndim++] = n->iattr[k];
    }
    if (out->ndim < 2 || ir_numel(out) != ir_numel(x))
        return base_fail(err, errlen, "reshape: cannot view %s as %s (element counts differ)",
                         TYPE_STR(x), TYPE_STR(out));
    return 0;
}

/* permute p0..p3: a permutation of x's axes keeping the batch first. */
static int infer_permute(const ir_type *x, const ir_node *n, ir_type *out, char *err,
                         size_t errlen) {
    if (float_rank(x, 2, "permute", err, errlen)) return -1;
    int seen = 0;
    *out = *x;
    for (int k = 0; k < IR_MAX_DIMS; k++) {
        int64_t p = n->iattr[k];
        if (k >= x->ndim) {
            if (p) return base_fail(err, errlen, "permute: slot p%d past rank %d", k, x->ndim);
            continue;
        }
        if (p < 0 || p >= x->ndim || (seen >> p & 1))
            return base_fail(err, errlen,
                             "permute: (%" PRId64 ", %" PRId64 ", %" PRId64 ", %" PRId64
                             ") is not a permutation of the %d axes of %s",
                             n->iattr[0], n->iattr[1], n->iattr[2], n->iattr[3], x->ndim,
                             TYPE_STR(x));
        seen |= 1 << p;
        out->dim[k] = x->dim[p];
    }
    if (n->iattr[0] != 0)
        return base_fail(err, errlen, "permute: the batch must stay axis 0, got %" PRId64 " there",
                         n->iattr[0]);
    return 0;
}

/* slice axis,start,len and slice_grad axis,start,size. */
static int infer_slice(const ir_type *x, const ir_node *n, ir_type *out, char *err, size_t errlen) {
    const char *op = ir_ops[n->op].name;
    if (float_rank(x, 2, op, err, errlen)) return -1;
    int64_t axis = n->iattr[0], start = n->iattr[1], len = n->iattr[2];
    if (axis < 1 || axis >= x->ndim)
        return base_fail(err, errlen, "%s: axis %" PRId64 " is not a non-batch axis of %s", op,
                         axis, TYPE_STR(x));
    *out = *x;
    if (n->op == IR_OP_SLICE_GRAD) { /* len is the whole axis; dy's is the slice's */
        int64_t size = len;
        len = x->dim[axis];
        out->dim[axis] = size;
        if (start < 0 || len < 1 || start > size - len)
            return base_fail(err, errlen, "%s: %s does not fit at %" PRId64 " of %" PRId64, op,
                             TYPE_STR(x), start, size);
        return 0;
    }
    if (start < 0 || len < 1 || start > x->dim[axis] - len)
        return base_fail(err, errlen,
                         "%s: [%" PRId64 ", %" PRId64 ") is not a non-empty range of axis %" PRId64
                         " of %s",
                         op, start, start + len, axis, TYPE_STR(x));
    out->dim[axis] = len;
    return 0;
}

/* causal_mask: [..., Tq, Tk] with Tq <= Tk, so every query sees a key. */
static int infer_mask(const ir_type *x, ir_type *out, char *err, size_t errlen) {
    if (float_rank(x, 2, "causal_mask", err, errlen)) return -1;
    int64_t tq = x->dim[x->ndim - 2], tk = x->dim[x->ndim - 1];
    if (x->ndim < 3 || tq > tk)
        return base_fail(err, errlen,
                         "causal_mask: input must be [..., Tq, Tk] with Tq <= Tk, got %s",
                         TYPE_STR(x));
    *out = *x;
    return 0;
}

/* pad_mask: ids [N, Tk] i32 naming x's keys, its last axis. */
static int infer_pad_mask(const ir_type *x, const ir_type *ids, ir_type *out, char *err,
                          size_t errlen) {
    if (float_rank(x, 2, "pad_mask", err, errlen)) return -1;
    if (ids->dtype != IR_I32 || ids->ndim != 2 || ids->dim[0] != x->dim[0] ||
        ids->dim[1] != x->dim[x->ndim - 1])
        return base_fail(
            err, errlen,
            "pad_mask: ids must be int [N, Tk] for scores %s (Tk its last axis), got %s",
            TYPE_STR(x), TYPE_STR(ids));
    *out = *x;
    return 0;
}

int ir_infer_view(const ir_graph *g, const ir_node *n, ir_type *out, char *err, size_t errlen) {
    const ir_type *x = &g->nodes[n->input[0]].type;
    switch (n->op) {
    case IR_OP_RESHAPE: return infer_reshape(x, n, out, err, errlen);
    case IR_OP_PERMUTE: return infer_permute(x, n, out, err, errlen);
    case IR_OP_SLICE:
    case IR_OP_SLICE_GRAD: return infer_slice(x, n, out, err, errlen);
    case IR_OP_CAUSAL_MASK: return infer_mask(x, out, err, errlen);
    case IR_OP_PAD_MASK: return infer_pad_mask(x, &g->nodes[n->input[1]].type, out, err, errlen);
    default: break;
    }
    return base_fail(err, errlen, "%s: not a view op", ir_ops[n->op].name);
}
