/* frontend/elab.h — what elaboration's files share: the values an
 * expression evaluates to, scopes, the elaborator's state, and the helpers
 * that add nodes and parameters. elab.c walks the program; build.c turns
 * one operator call into nodes. Internal to frontend/.
 */
#ifndef DPC_FRONTEND_ELAB_H
#define DPC_FRONTEND_ELAB_H

#include "frontend/ast.h"

typedef enum { V_TENSOR, V_INT, V_FLOAT, V_BOOL } vkind;

typedef struct {
    vkind kind;
    int node;         /* V_TENSOR */
    int64_t i;        /* V_INT, V_BOOL */
    double f;         /* V_FLOAT */
    const char *text; /* V_FLOAT of a literal: as written; NULL when computed */
} value;

typedef struct scope {
    struct scope *parent;
    const char *prefix;    /* "" or "down0.basic1." */
    const fe_block *block; /* NULL for the network */
    fe_loc call_loc;       /* where this block was called */
    int depth;
    fe_map vars;   /* name -> value* */
    fe_map counts; /* op or block name -> int* */
} scope;

typedef struct {
    const fe_program *P;
    ir_graph *g;
    int batch, training;
    fe_diag diag;
    fe_arena tmp;              /* scopes and values; freed when the build ends */
    fe_map inputs;             /* name -> value* */
    int calls, steps;          /* bound the work: blocks can call blocks twice, and so on */
    int dropout_key;           /* the IR_DROPOUT_KEY input once a dropout made it, else -1 */
    int dropouts;              /* dropouts so far: the next one's salt */
    unsigned char *label_rank; /* per node: how its label was given (label_node) */
    int label_cap;
    /* `a, b = split(...)`: the call, its names' count, the parts' nodes */
    const fe_expr *split_call;
    int split_want, split_node[IR_MAX_INPUTS];
} elab;

/* An operator call's arguments, slotted by the operator table, defaults
 * filled in. */
typedef struct {
    const fe_expr *call;
    value v[FE_MAX_OP_ARGS];
    fe_loc loc[FE_MAX_OP_ARGS]; /* where each argument was written */
    char given[FE_MAX_OP_ARGS]; /* written, not a default */
} op_args;

/* The error at loc, with the block calls that led there. */
void elab_error(elab *E, const scope *S, fe_loc loc, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
const char *elab_kind_name(vkind k);
/* A node of op, checked and placed at loc: its id, or -1 after an error. */
int elab_node(elab *E, const scope *S, fe_loc loc, ir_op op, const int *in, int nin,
              const int64_t *iattr, const double *fattr);
/* A parameter (or state, is_state) named <scope><inst>.<leaf>. */
int elab_param(elab *E, const scope *S, fe_loc loc, const char *inst, const char *leaf,
               ir_type type, ir_init init, int is_state);
static inline const ir_type *elab_type(elab *E, const value *v) {
    return &E->g->nodes[v->node].type;
}
/* x * y as mul(x, y) (build.c): the node's id, or -1. */
int elab_mul(elab *E, const scope *S, fe_loc loc, int x, int y);
/* The nodes of one operator call (build.c): the result's id, or -1. */
int elab_op(elab *E, scope *S, const op_args *a, const char *inst, fe_loc loc);

#endif
