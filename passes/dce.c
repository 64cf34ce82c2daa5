/* passes/dce.c — dead-node elimination, the example pass of docs/passes.md.
 *
 * Keeps what the runtime reads (outputs, the loss, gradients), what writes
 * state (assign) or talks to other replicas (allreduce), every source (the
 * store and the inputs are found by name), and whatever those read;
 * drops the rest. Before fuse, so groups need no repair.
 */
#include <stdlib.h>

#include "base/err.h"
#include "passes/passes.h"

static int is_root(const ir_node *n) {
    return (n->flags & (IR_FLAG_OUTPUT | IR_FLAG_LOSS | IR_FLAG_GRAD)) || n->op == IR_OP_ASSIGN ||
           n->op == IR_OP_ALLREDUCE || ir_ops[n->op].max_arity == 0;
}

int pass_dce(ir_graph **gp, int *removed, char *err, size_t errlen) {
    const ir_graph *g = *gp;
    unsigned char *live = calloc((size_t)g->n + 1, 1);
    int *map = malloc(sizeof *map * ((size_t)g->n + 1));
    BASE_CHECK_ALLOC(live && map);
    for (int i = g->n - 1; i >= 0; i--) { /* readers come after what they read */
        live[i] |= is_root(&g->nodes[i]);
        if (live[i])
            for (int j = 0; j < g->nodes[i].ninputs; j++) live[g->nodes[i].input[j]] = 1;
    }
    ir_graph *ng = ir_new();
    ng->cap = g->n;
    ng->nodes = calloc((size_t)g->n + 1, sizeof *ng->nodes);
    BASE_CHECK_ALLOC(ng->nodes);
    for (int i = 0; i < g->n; i++) {
        map[i] = -1;
        if (!live[i]) continue;
        ir_node n = g->nodes[i];
        for (int j = 0; j < n.ninputs; j++) n.input[j] = map[n.input[j]];
        map[i] = ng->n;
        ng->nodes[ng->n++] = n;
    }
    if (removed) *removed = g->n - ng->n;
    free(live), free(map);
    char why[256];
    int rc = ir_verify(ng, why, sizeof why) ? base_fail(err, errlen, "dce: %s", why) : 0;
    return ir_replace(gp, ng, rc);
}
