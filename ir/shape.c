/* ir/shape.c — tensor types and the shape rules: ir_infer_type, one case
 * per op, which ir_add_node, ir_verify and the readers apply. */
#include "ir/ir.h"

#include <inttypes.h>
#include <math.h>

#include "base/err.h"
#include "ir/internal.h"
#include "ir/validate.h"

/* ---- types ------------------------------------------------------------- */

ir_type ir_shape1(int64_t a) { return (ir_type){1, {a}, IR_F32}; }
ir_type ir_shape2(int64_t a, int64_t b) { return (ir_type){2, {a, b}, IR_F32}; }
ir_type ir_shape4(int64_t a, int64_t b, int64_t c, int64_t d) {
    return (ir_type){4, {a, b, c, d}, IR_F32};
}

int64_t ir_numel(const ir_type *t) {
    int64_t n = 1;
    for (int i = 0; i < t->ndim; i++) {
        int64_t d = t->dim[i];
        if (d <= 0) return 0;
        if (n > INT64_MAX / d) return INT64_MAX;
        n *= d;
    }
    return n;
}

size_t ir_dtype_size(ir_dtype d) { return d == IR_BF16 ? 2 : 4; }

int ir_type_equal(const ir_type *a, const ir_type *b) {
    if (a->ndim != b->ndim || a->dtype != b->dtype) return 0;
    for (int i = 0; i < a->ndim; i++)
        if (a->dim[i] != b->dim[i]) return 0;
    return 1;
}

int ir_type_same_shape(const ir_type *a, const ir_type *b) {
    if (a->ndim != b->ndim || (a->dtype == IR_I32) != (b->dtype == IR_I32)) return 0;
    for (int i = 0; i < a->ndim; i++)
        if (a->dim[i] != b->dim[i]) return 0;
    return 1;
}

static const char *dtype_name(ir_dtype d) {
    return d == IR_F32 ? "f32" : d == IR_BF16 ? "bf16" : d == IR_I32 ? "i32" : "?";
}

const char *ir_type_str(const ir_type *t, char *buf, size_t n) {
    size_t used = 0;
    used += (size_t)snprintf(buf, n, "[");
    for (int i = 0; i < t->ndim && used < n; i++)
        used += (size_t)snprintf(buf + used, n - used, "%s%" PRId64, i ? "," : "", t->dim[i]);
    if (used < n) used += (size_t)snprintf(buf + used, n - used, "]");
    if (t->dtype != IR_F32 && used < n) snprintf(buf + used, n - used, ":%s", dtype_name(t->dtype));
    return buf;
}

/* ---- shape rules ------------------------------------------------------- */

static const ir_type *in_type(const ir_graph *g, const ir_node *n, int i) {
    return &g->nodes[n->input[i]].type;
}

/* Output extent of a k/s/p window over `size`, or -1 when it doesn't fit. */
static int64_t window_out(int64_t size, int64_t k, int64_t s, int64_t p) {
    if (size + 2 * p < k) return -1;
    return (size + 2 * p - k) / s + 1;
}

static int check_window(const char *op, const ir_node *n, char *err, size_t errlen) {
    int64_t k = n->iattr[0], s = n->iattr[1], p = n->iattr[2];
    if (k <= 0)
        return base_fail(err, errlen, "%s: kernel size must be positive, got %" PRId64, op, k);
    if (s <= 0) return base_fail(err, errlen, "%s: stride must be positive, got %" PRId64, op, s);
    if (p < 0) return base_fail(err, errlen, "%s: padding must be >= 0, got %" PRId64, op, p);
    return 0;
}

static int need_rank(const char *op, const char *what, const ir_type *t, int rank, char *err,
                     size_t errlen) {
    if (t->ndim == rank && t->dtype != IR_I32) return 0;
    if (t->dtype == IR_I32)
        return base_fail(err, errlen, "%s: %s must be a float tensor, got %s", op, what,
                         TYPE_STR(t));
    return base_fail(err, errlen, "%s: %s must have rank %d, got %s", op, what, rank, TYPE_STR(t));
}

static int need_vector(const char *op, const char *what, const ir_type *t, int64_t len, char *err,
                       size_t errlen) {
    if (t->ndim == 1 && t->dim[0] == len && t->dtype != IR_I32) return 0;
    return base_fail(err, errlen, "%s: %s must be [%" PRId64 "], got %s", op, what, len,
                     TYPE_STR(t));
}

static int infer_window(const char *op, const ir_type *x, const ir_node *n, ir_type *out, char *err,
                        size_t errlen) {
    if (need_rank(op, "input", x, 4, err, errlen) || check_window(op, n, err, errlen)) return -1;
    int64_t k = n->iattr[0], s = n->iattr[1], p = n->iattr[2];
    if (2 * p > k)
        return base_fail(err, errlen,
                         "%s: padding %" PRId64 " is more than half the kernel %" PRId64, op, p, k);
    int64_t ho = window_out(x->dim[2], k, s, p), wo = window_out(x->dim[3], k, s, p);
    if (ho < 1 || wo < 1)
        return base_fail(err, errlen, "%s: kernel %" PRId64 " is larger than the padded input %s",
                         op, k, TYPE_STR(x));
    *out = ir_shape4(x->dim[0], x->dim[1], ho, wo);
    return 0;
}

