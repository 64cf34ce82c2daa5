/* format/program.c — the kernel-program record: GEMM descriptors and their
 * validation, dialect names and section tags, checking, (de)serialising and
 * comparing cg_programs. Building one is codegen's (codegen/build.c).
 *
 * Byte layout (little endian), version 8 (7 plus the dense alternative;
 * programs of other versions are skipped and regenerated):
 *   "DPCK" u32 version u64 total_length u32 dialect u64 graph_hash i64 scratch
 *   u64 source_len, source bytes (no NUL)
 *   u32 nkernels, each: u32 name_len, name, u32 nargs
 *   u32 nsteps,   each: i32 node, i32 op, i32 alias, i64 scratch, u32 first_call,
 *                       u32 ncalls, u32 nbuf, nbuf x i32 buf
 *   u32 ncalls,   each: u32 kind, i32 kernel, i64 count, u32 nargs,
 *                       nargs x (i32 slot, i64 off), then the GEMM: u32 transa,
 *                       u32 transb, i64 m n k, f32 alpha beta, i64 lda ldb ldc
 *                       batch stride_a stride_b stride_c off_a off_b off_c,
 *                       u32 type_a type_b type_c tf32, then the launch: u32 grid
 *                       block shared (all 0 in a C program and in GEMMs), then
 *                       for a CG_CALL_CONV only its descriptor: u32 dir,
 *                       i64 N C H W K kh kw sh sw ph pw Ho Wo G, u32 type_x type_w
 *                       type_y tf32 tune nalt dense
 * total_length covers the whole record, so programs can sit back to back.
 */
#include <inttypes.h>
#include <limits.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "format/program.h"
#include "base/bytes.h"
#include "base/err.h"

#define CG_MAGIC   "DPCK"
/* 2: the C kernel ABI runs a range of iterations and exports NAME_grain.
 * 3: GEMM element types (bf16). 4: each call's launch geometry. 5: TF32 GEMMs.
 * 6: library convolutions (CG_CALL_CONV). 7: their groups. 8: a dense
 * alternative (cg_conv.dense). */
#define CG_VERSION 8u

unsigned cg_program_version(void) { return CG_VERSION; }

void cg_program_free(cg_program *p) {
    if (!p) return;
    free(p->source);
    free(p->kernels);
    free(p->steps);
    free(p->calls);
    free(p);
}

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

/* The descriptor's fields in serialised order (i64s). */
#define CONV_DIMS(c)                                                                         \
    {                                                                                        \
        &(c)->N, &(c)->C, &(c)->H, &(c)->W, &(c)->K, &(c)->kh, &(c)->kw, &(c)->sh, &(c)->sw, \
            &(c)->ph, &(c)->pw, &(c)->Ho, &(c)->Wo, &(c)->G                                  \
    }
