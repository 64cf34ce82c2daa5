/* passes/fuse.c — "hybridize": one generated kernel per chain of cheap ops.
 *
 * An eager framework launches a kernel per op and writes every intermediate
 * to memory; most ops between two convolutions are a few flops per element,
 * so they are bound by that traffic and by launch overhead. This pass gives
 * nodes a common ir_node.group; codegen renders each group as ONE kernel in
 * which values flow in registers, and only the values something outside the
 * group reads are stored (ir_stored()).
 *
 * What may be grouped (the rules of docs/DESIGN.md §5.7, as this pass applies them;
 * node classes, group kinds, channel roles and pass levels are the contract
 * ir/ir.h shares with codegen/fused.c, which renders the groups):
 *
 *   1. Only pointwise ops (those with an ir_op_expr: relu, add, bias_add,
 *      bn_apply, bn_grad_data, relu_grad, ema, sgd_momentum, assign, ...)
 *      and the reductions codegen runs in passes (IR_FUSE_CHANNEL and
 *      IR_FUSE_ROW: per-channel statistics, softmax rows). Sources, views (they compute nothing),
 *      pooling windows and opaque library calls (conv, dense: GEMMs) never
 *      join a group; a group never crosses one. (GEMM epilogues: the cpu
 *      backend's cblas cannot run one, so none is formed; see below.)
 *   2. A group has one iteration space, which decides its kind:
 *        elementwise  every member has the same output type S; the kernel
 *                     loops over S, and a member reads another member only
 *                     at the same index i.
 *        channel      every reduction reduces the same [N, C, ...] shape X
 *                     over all axes but the channel: the kernel loops over
 *                     channels. Members are the reductions, pointwise ops of
 *                     type X (the prologue, e.g. relu_grad, and the epilogue
 *                     that needs the statistics, e.g. bn_apply + add + relu)
 *                     and pointwise ops of type [C] (running-statistics ema
 *                     and assign, the per-channel optimizer update). Inside
 *                     one channel the kernel makes as many passes over the
 *                     channel's data as the dependences need (mean, then
 *                     variance, then normalise: 3), the later ones reading
 *                     what the first brought into cache. That is "at most
 *                     one reduction" in the sense that matters: one
 *                     reduction space and one loop nest; bn_mean and bn_var
 *                     of one input are one BatchNorm statistics kernel.
 *        row          softmax_cross_entropy and its gradient over the same
 *                     logits and labels, plus pointwise ops of type [N] (the
 *                     ones_like seed): one sample per iteration, the row's
 *                     log-sum-exp computed once for the loss and gradient.
 *   3. Edges inside a group are only those the kernel can render: a member
 *      reads a member of its own type at the same index; a per-channel
 *      input of a channel-group member may be a [C] member (the statistic
 *      of the current channel); softmax ops read their logits and labels
 *      from memory.
 *   4. Connected and convex: groups grow along producer-consumer edges
 *      only, and a merge is refused when some path leaves the merged group
 *      and comes back (through other nodes or groups), so the graph of
 *      groups stays acyclic and each group can run as one step.
 *   5. assign writes a persistent tensor in place; every reader of the old
 *      value outside the group must run before the group (these
 *      anti-dependences count as edges in rule 4), and readers inside it
 *      read the element the kernel writes (stores come last in the kernel).
 *      (sumsq, the optimizers' whole-tensor sum of squares, is a channel
 *      reduction of one channel [1, 1, numel]: it is never grouped.)
 *   6. At most IR_GROUP_MAX_NODES nodes and IR_GROUP_MAX_BUFFERS distinct
 *      buffers (kernel arguments) per group, at most IR_GROUP_MAX_PASSES
 *      passes over a channel.
 *
 * Groups are grown greedily in graph order, merging each fusible node with
 * the group of each input in turn when the merge is legal, in sweeps until
 * nothing changes. Every check is bounded by the group size except rule 4,
 * and that one searches only the units (groups and lone nodes) placed
 * between the two being merged in a topological order of the units, kept
 * up to date as they merge (Pearce and Kelly), so a long network compiles
 * in time near linear in its length. Then the nodes
 * are scheduled so that every group is one contiguous run (a topological
 * sort of the groups that keeps the original order where it can), which
 * is what ir_verify checks and what codegen and memplan walk as the
 * execution order. Values are computed by the same expressions in the same
 * order with or without fusion, so results are bit-identical (the host
 * compiler runs with -ffp-contract=off so no multiply-add is contracted
 * across what used to be separate kernels).
 *
 * No GEMM epilogue: OpenBLAS cannot apply one, and folding bias_add into
 * dense via beta=1 would change the summation order for a kernel that is
 * 1/2000 of a ResNet step. The layout kernels around a convolution are
 * where an epilogue would go; they stay separate for now.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/err.h"
#include "passes/passes.h"

typedef struct {
    const ir_graph *g;
    int n;
    unsigned char *cls;  /* ir_fuse_class per node */
    int *gid;            /* group label per node (its first member's index), -1 not fusible */
    int *next;           /* member list per label, through next[] */
    int *size;           /* members per label */
    int *succ_at, *succ; /* CSR successors: consumers, and reader -> assign anti-edges */
    int *cons_at, *cons; /* CSR consumers (data edges only) */
    int *pred_at, *pred; /* CSR predecessors: succ reversed */
    int *stamp, cur;     /* BFS visited marks */
    int *queue;
    int *pos;       /* per unit label: a topological order of the unit graph */
    int *fwd, nfwd; /* the last legal merge's units between its two, after / before it */
    int *bwd, nbwd;
    int *pool;
    unsigned char *in; /* membership of the candidate group */
    int *cand, ncand;
} fuser;

