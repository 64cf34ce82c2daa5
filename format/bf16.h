/* format/bf16.h — bf16 storage, the element format of a bf16 tensor: the
 * conversions, written once.
 *
 * bf16 is the upper half of an IEEE binary32: 1 sign, 8 exponent, 7
 * fraction bits. Kernels store it as 16-bit integers (bf16_t) in both
 * dialects and convert with the functions below; the same text is compiled
 * into the generated modules (codegen/dialect.c stringifies
 * FMT_BF16_FUNCTIONS into the C and CUDA preludes) and here for the host (the
 * cpu backend's GEMM, tests), so every backend rounds bit for bit alike.
 * (cuda_bf16.h's __nv_bfloat16 would need the toolkit's include directory at
 * run time, which NVRTC does not search; cuBLAS's CUDA_R_16BF is the same
 * 16 bits.)
 *
 *   dpc_bf16_to_f32(h)  exact (every bf16 is a float)
 *   dpc_f32_to_bf16(f)  round to nearest, ties to even; overflow rounds to
 *                       infinity, subnormals round like normals, NaN stays
 *                       a (quiet) NaN of the same sign
 *
 * Usage (host):
 *     #include "format/bf16.h"
 *     bf16_t h = dpc_f32_to_bf16(1.0f / 3.0f);   // 0x3eab
 *     float f = dpc_bf16_to_f32(h);              // 0.333984375f
 * A prelude supplies DPC_FN (function qualifiers), bf16_t and the bit casts
 * dpc_f2u / dpc_u2f before FMT_BF16_FUNCTIONS.
 */
#ifndef DPC_FORMAT_BF16_H
#define DPC_FORMAT_BF16_H

#include <string.h>

#define FMT_BF16_FUNCTIONS                                                        \
    DPC_FN float dpc_bf16_to_f32(bf16_t h) { return dpc_u2f((unsigned)h << 16); } \
    DPC_FN bf16_t dpc_f32_to_bf16(float f) {                                      \
        unsigned u = dpc_f2u(f);                                                  \
        if ((u & 0x7fffffffu) > 0x7f800000u) return (bf16_t)((u >> 16) | 0x40u);  \
        return (bf16_t)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);                  \
    }

/* The host's instance of the same text. */
typedef unsigned short bf16_t;
static inline unsigned dpc_f2u(float f) {
    unsigned u;
    memcpy(&u, &f, sizeof u);
    return u;
}
static inline float dpc_u2f(unsigned u) {
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}
#define DPC_FN static inline
FMT_BF16_FUNCTIONS
#undef DPC_FN

#endif
