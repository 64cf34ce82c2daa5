/* ir/graph.c — building graphs (ir_new, ir_add_*), copying them, and the
 * whole-graph queries: storage, groups, the hash, loss and parameters. */
#include "ir/ir.h"

#include <stdlib.h>
#include <string.h>

#include "base/err.h"
#include "base/hash.h"

ir_graph *ir_new(void) {
    ir_graph *g = calloc(1, sizeof *g);
    BASE_CHECK_ALLOC(g);
    return g;
}

void ir_free(ir_graph *g) {
    if (!g) return;
    free(g->nodes);
    free(g);
}

int ir_replace(ir_graph **g, ir_graph *ng, int failed) {
    if (failed) {
        ir_free(ng);
        return -1;
    }
    ir_free(*g);
    *g = ng;
    return 0;
}

ir_graph *ir_clone(const ir_graph *g) {
    ir_graph *c = ir_new();
    if (g->n) {
        c->nodes = malloc(sizeof *c->nodes * (size_t)g->n);
        BASE_CHECK_ALLOC(c->nodes);
        memcpy(c->nodes, g->nodes, sizeof *c->nodes * (size_t)g->n);
    }
    c->n = c->cap = g->n;
    return c;
}

static int push(ir_graph *g, const ir_node *node) {
    if (g->n == g->cap) {
        g->cap = g->cap ? g->cap * 2 : 64;
        g->nodes = realloc(g->nodes, sizeof *g->nodes * (size_t)g->cap);
        BASE_CHECK_ALLOC(g->nodes);
    }
    g->nodes[g->n] = *node;
    return g->n++;
}

static void set_name(ir_node *n, const char *name) {
    snprintf(n->name, sizeof n->name, "%s", name ? name : "");
}

static int add_source(ir_graph *g, ir_op op, const char *name, ir_type type, int64_t attr) {
    ir_node n = {0};
    n.op = op;
    n.type = type;
    n.iattr[0] = attr;
    set_name(&n, name);
    return push(g, &n);
}

int ir_add_input(ir_graph *g, const char *name, ir_type type, int64_t classes) {
    return add_source(g, IR_OP_INPUT, name, type, classes);
}
int ir_add_param(ir_graph *g, const char *name, ir_type type, ir_init init) {
    return add_source(g, IR_OP_PARAM, name, type, init);
}
int ir_add_state(ir_graph *g, const char *name, ir_type type, ir_init init) {
    return add_source(g, IR_OP_STATE, name, type, init);
}

int ir_add_node(ir_graph *g, ir_op op, const int *inputs, int ninputs, const int64_t *iattr,
                const double *fattr, char *err, size_t errlen) {
    ir_node n = {0};
    if ((unsigned)op >= IR_OP_COUNT) return base_fail(err, errlen, "unknown op %d", (int)op);
    n.op = op;
    if (ninputs < ir_ops[op].min_arity || ninputs > ir_ops[op].max_arity)
        return base_fail(err, errlen, "%s takes %d inputs, got %d", ir_ops[op].name,
                         ir_ops[op].min_arity, ninputs);
    n.ninputs = ninputs;
    for (int i = 0; i < ninputs; i++) {
        if (inputs[i] < 0 || inputs[i] >= g->n)
            return base_fail(err, errlen, "%s: input %d refers to no node", ir_ops[op].name, i);
        n.input[i] = inputs[i];
    }
    for (int i = 0; iattr && i < ir_op_num_iattrs(op); i++) n.iattr[i] = iattr[i];
    for (int i = 0; fattr && i < ir_op_num_fattrs(op); i++) n.fattr[i] = fattr[i];
    if (ir_infer_type(g, &n, &n.type, err, errlen)) return -1;
    if (ir_numel(&n.type) > IR_MAX_NUMEL) {
        char buf[96];
        return base_fail(err, errlen, "tensor %s is too large (more than 2^40 elements)",
                         ir_type_str(&n.type, buf, sizeof buf));
    }
    return push(g, &n);
}

/* ---- whole-graph queries ------------------------------------------------ */

