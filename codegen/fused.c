/* codegen/fused.c — one kernel for a fusion group.
 *
 * A group (passes/fuse.c) is a contiguous run of nodes; an ungrouped
 * pointwise, channel-reduction or softmax node is rendered here as a group
 * of one, so the arithmetic is the same text with fusion on or off and the
 * results are bit-identical. Members compute into locals t<k> (k = position
 * in the group); a member another member reads is used from its local, a
 * value read from outside the group is loaded, and only stored values
 * (ir_stored) are written, all at the end of the iteration, after every
 * load: so an assign may write a buffer members read, and an elementwise
 * kernel may run in place (the memory planner puts an output over a dying
 * input; those kernels take no `restrict`).
 *
 * Three loop shapes, by what the group holds:
 *   elementwise  i over the shared output shape.
 *   channel      i = channel c of the reduced shape [N, C, inner]; the
 *                group's reductions run as passes over the channel's
 *                elements e = (n*C + c)*inner + j, each pass computing the
 *                reductions whose per-channel inputs earlier passes made;
 *                prologue members are recomputed in every pass that needs
 *                them, stored ones written in the pass after the
 *                statistics they use; [C] members run between passes.
 *                Accumulation is in acc_t, element q of a channel into
 *                lane q % CG_REDUCE_LANES, lanes summed as a fixed tree:
 *                the same order fused or not, on any machine.
 *   row          i = sample of softmax cross-entropy: the row's max and
 *                log-sum-exp once, then the loss, the [N] members and the
 *                gradient row.
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "codegen/fused.h"

/* The kernel argument of node id (added on first use). */
int cg_grp_arg(cg_grp *G, int id, int writes) {
    for (int a = 0; a < G->nargs; a++)
        if (G->arg_node[a] == id) {
            G->writes[a] |= writes;
            return a;
        }
    if (G->nargs == CG_MAX_ARGS) return -1;
    int a = G->nargs++;
    G->arg_node[a] = id;
    G->arg_type[a] = nd(G, id)->type.dtype;
    G->writes[a] = writes;
    return a;
}

static int reads_input(const cg_grp *G, int m, int k) {
    const ir_node *n = nd(G, m);
    if (n->op == IR_OP_ASSIGN) return k == 1;
    if (ir_op_expr(n->op)) return ir_op_access(n->op, k) != 0;
    return 1;
}

/* Arguments: every stored value and assign target first (so a lone node
 * keeps b0 = output, b1.. = inputs), then what the members read. */
static int collect_args(cg_grp *G) {
    const unsigned char *stored = G->cx->stored;
    for (int m = G->lo; m < G->hi; m++) {
        const ir_node *n = nd(G, m);
        if (n->op == IR_OP_ASSIGN) {
            if (cg_grp_arg(G, n->input[0], 1) < 0) return -1;
        } else if (stored[m] && cg_grp_arg(G, m, 1) < 0) {
            return -1;
        }
    }
    for (int m = G->lo; m < G->hi; m++) {
        const ir_node *n = nd(G, m);
        for (int k = 0; k < n->ninputs; k++)
            if (!member(G, n->input[k]) && reads_input(G, m, k) &&
                cg_grp_arg(G, n->input[k], 0) < 0)
                return -1;
    }
    return 0;
}

