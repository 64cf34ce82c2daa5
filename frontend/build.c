/* frontend/build.c — one operator call into IR nodes: the parameters it
 * creates (named <scope><op><n>.<leaf>), its nodes, and the checks of its
 * arguments that need the operands' shapes.
 */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "frontend/elab.h"

/* conv(x, channels, k, s, p, bias, groups): the weight is [channels,
 * C/groups, k, k], so the parameter count follows the groups. */
static int build_conv(elab *E, scope *S, const op_args *a, const char *inst, fe_loc loc) {
    const value *x = &a->v[0];
    const ir_type *xt = elab_type(E, x); /* cin 1 without axis 1: the conv's rule then says why */
    int64_t c = a->v[1].i, k = a->v[2].i, groups = a->v[6].i, cin = xt->ndim >= 2 ? xt->dim[1] : 1;
    if (cin % groups || c % groups) {
        elab_error(E, S, a->loc[6],
                 "argument 'groups' of 'conv' must divide the input channels (%" PRId64
                 ") and the output channels (%" PRId64 "), got %" PRId64,
                 cin, c, groups);
        return -1;
    }
    int w = elab_param(E, S, loc, inst, "weight", ir_shape4(c, cin / groups, k, k), IR_INIT_XAVIER, 0);
    if (w < 0) return -1;
    int y = elab_node(E, S, loc, IR_OP_CONV, (int[]){x->node, w}, 2,
                 (int64_t[]){k, a->v[3].i, a->v[4].i, groups}, NULL);
    if (y < 0 || !a->v[5].i) return y;
    int b = elab_param(E, S, loc, inst, "bias", ir_shape1(c), IR_INIT_ZERO, 0);
    if (b < 0) return -1;
    return elab_node(E, S, loc, IR_OP_BIAS_ADD, (int[]){y, b}, 2, NULL, NULL);
}

static int build_batchnorm(elab *E, scope *S, const op_args *a, const char *inst, fe_loc loc) {
    const value *x = &a->v[0];
    const ir_type *t = elab_type(E, x);
    char buf[96];
    if (t->ndim != 4 && t->ndim != 2) {
        elab_error(E, S, loc, "batchnorm: input must be [N,C,H,W] or [N,C], got %s",
                 ir_type_str(t, buf, sizeof buf));
        return -1;
    }
    if (!(a->v[2].f >= 0 && a->v[2].f <= 1)) {
        elab_error(E, S, a->loc[2], "argument 'momentum' of 'batchnorm' must be in [0, 1], got %g",
                 a->v[2].f);
        return -1;
    }
    double g0 = a->v[3].f;
    if (g0 != 0 && g0 != 1) {
        elab_error(E, S, a->loc[3], "argument 'gamma_init' of 'batchnorm' must be 0 or 1, got %g",
                 g0);
        return -1;
    }
    /* scale=false fixes gamma at 1, center=false beta at 0 (Gluon's
     * BatchNorm options): they stay in the graph as persistent state that
     * nothing trains, as Gluon keeps them as parameters with grad_req
     * 'null', so the rest of the compiler sees an ordinary batchnorm. */
    int scale = (int)a->v[6].i, center = (int)a->v[7].i;
    if (!scale && (a->given[3] || a->v[4].i)) {
        int slot = a->given[3] ? 3 : 4;
        elab_error(E, S, a->loc[slot],
                 "argument '%s' of 'batchnorm' needs scale=true: scale=false fixes gamma at 1",
                 slot == 3 ? "gamma_init" : "residual_last");
        return -1;
    }
    /* Goyal et al.: the last BN of each residual branch starts at gamma 0
     * (unless this call says otherwise). */
    if (!a->given[3] && a->v[4].i && E->P->zero_init_residual) g0 = 0;
    ir_type c = ir_shape1(t->dim[1]);
    int in[5] = {x->node};
    static const char *leaf[4] = {"gamma", "beta", "running_mean", "running_var"};
    ir_init init[4] = {g0 == 0 ? IR_INIT_ZERO : IR_INIT_ONE, IR_INIT_ZERO, IR_INIT_ZERO,
                       IR_INIT_ONE};
    int is_state[4] = {!scale, !center, 1, 1};
    for (int i = 0; i < 4; i++)
        if ((in[i + 1] = elab_param(E, S, loc, inst, leaf[i], c, init[i], is_state[i])) < 0) return -1;
    return elab_node(E, S, loc, IR_OP_BATCHNORM, in, 5, (int64_t[]){E->training, a->v[5].i},
                (double[]){a->v[1].f, a->v[2].f});
}

