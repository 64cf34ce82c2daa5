/* codegen/gemm.c — GEMM descriptors: validation, and the lowering of conv
 * and dense (forward and both gradients) to im2col/col2im kernels plus
 * column-major GEMMs.
 *
 * NCHW row-major data read column-major is transposed, so every product is
 * written as its transpose: a row-major Y[K][P] = W[K][CKK] · col[CKK][P] is
 * the column-major Yᵀ(P×K) = colᵀ(P×CKK) · Wᵀ(CKK×K), where colᵀ and Wᵀ are
 * exactly the bytes of col and W. That keeps every operand in place with no
 * transposition kernels; only the trans flags say how each is read.
 */
#include <inttypes.h>
#include <limits.h>
#include <stdio.h>

#include "codegen/internal.h"

/* ---- validation -------------------------------------------------------------- */

static int mul_ok(int64_t a, int64_t b, int64_t *out) { return !__builtin_mul_overflow(a, b, out); }
static int add_ok(int64_t a, int64_t b, int64_t *out) { return !__builtin_add_overflow(a, b, out); }

/* One past the last element an operand of rows x cols (stored with leading
 * dimension ld, batch entries stride apart from off) touches; -1 on overflow. */
static int64_t extent(int64_t off, int64_t batch, int64_t stride, int64_t rows, int64_t cols,
                      int64_t ld) {
    int64_t a, b, e;
    if (!mul_ok(batch - 1, stride, &a) || !mul_ok(cols - 1, ld, &b) || !add_ok(off, a, &e) ||
        !add_ok(e, b, &e) || !add_ok(e, rows, &e))
        return -1;
    return e;
}

static int vfail(char *err, size_t errlen, const char *what, int64_t got, int64_t want) {
    snprintf(err, errlen, "gemm: %s is %" PRId64 ", needs %" PRId64, what, got, want);
    return -1;
}

int cg_gemm_validate(const cg_gemm *d, int64_t size_a, int64_t size_b, int64_t size_c,
                     char *err, size_t errlen) {
    if (d->m < 1 || d->n < 1 || d->k < 1 || d->batch < 1) {
        snprintf(err, errlen, "gemm: m, n, k, batch must be >= 1 (got %" PRId64 ", %" PRId64
                              ", %" PRId64 ", %" PRId64 ")", d->m, d->n, d->k, d->batch);
        return -1;
    }
    if (d->m > INT_MAX || d->n > INT_MAX || d->k > INT_MAX || d->lda > INT_MAX ||
        d->ldb > INT_MAX || d->ldc > INT_MAX || d->batch > INT_MAX) {
        snprintf(err, errlen, "gemm: a size does not fit a BLAS int");
        return -1;
    }
    if (d->stride_a < 0 || d->stride_b < 0 || d->stride_c < 0 || d->off_a < 0 || d->off_b < 0 ||
        d->off_c < 0) {
        snprintf(err, errlen, "gemm: negative stride or offset");
        return -1;
    }
    int64_t ra = d->transa ? d->k : d->m, ca = d->transa ? d->m : d->k;
    int64_t rb = d->transb ? d->n : d->k, cb = d->transb ? d->k : d->n;
    if (d->lda < ra) return vfail(err, errlen, "lda", d->lda, ra);
    if (d->ldb < rb) return vfail(err, errlen, "ldb", d->ldb, rb);
    if (d->ldc < d->m) return vfail(err, errlen, "ldc", d->ldc, d->m);
    /* Batch entries of C must not overlap: they are written concurrently. */
    int64_t c_span = extent(0, 1, 0, d->m, d->n, d->ldc);
    if (d->batch > 1 && d->stride_c < c_span)
        return vfail(err, errlen, "stride_c of a batched gemm", d->stride_c, c_span);
    int64_t ea = extent(d->off_a, d->batch, d->stride_a, ra, ca, d->lda);
    int64_t eb = extent(d->off_b, d->batch, d->stride_b, rb, cb, d->ldb);
    int64_t ec = extent(d->off_c, d->batch, d->stride_c, d->m, d->n, d->ldc);
    if (ea < 0 || eb < 0 || ec < 0) {
        snprintf(err, errlen, "gemm: extents overflow");
        return -1;
    }
    if (ea > size_a) return vfail(err, errlen, "A's buffer (elements)", size_a, ea);
    if (eb > size_b) return vfail(err, errlen, "B's buffer (elements)", size_b, eb);
    if (ec > size_c) return vfail(err, errlen, "C's buffer (elements)", size_c, ec);
    return 0;
}

