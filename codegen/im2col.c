/* codegen/im2col.c — the data movement the GEMM lowering (codegen/gemm.c)
 * and the layout pass need: im2col and its adjoint col2im, the dense
 * lowering's unroll and fold, the NCHW <-> CNHW copies, casts, and the
 * transpose step of passes/layout.c built on them. */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "codegen/internal.h"

/* A row of `len` elements in each iteration of a kernel whose iterations
 * hold `elems` elements: shared by a block of threads (kd->block) when it
 * is at least a warp long, all of it in C; else one thread's. Sets the
 * start and step of a thread's loop over the row. */
static void share_row(const cg_ctx *cx, cg_kdef *kd, int64_t iters, int64_t len, int64_t elems,
                      const char **first, const char **step) {
    *first = "0", *step = "1";
    if (len < cx->dl->warp) return;
    kd->block = cg_coop_block(cx->dl, iters, elems);
    *first = cx->dl->thread_first, *step = cx->dl->thread_step;
}

/* Columns of a chunk of nb images in CNHW order: b0[r][img*P + oh*Wo + ow]
 * = x[img][c][oh*s - p + kh][ow*s - p + kw] with r = (c*k + kh)*k + kw, 0
 * in the padding. One iteration fills the P entries of one (r, img) pair,
 * so the index arithmetic is paid per row, not per element. nb is baked in
 * (a kernel per chunk size) so no division is by a run-time value. The
 * inner loop keeps a constant trip count with a select per element: at the
 * 8x8 to 1x1 planes of a CIFAR network that unrolls and vectorises, where
 * splitting each row into padding and interior runs measured slower. */
int cg_kernel_im2col(cg_ctx *cx, const cg_conv_shape *c, int64_t nb, ir_dtype tc, ir_dtype tx,
                     int cnhw) {
    int64_t P = c->Ho * c->Wo;
    /* plane (img, c) of x: img*C + c, or c*N + img in a channel-major x */
    char plane[64];
    if (cnhw)
        snprintf(plane, sizeof plane, "c * %" PRId64 " + img", c->N);
    else
        snprintf(plane, sizeof plane, "img * %" PRId64 " + c", c->C);
    cg_kdef kd = {.op = "im2col", .nargs = 2, .cost = P, .writes = {1}, .type = {tc, tx}};
    /* the same type is copied as it is (0.0f converts to bf16's +0 bits) */
    const char *ld = tc == tx ? "" : cg_ld(tx), *le = tc == tx ? "" : cg_end(tx);
    const char *st = tc == tx ? "" : cg_st(tc), *se = tc == tx ? "" : cg_end(tc);
    /* an output row at least a warp wide is shared by the block's threads
     * (all of it in C): ow = first, first + step, ... */
    char ow[160];
    const char *first, *step;
    share_row(cx, &kd, c->C * c->k * c->k * nb, c->Wo, P, &first, &step);
    kd.serial = kd.block ? c->Ho * ((c->Wo + kd.block - 1) / kd.block) : P;
    snprintf(ow, sizeof ow, "for (idx_t ow = %s; ow < %" PRId64 "; ow += %s)", first, c->Wo, step);
    cg_str_printf(&kd.body,
                  "const idx_t r = i / %" PRId64 ", img = i - r * %" PRId64 ";\n"
                  "const idx_t kw = r %% %" PRId64 ", kh = (r / %" PRId64 ") %% %" PRId64
                  ", c = r / %" PRId64 ";\n"
                  "const %s *xp = b1 + (%s) * %" PRId64 ";\n"
                  "%s *out = b0 + r * %" PRId64 " + img * %" PRId64 ";\n"
                  "for (idx_t oh = 0; oh < %" PRId64 "; oh++) {\n"
                  "    const idx_t ih = oh * %" PRId64 " - %" PRId64 " + kh;\n"
                  "    %s *o = out + oh * %" PRId64 ";\n"
                  "    if (ih < 0 || ih >= %" PRId64 ") {\n"
                  "        %s o[ow] = 0.0f;\n"
                  "        continue;\n"
                  "    }\n"
                  "    const %s *row = xp + ih * %" PRId64 ";\n"
                  "    %s {\n"
                  "        const idx_t iw = ow * %" PRId64 " - %" PRId64 " + kw;\n"
                  "        o[ow] = %siw >= 0 && iw < %" PRId64 " ? %srow[iw]%s : 0.0f%s;\n"
                  "    }\n"
                  "}\n",
                  nb, nb, c->k, c->k, c->k, c->k * c->k, cg_ctype(tx), plane, c->H * c->W,
                  cg_ctype(tc), nb * P, P, c->Ho, c->s, c->p, cg_ctype(tc), c->Wo, c->H, ow,
                  cg_ctype(tx), c->W, ow, c->s, c->p, st, c->W, ld, le, se);
    return cg_emit_kernel(cx, &kd);
}

