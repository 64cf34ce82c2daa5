/* codegen/shape.c — kernels that move elements of row-major tensors
 * without arithmetic: permute, slice and its gradient, concat off the
 * channel axis, and the masks. One output element per iteration
 * (stores contiguous), but a permute that moves the last axis goes by
 * tiles through shared memory; each op is one step. */
#include <inttypes.h>
#include <stdio.h>

#include "codegen/internal.h"

#define NEG_INF \
    "DPC_"      \
    "NEG_INF" /* the dialects' -inf (a macro, not a variable) */

/* "const idx_t o, c, j" of element i of t split at axis as [outer, A, inner]. */
static void decode_axis(cg_str *b, const ir_type *t, int axis) {
    int64_t inner = 1;
    for (int d = axis + 1; d < t->ndim; d++) inner *= t->dim[d];
    cg_str_printf(b,
                  "const idx_t j = i %% %" PRId64 ", q = i / %" PRId64 ";\n"
                  "const idx_t c = q %% %" PRId64 ", o = q / %" PRId64 ";\n",
                  inner, inner, t->dim[axis], t->dim[axis]);
}

/* The index of (o, c + shift, j) in t split at axis. */
static void index_axis(char *buf, size_t len, const ir_type *t, int axis, int64_t shift) {
    int64_t inner = 1;
    for (int d = axis + 1; d < t->ndim; d++) inner *= t->dim[d];
    snprintf(buf, len, "(o * %" PRId64 " + c %c %" PRId64 ") * %" PRId64 " + j", t->dim[axis],
             shift < 0 ? '-' : '+', shift < 0 ? -shift : shift, inner);
}

/* y = concat(b1, ..., bK) along axis: each element from the input whose
 * range of the axis holds it. */
static int k_concat_axis(cg_ctx *cx, const ir_node *n) {
    const ir_type *y = &n->type;
    int axis = (int)n->iattr[0];
    cg_kdef kd = {.op = "concat_axis", .nargs = n->ninputs + 1, .cost = 1, .writes = {1}};
    kd.type[0] = y->dtype;
    decode_axis(&kd.body, y, axis);
    cg_str_printf(&kd.body, "float v;\n");
    int64_t off = 0;
    char at[160];
    for (int k = 0; k < n->ninputs; k++) {
        const ir_type *t = cg_in_type(cx, n, k);
        kd.type[k + 1] = t->dtype;
        index_axis(at, sizeof at, t, axis, -off);
        off += t->dim[axis];
        if (k < n->ninputs - 1)
            cg_str_printf(&kd.body, "%sif (c < %" PRId64 ") v = %sb%d[%s]%s;\n", k ? "else " : "",
                          off, cg_ld(t->dtype), k + 1, at, cg_end(t->dtype));
        else
            cg_str_printf(&kd.body, "else v = %sb%d[%s]%s;\n", cg_ld(t->dtype), k + 1, at,
                          cg_end(t->dtype));
    }
    cg_str_printf(&kd.body, "b0[i] = %sv%s;\n", cg_st(y->dtype), cg_end(y->dtype));
    return cg_emit_kernel(cx, &kd);
}

/* slice: y (o, c, j) = x (o, start + c, j). slice_grad: y (o, c, j) =
 * dy (o, c - start, j) inside [start, start + len), else 0. */
static int k_slice(cg_ctx *cx, const ir_type *x, const ir_node *n) {
    const ir_type *y = &n->type;
    int axis = (int)n->iattr[0], grad = n->op == IR_OP_SLICE_GRAD;
    int64_t start = n->iattr[1];
    cg_kdef kd = {.op = grad ? "slice_grad" : "slice",
                  .nargs = 2,
                  .cost = 1,
                  .writes = {1},
                  .type = {y->dtype, x->dtype}};
    decode_axis(&kd.body, y, axis);
    char at[160];
    index_axis(at, sizeof at, x, axis, grad ? -start : start);
    if (grad)
        cg_str_printf(&kd.body,
                      "b0[i] = %sc >= %" PRId64 " && c < %" PRId64 " ? %sb1[%s]%s : 0.0f%s;\n",
                      cg_st(y->dtype), start, start + x->dim[axis], cg_ld(x->dtype), at,
                      cg_end(x->dtype), cg_end(y->dtype));
    else
        cg_str_printf(&kd.body, "b0[i] = %s%sb1[%s]%s%s;\n", cg_st(y->dtype), cg_ld(x->dtype), at,
                      cg_end(x->dtype), cg_end(y->dtype));
    return cg_emit_kernel(cx, &kd);
}

