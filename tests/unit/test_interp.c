/* Tests for tests/oracle/interp.c: forward ops against small cases worked out by
 * hand, backward ops against their forward ops (adjoint identities), and
 * the stateful ops (batchnorm's running statistics, ema, assign).
 *
 * Tolerances, all f64: 0 where every step is exact (small integers, halves,
 * max); 1e-15 for a few roundings of values up to 4 (2^-53 * 4 = 4.4e-16
 * each) or integers that stay exact; 1e-14 where a square root and a
 * division of values near 4 add their roundings; 1e-12 and 1e-13 for the
 * adjoint identities' dot products of up to 36 terms near 10 (36 * 2^-53 *
 * sum |terms|, F64_SUM_BOUND) and for exp(1000)'s stable form. */
#include <stdlib.h>

#include "ir/ir.h"
#include "tests/graphs.h"
#include "tests/harness.h"
#include "tests/oracle/interp.h"

static char err[256];

static void fill(oracle_interp *it, int id, const double *v, int64_t n) {
    memcpy(oracle_interp_buffer(it, id), v, sizeof(double) * (size_t)n);
}

/* Deterministic values in [-1, 1) (xorshift), so tests need no seed file. */
static double rnd(void) {
    static uint64_t s = 0x9E3779B97F4A7C15ull;
    return tg_rnd(&s);
}

static void fill_random(oracle_interp *it, int id, const ir_graph *g) {
    double *b = oracle_interp_buffer(it, id);
    for (int64_t i = 0; i < ir_numel(&g->nodes[id].type); i++) b[i] = rnd();
}

static double dot(const double *a, const double *b, int64_t n) {
    double s = 0;
    for (int64_t i = 0; i < n; i++) s += a[i] * b[i];
    return s;
}

/* x = 1..9 as one 3x3 image: the classic worked example. */
static const double nine[9] = {1, 2, 3, 4, 5, 6, 7, 8, 9};

TEST(conv_valid_and_padded) {
    ir_graph *g = ir_new();
    int x = ir_add_input(g, "x", ir_shape4(1, 1, 3, 3), 0);
    int w2 = ir_add_param(g, "w2", ir_shape4(1, 1, 2, 2), IR_INIT_ONE);
    int w3 = ir_add_param(g, "w3", ir_shape4(1, 1, 3, 3), IR_INIT_ONE);
    int valid = tg_node(g, IR_OP_CONV, (int[]){x, w2}, 2, (int64_t[]){2, 1, 0, 1}, NULL);
    int padded = tg_node(g, IR_OP_CONV, (int[]){x, w3}, 2, (int64_t[]){3, 2, 1, 1}, NULL);
    oracle_interp *it = oracle_interp_new(g);
    fill(it, x, nine, 9);
    fill(it, w2, (double[]){1, 1, 1, 1}, 4);
    fill(it, w3, (double[]){1, 1, 1, 1, 1, 1, 1, 1, 1}, 9);
    oracle_interp_run(it);
    const double want_valid[] = {12, 16, 24, 28}; /* 1+2+4+5, 2+3+5+6, ... */
    for (int i = 0; i < 4; i++) CHECK_NEAR(oracle_interp_buffer(it, valid)[i], want_valid[i], 0);
    /* 3x3, stride 2, pad 1: windows centred on the corners see 2x2 of x and
     * five zeros: the same sums as above. */
    for (int i = 0; i < 4; i++) CHECK_NEAR(oracle_interp_buffer(it, padded)[i], want_valid[i], 0);
    oracle_interp_free(it);
    ir_free(g);
}

TEST(conv_channels_and_weight_layout) {
    /* 2 input channels, 2 output channels, 1x1 kernel: out[o] = sum_c w[o,c] x[c]. */
    ir_graph *g = ir_new();
    int x = ir_add_input(g, "x", ir_shape4(1, 2, 1, 2), 0);
    int w = ir_add_param(g, "w", ir_shape4(2, 2, 1, 1), IR_INIT_XAVIER);
    int y = tg_node(g, IR_OP_CONV, (int[]){x, w}, 2, (int64_t[]){1, 1, 0, 1}, NULL);
    oracle_interp *it = oracle_interp_new(g);
    fill(it, x, (double[]){1, 2, 10, 20}, 4);  /* c0 = (1,2), c1 = (10,20) */
    fill(it, w, (double[]){1, 0.5, -1, 3}, 4); /* w[0] = (1, .5), w[1] = (-1, 3) */
    oracle_interp_run(it);
    const double want[] = {6, 12, 29, 58};
    for (int i = 0; i < 4; i++) CHECK_NEAR(oracle_interp_buffer(it, y)[i], want[i], 1e-15);
    oracle_interp_free(it);
    ir_free(g);
}

