/* passes/autodiff.c — reverse-mode differentiation of the lowered graph.
 *
 * Starting from the node flagged IR_FLAG_LOSS (per-sample losses [N]) and
 * seeded with ones_like(loss), so the result is the gradient of the SUMMED
 * loss as MXNet's backward() computes it, the pass walks the forward nodes
 * in reverse order and appends backward nodes after them. Only "live" nodes
 * get gradients: those that depend on a parameter and lead to the loss; the
 * image, the labels and anything computed from them alone cost nothing.
 *
 * Each forward op has one rule in a table indexed by ir_op. A rule receives
 * the node and its incoming gradient dy and contributes a gradient to each
 * live input; several contributions to one node are summed with add.
 *
 * BatchNorm arrives lowered as bn_apply(x, bn_mean(x), bn_var(x, mean), ...)
 * and is differentiated as a whole with the batch-statistics formula
 * (bn_grad_gamma, bias_grad, bn_grad_data) rather than through bn_mean and
 * bn_var separately: fewer passes over x, and the same formula every
 * framework uses.
 *
 * Each parameter ends with exactly one gradient node of its own, flagged
 * IR_FLAG_GRAD and named "PARAM.grad": partitioning all-reduces that node
 * and the optimizer reads it. Where the gradient would be a node shared
 * with something else (bias_add and add pass dy through unchanged) a
 * reshape_like copy gives the parameter its own.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/err.h"
#include "passes/passes.h"

typedef struct {
    ir_graph *g;
    unsigned char *live;  /* depends on a param and reaches the loss */
    int *grad;            /* node -> its accumulated gradient node, -1 none yet */
    unsigned char *owned; /* grad[i] was created for node i alone */
    int nfwd;             /* nodes of the forward graph: the ones before the first backward */
    char *err;
    size_t errlen;
} autodiff;

/* Appends a backward node computed for forward node `from`, whose source
 * position it inherits. Returns its index, or -1 with err set. */
static int emit(autodiff *A, int from, ir_op op, const int *in, int nin, const int64_t *iattr,
                const double *fattr) {
    char why[200];
    int id = ir_add_node(A->g, op, in, nin, iattr, fattr, why, sizeof why);
    if (id < 0) {
        snprintf(A->err, A->errlen, "autodiff: gradient of node %d (%s): %s", from,
                 ir_ops[A->g->nodes[from].op].name, why);
        return -1;
    }
    A->g->nodes[id].line = A->g->nodes[from].line;
    A->g->nodes[id].col = A->g->nodes[from].col;
    return id;
}

/* Adds gradient node d to target's gradient. `own` says d was made for
 * target alone (a pass-through dy is not). */
static int contribute(autodiff *A, int target, int d, int own) {
    if (d < 0) return -1;
    if (!A->live[target]) return 0;
    if (A->grad[target] < 0) {
        A->grad[target] = d;
        A->owned[target] = (unsigned char)own;
        return 0;
    }
    int sum = emit(A, target, IR_OP_ADD, (int[]){A->grad[target], d}, 2, NULL, NULL);
    if (sum < 0) return -1;
    A->grad[target] = sum;
    A->owned[target] = 1;
    return 0;
}

/* ---- gradient rules -------------------------------------------------------------
 * Each takes the forward node by value: emitting may move the node array. */

typedef int (*grad_rule)(autodiff *A, int i, ir_node n, int dy);

static int grad_conv(autodiff *A, int i, ir_node n, int dy) {
    int x = n.input[0], w = n.input[1];
    const ir_type *xt = &A->g->nodes[x].type;
    int64_t k = n.iattr[0], s = n.iattr[1], p = n.iattr[2], groups = n.iattr[3];
    if (A->live[x] && contribute(A, x,
                                 emit(A, i, IR_OP_CONV_GRAD_DATA, (int[]){dy, w}, 2,
                                      (int64_t[]){k, s, p, xt->dim[2], xt->dim[3], groups}, NULL),
                                 1))
        return -1;
    if (A->live[w] &&
        contribute(A, w, emit(A, i, IR_OP_CONV_GRAD_WEIGHT, (int[]){dy, x}, 2, n.iattr, NULL), 1))
        return -1;
    return 0;
}

