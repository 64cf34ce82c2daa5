/* tests/unit/test_libconv.c — library convolutions (dpc --conv): the
 * descriptor (format/program.h cg_conv), the oneDNN calls of the cpu
 * backend (runtime/device/onednn.c) against a float64 reference, and the
 * conv pass (passes/conv.c) end to end against im2col.
 *
 * Tolerance: a library result element is within F32_SUM_BOUND of its terms
 * (f32 accumulation in any order) of the float64 reference; a deliberately
 * wrong stride of the same output shape must fail that by far. Whole
 * models after two steps (tests/passcheck.h) agree with im2col within a
 * floor measured in the same test (close_snapshots), and bit for bit when
 * the backend runs the alternative. The deep zoo nets
 * are no such test: from these random inputs their float32 gradients are
 * chaotic (two convolution orders differ by percents after a step; see
 * tests/parity_test.sh on mobilenet_v2), so they are checked against the
 * float64 PyTorch reference instead (parity_test.sh's --conv library cases).
 *
 * run: tier=test
 */
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "codegen/codegen.h"
#include "format/bf16.h"
#include "runtime/device/device.h"
#include "runtime/device/onednn.h"
#include "tests/fixture.h"
#include "tests/harness.h"
#include "tests/passcheck.h"

static uint64_t seed = 12345;
static float rnd(void) { return (float)tg_rnd(&seed); }

/* The three directions in float64, with each output's F32_SUM_BOUND: the
 * count and the sum of |terms|. */
static void reference(const cg_conv *d, const float *in, const float *in2, double *out,
                      double *mag) {
    int64_t size[3];
    cg_conv_sizes(d, size);
    memset(out, 0, sizeof *out * (size_t)size[0]);
    memset(mag, 0, sizeof *mag * (size_t)size[0]);
    int64_t *terms = calloc((size_t)size[0], sizeof *terms);
    int64_t Cg = d->C / d->G, Kg = d->K / d->G; /* filter k reads group k / Kg */
    for (int64_t n = 0; n < d->N; n++)
        for (int64_t k = 0; k < d->K; k++)
            for (int64_t ho = 0; ho < d->Ho; ho++)
                for (int64_t wo = 0; wo < d->Wo; wo++)
                    for (int64_t cl = 0; cl < Cg; cl++)
                        for (int64_t i = 0; i < d->kh; i++)
                            for (int64_t j = 0; j < d->kw; j++) {
                                int64_t h = ho * d->sh - d->ph + i, w = wo * d->sw - d->pw + j;
                                if (h < 0 || h >= d->H || w < 0 || w >= d->W) continue;
                                int64_t c = k / Kg * Cg + cl;
                                int64_t xi = ((n * d->C + c) * d->H + h) * d->W + w;
                                int64_t wi = ((k * Cg + cl) * d->kh + i) * d->kw + j;
                                int64_t yi = ((n * d->K + k) * d->Ho + ho) * d->Wo + wo;
                                int64_t o, a, b; /* out, and which inputs multiply */
                                if (d->dir == CG_CONV_FORWARD)
                                    o = yi, a = xi, b = wi;
                                else if (d->dir == CG_CONV_BACKWARD_DATA)
                                    o = xi, a = yi, b = wi;
                                else
                                    o = wi, a = yi, b = xi;
                                double t = (double)in[a] * in2[b];
                                out[o] += t;
                                mag[o] += t < 0 ? -t : t;
                                terms[o]++;
                            }
    for (int64_t i = 0; i < size[0]; i++) mag[i] = F32_SUM_BOUND(terms[i], mag[i]);
    free(terms);
}

/* Runs parts in order on this thread. */
static __attribute__((unused)) void run_serial(rt_parts_task task, void *ctx, int parts) {
    for (int p = 0; p < parts; p++) task(ctx, p, parts);
}

/* Runs parts on three threads, claiming them from a shared counter. */
typedef struct {
    rt_parts_task task;
    void *ctx;
    int parts;
    int next;
    pthread_mutex_t mu;
} par_job;
static void *par_worker(void *arg) {
    par_job *j = arg;
    for (;;) {
        pthread_mutex_lock(&j->mu);
        int p = j->next++;
        pthread_mutex_unlock(&j->mu);
        if (p >= j->parts) return NULL;
        j->task(j->ctx, p, j->parts);
    }
}
static void run_threads(rt_parts_task task, void *ctx, int parts) {
    par_job j = {task, ctx, parts, 0, PTHREAD_MUTEX_INITIALIZER};
    pthread_t t[3];
    for (int i = 0; i < 3; i++) pthread_create(&t[i], NULL, par_worker, &j);
    for (int i = 0; i < 3; i++) pthread_join(t[i], NULL);
}

