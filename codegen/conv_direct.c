/* codegen/conv_direct.c — grouped convolution (groups > 1) and its two
 * gradients as direct kernels, one output element per iteration, instead
 * of the GEMM lowering of codegen/gemm.c; the step keeps the library call
 * first when the conv pass chose one, the kernel as its alternative. */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "codegen/internal.h"

/* ---- grouped convolution: direct kernels ---------------------------------------
 * conv with groups > 1 (depthwise at groups = channels): a group's GEMM
 * is C/G x k*k deep and K/G wide, G of them per image, each too small
 * for a BLAS call to pay for its setup and the im2col copy. One output
 * element per iteration instead, its window read in place: forward and
 * data gradient sum C/G (or K/G) channels x k*k taps, the weight gradient
 * sums a tap over N x Ho x Wo. Sums in acc_t, in a fixed order, so every
 * dialect and every thread count gives the same bits. Either layout on
 * either side (conv mixes layouts, ir_op_mixes_layout): plane (n, c) of a
 * channel-major [N,C,...] tensor is plane c*N + n. bench/depthwise.c
 * measures this against the G small GEMMs. */
typedef struct {
    int64_t N, C, H, W, K, Ho, Wo, k, s, p, G;
} conv_dims;

/* "n * C + c" or "c * N + n": the plane of (n, c) in a tensor of C channels. */
static const char *plane_of(char *buf, size_t len, int cnhw, const char *n, const char *c,
                            int64_t N, int64_t C) {
    if (cnhw)
        snprintf(buf, len, "(%s * %" PRId64 " + %s)", c, N, n);
    else
        snprintf(buf, len, "(%s * %" PRId64 " + %s)", n, C, c);
    return buf;
}

/* The (n, c) of iteration i's plane r in a tensor of C channels. */
static void split_plane(cg_str *b, int cnhw, const char *c, int64_t N, int64_t C) {
    if (cnhw)
        cg_str_printf(b, "const idx_t n = r %% %" PRId64 ", %s = r / %" PRId64 ";\n", N, c, N);
    else
        cg_str_printf(b, "const idx_t n = r / %" PRId64 ", %s = r %% %" PRId64 ";\n", C, c, C);
}

/* Column w, row h and plane r of iteration i over [planes, H, W]. */
static void split_position(cg_str *b, const char *w, const char *h, int64_t W, int64_t H) {
    cg_str_printf(b,
                  "const idx_t %s = i %% %" PRId64 ", %s = (i / %" PRId64 ") %% %" PRId64
                  ", r = i / %" PRId64 ";\n",
                  w, W, h, W, H, H * W);
}

/* y = conv(x, w): b1 = x, b2 = w. */
static int k_conv_direct(cg_ctx *cx, const conv_dims *d, ir_dtype ty, ir_dtype tx, ir_dtype tw,
                         int yc, int xc) {
    int64_t Cg = d->C / d->G, Kg = d->K / d->G, kk = d->k * d->k;
    cg_kdef kd = {
        .op = "conv_direct", .nargs = 3, .cost = Cg * kk, .writes = {1}, .type = {ty, tx, tw}};
    cg_str *b = &kd.body;
    char xp[96];
    split_position(b, "ow", "oh", d->Wo, d->Ho);
    split_plane(b, yc, "o", d->N, d->K);
    cg_str_printf(b,
                  "const idx_t c0 = o / %" PRId64 " * %" PRId64 ";\n"
                  "const %s *wr = b2 + o * %" PRId64 ";\n"
                  "acc_t acc = 0;\n"
                  "for (idx_t cl = 0; cl < %" PRId64 "; cl++) {\n"
                  "    const %s *xp = b1 + %s * %" PRId64 ";\n"
                  "    for (idx_t kh = 0; kh < %" PRId64 "; kh++) {\n"
                  "        const idx_t ih = oh * %" PRId64 " - %" PRId64 " + kh;\n"
                  "        if (ih < 0 || ih >= %" PRId64 ") continue;\n"
                  "        for (idx_t kw = 0; kw < %" PRId64 "; kw++) {\n"
                  "            const idx_t iw = ow * %" PRId64 " - %" PRId64 " + kw;\n"
                  "            if (iw >= 0 && iw < %" PRId64 ")\n"
                  "                acc += (acc_t)%sxp[ih * %" PRId64
                  " + iw]%s * %swr[(cl * %" PRId64 " + kh) * %" PRId64 " + kw]%s;\n"
                  "        }\n"
                  "    }\n"
                  "}\n"
                  "b0[i] = %s(float)acc%s;\n",
                  Kg, Cg, cg_ctype(tw), Cg * kk, Cg, cg_ctype(tx),
                  plane_of(xp, sizeof xp, xc, "n", "(c0 + cl)", d->N, d->C), d->H * d->W, d->k,
                  d->s, d->p, d->H, d->k, d->s, d->p, d->W, cg_ld(tx), d->W, cg_end(tx), cg_ld(tw),
                  d->k, d->k, cg_end(tw), cg_st(ty), cg_end(ty));
    return cg_emit_kernel(cx, &kd);
}