/* ---- graph structure ---------------------------------------------------------------- */

static void build_csr(int n, const int *from, const int *to, int ne, int **at, int **list) {
    *at = calloc((size_t)n + 1, sizeof **at);
    *list = malloc(sizeof **list * (size_t)(ne ? ne : 1));
    BASE_CHECK_ALLOC(*at && *list);
    for (int e = 0; e < ne; e++) (*at)[from[e] + 1]++;
    for (int i = 0; i < n; i++) (*at)[i + 1] += (*at)[i];
    int *fill = malloc(sizeof *fill * (size_t)(n ? n : 1));
    BASE_CHECK_ALLOC(fill);
    memcpy(fill, *at, sizeof *fill * (size_t)n);
    for (int e = 0; e < ne; e++) (*list)[fill[from[e]]++] = to[e];
    free(fill);
}

/* Data edges p -> consumer, plus reader -> assign for every other reader
 * of an assign's target (the write must wait for the reads). */
static void build_edges(fuser *F) {
    const ir_graph *g = F->g;
    int ne = 0, cap = 0;
    for (int i = 0; i < g->n; i++) cap += g->nodes[i].ninputs;
    int *from = calloc((size_t)(2 * cap + 1), sizeof *from),
        *to = calloc((size_t)(2 * cap + 1), sizeof *to);
    BASE_CHECK_ALLOC(from && to);
    for (int i = 0; i < g->n; i++)
        for (int j = 0; j < g->nodes[i].ninputs; j++) from[ne] = g->nodes[i].input[j], to[ne++] = i;
    build_csr(g->n, from, to, ne, &F->cons_at, &F->cons);
    for (int a = 0; a < g->n; a++) {
        if (g->nodes[a].op != IR_OP_ASSIGN) continue;
        int t = g->nodes[a].input[0];
        for (int e = F->cons_at[t]; e < F->cons_at[t + 1]; e++) {
            int r = F->cons[e];
            if (r == a || ne >= 2 * cap) continue;
            from[ne] = r, to[ne++] = a;
        }
    }
    build_csr(g->n, from, to, ne, &F->succ_at, &F->succ);
    build_csr(g->n, to, from, ne, &F->pred_at, &F->pred);
    free(from);
    free(to);
}

