/* codegen/gemm.c — GEMM descriptors: validation, and the lowering of conv
 * and dense (forward and both gradients) to layout kernels plus
 * column-major GEMMs (the descriptor and its validation are the program
 * format's: format/program.c).
 *
 * Row-major data read column-major is transposed, so every product is
 * written as its transpose: a row-major Y[K][Q] = W[K][R] · X[R][Q] is the
 * column-major Yᵀ(Q×K) = Xᵀ(Q×R) · Wᵀ(R×K), where Xᵀ and Wᵀ are exactly the
 * bytes of X and W. Every operand stays in place; only the trans flags say
 * how each is read. Convolutions go through the CNHW scratch layout
 * described in codegen.h.
 */
#include <inttypes.h>
#include <limits.h>
#include <stdio.h>

#include "codegen/internal.h"

/* ---- descriptors ---------------------------------------------------------------- */

int64_t cg_conv_col_elems(const cg_conv_shape *c, int64_t nb) {
    return nb * c->C * c->k * c->k * c->Ho * c->Wo;
}

int64_t cg_conv_scratch_elems(const cg_conv_shape *c, int64_t nb) {
    return cg_conv_col_elems(c, nb) + nb * c->K * c->Ho * c->Wo;
}

int64_t cg_conv_chunk(const cg_conv_shape *c, size_t max_bytes) {
    int64_t per = cg_conv_scratch_elems(c, 1) * (int64_t)sizeof(float);
    int64_t nb = per > 0 ? (int64_t)(max_bytes / (size_t)per) : c->N;
    if (nb < 1) nb = 1;
    if (nb > c->N) nb = c->N;
    return nb;
}

/* One GEMM of alpha 1, no batch, no offsets: what every lowering starts from. */
static cg_gemm gemm_2d(int transa, int transb, int64_t m, int64_t n, int64_t k, float beta,
                       int64_t lda, int64_t ldb, int64_t ldc) {
    return (cg_gemm){.transa = transa,
                     .transb = transb,
                     .m = m,
                     .n = n,
                     .k = k,
                     .alpha = 1,
                     .beta = beta,
                     .lda = lda,
                     .ldb = ldb,
                     .ldc = ldc,
                     .batch = 1};
}

/* Row-major X[r][c] is the column-major (c x r) matrix with ld c; with
 * np = nb*P rows of the CNHW blocks: */
cg_gemm cg_gemm_conv_forward(const cg_conv_shape *c, int64_t nb, int64_t col_off, int64_t out_off) {
    int64_t np = nb * c->Ho * c->Wo, CKK = c->C * c->k * c->k;
    /* out(np x K) = col(np x CKK) · W(CKK x K) */
    cg_gemm g = gemm_2d(0, 0, np, c->K, CKK, 0, np, CKK, np);
    g.off_a = col_off;
    g.off_c = out_off;
    return g;
}

cg_gemm cg_gemm_conv_grad_data(const cg_conv_shape *c, int64_t nb, int64_t dy_off,
                               int64_t col_off) {
    int64_t np = nb * c->Ho * c->Wo, CKK = c->C * c->k * c->k;
    /* col(np x CKK) = dy(np x K) · W(CKK x K)ᵀ */
    cg_gemm g = gemm_2d(0, 1, np, CKK, c->K, 0, np, CKK, np);
    g.off_a = dy_off;
    g.off_c = col_off;
    return g;
}

cg_gemm cg_gemm_conv_grad_weight(const cg_conv_shape *c, int64_t nb, int64_t col_off,
                                 int64_t dy_off, int accumulate) {
    int64_t np = nb * c->Ho * c->Wo, CKK = c->C * c->k * c->k;
    /* dW(CKK x K) (+)= col(np x CKK)ᵀ · dy(np x K) */
    cg_gemm g = gemm_2d(1, 0, CKK, c->K, np, accumulate ? 1.0f : 0.0f, np, np, CKK);
    g.off_a = col_off;
    g.off_b = dy_off;
    return g;
}

