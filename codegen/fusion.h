/* codegen/fusion.h — the fusion contract: what passes/fuse.c groups and
 * codegen/fused.c renders agree on, written once so the two cannot drift.
 *
 *   class  what a node can be in a group: pointwise (an ir_op_expr),
 *          a per-channel reduction, a softmax row, or nothing (i32
 *          values, sources, views, pooling, GEMMs).
 *   kind   a group's one iteration space, from the reductions it holds:
 *          elementwise (none), channel, row; never channel and row.
 *   role   a member of a channel group over X: the reduction, a prologue
 *          or epilogue value of X's shape, or a per-channel [C] value.
 *   level  the pass over a channel a member needs: a reduction runs in
 *          the pass after those of its inputs (level = max input level,
 *          + 1 for a reduction); a stored X-shaped value is written in
 *          the pass after the statistics it uses (its level + 1); [C]
 *          values are computed between passes. The group's pass count
 *          is the largest of these (at most IR_GROUP_MAX_PASSES).
 *
 * Usage:
 *     if (fu_node_class(n) == FU_NONE) ...            // not fusible
 *     int kind = fu_group_kind(nchannel, nrow);       // -1: no one loop
 *     int passes = fu_channel_levels(g, member, n, stored, X, level);
 */
#ifndef DPC_CODEGEN_FUSION_H
#define DPC_CODEGEN_FUSION_H

#include "ir/ir.h"

typedef enum { FU_NONE, FU_POINTWISE, FU_CHANNEL, FU_ROW } fu_class;
typedef enum { FU_ELEMENTWISE, FU_CHANNEL_GROUP, FU_ROW_GROUP } fu_kind;
/* roles in a channel group: X-shaped (prologue/epilogue), reduction, [C] */
typedef enum { FU_ELEMENTS, FU_REDUCTION, FU_PER_CHANNEL } fu_role;

fu_class fu_node_class(const ir_node *n);
/* The kind of a group holding nchannel channel and nrow row reductions;
 * -1 when it holds both. */
int fu_group_kind(int nchannel, int nrow);
/* Role of member n in a channel group reducing tensors of shape X. */
fu_role fu_channel_role(const ir_node *n, const ir_type *X);
/* The pass in which a stored prologue/epilogue value of level lv is written. */
static inline int fu_store_pass(int lv) { return lv + 1; }
/* Levels of the n members (node ids member[], in topological order) of a
 * channel group over X into level[] (by position), stored[] saying which
 * members' values are stored; returns the passes the group makes. */
int fu_channel_levels(const ir_graph *g, const int *member, int n, const unsigned char *stored,
                      const ir_type *X, int *level);

#endif
