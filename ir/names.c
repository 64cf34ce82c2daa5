/* ir/names.c — names to indices: open addressing on FNV-1a (ir/names.h). */
#include "ir/names.h"

#include <stdlib.h>
#include <string.h>

#include "base/err.h"
#include "base/hash.h"

ir_names ir_names_new(ir_name_fn *name_of, const void *ctx, size_t hint) {
    size_t size = 16;
    while (size < 2 * hint) size *= 2; /* at most half full */
    ir_names ns = {calloc(size, sizeof(int)), size - 1, 0, name_of, ctx};
    BASE_CHECK_ALLOC(ns.slot);
    return ns;
}

static const char *node_name(const void *g, int i) { return ((const ir_graph *)g)->nodes[i].name; }

ir_names ir_names_nodes(const ir_graph *g, size_t hint) { return ir_names_new(node_name, g, hint); }

ir_names ir_names_of_nodes(const ir_graph *g) {
    ir_names ns = ir_names_nodes(g, (size_t)g->n);
    for (int i = 0; i < g->n; i++) ir_names_add(&ns, i);
    return ns;
}

/* The slot holding name, or the empty slot where it would go. */
static size_t probe(const ir_names *ns, const char *name) {
    size_t k = (size_t)base_fnv1a_str(BASE_FNV1A_INIT, name) & ns->mask;
    while (ns->slot[k] && strcmp(ns->name_of(ns->ctx, ns->slot[k] - 1), name))
        k = (k + 1) & ns->mask;
    return k;
}

/* Twice the slots, every entry placed again. */
static void grow(ir_names *ns) {
    ir_names big = ir_names_new(ns->name_of, ns->ctx, ns->mask + 1);
    for (size_t k = 0; k <= ns->mask; k++)
        if (ns->slot[k]) big.slot[probe(&big, ns->name_of(ns->ctx, ns->slot[k] - 1))] = ns->slot[k];
    big.count = ns->count;
    free(ns->slot);
    *ns = big;
}

int ir_names_add(ir_names *ns, int i) {
    size_t k = probe(ns, ns->name_of(ns->ctx, i));
    if (ns->slot[k]) return ns->slot[k] - 1;
    if (2 * (ns->count + 1) > ns->mask + 1) {
        grow(ns);
        k = probe(ns, ns->name_of(ns->ctx, i));
    }
    ns->slot[k] = i + 1;
    ns->count++;
    return -1;
}

int ir_names_find(const ir_names *ns, const char *name) {
    size_t k = probe(ns, name);
    return ns->slot[k] - 1;
}

void ir_names_free(ir_names *ns) {
    free(ns->slot);
    ns->slot = NULL;
}
