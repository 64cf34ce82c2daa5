/* codegen/channel.c — kernels that address an [N, C, inner] tensor by
 * (n, c, j) in either layout: concat and its gradient's channel slices,
 * mul_channel's per-plane dot product (plane_dot), and dropout (whose mask
 * is keyed by the NCHW index whatever the layout). One step each. Also
 * embedding's gather and its gradient's scatter, which address rows. */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "codegen/internal.h"

/* y[n][c] = the sum over plane (n, c) of dy * x (mul_channel's gradient
 * for its factor); both inputs in one layout (ir_verify), a channel-major
 * pair holding the plane as plane c*N + n. */
static int k_plane_dot(cg_ctx *cx, const ir_type *x, const ir_type *dy, const ir_type *y,
                       int cnhw) {
    int64_t inner = cg_inner_of(x);
    ir_dtype tx = x->dtype, td = dy->dtype, ty = y->dtype;
    cg_kdef kd = {
        .op = "plane_dot", .nargs = 3, .cost = 2 * inner, .writes = {1}, .type = {ty, td, tx}};
    if (cnhw)
        cg_str_printf(&kd.body,
                      "const idx_t plane = i %% %" PRId64 " * %" PRId64 " + i / %" PRId64 ";\n",
                      x->dim[1], x->dim[0], x->dim[1]);
    const char *at = cnhw ? "plane" : "i";
    cg_str_printf(&kd.body,
                  "const %s *dr = b1 + %s * %" PRId64 ";\n"
                  "const %s *xr = b2 + %s * %" PRId64 ";\n"
                  "acc_t s = 0;\n"
                  "for (idx_t j = 0; j < %" PRId64 "; j++) s += (acc_t)%sdr[j]%s * %sxr[j]%s;\n"
                  "b0[i] = %s(float)s%s;\n",
                  cg_ctype(td), at, inner, cg_ctype(tx), at, inner, inner, cg_ld(td), cg_end(td),
                  cg_ld(tx), cg_end(tx), cg_st(ty), cg_end(ty));
    return cg_emit_kernel(cx, &kd);
}

/* ---- concat and its gradient's slices ------------------------------------------
 * Element i of an [N, C, inner] tensor is (n, c, j): NCHW i = (n*C + c)*inner
 * + j, channel-major (CNHW) i = (c*N + n)*inner + j; every input of a concat
 * and its output share one layout (ir_verify). */

/* "const idx_t n, c, j" of element i of an [N, C, inner] tensor. */
static void decode_nc(cg_str *b, int cnhw, int64_t N, int64_t C, int64_t inner) {
    cg_str_printf(b, "const idx_t j = i %% %" PRId64 ", q = i / %" PRId64 ";\n", inner, inner);
    if (cnhw)
        cg_str_printf(b, "const idx_t c = q / %" PRId64 ", n = q %% %" PRId64 ";\n", N, N);
    else
        cg_str_printf(b, "const idx_t n = q / %" PRId64 ", c = q %% %" PRId64 ";\n", C, C);
}

/* The index of (n, c + shift, j) in an [N, C, inner] tensor. */
static void index_nc(char *buf, size_t len, int cnhw, int64_t N, int64_t C, int64_t inner,
                     int64_t shift) {
    char ch[48];
    snprintf(ch, sizeof ch, "c %c %" PRId64, shift < 0 ? '-' : '+', shift < 0 ? -shift : shift);
    if (cnhw)
        snprintf(buf, len, "((%s) * %" PRId64 " + n) * %" PRId64 " + j", ch, N, inner);
    else
        snprintf(buf, len, "(n * %" PRId64 " + %s) * %" PRId64 " + j", C, ch, inner);
}

/* y = concat(b1, ..., bK) along the channels: each element from the input
 * whose channel range holds it. */
