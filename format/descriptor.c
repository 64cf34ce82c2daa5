/* format/descriptor.c — the descriptors a kernel program's library calls
 * carry: a GEMM's (the extent each operand touches, validation against the
 * buffers' sizes, equality) and a library convolution's (sizes and element
 * types of its three tensors, validation, equality, names, flops). All
 * arithmetic is overflow-checked: the descriptors come from plan files. */
#include <inttypes.h>
#include <limits.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>

#include "format/program.h"
#include "base/err.h"

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
    return base_fail(err, errlen, "gemm: %s is %" PRId64 ", needs %" PRId64, what, got, want);
}

int64_t cg_gemm_extent(const cg_gemm *d, int operand) {
    if (operand == 'a')
        return extent(d->off_a, d->batch, d->stride_a, d->transa ? d->k : d->m,
                      d->transa ? d->m : d->k, d->lda);
    if (operand == 'b')
        return extent(d->off_b, d->batch, d->stride_b, d->transb ? d->n : d->k,
                      d->transb ? d->k : d->n, d->ldb);
    return extent(d->off_c, d->batch, d->stride_c, d->m, d->n, d->ldc);
}

int cg_gemm_validate(const cg_gemm *d, int64_t size_a, int64_t size_b, int64_t size_c, char *err,
                     size_t errlen) {
    if (d->m < 1 || d->n < 1 || d->k < 1 || d->batch < 1) {
        return base_fail(err, errlen,
                         "gemm: m, n, k, batch must be >= 1 (got %" PRId64 ", %" PRId64 ", %" PRId64
                         ", %" PRId64 ")",
                         d->m, d->n, d->k, d->batch);
    }
    if (d->m > INT_MAX || d->n > INT_MAX || d->k > INT_MAX || d->lda > INT_MAX ||
        d->ldb > INT_MAX || d->ldc > INT_MAX || d->batch > INT_MAX) {
        return base_fail(err, errlen, "gemm: a size does not fit a BLAS int");
    }
    if ((d->type_a != IR_F32 && d->type_a != IR_BF16) || d->type_b != d->type_a ||
        (d->type_c != IR_F32 && d->type_c != IR_BF16)) {
        return base_fail(
            err, errlen,
            "gemm: element types %d, %d, %d (A and B f32 or bf16 alike, C f32 or bf16)", d->type_a,
            d->type_b, d->type_c);
    }
    if (d->tf32 != 0 && (d->tf32 != 1 || d->type_a != IR_F32))
        return base_fail(err, errlen, "gemm: tf32 %d (0, or 1 with f32 operands)", d->tf32);
    if (d->stride_a < 0 || d->stride_b < 0 || d->stride_c < 0 || d->off_a < 0 || d->off_b < 0 ||
        d->off_c < 0) {
        return base_fail(err, errlen, "gemm: negative stride or offset");
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
        return base_fail(err, errlen, "gemm: extents overflow");
    }
    if (ea > size_a) return vfail(err, errlen, "A's buffer (elements)", size_a, ea);
    if (eb > size_b) return vfail(err, errlen, "B's buffer (elements)", size_b, eb);
    if (ec > size_c) return vfail(err, errlen, "C's buffer (elements)", size_c, ec);
    return 0;
}

/* ---- convolution descriptors ------------------------------------------------------ */

/* Input channels per group; safe on an unvalidated G (0 is refused by
 * cg_conv_validate, whose size check runs first on these sizes). */
static int64_t group_channels(const cg_conv *c) { return c->C / (c->G > 0 ? c->G : 1); }

void cg_conv_sizes(const cg_conv *c, int64_t size[3]) {
    int64_t x = c->N * c->C * c->H * c->W, y = c->N * c->K * c->Ho * c->Wo,
            w = c->K * group_channels(c) * c->kh * c->kw;
    int64_t fwd[3] = {y, x, w}, bwd_data[3] = {x, y, w}, bwd_weights[3] = {w, y, x};
    const int64_t *s = c->dir == CG_CONV_FORWARD         ? fwd
                       : c->dir == CG_CONV_BACKWARD_DATA ? bwd_data
                                                         : bwd_weights;
    memcpy(size, s, 3 * sizeof *size);
}

void cg_conv_types(const cg_conv *c, int type[3]) {
    int x = c->type_x, w = c->type_w, y = c->type_y;
    int fwd[3] = {y, x, w}, bwd_data[3] = {x, y, w}, bwd_weights[3] = {w, y, x};
    const int *t = c->dir == CG_CONV_FORWARD         ? fwd
                   : c->dir == CG_CONV_BACKWARD_DATA ? bwd_data
                                                     : bwd_weights;
    memcpy(type, t, 3 * sizeof *type);
}

int cg_conv_one_type(const cg_conv *c) {
    return c->type_x == c->type_w && c->type_x == c->type_y ? c->type_x : -1;
}

int cg_conv_widened(const cg_conv *c) {
    return c->dir == CG_CONV_BACKWARD_WEIGHTS && c->type_x == IR_BF16 && c->type_y == IR_BF16 &&
           c->type_w == IR_F32;
}

int cg_conv_compute_type(const cg_conv *c) {
    return cg_conv_widened(c) ? IR_BF16 : cg_conv_one_type(c);
}