/* A permute that moves x's last axis (to output axis m) and brings input
 * axis a last: 32 x 32 tiles of the (a, last) plane through a tile in
 * shared memory, so both the loads (along x's last axis) and the stores
 * (along y's) are contiguous; in C the same blocked copy on one thread.
 * One tile per iteration, the other output axes and the tile position
 * decoded from i. The tile is padded to 33 columns (no bank conflicts). */
static int permute_tiled(cg_ctx *cx, int node, const ir_type *x) {
    const ir_node *n = &cx->g->nodes[node];
    const ir_type *y = &n->type;
    const cg_dialect_desc *dl = cx->dl;
    int r = x->ndim, m = 0, a = (int)n->iattr[r - 1];
    while (n->iattr[m] != r - 1) m++;
    int64_t si[IR_MAX_DIMS], so[IR_MAX_DIMS], s = 1, t = 1, X = y->dim[m], Y = y->dim[r - 1];
    for (int d = r - 1; d >= 0; d--) si[d] = s, s *= x->dim[d], so[d] = t, t *= y->dim[d];
    int64_t tx = (X + 31) / 32, ty = (Y + 31) / 32, rest = ir_numel(y) / (X * Y);
    cg_kdef kd = {.op = "permute_tiled",
                  .nargs = 2,
                  .cost = 2 * 1024,
                  .writes = {1},
                  .type = {y->dtype, x->dtype},
                  .block = cg_coop_block(dl, rest * tx * ty, 1024)};
    cg_str *b = &kd.body;
    cg_str_printf(b,
                  "idx_t q = i / %" PRId64 ", ib = 0, ob = 0;\n"
                  "const idx_t by = i %% %" PRId64 ", bx = q %% %" PRId64 ";\n"
                  "q /= %" PRId64 ";\n",
                  ty, ty, tx, tx);
    for (int k = r - 2; k >= 0; k--) /* the other output axes, each once */
        if (k != m)
            cg_str_printf(b,
                          "ib += q %% %" PRId64 " * %" PRId64 ", ob += q %% %" PRId64 " * %" PRId64
                          ";\n"
                          "q /= %" PRId64 ";\n",
                          y->dim[k], si[n->iattr[k]], y->dim[k], so[k], y->dim[k]);
    cg_str_printf(b, dl->tile_decl, "tile", 32 * 33);
    cg_str_printf(b,
                  "for (int t = %s; t < 1024; t += %s) {\n"
                  "const idx_t xi = bx * 32 + t %% 32, yi = by * 32 + t / 32;\n"
                  "if (xi < %" PRId64 " && yi < %" PRId64 ") tile[t / 32 * 33 + t %% 32] = "
                  "%sb1[ib + yi * %" PRId64 " + xi]%s;\n"
                  "}\n%s",
                  dl->thread_first, dl->thread_step, X, Y, cg_ld(x->dtype), si[a], cg_end(x->dtype),
                  dl->barrier);
    cg_str_printf(b,
                  "for (int t = %s; t < 1024; t += %s) {\n"
                  "const idx_t yo = by * 32 + t %% 32, xo = bx * 32 + t / 32;\n"
                  "if (xo < %" PRId64 " && yo < %" PRId64 ") b0[ob + xo * %" PRId64 " + yo] = "
                  "%stile[t %% 32 * 33 + t / 32]%s;\n"
                  "}\n%s",
                  dl->thread_first, dl->thread_step, X, Y, so[m], cg_st(y->dtype), cg_end(y->dtype),
                  dl->barrier);
    return cg_simple_step(cx, node, cg_emit_kernel(cx, &kd), rest * tx * ty);
}

/* y = x with its axes permuted: the output element's index decoded axis
 * by axis (last first), each coordinate times its input axis's stride. */
