/* tests/unit/test_cuda.c — the cuda backend as far as a machine without a
 * GPU can check it: backend selection (`cuda` refused with a clear message,
 * `auto` falling back with one notice), the dlopen loaders (every driver
 * entry point resolves against the toolkit's stub libcuda; cuBLAS and NCCL
 * load and answer their version), NVRTC's target choice and disk cache,
 * and the cg_gemm -> cublasSgemmStridedBatched argument mapping, both as
 * expected values for ResNet-18's shapes and executed with cuBLAS's
 * documented semantics against the cpu backend's cblas on every GEMM of
 * the models.
 *
 *     test_cuda                      the unit tests
 *     test_cuda --plans [--arch sm_XX] PLAN...
 *                                    compile every program of each plan's
 *                                    KCUD section with NVRTC for sm_80 and
 *                                    sm_90, or the one arch named, and
 *                                    check each kernel's resources against
 *                                    its block; a `res` line per kernel
 *                                    (tests/nvrtc_test.sh)
 */
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "codegen/codegen.h"
#include "format/tf32.h"
#include "frontend/frontend.h"
#include "format/plan.h"
#include "passes/passes.h"
#include "runtime/device/device.h"
#include "runtime/cuda/cuda.h"
#include "runtime/cuda/nvrtc.h"
#include "runtime/data/data.h"
#include "tests/harness.h"

#ifdef DPC_HAVE_CUDA
#include "runtime/cuda/loader.h"
#endif

static char err[8192];
static int have_device; /* set once: this machine has a usable CUDA device */

/* ---- helpers ------------------------------------------------------------------ */

/* Runs fn with stderr going to a file; returns what it printed (malloc'd). */
static char *capture_stderr(void (*fn)(void *), void *arg) {
    char path[] = "/tmp/dpc-test-cuda-XXXXXX";
    int fd = mkstemp(path);
    if (fd < 0) return NULL;
    fflush(stderr);
    int saved = dup(2);
    dup2(fd, 2);
    fn(arg);
    fflush(stderr);
    dup2(saved, 2);
    close(saved);
    off_t n = lseek(fd, 0, SEEK_END);
    char *out = malloc((size_t)n + 1);
    if (out) {
        lseek(fd, 0, SEEK_SET);
        ssize_t r = read(fd, out, (size_t)n);
        out[r > 0 ? r : 0] = 0;
    }
    close(fd);
    unlink(path);
    return out;
}

static int count_lines(const char *s) {
    int n = 0;
    for (; s && *s; s++) n += *s == '\n';
    return n;
}

#include "tests/fixture.h" /* here, not above: those includes are the cuda room's */

/* A model's train (training = 1) or eval graph after the passes. */
static ir_graph *model_graph(const char *path, int batch, int training, int fuse) {
    pass_options o = pass_default_options();
    o.fuse = fuse;
    return fx_model_graph(path, batch, training, &o, err, sizeof err);
}

/* ---- selection ------------------------------------------------------------------ */

TEST(open_cpu) {
    int fb = -1;
    rt_backend *be = rt_backend_open("cpu", &fb, err, sizeof err);
    CHECK(be != NULL);
    if (!be) return;
    CHECK_STR(be->name, "cpu");
    CHECK(fb == 0);
    rt_backend_free(be);
}

TEST(open_refuses_unknown_device) {
    rt_backend *be = rt_backend_open("tpu", NULL, err, sizeof err);
    CHECK(be == NULL);
    CHECK_MSG(strstr(err, "'tpu'") && strstr(err, "auto, cpu, cuda"), "%s", err);
}

/* Without a driver (this machine, CI) `cuda` names the reason; with one,
 * it opens the device. */
TEST(open_cuda) {
    char why[512] = "";
    int n = rt_cuda_device_count(why, sizeof why);
    have_device = n > 0;
    rt_backend *be = rt_backend_open("cuda", NULL, err, sizeof err);
    if (have_device) {
        CHECK_MSG(be != NULL, "%s", err);
        if (be) CHECK_STR(be->name, "cuda");
        rt_backend_free(be);
        return;
    }
    CHECK(be == NULL);
    CHECK_MSG(!strncmp(err, "--device cuda: no CUDA device (", 31), "%s", err);
    CHECK_MSG(strstr(err, why) != NULL, "'%s' lacks the reason '%s'", err, why);
    if (rt_cuda_compiled()) /* the loader says which library it could not load */
        CHECK_MSG(strstr(err, "libcuda") || strstr(err, "cuInit") || getenv("DPC_LIBCUDA"), "%s",
                  err);
    else
        CHECK_MSG(strstr(err, "CUDA=0") != NULL, "%s", err);
    /* The backend constructor says the same on its own. */
    CHECK(rt_backend_cuda(0, err, sizeof err) == NULL);
    CHECK(err[0] != 0);
}

typedef struct {
    rt_backend *be[2];
    int fb[2];
} auto_run;

static void open_auto_twice(void *arg) {
    auto_run *r = arg;
    for (int i = 0; i < 2; i++) r->be[i] = rt_backend_open("auto", &r->fb[i], err, sizeof err);
}

/* Without a GPU, auto falls back to the cpu and says why once per process
 * (here under DPC_DEBUG=1: a machine without a driver is otherwise quiet). */
TEST(auto_falls_back_with_one_notice) {
    auto_run r = {{NULL, NULL}, {-1, -1}};
    setenv("DPC_DEBUG", "1", 1);
    char *out = capture_stderr(open_auto_twice, &r);
    unsetenv("DPC_DEBUG");
    CHECK(r.be[0] && r.be[1]);
    if (have_device) {
        CHECK(r.be[0] && !strcmp(r.be[0]->name, "cuda") && r.fb[0] == 0);
    } else {
        for (int i = 0; i < 2; i++) {
            CHECK(r.be[i] && !strcmp(r.be[i]->name, "cpu"));
            CHECK(r.fb[i] == 1);
        }
        CHECK_MSG(count_lines(out) == 1, "stderr was:\n%s", out ? out : "");
        CHECK_MSG(out && !strncmp(out, "dpc: no CUDA device (", 21) &&
                      strstr(out, "): using the cpu backend\n"),
                  "%s", out ? out : "");
    }
    free(out);
    rt_backend_free(r.be[0]);
    rt_backend_free(r.be[1]);
}

TEST(graph_api_needs_cuda) {
    rt_backend *be = rt_backend_cpu();
    CHECK(rt_cuda_graph_begin(be, err, sizeof err) == -1);
    CHECK_MSG(strcasestr(err, "cuda") != NULL, "%s", err);
    CHECK(rt_cuda_graph_end(be, err, sizeof err) == NULL);
    rt_cuda_stats s;
    CHECK(rt_cuda_stats_get(be, &s) == -1);
    CHECK(!rt_backend_is_cuda(be));
    rt_backend_free(be);
}

