/* frontend/build.c — one operator call into IR nodes: the parameters it
 * creates (named <scope><op><n>.<leaf>), its nodes, and the checks of its
 * arguments that need the operands' shapes.
 */
#include <inttypes.h>
#include <math.h>
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
    int w =
        elab_param(E, S, loc, inst, "weight", ir_shape4(c, cin / groups, k, k), IR_INIT_XAVIER, 0);
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
        if ((in[i + 1] = elab_param(E, S, loc, inst, leaf[i], c, init[i], is_state[i])) < 0)
            return -1;
    return elab_node(E, S, loc, IR_OP_BATCHNORM, in, 5, (int64_t[]){E->training, a->v[5].i},
                     (double[]){a->v[1].f, a->v[2].f});
}

/* dense(x, units, bias, tie=E): E an embedding's result, whose table
 * [units, x's last dim] is the weight (GPT-2's tied head: one parameter,
 * its gradient the sum of both reads). */
static int tied_weight(elab *E, scope *S, const op_args *a, int64_t u, int64_t f) {
    const ir_node *e = &E->g->nodes[a->v[3].node];
    const ir_type *t = e->op == IR_OP_EMBEDDING ? &E->g->nodes[e->input[1]].type : NULL;
    if (t && t->dim[0] == u && t->dim[1] == f) return e->input[1];
    if (!t)
        elab_error(E, S, a->loc[3],
                   "argument 'tie' of 'dense' must be the result of embedding(...)");
    else
        elab_error(E, S, a->loc[3],
                   "argument 'tie' of 'dense': the embedding's table is [%" PRId64 ",%" PRId64
                   "], the dense needs [%" PRId64 ",%" PRId64 "] (units, input features)",
                   t->dim[0], t->dim[1], u, f);
    return -1;
}

static int build_dense(elab *E, scope *S, const op_args *a, const char *inst, fe_loc loc) {
    const value *x = &a->v[0];
    int rank = elab_type(E, x)->ndim; /* over the last axis; the bias too above rank 2 */
    int64_t u = a->v[1].i, f = rank >= 2 ? elab_type(E, x)->dim[rank - 1] : 1;
    /* scaled_init: GPT-2's residual projections, N(0, (S/√M)²) (ir.h) */
    if (a->given[3] && a->v[4].i) {
        elab_error(E, S, a->loc[4],
                   "argument 'scaled_init' of 'dense' cannot apply to a tied weight (the "
                   "embedding's table starts as the table)");
        return -1;
    }
    ir_init init = a->v[4].i ? IR_INIT_SCALED : IR_INIT_XAVIER;
    int w = a->given[3] ? tied_weight(E, S, a, u, f)
                        : elab_param(E, S, loc, inst, "weight", ir_shape2(u, f), init, 0);
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
    int w =
        elab_param(E, S, loc, inst, "weight", ir_shape2(a->v[1].i, a->v[2].i), IR_INIT_NORMAL, 0);
    if (w < 0) return -1;
    return elab_node(E, S, loc, IR_OP_EMBEDDING, (int[]){a->v[0].node, w}, 2, NULL, NULL);
}

/* positions(x, length, dim): rows 0..T-1 of NAME.weight [length, dim]
 * for every sample, T = x's axis 1 (GPT-2's wpe; N(0, 0.02²) as the
 * embedding tables). */
static int build_positions(elab *E, scope *S, const op_args *a, const char *inst, fe_loc loc) {
    const ir_type *x = elab_type(E, &a->v[0]);
    char buf[96];
    if (x->ndim < 2) {
        elab_error(E, S, loc, "positions: x must be [N, T, ...], got %s",
                   ir_type_str(x, buf, sizeof buf));
        return -1;
    }
    if (x->dim[1] > a->v[1].i) {
        elab_error(E, S, a->loc[1],
                   "argument 'length' of 'positions' must cover x's %" PRId64
                   " positions (axis 1 of %s), got %" PRId64,
                   x->dim[1], ir_type_str(x, buf, sizeof buf), a->v[1].i);
        return -1;
    }
    int w =
        elab_param(E, S, loc, inst, "weight", ir_shape2(a->v[1].i, a->v[2].i), IR_INIT_NORMAL, 0);
    if (w < 0) return -1;
    return elab_node(E, S, loc, IR_OP_POSITIONS, (int[]){a->v[0].node, w}, 2, NULL, NULL);
}