int ir_storage_of(const ir_graph *g, int node) {
    while (node >= 0 && node < g->n &&
           (ir_is_view(g->nodes[node].op) || g->nodes[node].op == IR_OP_ASSIGN))
        node = g->nodes[node].input[0];
    return node;
}

void ir_stored(const ir_graph *g, unsigned char *stored) {
    /* 1 = read by nobody so far; 2 = read from outside its group. */
    for (int i = 0; i < g->n; i++) stored[i] = 1;
    for (int i = 0; i < g->n; i++) {
        const ir_node *n = &g->nodes[i];
        for (int j = 0; j < n->ninputs; j++) {
            int p = n->input[j];
            if (stored[p] == 1) stored[p] = 0;
            if (!g->nodes[p].group || g->nodes[p].group != n->group) stored[p] = 2;
        }
    }
    for (int i = 0; i < g->n; i++) {
        const ir_node *n = &g->nodes[i];
        stored[i] = !n->group || stored[i] != 0 || n->op == IR_OP_ASSIGN ||
                    (n->flags & (IR_FLAG_OUTPUT | IR_FLAG_LOSS | IR_FLAG_GRAD));
    }
}

int ir_num_groups(const ir_graph *g) {
    int m = 0;
    for (int i = 0; i < g->n; i++)
        if (g->nodes[i].group > m) m = g->nodes[i].group;
    return m;
}

static uint64_t hash_i64(uint64_t h, int64_t v) {
    unsigned char b[8];
    for (int i = 0; i < 8; i++) b[i] = (unsigned char)((uint64_t)v >> (8 * i));
    return base_fnv1a(h, b, 8);
}

uint64_t ir_graph_hash(const ir_graph *g) {
    uint64_t h = hash_i64(BASE_FNV1A_INIT, g->n);
    for (int i = 0; i < g->n; i++) {
        const ir_node *n = &g->nodes[i];
        h = hash_i64(h, n->op);
        h = hash_i64(h, n->ninputs);
        for (int j = 0; j < n->ninputs; j++) h = hash_i64(h, n->input[j]);
        for (int j = 0; j < IR_MAX_IATTRS; j++) h = hash_i64(h, n->iattr[j]);
        /* a third float slot only where the op has one: older graphs hash as before */
        for (int j = 0; j < (ir_op_num_fattrs(n->op) > 2 ? IR_MAX_FATTRS : 2); j++) {
            int64_t bits;
            memcpy(&bits, &n->fattr[j], sizeof bits);
            h = hash_i64(h, bits);
        }
        h = hash_i64(h, n->type.ndim);
        h = hash_i64(h, n->type.dtype);
        for (int d = 0; d < n->type.ndim && d < IR_MAX_DIMS; d++) h = hash_i64(h, n->type.dim[d]);
        if (n->flags & IR_FLAG_CNHW) h = hash_i64(h, IR_FLAG_CNHW); /* NCHW graphs hash as before */
        if (n->flags & IR_FLAG_TF32) h = hash_i64(h, IR_FLAG_TF32); /* so do fp32 ones */
        if (n->flags & IR_FLAG_CONV_LIB)
            h = hash_i64(h, n->flags & (IR_FLAG_CONV_LIB | IR_FLAG_CONV_TUNE));
        if (n->flags & IR_FLAG_CONV_DENSE) h = hash_i64(h, IR_FLAG_CONV_DENSE);
        /* Groups decide the kernels; inside a group, flags decide what is
         * stored. Ungrouped graphs hash as they did before fusion existed. */
        if (n->group) {
            h = hash_i64(h, n->group);
            h = hash_i64(h, n->flags);
        }
    }
    return h;
}

int ir_loss_node(const ir_graph *g) {
    for (int i = 0; i < g->n; i++)
        if (g->nodes[i].flags & IR_FLAG_LOSS) return i;
    return -1;
}

int64_t ir_num_params(const ir_graph *g) {
    int64_t total = 0;
    for (int i = 0; i < g->n; i++)
        if (g->nodes[i].op == IR_OP_PARAM) total += ir_numel(&g->nodes[i].type);
    return total;
}
