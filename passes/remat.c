/* passes/remat.c — activation recomputation under a memory budget.
 *
 * A training graph keeps every forward activation the backward pass reads
 * from its forward step to that read. The cheap ones — outputs of relu,
 * add, bias_add, bn_apply, sigmoid, clip, mul, tanh and gelu chains, whose inputs
 * (GEMM outputs, batch statistics, parameters) are kept anyway — can
 * instead die after their last forward use and be computed again, by a
 * copy of the same chain, just before their first backward use. The copy runs the same ops on the
 * same values, so results are bit for bit those without the pass.
 *
 * The pass tries candidates largest first and keeps one when the planned
 * arena (pass_memplan_run) shrinks, until the arena fits the budget; a
 * budget it cannot reach is an error naming the best arena and the
 * shortfall. It runs after fuse and leaves the groups alone: a copied
 * chain is a group of its own, placed before the group of its first
 * backward reader (a fuse run after it would merge the copy back into the
 * forward group it was copied from, which is where it started).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/err.h"
#include "passes/passes.h"

/* What a chain may be made of: elementwise forward ops with no state. */
static int recomputable(ir_op op) {
    return op == IR_OP_RELU || op == IR_OP_ADD || op == IR_OP_BIAS_ADD || op == IR_OP_BN_APPLY ||
           op == IR_OP_SIGMOID || op == IR_OP_CLIP || op == IR_OP_MUL || op == IR_OP_MUL_CHANNEL ||
           op == IR_OP_TANH || op == IR_OP_GELU || op == IR_OP_GELU_TANH;
}

typedef struct {
    const ir_graph *g;     /* the input graph */
    unsigned char *bwd;    /* 1: the loss or computed from it */
    unsigned char *stored; /* the input graph's ir_stored: in memory, not a register */
    int *first_bwd;        /* per node: its first backward reader, or -1 */
    unsigned char *in_chain;
} remat_ctx;

static int in_list(const int *list, int n, int v) {
    for (int k = 0; k < n; k++)
        if (list[k] == v) return 1;
    return 0;
}

static int same_group(const ir_graph *g, int a, int b) {
    return g->nodes[a].group && g->nodes[a].group == g->nodes[b].group;
}

/* Chain of v into out (topological order, v last): v and the register-only
 * recomputable forward nodes it reads, transitively. Its other inputs are
 * its leaves. Returns the length. */
static int chain_of(const remat_ctx *c, int v, int *out, int n) {
    const ir_node *nd = &c->g->nodes[v];
    for (int j = 0; j < nd->ninputs; j++) {
        int u = nd->input[j];
        if (!c->stored[u] && !c->bwd[u] && recomputable(c->g->nodes[u].op) && !in_list(out, n, u))
            n = chain_of(c, u, out, n);
    }
    out[n++] = v;
    return n;
}

/* Whether node u is written by an assign before position pos. */
static int assigned_before(const ir_graph *g, int u, int pos) {
    for (int i = 0; i < pos; i++)
        if (g->nodes[i].op == IR_OP_ASSIGN && g->nodes[i].input[0] == u) return 1;
    return 0;
}

/* The first node of i's fusion group (i when it has none). */
static int group_start(const ir_graph *g, int i) {
    while (g->nodes[i].group && i > 0 && g->nodes[i - 1].group == g->nodes[i].group) i--;
    return i;
}

/* The graph with every v of sel[] recomputed for its backward readers. */
static ir_graph *rebuild(const remat_ctx *c, const int *sel, int nsel) {
    const ir_graph *g = c->g;
    int cap = g->n + 1;
    int *chain = malloc(sizeof *chain * (size_t)cap), *map = malloc(sizeof *map * (size_t)cap);
    int *copy = malloc(sizeof *copy * (size_t)cap),
        *redirect = malloc(sizeof *redirect * (size_t)cap);
    BASE_CHECK_ALLOC(chain && map && copy && redirect);
    int total = g->n;
    for (int s = 0; s < nsel; s++) total += chain_of(c, sel[s], chain, 0);
    ir_graph *ng = ir_new();
    ng->cap = total;
    ng->nodes = calloc((size_t)total, sizeof *ng->nodes);
    BASE_CHECK_ALLOC(ng->nodes);
    for (int i = 0; i < g->n; i++) redirect[i] = -1;
    int groups = ir_num_groups(g);
    for (int i = 0; i < g->n; i++) {
        for (int s = 0; s < nsel; s++) {
            int v = sel[s];
            if (group_start(g, c->first_bwd[v]) != i) continue;
            int len = chain_of(c, v, chain, 0);
            for (int k = 0; k < len; k++) copy[chain[k]] = -1;
            for (int k = 0; k < len; k++) {
                ir_node n = g->nodes[chain[k]];
                for (int j = 0; j < n.ninputs; j++) {
                    int u = n.input[j];
                    n.input[j] = in_list(chain, k, u) ? copy[u] : map[u];
                }
                /* a copy is no output, loss or gradient, but keeps the
                 * layout its readers expect (the layout pass's) */
                n.flags &= IR_FLAG_CNHW, n.group = len > 1 ? groups + 1 : 0;
                copy[chain[k]] = ng->n;
                ng->nodes[ng->n++] = n;
            }
            groups += len > 1;
            redirect[v] = copy[v];
        }
        ir_node n = g->nodes[i];
        for (int j = 0; j < n.ninputs; j++) {
            int u = n.input[j];
            n.input[j] = c->bwd[i] && redirect[u] >= 0 ? redirect[u] : map[u];
        }
        map[i] = ng->n;
        ng->nodes[ng->n++] = n;
    }
    free(chain), free(map), free(copy), free(redirect);
    return ng;
}

