/* bench/sgemm_peak.c — the machine's single-precision GEMM peak, for
 * bench/cpu_throughput.sh's "fraction of sgemm peak": the best of a few
 * 2048^3 products by OpenBLAS (its own threads) and, where the build has
 * it, oneDNN's dnnl_sgemm (its OpenMP threads), both at THREADS threads.
 *
 * usage: sgemm_peak THREADS   prints "sgemm peak: G GFLOP/s (openblas A, onednn B)"
 */
#include <cblas.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#ifdef DPC_HAVE_DNNL
#include <oneapi/dnnl/dnnl.h>
void omp_set_num_threads(int n);
#endif

enum { N = 2048, REPEATS = 5 };

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

int main(int argc, char **argv) {
    int threads = argc > 1 ? atoi(argv[1]) : 1;
    float *a = malloc(sizeof(float) * N * N), *b = malloc(sizeof(float) * N * N),
          *c = malloc(sizeof(float) * N * N);
    for (long i = 0; i < (long)N * N; i++) a[i] = b[i] = (float)(i % 7) * 0.1f, c[i] = 0;
    double flops = 2.0 * N * N * N, best_blas = 0, best_dnnl = 0;
    openblas_set_num_threads(threads);
    for (int r = 0; r <= REPEATS; r++) {
        double t = now();
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, N, N, N, 1, a, N, b, N, 0, c, N);
        t = now() - t;
        if (r && flops / t > best_blas) best_blas = flops / t; /* the first warms up */
    }
#ifdef DPC_HAVE_DNNL
    omp_set_num_threads(threads);
    for (int r = 0; r <= REPEATS; r++) {
        double t = now();
        dnnl_sgemm('N', 'N', N, N, N, 1, a, N, b, N, 0, c, N);
        t = now() - t;
        if (r && flops / t > best_dnnl) best_dnnl = flops / t;
    }
#endif
    double best = best_blas > best_dnnl ? best_blas : best_dnnl;
    printf("sgemm peak: %.1f GFLOP/s (openblas %.1f, onednn %.1f)\n", best * 1e-9, best_blas * 1e-9,
           best_dnnl * 1e-9);
    free(a), free(b), free(c);
    return 0;
}
