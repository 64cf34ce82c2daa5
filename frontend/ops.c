/* frontend/ops.c — the built-in operators' table (names, argument specs
 * and defaults) that the checker and elab.c look calls up in, and the
 * nearest name for a misspelled one.
 */
#include <string.h>

#include "frontend/ast.h"
#include "base/err.h"

/* ---- the operator table ---------------------------------------------------- */

/* Argument specs: required tensor / integer, optional integer / float /
 * boolean with a default. */
#define TENSOR(name) \
    { name, FE_ARG_TENSOR, 1, 0, 0, NULL }
#define TENSOR_OPT(name) \
    { name, FE_ARG_TENSOR, 0, 0, 0, NULL }
#define INT(name, min) \
    { name, FE_ARG_INT, 1, 0, min, NULL }
#define INT_OPT(name, def, min) \
    { name, FE_ARG_INT, 0, def, min, NULL }
#define FLOAT(name) \
    { name, FE_ARG_FLOAT, 1, 0, 0, NULL }
#define FLOAT_OPT(name, def) \
    { name, FE_ARG_FLOAT, 0, def, 0, NULL }
#define BOOL_OPT(name, def) \
    { name, FE_ARG_BOOL, 0, def, 0, NULL }
#define WORD_OPT(name, words) \
    { name, FE_ARG_WORD, 0, 0, 0, words }

static const fe_opdef ops[] = {
    {"conv",
     FE_OP_CONV,
     7,
     {TENSOR("x"), INT("channels", 1), INT("k", 1), INT_OPT("s", 1, 1), INT_OPT("p", 0, 0),
      BOOL_OPT("bias", 1), INT_OPT("groups", 1, 1)}},
    {"batchnorm",
     FE_OP_BATCHNORM,
     8,
     {TENSOR("x"), FLOAT_OPT("eps", 1e-5), FLOAT_OPT("momentum", 0.9), FLOAT_OPT("gamma_init", 1),
      BOOL_OPT("residual_last", 0), BOOL_OPT("sync", 0), BOOL_OPT("scale", 1),
      BOOL_OPT("center", 1)}},
    {"relu", FE_OP_RELU, 1, {TENSOR("x")}},
    {"add", FE_OP_ADD, 2, {TENSOR("a"), TENSOR("b")}},
    {"maxpool",
     FE_OP_MAXPOOL,
     4,
     {TENSOR("x"), INT("k", 1), INT_OPT("s", FE_SAME_AS_K, 1), INT_OPT("p", 0, 0)}},
    {"avgpool",
     FE_OP_AVGPOOL,
     4,
     {TENSOR("x"), INT("k", 1), INT_OPT("s", FE_SAME_AS_K, 1), INT_OPT("p", 0, 0)}},
    {"global_avgpool", FE_OP_GLOBAL_AVGPOOL, 1, {TENSOR("x")}},
    {"flatten", FE_OP_FLATTEN, 1, {TENSOR("x")}},
    {"dense", FE_OP_DENSE, 3, {TENSOR("x"), INT("units", 1), BOOL_OPT("bias", 1)}},
    {"softmax_cross_entropy",
     FE_OP_SOFTMAX_CE,
     4,
     {TENSOR("logits"), TENSOR("label"), FLOAT_OPT("smoothing", 0), INT_OPT("ignore", -1, -1)}},
    {"sigmoid", FE_OP_SIGMOID, 1, {TENSOR("x")}},
    {"clip", FE_OP_CLIP, 3, {TENSOR("x"), FLOAT("lo"), FLOAT("hi")}},
    {"relu6", FE_OP_RELU6, 1, {TENSOR("x")}},
    {"mul", FE_OP_MUL, 2, {TENSOR("a"), TENSOR("b")}},
    /* up to IR_MAX_INPUTS tensors; axis by keyword (or ninth) */
    {"concat",
     FE_OP_CONCAT,
     9,
     {TENSOR("a"), TENSOR("b"), TENSOR_OPT("c"), TENSOR_OPT("d"), TENSOR_OPT("e"), TENSOR_OPT("f"),
      TENSOR_OPT("g"), TENSOR_OPT("h"), INT_OPT("axis", 1, 0)}},
    {"dropout", FE_OP_DROPOUT, 2, {TENSOR("x"), FLOAT("p")}},
    {"tanh", FE_OP_TANH, 1, {TENSOR("x")}},
    {"gelu", FE_OP_GELU, 2, {TENSOR("x"), WORD_OPT("approx", "erf|tanh")}},
    {"layernorm", FE_OP_LAYERNORM, 2, {TENSOR("x"), FLOAT_OPT("eps", 1e-5)}},
    {"softmax", FE_OP_SOFTMAX, 2, {TENSOR("x"), INT_OPT("axis", -1, -FE_MAX_SIZE)}},
    {"embedding", FE_OP_EMBEDDING, 3, {TENSOR("ids"), INT("vocab", 1), INT("dim", 1)}},
};

const fe_opdef *fe_find_op(const char *name) {
    for (size_t i = 0; i < sizeof ops / sizeof ops[0]; i++)
        if (!strcmp(ops[i].name, name)) return &ops[i];
    return NULL;
}

const char *fe_nearest_op(const char *name) {
    base_near n = {0};
    for (size_t i = 0; i < sizeof ops / sizeof ops[0]; i++) base_near_try(&n, name, ops[i].name);
    return n.best;
}