TEST(pools_with_padding) {
    ir_graph *g = ir_new();
    int x = ir_add_input(g, "x", ir_shape4(1, 1, 3, 3), 0);
    int avg = tg_node(g, IR_OP_AVGPOOL, &x, 1, (int64_t[]){3, 2, 1, 1}, NULL);
    int mx = tg_node(g, IR_OP_MAXPOOL, &x, 1, (int64_t[]){3, 2, 1, 1}, NULL);
    int mx2 = tg_node(g, IR_OP_MAXPOOL, &x, 1, (int64_t[]){3, 1, 1}, NULL);
    oracle_interp *it = oracle_interp_new(g);
    double neg[9];
    for (int i = 0; i < 9; i++) neg[i] = -nine[i];
    fill(it, x, neg, 9);
    oracle_interp_run(it);
    /* count_include_pad: the corner windows divide by 9, not by 4. */
    const double want_avg[] = {-12 / 9.0, -16 / 9.0, -24 / 9.0, -28 / 9.0};
    for (int i = 0; i < 4; i++) CHECK_NEAR(oracle_interp_buffer(it, avg)[i], want_avg[i], 1e-15);
    /* All values negative: a zero from the padding must never win. */
    const double want_max[] = {-1, -2, -4, -5};
    for (int i = 0; i < 4; i++) CHECK_NEAR(oracle_interp_buffer(it, mx)[i], want_max[i], 0);
    /* Same-size output: each window's best is its element nearest the top left. */
    const double want_max2[] = {-1, -1, -2, -1, -1, -2, -4, -4, -5};
    for (int i = 0; i < 9; i++) CHECK_NEAR(oracle_interp_buffer(it, mx2)[i], want_max2[i], 0);
    oracle_interp_free(it);
    ir_free(g);
}

TEST(global_avgpool_flatten_dense_bias_relu_add) {
    ir_graph *g = ir_new();
    int x = ir_add_input(g, "x", ir_shape4(1, 2, 2, 2), 0);
    int w = ir_add_param(g, "w", ir_shape2(2, 2), IR_INIT_XAVIER);
    int b = ir_add_param(g, "b", ir_shape1(2), IR_INIT_ZERO);
    int gap = tg_node(g, IR_OP_GLOBAL_AVGPOOL, &x, 1, NULL, NULL);
    int flat = tg_node(g, IR_OP_FLATTEN, &x, 1, NULL, NULL);
    int d = tg_node(g, IR_OP_DENSE, (int[]){gap, w}, 2, NULL, NULL);
    int db = tg_node(g, IR_OP_BIAS_ADD, (int[]){d, b}, 2, NULL, NULL);
    int r = tg_node(g, IR_OP_RELU, &db, 1, NULL, NULL);
    int s = tg_node(g, IR_OP_ADD, (int[]){r, db}, 2, NULL, NULL);
    int xb = tg_node(g, IR_OP_BIAS_ADD, (int[]){x, b}, 2, NULL, NULL);
    oracle_interp *it = oracle_interp_new(g);
    fill(it, x, (double[]){1, 2, 3, 4, 10, 20, 30, 40}, 8);
    fill(it, w, (double[]){1, 1, 0, -1}, 4);
    fill(it, b, (double[]){0.5, -1}, 2);
    oracle_interp_run(it);
    CHECK_NEAR(oracle_interp_buffer(it, gap)[0], 2.5, 0);
    CHECK_NEAR(oracle_interp_buffer(it, gap)[1], 25, 0);
    CHECK_NEAR(oracle_interp_buffer(it, flat)[5], 20, 0);
    CHECK_NEAR(oracle_interp_buffer(it, d)[0], 27.5, 1e-15); /* x·wᵀ: w[0] = (1, 1) */
    CHECK_NEAR(oracle_interp_buffer(it, d)[1], -25, 1e-15);  /* w[1] = (0, -1) */
    CHECK_NEAR(oracle_interp_buffer(it, db)[0], 28, 1e-15);
    CHECK_NEAR(oracle_interp_buffer(it, db)[1], -26, 1e-15);
    CHECK_NEAR(oracle_interp_buffer(it, r)[1], 0, 0);
    CHECK_NEAR(oracle_interp_buffer(it, s)[0], 56, 1e-15);
    CHECK_NEAR(oracle_interp_buffer(it, s)[1], -26, 1e-15);
    CHECK_NEAR(oracle_interp_buffer(it, xb)[3], 4.5, 0); /* channel 0 gets b[0] */
    CHECK_NEAR(oracle_interp_buffer(it, xb)[4], 9, 0);   /* channel 1 gets b[1] */
    oracle_interp_free(it);
    ir_free(g);
}