static cg_conv conv_of(int dir, int64_t N, int64_t C, int64_t H, int64_t W, int64_t K, int64_t k,
                       int64_t s, int64_t p) {
    return (cg_conv){.dir = dir,
                     .N = N,
                     .C = C,
                     .H = H,
                     .W = W,
                     .K = K,
                     .kh = k,
                     .kw = k,
                     .sh = s,
                     .sw = s,
                     .ph = p,
                     .pw = p,
                     .Ho = (H + 2 * p - k) / s + 1,
                     .Wo = (W + 2 * p - k) / s + 1,
                     .G = 1,
                     .type_x = IR_F32,
                     .type_w = IR_F32,
                     .type_y = IR_F32};
}

/* Tensors of the call's roles as the library reads them: floats, or bf16. */
static void *typed(const float *v, int64_t n, int type) {
    if (type != IR_BF16) {
        float *f = malloc(sizeof *f * (size_t)n);
        memcpy(f, v, sizeof *f * (size_t)n);
        return f;
    }
    bf16_t *h = malloc(sizeof *h * (size_t)n);
    for (int64_t i = 0; i < n; i++) h[i] = dpc_f32_to_bf16(v[i]);
    return h;
}
static float value_at(const void *p, int64_t i, int type) { /* as a float */
    return type == IR_BF16 ? dpc_bf16_to_f32(((const bf16_t *)p)[i]) : ((const float *)p)[i];
}

/* The worst |library - reference| over the output in units of its bound,
 * F32_SUM_BOUND of its terms (f32 accumulation in any order) plus, for a
 * bf16 output, 2^-8 of |reference| (its rounding): at most 1 passes. -1 when the library declined the call. ref_d computes the reference (a
 * wrong one for the negative test), from the inputs as the library read
 * them (bf16 ones rounded). *got: the output as floats, if asked. */
static double worst_error(const cg_conv *d, const cg_conv *ref_d, rt_parts_run run, float **got) {
    int64_t size[3];
    int type[3];
    cg_conv_sizes(d, size);
    cg_conv_types(d, type);
    float *v[3];
    for (int j = 0; j < 3; j++) {
        v[j] = malloc(sizeof(float) * (size_t)size[j]);
        for (int64_t i = 0; i < size[j]; i++) v[j][i] = j ? rnd() : 1e30f;
    }
    void *out = typed(v[0], size[0], type[0]), *in = typed(v[1], size[1], type[1]),
         *in2 = typed(v[2], size[2], type[2]);
    /* what the library reads: with bf16 activations every product is of
     * bf16 values (f32 weights rounded once, as the im2col path's copy) */
    int bf = d->type_x == IR_BF16 || d->type_y == IR_BF16;
    for (int j = 1; j < 3; j++)
        for (int64_t i = 0; i < size[j]; i++)
            v[j][i] = bf ? dpc_bf16_to_f32(dpc_f32_to_bf16(v[j][i])) : v[j][i];
    double *ref = malloc(sizeof(double) * (size_t)size[0]),
           *mag = malloc(sizeof(double) * (size_t)size[0]);
    char err[256];
    int rc = rt_onednn_conv(d, out, in, in2, run, err, sizeof err);
    CHECK_MSG(rc >= 0, "%s", err);
    double worst = rc ? -1 : 0;
    if (!rc) {
        reference(ref_d, v[1], v[2], ref, mag);
        for (int64_t i = 0; i < size[0]; i++) {
            double o = value_at(out, i, type[0]), r = ref[i] < 0 ? -ref[i] : ref[i];
            double scale = mag[i] + (type[0] == IR_BF16 ? r / 256 : 0);
            double e = (o - ref[i]) / (scale > 1e-30 ? scale : 1e-30);
            if (e < 0) e = -e;
            if (e > worst || e != e) worst = e != e ? 1e30 : e;
        }
    }
    if (got) {
        *got = malloc(sizeof(float) * (size_t)size[0]);
        for (int64_t i = 0; i < size[0]; i++) (*got)[i] = value_at(out, i, type[0]);
    }
    free(out), free(in), free(in2), free(ref), free(mag);
    for (int j = 0; j < 3; j++) free(v[j]);
    return worst;
}