/* The planned arena of g, or -1 with a message. */
static int64_t arena_of(const ir_graph *g, char *err, size_t errlen) {
    fmt_memplan *m = pass_memplan_run(g, err, errlen);
    if (!m) return -1;
    int64_t a = m->arena_bytes;
    fmt_memplan_free(m);
    return a;
}

/* A copy must read a parameter before its update writes it: fuse orders
 * by data, and the update depends on the copy only through the gradient
 * the copy feeds. Checked on the final graph, for every source read. */
static int read_after_assign(const ir_graph *g, char *why, size_t n) {
    int *at = malloc(sizeof *at * (size_t)(g->n + 1));
    BASE_CHECK_ALLOC(at);
    for (int i = 0; i < g->n; i++) at[i] = -1;
    int rc = 0;
    for (int i = 0; i < g->n && !rc; i++) {
        const ir_node *nd = &g->nodes[i];
        for (int j = nd->op == IR_OP_ASSIGN; j < nd->ninputs && !rc; j++)
            if (at[nd->input[j]] >= 0)
                rc = base_fail(why, n, "node %d reads node %d after the assign at %d", i,
                               nd->input[j], at[nd->input[j]]);
        if (nd->op == IR_OP_ASSIGN) at[nd->input[0]] = i;
    }
    free(at);
    return rc;
}

static double mib(int64_t b) { return (double)b / (1 << 20); }

/* c->bwd: the loss and what is computed from it; c->first_bwd: each
 * node's first backward reader, or -1. */
static void mark_backward(remat_ctx *c, int loss) {
    const ir_graph *u = c->g;
    for (int i = 0; i < u->n; i++) {
        c->first_bwd[i] = -1;
        c->bwd[i] = i == loss;
        for (int j = 0; j < u->nodes[i].ninputs; j++) c->bwd[i] |= c->bwd[u->nodes[i].input[j]];
    }
    for (int i = u->n - 1; i >= 0; i--)
        if (c->bwd[i])
            for (int j = 0; j < u->nodes[i].ninputs; j++) c->first_bwd[u->nodes[i].input[j]] = i;
}

/* Candidates: stored forward results of a recomputable op that the
 * backward pass reads, whose leaves are stored and no assign changes
 * before that read; into cand, largest first, then in graph order.
 * Returns their count. */
static int find_candidates(const remat_ctx *c, int *cand, int *chain) {
    const ir_graph *u = c->g;
    int ncand = 0;
    for (int v = 0; v < u->n; v++) {
        const ir_node *nd = &u->nodes[v];
        if (c->bwd[v] || !c->stored[v] || c->first_bwd[v] < 0 || !recomputable(nd->op) ||
            (nd->flags & (IR_FLAG_OUTPUT | IR_FLAG_LOSS | IR_FLAG_GRAD)))
            continue;
        int len = chain_of(c, v, chain, 0), ok = 1;
        for (int k = 0; k < len && ok; k++)
            for (int j = 0; j < u->nodes[chain[k]].ninputs; j++) {
                int in = u->nodes[chain[k]].input[j];
                ok &= !assigned_before(u, in, c->first_bwd[v]);
                if (in_list(chain, len, in)) continue;
                /* The copy reads each leaf from memory. The forward pass read
                 * it there too, unless the leaf was a register of the same
                 * group: then stored is rounded where the register was not
                 * (bf16), or it was never stored at all (a fused dropout's
                 * output). Either way the copy would not see what the
                 * forward saw. */
                ok &= c->stored[in] &&
                      !(same_group(u, in, chain[k]) && u->nodes[in].type.dtype != IR_F32);
            }
        if (ok) cand[ncand++] = v;
    }
    for (int k = 1; k < ncand; k++) /* largest first, then in graph order */
        for (int q = k;
             q > 0 && ir_numel(&u->nodes[cand[q]].type) > ir_numel(&u->nodes[cand[q - 1]].type);
             q--) {
            int t = cand[q];
            cand[q] = cand[q - 1], cand[q - 1] = t;
        }
    return ncand;
}

