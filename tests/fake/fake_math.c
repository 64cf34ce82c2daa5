/* tests/fake/fake_math.c — the fake cuBLAS's and cuDNN's arithmetic
 * (fake_math.h has the order). Why this order: a GPU GEMM kernel keeps a
 * float accumulator per output of its tile, feeds it one tensor-core
 * k-step at a time (whose products the MMA adds before the accumulator
 * sees them), and when the output grid is too small to fill the SMs it
 * splits k across blocks and adds their partials at the end; the slice
 * count is a function of the shape, as cuBLAS's heuristics are. None of
 * this is OpenBLAS's or oneDNN's order, so a test comparing the cpu
 * backend with the fake sees the order noise a GPU would show, and must
 * hold it to a bound or to a floor it measured.
 *
 * Speed: the product is cache-blocked (A packed once into MR-row panels,
 * B one NR-column panel at a time, both k-contiguous, every operand
 * converted to float while packing) and its MR x NR tile runs on GCC
 * vectors, cloned for AVX-512, AVX and the x86-64 baseline; each lane is
 * one output and every lane adds in the same order, so every clone gives
 * the same bits.
 */
#include "tests/fake/fake_math.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "format/bf16.h"
#include "format/tf32.h"

#define MR        4   /* rows of a tile */
#define NR        16  /* columns of a tile: one vector */
#define SMS       132 /* the fake device's (fake_cuda.c: sm_90, 132 SMs) */
#define GRID_TILE 128 /* the output tile the split-K heuristic counts */
#define MIN_SLICE 256 /* no split-K slice is shorter */

typedef float vec __attribute__((vector_size(NR * sizeof(float))));

static void *xalloc(size_t n) {
    void *p = malloc(n ? n : 1);
    if (!p) abort();
    return p;
}

int fake_split_k(long long m, long long n, long long k) {
    long long tiles = ((m + GRID_TILE - 1) / GRID_TILE) * ((n + GRID_TILE - 1) / GRID_TILE);
    int s = 1;
    while (s < 64 && tiles * s * 2 <= SMS && k >= (long long)s * 2 * MIN_SLICE) s *= 2;
    return s;
}

/* A matrix operand: M(r, c) = base[r * sr + c * sc], read as type. */
typedef struct {
    const void *base;
    size_t sr, sc;
    int type;
} mat;

static float get(const mat *a, size_t r, size_t c) {
    size_t o = r * a->sr + c * a->sc;
    if (a->type == FAKE_BF16) return dpc_bf16_to_f32(((const bf16_t *)a->base)[o]);
    float v = ((const float *)a->base)[o];
    return a->type == FAKE_TF32 ? dpc_f32_round_tf32(v) : v;
}

/* One slice-ordered MR x NR tile: ap holds MR rows k-contiguous
 * (ap[p * MR + r]), bp NR columns (bp[p * NR + c]), kp a multiple of ks
 * and of len's chunks. Always inlined with a constant ks, so the chunk's
 * products and their tree stay in registers. */
static inline __attribute__((always_inline)) void tile_ks(const float *ap, const float *bp, int kp,
                                                          int len, int ks, float *out) {
    vec total[MR], acc[MR];
    for (int r = 0; r < MR; r++) total[r] = (vec){0};
    for (int s0 = 0; s0 < kp; s0 += len) {
        int end = s0 + len < kp ? s0 + len : kp;
        for (int r = 0; r < MR; r++) acc[r] = (vec){0};
        for (int p = s0; p < end; p += ks) {
            vec b[16];
            for (int u = 0; u < ks; u++) memcpy(&b[u], bp + (size_t)(p + u) * NR, sizeof(vec));
            for (int r = 0; r < MR; r++) {
                vec t[16];
                for (int u = 0; u < ks; u++) t[u] = ap[(size_t)(p + u) * MR + r] * b[u];
                for (int w = ks / 2; w >= 1; w /= 2) /* pairwise: (t0+t1)+(t2+t3), ... */
                    for (int u = 0; u < w; u++) t[u] = t[2 * u] + t[2 * u + 1];
                acc[r] += t[0];
            }
        }
        for (int r = 0; r < MR; r++) total[r] = s0 ? total[r] + acc[r] : acc[r];
    }
    memcpy(out, total, sizeof total);
}

__attribute__((target_clones("avx512f", "avx", "default"))) static void tile(const float *ap,
                                                                             const float *bp,
                                                                             int kp, int len,
                                                                             int ks, float *out) {
    if (ks == 8)
        tile_ks(ap, bp, kp, len, 8, out);
    else
        tile_ks(ap, bp, kp, len, 16, out);
}

/* out[i * ldo + j] = sum_p A(i, p) B(p, j) for i < m, j < n, in the order
 * of fake_math.h: chunks of ks, slices split-K slices. */
