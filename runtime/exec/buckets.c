/* runtime/exec/buckets.c — an executor's data-parallel side: which step
 * starts and which waits for each all-reduce bucket (rt_exec_set_collective),
 * which steps a partial (accumulating) run leaves out, and ZeRO-1's
 * skipped updates (rt_exec_set_shard; the ownership itself is shard.c's).
 */
#include <stdlib.h>
#include <string.h>

#include "base/err.h"
#include "runtime/check.h"
#include "runtime/comm/comm.h"
#include "runtime/exec/internal.h"

/* The step running each node (a fusion group's members run in the step of
 * the group's last node); -1 for sources. */
static int *steps_of_nodes(const rt_exec *ex) {
    const ir_graph *g = ex->g;
    int *step = malloc(sizeof *step * (size_t)(g->n + 1));
    RT_CHECK_ALLOC(step);
    for (int i = 0; i < g->n; i++) step[i] = -1;
    for (int si = 0; si < ex->prog->nsteps; si++) {
        int k = ex->prog->steps[si].node;
        step[k] = si;
        for (int j = k - 1; g->nodes[k].group && j >= 0 && g->nodes[j].group == g->nodes[k].group;
             j--)
            step[j] = si;
    }
    return step;
}

/* The steps that read an all-reduced sum (ex->after_sum), in one pass in
 * node order: a node depends on the sums when it is one or reads a node
 * that depends on them or lives in a step that does (a fusion group's
 * other members are computed only when its step runs). */
static void mark_after_sum(rt_exec *ex, const int *step) {
    const ir_graph *g = ex->g;
    unsigned char *dep = calloc((size_t)g->n + 1, 1);
    free(ex->after_sum);
    ex->after_sum = calloc((size_t)ex->prog->nsteps + 1, 1);
    RT_CHECK_ALLOC(dep && ex->after_sum);
    for (int i = 0; i < g->n; i++) {
        const ir_node *n = &g->nodes[i];
        dep[i] = n->op == IR_OP_ALLREDUCE;
        for (int k = 0; k < n->ninputs && !dep[i]; k++) {
            int j = n->input[k];
            dep[i] = dep[j] || (step[j] >= 0 && ex->after_sum[step[j]]);
        }
        if (dep[i] && step[i] >= 0) ex->after_sum[step[i]] = 1;
    }
    free(dep);
}

int rt_exec_set_collective(rt_exec *ex, rt_coll_queue *q, char *err, size_t errlen) {
    const ir_graph *g = ex->g;
    int nb = 0;
    for (int i = 0; i < g->n; i++)
        if (g->nodes[i].op == IR_OP_ALLREDUCE && g->nodes[i].iattr[0] + 1 > nb)
            nb = (int)g->nodes[i].iattr[0] + 1;
    if (rt_coll_queue_buckets(q) != 0)
        return base_fail(err, errlen, "the communication queue has buckets of another program");
    int *step = steps_of_nodes(ex);
    rt_coll_piece *piece = malloc(sizeof *piece * (size_t)(g->n + 1));
    RT_CHECK_ALLOC(piece);
    free(ex->start_at), free(ex->wait_at);
    ex->start_at = malloc(sizeof(int) * (size_t)(nb + 1));
    ex->wait_at = malloc(sizeof(int) * (size_t)(nb + 1));
    RT_CHECK_ALLOC(ex->start_at && ex->wait_at);
    int rc = 0;
    for (int b = 0; b < nb && !rc; b++) {
        /* The bucket's gradients in packing order (offsets ascend along the
         * graph, partition.c), checked to tile the bucket. */
        int np = 0;
        int64_t packed = 0;
        ex->start_at[b] = -1;
        ex->wait_at[b] = ex->prog->nsteps;
        for (int i = 0; i < g->n && !rc; i++) {
            const ir_node *n = &g->nodes[i];
            if (n->op != IR_OP_ALLREDUCE || n->iattr[0] != b) continue;
            if (n->iattr[1] != packed)
                rc = base_fail(err, errlen,
                               "allreduce node %d: offset %lld in bucket %d, expected %lld", i,
                               (long long)n->iattr[1], b, (long long)packed);
            else if (!ex->buf[n->input[0]] || step[i] < 0)
                rc = base_fail(err, errlen, "allreduce node %d has no buffer or step", i);
            else if (ex->buf[i] == ex->buf[n->input[0]]) {
                /* Out of place from now on: the local gradient keeps its
                 * value for its other readers (the partition pass, docs/DESIGN.md §5.5). */
                ex->buf[i] = rt_backend_alloc(ex->be, (size_t)fmt_node_bytes(n), err, errlen);
                ex->owned[i] = 1;
                if (!ex->buf[i]) rc = -1;
            }
            packed += ir_numel(&n->type);
            piece[np++] = (rt_coll_piece){ex->buf[n->input[0]], ex->buf[i], ir_numel(&n->type)};
            if (step[i] > ex->start_at[b]) ex->start_at[b] = step[i];
            for (int j = i + 1; j < g->n; j++)
                for (int k = 0; k < g->nodes[j].ninputs; k++)
                    if (g->nodes[j].input[k] == i && step[j] >= 0 && step[j] < ex->wait_at[b])
                        ex->wait_at[b] = step[j];
        }
        if (!rc && np == 0) rc = base_fail(err, errlen, "bucket %d has no gradients", b);
        if (!rc && ex->wait_at[b] <= ex->start_at[b])
            rc = base_fail(
                err, errlen,
                "bucket %d is read (step %d) before its last gradient is summed (step %d)", b,
                ex->wait_at[b], ex->start_at[b]);
        if (!rc) rt_coll_queue_add_bucket(q, piece, np);
    }
    free(piece);
    if (!rc) mark_after_sum(ex, step);
    free(step);
    if (rc) return -1;
    ex->nbuckets = nb;
    ex->coll = q;
    rt_exec_set_scalar(ex, FMT_REPLICA_SCALE, 1.0f / (float)rt_coll_queue_replicas(q));
    return 0;
}

int rt_exec_set_shard(rt_exec *ex, const rt_shard *s, int me, char *err, size_t errlen) {
    if (!ex->coll) return base_fail(err, errlen, "--shard-optimizer: no collective to shard over");
    int *step = steps_of_nodes(ex);
    free(ex->skip);
    ex->skip = calloc((size_t)ex->prog->nsteps + 1, 1);
    RT_CHECK_ALLOC(ex->skip);
    int rc = rt_shard_bind(ex->g, ex->prog, step, s, me, ex->coll, ex->nbuckets, ex->skip, ex->buf,
                           err, errlen);
    free(step);
    return rc;
}
