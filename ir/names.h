/* ir/names.h — names to indices in constant time: the one name index of
 * dpc and dprun, so that nothing looks a name up by a scan (a model may
 * have 100,000 nodes and tens of thousands of parameters).
 *
 * Usage:
 *     ir_names ns = ir_names_of_nodes(g);             // every node; the first of a name wins
 *     int i = ir_names_find(&ns, "conv0.weight");     // -1 if absent
 *     int j = ir_names_add(&ns, k);                   // records k; the index already under
 *                                                     // k's name (not replaced), else -1
 *     ir_names_free(&ns);
 *
 *     ir_names ns = ir_names_new(name_of, ctx, hint); // names of anything: name_of(ctx, i)
 *
 * The index holds indices, not names: name_of(ctx, i) is read at each
 * probe, so the names may move (a graph growing its node array) but must
 * not change. The table grows as entries come (hint: the expected count).
 */
#ifndef DPC_IR_NAMES_H
#define DPC_IR_NAMES_H

#include <stddef.h>

#include "ir/ir.h"

typedef const char *ir_name_fn(const void *ctx, int i);

typedef struct {
    int *slot; /* index + 1; 0 = empty */
    size_t mask, count;
    ir_name_fn *name_of;
    const void *ctx;
} ir_names;

ir_names ir_names_new(ir_name_fn *name_of, const void *ctx, size_t hint);
/* An empty index of g's node names (ir_names_add adds nodes). */
ir_names ir_names_nodes(const ir_graph *g, size_t hint);
/* ir_names_nodes with every node of g added, in order. */
ir_names ir_names_of_nodes(const ir_graph *g);
int ir_names_add(ir_names *ns, int i);
int ir_names_find(const ir_names *ns, const char *name);
void ir_names_free(ir_names *ns);

#endif
