/* tests/fake/fake_math.h — the fake cuBLAS's and cuDNN's arithmetic
 * (tests/fake/fake_cuda.c's GEMMs and convolutions), in an order of their
 * own, as a GPU's: every product summed in float, never cblas and never
 * double, so the fake disagrees with the cpu backend by f32 summation order
 * as a GPU does, and is no more exact than hardware.
 *
 * The order (fake_math.c has the why):
 *  - a GEMM of reduction length k is cut into split-K slices, a power of
 *    two chosen from the shape alone (fake_split_k): more when there are
 *    fewer 128x128 output tiles than the 132 SMs, never slices under 256;
 *  - each slice sums its k in chunks of the tensor-core k-step (8 for f32
 *    and TF32 operands, 16 for bf16): the chunk's products in float, added
 *    pairwise (a tree), then into a float accumulator per output;
 *  - the slices' partials are added in float in slice order, then
 *    alpha * sum + beta * C (C is not read when beta is 0, as cuBLAS).
 * No fused multiply-add anywhere (compiled -ffp-contract=off), so the
 * result is the same bits on every x86-64 CPU and vector width.
 *
 * A convolution is the implicit GEMM of that order: forward reduces over
 * (channel, filter row, filter column), backward data over (filter,
 * filter row, filter column) of the rotated filter, backward filter over
 * (image, output row, output column).
 */
#ifndef DPC_FAKE_MATH_H
#define DPC_FAKE_MATH_H

#include <stddef.h>

/* How an operand's elements are read: f32, f32 rounded to TF32
 * (format/tf32.h, as tensor cores read it), or bf16 widened. */
enum { FAKE_F32, FAKE_TF32, FAKE_BF16 };

/* C = alpha op(A) op(B) + beta C, column major as cuBLAS defines it
 * (ta, tb: 1 transposed); A and B hold elements of type ab, C bf16 when
 * c_bf16 (computed in float, rounded once) else f32. */
void fake_gemm(int ta, int tb, int m, int n, int k, float alpha, const void *A, int lda,
               const void *B, int ldb, int ab, float beta, void *C, int ldc, int c_bf16);

/* A cuDNN convolution's shape and operands (NCHW, filters KCRS). */
typedef struct {
    int dir; /* 0 forward, 1 backward data, 2 backward filter */
    int N, C, H, W, K, R, S, sh, sw, ph, pw, Ho, Wo;
    int G;                 /* groups: filter k reads channels of group k / (K/G) */
    int bf16;              /* every operand bf16, f32 accumulation */
    int tf32;              /* f32 operands read as TF32 (a math type that allows tensor cores) */
    const void *x, *w, *y; /* the operands as the forward names them */
    void *out;             /* x (backward data), w (backward filter) or y (forward) */
} fake_conv_op;

/* The convolution c describes, alpha 1 and beta 0 (what dpc asks for). */
void fake_conv(const fake_conv_op *c);

/* The split-K slices of an m x n x k GEMM (a power of two, >= 1). */
int fake_split_k(long long m, long long n, long long k);

#endif