/* Input k of member m in the current context. */
void cg_grp_operand(cg_grp *G, int m, int k, int acc, cg_str *o) {
    int p = nd(G, m)->input[k];
    if (member(G, p)) {
        cg_str_printf(o, "t%d", p - G->lo);
        return;
    }
    int a = cg_grp_arg(G, p, 0);
    char at[48], load[72];
    switch (acc) {
    case 'c':
        snprintf(at, sizeof at, "b%d[c]", a);
        G->used_c = 1;
        break;
    case 's': snprintf(at, sizeof at, "b%d[0]", a); break;
    case 'l': { /* the element of i's position along the last axis */
        const ir_type *t = &nd(G, m)->type;
        snprintf(at, sizeof at, "b%d[%s %% %" PRId64 "]", a, G->idx, t->dim[t->ndim - 1]);
        break;
    }
    case 'o': { /* the [N, C] element of (n, c); in CNHW i / inner is c*N + n,
                 * which is where a channel-major factor holds it already */
        const ir_type *t = &nd(G, m)->type;
        int64_t in = cg_inner_of(t);
        if ((nd(G, m)->flags & IR_FLAG_CNHW) && !(nd(G, p)->flags & IR_FLAG_CNHW))
            snprintf(at, sizeof at,
                     "b%d[%s / %" PRId64 " %% %" PRId64 " * %" PRId64 " + %s / %" PRId64 "]", a,
                     G->idx, in, t->dim[0], t->dim[1], G->idx, in * t->dim[0]);
        else
            snprintf(at, sizeof at, "b%d[%s / %" PRId64 "]", a, G->idx, in);
        break;
    }
    default: snprintf(at, sizeof at, "b%d[%s]", a, G->idx); break;
    }
    ir_dtype t = G->arg_type[a]; /* a bf16 element is read as float */
    snprintf(load, sizeof load, "%s%s%s", cg_ld(t), at, cg_end(t));
    if (acc == 'c' && G->kind == IR_GROUP_CHANNEL) {
        int k2 = 0;
        while (k2 < G->nchan && strcmp(G->chan[k2], load)) k2++;
        if (k2 == G->nchan && k2 < 64) {
            snprintf(G->chan[G->nchan++], sizeof G->chan[0], "%s", load);
            cg_str_printf(&G->chan_pre, "const float c%d = %s;\n", k2, load);
        }
        if (k2 < 64) {
            cg_str_printf(o, "c%d", k2);
            return;
        }
    }
    /* Inside an expression, a load becomes a local read before it: a select
     * such as relu_grad's `y > 0 ? dy : 0` then picks between two values
     * instead of loading dy under a condition, which is what lets the
     * compiler vectorise it. Same value, same result. */
    if (!G->pre) {
        cg_str_printf(o, "%s", load);
        return;
    }
    for (int k2 = G->first_load; k2 < G->nload; k2++)
        if (!strcmp(G->loads[k2 % 32], load)) {
            cg_str_printf(o, "v%d", k2);
            return;
        }
    int v = G->nload++;
    snprintf(G->loads[v % 32], sizeof G->loads[0], "%s", load);
    cg_str_printf(G->pre, "const float v%d = %s;\n", v, load);
    cg_str_printf(o, "v%d", v);
}

/* The expression of pointwise member m (ir_op_expr's template language). */
static void expr_of(cg_grp *G, int m, cg_str *o) {
    const ir_node *n = nd(G, m);
    const char *t = ir_op_expr(n->op);
    const ir_type *ty = &n->type;
    int64_t inner = cg_inner_of(ty), M = ty->dim[0] * inner;
    char lit[40];
    for (; *t; t++) {
        if (t[0] == '$' && t[1] >= '0' && t[1] <= '9') {
            int k = t[1] - '0', acc = 'i';
            if (t[2] == 'c' || t[2] == 's' || t[2] == 'o' || t[2] == 'l') acc = t[2], t++;
            cg_grp_operand(G, m, k, acc, o);
            t++;
        } else if (t[0] == '@' && t[1] >= '0' && t[1] < '0' + IR_MAX_FATTRS) {
            cg_str_printf(o, "%s", cg_lit(G->cx, n->fattr[t[1] - '0'], 0, lit));
            t++;
        } else if (t[0] == '#' && (t[1] == 'M' || t[1] == 'I')) {
            cg_str_printf(o, "%s", cg_lit(G->cx, 1.0 / (double)(t[1] == 'M' ? M : inner), 0, lit));
            t++;
        } else {
            cg_str_append(o, t, 1);
        }
    }
}

/* Member m's expression with its loads hoisted: the load lines (indented)
 * into b, the expression into e. */