static int build_dense(elab *E, scope *S, const op_args *a, const char *inst, fe_loc loc) {
    const value *x = &a->v[0];
    int rank = elab_type(E, x)->ndim; /* over the last axis; the bias too above rank 2 */
    int64_t u = a->v[1].i, f = rank >= 2 ? elab_type(E, x)->dim[rank - 1] : 1;
    int w = elab_param(E, S, loc, inst, "weight", ir_shape2(u, f), IR_INIT_XAVIER, 0);
    if (w < 0) return -1;
    int y = elab_node(E, S, loc, IR_OP_DENSE, (int[]){x->node, w}, 2, NULL, NULL);
    if (y < 0 || !a->v[2].i) return y;
    int b = elab_param(E, S, loc, inst, "bias", ir_shape1(u), IR_INIT_ZERO, 0);
    if (b < 0) return -1;
    ir_op op = rank == 2 ? IR_OP_BIAS_ADD : IR_OP_BIAS_ADD_LAST;
    return elab_node(E, S, loc, op, (int[]){y, b}, 2, NULL, NULL);
}

/* layernorm(x, eps) over the last axis, gamma (1) and beta (0) named as
 * batchnorm's: layernorm0.gamma, layernorm0.beta. */
static int build_layernorm(elab *E, scope *S, const op_args *a, const char *inst, fe_loc loc) {
    const ir_type *t = elab_type(E, &a->v[0]);
    ir_type c = ir_shape1(t->dim[t->ndim - 1]);
    int gamma = elab_param(E, S, loc, inst, "gamma", c, IR_INIT_ONE, 0);
    int beta = gamma < 0 ? -1 : elab_param(E, S, loc, inst, "beta", c, IR_INIT_ZERO, 0);
    if (beta < 0) return -1;
    return elab_node(E, S, loc, IR_OP_LAYERNORM, (int[]){a->v[0].node, gamma, beta}, 3, NULL,
                (double[]){a->v[1].f});
}

/* softmax(x, axis=-1): over the last axis only, for now. */
static int build_softmax(elab *E, scope *S, const op_args *a, fe_loc loc) {
    int rank = elab_type(E, &a->v[0])->ndim;
    if (a->v[1].i != -1 && a->v[1].i != rank - 1) {
        elab_error(E, S, a->loc[1],
                 "argument 'axis' of 'softmax' must be the last axis (-1 or %d), got %" PRId64,
                 rank - 1, a->v[1].i);
        return -1;
    }
    return elab_node(E, S, loc, IR_OP_SOFTMAX, &a->v[0].node, 1, NULL, NULL);
}

/* embedding(ids, vocab, dim): rows of NAME.weight [vocab, dim] by id,
 * N(0, 0.02²) at the start as GPT-2's tables. */
static int build_embedding(elab *E, scope *S, const op_args *a, const char *inst, fe_loc loc) {
    int w = elab_param(E, S, loc, inst, "weight", ir_shape2(a->v[1].i, a->v[2].i), IR_INIT_NORMAL, 0);
    if (w < 0) return -1;
    return elab_node(E, S, loc, IR_OP_EMBEDDING, (int[]){a->v[0].node, w}, 2, NULL, NULL);
}

