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

#include "codegen/internal.h"

typedef struct {
    cg_ctx *cx;
    const ir_graph *g;
    int lo, hi, kind; /* ir_group_kind */
    int nargs;
    int arg_node[CG_MAX_ARGS];
    ir_dtype arg_type[CG_MAX_ARGS];
    int writes[CG_MAX_ARGS];
    const char *idx; /* index expression of an 'i' access */
    int used_c;      /* an operand read a per-channel vector */
    /* While rendering one expression: its loads, hoisted into locals
     * v<k> before it (see operand()), deduplicated. */
    cg_str *pre;
    int nload, first_load;
    char loads[32][72];
    /* Channel groups: per-channel loads (b[c]) made once per channel, at
     * the top of the iteration, as c<k>: the passes' loops then hold no load
     * that could alias their stores, and vectorise. */
    cg_str chan_pre;
    int nchan;
    char chan[64][72];
    /* channel groups */
    const ir_type *X;
    int64_t N, C, inner;
    int xcnhw; /* X is channel-major: channel c is the row [c*N*inner, (c+1)*N*inner) */
    int level[CG_MAX_GROUP];
    /* A channel split over `split` blocks (> 1: dialect split_blocks): each
     * block's share of a pass is q in [qlo, qhi); partial sums go to the
     * scratch argument b<nargs>, one per (reduction, channel, block). */
    int split;
    int64_t chunk;
} grp;

static const ir_node *nd(const grp *G, int i) { return &G->g->nodes[i]; }
static int member(const grp *G, int i) { return i >= G->lo && i < G->hi; }

static int64_t inner_of(const ir_type *t) {
    int64_t inner = 1;
    for (int d = 2; d < t->ndim; d++) inner *= t->dim[d];
    return inner;
}