/* T[(k, oh, ow)][(c, h, w)] = w[k][c][h - oh*s + p][w - ow*s + p]: the
 * row (k, oh, ow), C*H*W entries, per iteration (shared by a block of
 * threads on a GPU), each from the one k x k filter of its c, shifted
 * (every tap index is in range: ir_conv_dense_ok). */
int cg_kernel_conv_unroll(cg_ctx *cx, const cg_conv_shape *c) {
    int64_t P = c->Ho * c->Wo, HW = c->H * c->W, CHW = c->C * HW, kk = c->k * c->k;
    cg_kdef kd = {
        .op = "conv_unroll", .nargs = 2, .cost = CHW, .writes = {1}, .type = {IR_F32, IR_F32}};
    const char *first, *step;
    share_row(cx, &kd, c->K * P, CHW, CHW, &first, &step);
    kd.serial = kd.block ? (CHW + kd.block - 1) / kd.block : CHW;
    cg_str_printf(&kd.body,
                  "const idx_t q = i %% %" PRId64 ", k = i / %" PRId64 ";\n"
                  "const idx_t oh = q / %" PRId64 ", ow = q %% %" PRId64 ";\n"
                  "const float *f = b1 + k * %" PRId64 " + (%" PRId64 " - oh * %" PRId64
                  ") * %" PRId64 " + %" PRId64 " - ow * %" PRId64 ";\n"
                  "float *t = b0 + i * %" PRId64 ";\n"
                  "for (idx_t j = %s; j < %" PRId64 "; j += %s) {\n"
                  "    const idx_t ch = j / %" PRId64 ", hw = j %% %" PRId64 ";\n"
                  "    t[j] = f[ch * %" PRId64 " + hw / %" PRId64 " * %" PRId64 " + hw %% %" PRId64
                  "];\n"
                  "}\n",
                  P, P, c->Wo, c->Wo, c->C * kk, c->p, c->s, c->k, c->p, c->s, CHW, first, CHW,
                  step, HW, HW, kk, c->W, c->k, c->W);
    return cg_emit_kernel(cx, &kd);
}

/* dw[k][c] from dT, one filter per iteration: each output pixel's H*W
 * entries go to distinct taps, summed in double in the order of the
 * output pixels (a tap no pixel reaches stays 0). */
int cg_kernel_conv_fold(cg_ctx *cx, const cg_conv_shape *c) {
    int64_t P = c->Ho * c->Wo, HW = c->H * c->W, kk = c->k * c->k;
    cg_kdef kd = {
        .op = "conv_fold", .nargs = 2, .cost = P * HW + kk, .writes = {1}, .type = {IR_F32, IR_F32}};
    cg_str_printf(
        &kd.body,
        "const idx_t ch = i %% %" PRId64 ", k = i / %" PRId64 ";\n"
        "acc_t acc[%" PRId64 "];\n"
        "for (idx_t t = 0; t < %" PRId64 "; t++) acc[t] = 0;\n"
        "for (idx_t q = 0; q < %" PRId64 "; q++) {\n"
        "    const idx_t oh = q / %" PRId64 ", ow = q %% %" PRId64 ";\n"
        "    const float *d = b1 + ((k * %" PRId64 " + q) * %" PRId64 " + ch) * %" PRId64 ";\n"
        "    for (idx_t h = 0; h < %" PRId64 "; h++)\n"
        "        for (idx_t w = 0; w < %" PRId64 "; w++)\n"
        "            acc[(h - oh * %" PRId64 " + %" PRId64 ") * %" PRId64 " + w - ow * %" PRId64
        " + %" PRId64 "] += d[h * %" PRId64 " + w];\n"
        "}\n"
        "for (idx_t t = 0; t < %" PRId64 "; t++) b0[i * %" PRId64 " + t] = (float)acc[t];\n",
        c->C, c->C, kk, kk, P, c->Wo, c->Wo, P, c->C, HW, c->H, c->W, c->s, c->p, c->k, c->s, c->p,
        c->W, kk, kk);
    return cg_emit_kernel(cx, &kd);
}