/* ---- legality of a candidate group ----------------------------------------------------- */

static const ir_type *type_of(const fuser *F, int i) { return &F->g->nodes[i].type; }

static int is_vec(const ir_type *t, int64_t len) {
    return t->ndim == 1 && t->dim[0] == len && t->dtype != IR_I32;
}

/* Role of member m in a channel group over X (ir/ir.h). */
static int cr_role(const fuser *F, int m, const ir_type *X) {
    return ir_channel_role(&F->g->nodes[m], X);
}

/* Is input k of reduction m one of the reduced tensors (vs a per-channel statistic)? */
static int cr_big_input(const fuser *F, int m, int k) {
    const ir_node *n = &F->g->nodes[m];
    return ir_type_same_shape(type_of(F, n->input[k]), type_of(F, n->input[0]));
}

/* Whether candidate member m's value is stored: something outside the
 * candidate reads it, it is flagged, or nothing reads it (ir_stored). */
static int cand_stored(const fuser *F, int m) {
    const ir_node *n = &F->g->nodes[m];
    int stored = F->cons_at[m] == F->cons_at[m + 1] ||
                 (n->flags & (IR_FLAG_OUTPUT | IR_FLAG_LOSS | IR_FLAG_GRAD));
    for (int e = F->cons_at[m]; e < F->cons_at[m + 1] && !stored; e++) stored = !F->in[F->cons[e]];
    return stored;
}

/* The iteration space of a candidate (rule 2). */
typedef struct {
    int kind;             /* ir_group_kind */
    const ir_type *S, *X; /* elementwise: the members' type; channel: the reduced shape */
    int logits, label;    /* row: the softmax inputs */
    int64_t C, N;         /* channel: channels; row: samples */
} space;

/* The candidate's kind and space; 0 when it has none (channel and row
 * reductions together) or too many nodes (rule 6). */
static int group_space(const fuser *F, space *sp) {
    const ir_graph *g = F->g;
    int ncr = 0, nsm = 0, first_cr = -1, first_sm = -1;
    for (int a = 0; a < F->ncand; a++) {
        int m = F->cand[a];
        if (F->cls[m] == IR_FUSE_CHANNEL)
            ncr++, first_cr = first_cr < 0 || m < first_cr ? m : first_cr;
        if (F->cls[m] == IR_FUSE_ROW) nsm++, first_sm = first_sm < 0 || m < first_sm ? m : first_sm;
        /* sumsq reduces its whole input as one channel (codegen/fused.c):
         * a space no other member shares, so it stays a kernel of its own */
        if (g->nodes[m].op == IR_OP_SUMSQ && F->ncand > 1) return 0;
    }
    *sp = (space){
        .kind = ir_group_kind_of(ncr, nsm), .S = type_of(F, F->cand[0]), .logits = -1, .label = -1};
    if (sp->kind < 0 || F->ncand > IR_GROUP_MAX_NODES) return 0;
    if (sp->kind == IR_GROUP_CHANNEL) {
        sp->X = type_of(F, g->nodes[first_cr].input[0]);
        sp->C = sp->X->dim[1];
    } else if (sp->kind == IR_GROUP_ROW) {
        sp->logits = g->nodes[first_sm].input[0], sp->label = g->nodes[first_sm].input[1];
        sp->N = type_of(F, sp->logits)->dim[0];
    }
    return 1;
}

