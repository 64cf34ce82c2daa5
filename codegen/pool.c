/* codegen/pool.c — pooling kernels and their steps: global average
 * pooling, max and average pooling, and their gradients (the scatter per
 * plane, its bf16 form with local sums, and the gathered form GPUs use). */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "codegen/internal.h"

/* y[n][c] = the mean of plane (n, c) of x; a channel-major x holds that
 * plane as plane c*N + n. */
static int k_global_avgpool(cg_ctx *cx, const ir_type *x, const ir_type *y, int cnhw) {
    int64_t inner = cg_inner_of(x);
    ir_dtype tx = x->dtype, ty = y->dtype;
    cg_kdef kd = {
        .op = "global_avgpool", .nargs = 2, .cost = inner, .writes = {1}, .type = {ty, tx}};
    if (cnhw)
        cg_str_printf(&kd.body,
                      "const idx_t plane = i %% %" PRId64 " * %" PRId64 " + i / %" PRId64 ";\n",
                      x->dim[1], x->dim[0], x->dim[1]);
    cg_str_printf(&kd.body,
                  "const %s *row = b1 + %s * %" PRId64 ";\n"
                  "acc_t s = 0;\n"
                  "for (idx_t j = 0; j < %" PRId64 "; j++) s += %srow[j]%s;\n"
                  "b0[i] = %s(float)(s / %" PRId64 ".0)%s;\n",
                  cg_ctype(tx), cnhw ? "plane" : "i", inner, inner, cg_ld(tx), cg_end(tx),
                  cg_st(ty), inner, cg_end(ty));
    return cg_emit_kernel(cx, &kd);
}

/* The first maximum of window (oh, ow) of plane xp, padding never winning:
 * sets `best` to its index in the plane or -1. */
static void window_argmax(cg_str *b, int64_t H, int64_t W, int64_t k, int64_t s, int64_t p,
                          const char *ind, ir_dtype tx) {
    /* The window clipped to the plane once, then a scan without per-tap
     * bounds checks: same taps in the same row-major order as testing each
     * one, so the same (first) maximum wins. The best value rides along in
     * a register (bv == xp[best]) instead of being reloaded per tap. The
     * first tap seeds the scan, so the test per tap is one comparison:
     * `best < 0 || v > bv` made the C compiler branch and ran several
     * times slower; the first maximum, and a leading NaN, win as before. */
    cg_str_printf(
        b,
        "%sidx_t best = -1;\n"
        "%sfloat bv = 0.0f;\n"
        "%s{\n"
        "%s    const idx_t h0 = oh * %" PRId64 " - %" PRId64 ", w0 = ow * %" PRId64 " - %" PRId64
        ";\n"
        "%s    const idx_t kh0 = h0 < 0 ? -h0 : 0, kw0 = w0 < 0 ? -w0 : 0;\n"
        "%s    const idx_t kh1 = h0 + %" PRId64 " > %" PRId64 " ? %" PRId64 " - h0 : %" PRId64 ";\n"
        "%s    const idx_t kw1 = w0 + %" PRId64 " > %" PRId64 " ? %" PRId64 " - w0 : %" PRId64 ";\n"
        "%s    if (kh0 < kh1 && kw0 < kw1) {\n"
        "%s        best = (h0 + kh0) * %" PRId64 " + w0 + kw0;\n"
        "%s        bv = %sxp[best]%s;\n"
        "%s        for (idx_t kh = kh0; kh < kh1; kh++)\n"
        "%s            for (idx_t kw = kw0; kw < kw1; kw++) {\n"
        "%s                const idx_t at = (h0 + kh) * %" PRId64 " + w0 + kw;\n"
        "%s                const float v = %sxp[at]%s;\n"
        "%s                if (v > bv) best = at, bv = v;\n"
        "%s            }\n"
        "%s    }\n"
        "%s}\n",
        ind, ind, ind, ind, s, p, s, p, ind, ind, k, H, H, k, ind, k, W, W, k, ind, ind, W, ind,
        cg_ld(tx), cg_end(tx), ind, ind, ind, W, ind, cg_ld(tx), cg_end(tx), ind, ind, ind, ind);
}

