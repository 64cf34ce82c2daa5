/* runtime/exec/shard.c — ZeRO-1 (dprun --shard-optimizer): which replica
 * owns each parameter's update, read from the train graph.
 *
 * A parameter P is updated by an assign into P; the gradient sums its value
 * reads (the allreduce nodes met walking its inputs back, stopping at each
 * sum) are P's. Owners are dealt greedily, as PyTorch's
 * ZeroRedundancyOptimizer does: the largest parameter first onto the least
 * loaded replica (ties: the lower index). Everything computed from a sum of
 * P is then owned by P's owner, and so is every STATE it assigns (P's
 * optimizer state, whatever its name): the other replicas skip those steps
 * and drop those states. An update that mixes two owners' sums (a global
 * norm, say) cannot be sharded this way, nor a state that a step every
 * replica runs reads; both are refused with the node named. */
#include <stdlib.h>
#include <string.h>

#include "format/graph.h"
#include "base/err.h"
#include "runtime/check.h"
#include "runtime/comm/comm.h"
#include "runtime/exec/exec.h"

static int is_grad_sum(const ir_node *n) { return n->op == IR_OP_ALLREDUCE && !n->iattr[2]; }

/* Marks with p every gradient sum node v's value reads; -1 + message when
 * one already belongs to another parameter. */
static int claim_sums(const ir_graph *g, int v, int p, int *sum_of, unsigned char *seen, char *err,
                      size_t errlen) {
    int *stack = malloc(sizeof *stack * (size_t)(g->n + 1));
    RT_CHECK_ALLOC(stack);
    memset(seen, 0, (size_t)g->n);
    int top = 0, rc = 0;
    stack[top++] = v;
    seen[v] = 1;
    while (top && !rc) {
        int j = stack[--top];
        const ir_node *n = &g->nodes[j];
        if (is_grad_sum(n)) {
            if (sum_of[j] >= 0 && sum_of[j] != p)
                rc = base_fail(err, errlen,
                               "--shard-optimizer: the gradient sum %%%d (%s) feeds the updates of "
                               "both '%s' and '%s'; sharding needs per-parameter updates",
                               j, n->name, g->nodes[sum_of[j]].name, g->nodes[p].name);
            sum_of[j] = p;
            continue;
        }
        for (int k = 0; k < n->ninputs; k++)
            if (!seen[n->input[k]]) seen[n->input[k]] = 1, stack[top++] = n->input[k];
    }
    free(stack);
    return rc;
}

/* Largest first, then by node index: {numel, node} pairs. */
static int cmp_size(const void *a, const void *b) {
    const int64_t *x = a, *y = b;
    if (x[0] != y[0]) return x[0] > y[0] ? -1 : 1;
    return (x[1] > y[1]) - (x[1] < y[1]);
}

