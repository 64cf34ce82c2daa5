/* ir/conv.c — which convolutions may run other ways than im2col + GEMM:
 * as library calls (oneDNN, cuDNN) or as dense products over unrolled
 * weights (the conv pass's choices, ir/ir.h). */
#include "ir/ir.h"

int ir_conv_library_ok(const ir_graph *g, int i) {
    const ir_node *n = &g->nodes[i];
    if ((n->op != IR_OP_CONV && n->op != IR_OP_CONV_GRAD_DATA && n->op != IR_OP_CONV_GRAD_WEIGHT) ||
        (n->flags & IR_FLAG_CNHW))
        return 0;
    if (n->type.dtype != IR_F32 && n->type.dtype != IR_BF16) return 0;
    for (int k = 0; k < n->ninputs; k++) {
        const ir_node *in = &g->nodes[n->input[k]];
        if ((in->type.dtype != IR_F32 && in->type.dtype != IR_BF16) || (in->flags & IR_FLAG_CNHW))
            return 0;
    }
    return 1;
}

void ir_conv_xy(const ir_graph *g, const ir_node *n, const ir_type **x, const ir_type **y) {
    *x = n->op == IR_OP_CONV             ? &g->nodes[n->input[0]].type
         : n->op == IR_OP_CONV_GRAD_DATA ? &n->type
                                         : &g->nodes[n->input[1]].type;
    *y = n->op == IR_OP_CONV ? &n->type : &g->nodes[n->input[0]].type;
}

int ir_conv_dense_ok(const ir_graph *g, int i) {
    const ir_node *n = &g->nodes[i];
    if (!ir_conv_library_ok(g, i) || ir_conv_groups(n) != 1 || n->type.dtype != IR_F32) return 0;
    for (int k = 0; k < n->ninputs; k++)
        if (g->nodes[n->input[k]].type.dtype != IR_F32) return 0;
    const ir_type *x, *y;
    ir_conv_xy(g, n, &x, &y);
    int64_t k = n->iattr[0], s = n->iattr[1], p = n->iattr[2];
    /* output pixel o reads input rows o*s - p .. o*s - p + k - 1: the first
     * output's window must reach the last row, the last's the first */
    for (int d = 2; d < 4; d++)
        if (x->dim[d] - 1 + p > k - 1 || (y->dim[d] - 1) * s > p) return 0;
    int64_t unrolled = y->dim[1] * y->dim[2] * y->dim[3] * x->dim[1] * x->dim[2] * x->dim[3];
    return unrolled <= IR_CONV_DENSE_MAX;
}
