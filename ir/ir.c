/* ir/ir.c — graph construction, the op table, shape rules, verification. */
#include "ir/ir.h"
#include "ir/err.h"
#include "ir/hash.h"

#include <assert.h>
#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

const ir_op_info ir_ops[IR_OP_COUNT] = {
#define X(id, name, amin, amax, fuse, iattrs, fattrs) {name, amin, amax, fuse, iattrs, fattrs},
    IR_OPS(X)
#undef X
};

/* Plans store an op as its index in this table (ir/plan.c), so the order is
 * part of the file format: a new op is appended at the end of IR_OPS, never
 * inserted, or PLAN_VERSION is bumped. Then update this count and the list
 * in tests/unit/test_ir.c (op_order_is_pinned). */
static_assert(IR_OP_COUNT == 56, "op table changed: append only, see the comment above");

int ir_op_by_name(const char *name) {
    for (int i = 0; i < IR_OP_COUNT; i++)
        if (strcmp(ir_ops[i].name, name) == 0) return i;
    return -1;
}

static int count_names(const char *list) {
    if (!*list) return 0;
    int n = 1;
    for (const char *p = list; *p; p++) n += *p == ',';
    return n;
}

int ir_op_num_iattrs(ir_op op) { return count_names(ir_ops[op].iattrs); }
int ir_op_num_fattrs(ir_op op) { return count_names(ir_ops[op].fattrs); }

const char *ir_op_attr_name(ir_op op, int is_float, int slot, char *buf, size_t n) {
    const char *p = is_float ? ir_ops[op].fattrs : ir_ops[op].iattrs;
    for (int i = 0; i < slot && p; i++) {
        p = strchr(p, ',');
        if (p) p++;
    }
    if (!p || !*p || n == 0) {
        if (n) buf[0] = 0;
        return buf;
    }
    size_t len = strcspn(p, ",");
    if (len >= n) len = n - 1;
    memcpy(buf, p, len);
    buf[len] = 0;
    return buf;
}

/* ---- per-element rules ---------------------------------------------------- */

static const char *const op_expr[IR_OP_COUNT] = {
    [IR_OP_BIAS_ADD] = "$0 + $1c",
    [IR_OP_RELU] = "$0 > 0.0f ? $0 : 0.0f",
    [IR_OP_ADD] = "$0 + $1",
    [IR_OP_BN_APPLY] = "($0 - $1c) / sqrtf($2c + @0) * $3c + $4c",
    [IR_OP_EMA] = "@0 * $0 + (1.0f - @0) * $1 * @1",
    [IR_OP_ASSIGN] = "$1",
    [IR_OP_ONES_LIKE] = "1.0f",
    [IR_OP_BN_GRAD_DATA] = "$4c / sqrtf($3c + @0) * ($0 - $6c * #M - ($1 - $2c) / sqrtf($3c + @0) "
                           "* $5c * #M)",
    [IR_OP_RELU_GRAD] = "$1 > 0.0f ? $0 : 0.0f",
    [IR_OP_GLOBAL_AVGPOOL_GRAD] = "$0o * #I",
    [IR_OP_SGD_MOMENTUM] = "@0 * $2 - $3s * ($1 * $4s + @1 * $0)",
    [IR_OP_SCALE] = "$0 * $1s",
    [IR_OP_BN_UNBIAS] = "$0 * (@0 / (@0 - $1s))",
    [IR_OP_LARS_LR] = "$0 > 0.0f && $1 > 0.0f ? $2 * (@0 * sqrtf($0) / (sqrtf($1) * $3 + @1 * "
                      "sqrtf($0) + @2)) : $2",
    [IR_OP_ADAM_M] = "@0 * $0 + (1.0f - @0) * ($1 * $2s)",
    [IR_OP_ADAM_V] = "@0 * $0 + (1.0f - @0) * (($1 * $2s) * ($1 * $2s))",
    [IR_OP_BIAS_CORRECTION] = "1.0f / (1.0f - powf(@0, $0))",
    [IR_OP_ADAM_DIR] = "$1 * $3s / (sqrtf($2 * $4s) + @0) + @1 * $0",
    [IR_OP_LAMB_LR] = "$0 > 0.0f && $1 > 0.0f ? $2 * (sqrtf($0) / sqrtf($1)) : $2",
    [IR_OP_DESCEND] = "$0 - $2s * $1",
    [IR_OP_SIGMOID] = "1.0f / (1.0f + expf(-$0))",
    [IR_OP_SIGMOID_GRAD] = "$0 * ($1 * (1.0f - $1))",
    /* NaN matches neither test and stays NaN, as it does in MXNet's clip */
    [IR_OP_CLIP] = "$0 < @0 ? @0 : $0 > @1 ? @1 : $0",
    [IR_OP_CLIP_GRAD] = "$1 >= @0 && $1 <= @1 ? $0 : 0.0f",
    [IR_OP_MUL] = "$0 * $1",
    [IR_OP_MUL_CHANNEL] = "$0 * $1o",
};

const char *ir_op_expr(ir_op op) { return (unsigned)op < IR_OP_COUNT ? op_expr[op] : NULL; }

int ir_op_access(ir_op op, int k) {
    const char *t = ir_op_expr(op);
    for (; t && *t; t++)
        if (t[0] == '$' && t[1] == '0' + k) {
            char m = t[2];
            return m == 'c' || m == 's' || m == 'o' ? m : 'i';
        }
    return 0;
}

ir_reduce_kind ir_op_reduce(ir_op op) {
    switch (op) {
    case IR_OP_BN_MEAN:
    case IR_OP_BN_VAR:
    case IR_OP_BIAS_GRAD:
    case IR_OP_BN_GRAD_GAMMA:
    case IR_OP_SUMSQ: return IR_REDUCE_CHANNEL;
    case IR_OP_SOFTMAX_CE:
    case IR_OP_SOFTMAX_CE_GRAD: return IR_REDUCE_ROW;
    default: return IR_REDUCE_NONE;
    }
}

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

/* ---- graph ------------------------------------------------------------- */

ir_graph *ir_new(void) {
    ir_graph *g = calloc(1, sizeof *g);
    IR_CHECK_ALLOC(g);
    return g;
}

void ir_free(ir_graph *g) {
    if (!g) return;
    free(g->nodes);
    free(g);
}

int ir_replace(ir_graph **g, ir_graph *ng, int failed) {
    if (failed) {
        ir_free(ng);
        return -1;
    }
    ir_free(*g);
    *g = ng;
    return 0;
}

ir_graph *ir_clone(const ir_graph *g) {
    ir_graph *c = ir_new();
    if (g->n) {
        c->nodes = malloc(sizeof *c->nodes * (size_t)g->n);
        IR_CHECK_ALLOC(c->nodes);
        memcpy(c->nodes, g->nodes, sizeof *c->nodes * (size_t)g->n);
    }
    c->n = c->cap = g->n;
    return c;
}

static int push(ir_graph *g, const ir_node *node) {
    if (g->n == g->cap) {
        g->cap = g->cap ? g->cap * 2 : 64;
        g->nodes = realloc(g->nodes, sizeof *g->nodes * (size_t)g->cap);
        IR_CHECK_ALLOC(g->nodes);
    }
    g->nodes[g->n] = *node;
    return g->n++;
}

static void set_name(ir_node *n, const char *name) {
    snprintf(n->name, sizeof n->name, "%s", name ? name : "");
}

static int add_source(ir_graph *g, ir_op op, const char *name, ir_type type, int64_t attr) {
    ir_node n = {0};
    n.op = op;
    n.type = type;
    n.iattr[0] = attr;
    set_name(&n, name);
    return push(g, &n);
}