static int k_pool(cg_ctx *cx, int is_max, const ir_type *x, const ir_type *y, int64_t k, int64_t s,
                  int64_t p) {
    int64_t H = x->dim[2], W = x->dim[3], Ho = y->dim[2], Wo = y->dim[3];
    ir_dtype tx = x->dtype, ty = y->dtype;
    cg_kdef kd = {.op = is_max ? "maxpool" : "avgpool",
                  .nargs = 2,
                  .cost = k * k,
                  .writes = {1},
                  .type = {ty, tx}};
    cg_str *b = &kd.body;
    cg_str_printf(b,
                  "const idx_t ow = i %% %" PRId64 ", oh = (i / %" PRId64 ") %% %" PRId64 ";\n"
                  "const %s *xp = b1 + (i / %" PRId64 ") * %" PRId64 ";\n",
                  Wo, Wo, Ho, cg_ctype(tx), Wo * Ho, H * W);
    if (is_max) {
        window_argmax(b, H, W, k, s, p, "", tx);
        cg_str_printf(b, "b0[i] = %sbest < 0 ? DPC_NEG_INF : bv%s;\n", cg_st(ty), cg_end(ty));
    } else {
        cg_str_printf(
            b,
            "acc_t sum = 0;\n"
            "for (idx_t kh = 0; kh < %" PRId64 "; kh++) {\n"
            "    const idx_t ih = oh * %" PRId64 " - %" PRId64 " + kh;\n"
            "    if (ih < 0 || ih >= %" PRId64 ") continue;\n"
            "    for (idx_t kw = 0; kw < %" PRId64 "; kw++) {\n"
            "        const idx_t iw = ow * %" PRId64 " - %" PRId64 " + kw;\n"
            "        if (iw >= 0 && iw < %" PRId64 ") sum += %sxp[ih * %" PRId64 " + iw]%s;\n"
            "    }\n"
            "}\n"
            "b0[i] = %s(float)(sum / %" PRId64 ".0)%s;\n",
            k, s, p, H, k, s, p, W, cg_ld(tx), W, cg_end(tx), cg_st(ty), k * k, cg_end(ty));
    }
    return cg_emit_kernel(cx, &kd);
}

/* max-pool's gradient, one (n, c) plane per iteration: zero the plane of
 * dx, then route each window's dy to the window's first maximum (the
 * forward pass's choice), windows in row-major order. A plane belongs to
 * one iteration, so overlapping windows need no atomics; the work is one
 * window scan per output instead of one per (input, window) pair.
 * b1 = dy, b2 = x, all f32 (with bf16 tensors: the gathered form below). */
static int k_maxpool_grad(cg_ctx *cx, const ir_type *x, const ir_type *dy, int64_t k, int64_t s,
                          int64_t p) {
    int64_t H = x->dim[2], W = x->dim[3], Ho = dy->dim[2], Wo = dy->dim[3];
    cg_kdef kd = {.op = "maxpool_grad", .nargs = 3, .cost = H * W + Ho * Wo * k * k, .writes = {1}};
    cg_str *b = &kd.body;
    cg_str_printf(b,
                  "const float *xp = b2 + i * %" PRId64 ", *dyp = b1 + i * %" PRId64 ";\n"
                  "float *d = b0 + i * %" PRId64 ";\n"
                  "for (idx_t j = 0; j < %" PRId64 "; j++) d[j] = 0.0f;\n"
                  "for (idx_t oh = 0; oh < %" PRId64 "; oh++)\n"
                  "    for (idx_t ow = 0; ow < %" PRId64 "; ow++) {\n",
                  H * W, Ho * Wo, H * W, H * W, Ho, Wo);
    window_argmax(b, H, W, k, s, p, "        ", IR_F32);
    cg_str_printf(b, "        if (best >= 0) d[best] += dyp[oh * %" PRId64 " + ow];\n    }\n", Wo);
    return cg_emit_kernel(cx, &kd);
}

/* Elements of a plane a kernel may sum in a local array (on the stack of a
 * pool thread: 16 MiB). */
enum { MAX_LOCAL_PLANE = 1 << 16 };

/* The scatter with a bf16 tensor among dx, dy, x (C dialect): a plane's
 * sums in a local acc_t array, windows in row-major order — the gathered
 * form's additions in its order, so the same bits — then rounded once.
 * One window scan per output, where the gathered form scans every window
 * of every input element (about four times as many on 3x3, stride 2). */