/* dx = conv_grad_data(dy, w): b1 = dy, b2 = w; the taps of output
 * channels o of x's group whose windows hold (ih, iw). */
static int k_conv_direct_grad_data(cg_ctx *cx, const conv_dims *d, ir_dtype tdx, ir_dtype tdy,
                                   ir_dtype tw, int dxc, int dyc) {
    int64_t Cg = d->C / d->G, Kg = d->K / d->G, kk = d->k * d->k;
    cg_kdef kd = {.op = "conv_direct_grad_data",
                  .nargs = 3,
                  .cost = Kg * kk,
                  .writes = {1},
                  .type = {tdx, tdy, tw}};
    cg_str *b = &kd.body;
    char dp[96];
    split_position(b, "iw", "ih", d->W, d->H);
    split_plane(b, dxc, "c", d->N, d->C);
    cg_str_printf(b,
                  "const idx_t o0 = c / %" PRId64 " * %" PRId64 ", cl = c %% %" PRId64 ";\n"
                  "acc_t acc = 0;\n"
                  "for (idx_t ol = 0; ol < %" PRId64 "; ol++) {\n"
                  "    const idx_t o = o0 + ol;\n"
                  "    const %s *dp = b1 + %s * %" PRId64 ";\n"
                  "    const %s *wr = b2 + (o * %" PRId64 " + cl) * %" PRId64 ";\n"
                  "    for (idx_t kh = 0; kh < %" PRId64 "; kh++) {\n"
                  "        const idx_t th = ih + %" PRId64 " - kh;\n"
                  "        if (th < 0 || th %% %" PRId64 " != 0 || th / %" PRId64 " >= %" PRId64
                  ") continue;\n"
                  "        for (idx_t kw = 0; kw < %" PRId64 "; kw++) {\n"
                  "            const idx_t tw = iw + %" PRId64 " - kw;\n"
                  "            if (tw < 0 || tw %% %" PRId64 " != 0 || tw / %" PRId64 " >= %" PRId64
                  ") continue;\n"
                  "            acc += (acc_t)%sdp[th / %" PRId64 " * %" PRId64 " + tw / %" PRId64
                  "]%s * %swr[kh * %" PRId64 " + kw]%s;\n"
                  "        }\n"
                  "    }\n"
                  "}\n"
                  "b0[i] = %s(float)acc%s;\n",
                  Cg, Kg, Cg, Kg, cg_ctype(tdy), plane_of(dp, sizeof dp, dyc, "n", "o", d->N, d->K),
                  d->Ho * d->Wo, cg_ctype(tw), Cg, kk, d->k, d->p, d->s, d->s, d->Ho, d->k, d->p,
                  d->s, d->s, d->Wo, cg_ld(tdy), d->s, d->Wo, d->s, cg_end(tdy), cg_ld(tw), d->k,
                  cg_end(tw), cg_st(tdx), cg_end(tdx));
    return cg_emit_kernel(cx, &kd);
}

/* dw = conv_grad_weight(dy, x): b1 = dy, b2 = x; one tap (o, cl, kh, kw)
 * per iteration, summed over every image and output position. */