/* ---- GEMM descriptors to cuBLAS -------------------------------------------------
 * Expected argument lists, derived by hand from row-major algebra: a
 * row-major X[r][c] is the column-major (c x r) matrix with ld c. So
 *   conv forward   out[K][nbP] = W[K][CKK] · col[CKK][nbP]
 *                  -> C(nbP x K) = col(nbP x CKK) · W(CKK x K): N, N
 *   grad data      col[CKK][nbP] = Wᵀ · dy[K][nbP]
 *                  -> C(nbP x CKK) = dy(nbP x K) · (stored W)ᵀ: N, T
 *   grad weight    dW[K][CKK] = dy[K][nbP] · colᵀ
 *                  -> C(CKK x K) = (stored col)ᵀ · dy(nbP x K): T, N
 *   dense          y[N][U] = x[N][F] · wᵀ -> C(U x N) = (stored w)ᵀ · x: T, N */

static void expect_args(const cg_gemm *d, int ta, int tb, int64_t m, int64_t n, int64_t k,
                        int64_t lda, int64_t ldb, int64_t ldc, const char *what) {
    rt_sgemm_args a;
    int rc = rt_cublas_sgemm_args(d, &a, err, sizeof err);
    CHECK_MSG(rc == 0, "%s: %s", what, err);
    CHECK_MSG(a.transa == ta && a.transb == tb, "%s: trans %d %d", what, a.transa, a.transb);
    CHECK_MSG(a.m == m && a.n == n && a.k == k, "%s: m n k = %d %d %d, want %lld %lld %lld", what,
              a.m, a.n, a.k, (long long)m, (long long)n, (long long)k);
    CHECK_MSG(a.lda == lda && a.ldb == ldb && a.ldc == ldc, "%s: ld %d %d %d, want %lld %lld %lld",
              what, a.lda, a.ldb, a.ldc, (long long)lda, (long long)ldb, (long long)ldc);
    CHECK_MSG(a.batch == 1 && a.stride_a == 0 && a.stride_b == 0 && a.stride_c == 0,
              "%s: batch %d strides %lld %lld %lld", what, a.batch, a.stride_a, a.stride_b,
              a.stride_c);
    CHECK(a.alpha == d->alpha && a.beta == d->beta);
    CHECK(a.off_a == d->off_a && a.off_b == d->off_b && a.off_c == d->off_c);
}

/* Is there a GEMM call with these sizes in p? */
static int program_has(const cg_program *p, int ta, int tb, int64_t m, int64_t n, int64_t k) {
    for (int c = 0; c < p->ncalls; c++) {
        const cg_gemm *d = &p->calls[c].gemm;
        if (p->calls[c].kind == CG_CALL_GEMM && d->transa == ta && d->transb == tb && d->m == m &&
            d->n == n && d->k == k)
            return 1;
    }
    return 0;
}

TEST(sgemm_args_for_resnet18_shapes) {
    ir_graph *g = model_graph("models/resnet18.net", 128, 1, 1);
    CHECK(g != NULL);
    if (!g) return;
    cg_program *p = cg_generate(g, CG_DIALECT_CUDA, NULL, err, sizeof err);
    CHECK_MSG(p != NULL, "%s", err);
    size_t max = cg_default_options().scratch_max_bytes;
    /* The stem (7x7/2, 3 -> 64 at 32x32), a stage-2 3x3 conv, the 1x1/2
     * shortcut into stage 3, a stage-4 3x3 conv. */
    const cg_conv_shape convs[] = {
        {128, 3, 32, 32, 64, 7, 2, 3, 16, 16},
        {128, 128, 4, 4, 128, 3, 1, 1, 4, 4},
        {128, 128, 4, 4, 256, 1, 2, 0, 2, 2},
        {128, 512, 1, 1, 512, 3, 1, 1, 1, 1},
    };
    for (size_t i = 0; i < sizeof convs / sizeof *convs; i++) {
        const cg_conv_shape *c = &convs[i];
        int64_t nb = cg_conv_chunk(c, max), np = nb * c->Ho * c->Wo, ckk = c->C * c->k * c->k;
        char what[64];
        snprintf(what, sizeof what, "conv %zu forward", i);
        cg_gemm f = cg_gemm_conv_forward(c, nb, 0, cg_conv_col_elems(c, nb));
        expect_args(&f, 0, 0, np, c->K, ckk, np, ckk, np, what);
        snprintf(what, sizeof what, "conv %zu grad data", i);
        cg_gemm gd = cg_gemm_conv_grad_data(c, nb, cg_conv_col_elems(c, nb), 0);
        expect_args(&gd, 0, 1, np, ckk, c->K, np, ckk, np, what);
        snprintf(what, sizeof what, "conv %zu grad weight", i);
        cg_gemm gw = cg_gemm_conv_grad_weight(c, nb, 0, cg_conv_col_elems(c, nb), i & 1);
        expect_args(&gw, 1, 0, ckk, c->K, np, np, np, ckk, what);
        CHECK(gw.beta == (float)(i & 1));
        if (p) {
            CHECK_MSG(program_has(p, 0, 0, np, c->K, ckk), "resnet18 lacks %s", "the forward");
            CHECK_MSG(program_has(p, 1, 0, ckk, c->K, np), "resnet18 lacks %s", "the weight grad");
            if (i) /* the stem's input needs no gradient */
                CHECK_MSG(program_has(p, 0, 1, np, ckk, c->K), "resnet18 lacks %s",
                          "the data grad");
        }
    }
    cg_gemm dn = cg_gemm_dense(128, 512, 10);
    expect_args(&dn, 1, 0, 10, 128, 512, 512, 512, 10, "dense");
    cg_gemm dd = cg_gemm_dense_grad_data(128, 512, 10);
    expect_args(&dd, 0, 0, 512, 128, 10, 512, 10, 512, "dense grad data");
    cg_gemm dw = cg_gemm_dense_grad_weight(128, 512, 10);
    expect_args(&dw, 0, 1, 512, 10, 128, 512, 10, 512, "dense grad weight");
    if (p) CHECK(program_has(p, 1, 0, 10, 128, 512));
    cg_program_free(p);
    ir_free(g);
}

TEST(sgemm_args_refuse_what_cublas_refuses) {
    cg_gemm ok = cg_gemm_dense(4, 8, 3);
    rt_sgemm_args a;
    CHECK(rt_cublas_sgemm_args(&ok, &a, err, sizeof err) == 0);
    cg_gemm d = ok;
    d.transa = 2;
    CHECK(rt_cublas_sgemm_args(&d, &a, err, sizeof err) == -1);
    d = ok;
    d.lda = d.k - 1; /* transa: A is stored k x m */
    CHECK(rt_cublas_sgemm_args(&d, &a, err, sizeof err) == -1 && strstr(err, "lda"));
    d = ok;
    d.ldc = d.m - 1;
    CHECK(rt_cublas_sgemm_args(&d, &a, err, sizeof err) == -1 && strstr(err, "ldc"));
    d = ok;
    d.m = (int64_t)INT_MAX + 1;
    d.ldc = d.m;
    CHECK(rt_cublas_sgemm_args(&d, &a, err, sizeof err) == -1);
    d = ok;
    d.batch = 3;
    d.stride_c = d.ldc * d.n - 1; /* entries of C would overlap */
    CHECK(rt_cublas_sgemm_args(&d, &a, err, sizeof err) == -1);
    d.stride_c = d.ldc * d.n;
    d.stride_a = 0; /* a shared operand is fine */
    CHECK(rt_cublas_sgemm_args(&d, &a, err, sizeof err) == 0);
    CHECK(a.batch == 3 && a.stride_a == 0 && a.stride_c == d.ldc * d.n);
}