int ir_add_input(ir_graph *g, const char *name, ir_type type, int64_t classes) {
    return add_source(g, IR_OP_INPUT, name, type, classes);
}
int ir_add_param(ir_graph *g, const char *name, ir_type type, ir_init init) {
    return add_source(g, IR_OP_PARAM, name, type, init);
}
int ir_add_state(ir_graph *g, const char *name, ir_type type, ir_init init) {
    return add_source(g, IR_OP_STATE, name, type, init);
}

int ir_add_node(ir_graph *g, ir_op op, const int *inputs, int ninputs, const int64_t *iattr,
                const double *fattr, char *err, size_t errlen) {
    ir_node n = {0};
    if ((unsigned)op >= IR_OP_COUNT) return ir_fail(err, errlen, "unknown op %d", (int)op);
    n.op = op;
    if (ninputs < ir_ops[op].min_arity || ninputs > ir_ops[op].max_arity)
        return ir_fail(err, errlen, "%s takes %d inputs, got %d", ir_ops[op].name,
                       ir_ops[op].min_arity, ninputs);
    n.ninputs = ninputs;
    for (int i = 0; i < ninputs; i++) {
        if (inputs[i] < 0 || inputs[i] >= g->n)
            return ir_fail(err, errlen, "%s: input %d refers to no node", ir_ops[op].name, i);
        n.input[i] = inputs[i];
    }
    for (int i = 0; iattr && i < ir_op_num_iattrs(op); i++) n.iattr[i] = iattr[i];
    for (int i = 0; fattr && i < ir_op_num_fattrs(op); i++) n.fattr[i] = fattr[i];
    if (ir_infer_type(g, &n, &n.type, err, errlen)) return -1;
    if (ir_numel(&n.type) > IR_MAX_NUMEL) {
        char buf[96];
        return ir_fail(err, errlen, "tensor %s is too large (more than 2^40 elements)",
                       ir_type_str(&n.type, buf, sizeof buf));
    }
    return push(g, &n);
}

/* ---- shape rules ------------------------------------------------------- */

#define TYPE_STR(t) ir_type_str((t), (char[96]){0}, 96)

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
        return ir_fail(err, errlen, "%s: kernel size must be positive, got %" PRId64, op, k);
    if (s <= 0) return ir_fail(err, errlen, "%s: stride must be positive, got %" PRId64, op, s);
    if (p < 0) return ir_fail(err, errlen, "%s: padding must be >= 0, got %" PRId64, op, p);
    return 0;
}

static int need_rank(const char *op, const char *what, const ir_type *t, int rank, char *err,
                     size_t errlen) {
    if (t->ndim == rank && t->dtype != IR_I32) return 0;
    if (t->dtype == IR_I32)
        return ir_fail(err, errlen, "%s: %s must be a float tensor, got %s", op, what, TYPE_STR(t));
    return ir_fail(err, errlen, "%s: %s must have rank %d, got %s", op, what, rank, TYPE_STR(t));
}

static int need_vector(const char *op, const char *what, const ir_type *t, int64_t len, char *err,
                       size_t errlen) {
    if (t->ndim == 1 && t->dim[0] == len && t->dtype != IR_I32) return 0;
    return ir_fail(err, errlen, "%s: %s must be [%" PRId64 "], got %s", op, what, len, TYPE_STR(t));
}

static int infer_window(const char *op, const ir_type *x, const ir_node *n, ir_type *out, char *err,
                        size_t errlen) {
    if (need_rank(op, "input", x, 4, err, errlen) || check_window(op, n, err, errlen)) return -1;
    int64_t k = n->iattr[0], s = n->iattr[1], p = n->iattr[2];
    if (2 * p > k)
        return ir_fail(err, errlen, "%s: padding %" PRId64 " is more than half the kernel %" PRId64,
                       op, p, k);
    int64_t ho = window_out(x->dim[2], k, s, p), wo = window_out(x->dim[3], k, s, p);
    if (ho < 1 || wo < 1)
        return ir_fail(err, errlen, "%s: kernel %" PRId64 " is larger than the padded input %s", op,
                       k, TYPE_STR(x));
    *out = ir_shape4(x->dim[0], x->dim[1], ho, wo);
    return 0;
}

/* The op has no rule: a node ir_verify or a pass made up. */
static int no_rule(const ir_node *n, char *err, size_t errlen) {
    return ir_fail(err, errlen, "no shape rule for op %d", (int)n->op);
}

/* The groups attribute (conv's slot 3, conv_grad_data's 5, conv_grad_weight's
 * 3): at least 1, dividing the input channels C and the output channels K. */
int64_t ir_conv_groups(const ir_node *n) { return n->iattr[n->op == IR_OP_CONV_GRAD_DATA ? 5 : 3]; }

