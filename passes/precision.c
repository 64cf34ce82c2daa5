/* passes/precision.c — which tensors are stored in bf16 (dpc --precision bf16),
 * and which GEMMs run in TF32 (--precision tf32).
 *
 * Mixed precision as AMP does it: activations and their gradients are
 * stored in bf16, everything that accumulates or persists stays f32. The
 * rule, decided from the graph alone (codegen and memplan read the dtypes):
 *
 *   a node is bf16 when it is a per-sample value of rank >= 2 that the
 *   runtime does not read: not a source, not an output or the loss, not a
 *   parameter gradient.
 *
 * "Per-sample" flows forward from the inputs: a node is per-sample when one
 * of its inputs is and its op keeps the batch axis. Ops that sum over the
 * batch end it: the per-channel reductions (BatchNorm statistics, bias and
 * gamma gradients), the weight gradients of conv and dense, all-reduce, and
 * the optimizer's update and EMA of running statistics (they read only such
 * sums and parameters), layernorm's gamma and beta gradients. Layernorm's
 * row statistics end it too, so they stay f32. So parameters, momentum, BatchNorm statistics and
 * running statistics, parameter gradients and their sums, lr, grad_scale,
 * the loss and the eval logits stay f32; rank-1 [N] values (the loss and
 * its seed) too. Views and assigns take the type of the bytes they share.
 * Inputs keep their type: the image arrives as f32 and its first readers
 * (im2col, the first layer's kernels) convert it.
 *
 * Arithmetic is f32 inside every kernel whatever the storage (codegen loads
 * bf16 into float and rounds to nearest even on store); GEMMs take bf16
 * operands and accumulate in f32 (codegen/gemm.c).
 */
#include <stdlib.h>
#include <string.h>

#include "base/err.h"
#include "passes/passes.h"

/* Whether an op's output keeps the batch axis of a per-sample input. */
static int keeps_samples(ir_op op) {
    if (ir_op_fuse(op) == IR_FUSE_CHANNEL) return 0;
    switch (op) {
    case IR_OP_CONV_GRAD_WEIGHT:
    case IR_OP_DENSE_GRAD_WEIGHT:
    case IR_OP_ALLREDUCE:
    case IR_OP_SGD_MOMENTUM:
    case IR_OP_BN_UNBIAS:
    case IR_OP_EMA:
    case IR_OP_ASSIGN:
    case IR_OP_LAYERNORM_GRAD_GAMMA:
    case IR_OP_SUM_LEADING:
    case IR_OP_LAYERNORM_STATS:
    case IR_OP_ATTENTION_LSE: return 0; /* per row, but f32 as AMP keeps them */
    default: return 1;
    }
}

/* TF32: every GEMM of f32 operands, which stay f32 in memory; cuBLAS
 * rounds them as its tensor cores read them (CUBLAS_COMPUTE_32F_FAST_TF32),
 * the cpu backend before cblas_sgemm (format/tf32.h). */
static void mark_tf32(ir_graph *g) {
    for (int i = 0; i < g->n; i++) {
        ir_node *n = &g->nodes[i];
        if (ir_op_gemm(n->op) && ir_conv_groups(n) <= 1 && /* dense: 0 */
            g->nodes[n->input[0]].type.dtype == IR_F32 &&
            g->nodes[n->input[1]].type.dtype == IR_F32)
            n->flags |= IR_FLAG_TF32;
    }
}

int pass_precision(ir_graph **gp, pass_precision_kind p, char *err, size_t errlen) {
    (void)err;
    (void)errlen;
    ir_graph *g = *gp;
    if (p == PASS_PRECISION_FP32) return 0;
    if (p == PASS_PRECISION_TF32) {
        mark_tf32(g);
        return 0;
    }
    unsigned char *per_sample = calloc((size_t)g->n + 1, 1);
    BASE_CHECK_ALLOC(per_sample);
    for (int i = 0; i < g->n; i++) {
        ir_node *n = &g->nodes[i];
        if (n->op == IR_OP_INPUT) {
            per_sample[i] = 1;
            continue;
        }
        if (ir_is_persistent(n->op)) continue;
        for (int k = 0; k < n->ninputs && keeps_samples(n->op); k++)
            if (per_sample[n->input[k]]) per_sample[i] = 1;
        if (ir_is_view(n->op) || n->op == IR_OP_ASSIGN || n->op == IR_OP_ALLREDUCE) {
            n->type.dtype = g->nodes[n->input[0]].type.dtype; /* shares those bytes */
            continue;
        }
        unsigned runtime_reads = IR_FLAG_OUTPUT | IR_FLAG_LOSS | IR_FLAG_GRAD;
        if (per_sample[i] && n->type.dtype == IR_F32 && n->type.ndim >= 2 &&
            !(n->flags & runtime_reads))
            n->type.dtype = IR_BF16;
    }
    free(per_sample);
    return 0;
}

int pass_precision_parse(const char *name, pass_precision_kind *out) {
    if (!strcmp(name, "fp32"))
        *out = PASS_PRECISION_FP32;
    else if (!strcmp(name, "bf16"))
        *out = PASS_PRECISION_BF16;
    else if (!strcmp(name, "tf32"))
        *out = PASS_PRECISION_TF32;
    else
        return -1;
    return 0;
}

pass_precision_kind pass_precision_of(const ir_graph *g) {
    pass_precision_kind p = PASS_PRECISION_FP32;
    for (int i = 0; i < g->n; i++) {
        if (g->nodes[i].type.dtype == IR_BF16) return PASS_PRECISION_BF16;
        if (g->nodes[i].flags & IR_FLAG_TF32) p = PASS_PRECISION_TF32;
    }
    return p;
}

const char *pass_precision_name(pass_precision_kind p) {
    return p == PASS_PRECISION_BF16 ? "bf16" : p == PASS_PRECISION_TF32 ? "tf32" : "fp32";
}