enum { CONV_NDIMS = 14 };

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
    const int64_t *d[CONV_NDIMS] = CONV_DIMS((cg_conv *)c);
    static const char *const names[CONV_NDIMS] = {"N",  "C",  "H",  "W",  "K",  "kh", "kw",
                                                  "sh", "sw", "ph", "pw", "Ho", "Wo", "G"};
    for (int j = 0; j < CONV_NDIMS; j++) {
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
    const int64_t *x[CONV_NDIMS] = CONV_DIMS((cg_conv *)a),
                  *y[CONV_NDIMS] = CONV_DIMS((cg_conv *)b);
    for (int j = 0; j < CONV_NDIMS; j++)
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

/* ---- dialects ------------------------------------------------------------------- */

static const struct {
    const char *name, *section;
    int launches;
} dialects[CG_DIALECT_COUNT] = {
    [CG_DIALECT_C] = {"c", CG_SECTION_C, 0},
    [CG_DIALECT_CUDA] = {"cuda", CG_SECTION_CUDA, 1},
};

/* A value that names no dialect reads as C, as it always did. */
static cg_dialect or_c(cg_dialect d) { return (unsigned)d < CG_DIALECT_COUNT ? d : CG_DIALECT_C; }
const char *cg_dialect_name(cg_dialect d) { return dialects[or_c(d)].name; }
const char *cg_section_tag(cg_dialect d) { return dialects[or_c(d)].section; }
int cg_dialect_launches(cg_dialect d) { return dialects[or_c(d)].launches; }

/* ---- hashing -------------------------------------------------------------------- */

uint64_t cg_graph_hash(const ir_graph *g) { return ir_graph_hash(g); }

/* ---- serialising ------------------------------------------------------------------ */

int cg_program_serialize(const cg_program *p, unsigned char **out, size_t *len) {
    base_wbuf w = {0};
    base_put(&w, CG_MAGIC, 4);
    base_put_u32(&w, CG_VERSION);
    base_put_u64(&w, 0); /* total length, patched below */
    base_put_u32(&w, (uint32_t)p->dialect);
    base_put_u64(&w, p->graph_hash);
    base_put_i64(&w, p->scratch);
    base_put_u64(&w, p->source_len);
    base_put(&w, p->source, p->source_len);
    base_put_u32(&w, (uint32_t)p->nkernels);
    for (int k = 0; k < p->nkernels; k++) {
        size_t n = strlen(p->kernels[k].name);
        base_put_u32(&w, (uint32_t)n);
        base_put(&w, p->kernels[k].name, n);
        base_put_u32(&w, (uint32_t)p->kernels[k].nargs);
    }
    base_put_u32(&w, (uint32_t)p->nsteps);
    for (int i = 0; i < p->nsteps; i++) {
        const cg_step *s = &p->steps[i];
        base_put_i32(&w, s->node);
        base_put_i32(&w, s->op);
        base_put_i32(&w, s->alias);
        base_put_i64(&w, s->scratch);
        base_put_u32(&w, (uint32_t)s->first_call);
        base_put_u32(&w, (uint32_t)s->ncalls);
        base_put_u32(&w, (uint32_t)s->nbuf);
        for (int j = 0; j < s->nbuf; j++) base_put_i32(&w, s->buf[j]);
    }
    base_put_u32(&w, (uint32_t)p->ncalls);
    for (int i = 0; i < p->ncalls; i++) {
        const cg_call *c = &p->calls[i];
        const cg_gemm *d = &c->gemm;
        base_put_u32(&w, (uint32_t)c->kind);
        base_put_i32(&w, c->kernel);
        base_put_i64(&w, c->count);
        base_put_u32(&w, (uint32_t)c->nargs);
        for (int j = 0; j < c->nargs; j++) {
            base_put_i32(&w, c->arg[j]);
            base_put_i64(&w, c->off[j]);
        }
        base_put_u32(&w, (uint32_t)d->transa);
        base_put_u32(&w, (uint32_t)d->transb);
        int64_t v[] = {d->m, d->n, d->k};
        for (int j = 0; j < 3; j++) base_put_i64(&w, v[j]);
        base_put_f32(&w, d->alpha);
        base_put_f32(&w, d->beta);
        int64_t u[] = {d->lda,      d->ldb,      d->ldc,   d->batch, d->stride_a,
                       d->stride_b, d->stride_c, d->off_a, d->off_b, d->off_c};
        for (int j = 0; j < 10; j++) base_put_i64(&w, u[j]);
        base_put_u32(&w, (uint32_t)d->type_a);
        base_put_u32(&w, (uint32_t)d->type_b);
        base_put_u32(&w, (uint32_t)d->type_c);
        base_put_u32(&w, (uint32_t)d->tf32);
        base_put_u32(&w, c->launch.grid);
        base_put_u32(&w, c->launch.block);
        base_put_u32(&w, c->launch.shared);
        if (c->kind == CG_CALL_CONV) {
            const int64_t *dims[CONV_NDIMS] = CONV_DIMS((cg_conv *)&c->conv);
            base_put_u32(&w, (uint32_t)c->conv.dir);
            for (int j = 0; j < CONV_NDIMS; j++) base_put_i64(&w, *dims[j]);
            base_put_u32(&w, (uint32_t)c->conv.type_x);
            base_put_u32(&w, (uint32_t)c->conv.type_w);
            base_put_u32(&w, (uint32_t)c->conv.type_y);
            base_put_u32(&w, (uint32_t)c->conv.tf32);
            base_put_u32(&w, (uint32_t)c->conv.tune);
            base_put_u32(&w, (uint32_t)c->conv.nalt);
            base_put_u32(&w, (uint32_t)c->conv.dense);
        }
    }
    base_patch_u64(&w, 8, w.len); /* the total length */
    if (w.oom) {
        free(w.p);
        return -1;
    }
    *out = w.p;
    *len = w.len;
    return 0;
}

/* ---- parsing ------------------------------------------------------------------------ */

static cg_program *parse_fail(cg_program *p, char *err, size_t errlen, const char *why) {
    base_fail(err, errlen, "kernel program: %s", why);
    cg_program_free(p);
    return NULL;
}

/* A count read from the bytes, refused when it could not possibly fit in
 * what is left (each record takes at least min_size bytes). */
static int get_count(base_rbuf *r, size_t min_size, int *out) {
    uint32_t n = base_get_u32(r);
    if (r->bad || n > (r->len - r->pos) / min_size || n > (1u << 30)) return -1;
    *out = (int)n;
    return 0;
}

/* The phases of a record after its header read into p; each returns NULL
 * or why the bytes are refused. Dialect, graph hash, scratch, source: */
static const char *parse_head(base_rbuf *r, cg_program *p) {
    uint32_t dialect = base_get_u32(r);
    if (dialect >= CG_DIALECT_COUNT) return "bad dialect";
    p->dialect = (cg_dialect)dialect;
    p->graph_hash = base_get_u64(r);
    p->scratch = base_get_i64(r);
    uint64_t slen = base_get_u64(r);
    if (r->bad || slen > r->len - r->pos) return "truncated source";
    const unsigned char *src = base_take(r, (size_t)slen);
    if (memchr(src, 0, (size_t)slen)) return "NUL in source";
    p->source = malloc((size_t)slen + 1);
    BASE_CHECK_ALLOC(p->source);
    memcpy(p->source, src, (size_t)slen);
    p->source[slen] = 0;
    p->source_len = (size_t)slen;
    if (p->scratch < 0) return "negative scratch size";
    return NULL;
}

/* Kernels: names (C identifiers) and argument counts. */
static const char *parse_kernels(base_rbuf *r, cg_program *p) {
    if (get_count(r, 8, &p->nkernels)) return "bad kernel count";
    p->kernels = calloc((size_t)p->nkernels + 1, sizeof *p->kernels);
    BASE_CHECK_ALLOC(p->kernels);
    for (int k = 0; k < p->nkernels; k++) {
        uint32_t n = base_get_u32(r);
        if (r->bad || n == 0 || n >= CG_NAME_MAX) return "bad kernel name";
        const unsigned char *name = base_take(r, n);
        if (!name) return "truncated kernel name";
        for (uint32_t i = 0; i < n; i++)
            if (!(name[i] == '_' || (name[i] >= '0' && name[i] <= '9') ||
                  (name[i] >= 'a' && name[i] <= 'z') || (name[i] >= 'A' && name[i] <= 'Z')))
                return "bad kernel name";
        memcpy(p->kernels[k].name, name, n);
        uint32_t nargs = base_get_u32(r);
        if (nargs < 1 || nargs > CG_MAX_ARGS) return "bad kernel arity";
        p->kernels[k].nargs = (int)nargs;
    }
    return NULL;
}

static const char *parse_steps(base_rbuf *r, cg_program *p) {
    if (get_count(r, 36, &p->nsteps)) return "bad step count";
    p->steps = calloc((size_t)p->nsteps + 1, sizeof *p->steps);
    BASE_CHECK_ALLOC(p->steps);
    for (int i = 0; i < p->nsteps; i++) {
        cg_step *s = &p->steps[i];
        s->node = base_get_i32(r);
        s->op = base_get_i32(r);
        s->alias = base_get_i32(r);
        s->scratch = base_get_i64(r);
        uint32_t first = base_get_u32(r), n = base_get_u32(r), nbuf = base_get_u32(r);
        if (r->bad) return "truncated step";
        if (nbuf < 1 || nbuf > CG_MAX_BUFS || first > (1u << 30) || n > (1u << 30))
            return "bad step";
        s->first_call = (int)first;
        s->ncalls = (int)n;
        s->nbuf = (int)nbuf;
        for (int j = 0; j < s->nbuf; j++) s->buf[j] = base_get_i32(r);
        if (r->bad) return "truncated step";
        if (s->op < 0 || s->op >= IR_OP_COUNT || s->scratch < 0 || s->scratch > p->scratch)
            return "bad step";
    }
    return NULL;
}

/* One call: its slots and offsets, then the GEMM descriptor every call carries. */
static const char *parse_call(base_rbuf *r, const cg_program *p, cg_call *c) {
    cg_gemm *d = &c->gemm;
    c->kind = (int)base_get_u32(r);
    c->kernel = base_get_i32(r);
    c->count = base_get_i64(r);
    uint32_t nargs = base_get_u32(r);
    if (r->bad || nargs > CG_MAX_ARGS) return "bad call";
    c->nargs = (int)nargs;
    for (int j = 0; j < c->nargs; j++) {
        c->arg[j] = base_get_i32(r);
        c->off[j] = base_get_i64(r);
    }
    d->transa = (int)base_get_u32(r);
    d->transb = (int)base_get_u32(r);
    d->m = base_get_i64(r);
    d->n = base_get_i64(r);
    d->k = base_get_i64(r);
    d->alpha = base_get_f32(r);
    d->beta = base_get_f32(r);
    int64_t *u[] = {&d->lda,      &d->ldb,      &d->ldc,   &d->batch, &d->stride_a,
                    &d->stride_b, &d->stride_c, &d->off_a, &d->off_b, &d->off_c};
    for (int j = 0; j < 10; j++) *u[j] = base_get_i64(r);
    d->type_a = (int)base_get_u32(r);
    d->type_b = (int)base_get_u32(r);
    d->type_c = (int)base_get_u32(r);
    d->tf32 = (int)base_get_u32(r);
    c->launch.grid = base_get_u32(r);
    c->launch.block = base_get_u32(r);
    c->launch.shared = base_get_u32(r);
    if (c->kind == CG_CALL_CONV) {
        int64_t *dims[CONV_NDIMS] = CONV_DIMS(&c->conv);
        c->conv.dir = (int)base_get_u32(r);
        for (int j = 0; j < CONV_NDIMS; j++) *dims[j] = base_get_i64(r);
        c->conv.type_x = (int)base_get_u32(r);
        c->conv.type_w = (int)base_get_u32(r);
        c->conv.type_y = (int)base_get_u32(r);
        c->conv.tf32 = (int)base_get_u32(r);
        c->conv.tune = (int)base_get_u32(r);
        uint32_t nalt = base_get_u32(r);
        if (nalt > (1u << 20)) return "bad conv call";
        c->conv.nalt = (int)nalt;
        c->conv.dense = (int)base_get_u32(r);
    }
    if (r->bad) return "truncated call";
    if ((d->type_a != IR_F32 && d->type_a != IR_BF16) || d->type_b != d->type_a ||
        (d->type_c != IR_F32 && d->type_c != IR_BF16))
        return "bad gemm element type";
    if (d->tf32 != 0 && (d->tf32 != 1 || d->type_a != IR_F32)) return "bad gemm tf32";
    if (d->transa < 0 || d->transa > 1 || d->transb < 0 || d->transb > 1)
        return "bad gemm transpose flag";
    if (c->kind == CG_CALL_KERNEL) {
        if (c->kernel < 0 || c->kernel >= p->nkernels || c->nargs != p->kernels[c->kernel].nargs ||
            c->count < 0)
            return "bad kernel call";
        const cg_launch *l = &c->launch;
        if (cg_dialect_launches(p->dialect)
                ? l->grid < 1 || l->grid > CG_MAX_GRID || l->block < 1 || l->block > CG_MAX_BLOCK ||
                      l->shared > CG_MAX_SHARED
                : l->grid || l->block || l->shared)
            return "bad launch geometry";
    } else if (c->launch.grid || c->launch.block || c->launch.shared) {
        return "bad launch geometry";
    } else if (c->kind == CG_CALL_GEMM || c->kind == CG_CALL_CONV) {
        if (c->nargs != 3) return "bad gemm call";
    } else {
        return "bad call kind";
    }
    for (int j = 0; j < c->nargs; j++)
        if (c->off[j] < 0) return "negative offset";
    return NULL;
}

static const char *parse_calls(base_rbuf *r, cg_program *p) {
    if (get_count(r, 164, &p->ncalls)) return "bad call count";
    p->calls = calloc((size_t)p->ncalls + 1, sizeof *p->calls);
    BASE_CHECK_ALLOC(p->calls);
    for (int i = 0; i < p->ncalls; i++) {
        const char *why = parse_call(r, p, &p->calls[i]);
        if (why) return why;
    }
    return NULL;
}

/* Steps own contiguous, in-range call ranges whose slots they hold. */
static const char *check_call_ranges(const cg_program *p) {
    for (int i = 0; i < p->nsteps; i++) {
        const cg_step *s = &p->steps[i];
        if ((int64_t)s->first_call + s->ncalls > p->ncalls) return "step calls out of range";
        for (int c = s->first_call; c < s->first_call + s->ncalls; c++) {
            for (int j = 0; j < p->calls[c].nargs; j++)
                if (p->calls[c].arg[j] < 0 || p->calls[c].arg[j] >= s->nbuf)
                    return "call slot out of range";
            /* a conv's alternative is calls of its own step, none a conv */
            const cg_call *cc = &p->calls[c];
            if (cc->kind == CG_CALL_CONV) {
                if ((int64_t)c + cc->conv.nalt >= (int64_t)s->first_call + s->ncalls)
                    return "conv alternative out of its step";
                for (int a = c + 1; a <= c + cc->conv.nalt; a++)
                    if (p->calls[a].kind == CG_CALL_CONV) return "conv alternative holds a conv";
            }
        }
    }
    return NULL;
}

cg_program *cg_program_parse_prefix(const unsigned char *buf, size_t len, size_t *used, char *err,
                                    size_t errlen) {
    base_rbuf r = {buf, len, 0, 0};
    const unsigned char *magic = base_take(&r, 4);
    if (!magic || memcmp(magic, CG_MAGIC, 4) != 0)
        return parse_fail(NULL, err, errlen, "bad magic");
    uint32_t version = base_get_u32(&r);
    uint64_t total = base_get_u64(&r);
    if (r.bad) return parse_fail(NULL, err, errlen, "truncated header");
    if (version != CG_VERSION) {
        base_fail(err, errlen, "kernel program: version %u, this build reads %u", version,
                  CG_VERSION);
        return NULL;
    }
    if (total > len || total < 20) return parse_fail(NULL, err, errlen, "truncated");
    r.len = (size_t)total; /* never read past this record */
    cg_program *p = calloc(1, sizeof *p);
    BASE_CHECK_ALLOC(p);
    const char *why = parse_head(&r, p);
    if (!why) why = parse_kernels(&r, p);
    if (!why) why = parse_steps(&r, p);
    if (!why) why = parse_calls(&r, p);
    if (!why) why = check_call_ranges(p);
    if (!why && r.pos != r.len) why = "trailing bytes in record";
    if (why) return parse_fail(p, err, errlen, why);
    if (used) *used = r.pos;
    return p;
}

cg_program *cg_program_parse(const unsigned char *buf, size_t len, char *err, size_t errlen) {
    size_t used = 0;
    cg_program *p = cg_program_parse_prefix(buf, len, &used, err, errlen);
    if (p && used != len) return parse_fail(p, err, errlen, "trailing bytes");
    return p;
}

int cg_section_find(const unsigned char *buf, size_t len, const ir_graph *g, cg_program **out,
                    char *err, size_t errlen) {
    uint64_t h = cg_graph_hash(g);
    size_t pos = 0;
    *out = NULL;
    while (pos < len) {
        size_t used = 0;
        /* A program of another version (an older dpc's plan) is skipped: the
         * graph is in the plan, so the runtime makes its kernels anew. */
        if (len - pos >= 16 && !memcmp(buf + pos, CG_MAGIC, 4)) {
            uint32_t v = 0;
            uint64_t total = 0;
            for (int i = 0; i < 4; i++) v |= (uint32_t)buf[pos + 4 + i] << (8 * i);
            for (int i = 0; i < 8; i++) total |= (uint64_t)buf[pos + 8 + i] << (8 * i);
            if (v != CG_VERSION && total >= 16 && total <= len - pos) {
                pos += (size_t)total;
                continue;
            }
        }
        cg_program *p = cg_program_parse_prefix(buf + pos, len - pos, &used, err, errlen);
        if (!p) {
            cg_program_free(*out);
            *out = NULL;
            return -1;
        }
        if (p->graph_hash == h && !*out)
            *out = p; /* keep parsing: a malformed tail is still an error */
        else
            cg_program_free(p);
        pos += used;
    }
    if (*out) return 0;
    base_fail(err, errlen, "kernel section holds no program for this graph (hash %016" PRIx64 ")",
              h);
    return 1;
}

/* ---- checking against a graph ------------------------------------------------------- */

int64_t cg_slot_size(const cg_program *p, const ir_graph *g, const cg_step *s, int slot) {
    if (slot < 0 || slot >= s->nbuf) return -1;
    int id = s->buf[slot];
    if (id == CG_SCRATCH) return p->scratch;
    if (id < 0 || id >= g->n) return -1;
    return ir_numel(&g->nodes[id].type);
}

int cg_program_check(const cg_program *p, const ir_graph *g, char *err, size_t errlen) {
    if (p->graph_hash != cg_graph_hash(g)) {
        return base_fail(err, errlen, "kernel program was made for another graph");
    }
    for (int i = 0; i < p->nsteps; i++) {
        const cg_step *s = &p->steps[i];
        if (s->node < 0 || s->node >= g->n || s->op != (int)g->nodes[s->node].op ||
            s->buf[0] != s->node || s->alias >= s->node || s->alias < -1 ||
            (int64_t)s->first_call + s->ncalls > p->ncalls || s->scratch > p->scratch) {
            return base_fail(err, errlen, "kernel program: step %d does not fit the graph", i);
        }
        for (int j = 0; j < s->nbuf; j++)
            if (s->buf[j] != CG_SCRATCH && (s->buf[j] < 0 || s->buf[j] >= g->n)) {
                return base_fail(err, errlen, "kernel program: step %d names node %d", i,
                                 s->buf[j]);
            }
        for (int c = s->first_call; c < s->first_call + s->ncalls; c++) {
            const cg_call *call = &p->calls[c];
            int64_t size[CG_MAX_ARGS];
            for (int j = 0; j < call->nargs; j++) {
                size[j] = cg_slot_size(p, g, s, call->arg[j]);
                if (size[j] < 0) {
                    return base_fail(err, errlen, "kernel program: step %d call %d: bad slot", i,
                                     c);
                }
            }
            if (call->kind == CG_CALL_GEMM) {
                char why[160];
                /* A GEMM reads a node in the node's own element type, and
                 * the scratch area (floats) holds twice as many bf16. */
                const int type[3] = {call->gemm.type_a, call->gemm.type_b, call->gemm.type_c};
                for (int j = 0; j < call->nargs && j < 3; j++) {
                    int id = s->buf[call->arg[j]];
                    if (id == CG_SCRATCH) {
                        if (type[j] == IR_BF16) size[j] *= 2;
                    } else if ((int)g->nodes[id].type.dtype != type[j]) {
                        return base_fail(
                            err, errlen,
                            "kernel program: step %d call %d: gemm operand %c is %s, node %d is not",
                            i, c, "ABC"[j], type[j] == IR_BF16 ? "bf16" : "f32", id);
                    }
                }
                if (call->nargs != 3 ||
                    cg_gemm_validate(&call->gemm, size[0], size[1], size[2], why, sizeof why)) {
                    return base_fail(err, errlen, "kernel program: step %d (%s) call %d: %s", i,
                                     ir_ops[s->op].name, c, call->nargs != 3 ? "gemm arity" : why);
                }
            } else if (call->kind == CG_CALL_CONV) {
                char why[160] = "";
                int type[3];
                cg_conv_types(&call->conv, type);
                int64_t want[3];
                cg_conv_sizes(&call->conv, want);
                for (int j = 0; j < 3 && j < call->nargs; j++) {
                    int id = s->buf[call->arg[j]];
                    /* the weights' bf16 copy in the scratch (codegen/gemm.c) */
                    int copy = id == CG_SCRATCH && j == 2 && type[j] == IR_BF16 &&
                               call->conv.dir != CG_CONV_BACKWARD_WEIGHTS;
                    if (copy && call->off[2] >= 0 && call->off[2] <= size[2] &&
                        (want[2] + 1) / 2 <= size[2] - call->off[2]) {
                        size[2] = want[2];
                        continue;
                    }
                    if (id == CG_SCRATCH || (int)g->nodes[id].type.dtype != type[j])
                        return base_fail(err, errlen,
                                         "kernel program: step %d call %d: conv operand %d is not "
                                         "a node of the descriptor's type, nor the weights' copy "
                                         "within the scratch",
                                         i, c, j);
                }
                if (call->nargs != 3 || call->off[0] || call->off[1] ||
                    (call->off[2] && s->buf[call->arg[2]] != CG_SCRATCH) ||
                    cg_conv_validate(&call->conv, size, why, sizeof why))
                    return base_fail(err, errlen, "kernel program: step %d (%s) call %d: %s", i,
                                     ir_ops[s->op].name, c,
                                     call->nargs != 3 ? "conv arity"
                                     : why[0]         ? why
                                                      : "conv offsets");
            } else {
                if (call->kernel < 0 || call->kernel >= p->nkernels ||
                    call->nargs != p->kernels[call->kernel].nargs) {
                    return base_fail(err, errlen, "kernel program: step %d call %d: bad kernel", i,
                                     c);
                }
                /* Every kernel writes at least one element of arg 0 per
                 * iteration (a bf16 kernel's scratch holds two per float):
                 * the count never runs past its output. The rest of a
                 * kernel's bounds is its body's, rendered from the graph. */
                int64_t room = call->nargs < 1 ? -1 : size[0] - call->off[0];
                if (call->nargs >= 1 && s->buf[call->arg[0]] == CG_SCRATCH) room += size[0];
                if (call->count < 0 || call->count > room) {
                    return base_fail(err, errlen,
                                     "kernel program: step %d call %d (%s): count %" PRId64
                                     " is beyond its output (%" PRId64 " elements)",
                                     i, c, p->kernels[call->kernel].name, call->count, room);
                }
                for (int j = 0; j < call->nargs; j++)
                    if (call->off[j] < 0 || call->off[j] >= size[j]) {
                        return base_fail(err, errlen,
                                         "kernel program: step %d call %d: offset %" PRId64
                                         " outside its buffer",
                                         i, c, call->off[j]);
                    }
            }
        }
    }
    return 0;
}

/* Kernel k's text (prelude for k < 0: everything before the first kernel). */
static int kernel_text(const cg_program *p, int k, const char **at, size_t *len) {
    size_t off = 0, n = 0;
    if (k < 0) {
        *at = p->source ? p->source : "";
        *len = p->nkernels && !cg_kernel_source(p, 0, &off, &n) ? off : p->source_len;
        return 0;
    }
    if (cg_kernel_source(p, k, &off, &n)) return -1;
    *at = p->source + off;
    *len = n;
    return 0;
}

static int same_text(const cg_program *a, int ka, const cg_program *b, int kb) {
    const char *x, *y;
    size_t nx, ny;
    if (kernel_text(a, ka, &x, &nx) || kernel_text(b, kb, &y, &ny)) return 0;
    return nx == ny && !memcmp(x, y, nx);
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

int cg_program_diff(const cg_program *have, const cg_program *want, char *what, size_t n) {
    unsigned char *x = NULL, *y = NULL;
    size_t nx = 0, ny = 0;
    if (cg_program_serialize(have, &x, &nx) || cg_program_serialize(want, &y, &ny)) {
        free(x);
        free(y);
        snprintf(what, n, "cannot serialise the kernel program");
        return 1;
    }
    int same = nx == ny && !memcmp(x, y, nx);
    free(x);
    free(y);
    if (same) return 0;
    /* Name the first kernel (by the embedded program's name) that differs:
     * its text, its argument count, then a call's geometry. */
    for (int k = 0; k < have->nkernels; k++) {
        const char *name = have->kernels[k].name;
        if (k >= want->nkernels || strcmp(name, want->kernels[k].name))
            return snprintf(what, n, "kernel %s is not one the graph renders", name), 1;
        if (have->kernels[k].nargs != want->kernels[k].nargs || !same_text(have, k, want, k))
            return snprintf(what, n, "kernel %s differs", name), 1;
    }
    if (want->nkernels > have->nkernels)
        return snprintf(what, n, "kernel %s is missing", want->kernels[have->nkernels].name), 1;
    if (!same_text(have, -1, want, -1)) return snprintf(what, n, "the kernel prelude differs"), 1;
    for (int c = 0; c < have->ncalls && c < want->ncalls; c++) {
        const cg_call *a = &have->calls[c], *b = &want->calls[c];
        if (a->kind == b->kind && a->kernel == b->kernel && a->count == b->count &&
            a->nargs == b->nargs && a->nargs >= 0 && a->nargs <= CG_MAX_ARGS &&
            !memcmp(a->arg, b->arg, sizeof *a->arg * (size_t)a->nargs) &&
            !memcmp(a->off, b->off, sizeof *a->off * (size_t)a->nargs) &&
            !memcmp(&a->launch, &b->launch, sizeof a->launch) &&
            (a->kind != CG_CALL_GEMM || cg_gemm_equal(&a->gemm, &b->gemm)) &&
            (a->kind != CG_CALL_CONV || cg_conv_equal(&a->conv, &b->conv)))
            continue;
        if (a->kind == CG_CALL_KERNEL && a->kernel >= 0 && a->kernel < have->nkernels)
            return snprintf(what, n,
                            "call %d of kernel %s differs (count %" PRId64 ", the graph's %" PRId64
                            ")",
                            c, have->kernels[a->kernel].name, a->count, b->count),
                   1;
        return snprintf(what, n, "call %d (%s) differs", c,
                        a->kind == CG_CALL_GEMM   ? "a GEMM"
                        : a->kind == CG_CALL_CONV ? "a convolution"
                                                  : "a kernel"),
               1;
    }
    for (int i = 0; i < have->nsteps && i < want->nsteps; i++) {
        const cg_step *a = &have->steps[i], *b = &want->steps[i];
        if (a->node != b->node || a->op != b->op || a->alias != b->alias || a->nbuf != b->nbuf ||
            a->scratch != b->scratch || a->first_call != b->first_call || a->ncalls != b->ncalls ||
            a->nbuf < 0 || a->nbuf > CG_MAX_BUFS ||
            memcmp(a->buf, b->buf, sizeof *a->buf * (size_t)a->nbuf))
            return snprintf(what, n, "step %d (node %d) differs", i, a->node), 1;
    }
    return snprintf(what, n, "its steps or calls differ (%d steps, %d calls; the graph's %d, %d)",
                    have->nsteps, have->ncalls, want->nsteps, want->ncalls),
           1;
}

int cg_kernel_source(const cg_program *p, int k, size_t *off, size_t *len) {
    if (k < 0 || k >= p->nkernels || !p->source) return -1;
    /* `void NAME(`, or in CUDA `void __launch_bounds__(B) NAME(` */
    char sig[CG_NAME_MAX + 8];
    snprintf(sig, sizeof sig, " %s(", p->kernels[k].name);
    const char *at = strstr(p->source, sig);
    if (!at) return -1;
    /* back to the start of the line (CUDA: extern "C" __global__ ...), and
     * over a `const idx_t NAME_grain` line just before it (C) */
    while (at > p->source && at[-1] != '\n') at--;
    char grain[CG_NAME_MAX + 24];
    snprintf(grain, sizeof grain, "const idx_t %s_grain", p->kernels[k].name);
    const char *g = strstr(p->source, grain);
    if (g && g < at) at = g;
    const char *end = strstr(at, "\n}\n");
    if (!end) return -1;
    *off = (size_t)(at - p->source);
    *len = (size_t)(end + 3 - at);
    return 0;
}

/* ---- statistics -------------------------------------------------------- */

int cg_program_launches(const cg_program *p, int *gemms) {
    int g = 0, convs = 0;
    for (int c = 0; c < p->ncalls; c++) {
        g += p->calls[c].kind == CG_CALL_GEMM;
        convs += p->calls[c].kind == CG_CALL_CONV;
    }
    if (gemms) *gemms = g;
    return p->ncalls - convs;
}
