/* ir/dump.c — a graph as text (ir_dump, read back by ir/text.c), as
 * Graphviz (ir_dot) and as a layer table (ir_summary). */
#include "ir/ir.h"

#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

static const char *init_name(int64_t init) {
    return init == IR_INIT_ZERO     ? "zero"
           : init == IR_INIT_ONE    ? "one"
           : init == IR_INIT_NORMAL ? "normal"
           : init == IR_INIT_SCALED ? "scaled"
                                    : "xavier";
}

/* The shortest %.Ng that strtod reads back as exactly v: "0.9", not
 * "0.90000000000000002", yet every bit kept (ir/text.c reads it). */
void ir_print_double(double v, FILE *f) {
    char buf[40];
    for (int prec = 1; prec <= 17; prec++) {
        snprintf(buf, sizeof buf, "%.*g", prec, v);
        if (strtod(buf, NULL) == v) break;
    }
    fputs(buf, f);
}

/* A name as a plain word when it is one (letters, digits, _ . / : + -),
 * else quoted with \" \\ and \xHH escapes; ir/text.c reads both. */
static int plain_char(unsigned char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
           strchr("_./:+-", c) != NULL;
}

void ir_print_name(const char *s, int quote, FILE *f) {
    int plain = s[0] != 0;
    for (const unsigned char *p = (const unsigned char *)s; *p && plain; p++)
        plain = plain_char(*p);
    if (plain && !quote) {
        fputs(s, f);
        return;
    }
    fputc('"', f);
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        if (*p == '"' || *p == '\\')
            fprintf(f, "\\%c", *p);
        else if (*p < 0x20 || *p >= 0x7f)
            fprintf(f, "\\x%02x", *p);
        else
            fputc(*p, f);
    }
    fputc('"', f);
}

static void print_attrs(const ir_node *n, FILE *f) {
    char name[32];
    for (int i = 0; i < ir_op_num_iattrs(n->op); i++) {
        ir_op_attr_name(n->op, 0, i, name, sizeof name);
        if (ir_is_persistent(n->op))
            fprintf(f, " init=%s", init_name(n->iattr[0]));
        else if (n->op == IR_OP_INPUT && n->iattr[0] == 0)
            continue;
        else
            fprintf(f, " %s=%" PRId64, name, n->iattr[i]);
    }
    for (int i = 0; i < ir_op_num_fattrs(n->op); i++) {
        fprintf(f, " %s=", ir_op_attr_name(n->op, 1, i, name, sizeof name));
        ir_print_double(n->fattr[i], f);
    }
}

/* " [output,loss]": every flag set, unknown bits as hex. */
static void print_flags(unsigned flags, FILE *f) {
    if (!flags) return;
    const char *sep = " [";
    for (unsigned b = 0; b < 32; b++)
        if ((flags & (1u << b)) && ir_flag_name(b)) {
            fprintf(f, "%s%s", sep, ir_flag_name(b));
            sep = ",";
        }
    if (flags & ~IR_NAMED_FLAGS) fprintf(f, "%s0x%x", sep, flags & ~IR_NAMED_FLAGS);
    fputc(']', f);
}

/* "bn_mean+bn_var+bn_apply+relu": the ops of the group starting at node i
 * (a contiguous run), into buf. */
static const char *group_ops(const ir_graph *g, int i, char *buf, size_t n) {
    size_t used = 0;
    buf[0] = 0;
    for (int j = i; j < g->n && g->nodes[j].group == g->nodes[i].group && used < n; j++)
        used += (size_t)snprintf(buf + used, n - used, "%s%s", j > i ? " " : "",
                                 ir_ops[g->nodes[j].op].name);
    return buf;
}

void ir_dump(const ir_graph *g, FILE *f) {
    char buf[96], ops[512];
    fprintf(f, "# graph: %d nodes\n", g->n);
    for (int i = 0; i < g->n; i++) {
        const ir_node *n = &g->nodes[i];
        if (n->group && (i == 0 || g->nodes[i - 1].group != n->group)) {
            int len = 0;
            while (i + len < g->n && g->nodes[i + len].group == n->group) len++;
            fprintf(f, "# kernel g%d: %d ops: %s\n", n->group, len,
                    group_ops(g, i, ops, sizeof ops));
        }
        fprintf(f, "%%%d = %s", i, ir_ops[n->op].name);
        if (ir_is_source(n->op)) {
            fputc(' ', f);
            ir_print_name(n->name, 1, f);
        }
        for (int j = 0; j < n->ninputs; j++) fprintf(f, " %%%d", n->input[j]);
        print_attrs(n, f);
        fprintf(f, " : %s", ir_type_str(&n->type, buf, sizeof buf));
        if (n->flags & IR_FLAG_CNHW) fprintf(f, " cnhw");
        if (n->group) fprintf(f, " @g%d", n->group);
        if (n->line || n->col) fprintf(f, " loc(%d:%d)", n->line, n->col);
        print_flags(n->flags & ~(unsigned)IR_FLAG_CNHW, f); /* that one is " cnhw" */
        if (!ir_is_source(n->op) && n->name[0]) {
            fputs("  # ", f);
            ir_print_name(n->name, 0, f);
        }
        fputc('\n', f);
    }
}