static void product(int m, int n, int k, const mat *a, const mat *b, int ks, int slices, float *out,
                    size_t ldo) {
    if (m <= 0 || n <= 0) return;
    int kp = (k + ks - 1) / ks * ks;                           /* k padded with zero products */
    int len = ((kp + slices - 1) / slices + ks - 1) / ks * ks; /* a slice: whole chunks */
    int mp = (m + MR - 1) / MR;
    float *ap = xalloc(sizeof(float) * (size_t)mp * (size_t)kp * MR);
    float *bp = xalloc(sizeof(float) * (size_t)kp * NR);
    for (int ip = 0; ip < mp; ip++)
        for (int p = 0; p < kp; p++)
            for (int r = 0; r < MR; r++) {
                int i = ip * MR + r;
                ap[((size_t)ip * kp + p) * MR + r] = i < m && p < k ? get(a, i, p) : 0;
            }
    float t[MR * NR];
    for (int j0 = 0; j0 < n; j0 += NR) {
        for (int p = 0; p < kp; p++)
            for (int c = 0; c < NR; c++)
                bp[(size_t)p * NR + c] = j0 + c < n && p < k ? get(b, p, j0 + c) : 0;
        for (int ip = 0; ip < mp; ip++) {
            tile(ap + (size_t)ip * kp * MR, bp, kp, len > 0 ? len : ks, ks, t);
            for (int r = 0; r < MR && ip * MR + r < m; r++)
                for (int c = 0; c < NR && j0 + c < n; c++)
                    out[(size_t)(ip * MR + r) * ldo + j0 + c] = t[r * NR + c];
        }
    }
    free(ap), free(bp);
}

void fake_gemm(int ta, int tb, int m, int n, int k, float alpha, const void *A, int lda,
               const void *B, int ldb, int ab, float beta, void *C, int ldc, int c_bf16) {
    if (m <= 0 || n <= 0) return;
    mat a = {A, ta ? (size_t)lda : 1, ta ? 1 : (size_t)lda, ab};
    mat b = {B, tb ? (size_t)ldb : 1, tb ? 1 : (size_t)ldb, ab};
    float *s = xalloc(sizeof(float) * (size_t)m * (size_t)n);
    if (k > 0)
        product(m, n, k, &a, &b, ab == FAKE_BF16 ? 16 : 8, fake_split_k(m, n, k), s, (size_t)n);
    else
        memset(s, 0, sizeof(float) * (size_t)m * (size_t)n);
    for (int j = 0; j < n; j++)
        for (int i = 0; i < m; i++) {
            size_t o = (size_t)j * (size_t)ldc + (size_t)i;
            float v = alpha * s[(size_t)i * n + j];
            if (beta != 0) /* beta 0: C is not read (NaN in it stays out), as cuBLAS */
                v = v + beta * (c_bf16 ? dpc_bf16_to_f32(((bf16_t *)C)[o]) : ((float *)C)[o]);
            if (c_bf16)
                ((bf16_t *)C)[o] = dpc_f32_to_bf16(v);
            else
                ((float *)C)[o] = v;
        }
    free(s);
}

/* A conv operand of n elements as the device reads it (widened from
 * bf16, or rounded to TF32), as floats. */
static float *conv_in(const fake_conv_op *c, const void *p, size_t n) {
    float *f = xalloc(sizeof(float) * n);
    for (size_t i = 0; i < n; i++) {
        float v = c->bf16 ? dpc_bf16_to_f32(((const bf16_t *)p)[i]) : ((const float *)p)[i];
        f[i] = c->tf32 ? dpc_f32_round_tf32(v) : v;
    }
    return f;
}

/* im2col of image n, group g: col[t * ld + off + pos] for t = (channel,
 * filter row, filter column), pos = (output row, output column); 0 where
 * the filter reads padding. */
static void im2col(const fake_conv_op *c, const float *x, int n, int g, float *col, size_t ld,
                   size_t off) {
    int Cg = c->C / c->G;
    for (int cl = 0; cl < Cg; cl++)
        for (int r = 0; r < c->R; r++)
            for (int q = 0; q < c->S; q++) {
                float *row = col + ((size_t)(cl * c->R + r) * c->S + q) * ld + off;
                const float *img = x + ((size_t)n * c->C + (size_t)g * Cg + cl) * c->H * c->W;
                for (int oh = 0; oh < c->Ho; oh++) {
                    int ih = oh * c->sh - c->ph + r;
                    for (int ow = 0; ow < c->Wo; ow++) {
                        int iw = ow * c->sw - c->pw + q;
                        row[oh * c->Wo + ow] = ih >= 0 && ih < c->H && iw >= 0 && iw < c->W
                                                   ? img[(size_t)ih * c->W + iw]
                                                   : 0;
                    }
                }
            }
}

/* Filter k of G groups reads the C/G channels of group k / (K/G); every
 * output is summed in float in the implicit GEMM's order, then stored
 * (rounded to bf16 for bf16 operands). */
