/* passes/layout.c — the layout of every activation: channel-major (CNHW)
 * between convolutions, NCHW where a reader needs it.
 *
 * A conv's GEMM writes C x N*H*W; storing that as it is (IR_FLAG_CNHW)
 * saves the transpose to NCHW after every conv and back before every conv
 * gradient, and makes each channel one contiguous row for BatchNorm's
 * reductions. The rule, decided from the graph alone, in graph order:
 *
 *   CNHW   conv, conv_grad_data and global_avgpool_grad outputs (codegen
 *          writes either layout at no cost), and every other rank-4
 *          activation with a CNHW rank-4 input (pointwise ops, pooling and
 *          its gradients, views of the same shape);
 *   NCHW   sources, weight-shaped values (their gradients, the update),
 *          what the runtime reads (output, loss, gradient flags), flatten
 *          and any view that changes the shape, batchnorm (lowered first).
 *
 * Ops that read and write either layout (ir_op_mixes_layout: conv and its
 * gradients read x and dy in either, global_avgpool reads either, its
 * gradient writes either) need nothing. Any other op whose rank-4 operand
 * is in the other layout gets an explicit transpose node in front of it,
 * with its reason in iattr[0] (pass_layout_reason): nothing transposes
 * without a stated why, and pass_layout_report prints them all.
 */
#include <stdlib.h>
#include <string.h>

#include "base/err.h"
#include "passes/passes.h"

static const char *const reasons[PASS_LAYOUT_WHY_COUNT] = {
    [PASS_LAYOUT_WHY_VIEW] = "a view (flatten, reshape) reads the bytes as NCHW",
    [PASS_LAYOUT_WHY_RUNTIME] = "the runtime reads the value as NCHW (output, loss, gradient)",
    [PASS_LAYOUT_WHY_SOURCE] = "a graph input or parameter is NCHW",
    [PASS_LAYOUT_WHY_VIEW_RESULT] = "a view's result (flatten's gradient) is NCHW",
    [PASS_LAYOUT_WHY_NCHW] = "its producer is NCHW",
    [PASS_LAYOUT_WHY_READER] =
        "its reader works in NCHW only (batchnorm, unlowered; the shape ops)",
};

const char *pass_layout_reason(int64_t why) {
    return why > 0 && why < PASS_LAYOUT_WHY_COUNT ? reasons[why] : NULL;
}

static int rank4(const ir_node *n) { return n->type.ndim == 4 && n->type.dtype != IR_I32; }
static int runtime_reads(const ir_node *n) {
    return (n->flags & (IR_FLAG_OUTPUT | IR_FLAG_LOSS | IR_FLAG_GRAD)) != 0;
}
static int shares_bytes(ir_op op) {
    return ir_is_view(op) || op == IR_OP_ASSIGN || op == IR_OP_ALLREDUCE;
}
/* Whether input k of n is read at all (reshape_like's `like` is not). */
static int reads(const ir_node *n, int k) { return !(n->op == IR_OP_RESHAPE_LIKE && k == 1); }

/* Ops whose kernels address row-major (NCHW) elements only: the shape ops
 * of codegen/shape.c (concat there off the channel axis). */
static int row_major_only(const ir_node *n) {
    return n->op == IR_OP_PERMUTE || n->op == IR_OP_SLICE || n->op == IR_OP_SLICE_GRAD ||
           n->op == IR_OP_CAUSAL_MASK || n->op == IR_OP_PAD_MASK ||
           (n->op == IR_OP_CONCAT && n->iattr[0] != 1);
}

/* lay[i]: node i's output layout (1 = CNHW); want[i]: the layout its
 * rank-4 operands must have (-1: any, or it has none). */
static void decide(const ir_graph *g, signed char *lay, signed char *want) {
    for (int i = 0; i < g->n; i++) {
        const ir_node *n = &g->nodes[i];
        lay[i] = 0, want[i] = -1;
        if (ir_is_source(n->op)) continue;
        int any = 0; /* a CNHW operand */
        for (int k = 0; k < n->ninputs; k++)
            any |= reads(n, k) && rank4(&g->nodes[n->input[k]]) && lay[n->input[k]];
        if (shares_bytes(n->op)) {
            /* a view in the same shape keeps the layout; others need NCHW */
            const ir_node *x = &g->nodes[n->input[0]];
            int keep = n->op != IR_OP_FLATTEN && rank4(x) && ir_type_same_shape(&n->type, &x->type);
            lay[i] = keep && lay[n->input[0]];
            want[i] = lay[i];
            continue;
        }
        if (ir_op_mixes_layout(n->op)) {
            lay[i] = rank4(n) && !runtime_reads(n) && n->op != IR_OP_CONV_GRAD_WEIGHT;
            continue;
        }
        if (n->op == IR_OP_BATCHNORM || row_major_only(n)) {
            want[i] = 0;
            continue;
        }
        int ok = !runtime_reads(n);
        if (rank4(n)) lay[i] = any && ok;
        want[i] = rank4(n) ? lay[i] : any;
    }
}