cg_gemm cg_gemm_dense(int64_t N, int64_t F, int64_t U) {
    return gemm_2d(1, 0, U, N, F, 0, F, F, U);
}

cg_gemm cg_gemm_dense_grad_data(int64_t N, int64_t F, int64_t U) {
    return gemm_2d(0, 0, F, N, U, 0, F, U, F);
}

cg_gemm cg_gemm_dense_grad_weight(int64_t N, int64_t F, int64_t U) {
    return gemm_2d(0, 1, F, U, N, 0, F, U, F);
}

/* ---- lowering -------------------------------------------------------------------- */

static cg_conv_shape conv_shape(const ir_type *x, const ir_type *y, const int64_t *a) {
    return (cg_conv_shape){.N = x->dim[0],
                           .C = x->dim[1],
                           .H = x->dim[2],
                           .W = x->dim[3],
                           .K = y->dim[1],
                           .k = a[0],
                           .s = a[1],
                           .p = a[2],
                           .Ho = y->dim[2],
                           .Wo = y->dim[3]};
}

/* The shape of a conv, conv_grad_data or conv_grad_weight node: x and y
 * (dy) are whichever of the node and its inputs hold them. */
static cg_conv_shape node_conv_shape(const ir_graph *g, const ir_node *n) {
    const ir_type *x, *y;
    ir_conv_xy(g, n, &x, &y);
    return conv_shape(x, y, n->iattr);
}

/* Mixed precision: a GEMM-backed op whose output or an input is stored in
 * bf16 runs its GEMM on bf16 operands (activations, columns and a bf16 copy
 * of the f32 master weight in the scratch area) with f32 accumulation into
 * an f32 result, which the next kernel rounds once when it stores bf16. */
static int gemm_bf16(const ir_graph *g, const ir_node *n) {
    int bf = n->type.dtype == IR_BF16;
    for (int j = 0; j < n->ninputs; j++) bf |= g->nodes[n->input[j]].type.dtype == IR_BF16;
    return bf;
}

/* Float offsets of bf16 regions in the scratch area start on 256 bytes. */
static int64_t align64(int64_t floats) { return (floats + 63) / 64 * 64; }

/* Whether a conv_grad_weight step can take dy in CNHW from the step before
 * it: the conv_grad_data of the same dy and convolution, each in a single
 * chunk, leaves that block in the scratch area where this step would put
 * it (the columns it writes first lie below it). Saves one layout pass
 * over dy per convolution in the backward pass. */
static int dy_left_by_previous_step(cg_ctx *cx, int node, const cg_conv_shape *c, int64_t nb) {
    const ir_graph *g = cx->g;
    const ir_node *n = &g->nodes[node];
    if (n->op != IR_OP_CONV_GRAD_WEIGHT || nb < c->N || cx->p->nsteps == 0) return 0;
    const cg_step *prev = &cx->p->steps[cx->p->nsteps - 1];
    const ir_node *pn = &g->nodes[prev->node];
    /* a library call or a dense product leaves nothing there; which of
     * the two ran is the runtime's choice */
    if ((n->flags | pn->flags) & (IR_FLAG_CONV_LIB | IR_FLAG_CONV_DENSE)) return 0;
    return prev->op == IR_OP_CONV_GRAD_DATA && ir_conv_groups(pn) == 1 &&
           pn->input[0] == n->input[0] && gemm_bf16(g, pn) == gemm_bf16(g, n) &&
           pn->iattr[0] == n->iattr[0] && pn->iattr[1] == n->iattr[1] &&
           pn->iattr[2] == n->iattr[2] && ir_type_equal(&pn->type, &g->nodes[n->input[1]].type);
}