TEST(softmax_cross_entropy_is_stable) {
    ir_graph *g = ir_new();
    int x = ir_add_input(g, "x", ir_shape2(3, 3), 0);
    int y = ir_add_input(g, "y", (ir_type){1, {3}, IR_I32}, 3);
    int l = tg_node(g, IR_OP_SOFTMAX_CE, (int[]){x, y}, 2, NULL, NULL);
    int dl = tg_node(g, IR_OP_ONES_LIKE, &l, 1, NULL, NULL);
    int gr = tg_node(g, IR_OP_SOFTMAX_CE_GRAD, (int[]){x, y, dl}, 3, NULL, NULL);
    oracle_interp *it = oracle_interp_new(g);
    fill(it, x, (double[]){1, 2, 3, 1000, 0, 0, -1000, 0, 1000}, 9);
    fill(it, y, (double[]){2, 1, 2}, 3);
    oracle_interp_run(it);
    double *loss = oracle_interp_buffer(it, l);
    CHECK_NEAR(loss[0], log(exp(1) + exp(2) + exp(3)) - 3, 1e-15);
    CHECK_NEAR(loss[1], 1000, 1e-12); /* naive exp(1000) would overflow */
    CHECK_NEAR(loss[2], 0, 1e-15);
    double *d = oracle_interp_buffer(it, gr);
    double z = exp(1) + exp(2) + exp(3);
    CHECK_NEAR(d[0], exp(1) / z, 1e-15);
    CHECK_NEAR(d[2], exp(3) / z - 1, 1e-15);
    CHECK_NEAR(d[3], 1, 1e-15);
    CHECK_NEAR(d[4], -1, 1e-15);
    for (int i = 0; i < 9; i++) CHECK(isfinite(d[i]));
    oracle_interp_free(it);
    ir_free(g);
}

/* x[4, 2]: channel 0 = 1,2,3,4 (mean 2.5, biased var 1.25, unbiased 5/3);
 * channel 1 = 0,0,0,4 (mean 1, biased var 3, unbiased 4). */
static const double bn_x[8] = {1, 0, 2, 0, 3, 0, 4, 4};