static void expr_loaded(cg_grp *G, int m, cg_str *b, const char *ind, cg_str *e) {
    cg_str pre = {0};
    G->pre = &pre;
    G->first_load = G->nload;
    expr_of(G, m, e);
    G->pre = NULL;
    for (const char *l = pre.s; l && *l;) {
        const char *end = strchr(l, '\n');
        cg_str_printf(b, "%s%.*s\n", ind, (int)(end - l), l);
        l = end + 1;
    }
    cg_str_free(&pre);
}

/* "const float tK = EXPR;" for a pointwise member (an assign computes nothing). */
void cg_grp_compute(cg_grp *G, int m, cg_str *b, const char *ind) {
    if (nd(G, m)->op == IR_OP_ASSIGN) return;
    cg_str e = {0};
    expr_loaded(G, m, b, ind, &e);
    cg_str_printf(b, "%sconst float t%d = %s;\n", ind, m - G->lo, e.s);
    cg_str_free(&e);
}

/* Stores at the end of an iteration at index `at`: stored values, then
 * assigns (the value into the target). `which` filters members; each
 * statement gets prefix `one` (a cooperative kernel's first_thread). */
void cg_grp_stores(cg_grp *G, cg_str *b, const char *at, int (*which)(const cg_grp *, int),
                   const char *one) {
    for (int m = G->lo; m < G->hi; m++) {
        const ir_node *n = nd(G, m);
        if (which && !which(G, m)) continue;
        if (n->op == IR_OP_ASSIGN) {
            cg_str v = {0};
            cg_grp_operand(G, m, 1, 'i', &v);
            int a = cg_grp_arg(G, n->input[0], 1);
            cg_str_printf(b, "%sb%d[%s] = %s%s%s;\n", one, a, at, cg_st(G->arg_type[a]), v.s,
                          cg_end(G->arg_type[a]));
            cg_str_free(&v);
        } else if (G->cx->stored[m]) {
            int a = cg_grp_arg(G, m, 1);
            cg_str_printf(b, "%sb%d[%s] = %st%d%s;\n", one, a, at, cg_st(G->arg_type[a]), m - G->lo,
                          cg_end(G->arg_type[a]));
        }
    }
}

/* ---- elementwise ------------------------------------------------------------------------ */

static int body_elementwise(cg_grp *G, cg_kdef *kd) {
    const ir_type *S = &nd(G, G->lo)->type;
    cg_str b = {0};
    G->idx = "i";
    const ir_node *n = nd(G, G->lo);
    if (G->hi - G->lo == 1 && n->op != IR_OP_ASSIGN) {
        /* a lone node: one line, as it always was */
        cg_str e = {0};
        expr_loaded(G, G->lo, &b, "", &e);
        int a = cg_grp_arg(G, G->lo, 1);
        cg_str_printf(&b, "b%d[i] = %s%s%s;\n", a, cg_st(G->arg_type[a]), e.s,
                      cg_end(G->arg_type[a]));
        cg_str_free(&e);
    } else {
        for (int m = G->lo; m < G->hi; m++) cg_grp_compute(G, m, &b, "");
        cg_grp_stores(G, &b, "i", NULL, "");
    }
    if (G->used_c && (n->flags & IR_FLAG_CNHW)) /* channel-major: c is the row of N*inner */
        cg_str_printf(&kd->body, "const idx_t c = i / %" PRId64 ";\n", S->dim[0] * cg_inner_of(S));
    else if (G->used_c)
        cg_str_printf(&kd->body, "const idx_t c = (i / %" PRId64 ") %% %" PRId64 ";\n",
                      cg_inner_of(S), S->ndim > 1 ? S->dim[1] : 1);
    cg_str_append(&kd->body, b.s ? b.s : "", b.len);
    cg_str_free(&b);
    kd->cost = G->hi - G->lo;
    kd->serial = 1;
    kd->no_restrict = 1; /* may run in place */
    return 0;
}

/* ---- the group ---------------------------------------------------------------------------- */