/* The library call of a node the conv pass marked (IR_FLAG_CONV_LIB):
 * slots output, then the op's inputs in order; w_bf16 >= 0: the weights
 * are read from that float offset of slot in1 (the scratch), as the bf16
 * copy the alternative's GEMMs read too, so a bf16 convolution is bf16
 * throughout (cuDNN's). Returns the call's index; the caller sets its
 * nalt once the alternative's calls follow. */
int cg_library_conv(cg_ctx *cx, int node, int out, int in0, int in1, int64_t w_bf16) {
    const ir_graph *g = cx->g;
    const ir_node *n = &g->nodes[node];
    const ir_node *a = &g->nodes[n->input[0]], *b = &g->nodes[n->input[1]];
    cg_conv_shape c = node_conv_shape(g, n);
    cg_conv d = {.dir = n->op == IR_OP_CONV             ? CG_CONV_FORWARD
                        : n->op == IR_OP_CONV_GRAD_DATA ? CG_CONV_BACKWARD_DATA
                                                        : CG_CONV_BACKWARD_WEIGHTS,
                 .N = c.N,
                 .C = c.C,
                 .H = c.H,
                 .W = c.W,
                 .K = c.K,
                 .kh = c.k,
                 .kw = c.k,
                 .sh = c.s,
                 .sw = c.s,
                 .ph = c.p,
                 .pw = c.p,
                 .Ho = c.Ho,
                 .Wo = c.Wo,
                 .G = ir_conv_groups(n),
                 .tf32 = (n->flags & IR_FLAG_TF32) != 0,
                 .tune = (n->flags & IR_FLAG_CONV_TUNE) != 0,
                 .dense = (n->flags & IR_FLAG_CONV_DENSE) != 0};
    int t0 = (int)a->type.dtype, t1 = (int)b->type.dtype, tn = (int)n->type.dtype;
    d.type_x = d.dir == CG_CONV_FORWARD ? t0 : d.dir == CG_CONV_BACKWARD_DATA ? tn : t1;
    d.type_w = d.dir == CG_CONV_BACKWARD_WEIGHTS ? tn : w_bf16 >= 0 ? IR_BF16 : t1;
    d.type_y = d.dir == CG_CONV_FORWARD ? tn : t0;
    int call = cg_add_conv_call(cx, &d, out, in0, in1);
    if (w_bf16 >= 0) cx->p->calls[call].off[2] = w_bf16;
    return call;
}

/* IR_FLAG_CONV_DENSE: the convolution as a dense layer over its unrolled
 * weights T[K*Ho*Wo][C*H*W] (cg_kernel_conv_unroll), in the scratch area:
 * x and y are NCHW, so an image is a row of each and
 *   forward      y  = x · Tᵀ       (unroll, then the dense GEMM)
 *   grad_data    dx = dy · T       (unroll, then the dense grad_data GEMM)
 *   grad_weight  dT = dyᵀ · x, folded into dw (cg_kernel_conv_fold).
 * Every entry of T is a weight (ir_conv_dense_ok), so the product does
 * the multiply-adds im2col + GEMM does less those on padding, in one GEMM
 * over the whole batch, with no columns to copy. */