static const int64_t shapes[][9] = {
    /* N, C, H, W, K, k, s, p, G (0: 1) */
    {2, 3, 7, 7, 5, 3, 1, 1},
    {3, 4, 8, 6, 8, 3, 2, 1},
    {2, 8, 5, 5, 16, 1, 1, 0},
    {1, 3, 9, 9, 4, 7, 2, 3},
    {4, 16, 4, 4, 32, 3, 1, 1},
    {2, 5, 6, 6, 7, 1, 2, 0},
    {8, 16, 8, 8, 32, 3, 2, 1},
    {16, 32, 2, 2, 64, 3, 1, 1},
    {4, 3, 12, 10, 16, 5, 3, 2},
    /* taps that read only padding, left out (onednn.c): a 1x1 plane's centre,
     * a 2x2 plane at stride 2, and rows only */
    {16, 32, 1, 1, 64, 3, 1, 1},
    {8, 16, 2, 2, 32, 3, 2, 1},
    {2, 4, 1, 5, 6, 3, 1, 1},
    /* grouped: depthwise (MobileNet's 3x3 at strides 1 and 2, a 1x1 plane),
     * two groups, 4 outputs per input (a multiplier), groups of 16 */
    {4, 32, 8, 8, 32, 3, 1, 1, 32},
    {3, 48, 9, 9, 48, 3, 2, 1, 48},
    {8, 64, 1, 1, 64, 3, 1, 1, 64},
    {2, 6, 7, 5, 10, 3, 1, 1, 2},
    {2, 8, 6, 6, 32, 3, 2, 1, 8},
    {2, 64, 5, 5, 64, 1, 1, 0, 4},
};
#define NSHAPES  (int)(sizeof shapes / sizeof *shapes)
#define NGROUPED 6 /* the last six */

/* Every shape and direction against float64, activations (x, y and their
 * gradients) in `act`, weights f32: how many calls the library ran, and of
 * those how many grouped. A call is declined exactly when oneDNN would run
 * it as im2col + GEMM or reference code (onednn.c), which depends on the CPU. */
static int shapes_match_float64(int act, int *ran_grouped) {
    int ran = 0;
    *ran_grouped = 0;
    for (int i = 0; i < NSHAPES; i++)
        for (int dir = 0; dir < 3; dir++) {
            const int64_t *s = shapes[i];
            cg_conv d = conv_of(dir, s[0], s[1], s[2], s[3], s[4], s[5], s[6], s[7]);
            d.G = s[8] ? s[8] : 1;
            d.type_x = d.type_y = act;
            double e = worst_error(&d, &d, run_threads, NULL);
#ifdef DPC_HAVE_DNNL
            const char *impl = rt_onednn_conv_impl(&d);
            CHECK_MSG((e >= 0) == rt_onednn_impl_runs(impl), "shape %d %s: %s by '%s'", i,
                      cg_conv_dir_name(dir), e >= 0 ? "ran" : "declined", impl ? impl : "?");
#endif
            if (e < 0) continue; /* declined: the alternative runs */
            ran++;
            *ran_grouped += d.G > 1;
            CHECK_MSG(e <= 1, "shape %d %s %s: error %.3g of its bound", i, cg_conv_dir_name(dir),
                      act == IR_BF16 ? "bf16" : "f32", e);
        }
    return ran;
}

TEST(library_matches_float64) {
    int grouped, ran = shapes_match_float64(IR_F32, &grouped);
    int ungrouped = 3 * (NSHAPES - NGROUPED);
    fprintf(stderr, "f32: %d of %d ungrouped and %d of %d grouped calls ran in the library\n",
            ran - grouped, ungrouped, grouped, 3 * NGROUPED);
#ifdef DPC_HAVE_DNNL
    /* oneDNN has direct kernels for most of them on any x86-64 it runs on
     * (AVX2 declines 3 ungrouped and 6 grouped), and at least the three
     * directions of one depthwise shape */
    CHECK(ran - grouped >= ungrouped * 3 / 4 && grouped >= 3);
#else
    CHECK(ran == 0); /* without oneDNN every call runs its alternative */
#endif
}

/* --precision bf16's convolutions: activations (x, y and their gradients)
 * bf16, weights and their gradient f32, the products accumulated in f32.
 * The library needs a CPU with AVX-512 for bf16; elsewhere it declines. */