/* cublasSgemmStridedBatched as its documentation defines it, executed on
 * the host: for each p, C_p = alpha op(A_p) op(B_p) + beta C_p with X_p =
 * X + p * strideX, column-major, op(X)(i, j) = X[j + i * ld] when
 * transposed, X[i + j * ld] otherwise; beta == 0 never reads C. */
static void cublas_semantics(const rt_sgemm_args *a, const float *A, const float *B, float *C) {
    A += a->off_a, B += a->off_b, C += a->off_c;
    /* op(A) and op(B) gathered by the definition above into rows of k, so
     * the inner product runs over contiguous memory. */
    float *pa = malloc(sizeof(float) * (size_t)a->m * (size_t)a->k + 1);
    float *pb = malloc(sizeof(float) * (size_t)a->n * (size_t)a->k + 1);
    if (!pa || !pb) abort();
    for (int p = 0; p < a->batch; p++) {
        const float *Ap = A + p * a->stride_a, *Bp = B + p * a->stride_b;
        float *Cp = C + p * a->stride_c;
        for (int i = 0; i < a->m; i++)
            for (int l = 0; l < a->k; l++)
                pa[(int64_t)i * a->k + l] =
                    a->transa ? Ap[l + (int64_t)i * a->lda] : Ap[i + (int64_t)l * a->lda];
        for (int j = 0; j < a->n; j++)
            for (int l = 0; l < a->k; l++)
                pb[(int64_t)j * a->k + l] =
                    a->transb ? Bp[j + (int64_t)l * a->ldb] : Bp[l + (int64_t)j * a->ldb];
        for (int j = 0; j < a->n; j++)
            for (int i = 0; i < a->m; i++) {
                const float *x = pa + (int64_t)i * a->k, *y = pb + (int64_t)j * a->k;
                double s = 0;
                for (int l = 0; l < a->k; l++) s += (double)x[l] * y[l];
                float *c = &Cp[i + (int64_t)j * a->ldc];
                *c = a->beta == 0 ? (float)(a->alpha * s) : (float)(a->alpha * s + a->beta * *c);
            }
    }
    free(pa);
    free(pb);
}

/* Every GEMM call of a program, on random operands: the cpu backend's
 * cblas interpretation of the descriptor and cuBLAS's of the mapped
 * arguments agree. Operands that share a buffer (A and C in the scratch
 * area) share it in both runs. Returns the number of calls compared. */
static int compare_gemms(rt_backend *cpu, const cg_program *p, const ir_graph *g, double *worst) {
    int compared = 0;
    rt_rng rng;
    rt_rng_seed(&rng, 7);
    for (int si = 0; si < p->nsteps; si++) {
        const cg_step *s = &p->steps[si];
        for (int ci = s->first_call; ci < s->first_call + s->ncalls; ci++) {
            const cg_call *c = &p->calls[ci];
            if (c->kind != CG_CALL_GEMM) continue;
            rt_sgemm_args a;
            if (rt_cublas_sgemm_args(&c->gemm, &a, err, sizeof err)) {
                CHECK_MSG(0, "step %d: %s", si, err);
                continue;
            }
            /* One array per distinct slot, twice over, as long as the
             * furthest element an operand in it reaches (the scratch area
             * is far larger than one GEMM's part of it). */
            const int64_t rows[3] = {a.transa ? a.k : a.m, a.transb ? a.n : a.k, a.m};
            const int64_t cols[3] = {a.transa ? a.m : a.k, a.transb ? a.k : a.n, a.n};
            const int64_t ld[3] = {a.lda, a.ldb, a.ldc}, off[3] = {a.off_a, a.off_b, a.off_c};
            const int64_t stride[3] = {a.stride_a, a.stride_b, a.stride_c};
            float *mine[3], *ref[3];
            int64_t size[3], reach[3];
            for (int j = 0; j < 3; j++)
                reach[j] = off[j] + (a.batch - 1) * stride[j] + (cols[j] - 1) * ld[j] + rows[j];
            for (int j = 0; j < 3; j++) {
                int same = -1;
                for (int q = 0; q < j; q++)
                    if (c->arg[q] == c->arg[j]) same = q;
                size[j] = 0;
                for (int q = 0; q < 3; q++)
                    if (c->arg[q] == c->arg[j] && reach[q] > size[j]) size[j] = reach[q];
                CHECK(size[j] <= cg_slot_size(p, g, s, c->arg[j]));
                if (same >= 0) {
                    mine[j] = mine[same], ref[j] = ref[same];
                    continue;
                }
                mine[j] = malloc(sizeof(float) * (size_t)size[j]);
                ref[j] = malloc(sizeof(float) * (size_t)size[j]);
                for (int64_t e = 0; e < size[j]; e++)
                    mine[j][e] = ref[j][e] = (float)(rt_rng_uniform(&rng) * 2 - 1);
            }
            CHECK(cpu->gemm(cpu, &c->gemm, ref[0], ref[1], ref[2], err, sizeof err) == 0);
            cublas_semantics(&a, mine[0], mine[1], mine[2]);
            /* The whole C buffer: the product where it goes, nothing
             * changed anywhere else. Tolerance: two fp32 sums of k terms
             * in [-1, 1] in other orders, each within k * 2^-24 * sum |ab|
             * (about k / 4) at worst, random-signed roundings sqrt(k) of
             * that: 1e-5 * k = 168 k * 2^-24 lies between for every k here. */
            double tol = 1e-5 * (a.k + 10);
            for (int64_t e = 0; e < size[2]; e++) {
                double d = mine[2][e] - ref[2][e];
                if (d < 0) d = -d;
                if (d > *worst) *worst = d;
                if (d > tol) {
                    CHECK_MSG(0, "step %d (%s) gemm %c%c %dx%dx%d: element %lld differs by %g", si,
                              ir_ops[s->op].name, a.transa ? 'T' : 'N', a.transb ? 'T' : 'N', a.m,
                              a.n, a.k, (long long)e, d);
                    break;
                }
            }
            for (int j = 0; j < 3; j++) {
                int same = 0;
                for (int q = 0; q < j; q++) same |= c->arg[q] == c->arg[j];
                if (!same) free(mine[j]), free(ref[j]);
            }
            compared++;
        }
    }
    return compared;
}