/* softmax_cross_entropy: [N, K] logits with smoothing, or [N, T, V] with ignore (seq_ce). */
static int build_loss(elab *E, scope *S, const op_args *a, fe_loc loc) {
    const value *v = a->v;
    int seq = elab_type(E, &v[0])->ndim == 3, k = !seq && v[3].i != -1 ? 3 : 2;
    int in[2] = {v[0].node, v[1].node};
    const char *why = k == 3                          ? "applies to rank-3 logits only"
                      : !(v[2].f >= 0 && v[2].f <= 1) ? "must be in [0, 1]"
                      : seq && v[2].f != 0            ? "applies to rank-2 logits only"
                                                      : NULL;
    if (why)
        elab_error(E, S, a->loc[k], "argument '%s' of 'softmax_cross_entropy' %s, got %g",
                 k == 3 ? "ignore" : "smoothing", why, k == 3 ? (double)v[3].i : v[2].f);
    return why   ? -1
           : seq ? elab_node(E, S, loc, IR_OP_SEQ_CE, in, 2, &v[3].i, NULL)
                 : elab_node(E, S, loc, IR_OP_SOFTMAX_CE, in, 2, NULL, (double[]){v[2].f});
}

/* clip(x, lo, hi), and relu6(x) as clip(x, 0, 6) (Gluon's relu6 is that clip). */
static int build_clip(elab *E, scope *S, const op_args *a, fe_loc loc) {
    double lo = a->call->op->id == FE_OP_RELU6 ? 0 : a->v[1].f;
    double hi = a->call->op->id == FE_OP_RELU6 ? 6 : a->v[2].f;
    if (lo > hi) {
        elab_error(E, S, a->loc[1], "argument 'lo' of 'clip' must not be above 'hi', got %g > %g", lo,
                 hi);
        return -1;
    }
    return elab_node(E, S, loc, IR_OP_CLIP, &a->v[0].node, 1, NULL, (double[]){lo, hi});
}

/* mul(a, b): elementwise when the shapes agree, else one factor per
 * (sample, channel) plane, [N,C,1,1] or [N,C] against [N,C,H,W], in
 * either argument (the product commutes); any other pair is refused by
 * mul_channel's shape rule, naming both shapes. */
static int build_mul(elab *E, scope *S, const op_args *a, fe_loc loc) {
    int x = a->v[0].node, y = a->v[1].node;
    const ir_type *tx = elab_type(E, &a->v[0]), *ty = elab_type(E, &a->v[1]);
    if (ir_type_same_shape(tx, ty)) return elab_node(E, S, loc, IR_OP_MUL, (int[]){x, y}, 2, NULL, NULL);
    if (tx->ndim != 4 && ty->ndim == 4) {
        int t = x;
        x = y, y = t;
    }
    return elab_node(E, S, loc, IR_OP_MUL_CHANNEL, (int[]){x, y}, 2, NULL, NULL);
}

/* concat(a, b, ..., axis=1): the tensors given, in parameter order. */
static int build_concat(elab *E, scope *S, const op_args *a, fe_loc loc) {
    if (a->v[8].i != 1) {
        elab_error(E, S, a->loc[8],
                 "argument 'axis' of 'concat' must be 1 (the channels), got %" PRId64, a->v[8].i);
        return -1;
    }
    int in[IR_MAX_INPUTS], n = 0;
    for (int i = 0; i < 8; i++)
        if (a->given[i]) in[n++] = a->v[i].node;
    return elab_node(E, S, loc, IR_OP_CONCAT, in, n, (int64_t[]){1}, NULL);
}

/* dropout(x, p): Gluon's inverted dropout, x/(1-p) on the kept elements in
 * training, x itself in evaluation. Each dropout gets the next salt in
 * evaluation order (the same in every build of the network), all read the
 * one key input the runtime sets each step. */