void fake_conv(const fake_conv_op *c) {
    int Cg = c->C / c->G, Kg = c->K / c->G, RS = c->R * c->S, ks = c->bf16 ? 16 : 8;
    size_t P = (size_t)c->Ho * c->Wo, HW = (size_t)c->H * c->W;
    size_t nx = (size_t)c->N * c->C * HW, nw = (size_t)c->K * Cg * RS, ny = (size_t)c->N * c->K * P;
    size_t nout = c->dir == 0 ? ny : c->dir == 1 ? nx : nw;
    float *x = c->dir == 1 ? NULL : conv_in(c, c->x, nx);
    float *w = c->dir == 2 ? NULL : conv_in(c, c->w, nw);
    float *y = c->dir == 0 ? NULL : conv_in(c, c->y, ny);
    float *res = xalloc(sizeof(float) * nout);
    int T = Cg * RS; /* the forward's reduction: (channel, filter row, filter column) */
    if (c->dir == 0) {
        float *col = xalloc(sizeof(float) * (size_t)T * P);
        int sl = fake_split_k(c->K, (long long)c->N * (long long)P, T);
        for (int g = 0; g < c->G; g++) {
            mat a = {w + (size_t)g * Kg * T, (size_t)T, 1, FAKE_F32};
            mat b = {col, P, 1, FAKE_F32};
            for (int n = 0; n < c->N; n++) {
                im2col(c, x, n, g, col, P, 0);
                product(Kg, (int)P, T, &a, &b, ks, sl,
                        res + ((size_t)n * c->K + (size_t)g * Kg) * P, P);
            }
        }
        free(col);
    } else if (c->dir == 1) {
        /* dx(channel, pixel) = sum over t = (filter, filter row, filter
         * column) of w(filter, channel, r, q) dy(filter, the output that
         * tap maps the pixel to), 0 where none does */
        int Td = Kg * RS;
        float *wd = xalloc(sizeof(float) * (size_t)Cg * Td);
        float *dcol = xalloc(sizeof(float) * (size_t)Td * HW);
        int sl = fake_split_k(c->C, (long long)c->N * (long long)HW, Td);
        for (int g = 0; g < c->G; g++) {
            for (int cl = 0; cl < Cg; cl++)
                for (int k = 0; k < Kg; k++)
                    for (int rq = 0; rq < RS; rq++)
                        wd[(size_t)cl * Td + (size_t)k * RS + rq] =
                            w[(((size_t)g * Kg + k) * Cg + cl) * RS + rq];
            mat a = {wd, (size_t)Td, 1, FAKE_F32};
            mat b = {dcol, HW, 1, FAKE_F32};
            for (int n = 0; n < c->N; n++) {
                for (int k = 0; k < Kg; k++)
                    for (int r = 0; r < c->R; r++)
                        for (int q = 0; q < c->S; q++) {
                            float *row = dcol + ((size_t)k * RS + (size_t)r * c->S + q) * HW;
                            const float *dy = y + ((size_t)n * c->K + (size_t)g * Kg + k) * P;
                            for (int ih = 0; ih < c->H; ih++) {
                                int oh = ih + c->ph - r;
                                int okh = oh >= 0 && oh % c->sh == 0 && oh / c->sh < c->Ho;
                                for (int iw = 0; iw < c->W; iw++) {
                                    int ow = iw + c->pw - q;
                                    int ok =
                                        okh && ow >= 0 && ow % c->sw == 0 && ow / c->sw < c->Wo;
                                    row[(size_t)ih * c->W + iw] =
                                        ok ? dy[(size_t)(oh / c->sh) * c->Wo + ow / c->sw] : 0;
                                }
                            }
                        }
                product(Cg, (int)HW, Td, &a, &b, ks, sl,
                        res + ((size_t)n * c->C + (size_t)g * Cg) * HW, HW);
            }
        }
        free(wd), free(dcol);
    } else {
        /* dw(filter, t) = sum over (image, output pixel) of dy x(t's tap) */
        size_t NP = (size_t)c->N * P;
        float *dyg = xalloc(sizeof(float) * (size_t)Kg * NP);
        float *col = xalloc(sizeof(float) * (size_t)T * NP);
        int sl = fake_split_k(c->K, T, (long long)NP);
        for (int g = 0; g < c->G; g++) {
            for (int k = 0; k < Kg; k++)
                for (int n = 0; n < c->N; n++)
                    memcpy(dyg + (size_t)k * NP + (size_t)n * P,
                           y + ((size_t)n * c->K + (size_t)g * Kg + k) * P, sizeof(float) * P);
            for (int n = 0; n < c->N; n++) im2col(c, x, n, g, col, NP, (size_t)n * P);
            mat a = {dyg, NP, 1, FAKE_F32};
            mat b = {col, 1, NP, FAKE_F32};
            product(Kg, T, (int)NP, &a, &b, ks, sl, res + (size_t)g * Kg * T, (size_t)T);
        }
        free(dyg), free(col);
    }
    for (size_t i = 0; i < nout; i++) {
        if (c->bf16)
            ((bf16_t *)c->out)[i] = dpc_f32_to_bf16(res[i]);
        else
            ((float *)c->out)[i] = res[i];
    }
    free(x), free(w), free(y), free(res);
}