TEST(batchnorm_training_updates_running_stats) {
    ir_graph *g = ir_new();
    int x = ir_add_input(g, "x", ir_shape2(4, 2), 0);
    int gamma = ir_add_param(g, "gamma", ir_shape1(2), IR_INIT_ONE);
    int beta = ir_add_param(g, "beta", ir_shape1(2), IR_INIT_ZERO);
    int rm = ir_add_state(g, "rm", ir_shape1(2), IR_INIT_ZERO);
    int rv = ir_add_state(g, "rv", ir_shape1(2), IR_INIT_ONE);
    int y = tg_node(g, IR_OP_BATCHNORM, (int[]){x, gamma, beta, rm, rv}, 5, (int64_t[]){1, 0},
                    (double[]){1e-5, 0.9});
    oracle_interp *it = oracle_interp_new(g);
    fill(it, x, bn_x, 8);
    fill(it, gamma, (double[]){2, 1}, 2);
    fill(it, beta, (double[]){0.5, 0}, 2);
    fill(it, rm, (double[]){0, 0}, 2);
    fill(it, rv, (double[]){1, 1}, 2);
    oracle_interp_run(it);
    double *o = oracle_interp_buffer(it, y);
    CHECK_NEAR(o[0], (1 - 2.5) / sqrt(1.25 + 1e-5) * 2 + 0.5, 1e-14);
    CHECK_NEAR(o[6], (4 - 2.5) / sqrt(1.25 + 1e-5) * 2 + 0.5, 1e-14);
    CHECK_NEAR(o[7], (4 - 1) / sqrt(3 + 1e-5), 1e-14);
    /* momentum 0.9 keeps 90% of the old value; the variance is unbiased. */
    CHECK_NEAR(oracle_interp_buffer(it, rm)[0], 0.1 * 2.5, 1e-15);
    CHECK_NEAR(oracle_interp_buffer(it, rm)[1], 0.1 * 1, 1e-15);
    CHECK_NEAR(oracle_interp_buffer(it, rv)[0], 0.9 + 0.1 * 5 / 3.0, 1e-15);
    CHECK_NEAR(oracle_interp_buffer(it, rv)[1], 0.9 + 0.1 * 4, 1e-15);
    oracle_interp_free(it);
    ir_free(g);
}

TEST(batchnorm_eval_uses_running_stats) {
    ir_graph *g = ir_new();
    int x = ir_add_input(g, "x", ir_shape4(1, 2, 1, 2), 0);
    int gamma = ir_add_param(g, "gamma", ir_shape1(2), IR_INIT_ONE);
    int beta = ir_add_param(g, "beta", ir_shape1(2), IR_INIT_ZERO);
    int rm = ir_add_state(g, "rm", ir_shape1(2), IR_INIT_ZERO);
    int rv = ir_add_state(g, "rv", ir_shape1(2), IR_INIT_ONE);
    int y = tg_node(g, IR_OP_BATCHNORM, (int[]){x, gamma, beta, rm, rv}, 5, (int64_t[]){0, 0},
                    (double[]){1e-5, 0.9});
    oracle_interp *it = oracle_interp_new(g);
    fill(it, x, (double[]){1, 3, 5, 7}, 4);
    fill(it, gamma, (double[]){1, 2}, 2);
    fill(it, beta, (double[]){0, 1}, 2);
    fill(it, rm, (double[]){1, 2}, 2);
    fill(it, rv, (double[]){4, 9}, 2);
    oracle_interp_run(it);
    double *o = oracle_interp_buffer(it, y);
    CHECK_NEAR(o[0], 0, 1e-15);
    CHECK_NEAR(o[1], 2 / sqrt(4 + 1e-5), 1e-15);
    CHECK_NEAR(o[2], 3 / sqrt(9 + 1e-5) * 2 + 1, 1e-15);
    CHECK_NEAR(oracle_interp_buffer(it, rm)[1], 2, 0); /* inference changes nothing */
    CHECK_NEAR(oracle_interp_buffer(it, rv)[1], 9, 0);
    oracle_interp_free(it);
    ir_free(g);
}

