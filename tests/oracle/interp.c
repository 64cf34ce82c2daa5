/* tests/oracle/interp.c — the reference interpreter (the tests' oracle).
 *
 * Every op of ir.h evaluated with naive loops over NCHW tensors in double
 * precision, exactly as the op table's comment defines it. Nothing here is
 * meant to be fast: it is the oracle that generated kernels, passes and
 * finite-difference gradient checks are compared against, so every loop is
 * written in the most obvious form, one small function per op.
 *
 * Labels (i32 tensors) are held as doubles carrying the class index.
 */
#include "tests/oracle/interp.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct oracle_interp {
    const ir_graph *g;
    double **buf; /* one buffer per node, ir_numel(type) doubles */
};

/* The view of one node's operands that each op function receives. */
typedef struct {
    const ir_node *n;
    const ir_type *in[IR_MAX_INPUTS];
    double *x[IR_MAX_INPUTS]; /* input buffers */
    double *y;                /* output buffer */
} op_args;

oracle_interp *oracle_interp_new(const ir_graph *g) {
    oracle_interp *it = calloc(1, sizeof *it);
    if (!it) abort();
    it->g = g;
    it->buf = calloc((size_t)(g->n ? g->n : 1), sizeof *it->buf);
    if (!it->buf) abort();
    for (int i = 0; i < g->n; i++) {
        it->buf[i] = calloc((size_t)ir_numel(&g->nodes[i].type), sizeof(double));
        if (!it->buf[i]) abort();
    }
    return it;
}

void oracle_interp_free(oracle_interp *it) {
    if (!it) return;
    for (int i = 0; i < it->g->n; i++) free(it->buf[i]);
    free(it->buf);
    free(it);
}

double *oracle_interp_buffer(oracle_interp *it, int node) {
    if (node < 0 || node >= it->g->n) return NULL;
    return it->buf[node];
}

/* ---- shape helpers -------------------------------------------------------- */

/* Per-channel layout of a rank-2 or rank-4 activation: element (n, c, i)
 * lives at (n*C + c)*inner + i, where inner is H*W (1 for rank 2). */
typedef struct {
    int64_t n, c, inner;
} chan_layout;

static chan_layout layout_of(const ir_type *t) {
    chan_layout l = {t->dim[0], t->ndim > 1 ? t->dim[1] : 1, 1};
    for (int d = 2; d < t->ndim; d++) l.inner *= t->dim[d];
    return l;
}

#define AT(l, ni, ci, i)    (((ni) * (l).c + (ci)) * (l).inner + (i))
#define IDX4(t, a, b, c, d) ((((a) * (t)->dim[1] + (b)) * (t)->dim[2] + (c)) * (t)->dim[3] + (d))

/* Index into x (NCHW) of tap t = i*k + j of the k x k window whose top-left
 * corner is (h0, w0) in channel c of image n, or -1 where the tap falls on
 * the zero padding. Every windowed op (conv, pools, their gradients) walks
 * its windows through this one rule. */
static int64_t window_tap(const ir_type *xt, int64_t n, int64_t c, int64_t h0, int64_t w0,
                          int64_t k, int64_t t) {
    int64_t ih = h0 + t / k, iw = w0 + t % k;
    if (ih < 0 || ih >= xt->dim[2] || iw < 0 || iw >= xt->dim[3]) return -1;
    return IDX4(xt, n, c, ih, iw);
}

/* ---- forward ops ------------------------------------------------------------ */

/* Convolution and its two gradients are one loop over (output position,
 * input channel of the output's group, tap) that differs only in which
 * product it accumulates where; weights are [O, C/G, k, k] (G groups:
 * output channel o reads input channels g*C/G .. (g+1)*C/G - 1 of its
 * group g = o / (O/G)), so tap t of (o, local channel cl) is element
 * (o*C/G + cl)*k*k + t. out starts zeroed. */
typedef enum { CONV_FORWARD, CONV_GRAD_DATA, CONV_GRAD_WEIGHT } conv_mode;

static void conv_loop(conv_mode mode, const ir_type *xt, const ir_type *yt, const ir_node *node,
                      const double *x, const double *w, const double *dy, double *out) {
    int64_t k = node->iattr[0], s = node->iattr[1], p = node->iattr[2];
    int64_t G = ir_conv_groups(node), Cg = xt->dim[1] / G, Og = yt->dim[1] / G;
    for (int64_t n = 0; n < yt->dim[0]; n++)
        for (int64_t o = 0; o < yt->dim[1]; o++)
            for (int64_t oh = 0; oh < yt->dim[2]; oh++)
                for (int64_t ow = 0; ow < yt->dim[3]; ow++) {
                    int64_t yi = IDX4(yt, n, o, oh, ow);
                    for (int64_t cl = 0; cl < Cg; cl++)
                        for (int64_t t = 0; t < k * k; t++) {
                            int64_t c = o / Og * Cg + cl;
                            int64_t xi = window_tap(xt, n, c, oh * s - p, ow * s - p, k, t);
                            if (xi < 0) continue; /* zero padding */
                            int64_t wi = (o * Cg + cl) * k * k + t;
                            if (mode == CONV_FORWARD)
                                out[yi] += x[xi] * w[wi];
                            else if (mode == CONV_GRAD_DATA)
                                out[xi] += dy[yi] * w[wi];
                            else
                                out[wi] += dy[yi] * x[xi];
                        }
                }
}

static void op_conv(op_args *a) {
    memset(a->y, 0, sizeof(double) * (size_t)ir_numel(&a->n->type));
    conv_loop(CONV_FORWARD, a->in[0], &a->n->type, a->n, a->x[0], a->x[1], NULL, a->y);
}

static void op_bias_add(op_args *a) {
    chan_layout l = layout_of(a->in[0]);
    for (int64_t n = 0; n < l.n; n++)
        for (int64_t c = 0; c < l.c; c++)
            for (int64_t i = 0; i < l.inner; i++)
                a->y[AT(l, n, c, i)] = a->x[0][AT(l, n, c, i)] + a->x[1][c];
}

static void op_relu(op_args *a) {
    int64_t n = ir_numel(&a->n->type);
    for (int64_t i = 0; i < n; i++) a->y[i] = a->x[0][i] > 0 ? a->x[0][i] : 0;
}

static void op_add(op_args *a) {
    int64_t n = ir_numel(&a->n->type);
    for (int64_t i = 0; i < n; i++) a->y[i] = a->x[0][i] + a->x[1][i];
}

/* Index of the first maximum of one pooling window in row-major scan order,
 * or -1 if the window holds only padding (the shape rule rules that out).
 * Padding counts as -inf: it never wins, not even against -inf inputs. */
static int64_t window_argmax(const double *x, const ir_type *xt, int64_t n, int64_t c, int64_t h0,
                             int64_t w0, int64_t k) {
    int64_t best = -1;
    for (int64_t t = 0; t < k * k; t++) {
        int64_t at = window_tap(xt, n, c, h0, w0, k, t);
        if (at >= 0 && (best < 0 || x[at] > x[best])) best = at; /* strict: ties keep the first */
    }
    return best;
}

/* One pooled value: the window of size k at (h0, w0) of channel c of sample n. */
typedef double (*pool_fn)(const double *x, const ir_type *xt, int64_t n, int64_t c, int64_t h0,
                          int64_t w0, int64_t k);

