/* ir/ops.c — the op table (IR_OPS in ir.h) and what it says about an op:
 * its name, arity and attribute schema; which ops are views. */
#include "ir/ir.h"

#include <assert.h>
#include <string.h>

const ir_op_info ir_ops[IR_OP_COUNT] = {
#define X(id, name, amin, amax, fuse, iattrs, fattrs) {name, amin, amax, fuse, iattrs, fattrs},
    IR_OPS(X)
#undef X
};

/* Plans store an op as its index in this table (format/plan_graph.c), so the order is
 * part of the file format: a new op is appended at the end of IR_OPS, never
 * inserted, or PLAN_VERSION is bumped. Then update this count and the list
 * in tests/unit/test_ir.c (op_order_is_pinned). */
static_assert(IR_OP_COUNT == 90, "op table changed: append only, see the comment above");

int ir_op_by_name(const char *name) {
    for (int i = 0; i < IR_OP_COUNT; i++)
        if (strcmp(ir_ops[i].name, name) == 0) return i;
    return -1;
}

static int count_names(const char *list) {
    if (!*list) return 0;
    int n = 1;
    for (const char *p = list; *p; p++) n += *p == ',';
    return n;
}

const char *ir_flag_name(unsigned b) {
    static const char *const names[] = {"output", "loss",    "grad", NULL,
                                        "tf32",   "libconv", "tune", "dense"};
    return b < sizeof names / sizeof *names ? names[b] : NULL;
}

int ir_op_num_iattrs(ir_op op) { return count_names(ir_ops[op].iattrs); }
int ir_op_num_fattrs(ir_op op) { return count_names(ir_ops[op].fattrs); }

const char *ir_op_attr_name(ir_op op, int is_float, int slot, char *buf, size_t n) {
    const char *p = is_float ? ir_ops[op].fattrs : ir_ops[op].iattrs;
    for (int i = 0; i < slot && p; i++) {
        p = strchr(p, ',');
        if (p) p++;
    }
    if (!p || !*p || n == 0) {
        if (n) buf[0] = 0;
        return buf;
    }
    size_t len = strcspn(p, ",");
    if (len >= n) len = n - 1;
    memcpy(buf, p, len);
    buf[len] = 0;
    return buf;
}

int ir_is_view(ir_op op) {
    return op == IR_OP_FLATTEN || op == IR_OP_RESHAPE_LIKE || op == IR_OP_RESHAPE;
}