TEST(bf16_matches_float64) {
    int grouped, ran = shapes_match_float64(IR_BF16, &grouped);
    fprintf(stderr, "bf16: %d of %d calls ran in the library\n", ran, 3 * NSHAPES);
}

/* Stride 2, padding 1 and stride 1, padding 0 give a 3x3 kernel on 5x5 the
 * same 3x3 output: the tolerance must tell them apart. */
TEST(wrong_stride_fails_the_tolerance) {
#ifdef DPC_HAVE_DNNL
    for (int dir = 0; dir < 3; dir++) {
        cg_conv d = conv_of(dir, 2, 4, 5, 5, 6, 3, 2, 1),
                wrong = conv_of(dir, 2, 4, 5, 5, 6, 3, 1, 0);
        CHECK(d.Ho == wrong.Ho && d.Wo == wrong.Wo);
        CHECK(worst_error(&d, &d, run_serial, NULL) <= 1);
        CHECK(worst_error(&d, &wrong, run_serial, NULL) > 1000);
    }
#endif
}

/* Parts are fixed by the shape: one thread or three give the same bits. */
TEST(thread_count_does_not_change_bits) {
#ifdef DPC_HAVE_DNNL
    for (int i = 0; i < NSHAPES; i++)
        for (int dir = 0; dir < 3; dir++) {
            const int64_t *s = shapes[i];
            cg_conv d = conv_of(dir, s[0], s[1], s[2], s[3], s[4], s[5], s[6], s[7]);
            d.G = s[8] ? s[8] : 1;
            float *a = NULL, *b = NULL;
            uint64_t keep = seed;
            worst_error(&d, &d, run_serial, &a);
            seed = keep;
            worst_error(&d, &d, run_threads, &b);
            int64_t size[3];
            cg_conv_sizes(&d, size);
            CHECK_MSG(!memcmp(a, b, sizeof(float) * (size_t)size[0]), "shape %d %s", i,
                      cg_conv_dir_name(dir));
            free(a), free(b);
        }
#endif
}

TEST(descriptor_validation) {
    char err[256];
    cg_conv d = conv_of(CG_CONV_FORWARD, 2, 3, 8, 8, 4, 3, 2, 1);
    int64_t size[3];
    cg_conv_sizes(&d, size);
    CHECK(size[0] == 2 * 4 * 4 * 4 && size[1] == 2 * 3 * 8 * 8 && size[2] == 4 * 3 * 3 * 3);
    CHECK(cg_conv_validate(&d, size, err, sizeof err) == 0);
    cg_conv bad = d;
    bad.Ho = 5; /* not what the stride gives */
    CHECK(cg_conv_validate(&bad, size, err, sizeof err) != 0 && strstr(err, "output"));
    bad = d, bad.sh = 0;
    CHECK(cg_conv_validate(&bad, size, err, sizeof err) != 0);
    bad = d, bad.ph = 3; /* padding at least the kernel */
    CHECK(cg_conv_validate(&bad, size, err, sizeof err) != 0);
    bad = d, bad.type_x = IR_I32;
    CHECK(cg_conv_validate(&bad, size, err, sizeof err) != 0);
    bad = d, bad.type_x = bad.type_y = IR_BF16; /* --precision bf16's */
    CHECK(cg_conv_validate(&bad, size, err, sizeof err) == 0);
    bad = d, bad.dir = 7;
    CHECK(cg_conv_validate(&bad, size, err, sizeof err) != 0);
    int64_t small[3] = {size[0] - 1, size[1], size[2]};
    CHECK(cg_conv_validate(&d, small, err, sizeof err) != 0 && strstr(err, "buffer"));
    bad = d, bad.N = (int64_t)1 << 40;
    CHECK(cg_conv_validate(&bad, size, err, sizeof err) != 0);
    /* groups: weights [K, C/G, k, k]; G divides C and K */
    cg_conv dw = conv_of(CG_CONV_BACKWARD_WEIGHTS, 2, 8, 8, 8, 8, 3, 1, 1);
    dw.G = 8;
    cg_conv_sizes(&dw, size);
    CHECK(size[0] == 8 * 1 * 3 * 3 && size[2] == 2 * 8 * 8 * 8);
    CHECK(cg_conv_validate(&dw, size, err, sizeof err) == 0);
    CHECK(cg_conv_flops(&dw) == 2.0 * 2 * 8 * 64 * 9);
    bad = dw, bad.G = 3;
    CHECK(cg_conv_validate(&bad, size, err, sizeof err) != 0 && strstr(err, "groups"));
    bad = dw, bad.G = 0;
    CHECK(cg_conv_validate(&bad, size, err, sizeof err) != 0 && strstr(err, "G is 0"));
    bad = dw, bad.G = 4; /* divides, but the weights' buffer is not [8, 2, 3, 3] */
    CHECK(cg_conv_validate(&bad, size, err, sizeof err) != 0 && strstr(err, "buffer"));
    /* a dense alternative: one group, f32 throughout */
    bad = dw, bad.dense = 1;
    CHECK(cg_conv_validate(&bad, size, err, sizeof err) != 0 && strstr(err, "dense"));
    cg_conv_sizes(&d, size);
    bad = d, bad.dense = 1;
    CHECK(cg_conv_validate(&bad, size, err, sizeof err) == 0);
    bad.dense = 2;
    CHECK(cg_conv_validate(&bad, size, err, sizeof err) != 0 && strstr(err, "dense"));
    bad.dense = 1, bad.type_x = IR_BF16;
    CHECK(cg_conv_validate(&bad, size, err, sizeof err) != 0 && strstr(err, "dense"));
}

