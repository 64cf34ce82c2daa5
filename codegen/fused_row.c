/* codegen/fused_row.c — the row loop shape of a fusion group
 * (codegen/fused.c): one iteration per sample of softmax cross-entropy,
 * the row's max and log-sum-exp once, then the loss, the [N] members and
 * the gradient row. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "codegen/fused.h"

/* ---- softmax rows ----------------------------------------------------------------------- */

static int not_grad(const cg_grp *G, int m) { return nd(G, m)->op != IR_OP_SOFTMAX_CE_GRAD; }

int cg_grp_body_row(cg_grp *G, cg_kdef *kd) {
    int first = -1;
    for (int m = G->lo; m < G->hi && first < 0; m++)
        if (ir_op_fuse(nd(G, m)->op) == IR_FUSE_ROW) first = m;
    const ir_node *f = nd(G, first);
    int64_t K = G->g->nodes[f->input[0]].type.dim[1];
    int L = cg_grp_arg(G, f->input[0], 0), Y = cg_grp_arg(G, f->input[1], 0);
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
                int a = cg_grp_arg(G, m, 1);
                cg_str_printf(b, "%sb%d[i] = %sbad ? DPC_NAN : (float)(%s)%s;\n", dl->first_thread,
                              a, cg_st(G->arg_type[a]), ly, cg_end(G->arg_type[a]));
            } else {
                cg_str_printf(b, "const float t%d = bad ? DPC_NAN : (float)(%s);\n", m - G->lo, ly);
            }
        } else if (n->op == IR_OP_SOFTMAX_CE_GRAD) {
            cg_str d = {0};
            cg_grp_operand(G, m, 2, 'i', &d);
            int a = cg_grp_arg(G, m, 1);
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
            cg_grp_compute(G, m, b, "");
        }
    }
    if (!lone) cg_grp_stores(G, b, "i", not_grad, G->cx->dl->first_thread);
    kd->cost = 6 * K;
    int grads = 0; /* the max and sum loops (and the mean's), plus one per gradient row written */
    for (int m = G->lo; m < G->hi; m++) grads += nd(G, m)->op == IR_OP_SOFTMAX_CE_GRAD;
    kd->serial = (2 + need_mean + grads) * ((K + kd->block - 1) / kd->block);
    return 0;
}