static int grad_bias_add(autodiff *A, int i, ir_node n, int dy) {
    if (contribute(A, n.input[0], dy, 0)) return -1;
    if (A->live[n.input[1]] &&
        contribute(A, n.input[1],
                   emit(A, i, n.op == IR_OP_BIAS_ADD ? IR_OP_BIAS_GRAD : IR_OP_SUM_LEADING, &dy, 1,
                        NULL, NULL),
                   1))
        return -1;
    return 0;
}

static int grad_relu(autodiff *A, int i, ir_node n, int dy) {
    return contribute(A, n.input[0], emit(A, i, IR_OP_RELU_GRAD, (int[]){dy, i}, 2, NULL, NULL), 1);
}

static int grad_add(autodiff *A, int i, ir_node n, int dy) {
    (void)i;
    if (contribute(A, n.input[0], dy, 0)) return -1;
    return contribute(A, n.input[1], dy, 0);
}

static int grad_maxpool(autodiff *A, int i, ir_node n, int dy) {
    return contribute(A, n.input[0],
                      emit(A, i, IR_OP_MAXPOOL_GRAD, (int[]){dy, n.input[0]}, 2, n.iattr, NULL), 1);
}

static int grad_avgpool(autodiff *A, int i, ir_node n, int dy) {
    const ir_type *xt = &A->g->nodes[n.input[0]].type;
    int64_t attrs[] = {n.iattr[0], n.iattr[1], n.iattr[2], xt->dim[2], xt->dim[3]};
    return contribute(A, n.input[0], emit(A, i, IR_OP_AVGPOOL_GRAD, &dy, 1, attrs, NULL), 1);
}

static int grad_global_avgpool(autodiff *A, int i, ir_node n, int dy) {
    const ir_type *xt = &A->g->nodes[n.input[0]].type;
    int64_t attrs[] = {xt->dim[2], xt->dim[3]};
    return contribute(A, n.input[0], emit(A, i, IR_OP_GLOBAL_AVGPOOL_GRAD, &dy, 1, attrs, NULL), 1);
}

static int grad_flatten(autodiff *A, int i, ir_node n, int dy) {
    return contribute(A, n.input[0],
                      emit(A, i, IR_OP_RESHAPE_LIKE, (int[]){dy, n.input[0]}, 2, NULL, NULL), 1);
}

/* c = op(a)·op(b): da = dc·op(b)ᵀ, or op(b)·dcᵀ where a is read
 * transposed; db = op(a)ᵀ·dc, or dcᵀ·op(a) where b is. */
static int grad_matmul(autodiff *A, int i, ir_node n, int dy) {
    int a = n.input[0], b = n.input[1];
    int64_t ta = n.iattr[0], tb = n.iattr[1];
    if (A->live[a] && contribute(A, a,
                                 emit(A, i, IR_OP_MATMUL, (int[]){ta ? b : dy, ta ? dy : b}, 2,
                                      (int64_t[]){ta ? tb : 0, ta ? 1 : !tb}, NULL),
                                 1))
        return -1;
    if (A->live[b] && contribute(A, b,
                                 emit(A, i, IR_OP_MATMUL, (int[]){tb ? dy : a, tb ? a : dy}, 2,
                                      (int64_t[]){tb ? 1 : !ta, tb ? ta : 0}, NULL),
                                 1))
        return -1;
    return 0;
}

static int grad_dense(autodiff *A, int i, ir_node n, int dy) {
    int x = n.input[0], w = n.input[1];
    if (A->live[x] &&
        contribute(A, x, emit(A, i, IR_OP_DENSE_GRAD_DATA, (int[]){dy, w}, 2, NULL, NULL), 1))
        return -1;
    if (A->live[w] &&
        contribute(A, w, emit(A, i, IR_OP_DENSE_GRAD_WEIGHT, (int[]){dy, x}, 2, NULL, NULL), 1))
        return -1;
    return 0;
}