/* Membership: every member fits the iteration space. */
static int members_fit(const fuser *F, const space *sp) {
    /* one layout (IR_FLAG_CNHW) for every rank-4 value: one index space */
    for (int a = 0, lay = -1; a < F->ncand; a++) {
        int l = ir_node_layout(F->g, F->cand[a]);
        if (l >= 0 && lay >= 0 && l != lay) return 0;
        if (l >= 0) lay = l;
    }
    for (int a = 0; a < F->ncand; a++) {
        int m = F->cand[a];
        const ir_node *n = &F->g->nodes[m];
        const ir_type *t = &n->type;
        if (sp->kind == IR_GROUP_ELEMENTWISE && !ir_type_same_shape(t, sp->S)) return 0;
        if (sp->kind == IR_GROUP_CHANNEL) {
            if (F->cls[m] == IR_FUSE_CHANNEL) {
                if (!ir_type_same_shape(type_of(F, n->input[0]), sp->X)) return 0;
            } else if (ir_type_same_shape(t, sp->X)) {
                if (n->op == IR_OP_ASSIGN) return 0; /* a pass could re-read what it wrote */
            } else if (!is_vec(t, sp->C)) {
                return 0;
            }
        }
        if (sp->kind == IR_GROUP_ROW) {
            if (F->cls[m] == IR_FUSE_ROW) {
                if (n->input[0] != sp->logits || n->input[1] != sp->label) return 0;
            } else if (!is_vec(t, sp->N) || n->op == IR_OP_ASSIGN) {
                return 0;
            }
        }
    }
    return 1;
}

/* Edges inside the group: only what the kernel can render (rule 3). */
static int edges_renderable(const fuser *F, const space *sp) {
    for (int a = 0; a < F->ncand; a++) {
        int m = F->cand[a];
        const ir_node *n = &F->g->nodes[m];
        for (int k = 0; k < n->ninputs; k++) {
            int p = n->input[k];
            if (!F->in[p]) continue;
            int acc = F->cls[m] == IR_FUSE_POINTWISE ? ir_op_access(n->op, k) : -1;
            if (sp->kind == IR_GROUP_ELEMENTWISE) {
                if (acc != 'i' && acc != 0) return 0;
            } else if (sp->kind == IR_GROUP_CHANNEL) {
                int rm = cr_role(F, m, sp->X), rp = cr_role(F, p, sp->X);
                if (rm == IR_ROLE_REDUCTION) {
                    if (cr_big_input(F, m, k) ? rp != IR_ROLE_ELEMENTS : rp == IR_ROLE_ELEMENTS)
                        return 0;
                } else if (rm == IR_ROLE_ELEMENTS) {
                    if (acc == 'i'   ? rp != IR_ROLE_ELEMENTS
                        : acc == 'c' ? rp == IR_ROLE_ELEMENTS
                                     : acc != 0)
                        return 0;
                } else {
                    if ((acc != 'i' && acc != 0) || rp == IR_ROLE_ELEMENTS) return 0;
                }
            } else {
                if (F->cls[m] == IR_FUSE_ROW) {
                    if (k < 2 || !is_vec(type_of(F, p), sp->N)) return 0;
                } else if ((acc != 'i' && acc != 0) || !is_vec(type_of(F, p), sp->N)) {
                    return 0;
                }
            }
        }
    }
    return 1;
}

/* Assigns: one per target; members read the target where it is written (rule 5). */
static int assigns_ok(const fuser *F, int kind) {
    const ir_graph *g = F->g;
    for (int a = 0; a < F->ncand; a++) {
        int m = F->cand[a];
        if (g->nodes[m].op != IR_OP_ASSIGN) continue;
        int t = g->nodes[m].input[0];
        for (int e = F->cons_at[t]; e < F->cons_at[t + 1]; e++) {
            int r = F->cons[e];
            if (r == m || !F->in[r]) continue;
            if (g->nodes[r].op == IR_OP_ASSIGN) return 0;
            for (int k = 0; k < g->nodes[r].ninputs; k++) {
                if (g->nodes[r].input[k] != t) continue;
                int acc = F->cls[r] == IR_FUSE_POINTWISE ? ir_op_access(g->nodes[r].op, k) : 'c';
                if (acc == 's' || acc == 'o' || acc == 'l') return 0;
                if (kind == IR_GROUP_ELEMENTWISE && acc == 'c') return 0;
            }
        }
    }
    return 1;
}