static int k_concat(cg_ctx *cx, const ir_graph *g, const ir_node *n) {
    const ir_type *y = &n->type;
    int cnhw = (n->flags & IR_FLAG_CNHW) != 0;
    int64_t N = y->dim[0], inner = cg_inner_of(y);
    cg_kdef kd = {.op = "concat", .nargs = n->ninputs + 1, .cost = 1, .writes = {1}};
    kd.type[0] = y->dtype;
    cg_str *b = &kd.body;
    decode_nc(b, cnhw, N, y->dim[1], inner);
    cg_str_printf(b, "float v;\n");
    int64_t off = 0;
    char at[160];
    for (int k = 0; k < n->ninputs; k++) {
        const ir_type *t = &g->nodes[n->input[k]].type;
        kd.type[k + 1] = t->dtype;
        index_nc(at, sizeof at, cnhw, N, t->dim[1], inner, -off);
        off += t->dim[1];
        if (k < n->ninputs - 1)
            cg_str_printf(b, "%sif (c < %" PRId64 ") v = %sb%d[%s]%s;\n", k ? "else " : "", off,
                          cg_ld(t->dtype), k + 1, at, cg_end(t->dtype));
        else
            cg_str_printf(b, "else v = %sb%d[%s]%s;\n", cg_ld(t->dtype), k + 1, at,
                          cg_end(t->dtype));
    }
    cg_str_printf(b, "b0[i] = %sv%s;\n", cg_st(y->dtype), cg_end(y->dtype));
    return cg_emit_kernel(cx, &kd);
}

/* y = channels [off, off + C_y) of x. */
static int k_channel_slice(cg_ctx *cx, const ir_type *x, const ir_node *n) {
    const ir_type *y = &n->type;
    int cnhw = (n->flags & IR_FLAG_CNHW) != 0;
    int64_t N = y->dim[0], inner = cg_inner_of(y);
    cg_kdef kd = {
        .op = "channel_slice", .nargs = 2, .cost = 1, .writes = {1}, .type = {y->dtype, x->dtype}};
    decode_nc(&kd.body, cnhw, N, y->dim[1], inner);
    char at[160];
    index_nc(at, sizeof at, cnhw, N, x->dim[1], inner, n->iattr[0]);
    cg_str_printf(&kd.body, "b0[i] = %s%sb1[%s]%s%s;\n", cg_st(y->dtype), cg_ld(x->dtype), at,
                  cg_end(x->dtype), cg_end(y->dtype));
    return cg_emit_kernel(cx, &kd);
}

/* dropout (ir.h): x/(1-p) where ir_dropout_hash(key, salt, e) keeps element
 * e, its NCHW index (a channel-major tensor's element is mapped back, so
 * the mask does not depend on the layout), else 0. b1 = x, b2 = the key's
 * four 16-bit chunks. The hash is ir.h's, spelled out in unsigned 64-bit
 * arithmetic that C and CUDA compute alike. */
static int k_dropout(cg_ctx *cx, const ir_type *x, const ir_node *n) {
    const ir_type *y = &n->type;
    int cnhw = (n->flags & IR_FLAG_CNHW) != 0;
    cg_kdef kd = {
        .op = "dropout", .nargs = 3, .cost = 4, .writes = {1}, .type = {y->dtype, x->dtype, IR_F32}};
    cg_str *b = &kd.body;
    if (cnhw && y->ndim > 1) {
        int64_t C = y->dim[1], inner = cg_inner_of(y);
        decode_nc(b, 1, y->dim[0], C, inner);
        cg_str_printf(b, "const idx_t e = (n * %" PRId64 " + c) * %" PRId64 " + j;\n", C, inner);
    } else {
        cg_str_printf(b, "const idx_t e = i;\n");
    }
    char lit[40];
    double p = n->fattr[0];
    cg_str_printf(
        b,
        "unsigned long long z = 0;\n"
        "for (int t = 0; t < 4; t++) z |= ((unsigned long long)(long long)b2[t] & 0xffffull) << "
        "(16 * t);\n"
        "z ^= %lluull;\n"
        "z += (unsigned long long)e * 0x9e3779b97f4a7c15ull;\n"
        "z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;\n"
        "z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;\n"
        "z ^= z >> 31;\n"
        "b0[i] = %s(z >> 40) >= %lluull ? %sb1[i]%s * %s : 0.0f%s;\n",
        (unsigned long long)((uint64_t)n->iattr[0] * 0xd1b54a32d192ed03ull), cg_st(y->dtype),
        (unsigned long long)ir_dropout_threshold(p), cg_ld(x->dtype), cg_end(x->dtype),
        cg_lit(cx, 1.0 / (1.0 - p), 0, lit), cg_end(y->dtype));
    return cg_emit_kernel(cx, &kd);
}