/* The op has no rule: a node ir_verify or a pass made up. */
static int no_rule(const ir_node *n, char *err, size_t errlen) {
    return base_fail(err, errlen, "no shape rule for op %d", (int)n->op);
}

/* The groups attribute (conv's slot 3, conv_grad_data's 5, conv_grad_weight's
 * 3): at least 1, dividing the input channels C and the output channels K. */
int64_t ir_conv_groups(const ir_node *n) { return n->iattr[n->op == IR_OP_CONV_GRAD_DATA ? 5 : 3]; }

static int check_groups(const char *op, const ir_node *n, int64_t C, int64_t K, char *err,
                        size_t errlen) {
    int64_t gr = ir_conv_groups(n);
    if (gr < 1) return base_fail(err, errlen, "%s: groups must be positive, got %" PRId64, op, gr);
    if (C % gr || K % gr)
        return base_fail(err, errlen,
                         "%s: %" PRId64 " groups do not divide %" PRId64 " input and %" PRId64
                         " output channels",
                         op, gr, C, K);
    return 0;
}

/* Convolution and its two gradients. */
static int infer_conv(const ir_graph *g, const ir_node *n, ir_type *out, char *err, size_t errlen) {
    const char *op = ir_ops[n->op].name;
    switch (n->op) {
    case IR_OP_CONV: {
        const ir_type *x = in_type(g, n, 0), *w = in_type(g, n, 1);
        if (need_rank(op, "input", x, 4, err, errlen) ||
            need_rank(op, "weight", w, 4, err, errlen) || check_window(op, n, err, errlen) ||
            check_groups(op, n, x->dim[1], w->dim[0], err, errlen))
            return -1;
        int64_t k = n->iattr[0], s = n->iattr[1], p = n->iattr[2];
        if (w->dim[1] * ir_conv_groups(n) != x->dim[1] || w->dim[2] != k || w->dim[3] != k)
            return base_fail(err, errlen,
                             "conv: weight %s does not fit input %s with kernel %" PRId64,
                             TYPE_STR(w), TYPE_STR(x), k);
        int64_t ho = window_out(x->dim[2], k, s, p), wo = window_out(x->dim[3], k, s, p);
        if (ho < 1 || wo < 1)
            return base_fail(err, errlen,
                             "conv: kernel %" PRId64 " is larger than the padded input %s", k,
                             TYPE_STR(x));
        *out = ir_shape4(x->dim[0], w->dim[0], ho, wo);
        return 0;
    }
    case IR_OP_CONV_GRAD_DATA: {
        const ir_type *dy = in_type(g, n, 0), *w = in_type(g, n, 1);
        if (need_rank(op, "dy", dy, 4, err, errlen) || need_rank(op, "weight", w, 4, err, errlen) ||
            check_window(op, n, err, errlen) ||
            check_groups(op, n, w->dim[1] * ir_conv_groups(n), w->dim[0], err, errlen))
            return -1;
        int64_t k = n->iattr[0], s = n->iattr[1], p = n->iattr[2], h = n->iattr[3],
                wd = n->iattr[4];
        if (w->dim[0] != dy->dim[1] || w->dim[2] != k || w->dim[3] != k || h <= 0 || wd <= 0 ||
            window_out(h, k, s, p) != dy->dim[2] || window_out(wd, k, s, p) != dy->dim[3])
            return base_fail(err, errlen,
                             "%s: dy %s, weight %s and input %" PRId64 "x%" PRId64 " disagree", op,
                             TYPE_STR(dy), TYPE_STR(w), h, wd);
        *out = ir_shape4(dy->dim[0], w->dim[1] * ir_conv_groups(n), h, wd);
        return 0;
    }
    case IR_OP_CONV_GRAD_WEIGHT: {
        const ir_type *dy = in_type(g, n, 0), *x = in_type(g, n, 1);
        if (need_rank(op, "dy", dy, 4, err, errlen) || need_rank(op, "input", x, 4, err, errlen) ||
            check_window(op, n, err, errlen) ||
            check_groups(op, n, x->dim[1], dy->dim[1], err, errlen))
            return -1;
        int64_t k = n->iattr[0], s = n->iattr[1], p = n->iattr[2];
        if (dy->dim[0] != x->dim[0] || window_out(x->dim[2], k, s, p) != dy->dim[2] ||
            window_out(x->dim[3], k, s, p) != dy->dim[3])
            return base_fail(err, errlen, "%s: dy %s does not match input %s", op, TYPE_STR(dy),
                             TYPE_STR(x));
        *out = ir_shape4(dy->dim[1], x->dim[1] / ir_conv_groups(n), k, k);
        return 0;
    }
    default: return no_rule(n, err, errlen);
    }
}