/* Buffers (kernel arguments): inputs read from outside, values stored,
 * assign targets (rule 6). */
static int count_buffers(fuser *F) {
    int nbuf = 0;
    for (int a = 0; a < F->ncand; a++) {
        int m = F->cand[a];
        const ir_node *n = &F->g->nodes[m];
        for (int k = 0; k < n->ninputs; k++) {
            int p = n->input[k];
            if (F->in[p] || F->stamp[p] == -F->cur - 1) continue;
            int reads =
                F->cls[m] != IR_FUSE_POINTWISE || ir_op_access(n->op, k) || n->op == IR_OP_ASSIGN;
            if (!reads) continue;
            F->stamp[p] = -F->cur - 1;
            nbuf++;
        }
        if (n->op != IR_OP_ASSIGN) nbuf += cand_stored(F, m);
    }
    F->cur++;
    return nbuf;
}

/* Passes of a channel group over X, by the levels of ir/ir.h.
 * Sorts F->cand into index (= topological) order. */
static int channel_passes(fuser *F, const ir_type *X) {
    for (int a = 1; a < F->ncand; a++)
        for (int b = a; b > 0 && F->cand[b - 1] > F->cand[b]; b--) {
            int t = F->cand[b];
            F->cand[b] = F->cand[b - 1], F->cand[b - 1] = t;
        }
    unsigned char stored[IR_GROUP_MAX_NODES];
    int level[IR_GROUP_MAX_NODES];
    for (int a = 0; a < F->ncand; a++) stored[a] = (unsigned char)cand_stored(F, F->cand[a]);
    return ir_channel_levels(F->g, F->cand, F->ncand, stored, X, level);
}

/* The unit (group label, or the node itself) a node belongs to. */
static int unit_of(const fuser *F, int w) { return F->gid[w] >= 0 ? F->gid[w] : w; }

/* The units between a and b in F->pos (exclusive) that a reaches (dir 1,
 * through successors) or that reach b (dir -1, through predecessors), into
 * out[]; -1 when a path from a through another unit reaches b. */
static int window(fuser *F, int a, int b, int dir, int *out) {
    const int *at = dir > 0 ? F->succ_at : F->pred_at, *to = dir > 0 ? F->succ : F->pred;
    int from = dir > 0 ? a : b, goal = dir > 0 ? b : a, lim = F->pos[goal];
    int mark = ++F->cur, nout = 0, head = -1;
    F->stamp[from] = mark;
    for (int u = from; u >= 0; u = ++head < nout ? out[head] : -1)
        for (int w = u; w >= 0; w = F->gid[u] >= 0 ? F->next[w] : -1)
            for (int e = at[w]; e < at[w + 1]; e++) {
                int v = unit_of(F, to[e]);
                if (v == goal) {
                    if (u != from) return -1;
                    continue;
                }
                if (F->stamp[v] == mark || (dir > 0 ? F->pos[v] > lim : F->pos[v] < lim)) continue;
                F->stamp[v] = mark;
                out[nout++] = v;
            }
    return nout;
}

/* Convexity: no path from the group through other nodes back into it
 * (rule 4), where a group counts as one node (groups run as one step).
 * F->pos orders the units topologically, so such a path goes from the
 * earlier of a and b to the later through units placed between the two:
 * only those are searched (Pearce and Kelly's dynamic topological order,
 * which merge() keeps). Leaves those that the earlier one reaches in
 * F->fwd for merge(). */
static int convex(fuser *F, int a, int b) {
    if (F->pos[a] > F->pos[b]) {
        int t = a;
        a = b, b = t;
    }
    F->nfwd = window(F, a, b, 1, F->fwd);
    return F->nfwd >= 0;
}

/* Whether the members in F->cand (marked in F->in) may form one group:
 * the rules of the header, in order. */