static int build_dropout(elab *E, scope *S, const op_args *a, fe_loc loc) {
    double p = a->v[1].f;
    if (!(p >= 0 && p < 1)) {
        elab_error(E, S, a->loc[1], "argument 'p' of 'dropout' must be in [0, 1), got %g", p);
        return -1;
    }
    int salt = E->dropouts++;
    if (!E->training || p == 0) return a->v[0].node;
    if (E->dropout_key < 0) {
        if (fe_map_get(&E->inputs, IR_DROPOUT_KEY)) {
            elab_error(E, S, loc, "input '%s' is the name dropout's key takes", IR_DROPOUT_KEY);
            return -1;
        }
        E->dropout_key = ir_add_input(E->g, IR_DROPOUT_KEY, ir_shape1(4), 0);
    }
    return elab_node(E, S, loc, IR_OP_DROPOUT, (int[]){a->v[0].node, E->dropout_key}, 2,
                (int64_t[]){salt}, (double[]){p});
}

int elab_op(elab *E, scope *S, const op_args *a, const char *inst, fe_loc loc) {
    const value *v = a->v;
    int id = -1;
    switch (a->call->op->id) {
    case FE_OP_CONV: id = build_conv(E, S, a, inst, loc); break;
    case FE_OP_BATCHNORM: id = build_batchnorm(E, S, a, inst, loc); break;
    case FE_OP_DENSE: id = build_dense(E, S, a, inst, loc); break;
    case FE_OP_LAYERNORM: id = build_layernorm(E, S, a, inst, loc); break;
    case FE_OP_SOFTMAX: id = build_softmax(E, S, a, loc); break;
    case FE_OP_RELU: id = elab_node(E, S, loc, IR_OP_RELU, &v[0].node, 1, NULL, NULL); break;
    case FE_OP_ADD:
    case FE_OP_MATMUL:
        id = elab_node(E, S, loc, a->call->op->id == FE_OP_ADD ? IR_OP_ADD : IR_OP_MATMUL,
                  (int[]){v[0].node, v[1].node}, 2, NULL, NULL);
        break;
    case FE_OP_MAXPOOL:
    case FE_OP_AVGPOOL:
        id = elab_node(E, S, loc, a->call->op->id == FE_OP_MAXPOOL ? IR_OP_MAXPOOL : IR_OP_AVGPOOL, &v[0].node,
                  1, (int64_t[]){v[1].i, v[2].i, v[3].i}, NULL);
        break;
    case FE_OP_GLOBAL_AVGPOOL:
        id = elab_node(E, S, loc, IR_OP_GLOBAL_AVGPOOL, &v[0].node, 1, NULL, NULL);
        break;
    case FE_OP_FLATTEN: id = elab_node(E, S, loc, IR_OP_FLATTEN, &v[0].node, 1, NULL, NULL); break;
    case FE_OP_SIGMOID: id = elab_node(E, S, loc, IR_OP_SIGMOID, &v[0].node, 1, NULL, NULL); break;
    case FE_OP_TANH: id = elab_node(E, S, loc, IR_OP_TANH, &v[0].node, 1, NULL, NULL); break;
    case FE_OP_GELU: /* approx: 0 erf, 1 tanh */
        id = elab_node(E, S, loc, v[1].i ? IR_OP_GELU_TANH : IR_OP_GELU, &v[0].node, 1, NULL, NULL);
        break;
    case FE_OP_CLIP:
    case FE_OP_RELU6: id = build_clip(E, S, a, loc); break;
    case FE_OP_MUL: id = build_mul(E, S, a, loc); break;
    case FE_OP_CONCAT: id = build_concat(E, S, a, loc); break;
    case FE_OP_DROPOUT: id = build_dropout(E, S, a, loc); break;
    case FE_OP_EMBEDDING: id = build_embedding(E, S, a, inst, loc); break;
    case FE_OP_SOFTMAX_CE: id = build_loss(E, S, a, loc); break;
    }
    return id;
}