/* Pooling (max, average, global average) and the gradients. */
static int infer_pool(const ir_graph *g, const ir_node *n, ir_type *out, char *err, size_t errlen) {
    const char *op = ir_ops[n->op].name;
    switch (n->op) {
    case IR_OP_MAXPOOL:
    case IR_OP_AVGPOOL: return infer_window(op, in_type(g, n, 0), n, out, err, errlen);
    case IR_OP_GLOBAL_AVGPOOL: {
        const ir_type *x = in_type(g, n, 0);
        if (need_rank(op, "input", x, 4, err, errlen)) return -1;
        *out = ir_shape2(x->dim[0], x->dim[1]);
        return 0;
    }
    case IR_OP_MAXPOOL_GRAD: {
        const ir_type *dy = in_type(g, n, 0), *x = in_type(g, n, 1);
        ir_type fwd;
        if (infer_window(op, x, n, &fwd, err, errlen)) return -1;
        if (!ir_type_same_shape(&fwd, dy))
            return base_fail(err, errlen, "%s: dy %s does not match pooled %s", op, TYPE_STR(dy),
                             TYPE_STR(&fwd));
        *out = *x;
        return 0;
    }
    case IR_OP_AVGPOOL_GRAD: {
        const ir_type *dy = in_type(g, n, 0);
        int64_t h = n->iattr[3], w = n->iattr[4];
        if (need_rank(op, "dy", dy, 4, err, errlen)) return -1;
        if (h <= 0 || w <= 0)
            return base_fail(err, errlen, "%s: bad input size %" PRId64 "x%" PRId64, op, h, w);
        ir_type x = ir_shape4(dy->dim[0], dy->dim[1], h, w), fwd;
        if (infer_window(op, &x, n, &fwd, err, errlen)) return -1;
        if (!ir_type_same_shape(&fwd, dy))
            return base_fail(err, errlen, "%s: dy %s does not match pooled %s", op, TYPE_STR(dy),
                             TYPE_STR(&fwd));
        *out = x;
        return 0;
    }
    case IR_OP_GLOBAL_AVGPOOL_GRAD: {
        const ir_type *dy = in_type(g, n, 0);
        if (need_rank(op, "dy", dy, 2, err, errlen)) return -1;
        if (n->iattr[0] <= 0 || n->iattr[1] <= 0)
            return base_fail(err, errlen, "%s: bad input size %" PRId64 "x%" PRId64, op,
                             n->iattr[0], n->iattr[1]);
        *out = ir_shape4(dy->dim[0], dy->dim[1], n->iattr[0], n->iattr[1]);
        return 0;
    }
    default: return no_rule(n, err, errlen);
    }
}

/* Per-channel ops: bias, BatchNorm and the statistics and gradients it lowers to. */
static int infer_channel(const ir_graph *g, const ir_node *n, ir_type *out, char *err,
                         size_t errlen) {
    const char *op = ir_ops[n->op].name;
    switch (n->op) {
    case IR_OP_BIAS_ADD: {
        const ir_type *x = in_type(g, n, 0), *b = in_type(g, n, 1);
        if (x->ndim < 2 || x->dtype == IR_I32)
            return base_fail(err, errlen, "bias_add: input must be [batch, channels, ...], got %s",
                             TYPE_STR(x));
        if (need_vector(op, "bias", b, x->dim[1], err, errlen)) return -1;
        *out = *x;
        return 0;
    }
    case IR_OP_BATCHNORM: {
        const ir_type *x = in_type(g, n, 0);
        if ((x->ndim != 4 && x->ndim != 2) || x->dtype == IR_I32)
            return base_fail(err, errlen, "batchnorm: input must be [N,C,H,W] or [N,C], got %s",
                             TYPE_STR(x));
        static const char *what[] = {"", "gamma", "beta", "running_mean", "running_var"};
        for (int i = 1; i < 5; i++)
            if (need_vector(op, what[i], in_type(g, n, i), x->dim[1], err, errlen)) return -1;
        if (!(n->fattr[0] > 0))
            return base_fail(err, errlen, "batchnorm: eps must be positive, got %g", n->fattr[0]);
        if (!(n->fattr[1] >= 0 && n->fattr[1] <= 1))
            return base_fail(err, errlen, "batchnorm: momentum must be in [0, 1], got %g",
                             n->fattr[1]);
        *out = *x;
        return 0;
    }
    case IR_OP_BN_MEAN:
    case IR_OP_BIAS_GRAD: {
        const ir_type *x = in_type(g, n, 0);
        if ((x->ndim != 4 && x->ndim != 2) || x->dtype == IR_I32)
            return base_fail(err, errlen, "%s: input must be [N,C,H,W] or [N,C], got %s", op,
                             TYPE_STR(x));
        *out = ir_shape1(x->dim[1]);
        return 0;
    }
    case IR_OP_BN_VAR:
    case IR_OP_BN_GRAD_GAMMA:
    case IR_OP_BN_APPLY:
    case IR_OP_BN_GRAD_DATA: {
        /* Input 0 (dy for the grads) and, for the grads, input 1 (x) are
         * activations; the rest are per-channel vectors. */
        const ir_type *x = in_type(g, n, 0);
        if ((x->ndim != 4 && x->ndim != 2) || x->dtype == IR_I32)
            return base_fail(err, errlen, "%s: input must be [N,C,H,W] or [N,C], got %s", op,
                             TYPE_STR(x));
        int acts = n->op == IR_OP_BN_GRAD_GAMMA || n->op == IR_OP_BN_GRAD_DATA ? 2 : 1;
        if (acts == 2 && !ir_type_same_shape(x, in_type(g, n, 1)))
            return base_fail(err, errlen, "%s: dy %s and x %s differ", op, TYPE_STR(x),
                             TYPE_STR(in_type(g, n, 1)));
        for (int i = acts; i < n->ninputs; i++)
            if (need_vector(op, "statistics", in_type(g, n, i), x->dim[1], err, errlen)) return -1;
        if (ir_op_num_fattrs(n->op) && !(n->fattr[0] > 0))
            return base_fail(err, errlen, "%s: eps must be positive, got %g", op, n->fattr[0]);
        *out = n->op == IR_OP_BN_VAR || n->op == IR_OP_BN_GRAD_GAMMA ? ir_shape1(x->dim[1]) : *x;
        return 0;
    }
    default: return no_rule(n, err, errlen);
    }
}