static int legal(fuser *F, int a, int b) {
    space sp;
    if (!group_space(F, &sp) || !members_fit(F, &sp) || !edges_renderable(F, &sp) ||
        !assigns_ok(F, sp.kind))
        return 0;
    if (count_buffers(F) > IR_GROUP_MAX_BUFFERS) return 0;
    if (sp.kind == IR_GROUP_CHANNEL && channel_passes(F, sp.X) > IR_GROUP_MAX_PASSES) return 0;
    return convex(F, a, b);
}

static int cmp_int(const void *a, const void *b) {
    int x = *(const int *)a, y = *(const int *)b;
    return (x > y) - (x < y);
}

static const int *pos_key;
static int cmp_pos(const void *x, const void *y) {
    int p = pos_key[*(const int *)x], q = pos_key[*(const int *)y];
    return (p > q) - (p < q);
}

/* Keeps F->pos a topological order when a and b (legal to merge: convex()
 * left F->fwd) become one unit, labelled by the smaller index: the units
 * between them that reach the later one, then the merged unit, then those
 * the earlier one reaches, in the positions they held, each set in its old
 * order (Pearce and Kelly). */
static void reorder(fuser *F, int a, int b) {
    if (F->pos[a] > F->pos[b]) {
        int t = a;
        a = b, b = t;
    }
    F->nbwd = window(F, a, b, -1, F->bwd);
    int np = 0, keep = a < b ? a : b;
    F->pool[np++] = F->pos[a], F->pool[np++] = F->pos[b];
    for (int i = 0; i < F->nfwd; i++) F->pool[np++] = F->pos[F->fwd[i]];
    for (int i = 0; i < F->nbwd; i++) F->pool[np++] = F->pos[F->bwd[i]];
    qsort(F->pool, (size_t)np, sizeof *F->pool, cmp_int);
    pos_key = F->pos;
    qsort(F->fwd, (size_t)F->nfwd, sizeof *F->fwd, cmp_pos);
    qsort(F->bwd, (size_t)F->nbwd, sizeof *F->bwd, cmp_pos);
    int k = 0;
    for (int i = 0; i < F->nbwd; i++) F->pos[F->bwd[i]] = F->pool[k++];
    F->pos[keep] = F->pool[k++];
    for (int i = 0; i < F->nfwd; i++) F->pos[F->fwd[i]] = F->pool[k++];
}

/* Merges the groups labelled a and b (a != b) if legal; 1 when merged. */
static int try_merge(fuser *F, int a, int b) {
    F->ncand = 0;
    for (int w = a; w >= 0; w = F->next[w]) F->cand[F->ncand++] = w, F->in[w] = 1;
    for (int w = b; w >= 0; w = F->next[w]) F->cand[F->ncand++] = w, F->in[w] = 1;
    int ok = legal(F, a, b);
    for (int i = 0; i < F->ncand; i++) F->in[F->cand[i]] = 0;
    if (!ok) return 0;
    reorder(F, a, b);
    /* Label = the smaller index; append the other list. */
    int keep = a < b ? a : b, drop = a < b ? b : a, tail = keep;
    while (F->next[tail] >= 0) tail = F->next[tail];
    F->next[tail] = drop;
    for (int w = drop; w >= 0; w = F->next[w]) F->gid[w] = keep;
    F->size[keep] += F->size[drop];
    F->size[drop] = 0;
    return 1;
}

/* F->pos: a topological order of the nodes, each a unit of its own
 * before any merge (Kahn's algorithm). 0 when the edges have a cycle: then
 * no grouping can be scheduled. */