TEST(sgemm_args_execute_like_cblas_on_every_model_gemm) {
    static const char *const models[] = {"models/resnet18.net", "models/resnet18_cifar.net",
                                         "models/cnn_small.net", "models/mlp.net"};
    /* Every layer's shape kind at a size a naive product checks in seconds:
     * one image where that allows batch statistics everywhere (chunks are
     * whole images, so it is one chunk); resnet18 ends at 1x1 and needs 2. */
    static const int batch[] = {2, 1, 2, 2};
    rt_backend *cpu = rt_backend_cpu();
    int total = 0;
    double worst = 0;
    for (size_t m = 0; m < sizeof models / sizeof *models; m++)
        for (int training = 1; training >= 0; training--) {
            ir_graph *g = model_graph(models[m], batch[m], training, 1);
            CHECK_MSG(g != NULL, "%s", models[m]);
            if (!g) continue;
            cg_program *p = cg_generate(g, CG_DIALECT_CUDA, NULL, err, sizeof err);
            CHECK_MSG(p != NULL, "%s: %s", models[m], err);
            if (p) {
                int n = compare_gemms(cpu, p, g, &worst);
                CHECK_MSG(n > 0, "%s has no GEMM", models[m]);
                total += n;
            }
            cg_program_free(p);
            ir_free(g);
        }
    fprintf(stderr, "  %d GEMM calls compared, worst difference %.3g\n", total, worst);
    rt_backend_free(cpu);
}

/* ---- TF32 (--precision tf32) -----------------------------------------------------
 * The rounding (format/tf32.h) at its edges, and the cpu backend's TF32
 * GEMM against the definition: cuBLAS's semantics on operands rounded to
 * TF32. The error bound against fp32 is the one docs/DESIGN.md states:
 * per element at most (2^-10 + K 2^-24) sum |a_k b_k|. */