static int lower_conv_dense(cg_ctx *cx, int node) {
    const ir_graph *g = cx->g;
    const ir_node *n = &g->nodes[node];
    cg_conv_shape c = node_conv_shape(g, n);
    int64_t CHW = c.C * c.H * c.W, KP = c.K * c.Ho * c.Wo;
    int op = n->op;
    int kt =
        op == IR_OP_CONV_GRAD_WEIGHT ? cg_kernel_conv_fold(cx, &c) : cg_kernel_conv_unroll(cx, &c);
    if (kt < 0) return -1;
    cg_step *s = cg_begin_step(cx, node);
    s->scratch = KP * CHW;
    int in0 = cg_step_slot(cx, n->input[0]), in1 = cg_step_slot(cx, n->input[1]);
    int sc = cg_step_slot(cx, CG_SCRATCH);
    int lib = (n->flags & IR_FLAG_CONV_LIB) ? cg_library_conv(cx, node, 0, in0, in1, -1) : -1;
    cg_gemm d;
    if (op == IR_OP_CONV_GRAD_WEIGHT) { /* in0 = dy, in1 = x */
        d = cg_gemm_dense_grad_weight(c.N, CHW, KP);
        cg_add_gemm_call(cx, &d, in1, in0, sc);
        cg_add_kernel_call(cx, kt, c.K * c.C, 2, (int[]){0, sc}, (int64_t[]){0, 0});
    } else { /* in0 = x (forward) or dy (data gradient), in1 = w */
        cg_add_kernel_call(cx, kt, KP, 2, (int[]){sc, in1}, (int64_t[]){0, 0});
        d = op == IR_OP_CONV ? cg_gemm_dense(c.N, CHW, KP) : cg_gemm_dense_grad_data(c.N, CHW, KP);
        cg_add_gemm_call(cx, &d, sc, in0, 0);
    }
    if (lib >= 0) cx->p->calls[lib].conv.nalt = cx->p->ncalls - lib - 1;
    return 0;
}

/* What every chunk of a conv's lowering shares (lower_conv sets it up). */
typedef struct {
    cg_conv_shape c;
    int op;
    int64_t P, CHW, KP, CKK, nb, blk, ew, wofs;
    int xc, dxc, yc, reuse_dy, cast_w;
    ir_dtype to, tn, t0, t1;
    int out, in0, in1, sc, wslot; /* slots */
} conv_lowering;

/* The images n0 .. n0 + nb - 1 (fewer in the last chunk): im2col or
 * col2im, the layout copy of y or dy, the GEMM. */