/* The adjoint of im2col, gathered: b0 = dx of a chunk of nb images (NCHW),
 * b1 = its CNHW columns. Each dx element sums, in double, the column
 * entries im2col copied it to, so no two iterations write one element.
 * (Scattering each column row into a plane of dx measured slower at these
 * plane sizes.) */
int cg_kernel_col2im(cg_ctx *cx, const cg_conv_shape *c, int64_t nb, ir_dtype tdx, ir_dtype tc,
                     int cnhw) {
    int64_t P = c->Ho * c->Wo, CHW = c->C * c->H * c->W, np = nb * P, HW = c->H * c->W;
    int64_t span = (c->k + c->s - 1) / c->s;
    cg_kdef kd = {
        .op = "col2im", .nargs = 2, .cost = 2 * span * span, .writes = {1}, .type = {tdx, tc}};
    /* i runs over the chunk's dx elements in dx's layout: (img, c, h, w),
     * or (c, img, h, w) for a channel-major dx, whose rows are N*H*W long */
    if (cnhw)
        cg_str_printf(&kd.body,
                      "const idx_t w = i %% %" PRId64 ", h = (i / %" PRId64 ") %% %" PRId64 ";\n"
                      "const idx_t img = (i / %" PRId64 ") %% %" PRId64 ", c = i / %" PRId64 ";\n"
                      "const idx_t at = c * %" PRId64 " + i %% %" PRId64 ";\n",
                      c->W, c->W, c->H, HW, nb, nb * HW, c->N * HW, nb * HW);
    else
        cg_str_printf(&kd.body,
                      "const idx_t w = i %% %" PRId64 ", h = (i / %" PRId64 ") %% %" PRId64 ";\n"
                      "const idx_t c = (i / %" PRId64 ") %% %" PRId64 ", img = i / %" PRId64 ";\n",
                      c->W, c->W, c->H, c->W * c->H, c->C, CHW);
    cg_str_printf(&kd.body,
                  "const %s *col = b1 + c * %" PRId64 " + img * %" PRId64 ";\n"
                  "acc_t sum = 0;\n"
                  "for (idx_t kh = 0; kh < %" PRId64 "; kh++) {\n"
                  "    const idx_t th = h + %" PRId64 " - kh;\n"
                  "    if (th < 0 || th %% %" PRId64 " != 0 || th / %" PRId64 " >= %" PRId64
                  ") continue;\n"
                  "    for (idx_t kw = 0; kw < %" PRId64 "; kw++) {\n"
                  "        const idx_t tw = w + %" PRId64 " - kw;\n"
                  "        if (tw < 0 || tw %% %" PRId64 " != 0 || tw / %" PRId64 " >= %" PRId64
                  ") continue;\n"
                  "        sum += %scol[(kh * %" PRId64 " + kw) * %" PRId64 " + (th / %" PRId64
                  ") * %" PRId64 " + tw / %" PRId64 "]%s;\n"
                  "    }\n"
                  "}\n"
                  "b0[%s] = %s(float)sum%s;\n",
                  cg_ctype(tc), c->k * c->k * np, P, c->k, c->p, c->s, c->s, c->Ho, c->k, c->p,
                  c->s, c->s, c->Wo, cg_ld(tc), c->k, np, c->s, c->Wo, c->s, cg_end(tc),
                  cnhw ? "at" : "i", cg_st(tdx), cg_end(tdx));
    return cg_emit_kernel(cx, &kd);
}

/* dst[q] = src[q] for q in [0, P), converted when the element types
 * differ. A row at least a warp long is shared by a block of threads
 * (the cooperative skeleton: all of it in C, a coalesced slice each on a
 * GPU); a shorter one is one thread's. Sets kd's block and serial. */
static void copy_line(cg_ctx *cx, cg_kdef *kd, ir_dtype dst, ir_dtype src, int64_t rows,
                      int64_t P) {
    const char *first, *step;
    share_row(cx, kd, rows, P, P, &first, &step);
    kd->serial = kd->block ? (P + kd->block - 1) / kd->block : P;
    cg_str_printf(&kd->body,
                  "for (idx_t q = %s; q < %" PRId64 "; q += %s) dst[q] = %s%ssrc[q]%s%s;\n", first,
                  P, step, dst == src ? "" : cg_st(dst), dst == src ? "" : cg_ld(src),
                  dst == src ? "" : cg_end(src), dst == src ? "" : cg_end(dst));
}