static double window_max(const double *x, const ir_type *xt, int64_t n, int64_t c, int64_t h0,
                         int64_t w0, int64_t k) {
    int64_t at = window_argmax(x, xt, n, c, h0, w0, k);
    return at < 0 ? -INFINITY : x[at];
}

/* Average pooling divides by k*k whatever the padding (count_include_pad,
 * the MXNet and PyTorch default). With floor output a window never reaches
 * past the padded border, so k*k is also the clipped window size. */
static double window_mean(const double *x, const ir_type *xt, int64_t n, int64_t c, int64_t h0,
                          int64_t w0, int64_t k) {
    double sum = 0;
    for (int64_t t = 0; t < k * k; t++) {
        int64_t at = window_tap(xt, n, c, h0, w0, k, t);
        if (at >= 0) sum += x[at];
    }
    return sum / (double)(k * k);
}

static void pool(op_args *a, pool_fn window) {
    const ir_type *xt = a->in[0], *yt = &a->n->type;
    int64_t k = a->n->iattr[0], s = a->n->iattr[1], p = a->n->iattr[2];
    for (int64_t n = 0; n < yt->dim[0]; n++)
        for (int64_t c = 0; c < yt->dim[1]; c++)
            for (int64_t oh = 0; oh < yt->dim[2]; oh++)
                for (int64_t ow = 0; ow < yt->dim[3]; ow++)
                    a->y[IDX4(yt, n, c, oh, ow)] =
                        window(a->x[0], xt, n, c, oh * s - p, ow * s - p, k);
}

static void op_maxpool(op_args *a) { pool(a, window_max); }
static void op_avgpool(op_args *a) { pool(a, window_mean); }

static void op_global_avgpool(op_args *a) {
    chan_layout l = layout_of(a->in[0]);
    for (int64_t n = 0; n < l.n; n++)
        for (int64_t c = 0; c < l.c; c++) {
            double sum = 0;
            for (int64_t i = 0; i < l.inner; i++) sum += a->x[0][AT(l, n, c, i)];
            a->y[n * l.c + c] = sum / (double)l.inner;
        }
}

/* flatten and reshape_like: same data, new shape. */
static void op_copy(op_args *a) {
    memcpy(a->y, a->x[0], sizeof(double) * (size_t)ir_numel(&a->n->type));
}

/* c[i][j] = sum over q of a(i, q) * b(q, j), c row-major [m, n]; the
 * strides say how a and b are laid out, so dense and both its gradients
 * (which read the same matrices transposed) are this one loop. */
static void matmul(int64_t m, int64_t n, int64_t depth, const double *a, int64_t a_row,
                   int64_t a_col, const double *b, int64_t b_row, int64_t b_col, double *c) {
    for (int64_t i = 0; i < m; i++)
        for (int64_t j = 0; j < n; j++) {
            double sum = 0;
            for (int64_t q = 0; q < depth; q++)
                sum += a[i * a_row + q * a_col] * b[q * b_row + j * b_col];
            c[i * n + j] = sum;
        }
}

/* The rows of a dense operand: every axis but the last. */
static int64_t lead_of(const ir_type *t) { return ir_numel(t) / t->dim[t->ndim - 1]; }

/* matmul(a, b) ta,tb: op(a)·op(b) per leading index, op(t) t or its last
 * two axes swapped. */
static void op_matmul(op_args *a) {
    const ir_type *c = &a->n->type;
    int r = c->ndim, ta = (int)a->n->iattr[0], tb = (int)a->n->iattr[1];
    int64_t M = c->dim[r - 2], N = c->dim[r - 1], K = a->in[0]->dim[r - 1 - ta];
    for (int64_t p = 0; p < ir_numel(c) / (M * N); p++)
        matmul(M, N, K, a->x[0] + p * M * K, ta ? 1 : K, ta ? M : 1, a->x[1] + p * K * N,
               tb ? 1 : N, tb ? K : 1, a->y + p * M * N);
}

static void op_bias_add_last(op_args *a) {
    int64_t n = ir_numel(&a->n->type), C = a->in[1]->dim[0];
    for (int64_t i = 0; i < n; i++) a->y[i] = a->x[0][i] + a->x[1][i % C];
}

/* dense(x [N, F], w [U, F]) = x w^T. */
static void op_dense(op_args *a) {
    int64_t N = lead_of(a->in[0]), F = a->in[1]->dim[1], U = a->in[1]->dim[0];
    matmul(N, U, F, a->x[0], F, 1, a->x[1], 1, F, a->y);
}

/* A label is a class index stored as a double; anything else is -1. */
static int64_t label_of(double v, int64_t classes) {
    if (!(v >= 0 && v < (double)classes) || v != floor(v)) return -1;
    return (int64_t)v;
}

/* log(sum(exp(row))) computed around the row's maximum so it never
 * overflows; also used by the gradient for the softmax itself. */
static double log_sum_exp(const double *row, int64_t K) {
    double m = row[0];
    for (int64_t k = 1; k < K; k++)
        if (row[k] > m) m = row[k];
    double sum = 0;
    for (int64_t k = 0; k < K; k++) sum += exp(row[k] - m);
    return m + log(sum);
}

/* Label smoothing e: the target is (1-e)*onehot + e/K, so the loss is
 * lse - (1-e)*row[y] - e*mean(row). */
static void op_softmax_ce(op_args *a) {
    int64_t N = a->in[0]->dim[0], K = a->in[0]->dim[1];
    double e = a->n->fattr[0];
    for (int64_t n = 0; n < N; n++) {
        const double *row = a->x[0] + n * K;
        int64_t y = label_of(a->x[1][n], K);
        double sum = 0;
        for (int64_t k = 0; e != 0 && k < K; k++) sum += row[k];
        a->y[n] = y < 0 ? NAN : log_sum_exp(row, K) - (1 - e) * row[y] - e * sum / (double)K;
    }
}

/* ---- BatchNorm: the high-level op and its primitives ------------------------ */

static void channel_mean(const double *x, chan_layout l, double *mean) {
    for (int64_t c = 0; c < l.c; c++) {
        double sum = 0;
        for (int64_t n = 0; n < l.n; n++)
            for (int64_t i = 0; i < l.inner; i++) sum += x[AT(l, n, c, i)];
        mean[c] = sum / (double)(l.n * l.inner);
    }
}

/* Biased (divide by M) variance around the given mean. */
static void channel_var(const double *x, chan_layout l, const double *mean, double *var) {
    for (int64_t c = 0; c < l.c; c++) {
        double sum = 0;
        for (int64_t n = 0; n < l.n; n++)
            for (int64_t i = 0; i < l.inner; i++) {
                double d = x[AT(l, n, c, i)] - mean[c];
                sum += d * d;
            }
        var[c] = sum / (double)(l.n * l.inner);
    }
}

static void bn_normalise(const double *x, chan_layout l, const double *mean, const double *var,
                         const double *gamma, const double *beta, double eps, double *y) {
    for (int64_t n = 0; n < l.n; n++)
        for (int64_t c = 0; c < l.c; c++) {
            double inv = 1.0 / sqrt(var[c] + eps);
            for (int64_t i = 0; i < l.inner; i++) {
                int64_t at = AT(l, n, c, i);
                y[at] = (x[at] - mean[c]) * inv * gamma[c] + beta[c];
            }
        }
}

