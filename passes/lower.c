/* passes/lower.c — batchnorm → primitives.
 *
 * The frontend emits one high-level batchnorm per layer; everything after
 * (autodiff, fusion, codegen) only knows the primitives, so this pass
 * rewrites it:
 *
 *   training  m = bn_mean(x); v = bn_var(x, m)
 *             y = bn_apply(x, m, v, gamma, beta){eps}
 *             running_mean' = ema(running_mean, m){momentum, 1}
 *             running_var'  = ema(running_var,  v){momentum, M/(M-1)}
 *             assign(running_mean, running_mean'); assign(running_var, running_var')
 *   eval      y = bn_apply(x, running_mean, running_var, gamma, beta){eps}
 *
 * M is the element count per channel; the running variance takes the
 * unbiased batch variance as cuDNN (MXNet's GPU path) and PyTorch do. The
 *
 * Synchronised BatchNorm (batchnorm(..., sync=true), or every one with the
 * pass's sync_bn=1, `dpc --sync-bn`) takes its statistics over the whole
 * global batch: each replica's mean over its own batch is averaged over
 * the R replicas (an allreduce{sync=1} then a scale by the input
 * replica_scale = 1/R, which the executor sets), then so is its variance
 * around that mean. Every replica has the same count M, so these are the
 * mean and biased variance of all R*M values; the running variance takes
 * R*M/(R*M-1) (bn_unbias). autodiff syncs the backward sums the same way.
 *
 * The assigns go after every other node, since ir_verify wants each write of a
 * persistent tensor after all of its reads; nothing else reads the running
 * statistics in a training graph, so moving them to the end changes no
 * value. The node y takes over the batchnorm's name, flags and source
 * position, so "logits"-style labels and outputs survive; sources keep
 * their order and names (the train and eval programs share buffers by name).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/err.h"
#include "passes/passes.h"

typedef struct {
    ir_graph *out;
    int *map;     /* old node index -> new node index */
    int *assigns; /* pending (target, value) pairs, new indices; two per batchnorm */
    int nassigns;
    int sync_all;      /* every training batchnorm is synchronised */
    int replica_scale; /* the input 1/R, once a synchronised batchnorm made it; else -1 */
    char *err;
    size_t errlen;
} lowering;

/* Appends a node to the lowered graph, carrying the source position of the
 * node it came from so later errors still point into the .net file. */
static int emit(lowering *L, const ir_node *from, ir_op op, const int *in, int nin,
                const int64_t *iattr, const double *fattr) {
    char why[200];
    int id = ir_add_node(L->out, op, in, nin, iattr, fattr, why, sizeof why);
    if (id < 0) {
        snprintf(L->err, L->errlen, "lower: node '%s': %s", from->name, why);
        return -1;
    }
    L->out->nodes[id].line = from->line;
    L->out->nodes[id].col = from->col;
    return id;
}

static void defer_assign(lowering *L, int target, int value) {
    L->assigns[2 * L->nassigns] = target;
    L->assigns[2 * L->nassigns + 1] = value;
    L->nassigns++;
}

/* Copies a node other than batchnorm, inputs renumbered. Sources are copied
 * as they are (their type is not inferred). */
static int copy_node(lowering *L, const ir_node *n) {
    ir_node c = *n;
    for (int j = 0; j < n->ninputs; j++) c.input[j] = L->map[n->input[j]];
    if (L->out->n == L->out->cap) {
        L->out->cap = L->out->cap ? 2 * L->out->cap : 64;
        L->out->nodes = realloc(L->out->nodes, sizeof *L->out->nodes * (size_t)L->out->cap);
        BASE_CHECK_ALLOC(L->out->nodes);
    }
    L->out->nodes[L->out->n] = c;
    return L->out->n++;
}

int pass_replica_mean(ir_graph *g, int stat, int replica_scale, int line, int col, char *why,
                      size_t whylen) {
    int sum = ir_add_node(g, IR_OP_ALLREDUCE, &stat, 1, (int64_t[]){0, 0, 1}, NULL, why, whylen);
    int mean = sum < 0 ? -1
                       : ir_add_node(g, IR_OP_SCALE, (int[]){sum, replica_scale}, 2, NULL, NULL,
                                     why, whylen);
    if (mean < 0) return -1;
    g->nodes[sum].line = g->nodes[mean].line = line;
    g->nodes[sum].col = g->nodes[mean].col = col;
    return mean;
}

int pass_synced_stat(const ir_graph *g, int node, int *replica_scale) {
    const ir_node *n = &g->nodes[node];
    if (n->op != IR_OP_SCALE || g->nodes[n->input[0]].op != IR_OP_ALLREDUCE ||
        !g->nodes[n->input[0]].iattr[2])
        return -1;
    *replica_scale = n->input[1];
    return g->nodes[n->input[0]].input[0];
}

/* stat averaged over the replicas, with the replica_scale input made on
 * first use. */
