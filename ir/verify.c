/* ir/verify.c — ir_verify (docs/DESIGN.md §3.4) and the layout rules it
 * checks. */
#include "ir/ir.h"

#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "base/err.h"
#include "ir/internal.h"
#include "ir/names.h"

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
            rc = base_fail(err, errlen, "node %d: bad fusion group %d", i, grp);
            break;
        }
        if (grp && (ir_is_source(n->op) || ir_is_view(n->op))) {
            rc = base_fail(err, errlen, "node %d (%s) cannot be in a fusion group", i,
                           ir_ops[n->op].name);
            break;
        }
        if (grp != prev && grp) {
            if (!closed) {
                closed = calloc((size_t)g->n + 1, 1);
                BASE_CHECK_ALLOC(closed);
            }
            if (closed[grp])
                rc = base_fail(err, errlen, "node %d: fusion group %d is not contiguous", i, grp);
            closed[grp] = 1;
        }
        prev = grp;
    }
    free(closed);
    return rc;
}

static int verify_nodes(const ir_graph *g, ir_names *names, int *last_read, char *err,
                        size_t errlen);

int ir_op_mixes_layout(ir_op op) {
    return op == IR_OP_CONV || op == IR_OP_CONV_GRAD_DATA || op == IR_OP_CONV_GRAD_WEIGHT ||
           op == IR_OP_GLOBAL_AVGPOOL || op == IR_OP_GLOBAL_AVGPOOL_GRAD || op == IR_OP_TRANSPOSE;
}

int ir_op_gemm(ir_op op) {
    return op == IR_OP_CONV || op == IR_OP_CONV_GRAD_DATA || op == IR_OP_CONV_GRAD_WEIGHT ||
           op == IR_OP_DENSE || op == IR_OP_DENSE_GRAD_DATA || op == IR_OP_DENSE_GRAD_WEIGHT ||
           op == IR_OP_MATMUL;
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
        return base_fail(err, errlen, "node %d (%s): channel-major layout on a %s", i, op,
                         n->type.ndim != 4 ? "tensor not of rank 4"
                                           : "source, batchnorm or output");
    if (ir_is_source(n->op)) return 0;
    const ir_node *x = &g->nodes[n->input[0]];
    int shared = ir_is_view(n->op) || n->op == IR_OP_ASSIGN || n->op == IR_OP_ALLREDUCE;
    if (shared && (cnhw(n) != cnhw(x) || (cnhw(x) && !ir_type_same_shape(&n->type, &x->type))))
        return base_fail(err, errlen, "node %d (%s): a view of %%%d in another layout", i, op,
                         n->input[0]);
    if (n->op == IR_OP_TRANSPOSE && cnhw(n) == cnhw(x))
        return base_fail(err, errlen, "node %d (transpose): input %%%d already in its layout", i,
                         n->input[0]);
    if (shared || ir_op_mixes_layout(n->op)) return 0;
    int want = ir_node_layout(g, i);
    for (int k = 0; k < n->ninputs; k++) {
        const ir_node *in = &g->nodes[n->input[k]];
        if (in->type.ndim == 4 && cnhw(in) != want)
            return base_fail(err, errlen, "node %d (%s): input %d (%%%d) is %s, the node %s", i, op,
                             k, n->input[k], cnhw(in) ? "CNHW" : "NCHW", want ? "CNHW" : "NCHW");
    }
    return 0;
}

int ir_verify(const ir_graph *g, char *err, size_t errlen) {
    ir_names names = ir_names_nodes(g, 64); /* source names seen so far */
    /* last_read[k]: the last node reading node k, -1 if none (assign order). */
    int *last_read = malloc(sizeof(int) * (size_t)(g->n ? g->n : 1));
    BASE_CHECK_ALLOC(last_read);
    for (int i = 0; i < g->n; i++) last_read[i] = -1;
    for (int i = 0; i < g->n; i++)
        for (int k = 0; k < g->nodes[i].ninputs && k < IR_MAX_INPUTS; k++) {
            int in = g->nodes[i].input[k];
            if (in >= 0 && in < g->n) last_read[in] = i;
        }
    int rc = verify_nodes(g, &names, last_read, err, errlen);
    ir_names_free(&names);
    free(last_read);
    return rc;
}