/* Greedy: keep a candidate when the arena shrinks, until it is within
 * budget. A candidate may not read a tensor another chosen one frees, nor
 * be read by one. The chosen into sel[*nsel], the graph with them into
 * *kept (NULL: none), its arena into *best (from `before`). 0, or -1 when
 * an arena could not be planned. */
static int choose(remat_ctx *c, const int *cand, int ncand, int64_t budget_bytes, int64_t before,
                  int *sel, int *nsel, int *chain, int64_t *best, ir_graph **kept, char *err,
                  size_t errlen) {
    const ir_graph *u = c->g;
    int rc = 0;
    *nsel = 0, *best = before, *kept = NULL;
    for (int k = 0; k<ncand && * best> budget_bytes && !rc; k++) {
        int v = cand[k], len = chain_of(c, v, chain, 0), clash = c->in_chain[v];
        for (int q = 0; q < len && !clash; q++)
            for (int j = 0; j < u->nodes[chain[q]].ninputs && !clash; j++)
                for (int s = 0; s < *nsel; s++) clash |= u->nodes[chain[q]].input[j] == sel[s];
        if (clash) continue;
        sel[*nsel] = v;
        ir_graph *ng = rebuild(c, sel, *nsel + 1);
        int64_t a = arena_of(ng, err, errlen);
        if (a < 0) {
            rc = -1;
        } else if (a < *best) {
            *best = a;
            (*nsel)++;
            for (int q = 0; q < len; q++)
                for (int j = 0; j < u->nodes[chain[q]].ninputs; j++)
                    c->in_chain[u->nodes[chain[q]].input[j]] = 1;
            ir_free(*kept);
            *kept = ng;
            ng = NULL;
        }
        ir_free(ng);
    }
    return rc;
}

int pass_remat(ir_graph **gp, int64_t budget_bytes, pass_remat_report *rep, char *err,
               size_t errlen) {
    ir_graph *g0 = *gp;
    pass_remat_report r = {0};
    int loss = ir_loss_node(g0);
    int64_t before = arena_of(g0, err, errlen);
    if (before < 0) return -1;
    r.arena_before = r.arena_after = before;
    if (loss < 0 || before <= budget_bytes) {
        if (rep) *rep = r;
        return 0;
    }
    size_t n = (size_t)g0->n;
    remat_ctx c = {0};
    c.g = g0;
    c.bwd = calloc(n, 1), c.stored = malloc(n), c.in_chain = calloc(n, 1);
    c.first_bwd = malloc(sizeof *c.first_bwd * n);
    int *cand = malloc(sizeof *cand * n), *sel = malloc(sizeof *sel * n);
    int *chain = malloc(sizeof *chain * n);
    BASE_CHECK_ALLOC(c.bwd && c.stored && c.in_chain && c.first_bwd && cand && sel && chain);
    ir_stored(g0, c.stored);
    mark_backward(&c, loss);
    int ncand = find_candidates(&c, cand, chain);
    r.candidates = ncand;
    int nsel;
    int64_t best;
    ir_graph *kept;
    int rc =
        choose(&c, cand, ncand, budget_bytes, before, sel, &nsel, chain, &best, &kept, err, errlen);
    if (!rc && budget_bytes > 0 && best > budget_bytes)
        rc = base_fail(err, errlen,
                       "remat: the budget of %.1f MiB cannot be met: recomputing %d of %d "
                       "activations gives an arena of %.1f MiB (%.1f MiB over; %.1f MiB without "
                       "the pass)",
                       mib(budget_bytes), nsel, ncand, mib(best), mib(best - budget_bytes),
                       mib(before));
    r.recomputed = nsel;
    r.arena_after = best;
    for (int s = 0; s < nsel; s++) r.nodes_added += chain_of(&c, sel[s], chain, 0);
    free(c.bwd), free(c.stored), free(c.in_chain), free(c.first_bwd), free(cand), free(sel);
    free(chain);
    if (rc) {
        ir_free(kept);
        return -1;
    }
    if (rep) *rep = r;
    if (!kept) return 0;
    char why[256];
    if (ir_verify(kept, why, sizeof why) || read_after_assign(kept, why, sizeof why)) {
        ir_free(kept);
        return base_fail(err, errlen, "internal error: remat: %s", why);
    }
    return ir_replace(gp, kept, 0);
}