static int k_maxpool_grad_bf16(cg_ctx *cx, const ir_type *x, const ir_type *dy, ir_dtype tdx,
                               int64_t k, int64_t s, int64_t p) {
    int64_t H = x->dim[2], W = x->dim[3], Ho = dy->dim[2], Wo = dy->dim[3];
    ir_dtype tx = x->dtype, tdy = dy->dtype;
    cg_kdef kd = {.op = "maxpool_grad",
                  .nargs = 3,
                  .cost = H * W + Ho * Wo * k * k,
                  .writes = {1},
                  .type = {tdx, tdy, tx}};
    cg_str *b = &kd.body;
    cg_str_printf(b,
                  "const %s *xp = b2 + i * %" PRId64 ";\n"
                  "const %s *dyp = b1 + i * %" PRId64 ";\n"
                  "acc_t d[%" PRId64 "];\n"
                  "for (idx_t j = 0; j < %" PRId64 "; j++) d[j] = 0;\n"
                  "for (idx_t oh = 0; oh < %" PRId64 "; oh++)\n"
                  "    for (idx_t ow = 0; ow < %" PRId64 "; ow++) {\n",
                  cg_ctype(tx), H * W, cg_ctype(tdy), Ho * Wo, H * W, H * W, Ho, Wo);
    window_argmax(b, H, W, k, s, p, "        ", tx);
    cg_str_printf(b,
                  "        if (best >= 0) d[best] += %sdyp[oh * %" PRId64 " + ow]%s;\n"
                  "    }\n"
                  "for (idx_t j = 0; j < %" PRId64 "; j++) b0[i * %" PRId64
                  " + j] = %s(float)d[j]%s;\n",
                  cg_ld(tdy), Wo, cg_end(tdy), H * W, H * W, cg_st(tdx), cg_end(tdx));
    return cg_emit_kernel(cx, &kd);
}

/* The windows (rows oh0..oh1, columns ow0..ow1 of dy) that contain input
 * element (h, w): oh*s - p <= h <= oh*s - p + k - 1, clipped to the output.
 * Shared by the gathered pool gradients. */
static void pool_windows_of(cg_str *b, int64_t k, int64_t s, int64_t p, int64_t Ho, int64_t Wo) {
    cg_str_printf(
        b,
        "const idx_t lh = h + %" PRId64 ", lw = w + %" PRId64 ";\n"
        "const idx_t oh0 = lh < %" PRId64 " ? 0 : (lh - %" PRId64 " + %" PRId64 ") / %" PRId64 ";\n"
        "const idx_t ow0 = lw < %" PRId64 " ? 0 : (lw - %" PRId64 " + %" PRId64 ") / %" PRId64 ";\n"
        "idx_t oh1 = lh / %" PRId64 ", ow1 = lw / %" PRId64 ";\n"
        "if (oh1 > %" PRId64 ") oh1 = %" PRId64 ";\n"
        "if (ow1 > %" PRId64 ") ow1 = %" PRId64 ";\n",
        p, p, k, k - 1, s - 1, s, k, k - 1, s - 1, s, s, s, Ho - 1, Ho - 1, Wo - 1, Wo - 1);
}

/* max-pool's gradient into bf16, gathered: each dx element sums, in acc_t,
 * the dy of the windows whose first maximum it is (windows in row-major
 * order, the scatter's order), and is rounded once. The scatter above
 * would round after every addition where windows overlap. b1 = dy, b2 = x. */
static int k_maxpool_grad_gather(cg_ctx *cx, const ir_type *x, const ir_type *dy, ir_dtype tdx,
                                 int64_t k, int64_t s, int64_t p) {
    int64_t H = x->dim[2], W = x->dim[3], Ho = dy->dim[2], Wo = dy->dim[3];
    int64_t span = (k + s - 1) / s;
    ir_dtype tx = x->dtype, tdy = dy->dtype;
    cg_kdef kd = {.op = "maxpool_grad",
                  .nargs = 3,
                  .cost = span * span * k * k,
                  .writes = {1},
                  .type = {tdx, tdy, tx}};
    cg_str *b = &kd.body;
    cg_str_printf(b,
                  "const idx_t w = i %% %" PRId64 ", h = (i / %" PRId64 ") %% %" PRId64 ";\n"
                  "const idx_t plane = i / %" PRId64 ";\n"
                  "const %s *xp = b2 + plane * %" PRId64 ";\n"
                  "const %s *dyp = b1 + plane * %" PRId64 ";\n",
                  W, W, H, W * H, cg_ctype(tx), H * W, cg_ctype(tdy), Ho * Wo);
    pool_windows_of(b, k, s, p, Ho, Wo);
    cg_str_printf(b, "acc_t sum = 0;\n"
                     "for (idx_t oh = oh0; oh <= oh1; oh++)\n"
                     "    for (idx_t ow = ow0; ow <= ow1; ow++) {\n");
    window_argmax(b, H, W, k, s, p, "        ", tx);
    cg_str_printf(b,
                  "        if (best == h * %" PRId64 " + w) sum += %sdyp[oh * %" PRId64
                  " + ow]%s;\n"
                  "    }\n"
                  "b0[i] = %s(float)sum%s;\n",
                  W, cg_ld(tdy), Wo, cg_end(tdy), cg_st(tdx), cg_end(tdx));
    return cg_emit_kernel(cx, &kd);
}