static int verify_nodes(const ir_graph *g, ir_names *names, int *last_read, char *err,
                        size_t errlen) {
    int losses = 0;
    for (int i = 0; i < g->n; i++) {
        const ir_node *n = &g->nodes[i];
        if ((unsigned)n->op >= IR_OP_COUNT)
            return base_fail(err, errlen, "node %d: bad op %d", i, n->op);
        const ir_op_info *info = &ir_ops[n->op];
        if (n->ninputs < info->min_arity || n->ninputs > info->max_arity)
            return base_fail(err, errlen, "node %d (%s): %d inputs", i, info->name, n->ninputs);
        for (int j = 0; j < n->ninputs; j++)
            if (n->input[j] < 0 || n->input[j] >= i)
                return base_fail(err, errlen,
                                 "node %d (%s): input %d = %d breaks topological order", i,
                                 info->name, j, n->input[j]);
        if (n->type.ndim < 1 || n->type.ndim > IR_MAX_DIMS)
            return base_fail(err, errlen, "node %d (%s): rank %d", i, info->name, n->type.ndim);
        for (int d = 0; d < n->type.ndim; d++)
            if (n->type.dim[d] <= 0 || n->type.dim[d] > (1ll << 40))
                return base_fail(err, errlen, "node %d (%s): dimension %d is %" PRId64, i,
                                 info->name, d, n->type.dim[d]);
        if (memchr(n->name, 0, sizeof n->name) == NULL)
            return base_fail(err, errlen, "node %d: name not terminated", i);
        if (ir_is_source(n->op)) {
            if (!n->name[0])
                return base_fail(err, errlen, "node %d (%s): source without a name", i, info->name);
            if (ir_names_add(names, i) >= 0)
                return base_fail(err, errlen, "node %d: duplicate name '%s'", i, n->name);
            if (n->op != IR_OP_INPUT &&
                (n->iattr[0] < IR_INIT_ZERO || n->iattr[0] > IR_INIT_SCALED))
                return base_fail(err, errlen, "node %d: bad initialiser %" PRId64, i, n->iattr[0]);
        } else {
            ir_type t;
            char why[200];
            if (ir_infer_type(g, n, &t, why, sizeof why))
                return base_fail(err, errlen, "node %d (%s): %s", i, info->name, why);
            /* Shape rules give float results as f32; the storage type of a
             * float value (f32 or bf16) is the precision pass's choice, except
             * where bytes are shared: a view or an assign has its storage's
             * type, an all-reduced gradient is f32. */
            if (!ir_type_same_shape(&t, &n->type))
                return base_fail(err, errlen, "node %d (%s): type %s, shape rule says %s", i,
                                 info->name, TYPE_STR(&n->type), TYPE_STR(&t));
            int shared = ir_is_view(n->op) || n->op == IR_OP_ASSIGN || n->op == IR_OP_ALLREDUCE;
            if (shared && n->type.dtype != g->nodes[n->input[0]].type.dtype)
                return base_fail(err, errlen, "node %d (%s): type %s differs from its storage's %s",
                                 i, info->name, TYPE_STR(&n->type),
                                 TYPE_STR(&g->nodes[n->input[0]].type));
        }
        if (n->op == IR_OP_ASSIGN &&
            last_read[n->input[0]] > i) { /* a write follows every read of its target */
            int j = last_read[n->input[0]];
            return base_fail(err, errlen, "node %d (%s) reads %%%d after assign %%%d", j,
                             ir_ops[g->nodes[j].op].name, n->input[0], i);
        }
        if (verify_layout(g, i, err, errlen)) return -1;
        /* TF32 rounds a GEMM's f32 operands: nothing else has them */
        if ((n->flags & IR_FLAG_TF32) && (!ir_op_gemm(n->op) || ir_conv_groups(n) > 1 ||
                                          g->nodes[n->input[0]].type.dtype != IR_F32 ||
                                          g->nodes[n->input[1]].type.dtype != IR_F32))
            return base_fail(err, errlen, "node %d (%s): tf32 on an op that is no f32 GEMM", i,
                             info->name);
        /* a library convolution is an f32/bf16 one in NCHW (cg_conv) */
        if ((n->flags & IR_FLAG_CONV_TUNE) && !(n->flags & IR_FLAG_CONV_LIB))
            return base_fail(err, errlen, "node %d (%s): tune without libconv", i, info->name);
        if ((n->flags & IR_FLAG_CONV_LIB) && !ir_conv_library_ok(g, i))
            return base_fail(err, errlen,
                             "node %d (%s): libconv on an op that is no f32/bf16 NCHW convolution",
                             i, info->name);
        if ((n->flags & IR_FLAG_CONV_DENSE) && !ir_conv_dense_ok(g, i))
            return base_fail(err, errlen,
                             "node %d (%s): dense on a convolution whose window misses some input",
                             i, info->name);
        if (n->flags & IR_FLAG_LOSS) losses++;
    }
    if (losses > 1) return base_fail(err, errlen, "%d loss nodes", losses);
    return verify_groups(g, err, errlen);
}