/* class_token(x[N, T, C]): NAME.weight [1, C] (zeros, as timm's cls_token
 * before its trunc_normal) before row 0 -> [N, T+1, C]: positions' one-row
 * broadcast (fed a slice of x for the shape), then concat on axis 1, so
 * the gradients are theirs: the batch's sum into the row, the rest to x. */
static int build_class_token(elab *E, scope *S, const op_args *a, const char *inst, fe_loc loc) {
    const ir_type *x = elab_type(E, &a->v[0]);
    char buf[96];
    if (x->ndim != 3 || x->dtype == IR_I32) {
        elab_error(E, S, loc, "class_token: x must be a float [N, T, C], got %s",
                   ir_type_str(x, buf, sizeof buf));
        return -1;
    }
    int w = elab_param(E, S, loc, inst, "weight", ir_shape2(1, x->dim[2]), IR_INIT_ZERO, 0);
    if (w < 0) return -1;
    int row = elab_node(E, S, loc, IR_OP_SLICE, &a->v[0].node, 1, (int64_t[]){1, 0, 1}, NULL);
    int c = row < 0 ? -1 : elab_node(E, S, loc, IR_OP_POSITIONS, (int[]){row, w}, 2, NULL, NULL);
    if (c < 0) return -1;
    return elab_node(E, S, loc, IR_OP_CONCAT, (int[]){c, a->v[0].node}, 2, (int64_t[]){1}, NULL);
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
        elab_error(E, S, a->loc[1], "argument 'lo' of 'clip' must not be above 'hi', got %g > %g",
                   lo, hi);
        return -1;
    }
    return elab_node(E, S, loc, IR_OP_CLIP, &a->v[0].node, 1, NULL, (double[]){lo, hi});
}

/* mul(a, b): elementwise when the shapes agree, else one factor per
 * (sample, channel) plane, [N,C,1,1] or [N,C] against [N,C,H,W], in
 * either argument (the product commutes); any other pair is refused by
 * mul_channel's shape rule, naming both shapes. */
int elab_mul(elab *E, const scope *S, fe_loc loc, int x, int y) {
    const ir_type *tx = &E->g->nodes[x].type, *ty = &E->g->nodes[y].type;
    if (ir_type_same_shape(tx, ty))
        return elab_node(E, S, loc, IR_OP_MUL, (int[]){x, y}, 2, NULL, NULL);
    if (tx->ndim != 4 && ty->ndim == 4) {
        int t = x;
        x = y, y = t;
    }
    return elab_node(E, S, loc, IR_OP_MUL_CHANNEL, (int[]){x, y}, 2, NULL, NULL);
}

/* Argument `slot` as a non-batch axis of x (1..rank-1, or -(rank-1)..-1
 * from the end): the axis, or -1 after an error. */
static int axis_arg(elab *E, scope *S, const op_args *a, int slot, const ir_type *x) {
    int64_t k = a->v[slot].i, r = x->ndim;
    if (k < 0) k += r;
    if (k >= 1 && k < r) return (int)k;
    char buf[96];
    elab_error(E, S, a->loc[slot],
               "argument '%s' of '%s' must be a non-batch axis of %s (1..%" PRId64 " or -%" PRId64
               "..-1), got %" PRId64,
               a->call->op->arg[slot].name, a->call->op->name, ir_type_str(x, buf, sizeof buf),
               r - 1, r - 1, a->v[slot].i);
    return -1;
}

/* concat(a, b, ..., axis=1): the tensors given, in parameter order. */
static int build_concat(elab *E, scope *S, const op_args *a, fe_loc loc) {
    int64_t axis = axis_arg(E, S, a, 8, elab_type(E, &a->v[0]));
    if (axis < 0) return -1;
    int in[IR_MAX_INPUTS], n = 0;
    for (int i = 0; i < 8; i++)
        if (a->given[i]) in[n++] = a->v[i].node;
    return elab_node(E, S, loc, IR_OP_CONCAT, in, n, &axis, NULL);
}

