/* codegen/seq_loss.c — the sequence loss (ir/ir.h): seq_cross_entropy one
 * sequence per iteration, its positions and each row's log-sum-exp in
 * serial loops, sums in acc_t; seq_ce_grad one row (position) per
 * iteration, which first counts its sequence's kept targets. A fixed
 * order everywhere, so the bits do not depend on threads. */
#include <inttypes.h>
#include <stdio.h>

#include "codegen/internal.h"

/* The count of sequence s's kept targets (b2) and whether one is out of
 * range, as locals cnt and bad. */
static void count_kept(cg_str *b, const char *s, int64_t T, int64_t V, int64_t ignore) {
    cg_str_printf(b,
                  "idx_t cnt = 0;\n"
                  "int bad = 0;\n"
                  "for (idx_t t = 0; t < %" PRId64 "; t++) {\n"
                  "    const int y = b2[%s * %" PRId64 " + t];\n"
                  "    if (y == %" PRId64 ") continue;\n"
                  "    cnt++;\n"
                  "    bad |= y < 0 || y >= %" PRId64 ";\n"
                  "}\n",
                  T, s, T, ignore, V);
}

/* lse of row r of b1 (logits of type t, V per row) as local lse. */
static void row_lse(cg_str *b, const char *r, ir_dtype t, int64_t V) {
    char x[128];
    snprintf(x, sizeof x, "(acc_t)%sb1[%s * %" PRId64 " + j]%s", cg_ld(t), r, V, cg_end(t));
    cg_str_printf(b,
                  "acc_t mx = DPC_NEG_INF, s = 0;\n"
                  "for (idx_t j = 0; j < %" PRId64 "; j++) mx = %s > mx ? %s : mx;\n"
                  "for (idx_t j = 0; j < %" PRId64 "; j++) s += exp(%s - mx);\n"
                  "const acc_t lse = mx + log(s);\n",
                  V, x, x, V, x);
}

/* b0[i] = seq_cross_entropy(b1 = logits, b2 = targets), sequence i. */
static int k_seq_ce(cg_ctx *cx, const ir_node *n) {
    const ir_type *x = cg_in_type(cx, n, 0);
    int64_t T = x->dim[1], V = x->dim[2], ig = n->iattr[0];
    cg_kdef kd = {.op = "seq_cross_entropy",
                  .nargs = 3,
                  .cost = 6 * T * V,
                  .serial = 2 * T * V,
                  .writes = {1},
                  .type = {n->type.dtype, x->dtype, IR_I32}};
    cg_str *b = &kd.body;
    count_kept(b, "i", T, V, ig);
    cg_str_printf(b,
                  "acc_t sum = 0;\n"
                  "for (idx_t t = 0; t < %" PRId64 " && !bad; t++) {\n"
                  "    const idx_t r = i * %" PRId64 " + t;\n"
                  "    const int y = b2[r];\n"
                  "    if (y == %" PRId64 ") continue;\n",
                  T, T, ig);
    row_lse(b, "r", x->dtype, V);
    cg_str_printf(b,
                  "    sum += lse - (acc_t)%sb1[r * %" PRId64 " + y]%s;\n"
                  "}\n"
                  "b0[i] = %s(bad ? DPC_NAN : cnt > 0 ? (float)(sum / (acc_t)cnt) : 0.0f)%s;\n",
                  cg_ld(x->dtype), V, cg_end(x->dtype), cg_st(n->type.dtype),
                  cg_end(n->type.dtype));
    return cg_emit_kernel(cx, &kd);
}

/* b0 = seq_ce_grad(b1 = logits, b2 = targets, b3 = dloss), row i. */
static int k_seq_ce_grad(cg_ctx *cx, const ir_node *n) {
    const ir_type *x = cg_in_type(cx, n, 0), *d = cg_in_type(cx, n, 2);
    int64_t T = x->dim[1], V = x->dim[2], ig = n->iattr[0];
    cg_kdef kd = {.op = "seq_ce_grad",
                  .nargs = 4,
                  .cost = 6 * V + T,
                  .writes = {1},
                  .type = {n->type.dtype, x->dtype, IR_I32, d->dtype}};
    cg_str *b = &kd.body;
    cg_str_printf(b, "const idx_t q = i / %" PRId64 ";\n", T);
    count_kept(b, "q", T, V, ig);
    row_lse(b, "i", x->dtype, V);
    cg_str_printf(
        b,
        "const int y = b2[i];\n"
        "const acc_t dl = y == %" PRId64 " ? 0 : (acc_t)%sb3[q]%s / (acc_t)(cnt > 0 ? cnt : 1);\n"
        "for (idx_t j = 0; j < %" PRId64 "; j++)\n"
        "    b0[i * %" PRId64 " + j] = %s(bad ? DPC_NAN : (float)((exp((acc_t)%sb1[i * %" PRId64
        " + j]%s - lse) - (acc_t)(j == y)) * dl))%s;\n",
        ig, cg_ld(d->dtype), cg_end(d->dtype), V, V, cg_st(n->type.dtype), cg_ld(x->dtype), V,
        cg_end(x->dtype), cg_end(n->type.dtype));
    return cg_emit_kernel(cx, &kd);
}

int cg_render_seq_ce(cg_ctx *cx, int node) {
    const ir_node *n = &cx->g->nodes[node];
    if (n->op == IR_OP_SEQ_CE) return cg_simple_step(cx, node, k_seq_ce(cx, n), n->type.dim[0]);
    return cg_simple_step(cx, node, k_seq_ce_grad(cx, n), n->type.dim[0] * n->type.dim[1]);
}