static int grad_softmax_ce(autodiff *A, int i, ir_node n, int dy) {
    int logits = n.input[0], label = n.input[1];
    return contribute(A, logits,
                      emit(A, i, IR_OP_SOFTMAX_CE_GRAD, (int[]){logits, label, dy}, 3, NULL,
                           (double[]){n.fattr[0]}),
                      1);
}

/* The replicas' mean of a backward sum, as lower.c averages the forward
 * statistics: bn_grad_data's 1/M then makes it the global batch's mean. */
static int replica_mean(autodiff *A, int i, int sum, int replica_scale) {
    char why[200];
    int mean = pass_replica_mean(A->g, sum, replica_scale, A->g->nodes[i].line, A->g->nodes[i].col,
                                 why, sizeof why);
    if (mean < 0)
        snprintf(A->err, A->errlen, "autodiff: gradient of node %d (%s): %s", i,
                 ir_ops[A->g->nodes[i].op].name, why);
    return mean;
}

/* bn_apply(x, m, v, gamma, beta) with m = bn_mean(x), v = bn_var(x, m),
 * each possibly synchronised over the replicas (both or neither): the
 * statistics depend on x, and the fused formula accounts for that. With
 * synchronised statistics bn_grad_data reads the replicas' means of
 * dgamma and dbeta; the parameters' own gradients stay the local sums,
 * which partition all-reduces like any other. Any other statistics
 * (running ones, or shared with other readers) would need a rule that
 * treats them as independent inputs, which no graph needs. */
static int grad_bn_apply(autodiff *A, int i, ir_node n, int dy) {
    int x = n.input[0], m = n.input[1], v = n.input[2], gamma = n.input[3], beta = n.input[4];
    int rs_m = -1, rs_v = -1;
    int ml = pass_synced_stat(A->g, m, &rs_m), vl = pass_synced_stat(A->g, v, &rs_v);
    int sync = ml >= 0 && vl >= 0;
    if (!sync) ml = m, vl = v;
    const ir_node *mn = &A->g->nodes[ml], *vn = &A->g->nodes[vl];
    if (mn->op != IR_OP_BN_MEAN || mn->input[0] != x || vn->op != IR_OP_BN_VAR ||
        vn->input[0] != x || vn->input[1] != m || (sync && rs_m != rs_v)) {
        snprintf(A->err, A->errlen,
                 "autodiff: bn_apply '%s' (node %d) does not use the batch statistics of its "
                 "input; only training-mode BatchNorm has a gradient rule",
                 n.name, i);
        return -1;
    }
    double eps = n.fattr[0];
    int need_dx = A->live[x];
    int dgamma = -1, dbeta = -1;
    if (need_dx || A->live[gamma]) {
        dgamma = emit(A, i, IR_OP_BN_GRAD_GAMMA, (int[]){dy, x, m, v}, 4, NULL, &eps);
        if (dgamma < 0) return -1;
    }
    if (need_dx || A->live[beta]) {
        dbeta = emit(A, i, IR_OP_BIAS_GRAD, &dy, 1, NULL, NULL);
        if (dbeta < 0) return -1;
    }
    if (need_dx) {
        int dg = sync ? replica_mean(A, i, dgamma, rs_m) : dgamma;
        int db = sync && dg >= 0 ? replica_mean(A, i, dbeta, rs_m) : dbeta;
        if (dg < 0 || db < 0 ||
            contribute(
                A, x,
                emit(A, i, IR_OP_BN_GRAD_DATA, (int[]){dy, x, m, v, gamma, dg, db}, 7, NULL, &eps),
                1))
            return -1;
    }
    /* dgamma and dbeta are also read by bn_grad_data, but they are each made
     * for their parameter alone: no copy needed. */
    if (A->live[gamma] && contribute(A, gamma, dgamma, 1)) return -1;
    if (A->live[beta] && contribute(A, beta, dbeta, 1)) return -1;
    return 0;
}