TEST(bn_primitives_ema_assign) {
    ir_graph *g = ir_new();
    int x = ir_add_input(g, "x", ir_shape2(4, 2), 0);
    int gamma = ir_add_param(g, "gamma", ir_shape1(2), IR_INIT_ONE);
    int beta = ir_add_param(g, "beta", ir_shape1(2), IR_INIT_ZERO);
    int rv = ir_add_state(g, "rv", ir_shape1(2), IR_INIT_ONE);
    int m = tg_node(g, IR_OP_BN_MEAN, &x, 1, NULL, NULL);
    int v = tg_node(g, IR_OP_BN_VAR, (int[]){x, m}, 2, NULL, NULL);
    int y = tg_node(g, IR_OP_BN_APPLY, (int[]){x, m, v, gamma, beta}, 5, NULL, (double[]){1e-3});
    int e = tg_node(g, IR_OP_EMA, (int[]){rv, v}, 2, NULL, (double[]){0.75, 4 / 3.0});
    int a = tg_node(g, IR_OP_ASSIGN, (int[]){rv, e}, 2, NULL, NULL);
    int one = tg_node(g, IR_OP_ONES_LIKE, &y, 1, NULL, NULL);
    CHECK(ir_verify(g, err, sizeof err) == 0);
    oracle_interp *it = oracle_interp_new(g);
    fill(it, x, bn_x, 8);
    fill(it, gamma, (double[]){1, 1}, 2);
    fill(it, beta, (double[]){0, 0}, 2);
    fill(it, rv, (double[]){1, 2}, 2);
    oracle_interp_run(it);
    CHECK_NEAR(oracle_interp_buffer(it, m)[0], 2.5, 0);
    CHECK_NEAR(oracle_interp_buffer(it, v)[0], 1.25, 1e-15);
    CHECK_NEAR(oracle_interp_buffer(it, v)[1], 3, 1e-15);
    CHECK_NEAR(oracle_interp_buffer(it, y)[1], -1 / sqrt(3 + 1e-3), 1e-15);
    CHECK_NEAR(oracle_interp_buffer(it, e)[1], 0.75 * 2 + 0.25 * 3 * 4 / 3.0, 1e-15);
    /* assign: the target's buffer and the assign's own hold the new value */
    CHECK_NEAR(oracle_interp_buffer(it, rv)[0], 0.75 + 0.25 * 1.25 * 4 / 3.0, 1e-15);
    CHECK_NEAR(oracle_interp_buffer(it, a)[0], oracle_interp_buffer(it, rv)[0], 0);
    CHECK_NEAR(oracle_interp_buffer(it, a)[1], 2.5, 1e-15);
    CHECK_NEAR(oracle_interp_buffer(it, one)[7], 1, 0);
    oracle_interp_free(it);
    ir_free(g);
}

TEST(sgd_momentum_is_mxnet_rule) {
    ir_graph *g = ir_new();
    int w = ir_add_param(g, "w", ir_shape1(2), IR_INIT_ONE);
    int gr = ir_add_input(g, "g", ir_shape1(2), 0);
    int v = ir_add_state(g, "v", ir_shape1(2), IR_INIT_ZERO);
    int lr = ir_add_input(g, "lr", ir_shape1(1), 0);
    int sc = ir_add_input(g, "scale", ir_shape1(1), 0);
    int u =
        tg_node(g, IR_OP_SGD_MOMENTUM, (int[]){w, gr, v, lr, sc}, 5, NULL, (double[]){0.9, 0.01});
    oracle_interp *it = oracle_interp_new(g);
    fill(it, w, (double[]){2, -1}, 2);
    fill(it, gr, (double[]){8, 4}, 2);
    fill(it, v, (double[]){0.5, 1}, 2);
    fill(it, lr, (double[]){0.1}, 1);
    fill(it, sc, (double[]){0.25}, 1);
    oracle_interp_run(it);
    CHECK_NEAR(oracle_interp_buffer(it, u)[0], 0.9 * 0.5 - 0.1 * (8 * 0.25 + 0.01 * 2), 1e-15);
    CHECK_NEAR(oracle_interp_buffer(it, u)[1], 0.9 * 1 - 0.1 * (4 * 0.25 - 0.01), 1e-15);
    oracle_interp_free(it);
    ir_free(g);
}

/* The other optimizers' ops, by README's formulas, on hand values:
 * w = (3, 4), g = grad*scale = (0, 2) * 0.5. */