void ir_dot(const ir_graph *g, const char *title, FILE *f) {
    char buf[96], ops[512];
    fprintf(f, "digraph \"%s\" {\n  rankdir=TB;\n  node [fontname=\"monospace\" fontsize=10];\n",
            title ? title : "dpc");
    for (int i = 0; i < g->n; i++) {
        const ir_node *n = &g->nodes[i];
        /* A fusion group is a cluster labelled with the ops its kernel holds. */
        int first = n->group && (i == 0 || g->nodes[i - 1].group != n->group);
        int last = n->group && (i + 1 == g->n || g->nodes[i + 1].group != n->group);
        if (first)
            fprintf(f,
                    "  subgraph cluster_g%d {\n    label=\"kernel g%d: %s\";\n    style=filled;"
                    " fillcolor=\"#e8f0ff\"; fontname=\"monospace\"; fontsize=10;\n",
                    n->group, n->group, group_ops(g, i, ops, sizeof ops));
        const char *shape = ir_is_source(n->op) ? "note" : "box";
        const char *color = n->op == IR_OP_PARAM   ? "lightyellow"
                            : n->op == IR_OP_STATE ? "lightgrey"
                            : n->op == IR_OP_INPUT ? "lightblue"
                                                   : "white";
        fprintf(f, "  n%d [shape=%s style=filled fillcolor=%s label=\"%%%d %s\\n%s%s%s\"];\n", i,
                shape, color, i, ir_ops[n->op].name, n->name, n->name[0] ? "\\n" : "",
                ir_type_str(&n->type, buf, sizeof buf));
        if (last) fprintf(f, "  }\n");
    }
    for (int i = 0; i < g->n; i++)
        for (int j = 0; j < g->nodes[i].ninputs; j++)
            fprintf(f, "  n%d -> n%d;\n", g->nodes[i].input[j], i);
    fprintf(f, "}\n");
}

void ir_summary(const ir_graph *g, FILE *f) {
    char shape[96];
    fprintf(f, "%-5s %-22s %-26s %-20s %12s\n", "node", "op", "name", "output", "params");
    unsigned char *counted = calloc((size_t)g->n + 1, 1); /* a tied weight: its first reader's */
    if (!counted) return;
    for (int i = 0; i < g->n; i++) {
        const ir_node *n = &g->nodes[i];
        if (ir_is_source(n->op) && n->op != IR_OP_INPUT) continue;
        int64_t params = 0;
        for (int j = 0; j < n->ninputs; j++) {
            const ir_node *in = &g->nodes[n->input[j]];
            if (in->op == IR_OP_PARAM && !counted[n->input[j]])
                params += ir_numel(&in->type), counted[n->input[j]] = 1;
        }
        fprintf(f, "%-5d %-22s %-26s %-20s %12" PRId64 "\n", i, ir_ops[n->op].name,
                n->name[0] ? n->name : "-", ir_type_str(&n->type, shape, sizeof shape), params);
    }
    free(counted);
    fprintf(f, "parameters: %" PRId64 "\n", ir_num_params(g));
}

/* What dprun's --save-params writes and --load-params reads: the eval
 * program's persistent tensors in definition order (the eval program holds
 * no optimizer state; runtime/files/params.c). */
void ir_params_table(const ir_graph *eval, FILE *f) {
    char shape[96];
    int64_t count[2] = {0, 0}, tensors[2] = {0, 0};
    int w = 4;
    for (int i = 0; i < eval->n; i++)
        if (ir_is_persistent(eval->nodes[i].op) && (int)strlen(eval->nodes[i].name) > w)
            w = (int)strlen(eval->nodes[i].name);
    fprintf(f, "%-5s %-*s %-18s %12s\n", "kind", w, "name", "shape", "elements");
    for (int i = 0; i < eval->n; i++) {
        const ir_node *n = &eval->nodes[i];
        if (!ir_is_persistent(n->op)) continue;
        int k = n->op == IR_OP_STATE;
        count[k] += ir_numel(&n->type), tensors[k]++;
        fprintf(f, "%-5s %-*s %-18s %12" PRId64 "\n", k ? "state" : "param", w, n->name,
                ir_type_str(&n->type, shape, sizeof shape), ir_numel(&n->type));
    }
    fprintf(f,
            "param: %" PRId64 " trained in %" PRId64 " tensors; state: %" PRId64 " in %" PRId64
            " tensors (BatchNorm running statistics, fixed gamma/beta); "
            "total %" PRId64 "\n",
            count[0], tensors[0], count[1], tensors[1], count[0] + count[1]);
}