/* clip's bounds: finite (they become float literals) and in order. */
static int check_bounds(const ir_node *n, char *err, size_t errlen) {
    double lo = n->fattr[0], hi = n->fattr[1];
    if (!isfinite(lo) || !isfinite(hi))
        return base_fail(err, errlen, "%s: bounds must be finite, got %g and %g",
                         ir_ops[n->op].name, lo, hi);
    if (lo > hi)
        return base_fail(err, errlen, "%s: lower bound %g is above the upper bound %g",
                         ir_ops[n->op].name, lo, hi);
    return 0;
}

/* Whether s is one factor per (sample, channel) plane of x [N,C,H,W]:
 * [N,C,1,1] or [N,C] (the same bytes). */
int ir_is_channel_factor(const ir_type *x, const ir_type *s) {
    if (x->ndim != 4 || s->dtype == IR_I32 || s->dim[0] != x->dim[0] || s->dim[1] != x->dim[1])
        return 0;
    return s->ndim == 2 || (s->ndim == 4 && s->dim[2] == 1 && s->dim[3] == 1);
}

/* concat along the channels: every dimension but the channels agrees. */
static int infer_concat(const ir_graph *g, const ir_node *n, ir_type *out, char *err,
                        size_t errlen) {
    const ir_type *a = in_type(g, n, 0);
    int64_t axis = n->iattr[0];
    if (a->ndim < 2 || a->dtype == IR_I32)
        return base_fail(err, errlen, "concat: inputs must be [N, C, ...] float tensors, got %s",
                         TYPE_STR(a));
    if (axis < 1 || axis >= a->ndim)
        return base_fail(err, errlen, "concat: axis %" PRId64 " is not a non-batch axis of %s",
                         axis, TYPE_STR(a));
    *out = *a;
    for (int k = 1; k < n->ninputs; k++) {
        const ir_type *b = in_type(g, n, k);
        int same = b->ndim == a->ndim && b->dtype != IR_I32;
        for (int d = 0; same && d < a->ndim; d++) same = d == axis || b->dim[d] == a->dim[d];
        if (!same && axis == 1)
            return base_fail(err, errlen,
                             "concat: input %d %s does not fit input 0 %s (all dimensions but "
                             "the channels must agree)",
                             k, TYPE_STR(b), TYPE_STR(a));
        if (!same)
            return base_fail(err, errlen,
                             "concat: input %d %s does not fit input 0 %s (all dimensions but "
                             "axis %" PRId64 " must agree)",
                             k, TYPE_STR(b), TYPE_STR(a), axis);
        out->dim[axis] += b->dim[axis];
    }
    return 0;
}

/* channel_slice: channels [off, off + c) of its input. */
static int infer_channel_slice(const ir_graph *g, const ir_node *n, ir_type *out, char *err,
                               size_t errlen) {
    const char *op = ir_ops[n->op].name;
    const ir_type *x = in_type(g, n, 0);
    int64_t off = n->iattr[0], c = n->iattr[1];
    if (x->ndim < 2 || x->dtype == IR_I32)
        return base_fail(err, errlen, "%s: input must be [N, C, ...], got %s", op, TYPE_STR(x));
    if (off < 0 || c < 1 || off > x->dim[1] - c)
        return base_fail(err, errlen, "%s: channels %" PRId64 "..%" PRId64 " are not within %s", op,
                         off, off + c - 1, TYPE_STR(x));
    *out = *x;
    out->dim[1] = c;
    return 0;
}

/* dropout: x's shape; a key of four values, p in [0, 1), a salt >= 0. */
static int infer_dropout(const ir_graph *g, const ir_node *n, ir_type *out, char *err,
                         size_t errlen) {
    const char *op = ir_ops[n->op].name;
    const ir_type *x = in_type(g, n, 0);
    if (x->dtype == IR_I32)
        return base_fail(err, errlen, "dropout: input must be a float tensor, got %s", TYPE_STR(x));
    if (need_vector(op, "key", in_type(g, n, 1), 4, err, errlen)) return -1;
    if (!(n->fattr[0] >= 0 && n->fattr[0] < 1))
        return base_fail(err, errlen, "dropout: p must be in [0, 1), got %g", n->fattr[0]);
    if (n->iattr[0] < 0)
        return base_fail(err, errlen, "dropout: salt %" PRId64 " is negative", n->iattr[0]);
    *out = *x;
    return 0;
}