/* The reason a value made by node p must change layout for reader c. */
static int why_of(const ir_graph *g, int p, int c, int to_nchw) {
    const ir_node *pn = &g->nodes[p], *cn = &g->nodes[c];
    if (to_nchw)
        return ir_is_view(cn->op) ? PASS_LAYOUT_WHY_VIEW
               /* an assign's target, an all-reduced gradient: the runtime's */
               : runtime_reads(cn) || shares_bytes(cn->op) ? PASS_LAYOUT_WHY_RUNTIME
                                                           : PASS_LAYOUT_WHY_READER;
    if (ir_is_source(pn->op)) return PASS_LAYOUT_WHY_SOURCE;
    if (ir_is_view(pn->op)) return PASS_LAYOUT_WHY_VIEW_RESULT;
    return PASS_LAYOUT_WHY_NCHW;
}

int pass_layout(ir_graph **gp, char *err, size_t errlen) {
    ir_graph *g = *gp;
    if (ir_num_groups(g))
        return base_fail(err, errlen, "layout: runs before fuse (the graph has groups)");
    for (int i = 0; i < g->n; i++) /* laid out already: nothing to do */
        if ((g->nodes[i].flags & IR_FLAG_CNHW) || g->nodes[i].op == IR_OP_TRANSPOSE) return 0;
    signed char *lay = malloc((size_t)g->n + 1), *want = malloc((size_t)g->n + 1);
    /* map[i]: node i in the new graph; alt[i]: its transpose, once made */
    int *map = malloc(sizeof(int) * ((size_t)g->n + 1)),
        *alt = malloc(sizeof(int) * ((size_t)g->n + 1));
    BASE_CHECK_ALLOC(lay && want && map && alt);
    decide(g, lay, want);
    int extra = 0;
    for (int i = 0; i < g->n; i++) {
        alt[i] = -1;
        for (int k = 0; k < g->nodes[i].ninputs; k++) extra++;
    }
    ir_graph *ng = ir_new();
    ng->cap = g->n + extra + 1;
    ng->nodes = calloc((size_t)ng->cap, sizeof *ng->nodes);
    BASE_CHECK_ALLOC(ng->nodes);
    for (int i = 0; i < g->n; i++) {
        ir_node n = g->nodes[i];
        for (int k = 0; k < n.ninputs; k++) {
            int p = n.input[k];
            const ir_node *pn = &g->nodes[p];
            n.input[k] = map[p];
            if (!reads(&n, k) || !rank4(pn) || want[i] < 0 || lay[p] == want[i]) continue;
            if (alt[p] < 0) { /* one transpose per value, shared by its readers */
                ir_node t;
                memset(&t, 0, sizeof t);
                t.op = IR_OP_TRANSPOSE;
                t.ninputs = 1;
                t.input[0] = map[p];
                t.iattr[0] = why_of(g, p, i, lay[p]);
                t.type = pn->type;
                t.flags = want[i] ? IR_FLAG_CNHW : 0;
                t.line = n.line, t.col = n.col;
                snprintf(t.name, sizeof t.name, "%.*s.%s", IR_NAME_MAX - 7, pn->name,
                         want[i] ? "cnhw" : "nchw");
                alt[p] = ng->n;
                ng->nodes[ng->n++] = t;
            }
            n.input[k] = alt[p];
        }
        n.flags = (n.flags & ~(unsigned)IR_FLAG_CNHW) | (lay[i] ? IR_FLAG_CNHW : 0);
        map[i] = ng->n;
        ng->nodes[ng->n++] = n;
    }
    char why[256];
    int rc = 0;
    if (ir_verify(ng, why, sizeof why)) rc = base_fail(err, errlen, "layout: %s", why);
    free(lay), free(want), free(map), free(alt);
    return ir_replace(gp, ng, rc);
}

int pass_layout_transposes(const ir_graph *g) {
    int t = 0;
    for (int i = 0; i < g->n; i++) t += g->nodes[i].op == IR_OP_TRANSPOSE;
    return t;
}

void pass_layout_report(const ir_graph *g, const char *prog, FILE *f) {
    int cnhw = 0;
    for (int i = 0; i < g->n; i++) cnhw += (g->nodes[i].flags & IR_FLAG_CNHW) != 0;
    fprintf(f, "layout %s: %d channel-major tensors, %d transposes\n", prog, cnhw,
            pass_layout_transposes(g));
    for (int i = 0; i < g->n; i++) {
        const ir_node *n = &g->nodes[i];
        if (n->op != IR_OP_TRANSPOSE) continue;
        const ir_node *x = &g->nodes[n->input[0]];
        const char *why = pass_layout_reason(n->iattr[0]);
        fprintf(f, "  %%%d transpose to %s of %%%d %s '%s': %s\n", i,
                n->flags & IR_FLAG_CNHW ? "CNHW" : "NCHW", n->input[0], ir_ops[x->op].name, x->name,
                why ? why : "(no reason)");
    }
}