TEST(optimizer_ops_are_the_formulas) {
    ir_graph *g = ir_new();
    int w = ir_add_param(g, "w", ir_shape1(2), IR_INIT_ONE);
    int gr = ir_add_input(g, "g", ir_shape1(2), 0);
    int m = ir_add_state(g, "m", ir_shape1(2), IR_INIT_ZERO);
    int lr = ir_add_input(g, "lr", ir_shape1(1), 0);
    int sc = ir_add_input(g, "scale", ir_shape1(1), 0);
    int t = ir_add_input(g, "step", ir_shape1(1), 0);
    int z = ir_add_input(g, "z", ir_shape1(2), 0);
    int wsq = tg_node(g, IR_OP_SUMSQ, &w, 1, NULL, NULL);
    int gsq = tg_node(g, IR_OP_SUMSQ, &gr, 1, NULL, NULL);
    int zsq = tg_node(g, IR_OP_SUMSQ, &z, 1, NULL, NULL);
    int lars = tg_node(g, IR_OP_LARS_LR, (int[]){wsq, gsq, lr, sc}, 4, NULL,
                       (double[]){0.001, 0.01, 1e-9});
    int lars0 = tg_node(g, IR_OP_LARS_LR, (int[]){wsq, zsq, lr, sc}, 4, NULL,
                        (double[]){0.001, 0.01, 1e-9});
    int am = tg_node(g, IR_OP_ADAM_M, (int[]){m, gr, sc}, 3, NULL, (double[]){0.9});
    int av = tg_node(g, IR_OP_ADAM_V, (int[]){m, gr, sc}, 3, NULL, (double[]){0.999});
    int c1 = tg_node(g, IR_OP_BIAS_CORRECTION, &t, 1, NULL, (double[]){0.9});
    int c2 = tg_node(g, IR_OP_BIAS_CORRECTION, &t, 1, NULL, (double[]){0.999});
    int u = tg_node(g, IR_OP_ADAM_DIR, (int[]){w, am, av, c1, c2}, 5, NULL, (double[]){1e-6, 0.01});
    int usq = tg_node(g, IR_OP_SUMSQ, &u, 1, NULL, NULL);
    int lamb = tg_node(g, IR_OP_LAMB_LR, (int[]){wsq, usq, lr}, 3, NULL, NULL);
    int lamb0 = tg_node(g, IR_OP_LAMB_LR, (int[]){zsq, usq, lr}, 3, NULL, NULL);
    int d = tg_node(g, IR_OP_DESCEND, (int[]){w, u, lamb}, 3, NULL, NULL);
    oracle_interp *it = oracle_interp_new(g);
    fill(it, w, (double[]){3, 4}, 2);
    fill(it, gr, (double[]){0, 2}, 2);
    fill(it, m, (double[]){0, 0}, 2);
    fill(it, lr, (double[]){0.1}, 1);
    fill(it, sc, (double[]){0.5}, 1);
    fill(it, t, (double[]){2}, 1);
    fill(it, z, (double[]){0, 0}, 2);
    oracle_interp_run(it);
    double *B[64];
    for (int i = 0; i < g->n && i < 64; i++) B[i] = oracle_interp_buffer(it, i);
    CHECK_NEAR(B[wsq][0], 25, 0);
    /* trust = eta |w| / (|g| + wd |w| + eps), |g| = 1 */
    CHECK_NEAR(B[lars][0], 0.1 * (0.001 * 5 / (1 + 0.01 * 5 + 1e-9)), 1e-15);
    CHECK_NEAR(B[lars0][0], 0.1, 0); /* |g| = 0: trust 1 */
    CHECK_NEAR(B[am][1], 0.1 * 1, 1e-15);
    CHECK_NEAR(B[av][1], 0.001 * 1, 1e-15);
    CHECK_NEAR(B[c1][0], 1 / (1 - 0.81), 1e-12);
    double mh = 0.1 / 0.19, vh = 0.001 / (1 - 0.999 * 0.999);
    CHECK_NEAR(B[u][0], 0.01 * 3, 1e-15); /* g = 0: the decay alone */
    CHECK_NEAR(B[u][1], mh / (sqrt(vh) + 1e-6) + 0.01 * 4, 1e-12);
    double un = sqrt(B[u][0] * B[u][0] + B[u][1] * B[u][1]);
    CHECK_NEAR(B[lamb][0], 0.1 * 5 / un, 1e-12);
    CHECK_NEAR(B[lamb0][0], 0.1, 0); /* |w| = 0: r 1 */
    CHECK_NEAR(B[d][1], 4 - B[lamb][0] * B[u][1], 1e-12);
    oracle_interp_free(it);
    ir_free(g);
}

