/* runtime/device/onednn_split.c — how a library convolution splits into
 * parts (onednn.h): the filter taps that ever read the input, the parts
 * (images, or output channels, in oneDNN's blocks of 16 where they
 * divide so), and one part's dims, strides and padding. Arithmetic only:
 * the same with or without oneDNN. */
#include "runtime/device/onednn.h"

#include <string.h>

int rt_conv_divisor_upto(int64_t n, int m, int64_t unit) {
    for (int p = m; p > 1; p--)
        if (n % p == 0 && (n / p) % unit == 0) return p;
    return 1;
}

static int64_t gcd(int64_t a, int64_t b) { return b ? gcd(b, a % b) : a; }

/* The filter taps [*lo, *hi] along one axis that ever read the input
 * (not only padding): a 3x3 convolution of a 1x1 plane reads its centre
 * alone. lo <= pad always (tap `pad` reads row 0 at output 0). */
static void taps_read(int64_t in, int64_t out, int64_t k, int64_t stride, int64_t pad, int64_t *lo,
                      int64_t *hi) {
    *lo = k, *hi = -1;
    for (int64_t r = 0; r < k; r++)
        for (int64_t o = 0; o < out; o++) {
            int64_t i = o * stride - pad + r;
            if (i >= 0 && i < in) {
                if (r < *lo) *lo = r;
                *hi = r;
                break;
            }
        }
}

#define SET_DIMS(to, ...) \
    memcpy(to, (int64_t[RT_CONV_MAX_DIMS]){__VA_ARGS__}, sizeof(int64_t[RT_CONV_MAX_DIMS]))

int rt_conv_split_plan(const cg_conv *d, rt_conv_split *g) {
    memset(g, 0, sizeof *g);
    int bwd_w = d->dir == CG_CONV_BACKWARD_WEIGHTS;
    int64_t r0, r1, q0, q1;
    taps_read(d->H, d->Ho, d->kh, d->sh, d->ph, &r0, &r1);
    taps_read(d->W, d->Wo, d->kw, d->sw, d->pw, &q0, &q1);
    if (r1 < r0 || q1 < q0) return -1; /* no tap reads the input: not oneDNN's */
    int64_t kh = r1 - r0 + 1, kw = q1 - q0 + 1, ph = d->ph - r0, pw = d->pw - q0;
    /* parts: images, or the output's channels (the weight gradient's
     * always), 16 a part (oneDNN's block) where they divide so, whole
     * groups when grouped */
    int64_t G = d->G, Cg = d->C / G, Kg = d->K / G, kk = d->kh * d->kw;
    int64_t HW = d->H * d->W, PQ = d->Ho * d->Wo;
    int fwd = d->dir == CG_CONV_FORWARD; /* else the forward is the backward's hint */
    int64_t out_ch = fwd ? d->K : d->C, act = fwd ? d->N * d->C * HW : d->N * d->K * PQ;
    int by_ch = !bwd_w && G == 1 && d->K * d->C * kh * kw > act &&
                rt_conv_divisor_upto(out_ch, RT_CONV_MAX_PARTS, 16) > 1;
    int parts = by_ch    ? rt_conv_divisor_upto(out_ch, RT_CONV_MAX_PARTS, 16)
                : !bwd_w ? rt_conv_divisor_upto(d->N, RT_CONV_MAX_PARTS, 1)
                : G > 1  ? rt_conv_divisor_upto(G, RT_CONV_MAX_PARTS, 16 / gcd(Kg, 16))
                         : rt_conv_divisor_upto(d->K, RT_CONV_MAX_PARTS, 16);
    int64_t nb = bwd_w || by_ch ? d->N : d->N / parts;
    int64_t kp = bwd_w || (by_ch && fwd) ? d->K / parts : d->K;
    int64_t gp = bwd_w && G > 1 ? G / parts : G;         /* a part's groups */
    int64_t cp = by_ch && !fwd ? d->C / parts : gp * Cg; /* a part's inputs */
    *g = (rt_conv_split){.fwd = fwd,
                         .bwd_w = bwd_w,
                         .by_ch = by_ch,
                         .parts = parts,
                         .r0 = r0,
                         .q0 = q0,
                         .kh = kh,
                         .kw = kw,
                         .G = G,
                         .Cg = Cg,
                         .Kg = Kg,
                         .kk = kk,
                         .HW = HW,
                         .PQ = PQ,
                         .nb = nb,
                         .kp = kp,
                         .gp = gp,
                         .cp = cp};
    /* weights [G, K/G, C/G, kh, kw] when grouped (oneDNN's goihw), else [K, C, kh, kw] */
    g->wn = G > 1 ? 5 : 4;
    SET_DIMS(g->xd, nb, cp, d->H, d->W);
    SET_DIMS(g->yd, nb, kp, d->Ho, d->Wo);
    SET_DIMS(g->st, d->sh, d->sw);
    SET_DIMS(g->pl, ph, pw);
    SET_DIMS(g->pr, (d->Ho - 1) * d->sh + kh - d->H - ph, (d->Wo - 1) * d->sw + kw - d->W - pw);
    /* dpc's tensors: x and w dense; y (dy), and a grouped part's x, slices of channels */
    SET_DIMS(g->xs, d->C * HW, HW, d->W, 1);
    SET_DIMS(g->ys, d->K * PQ, PQ, d->Wo, 1);
    if (G > 1) {
        SET_DIMS(g->wd, gp, Kg, Cg, kh, kw);
        SET_DIMS(g->ws, Kg * Cg * kk, Cg * kk, kk, d->kw, 1);
    } else {
        SET_DIMS(g->wd, kp, cp, kh, kw);
        SET_DIMS(g->ws, Cg * kk, kk, d->kw, 1);
    }
    /* the rows past the last window are unread: no padding there */
    for (int i = 0; i < 2; i++)
        if (g->pr[i] < 0) g->pr[i] = 0;
    return 0;
}