/* The kernel argument of node id (added on first use). */
static int arg_of(grp *G, int id, int writes) {
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

static int reads_input(const grp *G, int m, int k) {
    const ir_node *n = nd(G, m);
    if (n->op == IR_OP_ASSIGN) return k == 1;
    if (ir_op_expr(n->op)) return ir_op_access(n->op, k) != 0;
    return 1;
}

/* Arguments: every stored value and assign target first (so a lone node
 * keeps b0 = output, b1.. = inputs), then what the members read. */
static int collect_args(grp *G) {
    const unsigned char *stored = G->cx->stored;
    for (int m = G->lo; m < G->hi; m++) {
        const ir_node *n = nd(G, m);
        if (n->op == IR_OP_ASSIGN) {
            if (arg_of(G, n->input[0], 1) < 0) return -1;
        } else if (stored[m] && arg_of(G, m, 1) < 0) {
            return -1;
        }
    }
    for (int m = G->lo; m < G->hi; m++) {
        const ir_node *n = nd(G, m);
        for (int k = 0; k < n->ninputs; k++)
            if (!member(G, n->input[k]) && reads_input(G, m, k) && arg_of(G, n->input[k], 0) < 0)
                return -1;
    }
    return 0;
}

/* Input k of member m in the current context. */
static void operand(grp *G, int m, int k, int acc, cg_str *o) {
    int p = nd(G, m)->input[k];
    if (member(G, p)) {
        cg_str_printf(o, "t%d", p - G->lo);
        return;
    }
    int a = arg_of(G, p, 0);
    char at[48], load[72];
    switch (acc) {
    case 'c':
        snprintf(at, sizeof at, "b%d[c]", a);
        G->used_c = 1;
        break;
    case 's': snprintf(at, sizeof at, "b%d[0]", a); break;
    case 'o': { /* the [N, C] element of (n, c); in CNHW i / inner is c*N + n,
                 * which is where a channel-major factor holds it already */
        const ir_type *t = &nd(G, m)->type;
        int64_t in = inner_of(t);
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
static void expr_of(grp *G, int m, cg_str *o) {
    const ir_node *n = nd(G, m);
    const char *t = ir_op_expr(n->op);
    const ir_type *ty = &n->type;
    int64_t inner = inner_of(ty), M = ty->dim[0] * inner;
    char lit[40];
    for (; *t; t++) {
        if (t[0] == '$' && t[1] >= '0' && t[1] <= '9') {
            int k = t[1] - '0', acc = 'i';
            if (t[2] == 'c' || t[2] == 's' || t[2] == 'o') acc = t[2], t++;
            operand(G, m, k, acc, o);
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
static void expr_loaded(grp *G, int m, cg_str *b, const char *ind, cg_str *e) {
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
static void compute(grp *G, int m, cg_str *b, const char *ind) {
    if (nd(G, m)->op == IR_OP_ASSIGN) return;
    cg_str e = {0};
    expr_loaded(G, m, b, ind, &e);
    cg_str_printf(b, "%sconst float t%d = %s;\n", ind, m - G->lo, e.s);
    cg_str_free(&e);
}

/* Stores at the end of an iteration at index `at`: stored values, then
 * assigns (the value into the target). `which` filters members; each
 * statement gets prefix `one` (a cooperative kernel's first_thread). */
static void stores(grp *G, cg_str *b, const char *at, int (*which)(const grp *, int),
                   const char *one) {
    for (int m = G->lo; m < G->hi; m++) {
        const ir_node *n = nd(G, m);
        if (which && !which(G, m)) continue;
        if (n->op == IR_OP_ASSIGN) {
            cg_str v = {0};
            operand(G, m, 1, 'i', &v);
            int a = arg_of(G, n->input[0], 1);
            cg_str_printf(b, "%sb%d[%s] = %s%s%s;\n", one, a, at, cg_st(G->arg_type[a]), v.s,
                          cg_end(G->arg_type[a]));
            cg_str_free(&v);
        } else if (G->cx->stored[m]) {
            int a = arg_of(G, m, 1);
            cg_str_printf(b, "%sb%d[%s] = %st%d%s;\n", one, a, at, cg_st(G->arg_type[a]), m - G->lo,
                          cg_end(G->arg_type[a]));
        }
    }
}

/* ---- elementwise ------------------------------------------------------------------------ */

static int body_elementwise(grp *G, cg_kdef *kd) {
    const ir_type *S = &nd(G, G->lo)->type;
    cg_str b = {0};
    G->idx = "i";
    const ir_node *n = nd(G, G->lo);
    if (G->hi - G->lo == 1 && n->op != IR_OP_ASSIGN) {
        /* a lone node: one line, as it always was */
        cg_str e = {0};
        expr_loaded(G, G->lo, &b, "", &e);
        int a = arg_of(G, G->lo, 1);
        cg_str_printf(&b, "b%d[i] = %s%s%s;\n", a, cg_st(G->arg_type[a]), e.s,
                      cg_end(G->arg_type[a]));
        cg_str_free(&e);
    } else {
        for (int m = G->lo; m < G->hi; m++) compute(G, m, &b, "");
        stores(G, &b, "i", NULL, "");
    }
    if (G->used_c && (n->flags & IR_FLAG_CNHW)) /* channel-major: c is the row of N*inner */
        cg_str_printf(&kd->body, "const idx_t c = i / %" PRId64 ";\n", S->dim[0] * inner_of(S));
    else if (G->used_c)
        cg_str_printf(&kd->body, "const idx_t c = (i / %" PRId64 ") %% %" PRId64 ";\n", inner_of(S),
                      S->ndim > 1 ? S->dim[1] : 1);
    cg_str_append(&kd->body, b.s ? b.s : "", b.len);
    cg_str_free(&b);
    kd->cost = G->hi - G->lo;
    kd->serial = 1;
    kd->no_restrict = 1; /* may run in place */
    return 0;
}

/* ---- channel reductions -------------------------------------------------------------------- */

/* Roles and levels are the fusion contract's (ir/ir.h). */
static int role(const grp *G, int m) { return ir_channel_role(nd(G, m), G->X); }

static int is_e(const grp *G, int m) { return role(G, m) == IR_ROLE_PER_CHANNEL; }
static int is_r(const grp *G, int m) { return role(G, m) == IR_ROLE_REDUCTION; }

/* Marks member m and the prologue members it reads (a pass recomputes them). */
static void need(const grp *G, int m, unsigned char *mark) {
    if (mark[m - G->lo]) return;
    mark[m - G->lo] = 1;
    const ir_node *n = nd(G, m);
    for (int k = 0; k < n->ninputs; k++)
        if (member(G, n->input[k]) && role(G, n->input[k]) == IR_ROLE_ELEMENTS)
            need(G, n->input[k], mark);
}

/* Per-channel operand k of reduction m: a statistic of this channel. */
static void stat(grp *G, int m, int k, cg_str *o) { operand(G, m, k, 'c', o); }

/* The lanes lo..hi-1 of accumulator s<t> summed as a balanced tree, so the
 * order is fixed by the text, not by the compiler. */
static void lane_sum(cg_str *b, int t, int lo, int hi) {
    if (hi - lo == 1) {
        cg_str_printf(b, "s%d[%d]", t, lo);
        return;
    }
    cg_str_printf(b, "(");
    lane_sum(b, t, lo, (lo + hi) / 2);
    cg_str_printf(b, " + ");
    lane_sum(b, t, (lo + hi) / 2, hi);
    cg_str_printf(b, ")");
}

/* A thread's share of a loop over the elements of one iteration: it
 * starts at the dialect's thread_first and steps by thread_step, both
 * times `lanes` (C: one thread, so 0 and lanes; CUDA: the block's
 * threads, lanes 1). Into first and step. */
static void thread_range(const cg_dialect_desc *dl, int64_t lanes, char *first, char *step,
                         size_t n) {
    if (lanes == 1) {
        snprintf(first, n, "%s", dl->thread_first);
        snprintf(step, n, "%s", dl->thread_step);
    } else {
        snprintf(first, n, "(idx_t)%s * %" PRId64, dl->thread_first, lanes);
        snprintf(step, n, "(idx_t)%s * %" PRId64, dl->thread_step, lanes);
    }
    if (!strcmp(dl->thread_first, "0")) snprintf(first, n, "0");
    if (!strcmp(dl->thread_step, "1")) snprintf(step, n, "%" PRId64, lanes);
}

/* One pass over the N*inner elements of channel c, element q of the
 * channel's sequence (q = n*inner + j) accumulating into lane q % LANES
 * of the thread that owns it (dialect.c: reduce_lanes, thread_first/step).
 * Lanes make the summation order part of the generated text, whatever the
 * compiler vectorises, and the LANES independent chains are what lets it
 * vectorise: a serial double sum was latency bound. When inner is a
 * multiple of LANES (> 1) each block of lanes is contiguous in memory; a
 * block of GPU threads walks q in steps of the block size, so neighbouring
 * threads read neighbouring elements of a plane (coalesced; the whole
 * channel is one run when it is contiguous, N == 1 or channel-major). */
static void channel_loop(grp *G, cg_str *b, const cg_str *body) {
    const cg_dialect_desc *dl = G->cx->dl;
    int64_t L = dl->reduce_lanes, M = G->N * G->inner;
    /* The lanes are independent: a dialect may say so (lane_simd). */
    const char *simd = dl->lane_simd;
    /* channel-major: element q of channel c is at c*M + q (the same q, so
     * the same lanes and the same sums as NCHW) */
    char at[96];
    if (G->xcnhw)
        snprintf(at, sizeof at, "c * %" PRId64 " + q", M);
    else
        snprintf(at, sizeof at, "(q / %" PRId64 " * %" PRId64 " + c) * %" PRId64 " + q %% %" PRId64,
                 G->inner, G->C, G->inner, G->inner);
    if (L > 1 && G->inner % L == 0 && !G->xcnhw) {
        cg_str_printf(b,
                      "for (idx_t n = 0; n < %" PRId64 "; n++) {\n"
                      "    const idx_t base = (n * %" PRId64 " + c) * %" PRId64 ";\n"
                      "    for (idx_t j = 0; j < %" PRId64 "; j += %" PRId64 ")\n"
                      "%s"
                      "    for (idx_t l = 0; l < %" PRId64 "; l++) {\n"
                      "        const idx_t e = base + j + l;\n",
                      G->N, G->C, G->inner, G->inner, L, simd, L);
    } else if (G->split > 1) { /* lanes 1: this block's share of the channel */
        cg_str_printf(b,
                      "for (idx_t q0 = qlo + %s; q0 < qhi; q0 += %s) {\n"
                      "    for (idx_t l = 0; l < 1; l++) {\n"
                      "        const idx_t q = q0 + l;\n"
                      "        const idx_t e = %s;\n",
                      dl->thread_first, dl->thread_step, at);
    } else {
        char first[64], step[64];
        thread_range(dl, L, first, step, sizeof first);
        cg_str_printf(b,
                      "for (idx_t q0 = %s; q0 < %" PRId64 "; q0 += %s) {\n"
                      "%s"
                      "    for (idx_t l = 0; l < %" PRId64 "; l++) {\n"
                      "        const idx_t q = q0 + l;\n",
                      first, M, step, M % L ? "" : simd, L);
        if (M % L) cg_str_printf(b, "        if (q >= %" PRId64 ") break;\n", M);
        cg_str_printf(b, "        const idx_t e = %s;\n", at);
    }
    cg_str_append(b, body->s ? body->s : "", body->len);
    cg_str_printf(b, "    }\n}\n");
}

/* Levels of the members and the passes the group makes (ir/ir.h). */
static int channel_levels(grp *G) {
    int mem[CG_MAX_GROUP];
    unsigned char st[CG_MAX_GROUP];
    for (int m = G->lo; m < G->hi; m++) mem[m - G->lo] = m, st[m - G->lo] = G->cx->stored[m];
    return ir_channel_levels(G->g, mem, G->hi - G->lo, st, G->X, G->level);
}

/* The members pass p recomputes: the prologue inputs of its reductions
 * and the X-shaped values it stores, with what they read. */
static void pass_marks(const grp *G, int p, unsigned char *mark) {
    for (int m = G->lo; m < G->hi; m++) {
        int r = role(G, m), lv = G->level[m - G->lo];
        if (r == IR_ROLE_REDUCTION && lv == p) {
            const ir_node *n = nd(G, m);
            for (int k = 0; k < n->ninputs; k++)
                if (member(G, n->input[k]) && role(G, n->input[k]) == IR_ROLE_ELEMENTS)
                    need(G, n->input[k], mark);
        }
        if (r == IR_ROLE_ELEMENTS && G->cx->stored[m] && ir_store_pass(lv) == p) need(G, m, mark);
    }
}

/* Before pass p's loop: the statistics its reductions read, then their
 * accumulators. */
static void pass_accumulators(grp *G, int p, cg_str *b) {
    char lit[40];
    for (int m = G->lo; m < G->hi; m++) {
        const ir_node *n = nd(G, m);
        if (role(G, m) != IR_ROLE_REDUCTION || G->level[m - G->lo] != p) continue;
        int t = m - G->lo;
        cg_str s1 = {0}, s2 = {0};
        if (n->op == IR_OP_BN_VAR) {
            stat(G, m, 1, &s1);
            cg_str_printf(b, "const red_t m%d = %s;\n", t, s1.s);
        } else if (n->op == IR_OP_BN_GRAD_GAMMA) {
            stat(G, m, 2, &s1);
            stat(G, m, 3, &s2);
            cg_str_printf(b,
                          "const red_t m%d = %s;\n"
                          "const red_t inv%d = (red_t)(1.0 / sqrt((acc_t)%s + %s));\n",
                          t, s1.s, t, s2.s, cg_lit(G->cx, n->fattr[0], 1, lit));
        }
        cg_str_free(&s1);
        cg_str_free(&s2);
        cg_str_printf(b, "red_t s%d[%d] = {0};\n", t, G->cx->dl->reduce_lanes);
    }
}

/* Pass p's element body: the marked prologue values, the stores due in
 * this pass, accumulation into lane l. */
static void pass_element_body(grp *G, int p, const unsigned char *mark, cg_str *body) {
    for (int m = G->lo; m < G->hi; m++)
        if (mark[m - G->lo]) compute(G, m, body, "        ");
    for (int m = G->lo; m < G->hi; m++)
        if (role(G, m) == IR_ROLE_ELEMENTS && G->cx->stored[m] &&
            ir_store_pass(G->level[m - G->lo]) == p) {
            int a = arg_of(G, m, 1);
            cg_str_printf(body, "        b%d[e] = %st%d%s;\n", a, cg_st(G->arg_type[a]), m - G->lo,
                          cg_end(G->arg_type[a]));
        }
    for (int m = G->lo; m < G->hi; m++) {
        const ir_node *n = nd(G, m);
        if (role(G, m) != IR_ROLE_REDUCTION || G->level[m - G->lo] != p) continue;
        int t = m - G->lo;
        cg_str x = {0}, y = {0};
        operand(G, m, 0, 'i', &x);
        switch (n->op) {
        case IR_OP_BN_MEAN:
        case IR_OP_BIAS_GRAD: cg_str_printf(body, "        s%d[l] += %s;\n", t, x.s); break;
        case IR_OP_BN_VAR:
            cg_str_printf(body, "        { const red_t d = %s - m%d; s%d[l] += d * d; }\n", x.s, t,
                          t);
            break;
        case IR_OP_SUMSQ:
            cg_str_printf(body, "        { const red_t d = %s; s%d[l] += d * d; }\n", x.s, t);
            break;
        default: /* bn_grad_gamma(dy, x, mean, var) */
            operand(G, m, 1, 'i', &y);
            cg_str_printf(body, "        s%d[l] += %s * ((%s - m%d) * inv%d);\n", t, x.s, y.s, t,
                          t);
            break;
        }
        cg_str_free(&x);
        cg_str_free(&y);
    }
}

/* Where reduction member m's partials start in the scratch argument:
 * reductions in member order, each [C][split]. */
static int64_t partial_offset(const grp *G, int m) {
    int64_t k = 0;
    for (int q = G->lo; q < m; q++) k += role(G, q) == IR_ROLE_REDUCTION;
    return k * G->C * G->split;
}

/* After pass p's loop: its reductions' results (each thread's lanes
 * summed as a tree, then the dialect's block_sum over the threads), then
 * the [C] members of level p. */
static void pass_results(grp *G, int p, cg_str *b) {
    for (int m = G->lo; m < G->hi; m++) {
        const ir_node *n = nd(G, m);
        if (role(G, m) != IR_ROLE_REDUCTION || G->level[m - G->lo] != p) continue;
        int t = m - G->lo;
        if (G->split > 1) {
            /* the blocks' partials, written by an earlier kernel of the step,
             * in block order: the same sum on every block and every run */
            cg_str_printf(b,
                          "acc_t r%d = 0;\n"
                          "for (idx_t s = 0; s < %d; s++) r%d += b%d[%" PRId64 " + c * %d + s];\n",
                          t, G->split, t, G->nargs, partial_offset(G, m), G->split);
        } else {
            cg_str lanes = {0};
            lane_sum(&lanes, t, 0, G->cx->dl->reduce_lanes);
            cg_str_printf(b, "const acc_t r%d = ", t);
            cg_str_printf(b, G->cx->dl->block_sum, lanes.s);
            cg_str_printf(b, ";\n");
            cg_str_free(&lanes);
        }
        if (n->op == IR_OP_BN_MEAN || n->op == IR_OP_BN_VAR)
            cg_str_printf(b, "const float t%d = (float)(r%d / %" PRId64 ".0);\n", t, t,
                          G->N * G->inner);
        else
            cg_str_printf(b, "const float t%d = (float)r%d;\n", t, t);
    }
    for (int m = G->lo; m < G->hi; m++)
        if (role(G, m) == IR_ROLE_PER_CHANNEL && G->level[m - G->lo] == p) compute(G, m, b, "");
}

/* The [C] members that need no pass: before the first loop. */
static void channel_prologue(grp *G, cg_str *b) {
    G->idx = "i";
    for (int m = G->lo; m < G->hi; m++)
        if (role(G, m) == IR_ROLE_PER_CHANNEL && G->level[m - G->lo] == 0) compute(G, m, b, "");
}

/* Pass p's loop over the channel's elements: its accumulators, then the
 * element body (the members it computes and stores) inside channel_loop. */
static void pass_loop(grp *G, int p, cg_str *b) {
    unsigned char mark[CG_MAX_GROUP] = {0};
    pass_marks(G, p, mark);
    pass_accumulators(G, p, b);
    cg_str body = {0};
    G->idx = "e";
    pass_element_body(G, p, mark, &body);
    channel_loop(G, b, &body);
    cg_str_free(&body);
    G->idx = "i";
}

static int body_channel(grp *G, cg_kdef *kd) {
    int cnt = G->hi - G->lo, passes = channel_levels(G);
    cg_str text = {0}, *b = &text;
    channel_prologue(G, b);
    for (int p = 1; p <= passes; p++) {
        pass_loop(G, p, b);
        pass_results(G, p, b);
    }
    const char *one = G->cx->dl->first_thread;
    stores(G, b, "c", is_r, one);
    stores(G, b, "c", is_e, one);
    cg_str_printf(&kd->body, "const idx_t c = i;\n");
    cg_str_append(&kd->body, G->chan_pre.s ? G->chan_pre.s : "", G->chan_pre.len);
    cg_str_append(&kd->body, text.s ? text.s : "", text.len);
    cg_str_free(&text);
    cg_str_free(&G->chan_pre);
    kd->cost = G->N * G->inner * (passes > 0 ? passes : 1) * (cnt > 1 ? 2 : 1);
    kd->block = cg_coop_block(G->cx->dl, G->C, G->N * G->inner);
    /* a loop over the thread's share of the channel per pass */
    kd->serial = (G->N * G->inner + kd->block - 1) / kd->block * (passes > 0 ? passes : 1);
    return 0;
}

/* ---- channels split over blocks ------------------------------------------------------------
 * With a dialect's split_blocks, a channel group whose channels are too few
 * to fill the GPU one block each is one kernel per pass instead of one
 * kernel: the channel's elements are cut into `split` chunks, a block per
 * (channel, chunk). Pass k's kernel first merges the partials of passes
 * < k (each block in block order, so every block and every run has the
 * same statistic), then runs pass k over its chunk (the element stores due
 * in it, its reductions' block sums), and writes its partials; a last
 * kernel of one block per channel merges everything and makes the
 * per-channel stores. The next pass needs the whole channel's statistic,
 * which no block has until every block is done: hence kernels, not one. */

/* Blocks per channel (1: no split), with the block size and chunk. */
static int split_of(const grp *G, int64_t *chunk) {
    const cg_dialect_desc *dl = G->cx->dl;
    int64_t M = G->N * G->inner;
    if (!dl->split_blocks || dl->reduce_lanes != 1 || G->nargs >= CG_MAX_ARGS) return 1;
    int64_t S = (dl->split_blocks + G->C - 1) / G->C;
    /* a chunk of at least 512 elements: a few loads per thread */
    if (S > M / 512) S = M / 512;
    if (S <= 1) return 1;
    *chunk = (M + S - 1) / S;
    return (int)S;
}

/* Whether pass p has reductions (the last pass's need a merge kernel). */
static int reduces_in(const grp *G, int p) {
    for (int m = G->lo; m < G->hi; m++)
        if (role(G, m) == IR_ROLE_REDUCTION && G->level[m - G->lo] == p) return 1;
    return 0;
}

/* The text of kernel k of a split group (k = passes + 1: the merge). When
 * the last pass reduces nothing, its kernel already has every statistic
 * and the first block of each channel makes the per-channel stores. */
static void split_kernel_body(grp *G, int k, int passes, cg_kdef *kd) {
    const cg_dialect_desc *dl = G->cx->dl;
    cg_str text = {0}, *b = &text;
    G->chan_pre.len = 0, G->nchan = 0;
    channel_prologue(G, b);
    for (int p = 1; p < k; p++) pass_results(G, p, b);
    if (k <= passes) {
        pass_loop(G, k, b);
        for (int m = G->lo; m < G->hi; m++) {
            if (role(G, m) != IR_ROLE_REDUCTION || G->level[m - G->lo] != k) continue;
            int t = m - G->lo;
            char part[32];
            snprintf(part, sizeof part, "s%d[0]", t);
            cg_str_printf(b, "const float p%d = ", t);
            cg_str_printf(b, dl->block_sum, part);
            cg_str_printf(b, ";\n%sb%d[%" PRId64 " + c * %d + part] = p%d;\n", dl->first_thread,
                          G->nargs, partial_offset(G, m), G->split, t);
        }
        if (k == passes && !reduces_in(G, passes)) {
            char first[64];
            snprintf(first, sizeof first, "if (part == 0) %s", dl->first_thread);
            pass_results(G, k, b);
            stores(G, b, "c", is_r, first);
            stores(G, b, "c", is_e, first);
        }
    } else {
        stores(G, b, "c", is_r, dl->first_thread);
        stores(G, b, "c", is_e, dl->first_thread);
    }
    cg_str_printf(&kd->body, "const idx_t c = i;\n");
    if (k <= passes) {
        cg_str_printf(&kd->body, "const idx_t part = ");
        cg_str_printf(&kd->body, dl->split_part, G->split);
        cg_str_printf(&kd->body,
                      ";\nconst idx_t qlo = part * %" PRId64 ";\n"
                      "const idx_t qhi = qlo + %" PRId64 " < %" PRId64 " ? qlo + %" PRId64
                      " : %" PRId64 ";\n",
                      G->chunk, G->chunk, G->N * G->inner, G->chunk, G->N * G->inner);
    }
    cg_str_append(&kd->body, G->chan_pre.s ? G->chan_pre.s : "", G->chan_pre.len);
    cg_str_append(&kd->body, text.s ? text.s : "", text.len);
    cg_str_free(&text);
}

static int render_channel_split(grp *G, const char *name) {
    cg_ctx *cx = G->cx;
    int passes = channel_levels(G), cnt = G->hi - G->lo, nred = 0;
    for (int m = G->lo; m < G->hi; m++) nred += role(G, m) == IR_ROLE_REDUCTION;
    int64_t M = G->N * G->inner;
    int kern[CG_MAX_GROUP + 1], kernels = passes + reduces_in(G, passes);
    for (int k = 1; k <= kernels; k++) {
        char op[64];
        snprintf(op, sizeof op, k <= passes ? "%s_pass%d" : "%s_merge", name, k);
        cg_kdef kd = {.op = op, .nargs = G->nargs + 1};
        split_kernel_body(G, k, passes, &kd);
        if (k <= passes) {
            kd.block = cg_coop_block(cx->dl, G->C * G->split, G->chunk);
            kd.split = G->split;
            kd.cost = M * (cnt > 1 ? 2 : 1);
            kd.serial = (G->chunk + kd.block - 1) / kd.block;
        } else {
            kd.block = cx->dl->warp;
            kd.cost = (int64_t)nred * G->split;
            kd.serial = (int64_t)passes * G->split; /* the merge loops */
        }
        for (int a = 0; a < G->nargs; a++) kd.type[a] = G->arg_type[a], kd.writes[a] = G->writes[a];
        kd.type[G->nargs] = IR_F32;
        kd.writes[G->nargs] = 1;
        kern[k] = cg_emit_kernel(cx, &kd);
        if (kern[k] < 0) return -1;
    }
    cg_str_free(&G->chan_pre);
    cg_step *s = cg_begin_step(cx, G->hi - 1);
    if (cx->g->nodes[G->hi - 1].op == IR_OP_ASSIGN) s->alias = cx->g->nodes[G->hi - 1].input[0];
    int slot[CG_MAX_ARGS];
    int64_t off[CG_MAX_ARGS] = {0};
    for (int a = 0; a < G->nargs; a++) slot[a] = cg_step_slot(cx, G->arg_node[a]);
    slot[G->nargs] = cg_step_slot(cx, CG_SCRATCH);
    cx->p->steps[cx->p->nsteps - 1].scratch = (int64_t)nred * G->C * G->split;
    for (int k = 1; k <= kernels; k++)
        cg_add_kernel_call(cx, kern[k], G->C, G->nargs + 1, slot, off);
    return 0;
}

/* ---- softmax rows ----------------------------------------------------------------------- */

static int not_grad(const grp *G, int m) { return nd(G, m)->op != IR_OP_SOFTMAX_CE_GRAD; }

static int body_row(grp *G, cg_kdef *kd) {
    int first = -1;
    for (int m = G->lo; m < G->hi && first < 0; m++)
        if (ir_op_fuse(nd(G, m)->op) == IR_FUSE_ROW) first = m;
    const ir_node *f = nd(G, first);
    int64_t K = G->g->nodes[f->input[0]].type.dim[1];
    int L = arg_of(G, f->input[0], 0), Y = arg_of(G, f->input[1], 0);
    ir_dtype tl = G->arg_type[L];
    /* rowj: element j of the logits row as float (bf16 logits are converted) */
    char rowj[64], rowy[64];
    snprintf(rowj, sizeof rowj, "%srow[j]%s", cg_ld(tl), cg_end(tl));
    snprintf(rowy, sizeof rowy, "%srow[y]%s", cg_ld(tl), cg_end(tl));
    cg_str *b = &kd->body;
    /* The row's max, then the sum of exponentials: each thread's share of
     * the row (the whole row in C), combined over the block. */
    const cg_dialect_desc *dl = G->cx->dl;
    kd->block = cg_coop_block(dl, G->g->nodes[f->input[0]].type.dim[0], K);
    char forj[200];
    snprintf(forj, sizeof forj, "for (idx_t j = %s; j < %" PRId64 "; j += %s)", dl->thread_first, K,
             dl->thread_step);
    cg_str_printf(b,
                  "const %s *row = b%d + i * %" PRId64 ";\n"
                  "float part_mx = DPC_NEG_INF;\n"
                  "%s if (%s > part_mx) part_mx = %s;\n",
                  cg_ctype(tl), L, K, forj, rowj, rowj);
    cg_str_printf(b, "const float mx = ");
    cg_str_printf(b, dl->block_max, "part_mx");
    cg_str_printf(b,
                  ";\n"
                  "red_t s = 0;\n"
                  "%s s += exp((red_t)%s - mx);\n"
                  "const acc_t lse = mx + log((acc_t)",
                  forj, rowj);
    cg_str_printf(b, dl->block_sum, "s");
    cg_str_printf(b,
                  ");\n"
                  "const int y = b%d[i];\n"
                  "const int bad = y < 0 || y >= %" PRId64 ";\n",
                  Y, K);
    /* Label smoothing e (PyTorch's): the loss is lse - (1-e)*row[y] -
     * e*mean(row), the gradient softmax - (1-e)*onehot - e/K. The row's sum
     * is one more block reduction, made only when a smoothed loss needs it;
     * e = 0 renders the unsmoothed kernels as they always were. */
    int need_mean = 0;
    for (int m = G->lo; m < G->hi; m++)
        need_mean |= nd(G, m)->op == IR_OP_SOFTMAX_CE && nd(G, m)->fattr[0] != 0;
    if (need_mean) {
        cg_str_printf(b, "red_t rs = 0;\n%s rs += (red_t)%s;\nconst acc_t rmean = (acc_t)", forj,
                      rowj);
        cg_str_printf(b, dl->block_sum, "rs");
        cg_str_printf(b, " / %" PRId64 ";\n", K);
    }
    G->idx = "i";
    int lone = G->hi - G->lo == 1;
    for (int m = G->lo; m < G->hi; m++) {
        const ir_node *n = nd(G, m);
        double e = n->fattr[0];
        char onehot[96] = "(j == y)", target[96] = "", ly[256], l1[40], l2[40];
        if (e != 0) { /* (1-e)*row[y] + e*mean, and (1-e)*onehot + e/K */
            snprintf(onehot, sizeof onehot, "(acc_t)%s * (j == y) + (acc_t)%s",
                     cg_lit(G->cx, 1 - e, 1, l1), cg_lit(G->cx, e / (double)K, 1, l2));
            snprintf(target, sizeof target, "(acc_t)%s * rmean", cg_lit(G->cx, e, 1, l2));
        }
        if (e != 0)
            snprintf(ly, sizeof ly, "lse - (acc_t)%s * %s - %s", cg_lit(G->cx, 1 - e, 1, l1), rowy,
                     target);
        else
            snprintf(ly, sizeof ly, "lse - %s", rowy);
        if (n->op == IR_OP_SOFTMAX_CE) {
            if (lone) {
                int a = arg_of(G, m, 1);
                cg_str_printf(b, "%sb%d[i] = %sbad ? DPC_NAN : (float)(%s)%s;\n", dl->first_thread,
                              a, cg_st(G->arg_type[a]), ly, cg_end(G->arg_type[a]));
            } else {
                cg_str_printf(b, "const float t%d = bad ? DPC_NAN : (float)(%s);\n", m - G->lo, ly);
            }
        } else if (n->op == IR_OP_SOFTMAX_CE_GRAD) {
            cg_str d = {0};
            operand(G, m, 2, 'i', &d);
            int a = arg_of(G, m, 1);
            cg_str_printf(b,
                          "{\n"
                          "    const acc_t d = %s;\n"
                          "    %s\n"
                          "        b%d[i * %" PRId64 " + j] = %sbad ? DPC_NAN : "
                          "(float)((exp((acc_t)%s - lse) - %s%s%s) * d)%s;\n"
                          "}\n",
                          d.s, forj, a, K, cg_st(G->arg_type[a]), rowj, e != 0 ? "(" : "", onehot,
                          e != 0 ? ")" : "", cg_end(G->arg_type[a]));
            cg_str_free(&d);
        } else {
            compute(G, m, b, "");
        }
    }
    if (!lone) stores(G, b, "i", not_grad, G->cx->dl->first_thread);
    kd->cost = 6 * K;
    int grads = 0; /* the max and sum loops (and the mean's), plus one per gradient row written */
    for (int m = G->lo; m < G->hi; m++) grads += nd(G, m)->op == IR_OP_SOFTMAX_CE_GRAD;
    kd->serial = (2 + need_mean + grads) * ((K + kd->block - 1) / kd->block);
    return 0;
}

/* ---- the group ---------------------------------------------------------------------------- */

static int fail_group(cg_ctx *cx, int lo, int hi, const char *why) {
    return cg_fail(cx, "internal error: fusion group of nodes %d..%d (%s ... %s): %s", lo, hi - 1,
                   ir_ops[cx->g->nodes[lo].op].name, ir_ops[cx->g->nodes[hi - 1].op].name, why);
}

/* Kernel name: the members' distinct op names in order. */
static void group_name(const grp *G, char *out, size_t cap) {
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
    grp G = {.cx = cx, .g = cx->g, .lo = lo, .hi = hi};
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
        G.N = G.X->dim[0], G.C = G.X->dim[1], G.inner = inner_of(G.X);
        if (cx->g->nodes[lo].op == IR_OP_SUMSQ) /* one channel: the whole tensor (fuse.c) */
            G.N = 1, G.C = 1, G.inner = ir_numel(G.X);
        G.split = split_of(&G, &G.chunk);
        if (G.split > 1) return render_channel_split(&G, name);
        count = G.C;
        body_channel(&G, &kd);
    } else if (G.kind == IR_GROUP_ROW) {
        int first = lo;
        while (ir_op_fuse(cx->g->nodes[first].op) != IR_FUSE_ROW) first++;
        count = cx->g->nodes[cx->g->nodes[first].input[0]].type.dim[0];
        body_row(&G, &kd);
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