TEST(relu_grad_and_maxpool_grad_first_max) {
    ir_graph *g = ir_new();
    int x = ir_add_input(g, "x", ir_shape4(1, 1, 2, 4), 0);
    int dy = ir_add_input(g, "dy", ir_shape4(1, 1, 1, 2), 0);
    int d8 = ir_add_input(g, "d8", ir_shape4(1, 1, 2, 4), 0);
    int r = tg_node(g, IR_OP_RELU, &x, 1, NULL, NULL);
    int rg = tg_node(g, IR_OP_RELU_GRAD, (int[]){d8, r}, 2, NULL, NULL);
    int mg = tg_node(g, IR_OP_MAXPOOL_GRAD, (int[]){dy, x}, 2, (int64_t[]){2, 2, 0}, NULL);
    oracle_interp *it = oracle_interp_new(g);
    /* window 0 = (5 5 / 5 1): three-way tie, the top-left wins;
     * window 1 = (0 -2 / 3 3): the tie in row 1 goes to its first column. */
    fill(it, x, (double[]){5, 5, 0, -2, 5, 1, 3, 3}, 8);
    fill(it, dy, (double[]){10, 20}, 2);
    fill(it, d8, (double[]){1, 2, 3, 4, 5, 6, 7, 8}, 8);
    oracle_interp_run(it);
    const double want_mg[] = {10, 0, 0, 0, 0, 0, 20, 0};
    for (int i = 0; i < 8; i++) CHECK_NEAR(oracle_interp_buffer(it, mg)[i], want_mg[i], 0);
    const double want_rg[] = {1, 2, 0, 0, 5, 6, 7, 8}; /* relu'(0) = 0 */
    for (int i = 0; i < 8; i++) CHECK_NEAR(oracle_interp_buffer(it, rg)[i], want_rg[i], 0);
    oracle_interp_free(it);
    ir_free(g);
}

/* For a linear op y = A x, <A x, dy> must equal <x, Aᵀ dy>: checks each
 * backward op against its forward op without a hand-written transpose. */
static void check_conv_adjoint(int n, int c, int h, int k_out, int k, int s, int p) {
    ir_graph *g = ir_new();
    int x = ir_add_input(g, "x", ir_shape4(n, c, h, h + 1), 0);
    int w = ir_add_param(g, "w", ir_shape4(k_out, c, k, k), IR_INIT_XAVIER);
    int y = tg_node(g, IR_OP_CONV, (int[]){x, w}, 2, (int64_t[]){k, s, p, 1}, NULL);
    CHECK(y >= 0);
    if (y < 0) return;
    ir_type yt = g->nodes[y].type;
    int dy = ir_add_input(g, "dy", yt, 0);
    int dx = tg_node(g, IR_OP_CONV_GRAD_DATA, (int[]){dy, w}, 2, (int64_t[]){k, s, p, h, h + 1, 1},
                     NULL);
    int dw = tg_node(g, IR_OP_CONV_GRAD_WEIGHT, (int[]){dy, x}, 2, (int64_t[]){k, s, p, 1}, NULL);
    int ap = tg_node(g, IR_OP_AVGPOOL, &x, 1, (int64_t[]){k, s, k / 2 < p ? k / 2 : p}, NULL);
    ir_type at = g->nodes[ap].type;
    int day = ir_add_input(g, "day", at, 0);
    int dax = tg_node(g, IR_OP_AVGPOOL_GRAD, &day, 1,
                      (int64_t[]){k, s, k / 2 < p ? k / 2 : p, h, h + 1}, NULL);
    CHECK(ir_verify(g, err, sizeof err) == 0);
    oracle_interp *it = oracle_interp_new(g);
    fill_random(it, x, g), fill_random(it, w, g), fill_random(it, dy, g), fill_random(it, day, g);
    oracle_interp_run(it);
    int64_t nx = ir_numel(&g->nodes[x].type), nw = ir_numel(&g->nodes[w].type);
    int64_t ny = ir_numel(&yt), na = ir_numel(&at);
    double lhs = dot(oracle_interp_buffer(it, y), oracle_interp_buffer(it, dy), ny);
    CHECK_NEAR(dot(oracle_interp_buffer(it, x), oracle_interp_buffer(it, dx), nx), lhs, 1e-12);
    CHECK_NEAR(dot(oracle_interp_buffer(it, w), oracle_interp_buffer(it, dw), nw), lhs, 1e-12);
    double alhs = dot(oracle_interp_buffer(it, ap), oracle_interp_buffer(it, day), na);
    CHECK_NEAR(dot(oracle_interp_buffer(it, x), oracle_interp_buffer(it, dax), nx), alhs, 1e-12);
    oracle_interp_free(it);
    ir_free(g);
}