static void ema(double *running, const double *value, int64_t n, double momentum, double scale,
                double *out) {
    for (int64_t i = 0; i < n; i++)
        out[i] = momentum * running[i] + (1 - momentum) * value[i] * scale;
}

/* batchnorm(x, gamma, beta, running_mean, running_var) training; eps, momentum.
 * Training normalises with the batch statistics and updates the running
 * ones in place (unbiased variance, as cuDNN); inference uses the running
 * statistics and changes nothing. */
static void op_batchnorm(op_args *a) {
    chan_layout l = layout_of(a->in[0]);
    double eps = a->n->fattr[0], momentum = a->n->fattr[1];
    double *rmean = a->x[3], *rvar = a->x[4];
    if (!a->n->iattr[0]) {
        bn_normalise(a->x[0], l, rmean, rvar, a->x[1], a->x[2], eps, a->y);
        return;
    }
    double *mean = malloc(sizeof(double) * (size_t)l.c),
           *var = malloc(sizeof(double) * (size_t)l.c);
    if (!mean || !var) abort();
    channel_mean(a->x[0], l, mean);
    channel_var(a->x[0], l, mean, var);
    bn_normalise(a->x[0], l, mean, var, a->x[1], a->x[2], eps, a->y);
    int64_t M = l.n * l.inner;
    ema(rmean, mean, l.c, momentum, 1.0, rmean);
    ema(rvar, var, l.c, momentum, M > 1 ? (double)M / (double)(M - 1) : 1.0, rvar);
    free(mean);
    free(var);
}

static void op_bn_mean(op_args *a) { channel_mean(a->x[0], layout_of(a->in[0]), a->y); }
static void op_bn_var(op_args *a) { channel_var(a->x[0], layout_of(a->in[0]), a->x[1], a->y); }

static void op_bn_apply(op_args *a) {
    bn_normalise(a->x[0], layout_of(a->in[0]), a->x[1], a->x[2], a->x[3], a->x[4], a->n->fattr[0],
                 a->y);
}

static void op_ema(op_args *a) {
    ema(a->x[0], a->x[1], ir_numel(&a->n->type), a->n->fattr[0], a->n->fattr[1], a->y);
}

/* The target's buffer and the assign's own both end up holding the value:
 * readers of the assign see the new value, as on a device where they alias. */
static void op_assign(op_args *a) {
    size_t bytes = sizeof(double) * (size_t)ir_numel(&a->n->type);
    memmove(a->x[0], a->x[1], bytes);
    memcpy(a->y, a->x[1], bytes);
}

static void op_ones_like(op_args *a) {
    int64_t n = ir_numel(&a->n->type);
    for (int64_t i = 0; i < n; i++) a->y[i] = 1;
}

/* ---- backward ops ------------------------------------------------------------ */

static void op_conv_grad_data(op_args *a) {
    memset(a->y, 0, sizeof(double) * (size_t)ir_numel(&a->n->type));
    conv_loop(CONV_GRAD_DATA, &a->n->type, a->in[0], a->n, NULL, a->x[1], a->x[0], a->y);
}

static void op_conv_grad_weight(op_args *a) {
    memset(a->y, 0, sizeof(double) * (size_t)ir_numel(&a->n->type));
    conv_loop(CONV_GRAD_WEIGHT, a->in[1], a->in[0], a->n, a->x[1], NULL, a->x[0], a->y);
}

static void op_bias_grad(op_args *a) {
    chan_layout l = layout_of(a->in[0]);
    for (int64_t c = 0; c < l.c; c++) {
        double sum = 0;
        for (int64_t n = 0; n < l.n; n++)
            for (int64_t i = 0; i < l.inner; i++) sum += a->x[0][AT(l, n, c, i)];
        a->y[c] = sum;
    }
}

/* bn_grad_gamma(dy, x, mean, var) eps: per-channel sum(dy * xhat). */
static void op_bn_grad_gamma(op_args *a) {
    chan_layout l = layout_of(a->in[0]);
    const double *dy = a->x[0], *x = a->x[1], *mean = a->x[2], *var = a->x[3];
    for (int64_t c = 0; c < l.c; c++) {
        double inv = 1.0 / sqrt(var[c] + a->n->fattr[0]), sum = 0;
        for (int64_t n = 0; n < l.n; n++)
            for (int64_t i = 0; i < l.inner; i++) {
                int64_t at = AT(l, n, c, i);
                sum += dy[at] * (x[at] - mean[c]) * inv;
            }
        a->y[c] = sum;
    }
}

/* bn_grad_data(dy, x, mean, var, gamma, dgamma, dbeta) eps. */
static void op_bn_grad_data(op_args *a) {
    chan_layout l = layout_of(a->in[0]);
    const double *dy = a->x[0], *x = a->x[1], *mean = a->x[2], *var = a->x[3];
    const double *gamma = a->x[4], *dgamma = a->x[5], *dbeta = a->x[6];
    double M = (double)(l.n * l.inner);
    for (int64_t n = 0; n < l.n; n++)
        for (int64_t c = 0; c < l.c; c++) {
            double inv = 1.0 / sqrt(var[c] + a->n->fattr[0]);
            for (int64_t i = 0; i < l.inner; i++) {
                int64_t at = AT(l, n, c, i);
                double xhat = (x[at] - mean[c]) * inv;
                a->y[at] = gamma[c] * inv * (dy[at] - dbeta[c] / M - xhat * dgamma[c] / M);
            }
        }
}

static void op_relu_grad(op_args *a) {
    int64_t n = ir_numel(&a->n->type);
    for (int64_t i = 0; i < n; i++) a->y[i] = a->x[1][i] > 0 ? a->x[0][i] : 0;
}

/* Hands one window's dy (the window of size k at (h0, w0) of channel c of
 * sample n) to the inputs it came from; overlapping windows accumulate. */
typedef void (*spread_fn)(op_args *a, const ir_type *xt, int64_t n, int64_t c, int64_t h0,
                          int64_t w0, int64_t k, double dy);

/* To the element the forward pass picked: the first maximum in row-major order. */
static void spread_max(op_args *a, const ir_type *xt, int64_t n, int64_t c, int64_t h0, int64_t w0,
                       int64_t k, double dy) {
    int64_t at = window_argmax(a->x[1], xt, n, c, h0, w0, k);
    if (at >= 0) a->y[at] += dy;
}

static void spread_mean(op_args *a, const ir_type *xt, int64_t n, int64_t c, int64_t h0, int64_t w0,
                        int64_t k, double dy) {
    double d = dy / (double)(k * k);
    for (int64_t t = 0; t < k * k; t++) {
        int64_t at = window_tap(xt, n, c, h0, w0, k, t);
        if (at >= 0) a->y[at] += d;
    }
}

