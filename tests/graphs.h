/* tests/graphs.h — building IR graphs by hand in unit tests.
 *
 * Usage:
 *     #include "tests/graphs.h"
 *     ir_graph *g = ir_new();                        // N() builds into `g`
 *     int x = ir_add_input(g, "image", ir_shape4(2, 3, 8, 8), 0);
 *     int c = N(CONV, x, w), IA(3, 1, 1, 1), NULL);  // -1, message printed, on a shape error
 *     int y = N(BATCHNORM, c, ga, bt, rm, rv), IA(1), FA(1e-5, 0.9));
 *     double v = tg_rnd(&state);                     // deterministic, uniform in [-1, 1)
 *     int i = tg_find(g, "conv.weight");             // node by name, or -1
 *     int bn[4]; tg_bn_params(g, c, "bn1", bn);      // bn1.gamma, .beta, .running_mean, .running_var
 */
#ifndef DPC_TESTS_GRAPHS_H
#define DPC_TESTS_GRAPHS_H

#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "ir/ir.h"

static inline int tg_node(ir_graph *g, ir_op op, const int *in, int nin, const int64_t *ia,
                          const double *fa) {
    char err[256];
    int id = ir_add_node(g, op, in, nin, ia, fa, err, sizeof err);
    if (id < 0) fprintf(stderr, "  ir_add_node(%s): %s\n", ir_ops[op].name, err);
    return id;
}
#define N(op, ...) tg_node(g, IR_OP_##op, (int[]){__VA_ARGS__}, (int)(sizeof((int[]){__VA_ARGS__}) / sizeof(int))
/* Every attribute slot: ir_add_node reads as many as the op's schema has,
 * so slots left out are zero, not whatever follows a shorter array. */
#define IA(...) \
    (int64_t[IR_MAX_IATTRS]) { __VA_ARGS__ }
#define FA(...) \
    (double[IR_MAX_FATTRS]) { __VA_ARGS__ }

/* xorshift64: the same values on every machine. */
static inline double tg_rnd(uint64_t *state) {
    *state ^= *state << 13, *state ^= *state >> 7, *state ^= *state << 17;
    return (double)(*state >> 11) / (double)(1ull << 53) * 2 - 1;
}

static inline int tg_find(const ir_graph *g, const char *name) {
    for (int i = 0; i < g->n; i++)
        if (!strcmp(g->nodes[i].name, name)) return i;
    return -1;
}

/* BatchNorm's gamma (one), beta (zero), running mean (zero) and variance
 * (one) for x's channels, named NAME.gamma ... NAME.running_var: ids in p. */
static inline void tg_bn_params(ir_graph *g, int x, const char *name, int p[4]) {
    char buf[IR_NAME_MAX];
    ir_type c = ir_shape1(g->nodes[x].type.dim[1]);
    snprintf(buf, sizeof buf, "%s.gamma", name);
    p[0] = ir_add_param(g, buf, c, IR_INIT_ONE);
    snprintf(buf, sizeof buf, "%s.beta", name);
    p[1] = ir_add_param(g, buf, c, IR_INIT_ZERO);
    snprintf(buf, sizeof buf, "%s.running_mean", name);
    p[2] = ir_add_state(g, buf, c, IR_INIT_ZERO);
    snprintf(buf, sizeof buf, "%s.running_var", name);
    p[3] = ir_add_state(g, buf, c, IR_INIT_ONE);
}

#endif