/* Activations of one float input (sigmoid, tanh, gelu, clip): its shape. */
static int infer_activation(const ir_graph *g, const ir_node *n, ir_type *out, char *err,
                            size_t errlen) {
    const ir_type *x = in_type(g, n, 0);
    if (x->dtype == IR_I32)
        return base_fail(err, errlen, "%s: input must be a float tensor, got %s",
                         ir_ops[n->op].name, TYPE_STR(x));
    if (n->op == IR_OP_CLIP && check_bounds(n, err, errlen)) return -1;
    *out = *x;
    return 0;
}

/* Elementwise ops and views: the output has an input's shape. */
static int infer_pointwise(const ir_graph *g, const ir_node *n, ir_type *out, char *err,
                           size_t errlen) {
    const char *op = ir_ops[n->op].name;
    switch (n->op) {
    case IR_OP_RELU: {
        const ir_type *x = in_type(g, n, 0);
        if (x->dtype == IR_I32)
            return base_fail(err, errlen, "relu: input must be a float tensor, got %s",
                             TYPE_STR(x));
        *out = *x;
        return 0;
    }
    case IR_OP_ADD: {
        const ir_type *a = in_type(g, n, 0), *b = in_type(g, n, 1);
        if (!ir_type_same_shape(a, b))
            return base_fail(err, errlen, "add: shapes differ: %s vs %s", TYPE_STR(a), TYPE_STR(b));
        if (a->dtype == IR_I32)
            return base_fail(err, errlen, "add: inputs must be float tensors, got %s", TYPE_STR(a));
        *out = *a;
        return 0;
    }
    case IR_OP_EMA:
    case IR_OP_ASSIGN:
    case IR_OP_RELU_GRAD: {
        const ir_type *a = in_type(g, n, 0), *b = in_type(g, n, 1);
        if (!ir_type_same_shape(a, b))
            return base_fail(err, errlen, "%s: shapes differ: %s vs %s", op, TYPE_STR(a),
                             TYPE_STR(b));
        if (n->op == IR_OP_ASSIGN) {
            ir_op dst = g->nodes[n->input[0]].op;
            if (!ir_is_persistent(dst))
                return base_fail(err, errlen, "assign: target must be a param or state, got %s",
                                 ir_ops[dst].name);
        }
        *out = *a;
        return 0;
    }
    case IR_OP_SIGMOID_GRAD:
    case IR_OP_TANH_GRAD:
    case IR_OP_GELU_GRAD:
    case IR_OP_GELU_TANH_GRAD:
    case IR_OP_CLIP_GRAD:
    case IR_OP_SUB:
    case IR_OP_MUL: {
        const ir_type *a = in_type(g, n, 0), *b = in_type(g, n, 1);
        if (!ir_type_same_shape(a, b))
            return base_fail(err, errlen, "%s: shapes differ: %s vs %s", op, TYPE_STR(a),
                             TYPE_STR(b));
        if (a->dtype == IR_I32)
            return base_fail(err, errlen, "%s: inputs must be float tensors, got %s", op,
                             TYPE_STR(a));
        if (n->op == IR_OP_CLIP_GRAD && check_bounds(n, err, errlen)) return -1;
        *out = *a;
        return 0;
    }
    case IR_OP_MUL_CHANNEL: {
        const ir_type *x = in_type(g, n, 0), *s = in_type(g, n, 1);
        if (x->dtype == IR_I32 || !ir_is_channel_factor(x, s))
            return base_fail(err, errlen,
                             "mul: shapes %s and %s do not broadcast (the same shape, or "
                             "[N,C,H,W] with [N,C,1,1] or [N,C])",
                             TYPE_STR(x), TYPE_STR(s));
        *out = *x;
        return 0;
    }
    case IR_OP_PLANE_DOT: {
        const ir_type *dy = in_type(g, n, 0), *x = in_type(g, n, 1);
        if (need_rank(op, "dy", dy, 4, err, errlen)) return -1;
        if (!ir_type_same_shape(dy, x))
            return base_fail(err, errlen, "%s: shapes differ: %s vs %s", op, TYPE_STR(dy),
                             TYPE_STR(x));
        *out = ir_shape2(dy->dim[0], dy->dim[1]);
        return 0;
    }
    case IR_OP_CONCAT: return infer_concat(g, n, out, err, errlen);
    case IR_OP_CHANNEL_SLICE: return infer_channel_slice(g, n, out, err, errlen);
    case IR_OP_DROPOUT: return infer_dropout(g, n, out, err, errlen);
    case IR_OP_ONES_LIKE:
        *out = *in_type(g, n, 0);
        out->dtype = IR_F32;
        return 0;
    case IR_OP_RESHAPE_LIKE: {
        const ir_type *x = in_type(g, n, 0), *like = in_type(g, n, 1);
        if (ir_numel(x) != ir_numel(like) || (x->dtype == IR_I32) != (like->dtype == IR_I32))
            return base_fail(err, errlen, "%s: cannot view %s as %s", op, TYPE_STR(x),
                             TYPE_STR(like));
        *out = *like;
        out->dtype = x->dtype; /* a view of x's bytes */
        return 0;
    }
    default: return no_rule(n, err, errlen);
    }
}