/* b0[k][img*P + q] = b1[img][k][q] for a chunk of nb images: one (k, img)
 * row of P contiguous floats per iteration. */
int cg_kernel_to_cnhw(cg_ctx *cx, int64_t K, int64_t P, int64_t nb, ir_dtype td, ir_dtype ts) {
    cg_kdef kd = {.op = "to_cnhw", .nargs = 2, .cost = P, .writes = {1}, .type = {td, ts}};
    cg_str_printf(&kd.body,
                  "const idx_t k = i / %" PRId64 ", img = i - k * %" PRId64 ";\n"
                  "const %s *src = b1 + (img * %" PRId64 " + k) * %" PRId64 ";\n"
                  "%s *dst = b0 + k * %" PRId64 " + img * %" PRId64 ";\n",
                  nb, nb, cg_ctype(ts), K, P, cg_ctype(td), nb * P, P);
    copy_line(cx, &kd, td, ts, K * nb, P);
    return cg_emit_kernel(cx, &kd);
}

/* b0[img][k][q] = b1[k][img*P + q]: back to NCHW, one (img, k) row per
 * iteration. */
int cg_kernel_from_cnhw(cg_ctx *cx, int64_t K, int64_t P, int64_t nb, ir_dtype td, ir_dtype ts) {
    cg_kdef kd = {.op = "from_cnhw", .nargs = 2, .cost = P, .writes = {1}, .type = {td, ts}};
    cg_str_printf(&kd.body,
                  "const idx_t img = i / %" PRId64 ", k = i - img * %" PRId64 ";\n"
                  "const %s *src = b1 + k * %" PRId64 " + img * %" PRId64 ";\n"
                  "%s *dst = b0 + i * %" PRId64 ";\n",
                  K, K, cg_ctype(ts), nb * P, P, cg_ctype(td), P);
    copy_line(cx, &kd, td, ts, K * nb, P);
    return cg_emit_kernel(cx, &kd);
}

/* b0[k*ds + img*P + q] = b1[k*ss + img*P + q]: a chunk of nb images of a
 * channel-major tensor between the scratch area's CNHW block (rows nb*P
 * apart) and the tensor (rows N*P apart), converted when the types
 * differ. One (k, img) row of P per iteration: count = K*nb. */
int cg_kernel_cnhw_rows(cg_ctx *cx, int64_t P, int64_t nb, int64_t ds, int64_t ss, int64_t K,
                        ir_dtype td, ir_dtype ts) {
    cg_kdef kd = {.op = "cnhw_rows", .nargs = 2, .cost = P, .writes = {1}, .type = {td, ts}};
    cg_str_printf(&kd.body,
                  "const idx_t k = i / %" PRId64 ", img = i - k * %" PRId64 ";\n"
                  "const %s *src = b1 + k * %" PRId64 " + img * %" PRId64 ";\n"
                  "%s *dst = b0 + k * %" PRId64 " + img * %" PRId64 ";\n",
                  nb, nb, cg_ctype(ts), ss, P, cg_ctype(td), ds, P);
    copy_line(cx, &kd, td, ts, K * nb, P);
    return cg_emit_kernel(cx, &kd);
}

int cg_kernel_cast(cg_ctx *cx, ir_dtype to, ir_dtype from) {
    cg_kdef kd = {.op = "cast", .nargs = 2, .cost = 1, .writes = {1}, .type = {to, from}};
    cg_str_printf(&kd.body, "b0[i] = %s%sb1[i]%s%s;\n", cg_st(to), cg_ld(from), cg_end(from),
                  cg_end(to));
    return cg_emit_kernel(cx, &kd);
}

/* transpose (passes/layout.c): the whole tensor as one chunk of the
 * layout kernels the conv lowering uses, NCHW <-> CNHW. */
int cg_render_transpose(cg_ctx *cx, int node) {
    const ir_node *n = &cx->g->nodes[node];
    const ir_type *x = cg_in_type(cx, n, 0);
    int64_t N = x->dim[0], C = x->dim[1], P = x->dim[2] * x->dim[3];
    int k = n->flags & IR_FLAG_CNHW ? cg_kernel_to_cnhw(cx, C, P, N, n->type.dtype, x->dtype)
                                    : cg_kernel_from_cnhw(cx, C, P, N, n->type.dtype, x->dtype);
    return cg_simple_step(cx, node, k, N * C);
}