static float bits_f(unsigned u) {
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

TEST(tf32_rounds_to_nearest_even) {
    const float one = 1.0f, ulp = 0x1p-10f; /* TF32's ulp at 1 */
    CHECK(dpc_f32_round_tf32(one) == one);
    CHECK(dpc_f32_round_tf32(one + ulp) == one + ulp);
    CHECK(dpc_f32_round_tf32(one + ulp / 2) == one);                  /* tie: to even */
    CHECK(dpc_f32_round_tf32(one + 3 * ulp / 2) == one + 2 * ulp);    /* tie: to even */
    CHECK(dpc_f32_round_tf32(one + ulp / 2 + 0x1p-23f) == one + ulp); /* past the tie */
    CHECK(dpc_f32_round_tf32(one + ulp / 2 - 0x1p-23f) == one);
    CHECK(dpc_f32_round_tf32(-(one + 3 * ulp / 2)) == -(one + 2 * ulp));
    CHECK(dpc_f32_round_tf32(0x1p-130f) == 0x1p-130f);     /* subnormals keep 10 bits' steps */
    CHECK(dpc_f32_round_tf32(0x1p-140f) == 0);             /* under half of 2^-136 */
    CHECK(isinf(dpc_f32_round_tf32(bits_f(0x7f7fffffu)))); /* the largest float carries */
    CHECK(dpc_f32_round_tf32(bits_f(0x7f7fe000u)) == bits_f(0x7f7fe000u)); /* largest TF32 */
    CHECK(isinf(dpc_f32_round_tf32(INFINITY)) && isnan(dpc_f32_round_tf32(NAN)));
    /* every result has its low 13 bits clear, and is the nearer neighbour */
    rt_rng rng;
    rt_rng_seed(&rng, 3);
    for (int i = 0; i < 100000; i++) {
        float x = (float)((rt_rng_uniform(&rng) * 2 - 1) * 1000);
        float r = dpc_f32_round_tf32(x);
        unsigned u;
        memcpy(&u, &r, sizeof u);
        if ((u & 0x1fffu) || fabs((double)r - x) > fabs((double)x) * 0x1p-11) {
            CHECK_MSG(0, "%.9g -> %.9g", x, r);
            break;
        }
    }
}

/* The largest |c - ref| / sum |a_k b_k| over C's elements, ref in double. */
static double gemm_rel_err(const rt_sgemm_args *a, const float *A, const float *B, const float *C,
                           const float *ref) {
    double worst = 0;
    for (int j = 0; j < a->n; j++)
        for (int i = 0; i < a->m; i++) {
            double s = 0;
            for (int l = 0; l < a->k; l++) {
                float x = a->transa ? A[l + (int64_t)i * a->lda] : A[i + (int64_t)l * a->lda];
                float y = a->transb ? B[j + (int64_t)l * a->ldb] : B[l + (int64_t)j * a->ldb];
                s += fabs((double)x * y);
            }
            double d = fabs((double)C[i + (int64_t)j * a->ldc] - ref[i + (int64_t)j * a->ldc]);
            if (s > 0 && d / s > worst) worst = d / s;
        }
    return worst;
}

/* y[N,U] = x[N,F] w[U,F]^T on the cpu backend, fp32 and tf32, against
 * cuBLAS's definition in double on the original and on rounded operands. */
TEST(tf32_gemm_on_the_cpu_rounds_its_operands) {
    rt_backend *cpu = rt_backend_cpu();
    const int64_t N = 48, U = 40, Fs[] = {16, 300, 4096};
    for (size_t t = 0; t < sizeof Fs / sizeof *Fs; t++) {
        int64_t F = Fs[t];
        cg_gemm d = cg_gemm_dense(N, F, U);
        rt_sgemm_args a;
        CHECK(rt_cublas_sgemm_args(&d, &a, err, sizeof err) == 0);
        float *x = malloc(sizeof(float) * (size_t)(N * F)),
              *w = malloc(sizeof(float) * (size_t)(U * F));
        float *xr = malloc(sizeof(float) * (size_t)(N * F)),
              *wr = malloc(sizeof(float) * (size_t)(U * F));
        float *y32 = calloc((size_t)(N * U), sizeof(float)),
              *y19 = calloc((size_t)(N * U), sizeof(float));
        float *ref = calloc((size_t)(N * U), sizeof(float)),
              *refr = calloc((size_t)(N * U), sizeof(float));
        rt_rng rng;
        rt_rng_seed(&rng, 11 + (uint64_t)t);
        for (int64_t i = 0; i < N * F; i++)
            xr[i] = dpc_f32_round_tf32(x[i] = (float)(rt_rng_uniform(&rng) * 2 - 1));
        for (int64_t i = 0; i < U * F; i++)
            wr[i] = dpc_f32_round_tf32(w[i] = (float)(rt_rng_uniform(&rng) * 2 - 1));
        cublas_semantics(&a, w, x, ref);
        cublas_semantics(&a, wr, xr, refr);
        CHECK(cpu->gemm(cpu, &d, w, x, y32, err, sizeof err) == 0);
        d.tf32 = 1;
        CHECK(cpu->gemm(cpu, &d, w, x, y19, err, sizeof err) == 0);
        double noise = (double)F * 0x1p-24, bound = 0x1p-10 + noise;
        double e32 = gemm_rel_err(&a, w, x, y32, ref), e19 = gemm_rel_err(&a, w, x, y19, ref);
        double e19r = gemm_rel_err(&a, w, x, y19, refr);
        fprintf(stderr, "  K=%lld: fp32 %.3g, tf32 %.3g (bound %.3g), tf32 vs rounded %.3g\n",
                (long long)F, e32, e19, bound, e19r);
        CHECK(e32 <= noise);
        CHECK_MSG(e19 > 8 * e32 && e19 > 0x1p-20 && e19 <= bound, "K=%lld: tf32 error %.3g",
                  (long long)F, e19);
        CHECK(e19r <= noise); /* exactly the rounded operands' product */
        free(x), free(w), free(xr), free(wr), free(y32), free(y19), free(ref), free(refr);
    }
    rt_backend_free(cpu);
}

/* ---- resources: could each kernel launch at the block dpc gives it? -----------
 * ptxas's report (rt_nvrtc_compile_report) against what sm_80 and sm_90
 * allow a block (CUDA C Programming Guide, "Compute Capabilities"): at most
 * 1024 threads; 64K 32-bit registers, allocated per warp in units of 256
 * (a thread's count rounded up to 8), at most 255 a thread; static shared
 * memory at most 48 KiB, and static plus dynamic too, since dpc never opts
 * a kernel into more (CG_MAX_SHARED; the opt-in limits, 163 KiB on sm_80
 * and 227 KiB on sm_90, do not apply). The block is the calls' recorded
 * geometry (codegen's cg_launch_for), and the kernel must carry
 * __launch_bounds__ of it, so ptxas caps its registers to fit. */

enum { RES_REGS_PER_BLOCK = 65536, RES_REG_UNIT = 8, RES_MAX_REGS = 255 };

typedef struct {
    char name[CG_NAME_MAX];
    int regs;
    long smem, stack, spill; /* bytes: static shared, stack frame, spill stores */
} kres;

/* The report's entry for each kernel, in order; returns how many (at most
 * max), or -1 + why when a line names an architecture other than arch. */
static int res_parse(const char *log, const char *arch, kres *out, int max, char *why, size_t n) {
    int cnt = 0;
    kres *cur = NULL;
    for (const char *l = log; l && *l;) {
        const char *e = strchr(l, '\n');
        size_t len = e ? (size_t)(e - l) : strlen(l);
        char line[512];
        snprintf(line, sizeof line, "%.*s", (int)(len < sizeof line ? len : sizeof line - 1), l);
        l = e ? e + 1 : l + len;
        const char *q;
        if ((q = strstr(line, "Compiling entry function '"))) {
            q += strlen("Compiling entry function '");
            const char *end = strchr(q, '\'');
            const char *a = end ? strstr(end, "for '") : NULL;
            if (a && strncmp(a + 5, arch, strlen(arch))) {
                snprintf(why, n, "the report is for another architecture: %.160s", line);
                return -1;
            }
            cur = NULL;
            if (end && cnt < max) {
                cur = &out[cnt++];
                memset(cur, 0, sizeof *cur);
                cur->regs = -1;
                snprintf(cur->name, sizeof cur->name, "%.*s", (int)(end - q), q);
            }
        } else if (cur && (q = strstr(line, "bytes stack frame"))) {
            sscanf(strstr(line, ".") + 1, "%ld", &cur->stack);
            if ((q = strstr(line, "bytes spill stores"))) {
                while (q > line && q[-1] == ' ') q--;
                while (q > line && q[-1] >= '0' && q[-1] <= '9') q--;
                sscanf(q, "%ld", &cur->spill);
            }
        } else if (cur && (q = strstr(line, "Used "))) {
            if (sscanf(q, "Used %d registers", &cur->regs) != 1) cur->regs = -1;
            if ((q = strstr(line, " bytes smem"))) {
                while (q > line && q[-1] >= '0' && q[-1] <= '9') q--;
                sscanf(q, "%ld", &cur->smem);
            }
        }
    }
    return cnt;
}

/* Why a kernel of r's resources cannot launch with block threads and
 * dynamic bytes of dynamic shared memory, or NULL when it can. */
static const char *res_refusal(const kres *r, unsigned block, unsigned dynamic, char *why,
                               size_t n) {
    long regs = (r->regs + RES_REG_UNIT - 1) / RES_REG_UNIT * RES_REG_UNIT;
    if (r->regs < 0)
        snprintf(why, n, "no register count in the report");
    else if (block < 1 || block > CG_MAX_BLOCK)
        snprintf(why, n, "block of %u threads (at most %u)", block, CG_MAX_BLOCK);
    else if (r->regs > RES_MAX_REGS)
        snprintf(why, n, "%d registers a thread (at most %d)", r->regs, RES_MAX_REGS);
    else if (regs * block > RES_REGS_PER_BLOCK)
        snprintf(why, n, "%d registers (allocated %ld) x %u threads = %ld > %d", r->regs, regs,
                 block, regs * block, RES_REGS_PER_BLOCK);
    else if (r->smem + (long)dynamic > (long)CG_MAX_SHARED)
        snprintf(why, n, "%ld bytes static + %u dynamic shared memory > %u", r->smem, dynamic,
                 CG_MAX_SHARED);
    else
        return NULL;
    return why;
}

/* Checks every kernel of p against the report of its compile for arch:
 * its block (the calls'; all calls of a kernel launch the same block),
 * its __launch_bounds__ in the source, its resources. Prints a table line
 * per kernel ("res ARCH BLOCK REGS SMEM SPILL USE% KERNEL WHERE", USE% the
 * share of the block's register file) to out, a line per failure to out
 * too; returns the number of kernels that fail. */
static int res_check_program(const cg_program *p, const char *arch, const char *report,
                             const char *where, FILE *out) {
    int bad = 0, nk = p->nkernels;
    kres *r = calloc((size_t)nk + 1, sizeof *r);
    unsigned *block = calloc((size_t)nk + 1, sizeof *block);
    unsigned *dyn = calloc((size_t)nk + 1, sizeof *dyn);
    if (!r || !block || !dyn) abort();
    char why[256];
    int nr = res_parse(report, arch, r, nk + 1, why, sizeof why);
    if (nr < 0) {
        fprintf(out, "FAIL %s %s: %s\n", where, arch, why);
        nk = 0, bad = 1;
    }
    for (int c = 0; c < p->ncalls; c++) {
        const cg_call *call = &p->calls[c];
        if (call->kind != CG_CALL_KERNEL) continue;
        unsigned *b = &block[call->kernel];
        if (*b && *b != call->launch.block && !bad++)
            fprintf(out, "FAIL %s %s: %s launched with blocks of %u and %u\n", where, arch,
                    p->kernels[call->kernel].name, *b, call->launch.block);
        if (call->launch.block > *b) *b = call->launch.block;
        if (call->launch.shared > dyn[call->kernel]) dyn[call->kernel] = call->launch.shared;
    }
    for (int k = 0; k < nk; k++) {
        const char *name = p->kernels[k].name;
        const kres *kr = NULL;
        for (int j = 0; j < nr && !kr; j++)
            if (!strcmp(r[j].name, name)) kr = &r[j];
        const char *no = NULL;
        char bound[CG_NAME_MAX + 48];
        size_t off, len;
        snprintf(bound, sizeof bound, "__launch_bounds__(%u) %s(", block[k], name);
        if (!kr)
            no = "not in ptxas's report";
        else if (!block[k])
            no = "never launched";
        else if (cg_kernel_source(p, k, &off, &len) ||
                 !memmem(p->source + off, len, bound, strlen(bound))) {
            snprintf(why, sizeof why, "its source lacks __launch_bounds__(%u)", block[k]);
            no = why;
        } else
            no = res_refusal(kr, block[k], dyn[k], why, sizeof why);
        if (kr) {
            long regs = (kr->regs + RES_REG_UNIT - 1) / RES_REG_UNIT * RES_REG_UNIT;
            fprintf(out, "res %-5s %5u %4d %6ld %5ld %5.1f%% %s %s\n", arch, block[k], kr->regs,
                    kr->smem + (long)dyn[k], kr->spill,
                    100.0 * (double)(regs * block[k]) / RES_REGS_PER_BLOCK, name, where);
        }
        if (no) {
            fprintf(out, "FAIL %s %s: %s (block %u): %s\n", where, arch, name, block[k], no);
            bad++;
        }
    }
    free(r);
    free(block);
    free(dyn);
    return bad;
}

/* A report as ptxas writes it, with regs registers and smem bytes for
 * kernel `heavy` and 16 registers for every other kernel of p. */
static char *fake_report(const cg_program *p, const char *arch, int heavy, int regs, long smem) {
    size_t cap = 512 * (size_t)(p->nkernels + 1), used = 0; /* an entry is < 400 */
    char *s = malloc(cap);
    if (!s) abort();
    s[0] = 0;
    for (int k = 0; k < p->nkernels; k++)
        used += (size_t)snprintf(
            s + used, cap - used,
            "ptxas info    : Compiling entry function '%s' for '%s'\n"
            "ptxas info    : Function properties for %s\n"
            "ptxas         .     0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads\n"
            "ptxas info    : Used %d registers, used 1 barriers, %ld bytes smem\n",
            p->kernels[k].name, arch, p->kernels[k].name, k == heavy ? regs : 16,
            k == heavy ? smem : 128);
    return s;
}

/* The check refuses what a GPU would refuse, on a real program and fake
 * reports: too many registers for the kernel's block (the bug ptxas's cap
 * from __launch_bounds__ prevents), too much shared memory, a kernel the
 * report misses, a source without __launch_bounds__. */
TEST(resource_check_refuses_what_the_gpu_refuses) {
    ir_graph *g = model_graph("models/resnet18.net", 128, 1, 1);
    cg_program *p = g ? cg_generate(g, CG_DIALECT_CUDA, NULL, err, sizeof err) : NULL;
    CHECK_MSG(p != NULL, "%s", err);
    if (!p) {
        ir_free(g);
        return;
    }
    /* the kernel with the largest block */
    int big = -1;
    unsigned bmax = 0;
    for (int c = 0; c < p->ncalls; c++)
        if (p->calls[c].kind == CG_CALL_KERNEL && p->calls[c].launch.block > bmax)
            bmax = p->calls[c].launch.block, big = p->calls[c].kernel;
    CHECK_MSG(bmax == 1024, "resnet18's largest block is %u", bmax);
    FILE *out = tmpfile();
    if (!out || big < 0) abort();
    char *rep = fake_report(p, "sm_90", big, 64, 4096);
    CHECK(res_check_program(p, "sm_90", rep, "ok", out) == 0); /* 64 x 1024 is the file */
    free(rep);
    rep = fake_report(p, "sm_90", big, 65, 0); /* 72 allocated */
    CHECK(res_check_program(p, "sm_90", rep, "regs", out) == 1);
    free(rep);
    rep = fake_report(p, "sm_90", big, 255, 0);
    CHECK(res_check_program(p, "sm_90", rep, "regs", out) == 1);
    free(rep);
    rep = fake_report(p, "sm_80", big, 32, 48 * 1024 + 4);
    CHECK(res_check_program(p, "sm_80", rep, "smem", out) == 1);
    CHECK(res_check_program(p, "sm_90", rep, "arch", out) == 1); /* another arch's report */
    free(rep);
    rep = fake_report(p, "sm_90", big, 32, 0);
    char *cut = strstr(rep, "ptxas info    : Compiling entry function 'k1_");
    if (cut) *cut = 0; /* kernels from k1 on missing */
    CHECK(cut && res_check_program(p, "sm_90", rep, "missing", out) == p->nkernels - 1);
    free(rep);
    /* a source without launch bounds (before dpc wrote them) */
    rep = fake_report(p, "sm_90", big, 32, 0);
    char *src = p->source, *lb;
    while ((lb = strstr(p->source, "__launch_bounds__(")))
        memmove(lb, strchr(lb, ')') + 2, strlen(strchr(lb, ')') + 2) + 1);
    CHECK(res_check_program(p, "sm_90", rep, "bounds", out) == p->nkernels);
    CHECK(p->source == src);
    free(rep);
    /* the table and the failures name the kernel, its block and the cause */
    rewind(out);
    char line[512];
    int fails = 0, rows = 0, named = 0;
    while (fgets(line, sizeof line, out)) {
        rows += !strncmp(line, "res ", 4);
        if (strncmp(line, "FAIL ", 5)) continue;
        fails++;
        if (strstr(line, " regs sm_90: ") && strstr(line, "(block 1024)") &&
            strstr(line, "x 1024 threads"))
            named++;
    }
    CHECK(rows == 5 * p->nkernels + 1);
    CHECK_MSG(named == 2, "%d register failures named", named);
    CHECK(fails == 2 + 1 + 1 + (p->nkernels - 1) + p->nkernels);
    fclose(out);
    cg_program_free(p);
    ir_free(g);
}

/* ---- NVRTC ----------------------------------------------------------------------- */

TEST(nvrtc_target_choice) {
    const int archs[] = {75, 80, 86, 87, 89, 90, 100, 120};
    char t[24];
    int ptx = -1;
    CHECK(rt_nvrtc_pick_target(90, archs, 8, t, sizeof t, &ptx, err, sizeof err) == 0);
    CHECK_STR(t, "sm_90");
    CHECK(ptx == 0);
    CHECK(rt_nvrtc_pick_target(80, archs, 8, t, sizeof t, &ptx, err, sizeof err) == 0);
    CHECK_STR(t, "sm_80");
    /* Newer than NVRTC knows: PTX of the newest it knows, JIT-compiled. */
    CHECK(rt_nvrtc_pick_target(130, archs, 8, t, sizeof t, &ptx, err, sizeof err) == 0);
    CHECK_STR(t, "compute_120");
    CHECK(ptx == 1);
    /* A variant between two listed ones runs the older one's PTX. */
    CHECK(rt_nvrtc_pick_target(103, archs, 8, t, sizeof t, &ptx, err, sizeof err) == 0);
    CHECK_STR(t, "compute_100");
    CHECK(rt_nvrtc_pick_target(70, archs, 8, t, sizeof t, &ptx, err, sizeof err) == -1);
    CHECK_MSG(strstr(err, "sm_70") && strstr(err, "sm_75"), "%s", err);
    CHECK(rt_nvrtc_pick_target(90, archs, 0, t, sizeof t, &ptx, err, sizeof err) == -1);
}

#ifdef DPC_HAVE_CUDA

/* Tests that compile with NVRTC skip where no libnvrtc is found. */
static int have_nvrtc(void) {
    char e[1024];
    if (!rt_nvrtc_load(e, sizeof e)) return 1;
    fprintf(stderr, "  (skipped: %s)\n", e);
    return 0;
}

TEST(nvrtc_knows_ampere_and_hopper) {
    if (!have_nvrtc()) return;
    int archs[64];
    int n = rt_nvrtc_archs(archs, 64);
    int has80 = 0, has90 = 0;
    for (int i = 0; i < n; i++) has80 |= archs[i] == 80, has90 |= archs[i] == 90;
    CHECK_MSG(has80 && has90, "NVRTC %s supports %d archs", rt_nvrtc_version(), n);
    CHECK(strcmp(rt_nvrtc_version(), "0.0") != 0);
}

static int file_exists(const char *path) {
    struct stat st;
    return stat(path, &st) == 0;
}

TEST(nvrtc_cache) {
    if (!have_nvrtc()) return;
    char dir[] = "/tmp/dpc-test-nvrtc-XXXXXX";
    CHECK(mkdtemp(dir) != NULL);
    const char *old = getenv("DPC_CACHE_DIR");
    char *saved = old ? strdup(old) : NULL;
    setenv("DPC_CACHE_DIR", dir, 1);
    ir_graph *g = model_graph("models/mlp.net", 4, 1, 1);
    cg_program *p = g ? cg_generate(g, CG_DIALECT_CUDA, NULL, err, sizeof err) : NULL;
    CHECK(p != NULL);
    /* Each image is read only when its compile succeeded: a failed one
     * holds no data, and the test must report it, not crash on it. */
    rt_cuda_image a = {0}, b = {0}, c = {0};
    int ok = p && rt_cuda_compile_cached(p->source, 80, &a, err, sizeof err) == 0;
    CHECK_MSG(ok, "%s", err);
    if (ok) {
        CHECK(!a.cache_hit && !a.is_ptx && a.size > 16 && !memcmp(a.data, "\177ELF", 4));
        CHECK_STR(a.target, "sm_80");
        CHECK(a.path && file_exists(a.path));
        ok = rt_cuda_compile_cached(p->source, 80, &b, err, sizeof err) == 0;
        CHECK_MSG(ok, "%s", err);
    }
    if (ok) {
        CHECK(b.cache_hit && b.size == a.size && !memcmp(a.data, b.data, a.size));
        /* Every kernel is in the cubin's symbol table. */
        for (int k = 0; k < p->nkernels; k++)
            CHECK_MSG(memmem(a.data, a.size, p->kernels[k].name, strlen(p->kernels[k].name)), "%s",
                      p->kernels[k].name);
        /* A device newer than NVRTC: PTX, cached on its own. */
        ok = rt_cuda_compile_cached(p->source, 990, &c, err, sizeof err) == 0;
        CHECK_MSG(ok, "%s", err);
    }
    if (ok) {
        CHECK(c.is_ptx && !strncmp(c.target, "compute_", 8) && strstr((char *)c.data, ".entry"));
        CHECK(c.size == strlen((char *)c.data) + 1);
        rt_cuda_image_free(&c);
        ok = rt_cuda_compile_cached(p->source, 990, &c, err, sizeof err) == 0 && c.cache_hit;
        CHECK(ok);
        if (ok) CHECK(c.size == strlen((char *)c.data) + 1);
    }
    rt_cuda_image_free(&a);
    rt_cuda_image_free(&b);
    rt_cuda_image_free(&c);
    /* A compile error: NVRTC's log in the message, the source kept. */
    const char *bad = "extern \"C\" __global__ void k0_bad(float *b0, long long count) {\n"
                      "    b0[0] = undefined_thing;\n}\n";
    rt_cuda_image x;
    CHECK(rt_cuda_compile_cached(bad, 90, &x, err, sizeof err) == -1);
    CHECK_MSG(strstr(err, "undefined_thing") && strstr(err, "sm_90"), "%s", err);
    char *cu = strstr(err, dir);
    if (cu) {
        char path[512];
        snprintf(path, sizeof path, "%.*s", (int)strcspn(cu, " "), cu);
        CHECK_MSG(file_exists(path), "%s", path);
    } else {
        CHECK_MSG(0, "the message does not name the kept source: %s", err);
    }
    if (saved)
        setenv("DPC_CACHE_DIR", saved, 1);
    else
        unsetenv("DPC_CACHE_DIR");
    free(saved);
    cg_program_free(p);
    ir_free(g);
    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    CHECK(system(cmd) == 0);
}

/* ---- loaders ---------------------------------------------------------------------- */

/* Where the toolkit has lib (its lib64), the loader must find it; a
 * machine without one skips. */
static int toolkit_has(const char *lib) {
    const char *home = getenv("CUDA_HOME");
    char path[1024];
    snprintf(path, sizeof path, "%s/lib64/%s", home && *home ? home : "/usr/local/cuda", lib);
    if (access(path, R_OK) == 0) return 1;
    fprintf(stderr, "  (no %s: skipped)\n", path);
    return 0;
}

TEST(cublas_loads_without_a_driver) {
    if (!toolkit_has("libcublas.so.13")) return;
    CHECK_MSG(rt_cublas_load(err, sizeof err) == 0, "%s", err);
    int major = 0;
    CHECK(rt_cublas.cublasGetProperty(MAJOR_VERSION, &major) == CUBLAS_STATUS_SUCCESS);
    CHECK_MSG(major == RT_CUBLAS_MAJOR, "libcublas %d, dpc %d", major, RT_CUBLAS_MAJOR);
    CHECK_STR(rt_cublas_status_name(CUBLAS_STATUS_NOT_INITIALIZED),
              "CUBLAS_STATUS_NOT_INITIALIZED");
}

TEST(nccl_loads_without_a_driver) {
    if (!toolkit_has("libnccl.so.2")) return;
    int v = 0;
    CHECK_MSG(rt_nccl_version(&v, err, sizeof err) == 0, "%s", err);
    CHECK_MSG(v >= 20000 && v / 10000 == RT_NCCL_MAJOR, "NCCL version %d", v);
    /* The wrapper refuses before touching NCCL when a rank is no GPU. */
    rt_backend *cpu = rt_backend_cpu();
    rt_nccl_comm *comm = NULL;
    CHECK(rt_nccl_init_all(&cpu, 1, &comm, err, sizeof err) == -1 && strstr(err, "cuda backend"));
    rt_backend_free(cpu);
}

/* The toolkit's stub libcuda exports every entry point and fails every
 * call: loading it proves each symbol the backend uses exists with the
 * versioned name the headers map to, and the refusal names the cause.
 * Runs last: a loaded driver library stays loaded. */
TEST(driver_entry_points_resolve_against_the_stub) {
    if (have_device) return; /* a real driver is already loaded */
    const char *home = getenv("CUDA_HOME");
    char stub[512];
    snprintf(stub, sizeof stub, "%s/lib64/stubs/libcuda.so",
             home && *home ? home : "/usr/local/cuda");
    if (!file_exists(stub)) {
        fprintf(stderr, "  (no %s: skipped)\n", stub);
        return;
    }
    setenv("DPC_LIBCUDA", stub, 1);
    CHECK_MSG(rt_cu_load(err, sizeof err) == 0, "%s", err);
    char why[512];
    CHECK(rt_cuda_device_count(why, sizeof why) == 0);
    CHECK_MSG(strstr(why, "cuInit") && strstr(why, "CUDA_ERROR"), "%s", why);
    rt_backend *be = rt_backend_open("cuda", NULL, err, sizeof err);
    CHECK(be == NULL);
    CHECK_MSG(strstr(err, "--device cuda: no CUDA device (cuInit: ") != NULL, "%s", err);
    fprintf(stderr, "  stub driver: %s\n", err);
    unsetenv("DPC_LIBCUDA");
}

/* ---- --plans: every kernel of compiled plans through NVRTC ----------------------- */

static int plans_passed, plans_failed;

static const char *plan_archs[2] = {"sm_80", "sm_90"};
static int plan_narchs = 2;

static void compile_program(const char *plan, const char *which, const cg_program *p) {
    const char *const *archs = plan_archs;
    for (int a = 0; a < plan_narchs; a++) {
        rt_cuda_image img;
        char *report = NULL;
        if (rt_nvrtc_compile_report(p->source, archs[a], &img, &report, err, sizeof err)) {
            printf("FAIL %s %s %s: %s\n", plan, which, archs[a], err);
            plans_failed++;
            continue;
        }
        int missing = 0;
        for (int k = 0; k < p->nkernels; k++)
            if (!memmem(img.data, img.size, p->kernels[k].name, strlen(p->kernels[k].name))) {
                if (!missing)
                    printf("FAIL %s %s %s: kernel %s not in the cubin\n", plan, which, archs[a],
                           p->kernels[k].name);
                missing++;
            }
        char where[600];
        snprintf(where, sizeof where, "%s %s", plan, which);
        if (res_check_program(p, archs[a], report, where, stdout)) missing++;
        free(report);
        if (missing) {
            plans_failed++;
        } else {
            printf("ok   %s %s %s: %d kernels, %zu KiB cubin\n", plan, which, archs[a], p->nkernels,
                   img.size >> 10);
            plans_passed++;
        }
        rt_cuda_image_free(&img);
    }
    fflush(stdout);
}

static int compile_plans(int n, char **paths) {
    for (int i = 0; i < n; i++) {
        dpc_plan *plan = plan_read(paths[i], err, sizeof err);
        if (!plan) {
            printf("FAIL %s: %s\n", paths[i], err);
            plans_failed++;
            continue;
        }
        const plan_section *sec = plan_find_section(plan, "KCUD");
        int found[2] = {0, 0};
        const ir_graph *graphs[2] = {plan->train, plan->eval};
        const char *names[2] = {"train", "eval"};
        size_t off = 0;
        while (sec && off < sec->len) {
            size_t used = 0;
            cg_program *p =
                cg_program_parse_prefix(sec->data + off, sec->len - off, &used, err, sizeof err);
            if (!p) {
                printf("FAIL %s: KCUD: %s\n", paths[i], err);
                plans_failed++;
                break;
            }
            off += used;
            int w = -1;
            for (int k = 0; k < 2; k++)
                if (graphs[k] && p->graph_hash == cg_graph_hash(graphs[k])) w = k;
            if (p->dialect != CG_DIALECT_CUDA || w < 0) {
                printf("FAIL %s: a KCUD program for no graph of the plan\n", paths[i]);
                plans_failed++;
            } else {
                found[w]++;
                compile_program(paths[i], names[w], p);
            }
            cg_program_free(p);
        }
        for (int k = 0; k < 2; k++)
            if (graphs[k] && !found[k]) {
                printf("FAIL %s: no CUDA program for its %s graph\n", paths[i], names[k]);
                plans_failed++;
            }
        plan_free(plan);
    }
    printf("%d passed, %d failed\n", plans_passed, plans_failed);
    return plans_failed ? 1 : 0;
}

#endif /* DPC_HAVE_CUDA */

int main(int argc, char **argv) {
    if (argc >= 2 && !strcmp(argv[1], "--plans")) {
#ifdef DPC_HAVE_CUDA
        int first = 2;
        if (argc >= 4 && !strcmp(argv[2], "--arch")) {
            plan_archs[0] = argv[3];
            plan_narchs = 1;
            first = 4;
        }
        char e[1024];
        if (!rt_nvrtc_load(e, sizeof e)) return compile_plans(argc - first, argv + first);
        printf("note: no NVRTC to compile plans with: %s\n", e);
        printf("0 passed, 0 failed\n");
        return 0;
#else
        printf("note: built with CUDA=0: no NVRTC to compile plans with\n");
        printf("0 passed, 0 failed\n");
        return 0;
#endif
    }
    RUN(open_cpu);
    RUN(open_refuses_unknown_device);
    RUN(open_cuda);
    RUN(auto_falls_back_with_one_notice);
    RUN(graph_api_needs_cuda);
    RUN(sgemm_args_for_resnet18_shapes);
    RUN(sgemm_args_refuse_what_cublas_refuses);
    RUN(sgemm_args_execute_like_cblas_on_every_model_gemm);
    RUN(nvrtc_target_choice);
    RUN(resource_check_refuses_what_the_gpu_refuses);
    RUN(tf32_rounds_to_nearest_even);
    RUN(tf32_gemm_on_the_cpu_rounds_its_operands);
#ifdef DPC_HAVE_CUDA
    RUN(nvrtc_knows_ampere_and_hopper);
    RUN(nvrtc_cache);
    RUN(cublas_loads_without_a_driver);
    RUN(nccl_loads_without_a_driver);
    RUN(driver_entry_points_resolve_against_the_stub);
#endif
    return harness_done();
}