/* flatten, dense and the gradients of dense (shape_rows.c). */
static int infer_dense(const ir_graph *g, const ir_node *n, ir_type *out, char *err,
                       size_t errlen) {
    switch (n->op) {
    case IR_OP_FLATTEN: {
        const ir_type *x = in_type(g, n, 0);
        if (x->ndim < 2 || x->dtype == IR_I32)
            return base_fail(err, errlen, "flatten: input must be [batch, ...], got %s",
                             TYPE_STR(x));
        *out = ir_shape2(x->dim[0], ir_numel(x) / x->dim[0]);
        return 0;
    }
    case IR_OP_DENSE:
    case IR_OP_DENSE_GRAD_DATA:
    case IR_OP_DENSE_GRAD_WEIGHT: return ir_infer_dense_rows(g, n, out, err, errlen);
    default: return no_rule(n, err, errlen);
    }
}

/* The loss and its gradient. */
static int infer_loss(const ir_graph *g, const ir_node *n, ir_type *out, char *err, size_t errlen) {
    const char *op = ir_ops[n->op].name;
    if (!(n->fattr[0] >= 0 && n->fattr[0] <= 1))
        return base_fail(err, errlen, "%s: smoothing must be in [0, 1], got %g", op, n->fattr[0]);
    switch (n->op) {
    case IR_OP_SOFTMAX_CE: {
        const ir_type *x = in_type(g, n, 0), *y = in_type(g, n, 1);
        if (x->ndim != 2 || x->dtype == IR_I32)
            return base_fail(err, errlen,
                             "softmax_cross_entropy: logits must be [batch, classes], got %s",
                             TYPE_STR(x));
        if (y->ndim != 1 || y->dtype != IR_I32 || y->dim[0] != x->dim[0])
            return base_fail(err, errlen,
                             "softmax_cross_entropy: labels must be class indices [%" PRId64
                             "]:i32, got %s",
                             x->dim[0], TYPE_STR(y));
        const ir_node *label = &g->nodes[n->input[1]];
        if (label->op == IR_OP_INPUT && label->iattr[0] && label->iattr[0] != x->dim[1])
            return base_fail(err, errlen,
                             "softmax_cross_entropy: %" PRId64 " logits per sample but %" PRId64
                             " classes",
                             x->dim[1], label->iattr[0]);
        *out = ir_shape1(x->dim[0]);
        return 0;
    }
    case IR_OP_SOFTMAX_CE_GRAD: {
        const ir_type *x = in_type(g, n, 0), *y = in_type(g, n, 1), *d = in_type(g, n, 2);
        if (need_rank(op, "logits", x, 2, err, errlen)) return -1;
        if (y->ndim != 1 || y->dtype != IR_I32 || y->dim[0] != x->dim[0] ||
            need_vector(op, "dloss", d, x->dim[0], err, errlen))
            return base_fail(err, errlen, "%s: labels %s / dloss %s do not fit logits %s", op,
                             TYPE_STR(y), TYPE_STR(d), TYPE_STR(x));
        *out = *x;
        return 0;
    }
    default: return no_rule(n, err, errlen);
    }
}

/* Float attribute slot of n in lo..hi (each end open or closed): the
 * hyper-parameters of the optimizer and the running statistics, in the
 * schedule's ranges (ir/validate.h), whoever wrote the graph. */
static int attr_in(const ir_node *n, int slot, double lo, int lo_open, double hi, int hi_open,
                   char *err, size_t errlen) {
    double v = n->fattr[slot];
    if ((lo_open ? v > lo : v >= lo) && (hi_open ? v < hi : v <= hi)) return 0;
    char name[32];
    return base_fail(err, errlen, "%s: %s must be in %c%g, %g%c, got %g", ir_ops[n->op].name,
                     ir_op_attr_name(n->op, 1, slot, name, sizeof name), lo_open ? '(' : '[', lo,
                     hi, hi_open ? ')' : ']', v);
}

/* The hyper-parameters of the update ops (passes/optimizer.c). */
static int update_attrs(const ir_node *n, char *err, size_t errlen) {
    switch (n->op) {
    case IR_OP_SGD_MOMENTUM: /* momentum, wd */
        return attr_in(n, 0, 0, 0, 1, 1, err, errlen) ||
               attr_in(n, 1, 0, 0, IR_MAX_WD, 0, err, errlen);
    case IR_OP_LARS_LR: /* eta, wd, eps */
        return attr_in(n, 0, 0, 1, 1, 0, err, errlen) ||
               attr_in(n, 1, 0, 0, IR_MAX_WD, 0, err, errlen) ||
               attr_in(n, 2, 0, 1, 1, 0, err, errlen);
    case IR_OP_ADAM_M:
    case IR_OP_ADAM_V:
    case IR_OP_BIAS_CORRECTION: return attr_in(n, 0, 0, 0, 1, 1, err, errlen); /* beta */
    case IR_OP_ADAM_DIR:                                                       /* eps, wd */
        return attr_in(n, 0, 0, 1, 1, 0, err, errlen) ||
               attr_in(n, 1, 0, 0, IR_MAX_WD, 0, err, errlen);
    case IR_OP_CLIP_SCALE: return attr_in(n, 0, 0, 1, IR_MAX_REAL, 0, err, errlen); /* max_norm */
    default: return 0;
    }
}