static void pool_grad(op_args *a, const ir_type *xt, spread_fn spread) {
    const ir_type *dyt = a->in[0];
    int64_t k = a->n->iattr[0], s = a->n->iattr[1], p = a->n->iattr[2];
    memset(a->y, 0, sizeof(double) * (size_t)ir_numel(xt));
    for (int64_t n = 0; n < dyt->dim[0]; n++)
        for (int64_t c = 0; c < dyt->dim[1]; c++)
            for (int64_t oh = 0; oh < dyt->dim[2]; oh++)
                for (int64_t ow = 0; ow < dyt->dim[3]; ow++)
                    spread(a, xt, n, c, oh * s - p, ow * s - p, k,
                           a->x[0][IDX4(dyt, n, c, oh, ow)]);
}

static void op_maxpool_grad(op_args *a) { pool_grad(a, a->in[1], spread_max); }
static void op_avgpool_grad(op_args *a) { pool_grad(a, &a->n->type, spread_mean); }

static void op_global_avgpool_grad(op_args *a) {
    chan_layout l = layout_of(&a->n->type);
    for (int64_t n = 0; n < l.n; n++)
        for (int64_t c = 0; c < l.c; c++)
            for (int64_t i = 0; i < l.inner; i++)
                a->y[AT(l, n, c, i)] = a->x[0][n * l.c + c] / (double)l.inner;
}

/* dense_grad_data(dy [N, U], w [U, F]) = dy w. */
static void op_dense_grad_data(op_args *a) {
    int64_t N = lead_of(a->in[0]), U = a->in[1]->dim[0], F = a->in[1]->dim[1];
    matmul(N, F, U, a->x[0], U, 1, a->x[1], F, 1, a->y);
}

/* dense_grad_weight(dy [N, U], x [N, F]) = dy^T x. */
static void op_dense_grad_weight(op_args *a) {
    int64_t N = lead_of(a->in[0]), U = a->n->type.dim[0], F = a->n->type.dim[1];
    matmul(U, F, N, a->x[0], 1, U, a->x[1], F, 1, a->y);
}

static void op_softmax_ce_grad(op_args *a) {
    int64_t N = a->in[0]->dim[0], K = a->in[0]->dim[1];
    for (int64_t n = 0; n < N; n++) {
        const double *row = a->x[0] + n * K;
        double lse = log_sum_exp(row, K), d = a->x[2][n], e = a->n->fattr[0];
        int64_t y = label_of(a->x[1][n], K);
        for (int64_t k = 0; k < K; k++)
            a->y[n * K + k] =
                y < 0 ? NAN : (exp(row[k] - lse) - (1 - e) * (k == y) - e / (double)K) * d;
    }
}

/* sgd_momentum(w, grad, v, lr, grad_scale) momentum, wd: MXNet's update. */
static void op_sgd_momentum(op_args *a) {
    double momentum = a->n->fattr[0], wd = a->n->fattr[1], lr = a->x[3][0], scale = a->x[4][0];
    int64_t n = ir_numel(&a->n->type);
    for (int64_t i = 0; i < n; i++)
        a->y[i] = momentum * a->x[2][i] - lr * (a->x[1][i] * scale + wd * a->x[0][i]);
}

static void op_scale(op_args *a) {
    int64_t n = ir_numel(&a->n->type);
    for (int64_t i = 0; i < n; i++) a->y[i] = a->x[0][i] * a->x[1][0];
}

static void op_bn_unbias(op_args *a) {
    double count = a->n->fattr[0];
    int64_t n = ir_numel(&a->n->type);
    for (int64_t i = 0; i < n; i++) a->y[i] = a->x[0][i] * (count / (count - a->x[1][0]));
}

/* The other optimizers' pieces (ir.h; g = grad * grad_scale). */
static void op_sumsq(op_args *a) {
    double sum = 0;
    for (int64_t i = 0; i < ir_numel(a->in[0]); i++) sum += a->x[0][i] * a->x[0][i];
    a->y[0] = sum;
}

static void op_lars_lr(op_args *a) {
    double eta = a->n->fattr[0], wd = a->n->fattr[1], eps = a->n->fattr[2];
    double w = sqrt(a->x[0][0]), g = sqrt(a->x[1][0]) * a->x[3][0], lr = a->x[2][0];
    a->y[0] = w > 0 && g > 0 ? lr * (eta * w / (g + wd * w + eps)) : lr;
}

static void op_adam_moment(op_args *a) {
    double beta = a->n->fattr[0], scale = a->x[2][0];
    for (int64_t i = 0; i < ir_numel(&a->n->type); i++) {
        double g = a->x[1][i] * scale;
        a->y[i] = beta * a->x[0][i] + (1 - beta) * (a->n->op == IR_OP_ADAM_V ? g * g : g);
    }
}

static void op_bias_correction(op_args *a) { a->y[0] = 1 / (1 - pow(a->n->fattr[0], a->x[0][0])); }

static void op_adam_dir(op_args *a) {
    double eps = a->n->fattr[0], wd = a->n->fattr[1], c1 = a->x[3][0], c2 = a->x[4][0];
    for (int64_t i = 0; i < ir_numel(&a->n->type); i++)
        a->y[i] = a->x[1][i] * c1 / (sqrt(a->x[2][i] * c2) + eps) + wd * a->x[0][i];
}

static void op_lamb_lr(op_args *a) {
    double w = sqrt(a->x[0][0]), u = sqrt(a->x[1][0]), lr = a->x[2][0];
    a->y[0] = w > 0 && u > 0 ? lr * (w / u) : lr;
}

/* PyTorch's clip_grad_norm_ as grad_scale·min(1, C/(‖g‖ + 1e-6)). */
static void op_clip_scale(op_args *a) {
    double gs = a->x[1][0], c = a->n->fattr[0] / (sqrt(a->x[0][0]) * gs + 1e-6);
    a->y[0] = c >= 1 ? gs : gs * c;
}

static void op_descend(op_args *a) {
    for (int64_t i = 0; i < ir_numel(&a->n->type); i++)
        a->y[i] = a->x[0][i] - a->x[2][0] * a->x[1][i];
}

/* ---- activations and products ------------------------------------------------------ */

static void op_sigmoid(op_args *a) {
    for (int64_t i = 0; i < ir_numel(&a->n->type); i++) a->y[i] = 1 / (1 + exp(-a->x[0][i]));
}

static void op_sigmoid_grad(op_args *a) {
    for (int64_t i = 0; i < ir_numel(&a->n->type); i++)
        a->y[i] = a->x[0][i] * (a->x[1][i] * (1 - a->x[1][i]));
}

static void op_clip(op_args *a) {
    double lo = a->n->fattr[0], hi = a->n->fattr[1];
    for (int64_t i = 0; i < ir_numel(&a->n->type); i++) {
        double x = a->x[0][i];
        a->y[i] = x < lo ? lo : x > hi ? hi : x;
    }
}

static void op_clip_grad(op_args *a) {
    double lo = a->n->fattr[0], hi = a->n->fattr[1];
    for (int64_t i = 0; i < ir_numel(&a->n->type); i++) {
        double x = a->x[1][i];
        a->y[i] = x >= lo && x <= hi ? a->x[0][i] : 0;
    }
}

static void op_mul(op_args *a) {
    for (int64_t i = 0; i < ir_numel(&a->n->type); i++) a->y[i] = a->x[0][i] * a->x[1][i];
}

