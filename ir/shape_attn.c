/* ir/shape_attn.c — the shape rules of fused attention (ir/ir.h):
 * attention, attention_lse and attention_grad. Beside ir/shape.c, which
 * dispatches to them.
 */
#include <inttypes.h>
#include <math.h>

#include "base/err.h"
#include "ir/internal.h"

static int float3(const ir_type *t) { return t->ndim == 3 && t->dtype != IR_I32; }

/* q [N,Tq,C], k and v [N,Tk,C], heads dividing C, causal 0/1 with Tq <= Tk,
 * a finite scale; with dropout attributes (attention, attention_grad) p in
 * [0, 1), a salt >= 0 and the key [4] present exactly when p > 0 (input
 * `key_at`). */
static int check_qkv(const ir_graph *g, const ir_node *n, int at, int key_at, char *err,
                     size_t errlen) {
    const char *op = ir_ops[n->op].name;
    const ir_type *q = &g->nodes[n->input[at]].type, *k = &g->nodes[n->input[at + 1]].type,
                  *v = &g->nodes[n->input[at + 2]].type;
    if (!float3(q) || !float3(k) || !float3(v))
        return base_fail(err, errlen, "%s: q, k and v must be float [N, T, C], got %s, %s, %s", op,
                         TYPE_STR(q), TYPE_STR(k), TYPE_STR(v));
    if (!ir_type_same_shape(k, v) || k->dim[0] != q->dim[0] || k->dim[2] != q->dim[2])
        return base_fail(err, errlen,
                         "%s: k and v must be [%" PRId64 ", Tk, %" PRId64
                         "] to fit q %s, got %s, %s",
                         op, q->dim[0], q->dim[2], TYPE_STR(q), TYPE_STR(k), TYPE_STR(v));
    int64_t H = n->iattr[0], causal = n->iattr[1];
    if (H < 1 || q->dim[2] % H)
        return base_fail(err, errlen,
                         "%s: %" PRId64 " channels do not split into %" PRId64 " heads", op,
                         q->dim[2], H);
    if (causal != 0 && causal != 1)
        return base_fail(err, errlen, "%s: causal must be 0 or 1, got %" PRId64, op, causal);
    if (causal && q->dim[1] > k->dim[1])
        return base_fail(err, errlen,
                         "%s: causal attention needs no more queries than keys, got %" PRId64
                         " queries and %" PRId64 " keys",
                         op, q->dim[1], k->dim[1]);
    if (!isfinite(n->fattr[0]))
        return base_fail(err, errlen, "%s: scale must be finite, got %g", op, n->fattr[0]);
    if (key_at < 0) return 0;
    double p = n->fattr[1];
    if (!(p >= 0 && p < 1))
        return base_fail(err, errlen, "%s: dropout p must be in [0, 1), got %g", op, p);
    if (n->iattr[2] < 0)
        return base_fail(err, errlen, "%s: salt %" PRId64 " is negative", op, n->iattr[2]);
    if ((p > 0) != (n->ninputs > key_at))
        return base_fail(err, errlen, "%s: the dropout key is an input exactly when p > 0 (p %g)",
                         op, p);
    if (p > 0) {
        const ir_type *key = &g->nodes[n->input[key_at]].type;
        if (key->ndim != 1 || key->dim[0] != 4)
            return base_fail(err, errlen, "%s: the dropout key must be [4], got %s", op,
                             TYPE_STR(key));
    }
    return 0;
}

int ir_infer_attention(const ir_graph *g, const ir_node *n, ir_type *out, char *err,
                       size_t errlen) {
    const char *op = ir_ops[n->op].name;
    if (n->op == IR_OP_ATTENTION) {
        if (check_qkv(g, n, 0, 3, err, errlen)) return -1;
        *out = g->nodes[n->input[0]].type;
        return 0;
    }
    if (n->op == IR_OP_ATTENTION_LSE) {
        if (check_qkv(g, n, 0, -1, err, errlen)) return -1;
        const ir_type *q = &g->nodes[n->input[0]].type;
        *out = (ir_type){3, {q->dim[0], n->iattr[0], q->dim[1]}, q->dtype};
        return 0;
    }
    /* attention_grad(dy, q, k, v, out, lse [, key]) */
    if (check_qkv(g, n, 1, 6, err, errlen)) return -1;
    const ir_type *q = &g->nodes[n->input[1]].type, *dy = &g->nodes[n->input[0]].type,
                  *o = &g->nodes[n->input[4]].type, *lse = &g->nodes[n->input[5]].type;
    if (!float3(dy) || !float3(o) || !ir_type_same_shape(dy, q) || !ir_type_same_shape(o, q))
        return base_fail(err, errlen, "%s: dy and out must be float %s like q, got %s, %s", op,
                         TYPE_STR(q), TYPE_STR(dy), TYPE_STR(o));
    if (!float3(lse) || lse->dim[0] != q->dim[0] || lse->dim[1] != n->iattr[0] ||
        lse->dim[2] != q->dim[1])
        return base_fail(err, errlen,
                         "%s: lse must be float [%" PRId64 ", %" PRId64 ", %" PRId64 "], got %s",
                         op, q->dim[0], n->iattr[0], q->dim[1], TYPE_STR(lse));
    int64_t which = n->iattr[3];
    if (which < 0 || which > 2)
        return base_fail(err, errlen, "%s: which must be 0 (dq), 1 (dk) or 2 (dv), got %" PRId64,
                         op, which);
    *out = g->nodes[n->input[1 + which]].type;
    return 0;
}
