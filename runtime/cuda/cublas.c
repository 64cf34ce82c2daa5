/* runtime/cuda/cublas.c — GEMMs of the cuda backend: the cg_gemm
 * descriptor as cuBLAS's argument list (pure, in every build, so tests
 * check it without a GPU), the cuBLAS handle on the compute stream, and
 * the table's gemm (cuda.h). */
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/cuda/internal.h"
#include "base/err.h"

/* ---- the cuBLAS argument list (pure; every build) ------------------------------ */

int rt_cublas_sgemm_args(const cg_gemm *d, rt_sgemm_args *a, char *err, size_t errlen) {
    memset(a, 0, sizeof *a);
    if ((d->transa != 0 && d->transa != 1) || (d->transb != 0 && d->transb != 1)) {
        return base_fail(err, errlen, "gemm: trans flags must be 0 or 1 (got %d, %d)", d->transa,
                         d->transb);
    }
    /* The descriptor's own rules (sizes >= 1 and within an int, leading
     * dimensions, non-overlapping batch entries of C) are cuBLAS's too;
     * buffer sizes are checked when a program is bound (cg_program_check),
     * so here every extent is allowed. */
    if (cg_gemm_validate(d, INT64_MAX, INT64_MAX, INT64_MAX, err, errlen)) return -1;
    a->transa = d->transa;
    a->transb = d->transb;
    a->m = (int)d->m;
    a->n = (int)d->n;
    a->k = (int)d->k;
    a->alpha = d->alpha;
    a->beta = d->beta;
    a->lda = (int)d->lda;
    a->ldb = (int)d->ldb;
    a->ldc = (int)d->ldc;
    /* cuBLAS ignores the strides of a batch of one; 0 says so plainly. */
    a->stride_a = d->batch > 1 ? (long long)d->stride_a : 0;
    a->stride_b = d->batch > 1 ? (long long)d->stride_b : 0;
    a->stride_c = d->batch > 1 ? (long long)d->stride_c : 0;
    a->batch = (int)d->batch;
    a->off_a = d->off_a;
    a->off_b = d->off_b;
    a->off_c = d->off_c;
    return 0;
}

#ifdef DPC_HAVE_CUDA

_Static_assert(CUBLAS_OP_N == 0 && CUBLAS_OP_T == 1, "rt_sgemm_args stores cuBLAS's op values");

/* cuBLAS on the compute stream with a workspace of its own: set
 * explicitly, cuBLAS never allocates while a graph is captured (its docs:
 * 32 MiB on Hopper and newer, 4 MiB before). */
int cuda_blas_up(cuda_impl *c, char *err, size_t errlen) {
    char e[512];
    if (rt_cublas_load(e, sizeof e)) {
        return base_fail(err, errlen, "cannot load cuBLAS %s: %s", rt_cublas_library(), e);
    }
    if (cublasTry(rt_cublas.cublasCreate(&c->blas), err, errlen) ||
        cublasTry(rt_cublas.cublasSetStream(c->blas, c->compute), err, errlen))
        return -1;
    size_t ws = c->sm >= 90 ? (size_t)32 << 20 : (size_t)4 << 20;
    if (cuTry(rt_cu.cuMemAlloc(&c->blas_ws, ws), err, errlen) ||
        cublasTry(rt_cublas.cublasSetWorkspace(c->blas, (void *)(uintptr_t)c->blas_ws, ws), err,
                  errlen))
        return -1;
    /* Plain fp32: a GEMM the plan marks tf32 (--precision tf32) asks for
     * TF32 itself (cuda_gemm), so the handle never decides precision. */
    return cublasTry(rt_cublas.cublasSetMathMode(c->blas, CUBLAS_DEFAULT_MATH), err, errlen);
}

int cuda_gemm(rt_backend *be, const cg_gemm *d, const float *A, const float *B, float *C, char *err,
              size_t errlen) {
    cuda_impl *c = impl_of(be);
    rt_sgemm_args a;
    if (rt_cublas_sgemm_args(d, &a, err, errlen) || use(c, err, errlen)) return -1;
    if (d->type_a == IR_BF16 || d->type_c == IR_BF16 || d->tf32) {
        /* Mixed precision (codegen/gemm.c): bf16 A and B, f32 or bf16 C, f32
         * accumulation; offsets count elements of each operand's type. TF32
         * (--precision tf32): f32 operands on the TF32 tensor cores. */
        cudaDataType ta = d->type_a == IR_BF16 ? CUDA_R_16BF : CUDA_R_32F;
        cudaDataType tc = d->type_c == IR_BF16 ? CUDA_R_16BF : CUDA_R_32F;
        cublasComputeType_t compute = d->tf32 ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F;
        size_t ea = ir_dtype_size((ir_dtype)d->type_a), ec = ir_dtype_size((ir_dtype)d->type_c);
        if (cublasTry(rt_cublas.cublasGemmStridedBatchedEx(
                          c->blas, a.transa ? CUBLAS_OP_T : CUBLAS_OP_N,
                          a.transb ? CUBLAS_OP_T : CUBLAS_OP_N, a.m, a.n, a.k, &a.alpha,
                          (const char *)A + a.off_a * ea, ta, a.lda, a.stride_a,
                          (const char *)B + a.off_b * ea, ta, a.ldb, a.stride_b, &a.beta,
                          (char *)C + a.off_c * ec, tc, a.ldc, a.stride_c, a.batch, compute,
                          CUBLAS_GEMM_DEFAULT),
                      err, errlen))
            return -1;
    } else if (cublasTry(rt_cublas.cublasSgemmStridedBatched(
                             c->blas, a.transa ? CUBLAS_OP_T : CUBLAS_OP_N,
                             a.transb ? CUBLAS_OP_T : CUBLAS_OP_N, a.m, a.n, a.k, &a.alpha,
                             A + a.off_a, a.lda, a.stride_a, B + a.off_b, a.ldb, a.stride_b,
                             &a.beta, C + a.off_c, a.ldc, a.stride_c, a.batch),
                         err, errlen))
        return -1;
    if (c->capturing)
        c->stats.captured_gemms++;
    else
        c->stats.gemms++;
    return 0;
}

#endif