/* dy·y·(1-y) from the sigmoid's output: x need not be kept. */
static int grad_sigmoid(autodiff *A, int i, ir_node n, int dy) {
    return contribute(A, n.input[0], emit(A, i, IR_OP_SIGMOID_GRAD, (int[]){dy, i}, 2, NULL, NULL),
                      1);
}

/* dy·(1-y²) from the tanh's output, as the sigmoid's. */
static int grad_tanh(autodiff *A, int i, ir_node n, int dy) {
    return contribute(A, n.input[0], emit(A, i, IR_OP_TANH_GRAD, (int[]){dy, i}, 2, NULL, NULL), 1);
}

/* From the input: gelu is not monotonic, so its output does not tell x. */
static int grad_gelu(autodiff *A, int i, ir_node n, int dy) {
    ir_op op = n.op == IR_OP_GELU ? IR_OP_GELU_GRAD : IR_OP_GELU_TANH_GRAD;
    return contribute(A, n.input[0], emit(A, i, op, (int[]){dy, n.input[0]}, 2, NULL, NULL), 1);
}

/* The row statistics once, for the data and gamma gradients; beta's is
 * dy summed over the rows. */
static int grad_layernorm(autodiff *A, int i, ir_node n, int dy) {
    int x = n.input[0], gamma = n.input[1], beta = n.input[2];
    int st = emit(A, i, IR_OP_LAYERNORM_STATS, &x, 1, NULL, n.fattr);
    if (st < 0) return -1;
    if (A->live[x] &&
        contribute(A, x,
                   emit(A, i, IR_OP_LAYERNORM_GRAD_DATA, (int[]){dy, x, st, gamma}, 4, NULL, NULL),
                   1))
        return -1;
    if (A->live[gamma] &&
        contribute(A, gamma,
                   emit(A, i, IR_OP_LAYERNORM_GRAD_GAMMA, (int[]){dy, x, st}, 3, NULL, NULL), 1))
        return -1;
    if (A->live[beta] && contribute(A, beta, emit(A, i, IR_OP_SUM_LEADING, &dy, 1, NULL, NULL), 1))
        return -1;
    return 0;
}

/* y·(dy - sum(dy·y)) per row, from the output as the sigmoid's. */
static int grad_softmax(autodiff *A, int i, ir_node n, int dy) {
    return contribute(A, n.input[0], emit(A, i, IR_OP_SOFTMAX_GRAD, (int[]){dy, i}, 2, NULL, NULL),
                      1);
}

/* From the input, not the output: with MXNet's inclusive bounds, an output
 * equal to lo cannot tell x = lo (dy passes) from x < lo (it does not). */
static int grad_clip(autodiff *A, int i, ir_node n, int dy) {
    return contribute(A, n.input[0],
                      emit(A, i, IR_OP_CLIP_GRAD, (int[]){dy, n.input[0]}, 2, NULL, n.fattr), 1);
}

static int grad_mul(autodiff *A, int i, ir_node n, int dy) {
    int a = n.input[0], b = n.input[1];
    if (A->live[a] && contribute(A, a, emit(A, i, IR_OP_MUL, (int[]){dy, b}, 2, NULL, NULL), 1))
        return -1;
    if (A->live[b] && contribute(A, b, emit(A, i, IR_OP_MUL, (int[]){dy, a}, 2, NULL, NULL), 1))
        return -1;
    return 0;
}

/* y = x·s[n,c]: dx = dy·s[n,c]; ds[n,c] = the plane's sum of dy·x, in s's
 * shape ([N,C,1,1] a view of the [N,C] sums). */