static int replica_mean(lowering *L, const ir_node *from, int stat) {
    if (L->replica_scale < 0) {
        for (int i = 0; i < L->out->n; i++)
            if (ir_is_source(L->out->nodes[i].op) &&
                !strcmp(L->out->nodes[i].name, FMT_REPLICA_SCALE)) {
                snprintf(L->err, L->errlen,
                         "lower: batchnorm '%s' is synchronised, and the name '%s' its replica "
                         "count needs is taken",
                         from->name, FMT_REPLICA_SCALE);
                return -1;
            }
        L->replica_scale = ir_add_input(L->out, FMT_REPLICA_SCALE, ir_shape1(1), 0);
        if (L->replica_scale < 0) return -1;
    }
    char why[200];
    int mean =
        pass_replica_mean(L->out, stat, L->replica_scale, from->line, from->col, why, sizeof why);
    if (mean < 0) snprintf(L->err, L->errlen, "lower: node '%s': %s", from->name, why);
    return mean;
}

static int lower_batchnorm(lowering *L, const ir_node *n) {
    int x = L->map[n->input[0]], gamma = L->map[n->input[1]], beta = L->map[n->input[2]];
    int rmean = L->map[n->input[3]], rvar = L->map[n->input[4]];
    double eps = n->fattr[0], momentum = n->fattr[1];
    int y;
    if (!n->iattr[0]) {
        y = emit(L, n, IR_OP_BN_APPLY, (int[]){x, rmean, rvar, gamma, beta}, 5, NULL, &eps);
    } else {
        const ir_type *xt = &L->out->nodes[x].type;
        int64_t M = ir_numel(xt) / xt->dim[1];
        if (M < 2) {
            snprintf(L->err, L->errlen,
                     "lower: batchnorm '%s' in training sees one value per channel "
                     "(input %s); batch statistics need at least two",
                     n->name, ir_type_str(xt, (char[96]){0}, 96));
            return -1;
        }
        int sync = L->sync_all || n->iattr[1];
        int m = emit(L, n, IR_OP_BN_MEAN, &x, 1, NULL, NULL);
        if (sync && m >= 0) m = replica_mean(L, n, m);
        int v = m < 0 ? -1 : emit(L, n, IR_OP_BN_VAR, (int[]){x, m}, 2, NULL, NULL);
        if (sync && v >= 0) v = replica_mean(L, n, v);
        y = v < 0 ? -1 : emit(L, n, IR_OP_BN_APPLY, (int[]){x, m, v, gamma, beta}, 5, NULL, &eps);
        if (y < 0) return -1;
        int em = emit(L, n, IR_OP_EMA, (int[]){rmean, m}, 2, NULL, (double[]){momentum, 1.0});
        int vu = !sync ? v
                       : emit(L, n, IR_OP_BN_UNBIAS, (int[]){v, L->replica_scale}, 2, NULL,
                              (double[]){(double)M});
        int ev = em < 0 || vu < 0
                     ? -1
                     : emit(L, n, IR_OP_EMA, (int[]){rvar, vu}, 2, NULL,
                            (double[]){momentum, sync ? 1.0 : (double)M / (double)(M - 1)});
        if (ev < 0) return -1;
        defer_assign(L, rmean, em);
        defer_assign(L, rvar, ev);
    }
    if (y < 0) return -1;
    snprintf(L->out->nodes[y].name, IR_NAME_MAX, "%s", n->name);
    L->out->nodes[y].flags = n->flags;
    return y;
}

int pass_lower(ir_graph **g, char *err, size_t errlen) {
    return pass_lower_sync(g, 0, err, errlen);
}

int pass_lower_sync(ir_graph **g, int sync_all, char *err, size_t errlen) {
    const ir_graph *in = *g;
    lowering L = {ir_new(), NULL, NULL, 0, sync_all, -1, err, errlen};
    L.map = malloc(sizeof *L.map * (size_t)(in->n ? in->n : 1));
    L.assigns = malloc(sizeof *L.assigns * 4 * (size_t)(in->n ? in->n : 1)); /* 2 per batchnorm */
    BASE_CHECK_ALLOC(L.map);
    BASE_CHECK_ALLOC(L.assigns);
    int rc = 0;
    for (int i = 0; i < in->n && !rc; i++) {
        const ir_node *n = &in->nodes[i];
        L.map[i] = n->op == IR_OP_BATCHNORM ? lower_batchnorm(&L, n) : copy_node(&L, n);
        rc = L.map[i] < 0;
    }
    for (int k = 0; k < L.nassigns && !rc; k++) {
        /* A copy: emitting may move L.out->nodes, and the target lives there. */
        ir_node target = L.out->nodes[L.assigns[2 * k]];
        rc = emit(&L, &target, IR_OP_ASSIGN, &L.assigns[2 * k], 2, NULL, NULL) < 0;
    }
    free(L.map);
    free(L.assigns);
    return ir_replace(g, L.out, rc);
}