/* reshape(x, d1, d2, d3): the batch stays; one dimension may be -1, the
 * rest of the elements over the others. */
static int build_reshape(elab *E, scope *S, const op_args *a, fe_loc loc) {
    const ir_type *x = elab_type(E, &a->v[0]);
    ir_type y = {1, {x->dim[0]}, x->dtype};
    int64_t d[3] = {0}, known = 1, rest = ir_numel(x) / (x->dim[0] ? x->dim[0] : 1);
    int infer = -1;
    char b1[96], b2[96];
    for (int k = 0; k < 3 && (k == 0 || a->given[k + 1]); k++) {
        d[k] = a->v[k + 1].i;
        if (d[k] == -1 && infer < 0) {
            infer = k;
        } else if (d[k] < 1) {
            elab_error(E, S, a->loc[k + 1],
                       "argument 'd%d' of 'reshape' must be positive%s, got %" PRId64, k + 1,
                       infer < 0 ? " or -1" : " (one -1 at most)", d[k]);
            return -1;
        } else {
            known *= d[k];
        }
        y.dim[y.ndim++] = d[k];
    }
    if (infer >= 0 && rest % known) {
        elab_error(E, S, loc,
                   "reshape: cannot view %s with a -1 dimension: %" PRId64
                   " elements per sample are not a multiple of %" PRId64,
                   ir_type_str(x, b1, sizeof b1), rest, known);
        return -1;
    }
    if (infer >= 0) y.dim[infer + 1] = d[infer] = rest / known;
    if (ir_numel(&y) != ir_numel(x)) {
        elab_error(E, S, loc, "reshape: cannot view %s as %s (element counts differ)",
                   ir_type_str(x, b1, sizeof b1), ir_type_str(&y, b2, sizeof b2));
        return -1;
    }
    return elab_node(E, S, loc, IR_OP_RESHAPE, &a->v[0].node, 1, d, NULL);
}

/* permute(x, a0, a1, ...): one axis per axis of x, the batch first;
 * transpose(x, a, b): two non-batch axes swapped. */
static int build_permute(elab *E, scope *S, const op_args *a, fe_loc loc) {
    const ir_type *x = elab_type(E, &a->v[0]);
    int64_t p[IR_MAX_DIMS] = {0, 1, 2, 3};
    char buf[96];
    if (a->call->op->id == FE_OP_TRANSPOSE) {
        int i = axis_arg(E, S, a, 1, x), j = i < 0 ? -1 : axis_arg(E, S, a, 2, x);
        if (j < 0) return -1;
        p[i] = j, p[j] = i;
        for (int k = x->ndim; k < IR_MAX_DIMS; k++) p[k] = 0;
        return elab_node(E, S, loc, IR_OP_PERMUTE, &a->v[0].node, 1, p, NULL);
    }
    int n = 2 + a->given[3] + (a->given[3] && a->given[4]);
    if (n != x->ndim || (a->given[4] && !a->given[3])) {
        elab_error(E, S, loc, "permute: %s has %d axes, so it takes %d axis numbers",
                   ir_type_str(x, buf, sizeof buf), x->ndim, x->ndim);
        return -1;
    }
    if (a->v[1].i != 0) {
        elab_error(E, S, a->loc[1],
                   "argument 'a0' of 'permute' must be 0 (the batch stays axis 0), got %" PRId64,
                   a->v[1].i);
        return -1;
    }
    for (int k = 0; k < IR_MAX_DIMS; k++) p[k] = k < n ? a->v[k + 1].i : 0;
    return elab_node(E, S, loc, IR_OP_PERMUTE, &a->v[0].node, 1, p, NULL);
}

/* slice(x, start, end, axis=-1): Python's bounds (negative from the end,
 * clamped to the axis), the range must not be empty. */