/* x[n][c][j] * s[n][c]: s is [N,C,1,1] or [N,C], element n*C + c either way. */
static void op_mul_channel(op_args *a) {
    chan_layout l = layout_of(a->in[0]);
    for (int64_t n = 0; n < l.n; n++)
        for (int64_t c = 0; c < l.c; c++)
            for (int64_t i = 0; i < l.inner; i++)
                a->y[AT(l, n, c, i)] = a->x[0][AT(l, n, c, i)] * a->x[1][n * l.c + c];
}

static void op_plane_dot(op_args *a) {
    chan_layout l = layout_of(a->in[0]);
    for (int64_t n = 0; n < l.n; n++)
        for (int64_t c = 0; c < l.c; c++) {
            double sum = 0;
            for (int64_t i = 0; i < l.inner; i++)
                sum += a->x[0][AT(l, n, c, i)] * a->x[1][AT(l, n, c, i)];
            a->y[n * l.c + c] = sum;
        }
}

/* Inputs one after another along the channels, sample by sample. */
/* An axis splits a row-major tensor into [outer, dim[axis], inner]. */
static int64_t outer_of(const ir_type *t, int axis) {
    int64_t o = 1;
    for (int d = 0; d < axis; d++) o *= t->dim[d];
    return o;
}
static int64_t inner_after(const ir_type *t, int axis) {
    int64_t o = 1;
    for (int d = axis + 1; d < t->ndim; d++) o *= t->dim[d];
    return o;
}

/* The inputs one after another along axis (1 for the channels). */
static void op_concat(op_args *a) {
    int axis = (int)a->n->iattr[0];
    const ir_type *y = &a->n->type;
    int64_t outer = outer_of(y, axis), inner = inner_after(y, axis), A = y->dim[axis], off = 0;
    for (int k = 0; k < a->n->ninputs; k++) {
        int64_t Ak = a->in[k]->dim[axis];
        for (int64_t o = 0; o < outer; o++)
            for (int64_t c = 0; c < Ak; c++)
                for (int64_t j = 0; j < inner; j++)
                    a->y[(o * A + off + c) * inner + j] = a->x[k][(o * Ak + c) * inner + j];
        off += Ak;
    }
}

/* slice: [start, start+len) of axis; slice_grad: dy there, zeros elsewhere. */
static void op_slice(op_args *a) {
    int axis = (int)a->n->iattr[0];
    int64_t start = a->n->iattr[1];
    int grad = a->n->op == IR_OP_SLICE_GRAD;
    const ir_type *big = grad ? &a->n->type : a->in[0], *small = grad ? a->in[0] : &a->n->type;
    int64_t outer = outer_of(big, axis), inner = inner_after(big, axis);
    int64_t B = big->dim[axis], L = small->dim[axis];
    if (grad) memset(a->y, 0, sizeof(double) * (size_t)ir_numel(big));
    for (int64_t o = 0; o < outer; o++)
        for (int64_t c = 0; c < L; c++)
            for (int64_t j = 0; j < inner; j++) {
                int64_t bi = (o * B + start + c) * inner + j, si = (o * L + c) * inner + j;
                if (grad)
                    a->y[bi] = a->x[0][si];
                else
                    a->y[si] = a->x[0][bi];
            }
}

/* Output axis k is input axis p[k]: walk the output in order. */
static void op_permute(op_args *a) {
    const ir_type *x = a->in[0], *y = &a->n->type;
    int r = x->ndim;
    int64_t stride[IR_MAX_DIMS], idx[IR_MAX_DIMS] = {0}, s = 1;
    for (int d = r - 1; d >= 0; d--) stride[d] = s, s *= x->dim[d];
    for (int64_t e = 0; e < ir_numel(y); e++) {
        int64_t rest = e, src = 0;
        for (int k = r - 1; k >= 0; k--) idx[k] = rest % y->dim[k], rest /= y->dim[k];
        for (int k = 0; k < r; k++) src += idx[k] * stride[a->n->iattr[k]];
        a->y[e] = a->x[0][src];
    }
}

/* Key j of sample n whose id is the padding id: -inf, or 0 in the gradient. */
static void op_pad_mask(op_args *a) {
    const ir_type *t = &a->n->type;
    int64_t tk = t->dim[t->ndim - 1], per = ir_numel(t) / t->dim[0];
    for (int64_t e = 0; e < ir_numel(t); e++) {
        int keep = (int64_t)a->x[1][e / per * tk + e % tk] != a->n->iattr[0];
        a->y[e] = keep ? a->x[0][e] : a->n->iattr[1] ? 0 : -INFINITY;
    }
}

/* Key j > query i + (Tk - Tq): -inf, or 0 in the gradient. */
static void op_causal_mask(op_args *a) {
    const ir_type *t = &a->n->type;
    int64_t tq = t->dim[t->ndim - 2], tk = t->dim[t->ndim - 1];
    for (int64_t e = 0; e < ir_numel(t); e++) {
        int64_t j = e % tk, i = e / tk % tq;
        a->y[e] = j <= i + tk - tq ? a->x[0][e] : a->n->iattr[0] ? 0 : -INFINITY;
    }
}

static void op_channel_slice(op_args *a) {
    chan_layout l = layout_of(&a->n->type), lx = layout_of(a->in[0]);
    int64_t off = a->n->iattr[0];
    for (int64_t n = 0; n < l.n; n++)
        for (int64_t c = 0; c < l.c; c++)
            for (int64_t i = 0; i < l.inner; i++)
                a->y[AT(l, n, c, i)] = a->x[0][AT(lx, n, off + c, i)];
}

/* The key's four 16-bit chunks, low first (floats hold them exactly). */
static uint64_t dropout_key(const double *k) {
    uint64_t key = 0;
    for (int j = 0; j < 4; j++) key |= ((uint64_t)(int64_t)k[j] & 0xffff) << (16 * j);
    return key;
}

/* Rows of w by id; ids are stored as doubles here. Clamped as codegen's. */
static int64_t clamp_id(double v, int64_t vocab) {
    int64_t id = (int64_t)v;
    return id < 0 ? 0 : id >= vocab ? vocab - 1 : id;
}

static void op_embedding(op_args *a) {
    int64_t D = a->in[1]->dim[1], V = a->in[1]->dim[0], rows = ir_numel(a->in[0]);
    for (int64_t r = 0; r < rows; r++) {
        int64_t id = clamp_id(a->x[0][r], V);
        for (int64_t d = 0; d < D; d++) a->y[r * D + d] = a->x[1][id * D + d];
    }
}

static void op_embedding_grad(op_args *a) {
    int64_t V = a->n->type.dim[0], D = a->n->type.dim[1], rows = ir_numel(a->in[1]);
    for (int64_t e = 0; e < V * D; e++) a->y[e] = 0;
    for (int64_t r = 0; r < rows; r++) {
        int64_t id = clamp_id(a->x[1][r], V);
        for (int64_t d = 0; d < D; d++) a->y[id * D + d] += a->x[0][r * D + d];
    }
}

/* The sequence loss: per sequence n, the kept positions' count, the
 * sum of their losses and whether a kept target is out of range. */
static double seq_count(op_args *a, int64_t n, int *bad) {
    int64_t T = a->in[0]->dim[1], V = a->in[0]->dim[2];
    double cnt = 0;
    for (int64_t t = 0; t < T; t++) {
        double y = a->x[1][n * T + t];
        if (y == (double)a->n->iattr[0]) continue;
        cnt++;
        *bad |= label_of(y, V) < 0;
    }
    return cnt;
}