static int grad_mul_channel(autodiff *A, int i, ir_node n, int dy) {
    int x = n.input[0], s = n.input[1];
    if (A->live[x] &&
        contribute(A, x, emit(A, i, IR_OP_MUL_CHANNEL, (int[]){dy, s}, 2, NULL, NULL), 1))
        return -1;
    if (!A->live[s]) return 0;
    int d = emit(A, i, IR_OP_PLANE_DOT, (int[]){dy, x}, 2, NULL, NULL);
    if (d >= 0 && A->g->nodes[s].type.ndim != 2)
        d = emit(A, i, IR_OP_RESHAPE_LIKE, (int[]){d, s}, 2, NULL, NULL);
    return contribute(A, s, d, 1);
}

/* Each input's gradient is its part of dy along the axis (channel_slice
 * for the channels, as before slice existed). */
static int grad_concat(autodiff *A, int i, ir_node n, int dy) {
    int64_t off = 0, axis = n.iattr[0];
    for (int k = 0; k < n.ninputs; k++) {
        int x = n.input[k];
        int64_t c = A->g->nodes[x].type.dim[axis];
        int d = !A->live[x] ? 0
                : axis == 1 ? emit(A, i, IR_OP_CHANNEL_SLICE, &dy, 1, (int64_t[]){off, c}, NULL)
                            : emit(A, i, IR_OP_SLICE, &dy, 1, (int64_t[]){axis, off, c}, NULL);
        if (A->live[x] && contribute(A, x, d, 1)) return -1;
        off += c;
    }
    return 0;
}

/* The forward readers of x when every one is a slice of one axis and
 * together they cover x exactly (a split): their ids in start order into
 * part[], their count; else 0. */
static int covering_slices(autodiff *A, int x, int64_t axis, int *part) {
    int np = 0;
    for (int j = 0; j < A->nfwd; j++) {
        const ir_node *u = &A->g->nodes[j];
        for (int k = 0; k < u->ninputs; k++) {
            if (u->input[k] != x) continue;
            if (u->op != IR_OP_SLICE || u->iattr[0] != axis || np == IR_MAX_INPUTS) return 0;
            part[np++] = j;
        }
    }
    for (int a = 1; a < np; a++) /* insertion sort by start */
        for (int b = a; b > 0 && A->g->nodes[part[b]].iattr[1] < A->g->nodes[part[b - 1]].iattr[1];
             b--) {
            int t = part[b];
            part[b] = part[b - 1], part[b - 1] = t;
        }
    int64_t end = 0;
    for (int a = 0; a < np; a++) {
        const ir_node *u = &A->g->nodes[part[a]];
        if (u->iattr[1] != end) return 0;
        end += u->iattr[2];
    }
    return np >= 2 && end == A->g->nodes[x].type.dim[axis] ? np : 0;
}

/* A slice's gradient is dy in a zero tensor of x's shape. Slices that
 * cover x (a split) instead make one concat of their gradients, emitted
 * by the first of them (the last the backward walk reaches, when all
 * their gradients are final); the others leave it to that one. A part
 * without a gradient leaves the others to zero-padded copies. */
static int grad_slice(autodiff *A, int i, ir_node n, int dy) {
    int x = n.input[0], part[IR_MAX_INPUTS], grads[IR_MAX_INPUTS];
    int64_t axis = n.iattr[0], size = A->g->nodes[x].type.dim[axis];
    int np = covering_slices(A, x, axis, part);
    if (!np)
        part[0] = i, np = 1;
    else
        for (int a = 0; a < np; a++)
            if (part[a] < i) return 0; /* not the first: that one gathers */
    int all = 1;
    for (int a = 0; a < np; a++) all &= (grads[a] = A->grad[part[a]]) >= 0;
    if (np > 1 && all) return contribute(A, x, emit(A, i, IR_OP_CONCAT, grads, np, &axis, NULL), 1);
    for (int a = 0; a < np; a++) {
        if (grads[a] < 0) continue;
        int64_t at[] = {axis, A->g->nodes[part[a]].iattr[1], size};
        if (contribute(A, x, emit(A, part[a], IR_OP_SLICE_GRAD, &grads[a], 1, at, NULL), 1))
            return -1;
    }
    (void)dy;
    return 0;
}

