/* codegen/rows.c — the row ops (ir/ir.h): layernorm and its primitives,
 * softmax and its gradient, over the last axis of [R..., C]. layernorm,
 * its statistics and its data gradient, softmax and its gradient run one
 * row per iteration with serial loops over the row's C
 * values; the gamma gradient and sum_leading one column per iteration,
 * serial over the R rows (a fixed order: deterministic). Sums in acc_t.
 * One step each; every operand NCHW (the shape rule takes rank 2 or 3,
 * which the layout pass never makes channel-major). */
#include <inttypes.h>
#include <stdio.h>

#include "codegen/internal.h"

static int64_t row_len(const ir_type *t) { return t->dim[t->ndim - 1]; }

/* "(acc_t)LOAD(bK[at])" into buf, bK of type t. */
static const char *load(char *buf, size_t n, int k, ir_dtype t, const char *at) {
    snprintf(buf, n, "(acc_t)%sb%d[%s]%s", cg_ld(t), k, at, cg_end(t));
    return buf;
}

/* mean and rstd of row i of bK (x of type t), as acc_t locals. */
static void row_stats(cg_ctx *cx, cg_str *b, int k, ir_dtype t, int64_t C, double eps) {
    char x[96], lit[40];
    load(x, sizeof x, k, t, "i * C + j");
    cg_str_printf(b,
                  "const idx_t C = %" PRId64 ";\n"
                  "acc_t s = 0, v = 0;\n"
                  "for (idx_t j = 0; j < C; j++) s += %s;\n"
                  "const acc_t mean = s / C;\n"
                  "for (idx_t j = 0; j < C; j++) v += (%s - mean) * (%s - mean);\n"
                  "const acc_t rstd = 1.0 / sqrt(v / C + %s);\n",
                  C, x, x, x, cg_lit(cx, eps, 1, lit));
}

/* b0 = layernorm(b1 = x, b2 = gamma, b3 = beta) */
static int k_layernorm(cg_ctx *cx, const ir_node *n) {
    const ir_type *x = cg_in_type(cx, n, 0), *ga = cg_in_type(cx, n, 1), *be = cg_in_type(cx, n, 2);
    int64_t C = row_len(x);
    cg_kdef kd = {.op = "layernorm",
                  .nargs = 4,
                  .cost = 8 * C,
                  .writes = {1},
                  .type = {n->type.dtype, x->dtype, ga->dtype, be->dtype}};
    row_stats(cx, &kd.body, 1, x->dtype, C, n->fattr[0]);
    char xv[96], gv[96], bv[96];
    cg_str_printf(&kd.body,
                  "for (idx_t j = 0; j < C; j++)\n"
                  "    b0[i * C + j] = %s(float)((%s - mean) * rstd * %s + %s)%s;\n",
                  cg_st(n->type.dtype), load(xv, sizeof xv, 1, x->dtype, "i * C + j"),
                  load(gv, sizeof gv, 2, ga->dtype, "j"), load(bv, sizeof bv, 3, be->dtype, "j"),
                  cg_end(n->type.dtype));
    return cg_emit_kernel(cx, &kd);
}

/* b0 [R, 2] = (mean, rstd) of each row of b1 */
static int k_layernorm_stats(cg_ctx *cx, const ir_node *n) {
    const ir_type *x = cg_in_type(cx, n, 0);
    int64_t C = row_len(x);
    cg_kdef kd = {.op = "layernorm_stats",
                  .nargs = 2,
                  .cost = 4 * C,
                  .writes = {1},
                  .type = {n->type.dtype, x->dtype}};
    row_stats(cx, &kd.body, 1, x->dtype, C, n->fattr[0]);
    cg_str_printf(&kd.body, "b0[2 * i] = %s(float)mean%s;\nb0[2 * i + 1] = %s(float)rstd%s;\n",
                  cg_st(n->type.dtype), cg_end(n->type.dtype), cg_st(n->type.dtype),
                  cg_end(n->type.dtype));
    return cg_emit_kernel(cx, &kd);
}

/* b0 = layernorm_grad_data(b1 = dy, b2 = x, b3 = stats, b4 = gamma) */
static int k_layernorm_grad_data(cg_ctx *cx, const ir_node *n) {
    const ir_type *dy = cg_in_type(cx, n, 0), *x = cg_in_type(cx, n, 1);
    const ir_type *st = cg_in_type(cx, n, 2), *ga = cg_in_type(cx, n, 3);
    int64_t C = row_len(x);
    cg_kdef kd = {.op = "layernorm_grad_data",
                  .nargs = 5,
                  .cost = 10 * C,
                  .writes = {1},
                  .type = {n->type.dtype, dy->dtype, x->dtype, st->dtype, ga->dtype}};
    char dv[96], xv[96], gv[96], m[96], r[96];
    load(dv, sizeof dv, 1, dy->dtype, "i * C + j");
    load(xv, sizeof xv, 2, x->dtype, "i * C + j");
    load(gv, sizeof gv, 4, ga->dtype, "j");
    cg_str_printf(&kd.body,
                  "const idx_t C = %" PRId64 ";\n"
                  "const acc_t mean = %s, rstd = %s;\n"
                  "acc_t mg = 0, mgx = 0;\n"
                  "for (idx_t j = 0; j < C; j++) {\n"
                  "    const acc_t g = %s * %s, xhat = (%s - mean) * rstd;\n"
                  "    mg += g;\n"
                  "    mgx += g * xhat;\n"
                  "}\n"
                  "mg /= C;\n"
                  "mgx /= C;\n"
                  "for (idx_t j = 0; j < C; j++) {\n"
                  "    const acc_t g = %s * %s, xhat = (%s - mean) * rstd;\n"
                  "    b0[i * C + j] = %s(float)(rstd * (g - mg - xhat * mgx))%s;\n"
                  "}\n",
                  C, load(m, sizeof m, 3, st->dtype, "2 * i"),
                  load(r, sizeof r, 3, st->dtype, "2 * i + 1"), dv, gv, xv, dv, gv, xv,
                  cg_st(n->type.dtype), cg_end(n->type.dtype));
    return cg_emit_kernel(cx, &kd);
}