static void op_seq_ce(op_args *a) {
    int64_t N = a->in[0]->dim[0], T = a->in[0]->dim[1], V = a->in[0]->dim[2];
    for (int64_t n = 0; n < N; n++) {
        int bad = 0;
        double cnt = seq_count(a, n, &bad), sum = 0;
        for (int64_t t = 0; t < T && !bad; t++) {
            double y = a->x[1][n * T + t];
            const double *row = a->x[0] + (n * T + t) * V;
            if (y != (double)a->n->iattr[0]) sum += log_sum_exp(row, V) - row[(int64_t)y];
        }
        a->y[n] = bad ? NAN : cnt > 0 ? sum / cnt : 0;
    }
}

static void op_seq_ce_grad(op_args *a) {
    int64_t N = a->in[0]->dim[0], T = a->in[0]->dim[1], V = a->in[0]->dim[2];
    for (int64_t n = 0; n < N; n++) {
        int bad = 0;
        double cnt = seq_count(a, n, &bad);
        for (int64_t t = 0; t < T; t++) {
            double y = a->x[1][n * T + t], *dx = a->y + (n * T + t) * V;
            const double *row = a->x[0] + (n * T + t) * V;
            int keep = y != (double)a->n->iattr[0];
            double lse = log_sum_exp(row, V);
            for (int64_t k = 0; k < V; k++)
                dx[k] = bad    ? NAN
                        : keep ? (exp(row[k] - lse) - (k == (int64_t)y)) * a->x[2][n] / cnt
                               : 0;
        }
    }
}

/* Fused attention (ir.h), a plain loop over (n, h, i, j) in double: the
 * inputs from q's index `at`, the key (when p > 0) at `at` + 3 or 6. */
typedef struct {
    int64_t N, Tq, Tk, C, H, D;
    int causal;
    double scale, p;
    uint64_t key, thr;
    int64_t salt;
} attn_dims;

static attn_dims attn_of(const op_args *a, int at, int key_at) {
    const ir_node *n = a->n;
    attn_dims d = {a->in[at]->dim[0],
                   a->in[at]->dim[1],
                   a->in[at + 1]->dim[1],
                   a->in[at]->dim[2],
                   n->iattr[0],
                   a->in[at]->dim[2] / n->iattr[0],
                   (int)n->iattr[1],
                   n->fattr[0],
                   0,
                   0,
                   0,
                   0};
    if (key_at > 0 && n->fattr[1] > 0) {
        d.p = n->fattr[1];
        d.key = dropout_key(a->x[key_at]);
        d.thr = ir_dropout_threshold(d.p);
        d.salt = n->iattr[2];
    }
    return d;
}

/* Row (n, h, i)'s visible scores scale·q_i·k_j into s; returns their count. */
static int64_t attn_scores(const attn_dims *d, const double *q, const double *k, int64_t n,
                           int64_t h, int64_t i, double *s) {
    int64_t end = d->causal ? i + d->Tk - d->Tq + 1 : d->Tk;
    for (int64_t j = 0; j < end; j++) {
        double dot = 0;
        for (int64_t c = 0; c < d->D; c++)
            dot +=
                q[(n * d->Tq + i) * d->C + h * d->D + c] * k[(n * d->Tk + j) * d->C + h * d->D + c];
        s[j] = d->scale * dot;
    }
    return end;
}

/* The dropout factor of weight (n, h, i, j): 1/(1-p) kept, 0 dropped. */
static double attn_keep(const attn_dims *d, int64_t n, int64_t h, int64_t i, int64_t j) {
    if (d->p == 0) return 1;
    int64_t e = ((n * d->H + h) * d->Tq + i) * d->Tk + j;
    return ir_dropout_hash(d->key, d->salt, e) >> 40 >= d->thr ? 1 / (1 - d->p) : 0;
}

/* attention (y = out) and attention_lse (y = lse). */
static void op_attention(op_args *a) {
    attn_dims d = attn_of(a, 0, 3);
    double *s = malloc(sizeof *s * (size_t)d.Tk);
    for (int64_t n = 0; n < d.N; n++)
        for (int64_t h = 0; h < d.H; h++)
            for (int64_t i = 0; i < d.Tq; i++) {
                int64_t end = attn_scores(&d, a->x[0], a->x[1], n, h, i, s);
                double lse = log_sum_exp(s, end);
                if (a->n->op == IR_OP_ATTENTION_LSE) {
                    a->y[(n * d.H + h) * d.Tq + i] = lse;
                    continue;
                }
                double *o = a->y + (n * d.Tq + i) * d.C + h * d.D;
                for (int64_t c = 0; c < d.D; c++) o[c] = 0;
                for (int64_t j = 0; j < end; j++) {
                    double w = exp(s[j] - lse) * attn_keep(&d, n, h, i, j);
                    for (int64_t c = 0; c < d.D; c++)
                        o[c] += w * a->x[2][(n * d.Tk + j) * d.C + h * d.D + c];
                }
            }
    free(s);
}

/* attention_grad(dy, q, k, v, out, lse [, key]): dq, dk or dv (which). */
static void op_attention_grad(op_args *a) {
    attn_dims d = attn_of(a, 1, 6);
    int which = (int)a->n->iattr[3];
    const double *dy = a->x[0], *q = a->x[1], *k = a->x[2], *v = a->x[3], *o = a->x[4];
    double *s = malloc(sizeof *s * (size_t)d.Tk);
    for (int64_t e = 0; e < ir_numel(&a->n->type); e++) a->y[e] = 0;
    for (int64_t n = 0; n < d.N; n++)
        for (int64_t h = 0; h < d.H; h++)
            for (int64_t i = 0; i < d.Tq; i++) {
                int64_t end = attn_scores(&d, q, k, n, h, i, s),
                        qi = (n * d.Tq + i) * d.C + h * d.D;
                double lse = a->x[5][(n * d.H + h) * d.Tq + i], di = 0;
                for (int64_t c = 0; c < d.D; c++) di += dy[qi + c] * o[qi + c];
                for (int64_t j = 0; j < end; j++) {
                    int64_t kj = (n * d.Tk + j) * d.C + h * d.D;
                    double p = exp(s[j] - lse), m = attn_keep(&d, n, h, i, j), dp = 0;
                    for (int64_t c = 0; c < d.D; c++) dp += dy[qi + c] * v[kj + c];
                    double ds = p * (m * dp - di);
                    for (int64_t c = 0; c < d.D; c++) {
                        if (which == 0) a->y[qi + c] += d.scale * ds * k[kj + c];
                        if (which == 1) a->y[kj + c] += d.scale * ds * q[qi + c];
                        if (which == 2) a->y[kj + c] += p * m * dy[qi + c];
                    }
                }
            }
    free(s);
}

/* y[n, t] = w[t]; dw[t] = the sum over n of dy[n, t] (rows >= T zero). */
static void op_positions(op_args *a) {
    int64_t N = a->n->type.dim[0], TD = a->n->type.dim[1] * a->n->type.dim[2];
    for (int64_t r = 0; r < N; r++)
        for (int64_t e = 0; e < TD; e++) a->y[r * TD + e] = a->x[1][e];
}

