/* format/plan_graph.c — the graph sections' bytes: GTRN and GEVL (one
 * program each: its nodes field by field) and GRPS (the fusion groups,
 * written only when a node has one). The reader decodes what the writer
 * wrote and leaves the ranges to plan_check. */
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "format/plan_internal.h"
#include "base/bytes.h"
#include "base/err.h"
#include "ir/validate.h"

int plan_has_groups(const ir_graph *g) {
    for (int i = 0; g && i < g->n; i++)
        if (g->nodes[i].group) return 1;
    return 0;
}

void plan_put_graph(base_wbuf *b, const ir_graph *g) {
    base_put_u32(b, (uint32_t)g->n);
    for (int i = 0; i < g->n; i++) {
        const ir_node *n = &g->nodes[i];
        int nia = ir_op_num_iattrs(n->op), nfa = ir_op_num_fattrs(n->op);
        base_put_u32(b, (uint32_t)n->op);
        base_put_u32(b, (uint32_t)n->ninputs);
        for (int j = 0; j < n->ninputs; j++) base_put_u32(b, (uint32_t)n->input[j]);
        base_put_u32(b, (uint32_t)nia);
        for (int j = 0; j < nia; j++) base_put_i64(b, n->iattr[j]);
        base_put_u32(b, (uint32_t)nfa);
        for (int j = 0; j < nfa; j++) base_put_f64(b, n->fattr[j]);
        base_put_u32(b, (uint32_t)n->type.ndim);
        for (int d = 0; d < n->type.ndim; d++) base_put_i64(b, n->type.dim[d]);
        base_put_u32(b, (uint32_t)n->type.dtype);
        base_put_u32(b, n->flags);
        base_put_str(b, n->name);
        base_put_i32(b, n->line);
        base_put_i32(b, n->col);
    }
}

/* An attribute count, which must be the op's. */
static int get_count(plan_rd *r, const char *op, const char *kind, int expected) {
    uint32_t n = plan_get_u32(r);
    if (r->failed) return -1;
    if (n != (uint32_t)expected)
        return plan_rd_fail(r, "%s with %" PRIu32 " %s attributes, expected %d", op, n, kind,
                            expected);
    return 0;
}

/* Decodes the fields; ranges that need no decoding are left to check_node(). */
static int get_node(plan_rd *r, ir_node *n, int idx) {
    r->node = idx;
    uint32_t op = plan_get_u32(r);
    if (r->failed) return -1;
    if (op >= IR_OP_COUNT) return plan_rd_fail(r, "unknown op %" PRIu32, op);
    n->op = (ir_op)op;
    const char *name = ir_ops[op].name;
    uint32_t nin = plan_get_u32(r);
    if (r->failed) return -1;
    if (nin > IR_MAX_INPUTS) return plan_rd_fail(r, "%s with %" PRIu32 " inputs", name, nin);
    n->ninputs = (int)nin;
    for (uint32_t j = 0; j < nin; j++) {
        uint32_t in = plan_get_u32(r);
        if (r->failed) return -1;
        if (in >= (uint32_t)idx)
            return plan_rd_fail(r, "%s: input %" PRIu32 " is node %" PRIu32 ", not an earlier one",
                                name, j, in);
        n->input[j] = (int)in;
    }
    int nia = ir_op_num_iattrs(n->op), nfa = ir_op_num_fattrs(n->op);
    if (get_count(r, name, "integer", nia)) return -1;
    for (int j = 0; j < nia; j++) n->iattr[j] = plan_get_i64(r);
    if (get_count(r, name, "float", nfa)) return -1;
    for (int j = 0; j < nfa; j++) n->fattr[j] = plan_get_f64(r);
    uint32_t ndim = plan_get_u32(r);
    if (r->failed) return -1;
    if (ndim < 1 || ndim > IR_MAX_DIMS)
        return plan_rd_fail(r, "%s: rank %" PRIu32 ", must be 1 to %d", name, ndim, IR_MAX_DIMS);
    n->type.ndim = (int)ndim;
    for (uint32_t d = 0; d < ndim; d++) n->type.dim[d] = plan_get_i64(r);
    uint32_t dtype = plan_get_u32(r);
    if (r->failed) return -1;
    if (dtype > IR_I32) return plan_rd_fail(r, "%s: unknown dtype %" PRIu32, name, dtype);
    n->type.dtype = (ir_dtype)dtype;
    n->flags = plan_get_u32(r);
    plan_get_str(r, n->name, sizeof n->name, "name");
    n->line = plan_get_i32(r);
    n->col = plan_get_i32(r);
    return r->failed ? -1 : 0;
}

ir_graph *plan_get_graph(plan_rd *r) {
    uint32_t n = plan_get_u32(r);
    if (r->failed) return NULL;
    /* Never allocate from a count the bytes can't back. */
    if (n > base_left(&r->b) / PLAN_NODE_MIN_BYTES || n > INT32_MAX / 2) {
        plan_rd_fail(r, "%" PRIu32 " nodes cannot fit in %zu bytes", n, base_left(&r->b));
        return NULL;
    }
    ir_graph *g = ir_new();
    if (n) {
        g->nodes = calloc(n, sizeof *g->nodes);
        if (!g->nodes) {
            plan_rd_fail(r, "out of memory");
            ir_free(g);
            return NULL;
        }
        g->cap = (int)n;
    }
    for (uint32_t i = 0; i < n && !r->failed; i++) {
        get_node(r, &g->nodes[i], (int)i);
        g->n = (int)i + 1;
    }
    r->node = -1;
    plan_get_done(r);
    if (r->failed) {
        ir_free(g);
        return NULL;
    }
    return g;
}

/* One program's fusion groups; ir_verify (in plan_check) checks them. */
void plan_get_groups(plan_rd *r, ir_graph *g) {
    uint32_t n = plan_get_u32(r);
    if (r->failed) return;
    if (n != (uint32_t)g->n) {
        plan_rd_fail(r, "%" PRIu32 " entries for %d nodes", n, g->n);
        return;
    }
    for (int i = 0; i < g->n && !r->failed; i++) {
        uint32_t grp = plan_get_u32(r);
        if (grp > (uint32_t)g->n) plan_rd_fail(r, "node %d: group %" PRIu32, i, grp);
        g->nodes[i].group = (int)grp;
    }
}