/* The inverse permutation: dx axis p[k] is dy axis k. */
static int grad_permute(autodiff *A, int i, ir_node n, int dy) {
    int64_t inv[IR_MAX_DIMS] = {0};
    for (int k = 0; k < A->g->nodes[n.input[0]].type.ndim; k++) inv[n.iattr[k]] = k;
    return contribute(A, n.input[0], emit(A, i, IR_OP_PERMUTE, &dy, 1, inv, NULL), 1);
}

/* dy where the value was kept, 0 where it was masked (both masks). */
static int grad_causal_mask(autodiff *A, int i, ir_node n, int dy) {
    if (n.op == IR_OP_PAD_MASK)
        return contribute(A, n.input[0],
                          emit(A, i, IR_OP_PAD_MASK, (int[]){dy, n.input[1]}, 2,
                               (int64_t[]){n.iattr[0], 1}, NULL),
                          1);
    return contribute(A, n.input[0], emit(A, i, IR_OP_CAUSAL_MASK, &dy, 1, (int64_t[]){1}, NULL),
                      1);
}

/* The same mask on dy: the same op, key, salt and p. */
static int grad_dropout(autodiff *A, int i, ir_node n, int dy) {
    return contribute(A, n.input[0],
                      emit(A, i, IR_OP_DROPOUT, (int[]){dy, n.input[1]}, 2, n.iattr, n.fattr), 1);
}

/* Only the weight has a gradient (ids are integers): the scatter-add of
 * dy's rows into the rows the ids picked. */
static int grad_embedding(autodiff *A, int i, ir_node n, int dy) {
    int ids = n.input[0], w = n.input[1];
    if (!A->live[w]) return 0;
    int64_t vocab = A->g->nodes[w].type.dim[0];
    return contribute(A, w, emit(A, i, IR_OP_EMBEDDING_GRAD, (int[]){dy, ids}, 2, &vocab, NULL), 1);
}

/* Only the table has a gradient (x gives the shape): the batch's sum of
 * dy into rows 0..T-1, the rest zero. */
static int grad_positions(autodiff *A, int i, ir_node n, int dy) {
    int w = n.input[1];
    if (!A->live[w]) return 0;
    int64_t len = A->g->nodes[w].type.dim[0];
    return contribute(A, w, emit(A, i, IR_OP_POSITIONS_GRAD, &dy, 1, &len, NULL), 1);
}

static int grad_seq_ce(autodiff *A, int i, ir_node n, int dy) {
    return contribute(
        A, n.input[0],
        emit(A, i, IR_OP_SEQ_CE_GRAD, (int[]){n.input[0], n.input[1], dy}, 3, n.iattr, NULL), 1);
}

/* d(a - b) = (dy, -dy). */
static int grad_sub(autodiff *A, int i, ir_node n, int dy) {
    if (contribute(A, n.input[0], dy, 0)) return -1;
    if (!A->live[n.input[1]]) return 0;
    return contribute(A, n.input[1], emit(A, i, IR_OP_MUL_CONST, &dy, 1, NULL, (double[]){-1}), 1);
}

/* d(x * c) = dy * c; d(x + c) = dy. */
static int grad_mul_const(autodiff *A, int i, ir_node n, int dy) {
    return contribute(A, n.input[0], emit(A, i, IR_OP_MUL_CONST, &dy, 1, NULL, n.fattr), 1);
}

static int grad_add_const(autodiff *A, int i, ir_node n, int dy) {
    (void)i;
    return contribute(A, n.input[0], dy, 0);
}

/* FlashAttention-2's backward: the forward's per-row log-sum-exp (one
 * more pass over the keys, [N, H, Tq] kept instead of the [Tq, Tk]
 * weights), then dq, dk and dv each from one attention_grad that
 * recomputes the scores (`which`); each kernel owns its rows, so no sum
 * depends on threads. */