static int k_permute(cg_ctx *cx, const ir_type *x, const ir_node *n) {
    const ir_type *y = &n->type;
    int r = x->ndim;
    int64_t stride[IR_MAX_DIMS], s = 1;
    for (int d = r - 1; d >= 0; d--) stride[d] = s, s *= x->dim[d];
    cg_kdef kd = {
        .op = "permute", .nargs = 2, .cost = r, .writes = {1}, .type = {y->dtype, x->dtype}};
    cg_str_printf(&kd.body, "idx_t q = i, src = 0;\n");
    for (int k = r - 1; k > 0; k--)
        cg_str_printf(&kd.body,
                      "src += q %% %" PRId64 " * %" PRId64 ";\n"
                      "q /= %" PRId64 ";\n",
                      y->dim[k], stride[n->iattr[k]], y->dim[k]);
    cg_str_printf(&kd.body, "src += q * %" PRId64 ";\n", stride[n->iattr[0]]);
    cg_str_printf(&kd.body, "b0[i] = %s%sb1[src]%s%s;\n", cg_st(y->dtype), cg_ld(x->dtype),
                  cg_end(x->dtype), cg_end(y->dtype));
    return cg_emit_kernel(cx, &kd);
}

/* Key j > query q + (Tk - Tq): -inf (the forward), 0 (its gradient). */
static int k_causal_mask(cg_ctx *cx, const ir_type *x, const ir_node *n) {
    const ir_type *y = &n->type;
    int64_t tq = y->dim[y->ndim - 2], tk = y->dim[y->ndim - 1];
    cg_kdef kd = {
        .op = "causal_mask", .nargs = 2, .cost = 1, .writes = {1}, .type = {y->dtype, x->dtype}};
    cg_str_printf(&kd.body,
                  "const idx_t j = i %% %" PRId64 ", q = i / %" PRId64 " %% %" PRId64 ";\n"
                  "b0[i] = %sj <= q + %" PRId64 " ? %sb1[i]%s : %s%s;\n",
                  tk, tk, tq, cg_st(y->dtype), tk - tq, cg_ld(x->dtype), cg_end(x->dtype),
                  n->iattr[0] ? "0.0f" : NEG_INF, cg_end(y->dtype));
    return cg_emit_kernel(cx, &kd);
}

/* Key j of sample n whose id (b2 [N, Tk]) is the padding id: -inf (the
 * forward), 0 (its gradient). */
static int k_pad_mask(cg_ctx *cx, const ir_type *x, const ir_node *n) {
    const ir_type *y = &n->type;
    int64_t tk = y->dim[y->ndim - 1], per = ir_numel(y) / y->dim[0];
    cg_kdef kd = {.op = "pad_mask",
                  .nargs = 3,
                  .cost = 1,
                  .writes = {1},
                  .type = {y->dtype, x->dtype, IR_I32}};
    cg_str_printf(&kd.body,
                  "const idx_t id = b2[i / %" PRId64 " * %" PRId64 " + i %% %" PRId64 "];\n"
                  "b0[i] = %sid != %" PRId64 " ? %sb1[i]%s : %s%s;\n",
                  per, tk, tk, cg_st(y->dtype), n->iattr[0], cg_ld(x->dtype), cg_end(x->dtype),
                  n->iattr[1] ? "0.0f" : NEG_INF, cg_end(y->dtype));
    return cg_emit_kernel(cx, &kd);
}

int cg_render_shape(cg_ctx *cx, int node) {
    const ir_node *n = &cx->g->nodes[node];
    const ir_type *x = cg_in_type(cx, n, 0);
    if (n->op == IR_OP_PERMUTE && n->iattr[x->ndim - 1] != x->ndim - 1)
        return permute_tiled(cx, node, x); /* the last axis moves */
    int k = n->op == IR_OP_CONCAT        ? k_concat_axis(cx, n)
            : n->op == IR_OP_PERMUTE     ? k_permute(cx, x, n)
            : n->op == IR_OP_CAUSAL_MASK ? k_causal_mask(cx, x, n)
            : n->op == IR_OP_PAD_MASK    ? k_pad_mask(cx, x, n)
                                         : k_slice(cx, x, n);
    return cg_simple_step(cx, node, k, ir_numel(&n->type));
}
