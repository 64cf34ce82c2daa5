/* bench/depthwise.c — depthwise 3x3 convolution on MobileNetV2's CIFAR
 * shapes (Gluon's mobilenet_v2_1_0 on 32x32: the depthwise layers from
 * 32 channels at 16x16 to 960 at 1x1), two ways:
 *
 *   direct  dpc's conv with groups = channels, as codegen renders it (the
 *           direct kernels of codegen/conv_direct.c), on the cpu backend and its
 *           thread pool: forward, data gradient, weight gradient, each a
 *           graph of its own so each is timed alone;
 *   gemm    what a GEMM lowering does per group: im2col of the group's
 *           channel, then one cblas_sgemm per image and group ([1 x 9] x
 *           [9 x P] forward, [1 x P] x [P x 9] for the weight gradient),
 *           OpenBLAS as dpc links it; forward and weight gradient (the data
 *           gradient is the forward's transpose, the same GEMM shapes).
 *
 * usage: depthwise [BATCH] [REPEATS]     (defaults 32, 5)
 * One row per shape: the median of REPEATS runs of each, in ms, after one
 * warm-up run (which also compiles dpc's kernels). Numbers, not a test.
 */
#include <cblas.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/clock.h"
#include "runtime/device/device.h"
#include "runtime/runtime.h"

typedef struct {
    int64_t C, H, s;
} shape;

/* The depthwise layers of mobilenet_v2_1_0 at 32x32 input. */
static const shape shapes[] = {{32, 16, 1}, {96, 16, 2}, {144, 8, 1}, {144, 8, 2}, {192, 4, 1},
                               {192, 4, 2}, {384, 2, 1}, {576, 2, 1}, {576, 2, 2}, {960, 1, 1}};

static int cmp(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static float *random_floats(int64_t n, uint64_t *seed) {
    float *v = malloc(sizeof *v * (size_t)n);
    if (!v) abort();
    for (int64_t i = 0; i < n; i++) {
        *seed = *seed * 6364136223846793005ull + 1442695040888963407ull;
        v[i] = (float)((int)(*seed >> 40 & 0xffff) - 32768) / 32768.0f;
    }
    return v;
}

/* One op of a depthwise 3x3 (stride s, pad 1) over [N,C,H,H] as a graph:
 * its inputs (x or dy, w or x) and its output flagged. */
static ir_graph *op_graph(ir_op op, int64_t N, const shape *sh) {
    char err[256];
    int64_t C = sh->C, H = sh->H, Ho = (H + 2 - 3) / sh->s + 1;
    ir_graph *g = ir_new();
    ir_type xt = ir_shape4(N, C, H, H), yt = ir_shape4(N, C, Ho, Ho), wt = ir_shape4(C, 1, 3, 3);
    int in[2], out;
    if (op == IR_OP_CONV) {
        in[0] = ir_add_input(g, "x", xt, 0), in[1] = ir_add_input(g, "w", wt, 0);
        out = ir_add_node(g, op, in, 2, (int64_t[]){3, sh->s, 1, C}, NULL, err, sizeof err);
    } else if (op == IR_OP_CONV_GRAD_DATA) {
        in[0] = ir_add_input(g, "dy", yt, 0), in[1] = ir_add_input(g, "w", wt, 0);
        out = ir_add_node(g, op, in, 2, (int64_t[]){3, sh->s, 1, H, H, C}, NULL, err, sizeof err);
    } else {
        in[0] = ir_add_input(g, "dy", yt, 0), in[1] = ir_add_input(g, "x", xt, 0);
        out = ir_add_node(g, op, in, 2, (int64_t[]){3, sh->s, 1, C}, NULL, err, sizeof err);
    }
    if (out < 0) {
        fprintf(stderr, "depthwise: %s\n", err);
        exit(1);
    }
    g->nodes[out].flags |= IR_FLAG_OUTPUT;
    return g;
}

/* Median ms of `reps` runs of dpc's kernel for op. */
static double time_direct(rt_backend *be, ir_op op, int64_t N, const shape *sh, int reps) {
    char err[1024];
    ir_graph *g = op_graph(op, N, sh);
    rt_store *st = rt_store_new(be, g);
    rt_exec *ex = rt_exec_new(be, st, g, NULL, err, sizeof err);
    if (!ex) {
        fprintf(stderr, "depthwise: %s\n", err);
        exit(1);
    }
    uint64_t seed = 7;
    for (int k = 0; k < 2; k++) {
        const ir_node *n = &g->nodes[k];
        float *v = random_floats(ir_numel(&n->type), &seed);
        rt_exec_set_input(ex, n->name, v, sizeof *v * (size_t)ir_numel(&n->type));
        free(v);
    }
    double t[64];
    for (int r = -1; r < reps; r++) {
        double t0 = rt_now();
        if (rt_exec_run(ex, err, sizeof err)) {
            fprintf(stderr, "depthwise: %s\n", err);
            exit(1);
        }
        if (r >= 0) t[r] = 1e3 * (rt_now() - t0);
    }
    rt_exec_free(ex);
    rt_store_free(st);
    ir_free(g);
    qsort(t, (size_t)reps, sizeof *t, cmp);
    return t[reps / 2];
}

/* col[t][q] = x[(oh*s - 1 + kh)][(ow*s - 1 + kw)] of one plane, t = kh*3 + kw. */
static void im2col_plane(const float *x, int64_t H, int64_t Ho, int64_t s, float *col) {
    for (int64_t t = 0; t < 9; t++)
        for (int64_t oh = 0; oh < Ho; oh++)
            for (int64_t ow = 0; ow < Ho; ow++) {
                int64_t ih = oh * s - 1 + t / 3, iw = ow * s - 1 + t % 3;
                col[(t * Ho + oh) * Ho + ow] =
                    ih >= 0 && ih < H && iw >= 0 && iw < H ? x[ih * H + iw] : 0.0f;
            }
}

/* Median ms of `reps` runs of the per-group GEMM lowering: forward, or
 * (weight = 1) the weight gradient. */
static double time_gemm(int weight, int64_t N, const shape *sh, int reps) {
    int64_t C = sh->C, H = sh->H, Ho = (H + 2 - 3) / sh->s + 1, P = Ho * Ho;
    uint64_t seed = 9;
    float *x = random_floats(N * C * H * H, &seed), *w = random_floats(C * 9, &seed);
    float *y = random_floats(N * C * P, &seed), *col = malloc(sizeof(float) * (size_t)(9 * P));
    if (!col) abort();
    double t[64];
    for (int r = -1; r < reps; r++) {
        double t0 = rt_now();
        if (weight) memset(w, 0, sizeof(float) * (size_t)(C * 9));
        for (int64_t n = 0; n < N; n++)
            for (int64_t c = 0; c < C; c++) {
                im2col_plane(x + (n * C + c) * H * H, H, Ho, sh->s, col);
                float *yp = y + (n * C + c) * P;
                if (weight) /* dw[c] += dy[c] colᵀ */
                    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, 1, 9, (int)P, 1.0f, yp,
                                (int)P, col, (int)P, 1.0f, w + c * 9, 9);
                else /* y[c] = w[c] col */
                    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, 1, (int)P, 9, 1.0f,
                                w + c * 9, 9, col, (int)P, 0.0f, yp, (int)P);
            }
        if (r >= 0) t[r] = 1e3 * (rt_now() - t0);
    }
    free(x), free(w), free(y), free(col);
    qsort(t, (size_t)reps, sizeof *t, cmp);
    return t[reps / 2];
}