static int lower_conv_chunk(cg_ctx *cx, const conv_lowering *L, int64_t n0) {
    const cg_conv_shape c = L->c;
    const int op = L->op, xc = L->xc, dxc = L->dxc, yc = L->yc, cast_w = L->cast_w;
    const int reuse_dy = L->reuse_dy;
    const int64_t P = L->P, CHW = L->CHW, KP = L->KP, CKK = L->CKK, nb = L->nb, blk = L->blk;
    const int64_t ew = L->ew, wofs = L->wofs;
    const ir_dtype to = L->to, tn = L->tn, t0 = L->t0, t1 = L->t1;
    const int out = L->out, in0 = L->in0, in1 = L->in1, sc = L->sc, wslot = L->wslot;
    int64_t cnt = c.N - n0 < nb ? c.N - n0 : nb;
    /* kernels for this chunk size (the last chunk may be smaller) */
    int kcol = op == IR_OP_CONV_GRAD_DATA
                   ? cg_kernel_col2im(cx, &c, cnt, tn, IR_F32, dxc)
                   : cg_kernel_im2col(cx, &c, cnt, to, op == IR_OP_CONV ? t0 : t1, xc);
    /* y or dy between the tensor and the block: NCHW transposes; a
     * channel-major one is used in place (direct) or copied row-wise */
    int64_t NP = c.N * P;
    int direct = yc && (op == IR_OP_CONV ? tn == IR_F32 : t0 == to);
    int klay = 0;
    if (yc && !direct)
        klay = op == IR_OP_CONV ? cg_kernel_cnhw_rows(cx, P, cnt, NP, cnt * P, c.K, tn, IR_F32)
                                : cg_kernel_cnhw_rows(cx, P, cnt, cnt * P, NP, c.K, to, t0);
    else if (!yc)
        klay = op == IR_OP_CONV ? cg_kernel_from_cnhw(cx, c.K, P, cnt, tn, IR_F32)
                                : cg_kernel_to_cnhw(cx, c.K, P, cnt, to, t0);
    if (kcol < 0 || klay < 0) return -1;
    int64_t yoff = yc ? n0 * P : n0 * KP;                 /* the chunk in y or dy */
    int64_t xoff = xc || dxc ? n0 * c.H * c.W : n0 * CHW; /* the chunk in x or dx */
    cg_gemm d;
    switch (op) {
    case IR_OP_CONV: /* in0 = x, in1 = w */
        cg_add_kernel_call(cx, kcol, cnt * CKK, 2, (int[]){sc, in0}, (int64_t[]){0, xoff});
        d = cg_gemm_conv_forward(&c, cnt, 0, blk);
        if (cast_w) d.off_b = ew * wofs;
        d.type_a = d.type_b = to;
        if (direct) d.off_c = yoff, d.ldc = NP;
        cg_add_gemm_call(cx, &d, sc, wslot, direct ? out : sc);
        if (!direct)
            cg_add_kernel_call(cx, klay, cnt * c.K, 2, (int[]){out, sc}, (int64_t[]){yoff, blk});
        break;
    case IR_OP_CONV_GRAD_DATA: /* in0 = dy, in1 = w */
        if (!direct)
            cg_add_kernel_call(cx, klay, cnt * c.K, 2, (int[]){sc, in0}, (int64_t[]){blk, yoff});
        d = cg_gemm_conv_grad_data(&c, cnt, ew * blk, 0);
        if (cast_w) d.off_b = ew * wofs;
        d.type_a = d.type_b = to;
        if (direct) d.off_a = yoff, d.lda = NP;
        cg_add_gemm_call(cx, &d, direct ? in0 : sc, wslot, sc);
        cg_add_kernel_call(cx, kcol, cnt * CHW, 2, (int[]){out, sc}, (int64_t[]){xoff, 0});
        break;
    default: /* conv_grad_weight: in0 = dy, in1 = x */
        cg_add_kernel_call(cx, kcol, cnt * CKK, 2, (int[]){sc, in1}, (int64_t[]){0, xoff});
        if (!reuse_dy && !direct)
            cg_add_kernel_call(cx, klay, cnt * c.K, 2, (int[]){sc, in0}, (int64_t[]){blk, yoff});
        d = cg_gemm_conv_grad_weight(&c, cnt, 0, ew * blk, n0 > 0);
        d.type_a = d.type_b = to;
        d.type_c = tn;
        if (direct) d.off_b = yoff, d.ldb = NP;
        cg_add_gemm_call(cx, &d, sc, direct ? in0 : sc, out);
        break;
    }
    return 0;
}

/* One chunk of images at a time; scratch = columns, then a CNHW block:
 * the step's set-up here, each chunk's kernels and GEMM in
 * lower_conv_chunk. */