/* Column i's sum over the R rows: of b1 = dy (sum_leading), or of dy·xhat
 * (layernorm_grad_gamma: b2 = x, b3 = stats). */
static int k_column_sum(cg_ctx *cx, const ir_node *n) {
    int gamma = n->op == IR_OP_LAYERNORM_GRAD_GAMMA;
    const ir_type *dy = cg_in_type(cx, n, 0);
    int64_t C = row_len(dy), R = ir_numel(dy) / C;
    cg_kdef kd = {.op = gamma ? "layernorm_grad_gamma" : "sum_leading",
                  .nargs = gamma ? 4 : 2,
                  .cost = (gamma ? 4 : 1) * R,
                  .writes = {1},
                  .type = {n->type.dtype, dy->dtype}};
    char dv[96], xv[96], m[96], r[96];
    load(dv, sizeof dv, 1, dy->dtype, "r * C + i");
    if (gamma) {
        const ir_type *x = cg_in_type(cx, n, 1), *st = cg_in_type(cx, n, 2);
        kd.type[2] = x->dtype, kd.type[3] = st->dtype;
        cg_str_printf(&kd.body,
                      "const idx_t C = %" PRId64 ";\n"
                      "acc_t s = 0;\n"
                      "for (idx_t r = 0; r < %" PRId64 "; r++)\n"
                      "    s += %s * (%s - %s) * %s;\n",
                      C, R, dv, load(xv, sizeof xv, 2, x->dtype, "r * C + i"),
                      load(m, sizeof m, 3, st->dtype, "2 * r"),
                      load(r, sizeof r, 3, st->dtype, "2 * r + 1"));
    } else {
        cg_str_printf(&kd.body,
                      "const idx_t C = %" PRId64 ";\n"
                      "acc_t s = 0;\n"
                      "for (idx_t r = 0; r < %" PRId64 "; r++) s += %s;\n",
                      C, R, dv);
    }
    cg_str_printf(&kd.body, "b0[i] = %s(float)s%s;\n", cg_st(n->type.dtype), cg_end(n->type.dtype));
    return cg_emit_kernel(cx, &kd);
}

/* b0 = softmax(b1 = x), or softmax_grad(b1 = dy, b2 = y), row i */
static int k_softmax(cg_ctx *cx, const ir_node *n) {
    int grad = n->op == IR_OP_SOFTMAX_GRAD;
    const ir_type *a = cg_in_type(cx, n, 0), *y = grad ? cg_in_type(cx, n, 1) : a;
    int64_t C = row_len(a);
    cg_kdef kd = {.op = grad ? "softmax_grad" : "softmax",
                  .nargs = grad ? 3 : 2,
                  .cost = 6 * C,
                  .writes = {1},
                  .type = {n->type.dtype, a->dtype, y->dtype}};
    char av[96], yv[96];
    load(av, sizeof av, 1, a->dtype, "i * C + j");
    load(yv, sizeof yv, 2, y->dtype, "i * C + j");
    cg_str_printf(&kd.body, "const idx_t C = %" PRId64 ";\n", C);
    if (grad)
        cg_str_printf(&kd.body,
                      "acc_t dot = 0;\n"
                      "for (idx_t j = 0; j < C; j++) dot += %s * %s;\n"
                      "for (idx_t j = 0; j < C; j++)\n"
                      "    b0[i * C + j] = %s(float)(%s * (%s - dot))%s;\n",
                      av, yv, cg_st(n->type.dtype), yv, av, cg_end(n->type.dtype));
    else
        cg_str_printf(&kd.body,
                      "acc_t m = DPC_NEG_INF, s = 0;\n"
                      "for (idx_t j = 0; j < C; j++) m = %s > m ? %s : m;\n"
                      "for (idx_t j = 0; j < C; j++) s += exp(%s - m);\n"
                      "for (idx_t j = 0; j < C; j++)\n"
                      "    b0[i * C + j] = %s(float)(exp(%s - m) / s)%s;\n",
                      av, av, av, cg_st(n->type.dtype), av, cg_end(n->type.dtype));
    return cg_emit_kernel(cx, &kd);
}

int cg_render_rows(cg_ctx *cx, int node) {
    const ir_node *n = &cx->g->nodes[node];
    const ir_type *x = cg_in_type(cx, n, n->op == IR_OP_LAYERNORM_GRAD_DATA);
    int64_t R = ir_numel(x) / row_len(x);
    switch (n->op) {
    case IR_OP_LAYERNORM: return cg_simple_step(cx, node, k_layernorm(cx, n), R);
    case IR_OP_LAYERNORM_STATS: return cg_simple_step(cx, node, k_layernorm_stats(cx, n), R);
    case IR_OP_LAYERNORM_GRAD_DATA:
        return cg_simple_step(cx, node, k_layernorm_grad_data(cx, n), R);
    case IR_OP_SOFTMAX:
    case IR_OP_SOFTMAX_GRAD: return cg_simple_step(cx, node, k_softmax(cx, n), R);
    default: return cg_simple_step(cx, node, k_column_sum(cx, n), row_len(x));
    }
}