int cg_conv_validate(const cg_conv *c, const int64_t size[3], char *err, size_t errlen) {
    const int64_t *d[CG_CONV_NDIMS] = CG_CONV_DIMS((cg_conv *)c);
    static const char *const names[CG_CONV_NDIMS] = {"N",  "C",  "H",  "W",  "K",  "kh", "kw",
                                                     "sh", "sw", "ph", "pw", "Ho", "Wo", "G"};
    for (int j = 0; j < CG_CONV_NDIMS; j++) {
        int64_t lo = j == 9 || j == 10 ? 0 : 1; /* padding may be 0 */
        if (*d[j] < lo || *d[j] > INT_MAX)
            return base_fail(err, errlen, "conv: %s is %" PRId64, names[j], *d[j]);
    }
    if (c->dir < CG_CONV_FORWARD || c->dir > CG_CONV_BACKWARD_WEIGHTS)
        return base_fail(err, errlen, "conv: direction %d", c->dir);
    if (c->C % c->G || c->K % c->G)
        return base_fail(err, errlen,
                         "conv: %" PRId64 " groups do not divide %" PRId64 " inputs and %" PRId64
                         " outputs",
                         c->G, c->C, c->K);
    const int types[3] = {c->type_x, c->type_w, c->type_y};
    for (int j = 0; j < 3; j++)
        if (types[j] != IR_F32 && types[j] != IR_BF16)
            return base_fail(err, errlen, "conv: element type %d (f32 or bf16)", types[j]);
    if ((c->tune != 0 && c->tune != 1) || c->nalt < 0)
        return base_fail(err, errlen, "conv: tune %d, nalt %d", c->tune, c->nalt);
    if ((c->dense != 0 && c->dense != 1) ||
        (c->dense && (c->G != 1 || cg_conv_one_type(c) != IR_F32)))
        return base_fail(err, errlen, "conv: dense %d with %" PRId64 " groups on %s tensors",
                         c->dense, c->G, cg_conv_one_type(c) == IR_F32 ? "f32" : "not only f32");
    if ((c->tf32 != 0 && c->tf32 != 1) || (c->tf32 && cg_conv_one_type(c) != IR_F32))
        return base_fail(err, errlen, "conv: tf32 %d on %s tensors", c->tf32,
                         cg_conv_one_type(c) == IR_F32 ? "f32" : "not only f32");
    if (c->ph >= c->kh || c->pw >= c->kw)
        return base_fail(err, errlen, "conv: padding %" PRId64 "x%" PRId64 " not below the kernel",
                         c->ph, c->pw);
    int64_t ho = (c->H + 2 * c->ph - c->kh) / c->sh + 1,
            wo = (c->W + 2 * c->pw - c->kw) / c->sw + 1;
    if (c->H + 2 * c->ph < c->kh || c->W + 2 * c->pw < c->kw || ho != c->Ho || wo != c->Wo)
        return base_fail(err, errlen,
                         "conv: output %" PRId64 "x%" PRId64 " is not what %" PRId64 "x%" PRId64
                         ", kernel %" PRId64 ", stride %" PRId64 ", padding %" PRId64 " give",
                         c->Ho, c->Wo, c->H, c->W, c->kh, c->sh, c->ph);
    int64_t want[3], t;
    if (__builtin_mul_overflow(c->N * c->C, c->H * c->W, &t) ||
        __builtin_mul_overflow(c->N * c->K, c->Ho * c->Wo, &t))
        return base_fail(err, errlen, "conv: sizes overflow");
    cg_conv_sizes(c, want);
    for (int j = 0; j < 3; j++)
        if (size[j] != want[j])
            return base_fail(err, errlen,
                             "conv: %s buffer holds %" PRId64 " elements, the tensor %" PRId64,
                             j == 0   ? "the output"
                             : j == 1 ? "the first input's"
                                      : "the second input's",
                             size[j], want[j]);
    return 0;
}

int cg_conv_equal(const cg_conv *a, const cg_conv *b) {
    const int64_t *x[CG_CONV_NDIMS] = CG_CONV_DIMS((cg_conv *)a),
                  *y[CG_CONV_NDIMS] = CG_CONV_DIMS((cg_conv *)b);
    for (int j = 0; j < CG_CONV_NDIMS; j++)
        if (*x[j] != *y[j]) return 0;
    return a->dir == b->dir && a->type_x == b->type_x && a->type_w == b->type_w &&
           a->type_y == b->type_y && a->tf32 == b->tf32 && a->tune == b->tune &&
           a->nalt == b->nalt && a->dense == b->dense;
}

const char *cg_conv_dir_name(int dir) {
    return dir == CG_CONV_FORWARD         ? "forward"
           : dir == CG_CONV_BACKWARD_DATA ? "backward_data"
                                          : "backward_weights";
}

void cg_conv_describe(const cg_conv *c, char *buf, size_t n) {
    snprintf(buf, n,
             "%s %" PRId64 "x%" PRId64 "x%" PRId64 "x%" PRId64 " -> %" PRId64 " k%" PRId64
             " s%" PRId64 " g%" PRId64 "%s",
             cg_conv_dir_name(c->dir), c->N, c->C, c->H, c->W, c->K, c->kh, c->sh, c->G,
             c->type_x == IR_BF16 || c->type_y == IR_BF16 ? " bf16" : "");
}

double cg_conv_flops(const cg_conv *c) {
    return 2.0 * (double)c->N * (double)c->K * (double)(c->Ho * c->Wo) *
           (double)(group_channels(c) * c->kh * c->kw);
}

int cg_gemm_equal(const cg_gemm *a, const cg_gemm *b) {
    return a->transa == b->transa && a->transb == b->transb && a->m == b->m && a->n == b->n &&
           a->k == b->k && a->alpha == b->alpha && a->beta == b->beta && a->lda == b->lda &&
           a->ldb == b->ldb && a->ldc == b->ldc && a->batch == b->batch &&
           a->stride_a == b->stride_a && a->stride_b == b->stride_b && a->stride_c == b->stride_c &&
           a->off_a == b->off_a && a->off_b == b->off_b && a->off_c == b->off_c &&
           a->type_a == b->type_a && a->type_b == b->type_b && a->type_c == b->type_c &&
           a->tf32 == b->tf32;
}