/* The optimizer update and the gradient all-reduce. */
static int infer_update(const ir_graph *g, const ir_node *n, ir_type *out, char *err,
                        size_t errlen) {
    const char *op = ir_ops[n->op].name;
    switch (n->op) {
    case IR_OP_SGD_MOMENTUM: {
        const ir_type *w = in_type(g, n, 0);
        for (int i = 1; i < 3; i++)
            if (!ir_type_same_shape(w, in_type(g, n, i)))
                return base_fail(err, errlen, "%s: shapes differ: %s vs %s", op, TYPE_STR(w),
                                 TYPE_STR(in_type(g, n, i)));
        for (int i = 3; i < 5; i++)
            if (need_vector(op, i == 3 ? "lr" : "grad_scale", in_type(g, n, i), 1, err, errlen))
                return -1;
        *out = *w;
        return 0;
    }
    case IR_OP_SCALE:
    case IR_OP_BN_UNBIAS: {
        const ir_type *x = in_type(g, n, 0);
        if (x->dtype == IR_I32)
            return base_fail(err, errlen, "%s: input must be a float tensor, got %s", op,
                             TYPE_STR(x));
        if (need_vector(op, "scale", in_type(g, n, 1), 1, err, errlen)) return -1;
        if (n->op == IR_OP_BN_UNBIAS && !(n->fattr[0] > 1))
            return base_fail(err, errlen, "bn_unbias: count %g must be more than 1", n->fattr[0]);
        *out = *x;
        return 0;
    }
    case IR_OP_SUMSQ:
        if (in_type(g, n, 0)->dtype == IR_I32)
            return base_fail(err, errlen, "sumsq: input must be float, got %s",
                             TYPE_STR(in_type(g, n, 0)));
        *out = ir_shape1(1);
        return 0;
    case IR_OP_LARS_LR:
    case IR_OP_LAMB_LR:
    case IR_OP_BIAS_CORRECTION:
    case IR_OP_CLIP_SCALE:
        for (int i = 0; i < n->ninputs; i++)
            if (need_vector(op, "scalar", in_type(g, n, i), 1, err, errlen)) return -1;
        *out = ir_shape1(1);
        return 0;
    case IR_OP_ADAM_M:
    case IR_OP_ADAM_V:
    case IR_OP_ADAM_DIR:
    case IR_OP_DESCEND: {
        /* tensors like w first (adam_dir: w, m, v; the others: two), then scalars */
        const ir_type *w = in_type(g, n, 0);
        int tensors = n->op == IR_OP_ADAM_DIR ? 3 : 2;
        for (int i = 1; i < n->ninputs; i++) {
            const ir_type *t = in_type(g, n, i);
            if (i < tensors && !ir_type_same_shape(w, t))
                return base_fail(err, errlen, "%s: shapes differ: %s vs %s", op, TYPE_STR(w),
                                 TYPE_STR(t));
            if (i >= tensors && need_vector(op, "scalar", t, 1, err, errlen)) return -1;
        }
        *out = *w;
        return 0;
    }
    case IR_OP_ALLREDUCE: {
        const ir_type *x = in_type(g, n, 0);
        if (x->dtype != IR_F32)
            return base_fail(err, errlen, "allreduce: gradient must be f32, got %s", TYPE_STR(x));
        if (n->iattr[0] < 0 || n->iattr[1] < 0)
            return base_fail(err, errlen,
                             "allreduce: bucket %" PRId64 " / offset %" PRId64
                             " must not be negative",
                             n->iattr[0], n->iattr[1]);
        *out = *x;
        return 0;
    }
    default: return no_rule(n, err, errlen);
    }
}

static int infer(const ir_graph *g, const ir_node *n, ir_type *out, char *err, size_t errlen);

/* The shape rule, then the hyper-parameters' ranges. */
int ir_infer_type(const ir_graph *g, const ir_node *n, ir_type *out, char *err, size_t errlen) {
    if (infer(g, n, out, err, errlen) || update_attrs(n, err, errlen)) return -1;
    /* ema: momentum as batchnorm's */
    return n->op == IR_OP_EMA ? attr_in(n, 0, 0, 0, 1, 0, err, errlen) : 0;
}