static int topo_positions(fuser *F) {
    int n = F->n, *indeg = calloc((size_t)(n ? n : 1), sizeof *indeg), head = 0, tail = 0;
    BASE_CHECK_ALLOC(indeg);
    for (int e = 0; e < F->succ_at[n]; e++) indeg[F->succ[e]]++;
    for (int i = 0; i < n; i++)
        if (!indeg[i]) F->queue[tail++] = i;
    while (head < tail) {
        int v = F->queue[head];
        F->pos[v] = head++;
        for (int e = F->succ_at[v]; e < F->succ_at[v + 1]; e++)
            if (!--indeg[F->succ[e]]) F->queue[tail++] = F->succ[e];
    }
    free(indeg);
    return tail == n;
}

/* ---- scheduling ----------------------------------------------------------------------- */

static void heap_push(int *h, int *n, const int *key, int v) {
    int i = (*n)++;
    h[i] = v;
    while (i > 0 && key[h[(i - 1) / 2]] > key[h[i]]) {
        int p = (i - 1) / 2, t = h[p];
        h[p] = h[i], h[i] = t, i = p;
    }
}

static int heap_pop(int *h, int *n, const int *key) {
    int top = h[0], i = 0;
    h[0] = h[--*n];
    for (;;) {
        int l = 2 * i + 1, r = l + 1, m = i;
        if (l < *n && key[h[l]] < key[h[m]]) m = l;
        if (r < *n && key[h[r]] < key[h[m]]) m = r;
        if (m == i) break;
        int t = h[m];
        h[m] = h[i], h[i] = t, i = m;
    }
    return top;
}

/* The new order: groups (labelled by their smallest member, which is also
 * their key) as units, ready units in order of their smallest index, so an
 * unchanged graph keeps its order. Returns order[] of old indices. */
static int schedule(fuser *F, int *order) {
    const ir_graph *g = F->g;
    int n = g->n;
    int *unit = malloc(sizeof *unit * (size_t)n), *indeg = calloc((size_t)n, sizeof *indeg);
    int *heap = malloc(sizeof *heap * (size_t)n), *key = malloc(sizeof *key * (size_t)n);
    BASE_CHECK_ALLOC(unit && indeg && heap && key);
    for (int i = 0; i < n; i++) unit[i] = F->gid[i] >= 0 ? F->gid[i] : i, key[i] = i;
    for (int i = 0; i < n; i++)
        for (int e = F->succ_at[i]; e < F->succ_at[i + 1]; e++)
            if (unit[F->succ[e]] != unit[i]) indeg[unit[F->succ[e]]]++;
    int nh = 0, k = 0;
    for (int u = 0; u < n; u++)
        if (unit[u] == u && indeg[u] == 0) heap_push(heap, &nh, key, u);
    while (nh) {
        int u = heap_pop(heap, &nh, key);
        for (int w = u; w >= 0; w = F->gid[u] >= 0 ? F->next[w] : -1) order[k++] = w;
        for (int w = u; w >= 0; w = F->gid[u] >= 0 ? F->next[w] : -1)
            for (int e = F->succ_at[w]; e < F->succ_at[w + 1]; e++) {
                int s = unit[F->succ[e]];
                if (s != u && --indeg[s] == 0) heap_push(heap, &nh, key, s);
            }
    }
    free(unit), free(indeg), free(heap), free(key);
    return k == n ? 0 : -1;
}