rt_shard *rt_shard_new(const ir_graph *g, int replicas, char *err, size_t errlen) {
    if (replicas < 2) {
        base_fail(err, errlen, "--shard-optimizer needs at least 2 replicas (the job has %d)",
                  replicas);
        return NULL;
    }
    for (int i = 0; i < g->n; i++)
        if (g->nodes[i].op == IR_OP_CLIP_SCALE) { /* one norm over every shard's gradients */
            base_fail(err, errlen,
                      "--shard-optimizer: the plan clips gradients by their global norm "
                      "(clip_grad_norm %g), which every replica's update reads; ZeRO-1 shards "
                      "per-parameter updates only: drop one of the two",
                      g->nodes[i].fattr[0]);
            return NULL;
        }
    rt_shard *s = calloc(1, sizeof *s);
    RT_CHECK_ALLOC(s);
    s->n = g->n;
    s->replicas = replicas;
    s->owner = malloc(sizeof *s->owner * (size_t)(g->n + 1));
    s->state_bytes = calloc((size_t)replicas, sizeof *s->state_bytes);
    int *sum_of = malloc(sizeof *sum_of * (size_t)(g->n + 1));
    unsigned char *seen = malloc((size_t)g->n + 1);
    int64_t *order = malloc(sizeof *order * 2 * (size_t)(g->n + 1));
    int64_t *load = calloc((size_t)replicas, sizeof *load);
    RT_CHECK_ALLOC(s->owner && s->state_bytes && sum_of && seen && order && load);
    for (int i = 0; i < g->n; i++) s->owner[i] = sum_of[i] = -1;
    int rc = 0, np = 0;
    /* Each parameter's sums, from the assigns into it. */
    for (int i = 0; i < g->n && !rc; i++) {
        const ir_node *n = &g->nodes[i];
        if (n->op == IR_OP_ASSIGN && g->nodes[n->input[0]].op == IR_OP_PARAM)
            rc = claim_sums(g, n->input[1], n->input[0], sum_of, seen, err, errlen);
    }
    memset(seen, 0, (size_t)g->n);
    for (int i = 0; i < g->n && !rc; i++)
        if (sum_of[i] >= 0 && !seen[sum_of[i]]) {
            seen[sum_of[i]] = 1;
            order[2 * np] = ir_numel(&g->nodes[sum_of[i]].type), order[2 * np + 1] = sum_of[i];
            np++;
        }
    qsort(order, (size_t)np, 2 * sizeof *order, cmp_size);
    for (int k = 0; k < np; k++) {
        int best = 0;
        for (int r = 1; r < replicas; r++)
            if (load[r] < load[best]) best = r;
        load[best] += order[2 * k];
        s->owner[order[2 * k + 1]] = best;
    }
    for (int i = 0; i < g->n && !rc; i++) {
        const ir_node *n = &g->nodes[i];
        if (sum_of[i] >= 0) {
            s->owner[i] = s->owner[sum_of[i]];
            continue;
        }
        if (ir_is_source(n->op)) continue;
        for (int k = 0; k < n->ninputs && !rc; k++) {
            int in = n->input[k], o = ir_is_source(g->nodes[in].op) ? -1 : s->owner[in];
            if (o < 0) continue;
            if (s->owner[i] >= 0 && s->owner[i] != o)
                rc = base_fail(err, errlen,
                               "--shard-optimizer: node %%%d (%s) mixes the updates of two "
                               "parameters; sharding needs per-parameter updates",
                               i, ir_ops[n->op].name);
            s->owner[i] = o;
        }
        /* The state an owned update assigns is the owner's alone. */
        if (n->op == IR_OP_ASSIGN && s->owner[i] >= 0 && g->nodes[n->input[0]].op == IR_OP_STATE)
            s->owner[n->input[0]] = s->owner[i];
    }
    /* Nothing every replica runs may read a state only one replica holds. */
    for (int i = 0; i < g->n && !rc; i++) {
        const ir_node *n = &g->nodes[i];
        for (int k = 0; k < n->ninputs && !rc; k++) {
            int in = n->input[k];
            if (g->nodes[in].op == IR_OP_STATE && s->owner[in] >= 0 && s->owner[i] != s->owner[in])
                rc = base_fail(err, errlen,
                               "--shard-optimizer: node %%%d (%s) reads the optimizer state '%s' "
                               "outside its parameter's update",
                               i, ir_ops[n->op].name, g->nodes[in].name);
        }
    }
    for (int i = 0; i < g->n && !rc; i++)
        if (g->nodes[i].op == IR_OP_STATE && s->owner[i] >= 0 &&
            g->nodes[i].iattr[0] >= IR_INIT_XAVIER) /* xavier, normal, scaled */
            rc = base_fail(err, errlen,
                           "--shard-optimizer: the optimizer state '%s' has a random initialiser",
                           g->nodes[i].name);
    for (int i = 0; i < g->n; i++)
        if (g->nodes[i].op == IR_OP_STATE && s->owner[i] >= 0) {
            s->state_bytes[s->owner[i]] += fmt_node_bytes(&g->nodes[i]);
            s->state_total += fmt_node_bytes(&g->nodes[i]);
        }
    free(sum_of), free(seen), free(order), free(load);
    if (rc) {
        rt_shard_free(s);
        return NULL;
    }
    return s;
}

void rt_shard_free(rt_shard *s) {
    if (!s) return;
    free(s->owner);
    free(s->state_bytes);
    free(s);
}

int64_t rt_shard_state_most(const rt_shard *s) {
    int64_t most = 0;
    for (int r = 0; r < s->replicas; r++)
        if (s->state_bytes[r] > most) most = s->state_bytes[r];
    return most;
}

int rt_shard_bind(const ir_graph *g, const cg_program *p, const int *step_of, const rt_shard *s,
                  int me, rt_coll_queue *q, int nbuckets, unsigned char *skip, void **buf,
                  char *err, size_t errlen) {
    if (s->n != g->n) return base_fail(err, errlen, "--shard-optimizer: another graph's shard");
    int *mine = calloc((size_t)p->nsteps + 1, sizeof *mine);
    int *theirs = calloc((size_t)p->nsteps + 1, sizeof *theirs);
    RT_CHECK_ALLOC(mine && theirs);
    for (int i = 0; i < g->n; i++) {
        int st = step_of[i];
        if (st < 0 || g->nodes[i].op == IR_OP_ALLREDUCE) continue;
        if (s->owner[i] >= 0 && s->owner[i] != me)
            theirs[st] = i + 1;
        else
            mine[st] = i + 1;
    }
    int rc = 0;
    for (int si = 0; si < p->nsteps && !rc; si++) {
        if (mine[si] && theirs[si])
            rc =
                base_fail(err, errlen,
                          "--shard-optimizer: step %d fuses node %%%d, which replica %d runs, with "
                          "%%%d, another replica's update (compile without that fusion)",
                          si, mine[si] - 1, me, theirs[si] - 1);
        skip[si] = theirs[si] != 0;
    }
    free(mine), free(theirs);
    if (rc) return -1;
    int *owner = malloc(sizeof *owner * (size_t)(g->n + 1));
    RT_CHECK_ALLOC(owner);
    for (int b = 0; b < nbuckets; b++) {
        int np = 0; /* the bucket's pieces in packing order, as rt_exec_set_collective's */
        for (int i = 0; i < g->n; i++)
            if (g->nodes[i].op == IR_OP_ALLREDUCE && g->nodes[i].iattr[0] == b)
                owner[np++] = s->owner[i];
        rt_coll_queue_set_owners(q, b, owner);
    }
    free(owner);
    for (int i = 0; i < g->n; i++) /* the store frees them (rt_store_shard) */
        if (g->nodes[i].op == IR_OP_STATE && s->owner[i] >= 0 && s->owner[i] != me) buf[i] = NULL;
    return 0;
}
