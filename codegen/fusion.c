/* codegen/fusion.c — the fusion contract (codegen/fusion.h). */
#include "codegen/fusion.h"

fu_class fu_node_class(const ir_node *n) {
    if (!ir_node_fusible(n)) return FU_NONE; /* f32 or bf16 storage: codegen converts */
    if (ir_op_expr(n->op)) return FU_POINTWISE;
    switch (ir_op_reduce(n->op)) {
    case IR_REDUCE_CHANNEL: return FU_CHANNEL;
    case IR_REDUCE_ROW: return FU_ROW;
    default: return FU_NONE;
    }
}

int fu_group_kind(int nchannel, int nrow) {
    if (nchannel && nrow) return -1;
    return nchannel ? FU_CHANNEL_GROUP : nrow ? FU_ROW_GROUP : FU_ELEMENTWISE;
}

fu_role fu_channel_role(const ir_node *n, const ir_type *X) {
    if (fu_node_class(n) == FU_CHANNEL) return FU_REDUCTION;
    return ir_type_same_shape(&n->type, X) ? FU_ELEMENTS : FU_PER_CHANNEL;
}

int fu_channel_levels(const ir_graph *g, const int *member, int n, const unsigned char *stored,
                      const ir_type *X, int *level) {
    int passes = 0;
    for (int a = 0; a < n; a++) {
        const ir_node *nd = &g->nodes[member[a]];
        int lv = 0;
        for (int k = 0; k < nd->ninputs; k++)
            for (int b = 0; b < a; b++)
                if (member[b] == nd->input[k] && level[b] > lv) lv = level[b];
        fu_role role = fu_channel_role(nd, X);
        if (role == FU_REDUCTION) lv++;
        level[a] = lv;
        if (role == FU_REDUCTION && lv > passes) passes = lv;
        if (role == FU_ELEMENTS && stored[a] && fu_store_pass(lv) > passes)
            passes = fu_store_pass(lv);
    }
    return passes;
}