/* A plan of cnn_small with --conv library: its programs carry conv calls
 * with their alternative, survive serialisation, and a forged descriptor
 * is refused by the check against the graph. */
TEST(programs_carry_conv_calls) {
    char err[512];
    pass_options o = pass_default_options();
    ir_graph *g = fx_model_graph("models/cnn_small.net", 4, 1, &o, err, sizeof err);
    CHECK(g != NULL);
    if (!g) return;
    CHECK(pass_conv(&g, PASS_CONV_LIBRARY, err, sizeof err) == 0);
    CHECK(ir_verify(g, err, sizeof err) == 0);
    cg_program *p = cg_generate(g, CG_DIALECT_C, NULL, err, sizeof err);
    CHECK(p != NULL);
    if (!p) {
        ir_free(g);
        return;
    }
    int convs = 0, dirs[3] = {0};
    for (int c = 0; c < p->ncalls; c++)
        if (p->calls[c].kind == CG_CALL_CONV) {
            convs++;
            dirs[p->calls[c].conv.dir]++;
            CHECK(p->calls[c].conv.nalt >= 1);
        }
    CHECK(convs >= 3 && dirs[0] >= 1 && dirs[1] >= 1 && dirs[2] >= 1);
    CHECK(cg_program_check(p, g, err, sizeof err) == 0);
    unsigned char *bytes;
    size_t len;
    CHECK(cg_program_serialize(p, &bytes, &len) == 0);
    cg_program *q = cg_program_parse(bytes, len, err, sizeof err);
    char what[256];
    CHECK(q && !cg_program_diff(q, p, what, sizeof what));
    int c = 0;
    while (c < q->ncalls && q->calls[c].kind != CG_CALL_CONV) c++;
    q->calls[c].conv.N++; /* forged: the tensors do not hold that */
    CHECK(cg_program_check(q, g, err, sizeof err) != 0 && strstr(err, "conv"));
    CHECK(cg_program_diff(q, p, what, sizeof what) && strstr(what, "convolution"));
    q->calls[c].conv.N--;
    q->calls[c].conv.nalt = 100000; /* its alternative past the step */
    unsigned char *b2;
    size_t l2;
    CHECK(cg_program_serialize(q, &b2, &l2) == 0);
    cg_program *r = cg_program_parse(b2, l2, err, sizeof err);
    CHECK(!r && strstr(err, "alternative"));
    free(b2);
    free(bytes);
    cg_program_free(q);
    cg_program_free(p);
    /* the flag on an op a library cannot take is refused */
    int dense = 0;
    while (dense < g->n && g->nodes[dense].op != IR_OP_DENSE) dense++;
    if (dense < g->n) {
        g->nodes[dense].flags |= IR_FLAG_CONV_LIB;
        CHECK(ir_verify(g, err, sizeof err) != 0 && strstr(err, "libconv"));
    }
    ir_free(g);
}