TEST(conv_and_avgpool_grads_are_adjoints) {
    check_conv_adjoint(2, 3, 5, 4, 3, 1, 1);
    check_conv_adjoint(2, 3, 6, 2, 3, 2, 1);
    check_conv_adjoint(1, 2, 9, 3, 7, 2, 3);
    check_conv_adjoint(2, 2, 5, 3, 1, 2, 0);
    check_conv_adjoint(1, 1, 4, 1, 2, 2, 0);
}

TEST(dense_and_global_pool_grads_are_adjoints) {
    ir_graph *g = ir_new();
    int x = ir_add_input(g, "x", ir_shape2(3, 4), 0);
    int w = ir_add_param(g, "w", ir_shape2(5, 4), IR_INIT_XAVIER);
    int dy = ir_add_input(g, "dy", ir_shape2(3, 5), 0);
    int y = tg_node(g, IR_OP_DENSE, (int[]){x, w}, 2, NULL, NULL);
    int dx = tg_node(g, IR_OP_DENSE_GRAD_DATA, (int[]){dy, w}, 2, NULL, NULL);
    int dw = tg_node(g, IR_OP_DENSE_GRAD_WEIGHT, (int[]){dy, x}, 2, NULL, NULL);
    int im = ir_add_input(g, "im", ir_shape4(2, 3, 2, 3), 0);
    int gp = tg_node(g, IR_OP_GLOBAL_AVGPOOL, &im, 1, NULL, NULL);
    int dg = ir_add_input(g, "dg", ir_shape2(2, 3), 0);
    int dim = tg_node(g, IR_OP_GLOBAL_AVGPOOL_GRAD, &dg, 1, (int64_t[]){2, 3}, NULL);
    int db = tg_node(g, IR_OP_BIAS_GRAD, &im, 1, NULL, NULL);
    oracle_interp *it = oracle_interp_new(g);
    fill_random(it, x, g), fill_random(it, w, g), fill_random(it, dy, g);
    fill_random(it, im, g), fill_random(it, dg, g);
    oracle_interp_run(it);
    double lhs = dot(oracle_interp_buffer(it, y), oracle_interp_buffer(it, dy), 15);
    CHECK_NEAR(dot(oracle_interp_buffer(it, x), oracle_interp_buffer(it, dx), 12), lhs, 1e-13);
    CHECK_NEAR(dot(oracle_interp_buffer(it, w), oracle_interp_buffer(it, dw), 20), lhs, 1e-13);
    CHECK_NEAR(dot(oracle_interp_buffer(it, im), oracle_interp_buffer(it, dim), 36),
               dot(oracle_interp_buffer(it, gp), oracle_interp_buffer(it, dg), 6), 1e-13);
    double *imb = oracle_interp_buffer(it, im);
    double c1 = 0;
    for (int n = 0; n < 2; n++)
        for (int i = 0; i < 6; i++) c1 += imb[n * 18 + 6 + i];
    CHECK_NEAR(oracle_interp_buffer(it, db)[1], c1, 1e-14);
    oracle_interp_free(it);
    ir_free(g);
}

int main(void) {
    RUN(conv_valid_and_padded);
    RUN(conv_channels_and_weight_layout);
    RUN(pools_with_padding);
    RUN(global_avgpool_flatten_dense_bias_relu_add);
    RUN(softmax_cross_entropy_is_stable);
    RUN(batchnorm_training_updates_running_stats);
    RUN(batchnorm_eval_uses_running_stats);
    RUN(bn_primitives_ema_assign);
    RUN(sgd_momentum_is_mxnet_rule);
    RUN(optimizer_ops_are_the_formulas);
    RUN(relu_grad_and_maxpool_grad_first_max);
    RUN(conv_and_avgpool_grads_are_adjoints);
    RUN(dense_and_global_pool_grads_are_adjoints);
    return harness_done();
}
