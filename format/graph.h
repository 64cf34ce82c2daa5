/* format/graph.h — what the runtime relies on in a plan's graphs beyond
 * the IR itself: the inputs it sets by name, and the bytes a node's value
 * takes, counted once for both sides (the memory plan's need arithmetic,
 * the executor's buffers).
 *
 * Usage:
 *     rt_exec_set_scalar(ex, FMT_REPLICA_SCALE, 1.0f / replicas);
 *     int64_t b = fmt_node_bytes(&g->nodes[i]);
 */
#ifndef DPC_FORMAT_GRAPH_H
#define DPC_FORMAT_GRAPH_H

#include <stdint.h>

#include "base/bytes.h"
#include "ir/ir.h"

/* The scalar input synchronised BatchNorm statistics are scaled by: 1/R
 * for R replicas (passes/lower.c adds it; the executor sets it). */
#define FMT_REPLICA_SCALE "replica_scale"

/* Elements times element size, saturating at INT64_MAX (base_bytes_mul). */
static inline int64_t fmt_node_bytes(const ir_node *n) {
    return base_bytes_mul(ir_numel(&n->type), (int64_t)ir_dtype_size(n->type.dtype));
}

#endif