static int check_groups(const char *op, const ir_node *n, int64_t C, int64_t K, char *err,
                        size_t errlen) {
    int64_t gr = ir_conv_groups(n);
    if (gr < 1) return ir_fail(err, errlen, "%s: groups must be positive, got %" PRId64, op, gr);
    if (C % gr || K % gr)
        return ir_fail(err, errlen,
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
            return ir_fail(err, errlen,
                           "conv: weight %s does not fit input %s with kernel %" PRId64,
                           TYPE_STR(w), TYPE_STR(x), k);
        int64_t ho = window_out(x->dim[2], k, s, p), wo = window_out(x->dim[3], k, s, p);
        if (ho < 1 || wo < 1)
            return ir_fail(err, errlen,
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
            return ir_fail(err, errlen,
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
            return ir_fail(err, errlen, "%s: dy %s does not match input %s", op, TYPE_STR(dy),
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
            return ir_fail(err, errlen, "%s: dy %s does not match pooled %s", op, TYPE_STR(dy),
                           TYPE_STR(&fwd));
        *out = *x;
        return 0;
    }
    case IR_OP_AVGPOOL_GRAD: {
        const ir_type *dy = in_type(g, n, 0);
        int64_t h = n->iattr[3], w = n->iattr[4];
        if (need_rank(op, "dy", dy, 4, err, errlen)) return -1;
        if (h <= 0 || w <= 0)
            return ir_fail(err, errlen, "%s: bad input size %" PRId64 "x%" PRId64, op, h, w);
        ir_type x = ir_shape4(dy->dim[0], dy->dim[1], h, w), fwd;
        if (infer_window(op, &x, n, &fwd, err, errlen)) return -1;
        if (!ir_type_same_shape(&fwd, dy))
            return ir_fail(err, errlen, "%s: dy %s does not match pooled %s", op, TYPE_STR(dy),
                           TYPE_STR(&fwd));
        *out = x;
        return 0;
    }
    case IR_OP_GLOBAL_AVGPOOL_GRAD: {
        const ir_type *dy = in_type(g, n, 0);
        if (need_rank(op, "dy", dy, 2, err, errlen)) return -1;
        if (n->iattr[0] <= 0 || n->iattr[1] <= 0)
            return ir_fail(err, errlen, "%s: bad input size %" PRId64 "x%" PRId64, op, n->iattr[0],
                           n->iattr[1]);
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
            return ir_fail(err, errlen, "bias_add: input must be [batch, channels, ...], got %s",
                           TYPE_STR(x));
        if (need_vector(op, "bias", b, x->dim[1], err, errlen)) return -1;
        *out = *x;
        return 0;
    }
    case IR_OP_BATCHNORM: {
        const ir_type *x = in_type(g, n, 0);
        if ((x->ndim != 4 && x->ndim != 2) || x->dtype == IR_I32)
            return ir_fail(err, errlen, "batchnorm: input must be [N,C,H,W] or [N,C], got %s",
                           TYPE_STR(x));
        static const char *what[] = {"", "gamma", "beta", "running_mean", "running_var"};
        for (int i = 1; i < 5; i++)
            if (need_vector(op, what[i], in_type(g, n, i), x->dim[1], err, errlen)) return -1;
        if (!(n->fattr[0] > 0))
            return ir_fail(err, errlen, "batchnorm: eps must be positive, got %g", n->fattr[0]);
        if (!(n->fattr[1] >= 0 && n->fattr[1] <= 1))
            return ir_fail(err, errlen, "batchnorm: momentum must be in [0, 1], got %g",
                           n->fattr[1]);
        *out = *x;
        return 0;
    }
    case IR_OP_BN_MEAN:
    case IR_OP_BIAS_GRAD: {
        const ir_type *x = in_type(g, n, 0);
        if ((x->ndim != 4 && x->ndim != 2) || x->dtype == IR_I32)
            return ir_fail(err, errlen, "%s: input must be [N,C,H,W] or [N,C], got %s", op,
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
            return ir_fail(err, errlen, "%s: input must be [N,C,H,W] or [N,C], got %s", op,
                           TYPE_STR(x));
        int acts = n->op == IR_OP_BN_GRAD_GAMMA || n->op == IR_OP_BN_GRAD_DATA ? 2 : 1;
        if (acts == 2 && !ir_type_same_shape(x, in_type(g, n, 1)))
            return ir_fail(err, errlen, "%s: dy %s and x %s differ", op, TYPE_STR(x),
                           TYPE_STR(in_type(g, n, 1)));
        for (int i = acts; i < n->ninputs; i++)
            if (need_vector(op, "statistics", in_type(g, n, i), x->dim[1], err, errlen)) return -1;
        if (ir_op_num_fattrs(n->op) && !(n->fattr[0] > 0))
            return ir_fail(err, errlen, "%s: eps must be positive, got %g", op, n->fattr[0]);
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
        return ir_fail(err, errlen, "%s: bounds must be finite, got %g and %g", ir_ops[n->op].name,
                       lo, hi);
    if (lo > hi)
        return ir_fail(err, errlen, "%s: lower bound %g is above the upper bound %g",
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

/* Elementwise ops and views: the output has an input's shape. */
static int infer_pointwise(const ir_graph *g, const ir_node *n, ir_type *out, char *err,
                           size_t errlen) {
    const char *op = ir_ops[n->op].name;
    switch (n->op) {
    case IR_OP_RELU: {
        const ir_type *x = in_type(g, n, 0);
        if (x->dtype == IR_I32)
            return ir_fail(err, errlen, "relu: input must be a float tensor, got %s", TYPE_STR(x));
        *out = *x;
        return 0;
    }
    case IR_OP_ADD: {
        const ir_type *a = in_type(g, n, 0), *b = in_type(g, n, 1);
        if (!ir_type_same_shape(a, b))
            return ir_fail(err, errlen, "add: shapes differ: %s vs %s", TYPE_STR(a), TYPE_STR(b));
        if (a->dtype == IR_I32)
            return ir_fail(err, errlen, "add: inputs must be float tensors, got %s", TYPE_STR(a));
        *out = *a;
        return 0;
    }
    case IR_OP_EMA:
    case IR_OP_ASSIGN:
    case IR_OP_RELU_GRAD: {
        const ir_type *a = in_type(g, n, 0), *b = in_type(g, n, 1);
        if (!ir_type_same_shape(a, b))
            return ir_fail(err, errlen, "%s: shapes differ: %s vs %s", op, TYPE_STR(a),
                           TYPE_STR(b));
        if (n->op == IR_OP_ASSIGN) {
            ir_op dst = g->nodes[n->input[0]].op;
            if (!ir_is_persistent(dst))
                return ir_fail(err, errlen, "assign: target must be a param or state, got %s",
                               ir_ops[dst].name);
        }
        *out = *a;
        return 0;
    }
    case IR_OP_SIGMOID:
    case IR_OP_CLIP: {
        const ir_type *x = in_type(g, n, 0);
        if (x->dtype == IR_I32)
            return ir_fail(err, errlen, "%s: input must be a float tensor, got %s", op,
                           TYPE_STR(x));
        if (n->op == IR_OP_CLIP && check_bounds(n, err, errlen)) return -1;
        *out = *x;
        return 0;
    }
    case IR_OP_SIGMOID_GRAD:
    case IR_OP_CLIP_GRAD:
    case IR_OP_MUL: {
        const ir_type *a = in_type(g, n, 0), *b = in_type(g, n, 1);
        if (!ir_type_same_shape(a, b))
            return ir_fail(err, errlen, "%s: shapes differ: %s vs %s", op, TYPE_STR(a),
                           TYPE_STR(b));
        if (a->dtype == IR_I32)
            return ir_fail(err, errlen, "%s: inputs must be float tensors, got %s", op,
                           TYPE_STR(a));
        if (n->op == IR_OP_CLIP_GRAD && check_bounds(n, err, errlen)) return -1;
        *out = *a;
        return 0;
    }
    case IR_OP_MUL_CHANNEL: {
        const ir_type *x = in_type(g, n, 0), *s = in_type(g, n, 1);
        if (x->dtype == IR_I32 || !ir_is_channel_factor(x, s))
            return ir_fail(err, errlen,
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
            return ir_fail(err, errlen, "%s: shapes differ: %s vs %s", op, TYPE_STR(dy),
                           TYPE_STR(x));
        *out = ir_shape2(dy->dim[0], dy->dim[1]);
        return 0;
    }
    case IR_OP_CONCAT: {
        const ir_type *a = in_type(g, n, 0);
        if (n->iattr[0] != 1)
            return ir_fail(err, errlen, "concat: only axis 1 (channels) is supported, got %" PRId64,
                           n->iattr[0]);
        if (a->ndim < 2 || a->dtype == IR_I32)
            return ir_fail(err, errlen, "concat: inputs must be [N, C, ...] float tensors, got %s",
                           TYPE_STR(a));
        *out = *a;
        for (int k = 1; k < n->ninputs; k++) {
            const ir_type *b = in_type(g, n, k);
            int same = b->ndim == a->ndim && b->dtype != IR_I32 && b->dim[0] == a->dim[0];
            for (int d = 2; same && d < a->ndim; d++) same = b->dim[d] == a->dim[d];
            if (!same)
                return ir_fail(err, errlen,
                               "concat: input %d %s does not fit input 0 %s (all dimensions but "
                               "the channels must agree)",
                               k, TYPE_STR(b), TYPE_STR(a));
            out->dim[1] += b->dim[1];
        }
        return 0;
    }
    case IR_OP_CHANNEL_SLICE: {
        const ir_type *x = in_type(g, n, 0);
        int64_t off = n->iattr[0], c = n->iattr[1];
        if (x->ndim < 2 || x->dtype == IR_I32)
            return ir_fail(err, errlen, "%s: input must be [N, C, ...], got %s", op, TYPE_STR(x));
        if (off < 0 || c < 1 || off > x->dim[1] - c)
            return ir_fail(err, errlen, "%s: channels %" PRId64 "..%" PRId64 " are not within %s",
                           op, off, off + c - 1, TYPE_STR(x));
        *out = *x;
        out->dim[1] = c;
        return 0;
    }
    case IR_OP_DROPOUT: {
        const ir_type *x = in_type(g, n, 0);
        if (x->dtype == IR_I32)
            return ir_fail(err, errlen, "dropout: input must be a float tensor, got %s",
                           TYPE_STR(x));
        if (need_vector(op, "key", in_type(g, n, 1), 4, err, errlen)) return -1;
        if (!(n->fattr[0] >= 0 && n->fattr[0] < 1))
            return ir_fail(err, errlen, "dropout: p must be in [0, 1), got %g", n->fattr[0]);
        if (n->iattr[0] < 0)
            return ir_fail(err, errlen, "dropout: salt %" PRId64 " is negative", n->iattr[0]);
        *out = *x;
        return 0;
    }
    case IR_OP_ONES_LIKE:
        *out = *in_type(g, n, 0);
        out->dtype = IR_F32;
        return 0;
    case IR_OP_RESHAPE_LIKE: {
        const ir_type *x = in_type(g, n, 0), *like = in_type(g, n, 1);
        if (ir_numel(x) != ir_numel(like) || (x->dtype == IR_I32) != (like->dtype == IR_I32))
            return ir_fail(err, errlen, "%s: cannot view %s as %s", op, TYPE_STR(x),
                           TYPE_STR(like));
        *out = *like;
        out->dtype = x->dtype; /* a view of x's bytes */
        return 0;
    }
    default: return no_rule(n, err, errlen);
    }
}

/* flatten, dense and the gradients of dense. */
static int infer_dense(const ir_graph *g, const ir_node *n, ir_type *out, char *err,
                       size_t errlen) {
    const char *op = ir_ops[n->op].name;
    switch (n->op) {
    case IR_OP_FLATTEN: {
        const ir_type *x = in_type(g, n, 0);
        if (x->ndim < 2 || x->dtype == IR_I32)
            return ir_fail(err, errlen, "flatten: input must be [batch, ...], got %s", TYPE_STR(x));
        *out = ir_shape2(x->dim[0], ir_numel(x) / x->dim[0]);
        return 0;
    }
    case IR_OP_DENSE: {
        const ir_type *x = in_type(g, n, 0), *w = in_type(g, n, 1);
        if (x->ndim != 2 || x->dtype == IR_I32)
            return ir_fail(err, errlen,
                           "dense: expects a [batch, features] input, got %s (use flatten first)",
                           TYPE_STR(x));
        if (need_rank(op, "weight", w, 2, err, errlen)) return -1;
        if (w->dim[1] != x->dim[1])
            return ir_fail(err, errlen, "dense: weight %s does not fit input %s", TYPE_STR(w),
                           TYPE_STR(x));
        *out = ir_shape2(x->dim[0], w->dim[0]);
        return 0;
    }
    case IR_OP_DENSE_GRAD_DATA: {
        const ir_type *dy = in_type(g, n, 0), *w = in_type(g, n, 1);
        if (need_rank(op, "dy", dy, 2, err, errlen) || need_rank(op, "weight", w, 2, err, errlen))
            return -1;
        if (w->dim[0] != dy->dim[1])
            return ir_fail(err, errlen, "%s: dy %s does not fit weight %s", op, TYPE_STR(dy),
                           TYPE_STR(w));
        *out = ir_shape2(dy->dim[0], w->dim[1]);
        return 0;
    }
    case IR_OP_DENSE_GRAD_WEIGHT: {
        const ir_type *dy = in_type(g, n, 0), *x = in_type(g, n, 1);
        if (need_rank(op, "dy", dy, 2, err, errlen) || need_rank(op, "input", x, 2, err, errlen))
            return -1;
        if (x->dim[0] != dy->dim[0])
            return ir_fail(err, errlen, "%s: dy %s does not fit input %s", op, TYPE_STR(dy),
                           TYPE_STR(x));
        *out = ir_shape2(dy->dim[1], x->dim[1]);
        return 0;
    }
    default: return no_rule(n, err, errlen);
    }
}

/* The loss and its gradient. */
static int infer_loss(const ir_graph *g, const ir_node *n, ir_type *out, char *err, size_t errlen) {
    const char *op = ir_ops[n->op].name;
    if (!(n->fattr[0] >= 0 && n->fattr[0] <= 1))
        return ir_fail(err, errlen, "%s: smoothing must be in [0, 1], got %g", op, n->fattr[0]);
    switch (n->op) {
    case IR_OP_SOFTMAX_CE: {
        const ir_type *x = in_type(g, n, 0), *y = in_type(g, n, 1);
        if (x->ndim != 2 || x->dtype == IR_I32)
            return ir_fail(err, errlen,
                           "softmax_cross_entropy: logits must be [batch, classes], got %s",
                           TYPE_STR(x));
        if (y->ndim != 1 || y->dtype != IR_I32 || y->dim[0] != x->dim[0])
            return ir_fail(err, errlen,
                           "softmax_cross_entropy: labels must be class indices [%" PRId64
                           "]:i32, got %s",
                           x->dim[0], TYPE_STR(y));
        const ir_node *label = &g->nodes[n->input[1]];
        if (label->op == IR_OP_INPUT && label->iattr[0] && label->iattr[0] != x->dim[1])
            return ir_fail(err, errlen,
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
            return ir_fail(err, errlen, "%s: labels %s / dloss %s do not fit logits %s", op,
                           TYPE_STR(y), TYPE_STR(d), TYPE_STR(x));
        *out = *x;
        return 0;
    }
    default: return no_rule(n, err, errlen);
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
                return ir_fail(err, errlen, "%s: shapes differ: %s vs %s", op, TYPE_STR(w),
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
            return ir_fail(err, errlen, "%s: input must be a float tensor, got %s", op,
                           TYPE_STR(x));
        if (need_vector(op, "scale", in_type(g, n, 1), 1, err, errlen)) return -1;
        if (n->op == IR_OP_BN_UNBIAS && !(n->fattr[0] > 1))
            return ir_fail(err, errlen, "bn_unbias: count %g must be more than 1", n->fattr[0]);
        *out = *x;
        return 0;
    }
    case IR_OP_SUMSQ:
        if (in_type(g, n, 0)->dtype == IR_I32)
            return ir_fail(err, errlen, "sumsq: input must be float, got %s",
                           TYPE_STR(in_type(g, n, 0)));
        *out = ir_shape1(1);
        return 0;
    case IR_OP_LARS_LR:
    case IR_OP_LAMB_LR:
    case IR_OP_BIAS_CORRECTION:
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
                return ir_fail(err, errlen, "%s: shapes differ: %s vs %s", op, TYPE_STR(w),
                               TYPE_STR(t));
            if (i >= tensors && need_vector(op, "scalar", t, 1, err, errlen)) return -1;
        }
        *out = *w;
        return 0;
    }
    case IR_OP_ALLREDUCE: {
        const ir_type *x = in_type(g, n, 0);
        if (x->dtype != IR_F32)
            return ir_fail(err, errlen, "allreduce: gradient must be f32, got %s", TYPE_STR(x));
        if (n->iattr[0] < 0 || n->iattr[1] < 0)
            return ir_fail(err, errlen,
                           "allreduce: bucket %" PRId64 " / offset %" PRId64
                           " must not be negative",
                           n->iattr[0], n->iattr[1]);
        *out = *x;
        return 0;
    }
    default: return no_rule(n, err, errlen);
    }
}

int ir_infer_type(const ir_graph *g, const ir_node *n, ir_type *out, char *err, size_t errlen) {
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
    case IR_OP_RELU:
    case IR_OP_ADD:
    case IR_OP_EMA:
    case IR_OP_ASSIGN:
    case IR_OP_RELU_GRAD:
    case IR_OP_ONES_LIKE:
    case IR_OP_SIGMOID:
    case IR_OP_SIGMOID_GRAD:
    case IR_OP_CLIP:
    case IR_OP_CLIP_GRAD:
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
    case IR_OP_DESCEND: return infer_update(g, n, out, err, errlen);
    case IR_OP_TRANSPOSE:
        if (g->nodes[n->input[0]].type.ndim != 4 || g->nodes[n->input[0]].type.dtype == IR_I32)
            return ir_fail(err, errlen, "transpose: input must be [N,C,H,W], got %s",
                           TYPE_STR(&g->nodes[n->input[0]].type));
        *out = g->nodes[n->input[0]].type;
        return 0;
    case IR_OP_COUNT: break;
    }
    return no_rule(n, err, errlen);
}

/* ---- verification ------------------------------------------------------- */

/* Fusion groups: ids in 1..n, never on a source or a view (they compute
 * nothing), each group one contiguous run of nodes, so the group's kernel
 * runs where its nodes stand and the graph order stays the execution
 * order. */
static int verify_groups(const ir_graph *g, char *err, size_t errlen) {
    unsigned char *closed = NULL;
    int prev = 0, rc = 0;
    for (int i = 0; i < g->n && !rc; i++) {
        const ir_node *n = &g->nodes[i];
        int grp = n->group;
        if (grp < 0 || grp > g->n) {
            rc = ir_fail(err, errlen, "node %d: bad fusion group %d", i, grp);
            break;
        }
        if (grp && (ir_is_source(n->op) || ir_is_view(n->op))) {
            rc = ir_fail(err, errlen, "node %d (%s) cannot be in a fusion group", i,
                         ir_ops[n->op].name);
            break;
        }
        if (grp != prev && grp) {
            if (!closed) {
                closed = calloc((size_t)g->n + 1, 1);
                IR_CHECK_ALLOC(closed);
            }
            if (closed[grp])
                rc = ir_fail(err, errlen, "node %d: fusion group %d is not contiguous", i, grp);
            closed[grp] = 1;
        }
        prev = grp;
    }
    free(closed);
    return rc;
}

int ir_is_view(ir_op op) { return op == IR_OP_FLATTEN || op == IR_OP_RESHAPE_LIKE; }

int ir_storage_of(const ir_graph *g, int node) {
    while (node >= 0 && node < g->n &&
           (ir_is_view(g->nodes[node].op) || g->nodes[node].op == IR_OP_ASSIGN))
        node = g->nodes[node].input[0];
    return node;
}

void ir_stored(const ir_graph *g, unsigned char *stored) {
    /* 1 = read by nobody so far; 2 = read from outside its group. */
    for (int i = 0; i < g->n; i++) stored[i] = 1;
    for (int i = 0; i < g->n; i++) {
        const ir_node *n = &g->nodes[i];
        for (int j = 0; j < n->ninputs; j++) {
            int p = n->input[j];
            if (stored[p] == 1) stored[p] = 0;
            if (!g->nodes[p].group || g->nodes[p].group != n->group) stored[p] = 2;
        }
    }
    for (int i = 0; i < g->n; i++) {
        const ir_node *n = &g->nodes[i];
        stored[i] = !n->group || stored[i] != 0 || n->op == IR_OP_ASSIGN ||
                    (n->flags & (IR_FLAG_OUTPUT | IR_FLAG_LOSS | IR_FLAG_GRAD));
    }
}

int ir_num_groups(const ir_graph *g) {
    int m = 0;
    for (int i = 0; i < g->n; i++)
        if (g->nodes[i].group > m) m = g->nodes[i].group;
    return m;
}

static uint64_t hash_i64(uint64_t h, int64_t v) {
    unsigned char b[8];
    for (int i = 0; i < 8; i++) b[i] = (unsigned char)((uint64_t)v >> (8 * i));
    return ir_fnv1a(h, b, 8);
}

uint64_t ir_graph_hash(const ir_graph *g) {
    uint64_t h = hash_i64(IR_FNV1A_INIT, g->n);
    for (int i = 0; i < g->n; i++) {
        const ir_node *n = &g->nodes[i];
        h = hash_i64(h, n->op);
        h = hash_i64(h, n->ninputs);
        for (int j = 0; j < n->ninputs; j++) h = hash_i64(h, n->input[j]);
        for (int j = 0; j < IR_MAX_IATTRS; j++) h = hash_i64(h, n->iattr[j]);
        /* a third float slot only where the op has one: older graphs hash as before */
        for (int j = 0; j < (ir_op_num_fattrs(n->op) > 2 ? IR_MAX_FATTRS : 2); j++) {
            int64_t bits;
            memcpy(&bits, &n->fattr[j], sizeof bits);
            h = hash_i64(h, bits);
        }
        h = hash_i64(h, n->type.ndim);
        h = hash_i64(h, n->type.dtype);
        for (int d = 0; d < n->type.ndim && d < IR_MAX_DIMS; d++) h = hash_i64(h, n->type.dim[d]);
        if (n->flags & IR_FLAG_CNHW) h = hash_i64(h, IR_FLAG_CNHW); /* NCHW graphs hash as before */
        /* Groups decide the kernels; inside a group, flags decide what is
         * stored. Ungrouped graphs hash as they did before fusion existed. */
        if (n->group) {
            h = hash_i64(h, n->group);
            h = hash_i64(h, n->flags);
        }
    }
    return h;
}

/* Source names seen so far: open addressing over node indices, so that
 * verifying a graph stays linear in its nodes (a model may declare
 * thousands of inputs). */
typedef struct {
    int *slot; /* node index + 1; 0 = empty */
    size_t mask;
} name_set;

/* Index of the source already called g->nodes[i].name, else records i and
 * returns -1. */
static int name_set_add(name_set *ns, const ir_graph *g, int i) {
    size_t k = (size_t)ir_fnv1a_str(IR_FNV1A_INIT, g->nodes[i].name) & ns->mask;
    for (; ns->slot[k]; k = (k + 1) & ns->mask)
        if (!strcmp(g->nodes[ns->slot[k] - 1].name, g->nodes[i].name)) return ns->slot[k] - 1;
    ns->slot[k] = i + 1;
    return -1;
}

static int verify_nodes(const ir_graph *g, name_set *names, int *last_read, char *err,
                        size_t errlen);

int ir_op_mixes_layout(ir_op op) {
    return op == IR_OP_CONV || op == IR_OP_CONV_GRAD_DATA || op == IR_OP_CONV_GRAD_WEIGHT ||
           op == IR_OP_GLOBAL_AVGPOOL || op == IR_OP_GLOBAL_AVGPOOL_GRAD || op == IR_OP_TRANSPOSE;
}

static int cnhw(const ir_node *n) { return (n->flags & IR_FLAG_CNHW) != 0; }

int ir_node_layout(const ir_graph *g, int i) {
    const ir_node *n = &g->nodes[i];
    if (n->type.ndim == 4) return cnhw(n);
    for (int k = 0; k < n->ninputs; k++)
        if (g->nodes[n->input[k]].type.ndim == 4) return cnhw(&g->nodes[n->input[k]]);
    return -1;
}

/* IR_FLAG_CNHW where codegen can honour it (ir.h; docs/DESIGN.md §5.11). */
static int verify_layout(const ir_graph *g, int i, char *err, size_t errlen) {
    const ir_node *n = &g->nodes[i];
    const char *op = ir_ops[n->op].name;
    if (cnhw(n) && (n->type.ndim != 4 || ir_is_source(n->op) || n->op == IR_OP_BATCHNORM ||
                    (n->flags & (IR_FLAG_OUTPUT | IR_FLAG_LOSS | IR_FLAG_GRAD))))
        return ir_fail(err, errlen, "node %d (%s): channel-major layout on a %s", i, op,
                       n->type.ndim != 4 ? "tensor not of rank 4" : "source, batchnorm or output");
    if (ir_is_source(n->op)) return 0;
    const ir_node *x = &g->nodes[n->input[0]];
    int shared = ir_is_view(n->op) || n->op == IR_OP_ASSIGN || n->op == IR_OP_ALLREDUCE;
    if (shared && (cnhw(n) != cnhw(x) || (cnhw(x) && !ir_type_same_shape(&n->type, &x->type))))
        return ir_fail(err, errlen, "node %d (%s): a view of %%%d in another layout", i, op,
                       n->input[0]);
    if (n->op == IR_OP_TRANSPOSE && cnhw(n) == cnhw(x))
        return ir_fail(err, errlen, "node %d (transpose): input %%%d already in its layout", i,
                       n->input[0]);
    if (shared || ir_op_mixes_layout(n->op)) return 0;
    int want = ir_node_layout(g, i);
    for (int k = 0; k < n->ninputs; k++) {
        const ir_node *in = &g->nodes[n->input[k]];
        if (in->type.ndim == 4 && cnhw(in) != want)
            return ir_fail(err, errlen, "node %d (%s): input %d (%%%d) is %s, the node %s", i, op,
                           k, n->input[k], cnhw(in) ? "CNHW" : "NCHW", want ? "CNHW" : "NCHW");
    }
    return 0;
}

int ir_verify(const ir_graph *g, char *err, size_t errlen) {
    size_t cap = 16;
    while (cap < (size_t)g->n * 2) cap *= 2;
    name_set names = {calloc(cap, sizeof(int)), cap - 1};
    /* last_read[k]: the last node reading node k, -1 if none (assign order). */
    int *last_read = malloc(sizeof(int) * (size_t)(g->n ? g->n : 1));
    IR_CHECK_ALLOC(names.slot);
    IR_CHECK_ALLOC(last_read);
    for (int i = 0; i < g->n; i++) last_read[i] = -1;
    for (int i = 0; i < g->n; i++)
        for (int k = 0; k < g->nodes[i].ninputs && k < IR_MAX_INPUTS; k++) {
            int in = g->nodes[i].input[k];
            if (in >= 0 && in < g->n) last_read[in] = i;
        }
    int rc = verify_nodes(g, &names, last_read, err, errlen);
    free(names.slot);
    free(last_read);
    return rc;
}

static int verify_nodes(const ir_graph *g, name_set *names, int *last_read, char *err,
                        size_t errlen) {
    int losses = 0;
    for (int i = 0; i < g->n; i++) {
        const ir_node *n = &g->nodes[i];
        if ((unsigned)n->op >= IR_OP_COUNT)
            return ir_fail(err, errlen, "node %d: bad op %d", i, n->op);
        const ir_op_info *info = &ir_ops[n->op];
        if (n->ninputs < info->min_arity || n->ninputs > info->max_arity)
            return ir_fail(err, errlen, "node %d (%s): %d inputs", i, info->name, n->ninputs);
        for (int j = 0; j < n->ninputs; j++)
            if (n->input[j] < 0 || n->input[j] >= i)
                return ir_fail(err, errlen, "node %d (%s): input %d = %d breaks topological order",
                               i, info->name, j, n->input[j]);
        if (n->type.ndim < 1 || n->type.ndim > IR_MAX_DIMS)
            return ir_fail(err, errlen, "node %d (%s): rank %d", i, info->name, n->type.ndim);
        for (int d = 0; d < n->type.ndim; d++)
            if (n->type.dim[d] <= 0 || n->type.dim[d] > (1ll << 40))
                return ir_fail(err, errlen, "node %d (%s): dimension %d is %" PRId64, i, info->name,
                               d, n->type.dim[d]);
        if (memchr(n->name, 0, sizeof n->name) == NULL)
            return ir_fail(err, errlen, "node %d: name not terminated", i);
        if (ir_is_source(n->op)) {
            if (!n->name[0])
                return ir_fail(err, errlen, "node %d (%s): source without a name", i, info->name);
            if (name_set_add(names, g, i) >= 0)
                return ir_fail(err, errlen, "node %d: duplicate name '%s'", i, n->name);
            if (n->op != IR_OP_INPUT &&
                (n->iattr[0] < IR_INIT_ZERO || n->iattr[0] > IR_INIT_XAVIER))
                return ir_fail(err, errlen, "node %d: bad initialiser %" PRId64, i, n->iattr[0]);
        } else {
            ir_type t;
            char why[200];
            if (ir_infer_type(g, n, &t, why, sizeof why))
                return ir_fail(err, errlen, "node %d (%s): %s", i, info->name, why);
            /* Shape rules give float results as f32; the storage type of a
             * float value (f32 or bf16) is the precision pass's choice, except
             * where bytes are shared: a view or an assign has its storage's
             * type, an all-reduced gradient is f32. */
            if (!ir_type_same_shape(&t, &n->type))
                return ir_fail(err, errlen, "node %d (%s): type %s, shape rule says %s", i,
                               info->name, TYPE_STR(&n->type), TYPE_STR(&t));
            int shared = ir_is_view(n->op) || n->op == IR_OP_ASSIGN || n->op == IR_OP_ALLREDUCE;
            if (shared && n->type.dtype != g->nodes[n->input[0]].type.dtype)
                return ir_fail(err, errlen, "node %d (%s): type %s differs from its storage's %s",
                               i, info->name, TYPE_STR(&n->type),
                               TYPE_STR(&g->nodes[n->input[0]].type));
        }
        if (n->op == IR_OP_ASSIGN &&
            last_read[n->input[0]] > i) { /* a write follows every read of its target */
            int j = last_read[n->input[0]];
            return ir_fail(err, errlen, "node %d (%s) reads %%%d after assign %%%d", j,
                           ir_ops[g->nodes[j].op].name, n->input[0], i);
        }
        if (verify_layout(g, i, err, errlen)) return -1;
        if (n->flags & IR_FLAG_LOSS) losses++;
    }
    if (losses > 1) return ir_fail(err, errlen, "%d loss nodes", losses);
    return verify_groups(g, err, errlen);
}

int ir_loss_node(const ir_graph *g) {
    for (int i = 0; i < g->n; i++)
        if (g->nodes[i].flags & IR_FLAG_LOSS) return i;
    return -1;
}

int64_t ir_num_params(const ir_graph *g) {
    int64_t total = 0;
    for (int i = 0; i < g->n; i++)
        if (g->nodes[i].op == IR_OP_PARAM) total += ir_numel(&g->nodes[i].type);
    return total;
}

/* ---- text, Graphviz, summary -------------------------------------------- */

static const char *init_name(int64_t init) {
    return init == IR_INIT_ZERO ? "zero" : init == IR_INIT_ONE ? "one" : "xavier";
}

/* The shortest %.Ng that strtod reads back as exactly v: "0.9", not
 * "0.90000000000000002", yet every bit kept (ir/text.c reads it). */
void ir_print_double(double v, FILE *f) {
    char buf[40];
    for (int prec = 1; prec <= 17; prec++) {
        snprintf(buf, sizeof buf, "%.*g", prec, v);
        if (strtod(buf, NULL) == v) break;
    }
    fputs(buf, f);
}

/* A name as a plain word when it is one (letters, digits, _ . / : + -),
 * else quoted with \" \\ and \xHH escapes; ir/text.c reads both. */
static int plain_char(unsigned char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
           strchr("_./:+-", c) != NULL;
}

void ir_print_name(const char *s, int quote, FILE *f) {
    int plain = s[0] != 0;
    for (const unsigned char *p = (const unsigned char *)s; *p && plain; p++)
        plain = plain_char(*p);
    if (plain && !quote) {
        fputs(s, f);
        return;
    }
    fputc('"', f);
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        if (*p == '"' || *p == '\\')
            fprintf(f, "\\%c", *p);
        else if (*p < 0x20 || *p >= 0x7f)
            fprintf(f, "\\x%02x", *p);
        else
            fputc(*p, f);
    }
    fputc('"', f);
}

static void print_attrs(const ir_node *n, FILE *f) {
    char name[32];
    for (int i = 0; i < ir_op_num_iattrs(n->op); i++) {
        ir_op_attr_name(n->op, 0, i, name, sizeof name);
        if (ir_is_persistent(n->op))
            fprintf(f, " init=%s", init_name(n->iattr[0]));
        else if (n->op == IR_OP_INPUT && n->iattr[0] == 0)
            continue;
        else
            fprintf(f, " %s=%" PRId64, name, n->iattr[i]);
    }
    for (int i = 0; i < ir_op_num_fattrs(n->op); i++) {
        fprintf(f, " %s=", ir_op_attr_name(n->op, 1, i, name, sizeof name));
        ir_print_double(n->fattr[i], f);
    }
}

static const char *const flag_names[] = {"output", "loss", "grad"};

/* " [output,loss]": every flag set, unknown bits as hex. */
static void print_flags(unsigned flags, FILE *f) {
    if (!flags) return;
    const char *sep = " [";
    for (unsigned b = 0; b < 3; b++)
        if (flags & (1u << b)) {
            fprintf(f, "%s%s", sep, flag_names[b]);
            sep = ",";
        }
    if (flags >> 3) fprintf(f, "%s0x%x", sep, flags & ~7u);
    fputc(']', f);
}

/* "bn_mean+bn_var+bn_apply+relu": the ops of the group starting at node i
 * (a contiguous run), into buf. */
static const char *group_ops(const ir_graph *g, int i, char *buf, size_t n) {
    size_t used = 0;
    buf[0] = 0;
    for (int j = i; j < g->n && g->nodes[j].group == g->nodes[i].group && used < n; j++)
        used += (size_t)snprintf(buf + used, n - used, "%s%s", j > i ? " " : "",
                                 ir_ops[g->nodes[j].op].name);
    return buf;
}

void ir_dump(const ir_graph *g, FILE *f) {
    char buf[96], ops[512];
    fprintf(f, "# graph: %d nodes\n", g->n);
    for (int i = 0; i < g->n; i++) {
        const ir_node *n = &g->nodes[i];
        if (n->group && (i == 0 || g->nodes[i - 1].group != n->group)) {
            int len = 0;
            while (i + len < g->n && g->nodes[i + len].group == n->group) len++;
            fprintf(f, "# kernel g%d: %d ops: %s\n", n->group, len,
                    group_ops(g, i, ops, sizeof ops));
        }
        fprintf(f, "%%%d = %s", i, ir_ops[n->op].name);
        if (ir_is_source(n->op)) {
            fputc(' ', f);
            ir_print_name(n->name, 1, f);
        }
        for (int j = 0; j < n->ninputs; j++) fprintf(f, " %%%d", n->input[j]);
        print_attrs(n, f);
        fprintf(f, " : %s", ir_type_str(&n->type, buf, sizeof buf));
        if (n->flags & IR_FLAG_CNHW) fprintf(f, " cnhw");
        if (n->group) fprintf(f, " @g%d", n->group);
        if (n->line || n->col) fprintf(f, " loc(%d:%d)", n->line, n->col);
        print_flags(n->flags & ~(unsigned)IR_FLAG_CNHW, f); /* that one is " cnhw" */
        if (!ir_is_source(n->op) && n->name[0]) {
            fputs("  # ", f);
            ir_print_name(n->name, 0, f);
        }
        fputc('\n', f);
    }
}

void ir_dot(const ir_graph *g, const char *title, FILE *f) {
    char buf[96], ops[512];
    fprintf(f, "digraph \"%s\" {\n  rankdir=TB;\n  node [fontname=\"monospace\" fontsize=10];\n",
            title ? title : "dpc");
    for (int i = 0; i < g->n; i++) {
        const ir_node *n = &g->nodes[i];
        /* A fusion group is a cluster labelled with the ops its kernel holds. */
        int first = n->group && (i == 0 || g->nodes[i - 1].group != n->group);
        int last = n->group && (i + 1 == g->n || g->nodes[i + 1].group != n->group);
        if (first)
            fprintf(f,
                    "  subgraph cluster_g%d {\n    label=\"kernel g%d: %s\";\n    style=filled;"
                    " fillcolor=\"#e8f0ff\"; fontname=\"monospace\"; fontsize=10;\n",
                    n->group, n->group, group_ops(g, i, ops, sizeof ops));
        const char *shape = ir_is_source(n->op) ? "note" : "box";
        const char *color = n->op == IR_OP_PARAM   ? "lightyellow"
                            : n->op == IR_OP_STATE ? "lightgrey"
                            : n->op == IR_OP_INPUT ? "lightblue"
                                                   : "white";
        fprintf(f, "  n%d [shape=%s style=filled fillcolor=%s label=\"%%%d %s\\n%s%s%s\"];\n", i,
                shape, color, i, ir_ops[n->op].name, n->name, n->name[0] ? "\\n" : "",
                ir_type_str(&n->type, buf, sizeof buf));
        if (last) fprintf(f, "  }\n");
    }
    for (int i = 0; i < g->n; i++)
        for (int j = 0; j < g->nodes[i].ninputs; j++)
            fprintf(f, "  n%d -> n%d;\n", g->nodes[i].input[j], i);
    fprintf(f, "}\n");
}

void ir_summary(const ir_graph *g, FILE *f) {
    char shape[96];
    fprintf(f, "%-5s %-22s %-26s %-20s %12s\n", "node", "op", "name", "output", "params");
    for (int i = 0; i < g->n; i++) {
        const ir_node *n = &g->nodes[i];
        if (ir_is_source(n->op) && n->op != IR_OP_INPUT) continue;
        int64_t params = 0;
        for (int j = 0; j < n->ninputs; j++) {
            const ir_node *in = &g->nodes[n->input[j]];
            if (in->op == IR_OP_PARAM) params += ir_numel(&in->type);
        }
        fprintf(f, "%-5d %-22s %-26s %-20s %12" PRId64 "\n", i, ir_ops[n->op].name,
                n->name[0] ? n->name : "-", ir_type_str(&n->type, shape, sizeof shape), params);
    }
    fprintf(f, "parameters: %" PRId64 "\n", ir_num_params(g));
}

/* ---- training schedule -------------------------------------------------- */

void ir_train_defaults(ir_train *t) {
    memset(t, 0, sizeof *t);
    t->batch = 128;
    t->epochs = 1;
    t->init_magnitude = 2.24;
    t->optimizer = IR_OPT_SGD;
    t->momentum = 0.9;
    t->wd = 0.0001;
    t->eta = 0.001, t->eps = 1e-9, t->beta1 = 0.9, t->beta2 = 0.999;
    t->lr_steps = 1;
    t->lr_epoch[0] = 0;
    t->lr_value[0] = 0.1;
    t->lr_scaling = IR_LR_SCALING_NONE;
    t->reference_batch = 128;
    t->warmup_epochs = 0;
    t->lr_kind = IR_LR_DICT;
    t->lr_power = 2;
    snprintf(t->dataset, sizeof t->dataset, "cifar10");
    for (int c = 0; c < 3; c++) t->std[c] = 1.0;
    t->eval_batch = 128;
}

const char *ir_lr_kind_name(ir_lr_kind k) {
    return k == IR_LR_COSINE ? "cosine" : k == IR_LR_POLY ? "poly" : "dict";
}

const char *const ir_lr_scaling_names[IR_LR_SCALING_SQRT + 1] = {"none", "linear", "sqrt"};

int ir_lr_scaling_parse(const char *name) {
    for (int i = 0; i <= IR_LR_SCALING_SQRT; i++)
        if (!strcmp(name, ir_lr_scaling_names[i])) return i;
    return -1;
}

const char *const ir_optimizer_names[IR_OPT_ADAMW + 1] = {"sgd", "lars", "lamb", "adamw"};

void ir_train_optim_defaults(ir_train *t) {
    ir_train d;
    ir_train_defaults(&d);
    t->nesterov = d.nesterov, t->exclude = d.exclude;
    t->eta = d.eta, t->eps = d.eps, t->beta1 = d.beta1, t->beta2 = d.beta2;
}

int ir_train_optim_is_default(const ir_train *t) {
    ir_train d = *t;
    ir_train_optim_defaults(&d);
    return d.nesterov == t->nesterov && d.exclude == t->exclude && d.eta == t->eta &&
           d.eps == t->eps && d.beta1 == t->beta1 && d.beta2 == t->beta2;
}

int ir_train_check(const ir_train *t, char *err, size_t errlen) {
    if (t->batch <= 0) return ir_fail(err, errlen, "batch must be positive, got %d", t->batch);
    if (t->epochs <= 0) return ir_fail(err, errlen, "epochs must be positive, got %d", t->epochs);
    if (t->eval_batch <= 0)
        return ir_fail(err, errlen, "eval batch must be positive, got %d", t->eval_batch);
    if (!(t->init_magnitude > 0))
        return ir_fail(err, errlen, "init magnitude must be positive, got %g", t->init_magnitude);
    if ((unsigned)t->optimizer > IR_OPT_ADAMW)
        return ir_fail(err, errlen, "unknown optimizer %d", t->optimizer);
    if (!(t->momentum >= 0 && t->momentum < 1))
        return ir_fail(err, errlen, "momentum must be in [0, 1), got %g", t->momentum);
    if (!(t->wd >= 0)) return ir_fail(err, errlen, "weight decay must be >= 0, got %g", t->wd);
    if (t->nesterov != 0 && t->nesterov != 1)
        return ir_fail(err, errlen, "nesterov must be 0 or 1, got %d", t->nesterov);
    if (t->exclude & ~(IR_EXCLUDE_BN | IR_EXCLUDE_BIAS))
        return ir_fail(err, errlen, "unknown exclude classes %#x", (unsigned)t->exclude);
    if (!(t->eta > 0 && t->eta <= 1))
        return ir_fail(err, errlen, "eta must be in (0, 1], got %g", t->eta);
    if (!(t->eps > 0 && t->eps <= 1))
        return ir_fail(err, errlen, "eps must be in (0, 1], got %g", t->eps);
    if (!(t->beta1 >= 0 && t->beta1 < 1))
        return ir_fail(err, errlen, "beta1 must be in [0, 1), got %g", t->beta1);
    if (!(t->beta2 >= 0 && t->beta2 < 1))
        return ir_fail(err, errlen, "beta2 must be in [0, 1), got %g", t->beta2);
    if (t->lr_steps < 1 || t->lr_steps > IR_MAX_LR_STEPS)
        return ir_fail(err, errlen, "lr schedule needs 1 to %d entries, got %d", IR_MAX_LR_STEPS,
                       t->lr_steps);
    if (t->lr_epoch[0] != 0)
        return ir_fail(err, errlen, "lr schedule must start at epoch 0, starts at %d",
                       t->lr_epoch[0]);
    for (int i = 0; i < t->lr_steps; i++) {
        if (!(t->lr_value[i] >= 0))
            return ir_fail(err, errlen, "lr at epoch %d must not be negative, got %.10g",
                           t->lr_epoch[i], t->lr_value[i]);
        if (t->lr_value[i] > IR_MAX_LR)
            return ir_fail(err, errlen, "lr at epoch %d must be at most 1e6, got %.10g",
                           t->lr_epoch[i], t->lr_value[i]);
        if (i && t->lr_epoch[i] <= t->lr_epoch[i - 1])
            return ir_fail(err, errlen, "lr schedule epochs must increase: %d after %d",
                           t->lr_epoch[i], t->lr_epoch[i - 1]);
    }
    if (t->lr_kind != IR_LR_DICT && t->lr_kind != IR_LR_COSINE && t->lr_kind != IR_LR_POLY)
        return ir_fail(err, errlen, "unknown lr curve %d", t->lr_kind);
    if (t->lr_kind != IR_LR_DICT && t->lr_steps != 1)
        return ir_fail(err, errlen, "a %s lr has one base value, got %d",
                       ir_lr_kind_name(t->lr_kind), t->lr_steps);
    if (!(t->lr_final >= 0 && t->lr_final <= IR_MAX_LR))
        return ir_fail(err, errlen, "final lr must be in [0, 1e6], got %.10g", t->lr_final);
    if (t->lr_kind == IR_LR_POLY && !(t->lr_power > 0 && t->lr_power <= 100))
        return ir_fail(err, errlen, "poly power must be in (0, 100], got %.10g", t->lr_power);
    if ((unsigned)t->lr_scaling > IR_LR_SCALING_SQRT)
        return ir_fail(err, errlen, "unknown lr scaling %d", t->lr_scaling);
    if (t->reference_batch <= 0)
        return ir_fail(err, errlen, "reference batch must be positive, got %d", t->reference_batch);
    if (t->warmup_epochs < 0 || t->warmup_epochs > t->epochs)
        return ir_fail(err, errlen, "warmup of %d epochs does not fit %d epochs of training",
                       t->warmup_epochs, t->epochs);
    if (memchr(t->dataset, 0, sizeof t->dataset) == NULL)
        return ir_fail(err, errlen, "dataset name not terminated");
    if (t->pad < 0 || t->pad > 64)
        return ir_fail(err, errlen, "pad must be in 0..64, got %d", t->pad);
    if (t->random_crop < 0 || t->random_crop > 4096)
        return ir_fail(err, errlen, "random_crop must be in 0..4096, got %d", t->random_crop);
    for (int c = 0; c < 3; c++)
        if (!(t->std[c] > 0) || t->mean[c] != t->mean[c])
            return ir_fail(err, errlen, "normalize std must be positive, got %g", t->std[c]);
    return 0;
}

void ir_train_print(const ir_train *t, FILE *f) {
    fprintf(f, "  batch %d per device, %d epochs, eval batch %d\n", t->batch, t->epochs,
            t->eval_batch);
    fprintf(f, "  init xavier(magnitude=%g)\n", t->init_magnitude);
    static const char *const exclude[] = {"", "bn", "bias", "bn, bias"};
    switch (t->optimizer) {
    case IR_OPT_SGD:
        fprintf(f, "  optimizer sgd(momentum=%g, wd=%g%s)\n", t->momentum, t->wd,
                t->nesterov ? ", nesterov=true" : "");
        break;
    case IR_OPT_LARS:
        fprintf(f, "  optimizer lars(momentum=%g, wd=%g, eta=%g, eps=%g, exclude=(%s))\n",
                t->momentum, t->wd, t->eta, t->eps, exclude[t->exclude & 3]);
        break;
    default:
        fprintf(f, "  optimizer %s(beta1=%g, beta2=%g, eps=%g, wd=%g, exclude=(%s))\n",
                ir_optimizer_names[t->optimizer], t->beta1, t->beta2, t->eps, t->wd,
                exclude[t->exclude & 3]);
    }
    if (t->lr_kind == IR_LR_COSINE)
        fprintf(f, "  lr cosine(base=%g, final=%g)\n", t->lr_value[0], t->lr_final);
    else if (t->lr_kind == IR_LR_POLY)
        fprintf(f, "  lr poly(base=%g, power=%g, final=%g)\n", t->lr_value[0], t->lr_power,
                t->lr_final);
    else {
        fprintf(f, "  lr {");
        for (int i = 0; i < t->lr_steps; i++)
            fprintf(f, "%s%d: %g", i ? ", " : "", t->lr_epoch[i], t->lr_value[i]);
        fprintf(f, "}\n");
    }
    if (t->lr_scaling != IR_LR_SCALING_NONE)
        fprintf(f, "  lr_scaling %s(reference_batch=%d)\n", ir_lr_scaling_names[t->lr_scaling],
                t->reference_batch);
    else
        fprintf(f, "  lr_scaling none\n");
    fprintf(f, "  warmup %d epochs\n", t->warmup_epochs);
    fprintf(f, "  data %s {", t->dataset);
    if (t->pad) fprintf(f, " pad %d;", t->pad);
    if (t->random_crop) fprintf(f, " random_crop %d;", t->random_crop);
    if (t->random_mirror) fprintf(f, " random_mirror;");
    if (t->normalize)
        fprintf(f, " normalize mean(%g, %g, %g) std(%g, %g, %g)", t->mean[0], t->mean[1],
                t->mean[2], t->std[0], t->std[1], t->std[2]);
    fprintf(f, " }\n");
}