static int k_conv_direct_grad_weight(cg_ctx *cx, const conv_dims *d, ir_dtype tdw, ir_dtype tdy,
                                     ir_dtype tx, int dyc, int xc) {
    int64_t Cg = d->C / d->G, Kg = d->K / d->G;
    cg_kdef kd = {.op = "conv_direct_grad_weight",
                  .nargs = 3,
                  .cost = d->N * d->Ho * d->Wo,
                  .writes = {1},
                  .type = {tdw, tdy, tx}};
    cg_str *b = &kd.body;
    char dp[96], xp[96];
    cg_str_printf(b,
                  "const idx_t kw = i %% %" PRId64 ", kh = (i / %" PRId64 ") %% %" PRId64 ";\n"
                  "const idx_t cl = (i / %" PRId64 ") %% %" PRId64 ", o = i / %" PRId64 ";\n"
                  "const idx_t c = o / %" PRId64 " * %" PRId64 " + cl;\n"
                  "acc_t acc = 0;\n"
                  "for (idx_t n = 0; n < %" PRId64 "; n++) {\n"
                  "    const %s *dp = b1 + %s * %" PRId64 ";\n"
                  "    const %s *xp = b2 + %s * %" PRId64 ";\n"
                  "    for (idx_t oh = 0; oh < %" PRId64 "; oh++) {\n"
                  "        const idx_t ih = oh * %" PRId64 " - %" PRId64 " + kh;\n"
                  "        if (ih < 0 || ih >= %" PRId64 ") continue;\n"
                  "        for (idx_t ow = 0; ow < %" PRId64 "; ow++) {\n"
                  "            const idx_t iw = ow * %" PRId64 " - %" PRId64 " + kw;\n"
                  "            if (iw >= 0 && iw < %" PRId64 ")\n"
                  "                acc += (acc_t)%sdp[oh * %" PRId64 " + ow]%s * %sxp[ih * %" PRId64
                  " + iw]%s;\n"
                  "        }\n"
                  "    }\n"
                  "}\n"
                  "b0[i] = %s(float)acc%s;\n",
                  d->k, d->k, d->k, d->k * d->k, Cg, d->k * d->k * Cg, Kg, Cg, d->N, cg_ctype(tdy),
                  plane_of(dp, sizeof dp, dyc, "n", "o", d->N, d->K), d->Ho * d->Wo, cg_ctype(tx),
                  plane_of(xp, sizeof xp, xc, "n", "c", d->N, d->C), d->H * d->W, d->Ho, d->s, d->p,
                  d->H, d->Wo, d->s, d->p, d->W, cg_ld(tdy), d->Wo, cg_end(tdy), cg_ld(tx), d->W,
                  cg_end(tx), cg_st(tdw), cg_end(tdw));
    return cg_emit_kernel(cx, &kd);
}

/* A grouped convolution's step: its direct kernel, after the library call
 * it is the alternative of when the conv pass marked the node. */
int cg_lower_conv_direct(cg_ctx *cx, int node) {
    const ir_node *n = &cx->g->nodes[node];
    const ir_node *a = &cx->g->nodes[n->input[0]], *b = &cx->g->nodes[n->input[1]];
    /* x, y (dy) and w of the convolution, whichever node holds them */
    const ir_node *x = n->op == IR_OP_CONV ? a : n->op == IR_OP_CONV_GRAD_DATA ? n : b;
    const ir_node *y = n->op == IR_OP_CONV ? n : a;
    const ir_type *xt = &x->type, *yt = &y->type;
    conv_dims d = {xt->dim[0], xt->dim[1],  xt->dim[2],  xt->dim[3],  yt->dim[1],       yt->dim[2],
                   yt->dim[3], n->iattr[0], n->iattr[1], n->iattr[2], ir_conv_groups(n)};
    int xc = (x->flags & IR_FLAG_CNHW) != 0, yc = (y->flags & IR_FLAG_CNHW) != 0;
    ir_dtype t0 = a->type.dtype, t1 = b->type.dtype, tn = n->type.dtype;
    int kernel;
    int64_t count;
    switch (n->op) {
    case IR_OP_CONV:
        kernel = k_conv_direct(cx, &d, tn, t0, t1, yc, xc), count = ir_numel(yt);
        break;
    case IR_OP_CONV_GRAD_DATA:
        kernel = k_conv_direct_grad_data(cx, &d, tn, t0, t1, xc, yc), count = ir_numel(xt);
        break;
    default:
        kernel = k_conv_direct_grad_weight(cx, &d, tn, t0, t1, yc, xc);
        count = ir_numel(&n->type);
        break;
    }
    if (kernel < 0) return -1;
    cg_begin_step(cx, node);
    int in0 = cg_step_slot(cx, n->input[0]), in1 = cg_step_slot(cx, n->input[1]);
    int lib = (n->flags & IR_FLAG_CONV_LIB) ? cg_library_conv(cx, node, 0, in0, in1, -1) : -1;
    cg_add_kernel_call(cx, kernel, count, 3, (int[]){0, in0, in1}, (int64_t[]){0, 0, 0});
    if (lib >= 0) cx->p->calls[lib].conv.nalt = 1;
    return 0;
}