static int lower_conv(cg_ctx *cx, int node) {
    const ir_node *n = &cx->g->nodes[node];
    const ir_graph *g = cx->g;
    cg_conv_shape c = node_conv_shape(g, n);
    int op = n->op;
    int64_t P = c.Ho * c.Wo, CHW = c.C * c.H * c.W, KP = c.K * P;
    int64_t CKK = c.C * c.k * c.k; /* im2col runs one iteration per column row */
    int64_t nb = cg_conv_chunk(&c, cx->opt.scratch_max_bytes);
    int64_t blk = cg_conv_col_elems(&c, nb); /* where the CNHW block starts */
    /* Channel-major tensors (IR_FLAG_CNHW, passes/layout.c): im2col reads
     * such an x and col2im writes such a dx directly; the GEMM writes y and
     * reads dy in place (rows N*P apart, the chunk at n0*P) where the
     * types allow, else one row copy converts between it and the block. */
    const ir_node *xn = &g->nodes[op == IR_OP_CONV_GRAD_WEIGHT ? n->input[1] : n->input[0]];
    const ir_node *yn = op == IR_OP_CONV ? n : &g->nodes[n->input[0]];
    int xc = op != IR_OP_CONV_GRAD_DATA && (xn->flags & IR_FLAG_CNHW);
    int dxc = op == IR_OP_CONV_GRAD_DATA && (n->flags & IR_FLAG_CNHW);
    int yc = (yn->flags & IR_FLAG_CNHW) != 0;
    int reuse_dy = !yc && dy_left_by_previous_step(cx, node, &c, nb);
    /* bf16: the GEMM operands (columns, dy's CNHW block, the weight's bf16
     * copy at wofs) are bf16 in the scratch area; their float offsets are
     * where the f32 layout puts them, their GEMM offsets count bf16
     * elements (x2). GEMM results stay f32. */
    int bf = gemm_bf16(g, n);
    ir_dtype to = bf ? IR_BF16 : IR_F32, tn = n->type.dtype;
    ir_dtype t0 = g->nodes[n->input[0]].type.dtype, t1 = g->nodes[n->input[1]].type.dtype;
    int64_t ew = bf ? 2 : 1; /* operand elements per float of scratch */
    int64_t wofs = align64(cg_conv_scratch_elems(&c, nb));
    int cast_w = bf && op != IR_OP_CONV_GRAD_WEIGHT;
    int kcast = cast_w ? cg_kernel_cast(cx, IR_BF16, t1) : 0;
    if (kcast < 0) return -1;
    cg_step *s = cg_begin_step(cx, node);
    s->scratch = cast_w ? wofs + (c.K * CKK + 1) / 2 : cg_conv_scratch_elems(&c, nb);
    int out = 0, in0 = cg_step_slot(cx, n->input[0]), in1 = cg_step_slot(cx, n->input[1]);
    int sc = cg_step_slot(cx, CG_SCRATCH);
    int wslot = in1; /* the weight operand: the parameter, or its bf16 copy */
    if (cast_w) {
        cg_add_kernel_call(cx, kcast, c.K * CKK, 2, (int[]){sc, in1}, (int64_t[]){wofs, 0});
        wslot = sc;
    }
    /* A library convolution next; the lowering below is its alternative. */
    int lib = (n->flags & IR_FLAG_CONV_LIB)
                  ? cg_library_conv(cx, node, out, in0, wslot, cast_w ? wofs : -1)
                  : -1;
    conv_lowering L = {.c = c,
                       .op = op,
                       .P = P,
                       .CHW = CHW,
                       .KP = KP,
                       .CKK = CKK,
                       .nb = nb,
                       .blk = blk,
                       .ew = ew,
                       .wofs = wofs,
                       .xc = xc,
                       .dxc = dxc,
                       .yc = yc,
                       .reuse_dy = reuse_dy,
                       .cast_w = cast_w,
                       .to = to,
                       .tn = tn,
                       .t0 = t0,
                       .t1 = t1,
                       .out = out,
                       .in0 = in0,
                       .in1 = in1,
                       .sc = sc,
                       .wslot = wslot};
    for (int64_t n0 = 0; n0 < c.N; n0 += nb)
        if (lower_conv_chunk(cx, &L, n0)) return -1;
    if (lib >= 0) cx->p->calls[lib].conv.nalt = cx->p->ncalls - lib - 1;
    return 0;
}

/* matmul: the row-major C[M,N] = op(a)·op(b) of each leading index is the
 * column-major Cᵀ = op(b)ᵀ·op(a)ᵀ, one strided batched GEMM whose A is
 * input 1's bytes and B input 0's, as dense's. */
static cg_gemm gemm_matmul(const ir_graph *g, const ir_node *n) {
    const ir_type *a = &g->nodes[n->input[0]].type, *c = &n->type;
    int r = c->ndim, ta = (int)n->iattr[0], tb = (int)n->iattr[1];
    int64_t M = c->dim[r - 2], N = c->dim[r - 1], K = a->dim[r - 1 - ta];
    cg_gemm d = gemm_2d(tb, ta, N, M, K, 0, tb ? K : N, ta ? M : K, N);
    d.batch = ir_numel(c) / (M * N);
    d.stride_a = K * N;
    d.stride_b = M * K;
    d.stride_c = M * N;
    return d;
}