static int fail_group(cg_ctx *cx, int lo, int hi, const char *why) {
    return cg_fail(cx, "internal error: fusion group of nodes %d..%d (%s ... %s): %s", lo, hi - 1,
                   ir_ops[cx->g->nodes[lo].op].name, ir_ops[cx->g->nodes[hi - 1].op].name, why);
}

/* Kernel name: the members' distinct op names in order. */
static void group_name(const cg_grp *G, char *out, size_t cap) {
    size_t used = 0;
    out[0] = 0;
    for (int m = G->lo; m < G->hi; m++) {
        const char *name = ir_ops[nd(G, m)->op].name;
        int dup = 0;
        for (int q = G->lo; q < m && !dup; q++) dup = !strcmp(ir_ops[nd(G, q)->op].name, name);
        if (dup || used + strlen(name) + 2 > cap) continue;
        used += (size_t)snprintf(out + used, cap - used, "%s%s", used ? "_" : "", name);
    }
}

int cg_render_group(cg_ctx *cx, int lo, int hi) {
    cg_grp G = {.cx = cx, .g = cx->g, .lo = lo, .hi = hi};
    if (hi - lo > CG_MAX_GROUP) return fail_group(cx, lo, hi, "too many nodes");
    int ncr = 0, nsm = 0;
    for (int m = lo; m < hi; m++) {
        const ir_node *n = &cx->g->nodes[m];
        ir_fuse_class c = ir_node_fuse_class(n);
        if (c == IR_FUSE_NONE) return fail_group(cx, lo, hi, "holds an op codegen cannot fuse");
        if (c == IR_FUSE_CHANNEL && !G.X) {
            G.X = &cx->g->nodes[n->input[0]].type;
            G.xcnhw = (cx->g->nodes[n->input[0]].flags & IR_FLAG_CNHW) != 0;
        }
        ncr += c == IR_FUSE_CHANNEL;
        nsm += c == IR_FUSE_ROW;
    }
    G.kind = ir_group_kind_of(ncr, nsm);
    if (G.kind < 0) return fail_group(cx, lo, hi, "channel and row reductions");
    if (collect_args(&G)) return fail_group(cx, lo, hi, "too many buffers");
    char name[48];
    group_name(&G, name, sizeof name);
    cg_kdef kd = {.op = name};
    int64_t count;
    if (G.kind == IR_GROUP_CHANNEL) {
        G.N = G.X->dim[0], G.C = G.X->dim[1], G.inner = cg_inner_of(G.X);
        if (cx->g->nodes[lo].op == IR_OP_SUMSQ) /* one channel: the whole tensor (fuse.c) */
            G.N = 1, G.C = 1, G.inner = ir_numel(G.X);
        G.split = cg_grp_split_of(&G, &G.chunk);
        if (G.split > 1) return cg_grp_channel_split(&G, name);
        count = G.C;
        cg_grp_body_channel(&G, &kd);
    } else if (G.kind == IR_GROUP_ROW) {
        int first = lo;
        while (ir_op_fuse(cx->g->nodes[first].op) != IR_FUSE_ROW) first++;
        count = cx->g->nodes[cx->g->nodes[first].input[0]].type.dim[0];
        cg_grp_body_row(&G, &kd);
    } else {
        count = ir_numel(&cx->g->nodes[lo].type);
        body_elementwise(&G, &kd);
    }
    kd.nargs = G.nargs;
    for (int a = 0; a < G.nargs; a++) kd.type[a] = G.arg_type[a], kd.writes[a] = G.writes[a];
    int k = cg_emit_kernel(cx, &kd);
    if (k < 0) return -1;
    cg_step *s = cg_begin_step(cx, hi - 1);
    if (cx->g->nodes[hi - 1].op == IR_OP_ASSIGN) s->alias = cx->g->nodes[hi - 1].input[0];
    int slot[CG_MAX_ARGS];
    int64_t off[CG_MAX_ARGS] = {0};
    for (int a = 0; a < G.nargs; a++) slot[a] = cg_step_slot(cx, G.arg_node[a]);
    cg_add_kernel_call(cx, k, count, G.nargs, slot, off);
    return 0;
}