static int infer(const ir_graph *g, const ir_node *n, ir_type *out, char *err, size_t errlen) {
    switch (n->op) {
    case IR_OP_INPUT:
    case IR_OP_PARAM:
    case IR_OP_STATE: *out = n->type; return 0;
    case IR_OP_CONV:
    case IR_OP_CONV_GRAD_DATA:
    case IR_OP_CONV_GRAD_WEIGHT: return infer_conv(g, n, out, err, errlen);
    case IR_OP_MAXPOOL:
    case IR_OP_AVGPOOL:
    case IR_OP_GLOBAL_AVGPOOL:
    case IR_OP_MAXPOOL_GRAD:
    case IR_OP_AVGPOOL_GRAD:
    case IR_OP_GLOBAL_AVGPOOL_GRAD: return infer_pool(g, n, out, err, errlen);
    case IR_OP_BIAS_ADD:
    case IR_OP_BATCHNORM:
    case IR_OP_BN_MEAN:
    case IR_OP_BIAS_GRAD:
    case IR_OP_BN_VAR:
    case IR_OP_BN_GRAD_GAMMA:
    case IR_OP_BN_APPLY:
    case IR_OP_BN_GRAD_DATA: return infer_channel(g, n, out, err, errlen);
    case IR_OP_SIGMOID:
    case IR_OP_TANH:
    case IR_OP_GELU:
    case IR_OP_GELU_TANH:
    case IR_OP_MUL_CONST:
    case IR_OP_ADD_CONST:
    case IR_OP_CLIP: return infer_activation(g, n, out, err, errlen);
    case IR_OP_RELU:
    case IR_OP_ADD:
    case IR_OP_EMA:
    case IR_OP_ASSIGN:
    case IR_OP_RELU_GRAD:
    case IR_OP_ONES_LIKE:
    case IR_OP_SIGMOID_GRAD:
    case IR_OP_TANH_GRAD:
    case IR_OP_GELU_GRAD:
    case IR_OP_GELU_TANH_GRAD:
    case IR_OP_CLIP_GRAD:
    case IR_OP_SUB:
    case IR_OP_MUL:
    case IR_OP_MUL_CHANNEL:
    case IR_OP_PLANE_DOT:
    case IR_OP_CONCAT:
    case IR_OP_CHANNEL_SLICE:
    case IR_OP_DROPOUT:
    case IR_OP_RESHAPE_LIKE: return infer_pointwise(g, n, out, err, errlen);
    case IR_OP_FLATTEN:
    case IR_OP_DENSE:
    case IR_OP_DENSE_GRAD_DATA:
    case IR_OP_DENSE_GRAD_WEIGHT: return infer_dense(g, n, out, err, errlen);
    case IR_OP_SOFTMAX_CE:
    case IR_OP_SOFTMAX_CE_GRAD: return infer_loss(g, n, out, err, errlen);
    case IR_OP_SGD_MOMENTUM:
    case IR_OP_ALLREDUCE:
    case IR_OP_SCALE:
    case IR_OP_BN_UNBIAS:
    case IR_OP_SUMSQ:
    case IR_OP_LARS_LR:
    case IR_OP_ADAM_M:
    case IR_OP_ADAM_V:
    case IR_OP_BIAS_CORRECTION:
    case IR_OP_ADAM_DIR:
    case IR_OP_LAMB_LR:
    case IR_OP_CLIP_SCALE:
    case IR_OP_DESCEND: return infer_update(g, n, out, err, errlen);
    case IR_OP_LAYERNORM:
    case IR_OP_LAYERNORM_STATS:
    case IR_OP_LAYERNORM_GRAD_DATA:
    case IR_OP_LAYERNORM_GRAD_GAMMA:
    case IR_OP_SUM_LEADING:
    case IR_OP_SOFTMAX:
    case IR_OP_SOFTMAX_GRAD: return ir_infer_rows(g, n, out, err, errlen);
    case IR_OP_TRANSPOSE:
        if (g->nodes[n->input[0]].type.ndim != 4 || g->nodes[n->input[0]].type.dtype == IR_I32)
            return base_fail(err, errlen, "transpose: input must be [N,C,H,W], got %s",
                             TYPE_STR(&g->nodes[n->input[0]].type));
        *out = g->nodes[n->input[0]].type;
        return 0;
    case IR_OP_EMBEDDING:
    case IR_OP_EMBEDDING_GRAD: return ir_infer_embedding(g, n, out, err, errlen);
    case IR_OP_POSITIONS:
    case IR_OP_POSITIONS_GRAD: return ir_infer_positions(g, n, out, err, errlen);
    case IR_OP_BIAS_ADD_LAST: return ir_infer_dense_rows(g, n, out, err, errlen);
    case IR_OP_MATMUL: return ir_infer_matmul(g, n, out, err, errlen);
    case IR_OP_SEQ_CE:
    case IR_OP_SEQ_CE_GRAD: return ir_infer_seq_ce(g, n, out, err, errlen);
    case IR_OP_RESHAPE:
    case IR_OP_PERMUTE:
    case IR_OP_SLICE:
    case IR_OP_SLICE_GRAD:
    case IR_OP_CAUSAL_MASK:
    case IR_OP_PAD_MASK: return ir_infer_view(g, n, out, err, errlen);
    case IR_OP_ATTENTION:
    case IR_OP_ATTENTION_LSE:
    case IR_OP_ATTENTION_GRAD: return ir_infer_attention(g, n, out, err, errlen);
    case IR_OP_COUNT: break;
    }
    return no_rule(n, err, errlen);
}