/* ---- descriptors ---------------------------------------------------------------- */

int64_t cg_conv_col_elems(const cg_conv_shape *c, int64_t nb) {
    return nb * c->C * c->k * c->k * c->Ho * c->Wo;
}

int64_t cg_conv_chunk(const cg_conv_shape *c, size_t max_bytes) {
    int64_t per = cg_conv_col_elems(c, 1) * (int64_t)sizeof(float);
    int64_t nb = per > 0 ? (int64_t)(max_bytes / (size_t)per) : c->N;
    if (nb < 1) nb = 1;
    if (nb > c->N) nb = c->N;
    return nb;
}

int cg_conv_is_pointwise(const cg_conv_shape *c) { return c->k == 1 && c->s == 1 && c->p == 0; }

cg_gemm cg_gemm_conv_forward(const cg_conv_shape *c, int64_t nb, int64_t a_off, int64_t c_off) {
    int64_t P = c->Ho * c->Wo, CKK = c->C * c->k * c->k;
    return (cg_gemm){.m = P, .n = c->K, .k = CKK, .alpha = 1, .beta = 0,
                     .lda = P, .ldb = CKK, .ldc = P,
                     .batch = nb, .stride_a = CKK * P, .stride_b = 0, .stride_c = c->K * P,
                     .off_a = a_off, .off_c = c_off};
}

cg_gemm cg_gemm_conv_grad_data(const cg_conv_shape *c, int64_t nb, int64_t a_off, int64_t c_off) {
    int64_t P = c->Ho * c->Wo, CKK = c->C * c->k * c->k;
    return (cg_gemm){.transb = 1, .m = P, .n = CKK, .k = c->K, .alpha = 1, .beta = 0,
                     .lda = P, .ldb = CKK, .ldc = P,
                     .batch = nb, .stride_a = c->K * P, .stride_b = 0, .stride_c = CKK * P,
                     .off_a = a_off, .off_c = c_off};
}

cg_gemm cg_gemm_conv_grad_weight(const cg_conv_shape *c, int64_t a_off, int64_t b_off,
                                 int accumulate) {
    int64_t P = c->Ho * c->Wo, CKK = c->C * c->k * c->k;
    return (cg_gemm){.transa = 1, .m = CKK, .n = c->K, .k = P, .alpha = 1,
                     .beta = accumulate ? 1.0f : 0.0f, .lda = P, .ldb = P, .ldc = CKK,
                     .batch = 1, .off_a = a_off, .off_b = b_off};
}

cg_gemm cg_gemm_dense(int64_t N, int64_t F, int64_t U) {
    return (cg_gemm){.transa = 1, .m = U, .n = N, .k = F, .alpha = 1, .beta = 0,
                     .lda = F, .ldb = F, .ldc = U, .batch = 1};
}

cg_gemm cg_gemm_dense_grad_data(int64_t N, int64_t F, int64_t U) {
    return (cg_gemm){.m = F, .n = N, .k = U, .alpha = 1, .beta = 0,
                     .lda = F, .ldb = U, .ldc = F, .batch = 1};
}

cg_gemm cg_gemm_dense_grad_weight(int64_t N, int64_t F, int64_t U) {
    return (cg_gemm){.transb = 1, .m = F, .n = U, .k = N, .alpha = 1, .beta = 0,
                     .lda = F, .ldb = U, .ldc = F, .batch = 1};
}

/* ---- lowering -------------------------------------------------------------------- */

static cg_conv_shape conv_shape(const ir_type *x, const ir_type *y, const int64_t *a) {
    return (cg_conv_shape){.N = x->dim[0], .C = x->dim[1], .H = x->dim[2], .W = x->dim[3],
                           .K = y->dim[1], .k = a[0], .s = a[1], .p = a[2],
                           .Ho = y->dim[2], .Wo = y->dim[3]};
}