int cg_render_concat(cg_ctx *cx, int node) {
    const ir_node *n = &cx->g->nodes[node];
    if (n->iattr[0] != 1) return cg_render_shape(cx, node); /* row-major, any axis */
    return cg_simple_step(cx, node, k_concat(cx, cx->g, n), ir_numel(&n->type));
}

int cg_render_channel_slice(cg_ctx *cx, int node) {
    const ir_node *n = &cx->g->nodes[node];
    return cg_simple_step(cx, node, k_channel_slice(cx, cg_in_type(cx, n, 0), n),
                          ir_numel(&n->type));
}

int cg_render_dropout(cg_ctx *cx, int node) {
    const ir_node *n = &cx->g->nodes[node];
    return cg_simple_step(cx, node, k_dropout(cx, cg_in_type(cx, n, 0), n), ir_numel(&n->type));
}

int cg_render_plane_dot(cg_ctx *cx, int node) {
    const ir_node *n = &cx->g->nodes[node];
    int cnhw = (cx->g->nodes[n->input[0]].flags & IR_FLAG_CNHW) != 0;
    return cg_simple_step(
        cx, node, k_plane_dot(cx, cg_in_type(cx, n, 1), cg_in_type(cx, n, 0), &n->type, cnhw),
        ir_numel(&n->type));
}

/* The clamped id of row r of ids (b at arg k): ir.h's rule. */
static void clamped_id(cg_str *b, int k, const char *r, int64_t vocab) {
    cg_str_printf(b,
                  "idx_t id = (idx_t)b%d[%s];\n"
                  "id = id < 0 ? 0 : id >= %" PRId64 " ? %" PRId64 " : id;\n",
                  k, r, vocab, vocab - 1);
}

/* y[r, d] = w[ids[r], d]: one element per iteration. b1 = ids, b2 = w. */
static int k_embedding(cg_ctx *cx, const ir_type *w, const ir_node *n) {
    const ir_type *y = &n->type;
    int64_t D = w->dim[1];
    cg_kdef kd = {.op = "embedding",
                  .nargs = 3,
                  .cost = 2,
                  .writes = {1},
                  .type = {y->dtype, IR_I32, w->dtype}};
    cg_str_printf(&kd.body, "const idx_t r = i / %" PRId64 ", d = i %% %" PRId64 ";\n", D, D);
    clamped_id(&kd.body, 1, "r", w->dim[0]);
    cg_str_printf(&kd.body, "b0[i] = %s%sb2[id * %" PRId64 " + d]%s%s;\n", cg_st(y->dtype),
                  cg_ld(w->dtype), D, cg_end(w->dtype), cg_end(y->dtype));
    return cg_emit_kernel(cx, &kd);
}

/* dw row v (iteration v) = the sum of the dy rows whose id is v, added in
 * ids order: each row has one owner, so the bits do not depend on how the
 * rows are split over threads. b1 = dy, b2 = ids. A scan of every id per
 * row: fine for a byte or character vocabulary; a sorted pass is the way
 * to a large one. */