static int build_slice(elab *E, scope *S, const op_args *a, fe_loc loc) {
    const ir_type *x = elab_type(E, &a->v[0]);
    int axis = axis_arg(E, S, a, 3, x);
    if (axis < 0) return -1;
    int64_t D = x->dim[axis], b[2];
    for (int k = 0; k < 2; k++) {
        b[k] = a->v[k + 1].i < 0 ? a->v[k + 1].i + D : a->v[k + 1].i;
        b[k] = b[k] < 0 ? 0 : b[k] > D ? D : b[k];
    }
    if (b[1] <= b[0]) {
        elab_error(E, S, loc,
                   "slice: [%" PRId64 ", %" PRId64 ") is empty on axis %d (size %" PRId64 ")",
                   a->v[1].i, a->v[2].i, axis, D);
        return -1;
    }
    return elab_node(E, S, loc, IR_OP_SLICE, &a->v[0].node, 1, (int64_t[]){axis, b[0], b[1] - b[0]},
                     NULL);
}

/* `a, b, c = split(x, 3, axis=-1)`: equal slices, one per name (exec_stmts
 * in elab.c binds them); the first part's node is the call's value. */
static int build_split(elab *E, scope *S, const op_args *a, fe_loc loc) {
    const ir_type *x = elab_type(E, &a->v[0]);
    int64_t parts = a->v[1].i;
    char buf[96];
    if (a->call != E->split_call || parts != E->split_want) {
        elab_error(E, S, loc, "split into %" PRId64 " parts is assigned to %d names", parts,
                   a->call == E->split_call ? E->split_want : 1);
        return -1;
    }
    int axis = axis_arg(E, S, a, 2, x);
    if (axis < 0) return -1;
    if (parts > IR_MAX_INPUTS || x->dim[axis] % parts) {
        elab_error(E, S, a->loc[1],
                   "split: axis %d of %s does not divide into %" PRId64 " equal parts%s", axis,
                   ir_type_str(x, buf, sizeof buf), parts,
                   parts > IR_MAX_INPUTS ? " (8 at most)" : "");
        return -1;
    }
    int64_t len = x->dim[axis] / parts;
    for (int k = 0; k < parts; k++)
        if ((E->split_node[k] = elab_node(E, S, loc, IR_OP_SLICE, &a->v[0].node, 1,
                                          (int64_t[]){axis, k * len, len}, NULL)) < 0)
            return -1;
    return E->split_node[0];
}

/* mask(x, causal=true): keys after each query's position to -inf;
 * mask(x, pad=ids, id=K): keys whose token id is K to -inf; both may be
 * given (the padding mask first). */
static int build_mask(elab *E, scope *S, const op_args *a, fe_loc loc) {
    int causal = (int)a->v[1].i, pad = a->given[2], y = a->v[0].node;
    if (!causal && !pad) {
        elab_error(E, S, loc, "mask needs causal=true or pad=ids (the token ids of the keys)");
        return -1;
    }
    if (a->given[3] && !pad) {
        elab_error(E, S, a->loc[3], "argument 'id' of 'mask' needs pad=ids");
        return -1;
    }
    if (pad)
        y = elab_node(E, S, loc, IR_OP_PAD_MASK, (int[]){y, a->v[2].node}, 2,
                      (int64_t[]){a->v[3].i, 0}, NULL);
    if (y >= 0 && causal) y = elab_node(E, S, loc, IR_OP_CAUSAL_MASK, &y, 1, (int64_t[]){0}, NULL);
    return y;
}

/* The one key input every dropout reads (made by the first that needs it). */
static int dropout_key(elab *E, scope *S, fe_loc loc) {
    if (E->dropout_key < 0) {
        if (fe_map_get(&E->inputs, IR_DROPOUT_KEY)) {
            elab_error(E, S, loc, "input '%s' is the name dropout's key takes", IR_DROPOUT_KEY);
            return -1;
        }
        E->dropout_key = ir_add_input(E->g, IR_DROPOUT_KEY, ir_shape1(4), 0);
    }
    return E->dropout_key;
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
    if (dropout_key(E, S, loc) < 0) return -1;
    return elab_node(E, S, loc, IR_OP_DROPOUT, (int[]){a->v[0].node, E->dropout_key}, 2,
                     (int64_t[]){salt}, (double[]){p});
}