/* Two steps and an eval batch of a model, --conv library and --conv dense
 * against im2col, each tensor within F32_REORDER_TOL of its largest value
 * (the rounding both share) plus ORDER_HEADROOM times the
 * floor measured in the same test: im2col again with every GEMM's k summed
 * in two halves. The library reorders its sums far more than that split
 * does: its difference was up to 6 times the floor's on OpenBLAS's Haswell,
 * SkylakeX and default kernels; 16 doubles that plus room. Bit for bit
 * with dense when the backend has no library (the alternative runs). */
#define ORDER_HEADROOM 16.0

static int close_snapshots(const pc_snapshot *a, const pc_snapshot *b, const pc_snapshot *noise) {
    if (a->n != b->n || a->n != noise->n || a->n < 10) {
        fprintf(stderr, "  %d vs %d tensors\n", a->n, b->n);
        return 0;
    }
    for (int i = 0; i < a->n; i++) {
        int k = 0;
        while (k < b->n && strcmp(a->name[i], b->name[k])) k++;
        if (k == b->n || a->bytes[i] != b->bytes[k] || strcmp(noise->name[k], b->name[k])) {
            fprintf(stderr, "  no matching %s\n", a->name[i]);
            return 0;
        }
        size_t n = a->bytes[i] / 4;
        double big = 0, worst = 0, measured = 0;
        for (size_t j = 0; j < n; j++) {
            double r = b->data[k][j], e = fabs(a->data[i][j] - r);
            big = fmax(big, fabs(r));
            measured = fmax(measured, fabs(noise->data[k][j] - r));
            if (e > worst || e != e) worst = e != e ? 1e30 : e;
        }
        double tol = F32_REORDER_TOL * big + ORDER_HEADROOM * measured;
        if (worst > tol) {
            fprintf(stderr, "  %s: off by %.3g of %.3g (tol %.3g, measured floor %.3g)\n",
                    a->name[i], worst, big, tol, measured);
            return 0;
        }
    }
    return 1;
}

#define PIPE "lower,autodiff,optimizer,partition,precision,conv(%s),fuse,memplan"

static void model_against_im2col(const char *model, int batch) {
    char on[160], off[160], dense[160];
    snprintf(on, sizeof on, PIPE, "library");
    snprintf(off, sizeof off, PIPE, "im2col");
    snprintf(dense, sizeof dense, PIPE, "dense");
    fe_program *fp = fe_parse_file(model);
    CHECK_MSG(fp != NULL, "%s", model);
    if (!fp) return;
    pc_snapshot ref = {0}, got = {0}, own = {0}, alt = {0}, noise = {0};
    rt_backend *lib = pc_backend;
    CHECK(pc_snapshot_program(fp, batch, off, &ref) == 0);
    rt_sum_order was = rt_cpu_set_sum_order(RT_SUM_ORDER_SPLIT_K);
    CHECK(pc_snapshot_program(fp, batch, off, &noise) == 0);
    rt_cpu_set_sum_order(was);
    CHECK(pc_snapshot_program(fp, batch, on, &got) == 0);
    CHECK_MSG(close_snapshots(&got, &ref, &noise), "%s: library vs im2col", model);
    CHECK(pc_snapshot_program(fp, batch, dense, &own) == 0);
    CHECK_MSG(close_snapshots(&own, &ref, &noise), "%s: dense vs im2col", model);
    rt_backend nolib = *lib;
    nolib.conv = NULL; /* every library call runs its alternative */
    pc_backend = &nolib;
    CHECK(pc_snapshot_program(fp, batch, on, &alt) == 0);
    pc_backend = lib;
    CHECK_MSG(pc_same_snapshot(&alt, &own, model, batch, on, dense), "%s: alternative", model);
    pc_snap_free(&ref), pc_snap_free(&got), pc_snap_free(&own), pc_snap_free(&alt);
    pc_snap_free(&noise);
    fe_free(fp);
}

TEST(models_against_im2col) {
    model_against_im2col("models/cnn_small.net", 4);
    model_against_im2col("tests/nets/se_small.net", 3);
    model_against_im2col("tests/nets/small_planes.net", 4);
}

int main(void) {
    pc_backend = rt_backend_cpu();
    RUN(descriptor_validation);
    RUN(library_matches_float64);
    RUN(bf16_matches_float64);
    RUN(wrong_stride_fails_the_tolerance);
    RUN(thread_count_does_not_change_bits);
    RUN(programs_carry_conv_calls);
    RUN(models_against_im2col);
    rt_backend_free(pc_backend);
    return harness_done();
}