static int k_embedding_grad(cg_ctx *cx, const ir_type *dy, const ir_type *ids, const ir_node *n) {
    int64_t V = n->type.dim[0], D = n->type.dim[1], rows = ir_numel(ids);
    cg_kdef kd = {.op = "embedding_grad",
                  .nargs = 3,
                  .cost = rows + rows * D / V,
                  .serial = rows,
                  .writes = {1},
                  .type = {n->type.dtype, dy->dtype, IR_I32}};
    cg_str *b = &kd.body;
    cg_str_printf(b,
                  "for (idx_t d = 0; d < %" PRId64 "; d++) b0[i * %" PRId64 " + d] = 0.0f;\n"
                  "for (idx_t r = 0; r < %" PRId64 "; r++) {\n",
                  D, D, rows);
    clamped_id(b, 2, "r", V);
    cg_str_printf(b,
                  "if (id != i) continue;\n"
                  "for (idx_t d = 0; d < %" PRId64 "; d++) b0[i * %" PRId64
                  " + d] += %sb1[r * %" PRId64 " + d]%s;\n"
                  "}\n",
                  D, D, cg_ld(dy->dtype), D, cg_end(dy->dtype));
    return cg_emit_kernel(cx, &kd);
}

int cg_render_embedding(cg_ctx *cx, int node) {
    const ir_node *n = &cx->g->nodes[node];
    return cg_simple_step(cx, node, k_embedding(cx, cg_in_type(cx, n, 1), n), ir_numel(&n->type));
}

int cg_render_embedding_grad(cg_ctx *cx, int node) {
    const ir_node *n = &cx->g->nodes[node];
    return cg_simple_step(cx, node,
                          k_embedding_grad(cx, cg_in_type(cx, n, 0), cg_in_type(cx, n, 1), n),
                          n->type.dim[0]);
}

/* y[n, t, d] = w[t, d]: one element per iteration. b1 = x (the shape
 * only), b2 = w. */
static int k_positions(cg_ctx *cx, const ir_type *x, const ir_type *w, const ir_node *n) {
    const ir_type *y = &n->type;
    cg_kdef kd = {.op = "positions",
                  .nargs = 3,
                  .cost = 2,
                  .writes = {1},
                  .type = {y->dtype, x->dtype, w->dtype}};
    cg_str_printf(&kd.body, "(void)b1;\nb0[i] = %s%sb2[i %% %" PRId64 "]%s%s;\n", cg_st(y->dtype),
                  cg_ld(w->dtype), y->dim[1] * y->dim[2], cg_end(w->dtype), cg_end(y->dtype));
    return cg_emit_kernel(cx, &kd);
}

/* dw[t, d] (iteration t·D + d) = the sum over n of dy[n, t, d], n in
 * order: one owner per element, the same bits at any thread count; rows
 * t >= T are 0. Sums in acc_t, as sum_leading's. b1 = dy. */
static int k_positions_grad(cg_ctx *cx, const ir_type *dy, const ir_node *n) {
    int64_t N = dy->dim[0], TD = dy->dim[1] * dy->dim[2];
    cg_kdef kd = {.op = "positions_grad",
                  .nargs = 2,
                  .cost = N,
                  .serial = N,
                  .writes = {1},
                  .type = {n->type.dtype, dy->dtype}};
    cg_str_printf(&kd.body,
                  "acc_t s = 0;\n"
                  "if (i < %" PRId64 ")\n"
                  "    for (idx_t r = 0; r < %" PRId64 "; r++) s += %sb1[r * %" PRId64 " + i]%s;\n"
                  "b0[i] = %s(float)s%s;\n",
                  TD, N, cg_ld(dy->dtype), TD, cg_end(dy->dtype), cg_st(n->type.dtype),
                  cg_end(n->type.dtype));
    return cg_emit_kernel(cx, &kd);
}

int cg_render_positions(cg_ctx *cx, int node) {
    const ir_node *n = &cx->g->nodes[node];
    int k = n->op == IR_OP_POSITIONS
                ? k_positions(cx, cg_in_type(cx, n, 0), cg_in_type(cx, n, 1), n)
                : k_positions_grad(cx, cg_in_type(cx, n, 0), n);
    return cg_simple_step(cx, node, k, ir_numel(&n->type));
}