static int grad_attention(autodiff *A, int i, ir_node n, int dy) {
    int lse = emit(A, i, IR_OP_ATTENTION_LSE, n.input, 3, n.iattr, n.fattr);
    if (lse < 0) return -1;
    for (int64_t w = 0; w < 3; w++) {
        if (!A->live[n.input[w]]) continue;
        int in[7] = {
            dy, n.input[0], n.input[1], n.input[2], i, lse, n.ninputs > 3 ? n.input[3] : 0};
        int64_t ia[4] = {n.iattr[0], n.iattr[1], n.iattr[2], w};
        int d = emit(A, i, IR_OP_ATTENTION_GRAD, in, 3 + n.ninputs, ia, n.fattr);
        if (contribute(A, n.input[w], d, 1)) return -1;
    }
    return 0;
}

static const grad_rule rules[IR_OP_COUNT] = {
    [IR_OP_CONV] = grad_conv,
    [IR_OP_BIAS_ADD] = grad_bias_add,
    [IR_OP_BIAS_ADD_LAST] = grad_bias_add, /* its bias's gradient is sum_leading */
    [IR_OP_MATMUL] = grad_matmul,
    [IR_OP_RELU] = grad_relu,
    [IR_OP_ADD] = grad_add,
    [IR_OP_MAXPOOL] = grad_maxpool,
    [IR_OP_AVGPOOL] = grad_avgpool,
    [IR_OP_GLOBAL_AVGPOOL] = grad_global_avgpool,
    [IR_OP_FLATTEN] = grad_flatten,
    [IR_OP_DENSE] = grad_dense,
    [IR_OP_SOFTMAX_CE] = grad_softmax_ce,
    [IR_OP_BN_APPLY] = grad_bn_apply,
    [IR_OP_SIGMOID] = grad_sigmoid,
    [IR_OP_CLIP] = grad_clip,
    [IR_OP_MUL] = grad_mul,
    [IR_OP_MUL_CHANNEL] = grad_mul_channel,
    [IR_OP_CONCAT] = grad_concat,
    [IR_OP_DROPOUT] = grad_dropout,
    [IR_OP_TANH] = grad_tanh,
    [IR_OP_GELU] = grad_gelu,
    [IR_OP_GELU_TANH] = grad_gelu,
    [IR_OP_LAYERNORM] = grad_layernorm,
    [IR_OP_SOFTMAX] = grad_softmax,
    [IR_OP_EMBEDDING] = grad_embedding,
    [IR_OP_POSITIONS] = grad_positions,
    [IR_OP_SEQ_CE] = grad_seq_ce,
    [IR_OP_SUB] = grad_sub,
    [IR_OP_MUL_CONST] = grad_mul_const,
    [IR_OP_ADD_CONST] = grad_add_const,
    [IR_OP_RESHAPE] = grad_flatten, /* reshape_like back to x */
    [IR_OP_PERMUTE] = grad_permute,
    [IR_OP_SLICE] = grad_slice,
    [IR_OP_CAUSAL_MASK] = grad_causal_mask,
    [IR_OP_PAD_MASK] = grad_causal_mask,
    [IR_OP_ATTENTION] = grad_attention,
};

/* ---- the pass ---------------------------------------------------------------------- */

/* live[i]: node i depends on a parameter and the loss depends on node i. */
static void mark_live(const ir_graph *g, int loss, unsigned char *live) {
    unsigned char *reach = calloc((size_t)g->n, 1);
    BASE_CHECK_ALLOC(reach);
    reach[loss] = 1;
    for (int i = loss; i >= 0; i--)
        if (reach[i])
            for (int j = 0; j < g->nodes[i].ninputs; j++) reach[g->nodes[i].input[j]] = 1;
    for (int i = 0; i < g->n; i++) { /* live[] holds "depends on a param" first */
        const ir_node *n = &g->nodes[i];
        live[i] = n->op == IR_OP_PARAM;
        for (int j = 0; j < n->ninputs; j++) live[i] |= live[n->input[j]];
    }
    for (int i = 0; i < g->n; i++) live[i] = live[i] && reach[i];
    free(reach);
}

