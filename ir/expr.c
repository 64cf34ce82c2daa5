/* ir/expr.c — the per-element expression of each pointwise op, how it
 * reads its inputs, and which nodes codegen can fuse (docs/DESIGN.md §3.3). */
#include "ir/ir.h"

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
    [IR_OP_TANH] = "tanhf($0)",
    [IR_OP_TANH_GRAD] = "$0 * (1.0f - $1 * $1)",
    /* 1/sqrt(2), 1/sqrt(2*pi) */
    [IR_OP_GELU] = "0.5f * $0 * (1.0f + erff($0 * 0.70710678f))",
    [IR_OP_GELU_GRAD] = "$0 * (0.5f * (1.0f + erff($1 * 0.70710678f)) + $1 * 0.39894228f * "
                        "expf(-0.5f * $1 * $1))",
    /* sqrt(2/pi); 3 * 0.044715 */
    [IR_OP_GELU_TANH] = "0.5f * $0 * (1.0f + tanhf(0.79788456f * ($0 + 0.044715f * $0 * $0 * $0)))",
    [IR_OP_GELU_TANH_GRAD] =
        "$0 * (0.5f * (1.0f + tanhf(0.79788456f * ($1 + 0.044715f * $1 * $1 * $1))) + 0.5f * $1 * "
        "(1.0f - tanhf(0.79788456f * ($1 + 0.044715f * $1 * $1 * $1)) * tanhf(0.79788456f * ($1 + "
        "0.044715f * $1 * $1 * $1))) * 0.79788456f * (1.0f + 0.134145f * $1 * $1))",
    [IR_OP_BIAS_ADD_LAST] = "$0 + $1l",
    [IR_OP_SUB] = "$0 - $1",
    [IR_OP_MUL_CONST] = "$0 * @0",
    [IR_OP_ADD_CONST] = "$0 + @0",
    /* PyTorch's clip_grad_norm_: c = max_norm / (norm + 1e-6), clamped to
     * at most 1; a NaN norm fails the test and keeps c NaN, as clamp does */
    [IR_OP_CLIP_SCALE] =
        "@0 / (sqrtf($0) * $1 + 1e-6f) >= 1.0f ? $1 : $1 * (@0 / (sqrtf($0) * $1 + "
        "1e-6f))",
};

const char *ir_op_expr(ir_op op) { return (unsigned)op < IR_OP_COUNT ? op_expr[op] : NULL; }

int ir_op_access(ir_op op, int k) {
    const char *t = ir_op_expr(op);
    for (; t && *t; t++)
        if (t[0] == '$' && t[1] == '0' + k) {
            char m = t[2];
            return m == 'c' || m == 's' || m == 'o' || m == 'l' ? m : 'i';
        }
    return 0;
}

int ir_node_fusible(const ir_node *n) {
    if (n->type.dtype == IR_I32) return 0; /* f32 or bf16: codegen converts */
    ir_fuse_class c = ir_op_fuse(n->op);
    return c == IR_FUSE_POINTWISE || c == IR_FUSE_CHANNEL || c == IR_FUSE_ROW;
}

ir_fuse_class ir_node_fuse_class(const ir_node *n) {
    return ir_node_fusible(n) ? ir_ops[n->op].fuse : IR_FUSE_NONE;
}