static void op_positions_grad(op_args *a) {
    int64_t N = a->in[0]->dim[0], TD = a->in[0]->dim[1] * a->in[0]->dim[2];
    for (int64_t e = 0; e < ir_numel(&a->n->type); e++) a->y[e] = 0;
    for (int64_t r = 0; r < N; r++)
        for (int64_t e = 0; e < TD; e++) a->y[e] += a->x[0][r * TD + e];
}

static void op_dropout(op_args *a) {
    uint64_t key = dropout_key(a->x[1]), thr = ir_dropout_threshold(a->n->fattr[0]);
    double scale = 1 / (1 - a->n->fattr[0]);
    for (int64_t i = 0; i < ir_numel(&a->n->type); i++)
        a->y[i] = ir_dropout_hash(key, a->n->iattr[0], i) >> 40 >= thr ? a->x[0][i] * scale : 0;
}

/* ---- attention networks' activations ---------------------------------------------- */

static void op_tanh(op_args *a) {
    for (int64_t i = 0; i < ir_numel(&a->n->type); i++) a->y[i] = tanh(a->x[0][i]);
}

static void op_tanh_grad(op_args *a) {
    for (int64_t i = 0; i < ir_numel(&a->n->type); i++)
        a->y[i] = a->x[0][i] * (1 - a->x[1][i] * a->x[1][i]);
}

/* The arithmetic of the .net language: t - u, t * c, t + c. */
static void op_sub(op_args *a) {
    for (int64_t i = 0; i < ir_numel(&a->n->type); i++) a->y[i] = a->x[0][i] - a->x[1][i];
}

static void op_mul_const(op_args *a) {
    for (int64_t i = 0; i < ir_numel(&a->n->type); i++) a->y[i] = a->x[0][i] * a->n->fattr[0];
}

static void op_add_const(op_args *a) {
    for (int64_t i = 0; i < ir_numel(&a->n->type); i++) a->y[i] = a->x[0][i] + a->n->fattr[0];
}

/* x·Φ(x), Φ the standard normal distribution function */
static void op_gelu(op_args *a) {
    for (int64_t i = 0; i < ir_numel(&a->n->type); i++) {
        double x = a->x[0][i];
        a->y[i] = 0.5 * x * (1 + erf(x / sqrt(2)));
    }
}

static void op_gelu_grad(op_args *a) {
    for (int64_t i = 0; i < ir_numel(&a->n->type); i++) {
        double x = a->x[1][i], pdf = exp(-0.5 * x * x) / sqrt(2 * M_PI);
        a->y[i] = a->x[0][i] * (0.5 * (1 + erf(x / sqrt(2))) + x * pdf);
    }
}

static const double gelu_k = 0.7978845608028654; /* sqrt(2/pi) */

static void op_gelu_tanh(op_args *a) {
    for (int64_t i = 0; i < ir_numel(&a->n->type); i++) {
        double x = a->x[0][i];
        a->y[i] = 0.5 * x * (1 + tanh(gelu_k * (x + 0.044715 * x * x * x)));
    }
}

static void op_gelu_tanh_grad(op_args *a) {
    for (int64_t i = 0; i < ir_numel(&a->n->type); i++) {
        double x = a->x[1][i], t = tanh(gelu_k * (x + 0.044715 * x * x * x));
        double du = gelu_k * (1 + 3 * 0.044715 * x * x);
        a->y[i] = a->x[0][i] * (0.5 * (1 + t) + 0.5 * x * (1 - t * t) * du);
    }
}

/* ---- row ops: the last axis of [R..., C] ----------------------------------------- */

static int64_t row_len(const ir_type *t) { return t->dim[t->ndim - 1]; }

/* mean and 1/sqrt(biased var + eps) of row r */
static void row_stats(const double *x, int64_t C, double eps, double *mean, double *rstd) {
    double s = 0, v = 0;
    for (int64_t j = 0; j < C; j++) s += x[j];
    *mean = s / (double)C;
    for (int64_t j = 0; j < C; j++) v += (x[j] - *mean) * (x[j] - *mean);
    *rstd = 1 / sqrt(v / (double)C + eps);
}

static void op_layernorm(op_args *a) {
    int64_t C = row_len(a->in[0]), R = ir_numel(a->in[0]) / C;
    for (int64_t r = 0; r < R; r++) {
        double mean, rstd;
        row_stats(a->x[0] + r * C, C, a->n->fattr[0], &mean, &rstd);
        for (int64_t j = 0; j < C; j++)
            a->y[r * C + j] = (a->x[0][r * C + j] - mean) * rstd * a->x[1][j] + a->x[2][j];
    }
}

static void op_layernorm_stats(op_args *a) {
    int64_t C = row_len(a->in[0]), R = ir_numel(a->in[0]) / C;
    for (int64_t r = 0; r < R; r++)
        row_stats(a->x[0] + r * C, C, a->n->fattr[0], &a->y[2 * r], &a->y[2 * r + 1]);
}

static void op_layernorm_grad_data(op_args *a) {
    int64_t C = row_len(a->in[0]), R = ir_numel(a->in[0]) / C;
    const double *dy = a->x[0], *x = a->x[1], *st = a->x[2], *gamma = a->x[3];
    for (int64_t r = 0; r < R; r++) {
        double mean = st[2 * r], rstd = st[2 * r + 1], mg = 0, mgx = 0;
        for (int64_t j = 0; j < C; j++) {
            double g = dy[r * C + j] * gamma[j], xhat = (x[r * C + j] - mean) * rstd;
            mg += g / (double)C;
            mgx += g * xhat / (double)C;
        }
        for (int64_t j = 0; j < C; j++) {
            double g = dy[r * C + j] * gamma[j], xhat = (x[r * C + j] - mean) * rstd;
            a->y[r * C + j] = rstd * (g - mg - xhat * mgx);
        }
    }
}

static void op_layernorm_grad_gamma(op_args *a) {
    int64_t C = row_len(a->in[0]), R = ir_numel(a->in[0]) / C;
    for (int64_t j = 0; j < C; j++) {
        double s = 0;
        for (int64_t r = 0; r < R; r++)
            s += a->x[0][r * C + j] * (a->x[1][r * C + j] - a->x[2][2 * r]) * a->x[2][2 * r + 1];
        a->y[j] = s;
    }
}

static void op_sum_leading(op_args *a) {
    int64_t C = row_len(a->in[0]), R = ir_numel(a->in[0]) / C;
    for (int64_t j = 0; j < C; j++) {
        double s = 0;
        for (int64_t r = 0; r < R; r++) s += a->x[0][r * C + j];
        a->y[j] = s;
    }
}

static void op_softmax(op_args *a) {
    int64_t C = row_len(a->in[0]), R = ir_numel(a->in[0]) / C;
    for (int64_t r = 0; r < R; r++) {
        const double *x = a->x[0] + r * C;
        double m = -INFINITY, s = 0;
        for (int64_t j = 0; j < C; j++) m = fmax(m, x[j]);
        for (int64_t j = 0; j < C; j++) s += exp(x[j] - m);
        for (int64_t j = 0; j < C; j++) a->y[r * C + j] = exp(x[j] - m) / s;
    }
}