/* attention(q, k, v, heads, causal=true, dropout=0): the fused op, scale
 * 1/sqrt(D) (D = C / heads). Dropout on the weights takes the next
 * dropout salt whatever p and the mode, so salts agree between the
 * training and evaluation builds; evaluation drops nothing. */
static int build_attention(elab *E, scope *S, const op_args *a, fe_loc loc) {
    const value *v = a->v;
    for (int j = 0; j < 3; j++)
        if (elab_type(E, &v[j])->ndim != 3) {
            elab_error(E, S, a->loc[j],
                       "argument '%s' of 'attention' must be [N, T, C], got rank %d",
                       a->call->op->arg[j].name, elab_type(E, &v[j])->ndim);
            return -1;
        }
    int64_t C = elab_type(E, &v[0])->dim[2], H = v[3].i;
    if (C % H) {
        elab_error(E, S, a->loc[3],
                   "argument 'heads' of 'attention': %" PRId64
                   " channels of q do not split into %" PRId64 " heads",
                   C, H);
        return -1;
    }
    double p = v[5].f;
    if (!(p >= 0 && p < 1)) {
        elab_error(E, S, a->loc[5], "argument 'dropout' of 'attention' must be in [0, 1), got %g",
                   p);
        return -1;
    }
    int64_t salt = E->dropouts++;
    if (!E->training) p = 0;
    int in[4] = {v[0].node, v[1].node, v[2].node, p > 0 ? dropout_key(E, S, loc) : 0};
    if (in[3] < 0) return -1;
    return elab_node(E, S, loc, IR_OP_ATTENTION, in, p > 0 ? 4 : 3, (int64_t[]){H, v[4].i, salt},
                     (double[]){1 / sqrt((double)(C / H)), p});
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
    case FE_OP_SUB:
    case FE_OP_MATMUL:
        id = elab_node(E, S, loc,
                       a->call->op->id == FE_OP_ADD   ? IR_OP_ADD
                       : a->call->op->id == FE_OP_SUB ? IR_OP_SUB
                                                      : IR_OP_MATMUL,
                       (int[]){v[0].node, v[1].node}, 2, NULL, NULL);
        break;
    case FE_OP_MAXPOOL:
    case FE_OP_AVGPOOL:
        id = elab_node(E, S, loc, a->call->op->id == FE_OP_MAXPOOL ? IR_OP_MAXPOOL : IR_OP_AVGPOOL,
                       &v[0].node, 1, (int64_t[]){v[1].i, v[2].i, v[3].i}, NULL);
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
    case FE_OP_MUL: id = elab_mul(E, S, loc, v[0].node, v[1].node); break;
    case FE_OP_CONCAT: id = build_concat(E, S, a, loc); break;
    case FE_OP_DROPOUT: id = build_dropout(E, S, a, loc); break;
    case FE_OP_ATTENTION: id = build_attention(E, S, a, loc); break;
    case FE_OP_EMBEDDING: id = build_embedding(E, S, a, inst, loc); break;
    case FE_OP_SOFTMAX_CE: id = build_loss(E, S, a, loc); break;
    case FE_OP_RESHAPE: id = build_reshape(E, S, a, loc); break;
    case FE_OP_PERMUTE:
    case FE_OP_TRANSPOSE: id = build_permute(E, S, a, loc); break;
    case FE_OP_SLICE: id = build_slice(E, S, a, loc); break;
    case FE_OP_SPLIT: id = build_split(E, S, a, loc); break;
    case FE_OP_MASK: id = build_mask(E, S, a, loc); break;
    case FE_OP_POSITIONS: id = build_positions(E, S, a, inst, loc); break;
    case FE_OP_CLASS_TOKEN: id = build_class_token(E, S, a, inst, loc); break;
    }
    return id;
}