int pass_fuse(ir_graph **gp, char *err, size_t errlen) {
    const ir_graph *g = *gp;
    int n = g->n;
    size_t sz = (size_t)(n ? n : 1);
    fuser F = {.g = g, .n = n};
    F.cls = calloc(sz, 1);
    F.in = calloc(sz, 1);
    F.gid = malloc(sizeof *F.gid * sz);
    F.next = malloc(sizeof *F.next * sz);
    F.size = calloc(sz, sizeof *F.size);
    F.stamp = calloc(sz, sizeof *F.stamp);
    F.queue = malloc(sizeof *F.queue * sz);
    F.cand = malloc(sizeof *F.cand * sz);
    F.pos = malloc(sizeof *F.pos * sz);
    F.fwd = malloc(sizeof *F.fwd * sz);
    F.bwd = malloc(sizeof *F.bwd * sz);
    F.pool = malloc(sizeof *F.pool * (sz + 2));
    BASE_CHECK_ALLOC(F.cls && F.in && F.gid && F.next && F.size && F.stamp && F.queue && F.cand &&
                     F.pos && F.fwd && F.bwd && F.pool);
    F.cur = 1;
    for (int i = 0; i < n; i++) {
        F.cls[i] = (unsigned char)ir_node_fuse_class(&g->nodes[i]);
        F.gid[i] = F.cls[i] == IR_FUSE_NONE ? -1 : i;
        F.next[i] = -1;
        F.size[i] = F.cls[i] != IR_FUSE_NONE;
    }
    build_edges(&F);
    int acyclic = topo_positions(&F);

    /* Sweeps until nothing merges: a merge refused early (too many stored
     * values while an update's assigns were not in yet) can become legal
     * once the groups around it have grown. */
    for (int sweep = 0, merged = acyclic; merged && sweep < 8; sweep++) {
        merged = 0;
        for (int v = 0; v < n; v++) {
            if (F.cls[v] == IR_FUSE_NONE) continue;
            for (int k = 0; k < g->nodes[v].ninputs; k++) {
                int p = g->nodes[v].input[k];
                if (F.cls[p] != IR_FUSE_NONE && F.gid[p] != F.gid[v])
                    merged += try_merge(&F, F.gid[p], F.gid[v]);
            }
        }
    }

    /* Members of each list in index order (the schedule emits lists in order). */
    for (int u = 0; u < n; u++) {
        if (F.gid[u] != u || F.size[u] < 2) continue;
        int cnt = 0;
        for (int w = u; w >= 0; w = F.next[w]) F.cand[cnt++] = w;
        qsort(F.cand, (size_t)cnt, sizeof *F.cand, cmp_int);
        for (int a = 0; a < cnt; a++) F.next[F.cand[a]] = a + 1 < cnt ? F.cand[a + 1] : -1;
    }
    int *order = malloc(sizeof *order * sz), *map = malloc(sizeof *map * sz);
    int *newgid = calloc(sz + 1, sizeof *newgid);
    BASE_CHECK_ALLOC(order && map && newgid);
    int rc = acyclic ? schedule(&F, order) : -1;
    ir_graph *out = NULL;
    if (rc) {
        base_fail(err, errlen, "internal error: fuse: the grouped graph has a cycle");
    } else {
        out = ir_new();
        out->nodes = malloc(sizeof *out->nodes * sz);
        BASE_CHECK_ALLOC(out->nodes);
        out->cap = (int)sz;
        int groups = 0;
        for (int k = 0; k < n; k++) map[order[k]] = k;
        for (int k = 0; k < n; k++) {
            int old = order[k];
            ir_node c = g->nodes[old];
            for (int j = 0; j < c.ninputs; j++) c.input[j] = map[c.input[j]];
            c.group = 0;
            int lab = F.gid[old];
            if (lab >= 0 && F.size[lab] >= 2) {
                if (!newgid[lab]) newgid[lab] = ++groups;
                c.group = newgid[lab];
            }
            out->nodes[out->n++] = c;
        }
    }
    free(F.cls), free(F.in), free(F.gid), free(F.next), free(F.size), free(F.stamp);
    free(F.queue), free(F.cand), free(F.succ_at), free(F.succ), free(F.cons_at), free(F.cons);
    free(F.pred_at), free(F.pred), free(F.pos), free(F.fwd), free(F.bwd), free(F.pool);
    free(order), free(map), free(newgid);
    if (rc) return -1;
    ir_free(*gp);
    *gp = out;
    return 0;
}

/* Drops every group (for --no-fuse on a plan's graph, and tests). */
void pass_unfuse(ir_graph *g) {
    for (int i = 0; i < g->n; i++) g->nodes[i].group = 0;
}
