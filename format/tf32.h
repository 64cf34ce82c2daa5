/* format/tf32.h — TF32, the operand format of tensor-core f32 GEMMs
 * (dpc --precision tf32): 1 sign, 8 exponent and 10 fraction bits, held in
 * a float whose low 13 fraction bits are zero. The cpu backend rounds a
 * TF32 GEMM's operands with this function before cblas_sgemm, and the fake
 * cuBLAS (tests/fake) does the same for CUBLAS_COMPUTE_32F_FAST_TF32, so a
 * tf32 plan gives the same figures on every backend up to f32 summation
 * order.
 *
 *   dpc_f32_round_tf32(f)  round to nearest, ties to even (the rounding of
 *                          CUTLASS's float -> tfloat32_t conversion); a
 *                          carry out of the largest finite values gives
 *                          infinity, infinities and NaNs pass unchanged
 *
 * Error against fp32: each rounded operand is within 2^-11 (relative) of
 * its f32 value, so each product a*b within 2^-10 + 2^-22; a K-term dot
 * product differs from the f32 one by at most about (2^-10 + K * 2^-24)
 * times sum |a_k b_k| (docs/DESIGN.md §8, "TF32").
 */
#ifndef DPC_FORMAT_TF32_H
#define DPC_FORMAT_TF32_H

#include <string.h>

static inline float dpc_f32_round_tf32(float f) {
    unsigned u;
    memcpy(&u, &f, sizeof u);
    if ((u & 0x7f800000u) != 0x7f800000u) /* finite: add half an ulp, ties to even */
        u = (u + 0xfffu + ((u >> 13) & 1u)) & ~0x1fffu;
    memcpy(&f, &u, sizeof f);
    return f;
}

#endif