/* avg-pool's gradient, gathered: each input element visits the windows
 * that contain it (rows oh with oh*s - p <= h <= oh*s - p + k - 1), so no
 * two iterations write the same element and no atomics are needed.
 * b1 = dy. */
static int k_avgpool_grad(cg_ctx *cx, const ir_type *x, const ir_type *dy, int64_t k, int64_t s,
                          int64_t p) {
    int64_t H = x->dim[2], W = x->dim[3], Ho = dy->dim[2], Wo = dy->dim[3];
    int64_t span = (k + s - 1) / s;
    ir_dtype tdx = x->dtype, tdy = dy->dtype;
    cg_kdef kd = {
        .op = "avgpool_grad", .nargs = 2, .cost = span * span, .writes = {1}, .type = {tdx, tdy}};
    cg_str *b = &kd.body;
    cg_str_printf(b,
                  "const idx_t w = i %% %" PRId64 ", h = (i / %" PRId64 ") %% %" PRId64 ";\n"
                  "const idx_t plane = i / %" PRId64 ";\n"
                  "const %s *dyp = b1 + plane * %" PRId64 ";\n",
                  W, W, H, W * H, cg_ctype(tdy), Ho * Wo);
    pool_windows_of(b, k, s, p, Ho, Wo);
    cg_str_printf(b,
                  "acc_t sum = 0;\n"
                  "for (idx_t oh = oh0; oh <= oh1; oh++)\n"
                  "    for (idx_t ow = ow0; ow <= ow1; ow++) sum += %sdyp[oh * %" PRId64
                  " + ow]%s;\n"
                  "b0[i] = %s(float)(sum / %" PRId64 ".0)%s;\n",
                  cg_ld(tdy), Wo, cg_end(tdy), cg_st(tdx), k * k, cg_end(tdx));
    return cg_emit_kernel(cx, &kd);
}

int cg_render_global_avgpool(cg_ctx *cx, int node) {
    const ir_node *n = &cx->g->nodes[node];
    int cnhw = (cx->g->nodes[n->input[0]].flags & IR_FLAG_CNHW) != 0;
    return cg_simple_step(cx, node, k_global_avgpool(cx, cg_in_type(cx, n, 0), &n->type, cnhw),
                          ir_numel(&n->type));
}

int cg_render_pool(cg_ctx *cx, int node) {
    const ir_node *n = &cx->g->nodes[node];
    const int64_t *a = n->iattr;
    int k;
    switch (n->op) {
    case IR_OP_MAXPOOL:
    case IR_OP_AVGPOOL:
        k = k_pool(cx, n->op == IR_OP_MAXPOOL, cg_in_type(cx, n, 0), &n->type, a[0], a[1], a[2]);
        break;
    case IR_OP_MAXPOOL_GRAD: {
        const ir_type *x = cg_in_type(cx, n, 1);
        const ir_type *dy = cg_in_type(cx, n, 0);
        /* a GPU (one thread per plane would leave it idle), or bf16 on a
         * plane too large to sum locally: the gathered form, one thread per
         * dx element */
        int bf = n->type.dtype == IR_BF16 || x->dtype == IR_BF16 || dy->dtype == IR_BF16;
        if (bf && !cx->dl->gather_pool_grad && x->dim[2] * x->dim[3] <= MAX_LOCAL_PLANE)
            return cg_simple_step(cx, node,
                                  k_maxpool_grad_bf16(cx, x, dy, n->type.dtype, a[0], a[1], a[2]),
                                  x->dim[0] * x->dim[1]);
        if (bf || cx->dl->gather_pool_grad)
            return cg_simple_step(cx, node,
                                  k_maxpool_grad_gather(cx, x, dy, n->type.dtype, a[0], a[1], a[2]),
                                  ir_numel(x));
        k = k_maxpool_grad(cx, x, cg_in_type(cx, n, 0), a[0], a[1], a[2]);
        return cg_simple_step(cx, node, k, x->dim[0] * x->dim[1]);
    }
    default: k = k_avgpool_grad(cx, &n->type, cg_in_type(cx, n, 0), a[0], a[1], a[2]); break;
    }
    return cg_simple_step(cx, node, k, ir_numel(&n->type));
}