static int lower_conv(cg_ctx *cx, int node) {
    const ir_node *n = &cx->g->nodes[node];
    const ir_graph *g = cx->g;
    cg_conv_shape c;
    int op = n->op;
    if (op == IR_OP_CONV)
        c = conv_shape(&g->nodes[n->input[0]].type, &n->type, n->iattr);
    else if (op == IR_OP_CONV_GRAD_DATA)
        c = conv_shape(&n->type, &g->nodes[n->input[0]].type, n->iattr);
    else
        c = conv_shape(&g->nodes[n->input[1]].type, &g->nodes[n->input[0]].type, n->iattr);
    int64_t P = c.Ho * c.Wo, CHW = c.C * c.H * c.W, KP = c.K * P;
    int64_t col1 = cg_conv_col_elems(&c, 1);
    int pointwise = cg_conv_is_pointwise(&c);
    int kcol = -1;
    if (!pointwise) {
        kcol = op == IR_OP_CONV_GRAD_DATA ? cg_kernel_col2im(cx, &c) : cg_kernel_im2col(cx, &c);
        if (kcol < 0) return -1;
    }
    cg_step *s = cg_begin_step(cx, node);
    int out = 0, in0 = cg_step_slot(cx, n->input[0]), in1 = cg_step_slot(cx, n->input[1]);
    int sc = pointwise ? -1 : cg_step_slot(cx, CG_SCRATCH);
    int64_t nb = pointwise ? c.N : cg_conv_chunk(&c, cx->opt.scratch_max_bytes);
    if (!pointwise) s->scratch = cg_conv_col_elems(&c, nb);
    for (int64_t n0 = 0; n0 < c.N; n0 += nb) {
        int64_t cnt = c.N - n0 < nb ? c.N - n0 : nb;
        cg_gemm d;
        switch (op) {
        case IR_OP_CONV: /* in0 = x, in1 = w */
            if (pointwise) {
                d = cg_gemm_conv_forward(&c, cnt, n0 * CHW, n0 * KP);
                cg_add_gemm_call(cx, &d, in0, in1, out);
                break;
            }
            cg_add_kernel_call(cx, kcol, cnt * col1, 2, (int[]){sc, in0}, (int64_t[]){0, n0 * CHW});
            d = cg_gemm_conv_forward(&c, cnt, 0, n0 * KP);
            cg_add_gemm_call(cx, &d, sc, in1, out);
            break;
        case IR_OP_CONV_GRAD_DATA: /* in0 = dy, in1 = w */
            if (pointwise) {
                d = cg_gemm_conv_grad_data(&c, cnt, n0 * KP, n0 * CHW);
                cg_add_gemm_call(cx, &d, in0, in1, out);
                break;
            }
            d = cg_gemm_conv_grad_data(&c, cnt, n0 * KP, 0);
            cg_add_gemm_call(cx, &d, in0, in1, sc);
            cg_add_kernel_call(cx, kcol, cnt * CHW, 2, (int[]){out, sc}, (int64_t[]){n0 * CHW, 0});
            break;
        default: /* conv_grad_weight: in0 = dy, in1 = x; images summed in order */
            if (!pointwise)
                cg_add_kernel_call(cx, kcol, cnt * col1, 2, (int[]){sc, in1},
                                   (int64_t[]){0, n0 * CHW});
            for (int64_t j = 0; j < cnt; j++) {
                int64_t img = n0 + j;
                d = pointwise ? cg_gemm_conv_grad_weight(&c, img * CHW, img * KP, img > 0)
                              : cg_gemm_conv_grad_weight(&c, j * col1, img * KP, img > 0);
                cg_add_gemm_call(cx, &d, pointwise ? in1 : sc, in0, out);
            }
            break;
        }
    }
    return 0;
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
        return lower_conv(cx, node);
    case IR_OP_DENSE: /* (x[N,F], w[U,F]) */
        d = cg_gemm_dense(t0->dim[0], t0->dim[1], t1->dim[0]);
        break;
    case IR_OP_DENSE_GRAD_DATA: /* (dy[N,U], w[U,F]) */
        d = cg_gemm_dense_grad_data(t0->dim[0], t1->dim[1], t0->dim[1]);
        break;
    case IR_OP_DENSE_GRAD_WEIGHT: /* (dy[N,U], x[N,F]) */
        d = cg_gemm_dense_grad_weight(t0->dim[0], t1->dim[1], t0->dim[1]);
        break;
    default:
        return cg_fail(cx, "node %d: %s is not a GEMM op", node, ir_ops[n->op].name);
    }
    cg_begin_step(cx, node);
    int s0 = cg_step_slot(cx, n->input[0]), s1 = cg_step_slot(cx, n->input[1]);
    cg_add_gemm_call(cx, &d, s1, s0, 0);
    return 0;
}
