/* ir/fusion.c — the fusion groups' contract (ir/ir.h): kinds, channel
 * roles and pass levels, shared by passes/fuse.c and codegen/fused.c. */
#include "ir/ir.h"

int ir_group_kind_of(int nchannel, int nrow) {
    if (nchannel && nrow) return -1;
    return nchannel ? IR_GROUP_CHANNEL : nrow ? IR_GROUP_ROW : IR_GROUP_ELEMENTWISE;
}

ir_group_role ir_channel_role(const ir_node *n, const ir_type *X) {
    if (ir_node_fuse_class(n) == IR_FUSE_CHANNEL) return IR_ROLE_REDUCTION;
    return ir_type_same_shape(&n->type, X) ? IR_ROLE_ELEMENTS : IR_ROLE_PER_CHANNEL;
}

int ir_channel_levels(const ir_graph *g, const int *member, int n, const unsigned char *stored,
                      const ir_type *X, int *level) {
    int passes = 0;
    for (int a = 0; a < n; a++) {
        const ir_node *nd = &g->nodes[member[a]];
        int lv = 0;
        for (int k = 0; k < nd->ninputs; k++)
            for (int b = 0; b < a; b++)
                if (member[b] == nd->input[k] && level[b] > lv) lv = level[b];
        ir_group_role role = ir_channel_role(nd, X);
        if (role == IR_ROLE_REDUCTION) lv++;
        level[a] = lv;
        if (role == IR_ROLE_REDUCTION && lv > passes) passes = lv;
        if (role == IR_ROLE_ELEMENTS && stored[a] && ir_store_pass(lv) > passes)
            passes = ir_store_pass(lv);
    }
    return passes;
}