int main(int argc, char **argv) {
    rt_blas_core_reexec(argv);
    int64_t N = argc > 1 ? atoll(argv[1]) : 32;
    int reps = argc > 2 ? atoi(argv[2]) : 5;
    if (N < 1 || N > 4096) N = 32;
    if (reps < 1 || reps > 64) reps = 5;
    rt_backend *be = rt_backend_cpu();
    printf("depthwise 3x3, pad 1, batch %lld, median of %d (ms)\n", (long long)N, reps);
    printf("%5s %4s %2s | %9s %9s %9s | %9s %9s\n", "C", "HxW", "s", "direct", "dgrad", "wgrad",
           "gemm", "gemm_w");
    double sum[5] = {0};
    for (size_t i = 0; i < sizeof shapes / sizeof *shapes; i++) {
        const shape *sh = &shapes[i];
        double v[5] = {time_direct(be, IR_OP_CONV, N, sh, reps),
                       time_direct(be, IR_OP_CONV_GRAD_DATA, N, sh, reps),
                       time_direct(be, IR_OP_CONV_GRAD_WEIGHT, N, sh, reps),
                       time_gemm(0, N, sh, reps), time_gemm(1, N, sh, reps)};
        printf("%5lld %2lldx%-2lld %2lld | %9.3f %9.3f %9.3f | %9.3f %9.3f\n", (long long)sh->C,
               (long long)sh->H, (long long)sh->H, (long long)sh->s, v[0], v[1], v[2], v[3], v[4]);
        for (int k = 0; k < 5; k++) sum[k] += v[k];
    }
    printf("total            | %9.3f %9.3f %9.3f | %9.3f %9.3f\n", sum[0], sum[1], sum[2], sum[3],
           sum[4]);
    printf("forward: direct %.3f ms vs per-group GEMM %.3f ms; weight gradient: %.3f vs %.3f\n",
           sum[0], sum[3], sum[2], sum[4]);
    rt_backend_free(be);
    return 0;
}