int cg_lower_gemm_op(cg_ctx *cx, int node) {
    const ir_node *n = &cx->g->nodes[node];
    const ir_graph *g = cx->g;
    const ir_type *t0 = &g->nodes[n->input[0]].type, *t1 = &g->nodes[n->input[1]].type;
    cg_gemm d; /* every dense GEMM reads A = input 1, B = input 0 */
    switch (n->op) {
    case IR_OP_CONV:
    case IR_OP_CONV_GRAD_DATA:
    case IR_OP_CONV_GRAD_WEIGHT:
        /* grouped: direct kernels (conv_direct.c), not G small GEMMs */
        return ir_conv_groups(n) > 1           ? cg_lower_conv_direct(cx, node)
               : n->flags & IR_FLAG_CONV_DENSE ? lower_conv_dense(cx, node)
                                               : lower_conv(cx, node);
    /* N: the rows, every axis but the last (the batch at rank 2) */
    case IR_OP_DENSE: /* (x[N,F], w[U,F]) */
        d = cg_gemm_dense(ir_numel(t0) / t1->dim[1], t1->dim[1], t1->dim[0]);
        break;
    case IR_OP_DENSE_GRAD_DATA: /* (dy[N,U], w[U,F]) */
        d = cg_gemm_dense_grad_data(ir_numel(t0) / t1->dim[0], t1->dim[1], t1->dim[0]);
        break;
    case IR_OP_DENSE_GRAD_WEIGHT: /* (dy[N,U], x[N,F]) */
        d = cg_gemm_dense_grad_weight(ir_numel(t0) / n->type.dim[0], n->type.dim[1],
                                      n->type.dim[0]);
        break;
    case IR_OP_MATMUL: d = gemm_matmul(g, n); break;
    default: return cg_fail(cx, "node %d: %s is not a GEMM op", node, ir_ops[n->op].name);
    }
    if (!gemm_bf16(g, n)) {
        cg_begin_step(cx, node);
        int s0 = cg_step_slot(cx, n->input[0]), s1 = cg_step_slot(cx, n->input[1]);
        cg_add_gemm_call(cx, &d, s1, s0, 0);
        return 0;
    }
    /* bf16: A (input 1) and B (input 0) as bf16, an f32 one (the weight,
     * or the image's view) through a bf16 copy in the scratch area; C is
     * the output in its own type. */
    int in[2] = {n->input[1], n->input[0]}, kcast[2] = {0, 0};
    int64_t fofs[2] = {0, 0}, used = 0;
    for (int j = 0; j < 2; j++) {
        ir_dtype t = g->nodes[in[j]].type.dtype;
        if (t == IR_BF16) continue;
        kcast[j] = cg_kernel_cast(cx, IR_BF16, t);
        if (kcast[j] < 0) return -1;
        fofs[j] = used;
        used = align64(used + (ir_numel(&g->nodes[in[j]].type) + 1) / 2);
    }
    cg_step *s = cg_begin_step(cx, node);
    s->scratch = used;
    int slot[2];
    for (int j = 0; j < 2; j++) {
        slot[j] = cg_step_slot(cx, in[j]);
        if (g->nodes[in[j]].type.dtype == IR_BF16) continue;
        int sc = cg_step_slot(cx, CG_SCRATCH);
        cg_add_kernel_call(cx, kcast[j], ir_numel(&g->nodes[in[j]].type), 2, (int[]){sc, slot[j]},
                           (int64_t[]){fofs[j], 0});
        slot[j] = sc;
    }
    d.off_a = 2 * fofs[0];
    d.off_b = 2 * fofs[1];
    d.type_a = d.type_b = IR_BF16;
    d.type_c = n->type.dtype;
    cg_add_gemm_call(cx, &d, slot[0], slot[1], 0);
    return 0;
}