static void op_softmax_grad(op_args *a) {
    int64_t C = row_len(a->in[0]), R = ir_numel(a->in[0]) / C;
    for (int64_t r = 0; r < R; r++) {
        const double *dy = a->x[0] + r * C, *y = a->x[1] + r * C;
        double dot = 0;
        for (int64_t j = 0; j < C; j++) dot += dy[j] * y[j];
        for (int64_t j = 0; j < C; j++) a->y[r * C + j] = y[j] * (dy[j] - dot);
    }
}

/* ---- dispatch -------------------------------------------------------------------- */

typedef void (*op_fn)(op_args *);

static const op_fn op_table[IR_OP_COUNT] = {
    [IR_OP_CONV] = op_conv,
    [IR_OP_BIAS_ADD] = op_bias_add,
    [IR_OP_BIAS_ADD_LAST] = op_bias_add_last,
    [IR_OP_MATMUL] = op_matmul,
    [IR_OP_BATCHNORM] = op_batchnorm,
    [IR_OP_RELU] = op_relu,
    [IR_OP_ADD] = op_add,
    [IR_OP_MAXPOOL] = op_maxpool,
    [IR_OP_AVGPOOL] = op_avgpool,
    [IR_OP_GLOBAL_AVGPOOL] = op_global_avgpool,
    [IR_OP_FLATTEN] = op_copy,
    [IR_OP_DENSE] = op_dense,
    [IR_OP_SOFTMAX_CE] = op_softmax_ce,
    [IR_OP_BN_MEAN] = op_bn_mean,
    [IR_OP_BN_VAR] = op_bn_var,
    [IR_OP_BN_APPLY] = op_bn_apply,
    [IR_OP_EMA] = op_ema,
    [IR_OP_ASSIGN] = op_assign,
    [IR_OP_ONES_LIKE] = op_ones_like,
    [IR_OP_CONV_GRAD_DATA] = op_conv_grad_data,
    [IR_OP_CONV_GRAD_WEIGHT] = op_conv_grad_weight,
    [IR_OP_BIAS_GRAD] = op_bias_grad,
    [IR_OP_BN_GRAD_GAMMA] = op_bn_grad_gamma,
    [IR_OP_BN_GRAD_DATA] = op_bn_grad_data,
    [IR_OP_RELU_GRAD] = op_relu_grad,
    [IR_OP_MAXPOOL_GRAD] = op_maxpool_grad,
    [IR_OP_AVGPOOL_GRAD] = op_avgpool_grad,
    [IR_OP_GLOBAL_AVGPOOL_GRAD] = op_global_avgpool_grad,
    [IR_OP_RESHAPE_LIKE] = op_copy,
    [IR_OP_DENSE_GRAD_DATA] = op_dense_grad_data,
    [IR_OP_DENSE_GRAD_WEIGHT] = op_dense_grad_weight,
    [IR_OP_SOFTMAX_CE_GRAD] = op_softmax_ce_grad,
    [IR_OP_SGD_MOMENTUM] = op_sgd_momentum,
    [IR_OP_ALLREDUCE] = op_copy, /* the sum over one replica */
    [IR_OP_TRANSPOSE] = op_copy, /* tensors here are logical: a layout is storage */
    [IR_OP_SCALE] = op_scale,
    [IR_OP_BN_UNBIAS] = op_bn_unbias,
    [IR_OP_SUMSQ] = op_sumsq,
    [IR_OP_LARS_LR] = op_lars_lr,
    [IR_OP_ADAM_M] = op_adam_moment,
    [IR_OP_ADAM_V] = op_adam_moment,
    [IR_OP_BIAS_CORRECTION] = op_bias_correction,
    [IR_OP_ADAM_DIR] = op_adam_dir,
    [IR_OP_LAMB_LR] = op_lamb_lr,
    [IR_OP_DESCEND] = op_descend,
    [IR_OP_CLIP_SCALE] = op_clip_scale,
    [IR_OP_SIGMOID] = op_sigmoid,
    [IR_OP_SIGMOID_GRAD] = op_sigmoid_grad,
    [IR_OP_CLIP] = op_clip,
    [IR_OP_CLIP_GRAD] = op_clip_grad,
    [IR_OP_MUL] = op_mul,
    [IR_OP_MUL_CHANNEL] = op_mul_channel,
    [IR_OP_PLANE_DOT] = op_plane_dot,
    [IR_OP_CONCAT] = op_concat,
    [IR_OP_CHANNEL_SLICE] = op_channel_slice,
    [IR_OP_DROPOUT] = op_dropout,
    [IR_OP_TANH] = op_tanh,
    [IR_OP_SUB] = op_sub,
    [IR_OP_MUL_CONST] = op_mul_const,
    [IR_OP_ADD_CONST] = op_add_const,
    [IR_OP_TANH_GRAD] = op_tanh_grad,
    [IR_OP_GELU] = op_gelu,
    [IR_OP_GELU_GRAD] = op_gelu_grad,
    [IR_OP_GELU_TANH] = op_gelu_tanh,
    [IR_OP_GELU_TANH_GRAD] = op_gelu_tanh_grad,
    [IR_OP_LAYERNORM] = op_layernorm,
    [IR_OP_LAYERNORM_STATS] = op_layernorm_stats,
    [IR_OP_LAYERNORM_GRAD_DATA] = op_layernorm_grad_data,
    [IR_OP_LAYERNORM_GRAD_GAMMA] = op_layernorm_grad_gamma,
    [IR_OP_SUM_LEADING] = op_sum_leading,
    [IR_OP_SOFTMAX] = op_softmax,
    [IR_OP_SOFTMAX_GRAD] = op_softmax_grad,
    [IR_OP_EMBEDDING] = op_embedding,
    [IR_OP_EMBEDDING_GRAD] = op_embedding_grad,
    [IR_OP_SEQ_CE] = op_seq_ce,
    [IR_OP_SEQ_CE_GRAD] = op_seq_ce_grad,
    [IR_OP_RESHAPE] = op_copy,
    [IR_OP_PERMUTE] = op_permute,
    [IR_OP_SLICE] = op_slice,
    [IR_OP_SLICE_GRAD] = op_slice,
    [IR_OP_CAUSAL_MASK] = op_causal_mask,
    [IR_OP_PAD_MASK] = op_pad_mask,
    [IR_OP_ATTENTION] = op_attention,
    [IR_OP_ATTENTION_LSE] = op_attention,
    [IR_OP_ATTENTION_GRAD] = op_attention_grad,
    [IR_OP_POSITIONS] = op_positions,
    [IR_OP_POSITIONS_GRAD] = op_positions_grad,
};

void oracle_interp_run(oracle_interp *it) {
    const ir_graph *g = it->g;
    for (int i = 0; i < g->n; i++) {
        const ir_node *n = &g->nodes[i];
        if (ir_is_source(n->op)) continue;
        op_fn fn = (unsigned)n->op < IR_OP_COUNT ? op_table[n->op] : NULL;
        if (!fn) {
            fprintf(stderr, "oracle_interp: no rule for op %d at node %d\n", (int)n->op, i);
            abort();
        }
        op_args a = {.n = n, .y = it->buf[i]};
        for (int j = 0; j < n->ninputs; j++) {
            a.in[j] = &g->nodes[n->input[j]].type;
            a.x[j] = it->buf[n->input[j]];
        }
        fn(&a);
    }
}
