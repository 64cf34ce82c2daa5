/* passes/partition.c — data parallelism, SPMD (docs/DESIGN.md §5.5).
 *
 * The plan stays ONE per-device program; N replicas run it on their own
 * slices of the global batch. What makes them one training run is that
 * every replica applies the same update: the sum of the replicas' parameter
 * gradients. This pass makes that explicit in the graph:
 *
 *     g   = <backward>                 PARAM.grad (IR_FLAG_GRAD), local
 *     s   = allreduce(g){bucket, offset}   PARAM.grad.sum: sum over replicas
 *     v'  = sgd_momentum(w, s, v, lr, grad_scale)
 *
 * - Out of place. The local gradient keeps its value for every other
 *   reader: BatchNorm's bn_grad_data reads dgamma and dbeta of its own
 *   device's batch (per-device BatchNorm, as Gluon). Only the optimizer's
 *   update reads the sum.
 * - Rescaling stays where it is: grad_scale, the optimizer's scalar input,
 *   is 1/global batch (replicas x per-device batch), set by the runtime.
 * - Buckets. Gradients are packed, in backward completion order (the
 *   order the backward pass produces them: graph order), into buckets of
 *   at most `bucket_bytes` (a gradient larger than that is a bucket of its
 *   own). Each allreduce node carries its bucket and its element offset in
 *   the packed bucket; the runtime reduces a bucket as soon as its last
 *   gradient exists, while the backward pass goes on, and waits for it only
 *   before the first update that reads one of its sums. Fewer, larger
 *   messages amortise the collective's latency; buckets let the first ones
 *   travel while later gradients are still being computed.
 * - Placement. Each allreduce node is inserted right after its gradient,
 *   so graph order is still execution order and the bucket's last node
 *   marks the earliest point the bucket can start.
 *
 * - Synchronised BatchNorm statistics (allreduce{sync=1}, made by lower
 *   and autodiff) are already in the graph: each becomes a bucket of its
 *   own, numbered after the gradients' in graph order; its next reader
 *   waits for it, so it is as good as blocking.
 *
 * With one replica an allreduce is a copy (codegen renders it as one); the
 * executor with a communicator attached hands it to the collective instead.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/err.h"
#include "passes/passes.h"

/* Whether `reader` reading the gradient at input `slot` must see the sum
 * over replicas: the optimizer's update does (sgd_momentum, the adam
 * moments, the norm of lars's trust); the backward pass (BatchNorm's data
 * gradient reads dgamma, dbeta) must see the local value. */
static int reads_sum(const ir_node *reader, int slot) {
    ir_op op = reader->op;
    return ((op == IR_OP_SGD_MOMENTUM || op == IR_OP_ADAM_M || op == IR_OP_ADAM_V) && slot == 1) ||
           op == IR_OP_SUMSQ;
}

size_t pass_partition_bucket_bytes(size_t requested) {
    return requested ? requested : PASS_BUCKET_BYTES_DEFAULT;
}

