/* codegen/fused_channel.c — the channel loop shape of a fusion group
 * (codegen/fused.c): one iteration per channel of the reduced shape, the
 * group's reductions as passes over the channel's elements, summed in
 * lanes as a fixed tree; and the same group split over several blocks per
 * channel, partial sums in the scratch, when a channel is long and the
 * channels few (the dialect's split_blocks). */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "codegen/fused.h"

/* ---- channel reductions -------------------------------------------------------------------- */

/* Roles and levels are the fusion contract's (ir/ir.h). */
static int role(const cg_grp *G, int m) { return ir_channel_role(nd(G, m), G->X); }

static int is_e(const cg_grp *G, int m) { return role(G, m) == IR_ROLE_PER_CHANNEL; }
static int is_r(const cg_grp *G, int m) { return role(G, m) == IR_ROLE_REDUCTION; }

/* Marks member m and the prologue members it reads (a pass recomputes them). */
static void need(const cg_grp *G, int m, unsigned char *mark) {
    if (mark[m - G->lo]) return;
    mark[m - G->lo] = 1;
    const ir_node *n = nd(G, m);
    for (int k = 0; k < n->ninputs; k++)
        if (member(G, n->input[k]) && role(G, n->input[k]) == IR_ROLE_ELEMENTS)
            need(G, n->input[k], mark);
}

/* Per-channel operand k of reduction m: a statistic of this channel. */
static void stat(cg_grp *G, int m, int k, cg_str *o) { cg_grp_operand(G, m, k, 'c', o); }

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
static void channel_loop(cg_grp *G, cg_str *b, const cg_str *body) {
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
static int channel_levels(cg_grp *G) {
    int mem[CG_MAX_GROUP];
    unsigned char st[CG_MAX_GROUP];
    for (int m = G->lo; m < G->hi; m++) mem[m - G->lo] = m, st[m - G->lo] = G->cx->stored[m];
    return ir_channel_levels(G->g, mem, G->hi - G->lo, st, G->X, G->level);
}

/* The members pass p recomputes: the prologue inputs of its reductions
 * and the X-shaped values it stores, with what they read. */
static void pass_marks(const cg_grp *G, int p, unsigned char *mark) {
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
static void pass_accumulators(cg_grp *G, int p, cg_str *b) {
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
static void pass_element_body(cg_grp *G, int p, const unsigned char *mark, cg_str *body) {
    for (int m = G->lo; m < G->hi; m++)
        if (mark[m - G->lo]) cg_grp_compute(G, m, body, "        ");
    for (int m = G->lo; m < G->hi; m++)
        if (role(G, m) == IR_ROLE_ELEMENTS && G->cx->stored[m] &&
            ir_store_pass(G->level[m - G->lo]) == p) {
            int a = cg_grp_arg(G, m, 1);
            cg_str_printf(body, "        b%d[e] = %st%d%s;\n", a, cg_st(G->arg_type[a]), m - G->lo,
                          cg_end(G->arg_type[a]));
        }
    for (int m = G->lo; m < G->hi; m++) {
        const ir_node *n = nd(G, m);
        if (role(G, m) != IR_ROLE_REDUCTION || G->level[m - G->lo] != p) continue;
        int t = m - G->lo;
        cg_str x = {0}, y = {0};
        cg_grp_operand(G, m, 0, 'i', &x);
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
            cg_grp_operand(G, m, 1, 'i', &y);
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
static int64_t partial_offset(const cg_grp *G, int m) {
    int64_t k = 0;
    for (int q = G->lo; q < m; q++) k += role(G, q) == IR_ROLE_REDUCTION;
    return k * G->C * G->split;
}

/* After pass p's loop: its reductions' results (each thread's lanes
 * summed as a tree, then the dialect's block_sum over the threads), then
 * the [C] members of level p. */
static void pass_results(cg_grp *G, int p, cg_str *b) {
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
        if (role(G, m) == IR_ROLE_PER_CHANNEL && G->level[m - G->lo] == p)
            cg_grp_compute(G, m, b, "");
}

/* The [C] members that need no pass: before the first loop. */
static void channel_prologue(cg_grp *G, cg_str *b) {
    G->idx = "i";
    for (int m = G->lo; m < G->hi; m++)
        if (role(G, m) == IR_ROLE_PER_CHANNEL && G->level[m - G->lo] == 0)
            cg_grp_compute(G, m, b, "");
}

/* Pass p's loop over the channel's elements: its accumulators, then the
 * element body (the members it computes and stores) inside channel_loop. */
static void pass_loop(cg_grp *G, int p, cg_str *b) {
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

int cg_grp_body_channel(cg_grp *G, cg_kdef *kd) {
    int cnt = G->hi - G->lo, passes = channel_levels(G);
    cg_str text = {0}, *b = &text;
    channel_prologue(G, b);
    for (int p = 1; p <= passes; p++) {
        pass_loop(G, p, b);
        pass_results(G, p, b);
    }
    const char *one = G->cx->dl->first_thread;
    cg_grp_stores(G, b, "c", is_r, one);
    cg_grp_stores(G, b, "c", is_e, one);
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
int cg_grp_split_of(const cg_grp *G, int64_t *chunk) {
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
static int reduces_in(const cg_grp *G, int p) {
    for (int m = G->lo; m < G->hi; m++)
        if (role(G, m) == IR_ROLE_REDUCTION && G->level[m - G->lo] == p) return 1;
    return 0;
}

/* The text of kernel k of a split group (k = passes + 1: the merge). When
 * the last pass reduces nothing, its kernel already has every statistic
 * and the first block of each channel makes the per-channel stores. */
static void split_kernel_body(cg_grp *G, int k, int passes, cg_kdef *kd) {
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
            cg_grp_stores(G, b, "c", is_r, first);
            cg_grp_stores(G, b, "c", is_e, first);
        }
    } else {
        cg_grp_stores(G, b, "c", is_r, dl->first_thread);
        cg_grp_stores(G, b, "c", is_e, dl->first_thread);
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

int cg_grp_channel_split(cg_grp *G, const char *name) {
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
