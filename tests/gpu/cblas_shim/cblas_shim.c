/* tests/gpu/cblas_shim/cblas_shim.c — cblas_sgemm in plain C (see cblas.h).
 * Column-major C = alpha op(A) op(B) + beta C, blocked so a panel of op(A)
 * stays in cache while columns of C stream past it; the inner loop runs
 * down a column of the packed panel, which the compiler vectorises. Sums
 * over k run in order, in float, as a BLAS does. */
#include "cblas.h"

#include <stdlib.h>
#include <string.h>

#define KB 128 /* depth of a panel */
#define MB 512 /* rows of a panel: MB x KB floats = 256 KiB */

void openblas_set_num_threads(int n) { (void)n; }

static void colmajor(int ta, int tb, int m, int n, int k, float alpha, const float *A, int lda,
                     const float *B, int ldb, float beta, float *C, int ldc) {
    for (int j = 0; j < n; j++) {
        float *c = C + (size_t)j * ldc;
        if (beta == 0)
            memset(c, 0, sizeof *c * (size_t)m);
        else if (beta != 1)
            for (int i = 0; i < m; i++) c[i] *= beta;
    }
    if (alpha == 0 || k == 0) return;
    float *panel = malloc(sizeof *panel * MB * KB);
    if (!panel) abort();
    for (int l0 = 0; l0 < k; l0 += KB) {
        int lk = k - l0 < KB ? k - l0 : KB;
        for (int i0 = 0; i0 < m; i0 += MB) {
            int im = m - i0 < MB ? m - i0 : MB;
            /* panel[l][i] = op(A)(i0 + i, l0 + l) */
            for (int l = 0; l < lk; l++)
                for (int i = 0; i < im; i++)
                    panel[l * MB + i] = ta ? A[(size_t)(l0 + l) + (size_t)(i0 + i) * lda]
                                           : A[(size_t)(i0 + i) + (size_t)(l0 + l) * lda];
            for (int j = 0; j < n; j++) {
                float *c = C + (size_t)j * ldc + i0;
                for (int l = 0; l < lk; l++) {
                    float b = alpha * (tb ? B[(size_t)j + (size_t)(l0 + l) * ldb]
                                          : B[(size_t)(l0 + l) + (size_t)j * ldb]);
                    const float *p = panel + l * MB;
                    for (int i = 0; i < im; i++) c[i] += p[i] * b;
                }
            }
        }
    }
    free(panel);
}

void cblas_sgemm(enum CBLAS_ORDER order, enum CBLAS_TRANSPOSE ta, enum CBLAS_TRANSPOSE tb, int m,
                 int n, int k, float alpha, const float *A, int lda, const float *B, int ldb,
                 float beta, float *C, int ldc) {
    if (m <= 0 || n <= 0) return;
    int at = ta != CblasNoTrans, bt = tb != CblasNoTrans;
    if (order == CblasColMajor)
        colmajor(at, bt, m, n, k, alpha, A, lda, B, ldb, beta, C, ldc);
    else /* row-major C is column-major Cᵀ = op(B)ᵀ op(A)ᵀ */
        colmajor(bt, at, n, m, k, alpha, B, ldb, A, lda, beta, C, ldc);
}