int pass_partition(ir_graph **gp, size_t bucket_bytes, char *err, size_t errlen) {
    const ir_graph *g = *gp;
    size_t cap = pass_partition_bucket_bytes(bucket_bytes);
    int ngrads = 0;
    for (int i = 0; i < g->n; i++) {
        if (g->nodes[i].op == IR_OP_ALLREDUCE && !g->nodes[i].iattr[2])
            return base_fail(err, errlen, "partition: the graph is partitioned already (node %d)",
                             i);
        if (g->nodes[i].flags & IR_FLAG_GRAD) {
            if (g->nodes[i].type.dtype != IR_F32)
                return base_fail(err, errlen, "partition: gradient '%s' is not f32",
                                 g->nodes[i].name);
            ngrads++;
        }
    }
    if (!ngrads) return 0; /* nothing to reduce (an eval graph) */

    /* Buckets along completion order (= graph order of the gradients). */
    int64_t *bucket = malloc(sizeof *bucket * (size_t)g->n),
            *offset = malloc(sizeof *offset * (size_t)g->n);
    int *map = malloc(sizeof *map * (size_t)g->n), *sum = malloc(sizeof *sum * (size_t)g->n);
    BASE_CHECK_ALLOC(bucket);
    BASE_CHECK_ALLOC(offset);
    BASE_CHECK_ALLOC(map);
    BASE_CHECK_ALLOC(sum);
    int64_t cur = 0, used = 0; /* bucket id, its bytes so far */
    for (int i = 0; i < g->n; i++) {
        sum[i] = -1;
        if (!(g->nodes[i].flags & IR_FLAG_GRAD)) continue;
        int64_t bytes = ir_numel(&g->nodes[i].type) * (int64_t)sizeof(float);
        if (used > 0 && used + bytes > (int64_t)cap) cur++, used = 0;
        bucket[i] = cur;
        offset[i] = used / (int64_t)sizeof(float);
        used += bytes;
    }
    int64_t next_sync = cur + 1; /* after the gradients' buckets */

    /* The new graph: every node in order, each gradient followed by its
     * allreduce; update inputs rewired to the sums. */
    ir_graph *ng = ir_new();
    ng->cap = g->n + ngrads;
    ng->nodes = calloc((size_t)ng->cap, sizeof *ng->nodes);
    BASE_CHECK_ALLOC(ng->nodes);
    int rc = 0;
    for (int i = 0; i < g->n && !rc; i++) {
        ir_node n = g->nodes[i];
        for (int j = 0; j < n.ninputs; j++) {
            int in = n.input[j];
            n.input[j] = reads_sum(&n, j) && sum[in] >= 0 ? sum[in] : map[in];
        }
        if (n.op == IR_OP_ALLREDUCE) n.iattr[0] = next_sync++, n.iattr[1] = 0;
        map[i] = ng->n;
        ng->nodes[ng->n++] = n;
        if (!(n.flags & IR_FLAG_GRAD)) continue;
        ir_node s;
        memset(&s, 0, sizeof s);
        s.op = IR_OP_ALLREDUCE;
        s.ninputs = 1;
        s.input[0] = map[i];
        s.iattr[0] = bucket[i];
        s.iattr[1] = offset[i];
        s.type = n.type;
        s.line = n.line, s.col = n.col;
        size_t nl = strnlen(n.name, IR_NAME_MAX);
        if (nl + 4 < IR_NAME_MAX) { /* else unnamed: names are labels here */
            memcpy(s.name, n.name, nl);
            memcpy(s.name + nl, ".sum", 5);
        }
        sum[i] = ng->n;
        ng->nodes[ng->n++] = s;
    }
    /* Every gradient must reach the update through its sum: a gradient the
     * optimizer does not read (no optimizer pass) is still summed, which is
     * harmless; an update reading something else is not ours to judge. */
    char why[200];
    if (!rc && ir_verify(ng, why, sizeof why)) {
        rc = base_fail(err, errlen, "partition: %s", why);
    }
    free(bucket), free(offset), free(map), free(sum);
    return ir_replace(gp, ng, rc);
}

int pass_partition_buckets(const ir_graph *g, pass_bucket *out, int max) {
    int nb = 0;
    for (int i = 0; i < g->n; i++) {
        const ir_node *n = &g->nodes[i];
        if (n->op != IR_OP_ALLREDUCE || n->iattr[2]) continue;
        int b = (int)n->iattr[0];
        if (b + 1 > nb) {
            for (int k = nb; k <= b && k < max; k++) memset(&out[k], 0, sizeof out[k]);
            nb = b + 1;
        }
        if (b >= max) continue;
        pass_bucket *pb = &out[b];
        if (!pb->grads) pb->first = i;
        pb->last = i;
        pb->grads++;
        pb->floats += ir_numel(&n->type);
    }
    return nb;
}

void pass_partition_describe(const ir_graph *g, FILE *f) {
    pass_bucket b[256];
    int nb = pass_partition_buckets(g, b, 256);
    if (!nb) {
        fprintf(f, "all-reduce: none (no parameter gradients)\n");
        return;
    }
    int64_t floats = 0;
    int grads = 0;
    for (int i = 0; i < nb && i < 256; i++) floats += b[i].floats, grads += b[i].grads;
    fprintf(f, "all-reduce: %d gradients, %.1f MiB, in %d bucket%s:", grads,
            (double)floats * 4 / (1 << 20), nb, nb == 1 ? "" : "s");
    for (int i = 0; i < nb && i < 256; i++)
        fprintf(f, "%s %.1f MiB (%d)", i ? "," : "", (double)b[i].floats * 4 / (1 << 20),
                b[i].grads);
    fprintf(f, "%s\n", nb > 256 ? ", ..." : "");
}