static int backward(autodiff *A, int loss) {
    if (!A->live[loss]) return 0; /* no parameters: nothing to differentiate */
    if (contribute(A, loss, emit(A, loss, IR_OP_ONES_LIKE, &loss, 1, NULL, NULL), 1)) return -1;
    for (int i = loss; i >= 0; i--) {
        ir_node n = A->g->nodes[i];
        /* a slice may gather its siblings' gradients even without its own */
        if (A->grad[i] < 0 && n.op != IR_OP_SLICE) continue;
        if (n.op == IR_OP_PARAM) continue; /* a leaf: its gradient is final */
        grad_rule rule = rules[n.op];
        if (!rule) {
            snprintf(A->err, A->errlen, "autodiff: no gradient rule for %s (node %d%s%s%s)%s",
                     ir_ops[n.op].name, i, n.name[0] ? " '" : "", n.name, n.name[0] ? "'" : "",
                     n.op == IR_OP_BATCHNORM ? "; run the lower pass first" : "");
            return -1;
        }
        if (rule(A, i, n, A->grad[i])) return -1;
    }
    return 0;
}

/* Gives every parameter its own gradient node, flagged and named. */
static int name_gradients(autodiff *A) {
    int n = A->g->n; /* copies appended below are not parameters */
    for (int p = 0; p < n; p++) {
        if (A->g->nodes[p].op != IR_OP_PARAM) continue;
        int d = A->grad[p];
        if (!A->owned[p]) d = emit(A, p, IR_OP_RESHAPE_LIKE, (int[]){d, p}, 2, NULL, NULL);
        if (d < 0) return -1;
        char name[IR_NAME_MAX + 8];
        snprintf(name, sizeof name, "%s.grad", A->g->nodes[p].name);
        if (strlen(name) >= IR_NAME_MAX) {
            snprintf(A->err, A->errlen, "autodiff: parameter name '%s' is too long for '.grad'",
                     A->g->nodes[p].name);
            return -1;
        }
        memcpy(A->g->nodes[d].name, name, strlen(name) + 1);
        A->g->nodes[d].flags |= IR_FLAG_GRAD;
    }
    return 0;
}

int pass_autodiff(ir_graph **gp, char *err, size_t errlen) {
    const ir_graph *in = *gp;
    int loss = ir_loss_node(in);
    if (loss < 0) return base_fail(err, errlen, "autodiff: the graph has no loss node");
    for (int i = 0; i < in->n; i++)
        if (in->nodes[i].flags & IR_FLAG_GRAD)
            return base_fail(err, errlen, "autodiff: the graph already has gradients ('%s')",
                             in->nodes[i].name);
    autodiff A = {ir_clone(in), NULL, NULL, NULL, in->n, err, errlen};
    size_t n = (size_t)(in->n ? in->n : 1);
    A.live = calloc(n, 1);
    A.owned = calloc(n, 1);
    A.grad = malloc(sizeof *A.grad * n);
    BASE_CHECK_ALLOC(A.live);
    BASE_CHECK_ALLOC(A.owned);
    BASE_CHECK_ALLOC(A.grad);
    for (int i = 0; i < in->n; i++) A.grad[i] = -1;
    mark_live(in, loss, A.live);

    int rc = 0;
    for (int i = 0; i < in->n && !rc; i++)
        if (in->nodes[i].op == IR_OP_PARAM && !A.live[i]) {
            if (in->nodes[i].line > 0) /* the frontend refuses these first; other graphs */
                base_fail(err, errlen,
                          "autodiff: parameter '%s' (made at %d:%d) does not reach the loss",
                          in->nodes[i].name, in->nodes[i].line, in->nodes[i].col);
            else
                base_fail(err, errlen, "autodiff: parameter '%s' does not reach the loss",
                          in->nodes[i].name);
            rc = -1;
        }
    if (!rc) rc = backward(&A, loss);
    if (!rc) rc = name_gradients(&A);
    free(A.live);
    free(A.owned);
    free(A.grad);
    return ir_replace(gp, A.g, rc);
}
