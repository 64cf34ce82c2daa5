/* Tests for passes/: lower keeps results (both BatchNorm modes), the
 * optimizer step is MXNet's SGD, the pipeline verifies and dumps, and the
 * passes' errors. Gradient values themselves are test_autodiff.c's job.
 *
 * Tolerances, all f64 in the interpreter: a graph against its lowered or
 * otherwise rewritten form rounds differently in a few operations on values
 * of order 1 (a few 2^-53 = 1.1e-16; 1e-12 leaves three orders of magnitude
 * for BatchNorm's division by a small variance); hand-worked values to
 * 1e-15 (a few roundings of values under 4), 1e-14 past a square root. */
#include <stdint.h>
#include <stdlib.h>

#include "frontend/frontend.h"
#include "base/hash.h"
#include "ir/ir.h"
#include "passes/passes.h"
#include "tests/graphs.h"
#include "tests/harness.h"
#include "tests/oracle/interp.h"

static char err[256];

static uint64_t rng_state = 0x853C49E6748FEA9Bull;
static double rnd(void) { return tg_rnd(&rng_state); } /* uniform in [-1, 1) */

static int count_op(const ir_graph *g, ir_op o) {
    int c = 0;
    for (int i = 0; i < g->n; i++) c += g->nodes[i].op == o;
    return c;
}

static int batchnorm(ir_graph *g, int x, const char *name, int training) {
    int bn[4];
    tg_bn_params(g, x, name, bn);
    int y = tg_node(g, IR_OP_BATCHNORM, (int[]){x, bn[0], bn[1], bn[2], bn[3]}, 5,
                    (int64_t[]){training, 0}, (double[]){1e-5, 0.9});
    if (y >= 0) snprintf(g->nodes[y].name, IR_NAME_MAX, "%s", name);
    return y;
}

/* Fills every source of g with deterministic values (by name, so two
 * graphs with the same sources get the same values). */
static void fill_sources(const ir_graph *g, oracle_interp *it) {
    for (int i = 0; i < g->n; i++) {
        const ir_node *n = &g->nodes[i];
        if (!ir_is_source(n->op)) continue;
        /* FNV-1a of the name (under this test's own seed) seeds the values */
        uint64_t h = base_fnv1a(1469598103934665603ull, n->name, strlen(n->name));
        rng_state = h | 1;
        double *b = oracle_interp_buffer(it, i);
        for (int64_t e = 0; e < ir_numel(&n->type); e++) {
            double r = rnd();
            b[e] = n->type.dtype == IR_I32 ? (double)((int64_t)((r + 1) * 1.5) % 3)
                   : n->op == IR_OP_STATE  ? 1 + 0.5 * r
                                           : 2 * r + 0.3;
        }
    }
}

/* x -> batchnorm "bn" (rank 4 or 2) -> relu "out" */
static ir_graph *bn_graph(int rank, int training) {
    ir_graph *g = ir_new();
    int x = ir_add_input(g, "x", rank == 4 ? ir_shape4(3, 2, 2, 3) : ir_shape2(5, 4), 0);
    int y = batchnorm(g, x, "bn", training);
    g->nodes[y].flags |= IR_FLAG_OUTPUT;
    int r = tg_node(g, IR_OP_RELU, &y, 1, NULL, NULL);
    snprintf(g->nodes[r].name, IR_NAME_MAX, "out");
    return g;
}

static void check_lower_keeps_results(int rank, int training) {
    ir_graph *g = bn_graph(rank, training), *low = ir_clone(g);
    CHECK(pass_lower(&low, err, sizeof err) == 0);
    CHECK(ir_verify(low, err, sizeof err) == 0);
    CHECK(count_op(low, IR_OP_BATCHNORM) == 0);
    CHECK(count_op(low, IR_OP_BN_APPLY) == 1);
    CHECK(count_op(low, IR_OP_ASSIGN) == (training ? 2 : 0));
    CHECK(count_op(low, IR_OP_BN_MEAN) == (training ? 1 : 0));
    /* sources: same names, same order */
    int a = 0, b = 0;
    for (;; a++, b++) {
        while (a < g->n && !ir_is_source(g->nodes[a].op)) a++;
        while (b < low->n && !ir_is_source(low->nodes[b].op)) b++;
        if (a >= g->n || b >= low->n) break;
        CHECK_STR(low->nodes[b].name, g->nodes[a].name);
        CHECK(low->nodes[b].op == g->nodes[a].op);
    }
    CHECK(a >= g->n && b >= low->n);
    /* the batchnorm's name and flags now belong to bn_apply */
    int bn = tg_find(low, "bn");
    CHECK(bn >= 0 && low->nodes[bn].op == IR_OP_BN_APPLY);
    CHECK(bn >= 0 && (low->nodes[bn].flags & IR_FLAG_OUTPUT));
    if (!training && bn >= 0) { /* eval normalises with the running statistics */
        CHECK(low->nodes[bn].input[1] == tg_find(low, "bn.running_mean"));
        CHECK(low->nodes[bn].input[2] == tg_find(low, "bn.running_var"));
    }

    oracle_interp *hi = oracle_interp_new(g), *lo = oracle_interp_new(low);
    fill_sources(g, hi);
    fill_sources(low, lo);
    for (int step = 0; step < 2; step++) { /* twice: the running stats feed back */
        oracle_interp_run(hi);
        oracle_interp_run(lo);
        static const char *names[] = {"bn", "out", "bn.running_mean", "bn.running_var"};
        for (int k = 0; k < 4; k++) {
            int i = tg_find(g, names[k]), j = tg_find(low, names[k]);
            const double *u = oracle_interp_buffer(hi, i), *v = oracle_interp_buffer(lo, j);
            double worst = 0;
            for (int64_t e = 0; e < ir_numel(&g->nodes[i].type); e++)
                worst = fmax(worst, fabs(u[e] - v[e]));
            CHECK_MSG(worst <= 1e-12, "rank %d training %d step %d: %s differs by %g", rank,
                      training, step, names[k], worst);
        }
    }
    if (!training) { /* eval changes nothing persistent */
        double *rv = oracle_interp_buffer(lo, tg_find(low, "bn.running_var"));
        double *rv0 = oracle_interp_buffer(hi, tg_find(g, "bn.running_var"));
        CHECK(rv[0] == rv0[0]);
    }
    oracle_interp_free(hi);
    oracle_interp_free(lo);
    ir_free(g);
    ir_free(low);
}

TEST(lower_keeps_results) {
    check_lower_keeps_results(4, 1);
    check_lower_keeps_results(2, 1);
    check_lower_keeps_results(4, 0);
    check_lower_keeps_results(2, 0);
}

TEST(running_variance_is_unbiased) {
    ir_graph *g = ir_new();
    int x = ir_add_input(g, "x", ir_shape4(2, 1, 1, 2), 0);
    batchnorm(g, x, "bn", 1);
    CHECK(pass_lower(&g, err, sizeof err) == 0);
    int ev = -1;
    for (int i = 0; i < g->n; i++)
        if (g->nodes[i].op == IR_OP_EMA && g->nodes[i].input[0] == tg_find(g, "bn.running_var"))
            ev = i;
    CHECK(ev >= 0 && g->nodes[ev].fattr[0] == 0.9);
    CHECK(ev >= 0 && fabs(g->nodes[ev].fattr[1] - 4 / 3.0) < 1e-15); /* M = N*H*W = 4 */
    oracle_interp *it = oracle_interp_new(g);
    memcpy(oracle_interp_buffer(it, x), (double[]){1, 2, 3, 4}, sizeof(double[4]));
    oracle_interp_buffer(it, tg_find(g, "bn.gamma"))[0] = 1;
    oracle_interp_buffer(it, tg_find(g, "bn.running_var"))[0] = 1;
    oracle_interp_run(it);
    /* mean 2.5, biased variance 1.25, unbiased 5/3 */
    CHECK_NEAR(oracle_interp_buffer(it, tg_find(g, "bn.running_mean"))[0], 0.25, 1e-15);
    double rv1 = 0.9 + 0.1 * 5 / 3.0;
    CHECK_NEAR(oracle_interp_buffer(it, tg_find(g, "bn.running_var"))[0], rv1, 1e-15);
    oracle_interp_run(it);
    CHECK_NEAR(oracle_interp_buffer(it, tg_find(g, "bn.running_mean"))[0], 0.9 * 0.25 + 0.25,
               1e-15);
    CHECK_NEAR(oracle_interp_buffer(it, tg_find(g, "bn.running_var"))[0], 0.9 * rv1 + 0.1 * 5 / 3.0,
               1e-15);
    /* and the output is normalised with the biased one */
    CHECK_NEAR(oracle_interp_buffer(it, tg_find(g, "bn"))[0], -1.5 / sqrt(1.25 + 1e-5), 1e-14);
    oracle_interp_free(it);
    ir_free(g);
}

TEST(lower_refuses_one_value_per_channel) {
    ir_graph *g = ir_new();
    int x = ir_add_input(g, "x", ir_shape4(1, 3, 1, 1), 0);
    batchnorm(g, x, "bn7", 1);
    ir_graph *before = g;
    CHECK(pass_lower(&g, err, sizeof err) == -1);
    CHECK(strstr(err, "'bn7'") != NULL);
    CHECK(g == before && count_op(g, IR_OP_BATCHNORM) == 1); /* left as it was */
    ir_free(g);
    /* in eval mode one sample is fine */
    g = ir_new();
    x = ir_add_input(g, "x", ir_shape4(1, 3, 1, 1), 0);
    batchnorm(g, x, "bn7", 0);
    CHECK(pass_lower(&g, err, sizeof err) == 0);
    ir_free(g);
}

/* x[2,3] -> dense(w[2,3]) -> bias_add(b[2]) "logits" -> softmax_ce "loss" */
static ir_graph *dense_net(void) {
    ir_graph *g = ir_new();
    int x = ir_add_input(g, "x", ir_shape2(2, 3), 0);
    int label = ir_add_input(g, "label", (ir_type){1, {2}, IR_I32}, 2);
    int w = ir_add_param(g, "w", ir_shape2(2, 3), IR_INIT_XAVIER);
    int b = ir_add_param(g, "b", ir_shape1(2), IR_INIT_ZERO);
    int d = tg_node(g, IR_OP_DENSE, (int[]){x, w}, 2, NULL, NULL);
    int logits = tg_node(g, IR_OP_BIAS_ADD, (int[]){d, b}, 2, NULL, NULL);
    snprintf(g->nodes[logits].name, IR_NAME_MAX, "logits");
    g->nodes[logits].flags |= IR_FLAG_OUTPUT;
    int l = tg_node(g, IR_OP_SOFTMAX_CE, (int[]){logits, label}, 2, NULL, NULL);
    snprintf(g->nodes[l].name, IR_NAME_MAX, "loss");
    g->nodes[l].flags |= IR_FLAG_LOSS | IR_FLAG_OUTPUT;
    return g;
}

/* The summed-loss gradient of dense_net, written out by hand. */
static void dense_net_grad(const double *x, const int *y, const double *w, const double *b,
                           double *dw, double *db) {
    memset(dw, 0, sizeof(double[6]));
    memset(db, 0, sizeof(double[2]));
    for (int n = 0; n < 2; n++) {
        double z[2], p[2];
        for (int u = 0; u < 2; u++)
            z[u] = b[u] + x[n * 3] * w[u * 3] + x[n * 3 + 1] * w[u * 3 + 1] +
                   x[n * 3 + 2] * w[u * 3 + 2];
        p[0] = 1 / (1 + exp(z[1] - z[0]));
        p[1] = 1 - p[0];
        for (int u = 0; u < 2; u++) {
            double d = p[u] - (u == y[n]);
            db[u] += d;
            for (int f = 0; f < 3; f++) dw[u * 3 + f] += d * x[n * 3 + f];
        }
    }
}

TEST(optimizer_step_is_mxnet_sgd) {
    ir_graph *g = dense_net();
    ir_train t;
    ir_train_defaults(&t);
    t.momentum = 0.9;
    t.wd = 0.01;
    pass_options o = pass_default_options();
    CHECK(pass_run_train(&g, &t, &o, err, sizeof err) == 0);
    int lr = tg_find(g, "lr"), scale = tg_find(g, "grad_scale");
    int vw = tg_find(g, "w.momentum"), vb = tg_find(g, "b.momentum");
    CHECK(lr >= 0 && g->nodes[lr].op == IR_OP_INPUT && ir_numel(&g->nodes[lr].type) == 1);
    CHECK(scale >= 0 && g->nodes[scale].op == IR_OP_INPUT);
    CHECK(vw >= 0 && g->nodes[vw].op == IR_OP_STATE && g->nodes[vw].iattr[0] == IR_INIT_ZERO);
    CHECK(vw >= 0 && ir_type_equal(&g->nodes[vw].type, &g->nodes[tg_find(g, "w")].type));
    CHECK(vb > vw); /* definition order */
    CHECK(count_op(g, IR_OP_SGD_MOMENTUM) == 2 && count_op(g, IR_OP_ASSIGN) == 4);
    if (lr < 0 || scale < 0 || vw < 0 || vb < 0) return;
    for (int i = 0; i < g->n; i++)
        if (g->nodes[i].op == IR_OP_SGD_MOMENTUM)
            CHECK(g->nodes[i].fattr[0] == 0.9 && g->nodes[i].fattr[1] == 0.01);

    double x[6] = {0.5, -1, 2, 1.5, 0.25, -0.75}, w[6] = {0.1, 0.2, -0.3, -0.4, 0.5, 0.6};
    double b[2] = {0.05, -0.05}, v[6] = {0}, vbias[2] = {0};
    int y[2] = {1, 0};
    const double rate = 0.1, gs = 0.5; /* grad_scale = 1 / global batch */
    oracle_interp *it = oracle_interp_new(g);
    memcpy(oracle_interp_buffer(it, tg_find(g, "x")), x, sizeof x);
    oracle_interp_buffer(it, tg_find(g, "label"))[0] = y[0];
    oracle_interp_buffer(it, tg_find(g, "label"))[1] = y[1];
    memcpy(oracle_interp_buffer(it, tg_find(g, "w")), w, sizeof w);
    memcpy(oracle_interp_buffer(it, tg_find(g, "b")), b, sizeof b);
    oracle_interp_buffer(it, lr)[0] = rate;
    oracle_interp_buffer(it, scale)[0] = gs;
    for (int step = 0; step < 3; step++) {
        double dw[6], db[2];
        dense_net_grad(x, y, w, b, dw, db);
        for (int i = 0; i < 6; i++) {
            v[i] = 0.9 * v[i] - rate * (dw[i] * gs + 0.01 * w[i]);
            w[i] += v[i];
        }
        for (int i = 0; i < 2; i++) {
            vbias[i] = 0.9 * vbias[i] - rate * (db[i] * gs + 0.01 * b[i]);
            b[i] += vbias[i];
        }
        oracle_interp_run(it);
        for (int i = 0; i < 6; i++) {
            CHECK_NEAR(oracle_interp_buffer(it, tg_find(g, "w"))[i], w[i], 1e-15);
            CHECK_NEAR(oracle_interp_buffer(it, vw)[i], v[i], 1e-15);
        }
        for (int i = 0; i < 2; i++) {
            CHECK_NEAR(oracle_interp_buffer(it, tg_find(g, "b"))[i], b[i], 1e-15);
            CHECK_NEAR(oracle_interp_buffer(it, vb)[i], vbias[i], 1e-15);
        }
    }
    CHECK(v[0] != 0 && vbias[0] != 0); /* the momentum really carried over */
    oracle_interp_free(it);
    ir_free(g);
}

/* image -> conv -> bn -> relu -> maxpool -> add(·, conv-bn) -> relu ->
 * global_avgpool -> dense -> bias_add "logits" -> loss */
static ir_graph *small_cnn(int training) {
    ir_graph *g = ir_new();
    int x = ir_add_input(g, "image", ir_shape4(2, 3, 8, 8), 0);
    int label = ir_add_input(g, "label", (ir_type){1, {2}, IR_I32}, 4);
    int w0 = ir_add_param(g, "conv0.weight", ir_shape4(4, 3, 3, 3), IR_INIT_XAVIER);
    int c = tg_node(g, IR_OP_CONV, (int[]){x, w0}, 2, (int64_t[]){3, 1, 1, 1}, NULL);
    int r = tg_node(g, IR_OP_RELU, (int[]){batchnorm(g, c, "bn0", training)}, 1, NULL, NULL);
    int m = tg_node(g, IR_OP_MAXPOOL, &r, 1, (int64_t[]){3, 2, 1}, NULL);
    int w1 = ir_add_param(g, "conv1.weight", ir_shape4(4, 4, 3, 3), IR_INIT_XAVIER);
    int c1 = tg_node(g, IR_OP_CONV, (int[]){m, w1}, 2, (int64_t[]){3, 1, 1, 1}, NULL);
    int s = tg_node(g, IR_OP_ADD, (int[]){m, batchnorm(g, c1, "bn1", training)}, 2, NULL, NULL);
    int gp = tg_node(g, IR_OP_GLOBAL_AVGPOOL, (int[]){tg_node(g, IR_OP_RELU, &s, 1, NULL, NULL)}, 1,
                     NULL, NULL);
    int fw = ir_add_param(g, "fc.weight", ir_shape2(4, 4), IR_INIT_XAVIER);
    int fb = ir_add_param(g, "fc.bias", ir_shape1(4), IR_INIT_ZERO);
    int logits = tg_node(g, IR_OP_BIAS_ADD,
                         (int[]){tg_node(g, IR_OP_DENSE, (int[]){gp, fw}, 2, NULL, NULL), fb}, 2,
                         NULL, NULL);
    snprintf(g->nodes[logits].name, IR_NAME_MAX, "logits");
    g->nodes[logits].flags |= IR_FLAG_OUTPUT;
    if (training) {
        int l = tg_node(g, IR_OP_SOFTMAX_CE, (int[]){logits, label}, 2, NULL, NULL);
        snprintf(g->nodes[l].name, IR_NAME_MAX, "loss");
        g->nodes[l].flags |= IR_FLAG_LOSS | IR_FLAG_OUTPUT;
    }
    return g;
}

static char *dump_after(const char *pass, ir_graph *g, int *rc) {
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    pass_options o = pass_default_options();
    o.dump_after = pass;
    o.dump = f;
    *rc = pass_run_train(&g, NULL, &o, err, sizeof err);
    fclose(f);
    ir_free(g);
    return text;
}

TEST(pipeline_verifies_and_dumps) {
    pass_options o = pass_default_options();
    CHECK(o.fuse == 1 && o.memplan == 1 && o.dump_after == NULL);
    const char *order[] = {"lower", "autodiff", "optimizer", "partition", "precision", "layout",
                           "conv",  "dce",      "fuse",      "remat",     "memplan"};
    const unsigned in[] = {PASS_TRAIN | PASS_EVAL,
                           PASS_TRAIN,
                           PASS_TRAIN,
                           PASS_TRAIN,
                           PASS_TRAIN | PASS_EVAL,
                           PASS_TRAIN | PASS_EVAL,
                           PASS_TRAIN | PASS_EVAL,
                           PASS_TRAIN | PASS_EVAL,
                           PASS_TRAIN | PASS_EVAL,
                           PASS_TRAIN,
                           PASS_TRAIN | PASS_EVAL};
    for (int i = 0; i < 11; i++) {
        CHECK_STR(pass_registry[i].name, order[i]);
        CHECK(pass_registry[i].programs == in[i] && pass_registry[i].run &&
              pass_registry[i].about[0]);
        CHECK(pass_find(order[i]) == &pass_registry[i]);
    }
    CHECK(pass_registry[11].name == NULL && pass_find("elaborate") == NULL);
    CHECK(o.layout == 0); /* off: not shown faster on the CPU (DESIGN §5.11) */

    ir_graph *g = small_cnn(1);
    CHECK(pass_run_train(&g, NULL, &o, err, sizeof err) == 0);
    CHECK(ir_verify(g, err, sizeof err) == 0);
    CHECK(count_op(g, IR_OP_BATCHNORM) == 0);
    /* every persistent tensor is written once, after its last reader (ir_verify) */
    CHECK(count_op(g, IR_OP_ASSIGN) == 2 * 2 + 2 * 8); /* 2 per bn, 2 per param */
    CHECK(tg_find(g, "logits") >= 0 && (g->nodes[tg_find(g, "logits")].flags & IR_FLAG_OUTPUT));
    CHECK(ir_loss_node(g) == tg_find(g, "loss"));
    ir_free(g);

    int rc;
    char *t = dump_after("lower", small_cnn(1), &rc);
    CHECK(rc == 0 && strstr(t, "bn_apply") && !strstr(t, "ones_like") && !strstr(t, "sgd"));
    free(t);
    t = dump_after("autodiff", small_cnn(1), &rc);
    CHECK(rc == 0 && strstr(t, "conv0.weight.grad") && !strstr(t, "sgd_momentum"));
    free(t);
    t = dump_after("optimizer", small_cnn(1), &rc);
    CHECK(rc == 0 && strstr(t, "sgd_momentum") && strstr(t, "\"fc.bias.momentum\""));
    free(t);
    t = dump_after("fuse", small_cnn(1), &rc);
    CHECK(rc == 0 && strstr(t, "# kernel g1: ") && strstr(t, " @g1"));
    free(t);
    t = dump_after("fuse2", small_cnn(1), &rc);
    CHECK(rc == -1 && strstr(err, "unknown pass 'fuse2'") && strstr(err, "optimizer"));
    free(t);

    g = small_cnn(0);
    CHECK(pass_run_eval(&g, &o, err, sizeof err) == 0);
    CHECK(count_op(g, IR_OP_BATCHNORM) == 0 && count_op(g, IR_OP_BN_APPLY) == 2);
    CHECK(count_op(g, IR_OP_ASSIGN) == 0 && count_op(g, IR_OP_ONES_LIKE) == 0);
    ir_free(g);
}

TEST(gradients_are_named_and_flagged) {
    ir_graph *g = small_cnn(1);
    CHECK(pass_lower(&g, err, sizeof err) == 0);
    CHECK(pass_autodiff(&g, err, sizeof err) == 0);
    CHECK(ir_verify(g, err, sizeof err) == 0);
    int params = 0, grads = 0;
    for (int i = 0; i < g->n; i++) {
        grads += (g->nodes[i].flags & IR_FLAG_GRAD) != 0;
        if (g->nodes[i].op != IR_OP_PARAM) continue;
        params++;
        char name[IR_NAME_MAX + 8];
        snprintf(name, sizeof name, "%s.grad", g->nodes[i].name);
        int d = tg_find(g, name);
        CHECK_MSG(d > i && (g->nodes[d].flags & IR_FLAG_GRAD), "%s", name);
        CHECK(d >= 0 && ir_type_equal(&g->nodes[d].type, &g->nodes[i].type));
    }
    CHECK(params == 8 && grads == params);
    /* every parameter here has a dedicated grad op: no copies */
    CHECK(count_op(g, IR_OP_RESHAPE_LIKE) == 0);
    CHECK(count_op(g, IR_OP_ONES_LIKE) == 1);
    ir_free(g);

    /* a = p + q feeds the loss directly: both would get the same dy; each
     * needs its own node (partitioning reduces them separately) */
    g = ir_new();
    int p = ir_add_param(g, "p", ir_shape2(2, 3), IR_INIT_XAVIER);
    int q = ir_add_param(g, "q", ir_shape2(2, 3), IR_INIT_XAVIER);
    int label = ir_add_input(g, "label", (ir_type){1, {2}, IR_I32}, 3);
    int s = tg_node(g, IR_OP_ADD, (int[]){p, q}, 2, NULL, NULL);
    int l = tg_node(g, IR_OP_SOFTMAX_CE, (int[]){s, label}, 2, NULL, NULL);
    g->nodes[l].flags |= IR_FLAG_LOSS;
    CHECK(pass_autodiff(&g, err, sizeof err) == 0);
    int gp = tg_find(g, "p.grad"), gq = tg_find(g, "q.grad");
    CHECK(gp >= 0 && gq >= 0 && gp != gq);
    CHECK(gp >= 0 && gq >= 0 && g->nodes[gp].input[0] == g->nodes[gq].input[0]); /* both copy dy */
    CHECK(ir_verify(g, err, sizeof err) == 0);
    ir_free(g);
}

TEST(pass_errors) {
    /* no loss */
    ir_graph *g = small_cnn(0);
    CHECK(pass_lower(&g, err, sizeof err) == 0);
    ir_graph *before = g;
    int n = g->n;
    CHECK(pass_autodiff(&g, err, sizeof err) == -1);
    CHECK_STR(err, "autodiff: the graph has no loss node");
    CHECK(g == before && g->n == n);
    ir_free(g);

    /* a parameter that does not reach the loss */
    g = dense_net();
    int x = tg_find(g, "x");
    int u = ir_add_param(g, "unused.weight", ir_shape2(4, 3), IR_INIT_XAVIER);
    tg_node(g, IR_OP_DENSE, (int[]){x, u}, 2, NULL, NULL);
    before = g, n = g->n;
    CHECK(pass_autodiff(&g, err, sizeof err) == -1);
    CHECK_STR(err, "autodiff: parameter 'unused.weight' does not reach the loss");
    CHECK(g == before && g->n == n);
    ir_free(g);
    /* ... named with its source position when it has one */
    g = dense_net();
    x = tg_find(g, "x");
    u = ir_add_param(g, "unused.weight", ir_shape2(4, 3), IR_INIT_XAVIER);
    g->nodes[u].line = 7, g->nodes[u].col = 3;
    tg_node(g, IR_OP_DENSE, (int[]){x, u}, 2, NULL, NULL);
    CHECK(pass_autodiff(&g, err, sizeof err) == -1);
    CHECK_STR(err, "autodiff: parameter 'unused.weight' (made at 7:3) does not reach the loss");
    ir_free(g);

    /* batchnorm must be lowered first */
    g = small_cnn(1);
    CHECK(pass_autodiff(&g, err, sizeof err) == -1);
    CHECK(strstr(err, "no gradient rule for batchnorm") && strstr(err, "lower"));
    ir_free(g);

    /* autodiff twice; optimizer without gradients; a taken name */
    g = dense_net();
    CHECK(pass_optimizer(&g, NULL, err, sizeof err) == -1);
    CHECK_STR(err, "optimizer: parameter 'w' has no gradient (run autodiff first)");
    CHECK(pass_autodiff(&g, err, sizeof err) == 0);
    CHECK(pass_autodiff(&g, err, sizeof err) == -1);
    CHECK(strstr(err, "already has gradients") != NULL);
    ir_add_input(g, "lr", ir_shape1(1), 0);
    CHECK(pass_optimizer(&g, NULL, err, sizeof err) == -1);
    CHECK_STR(err, "optimizer: the graph already has a tensor named 'lr'");
    ir_free(g);

    /* the pipeline passes a pass's message through */
    g = dense_net();
    g->nodes[ir_loss_node(g)].flags &= ~(unsigned)IR_FLAG_LOSS;
    pass_options o = pass_default_options();
    CHECK(pass_run_train(&g, NULL, &o, err, sizeof err) == -1);
    CHECK_STR(err, "autodiff: the graph has no loss node");
    ir_free(g);
}

/* dce: a branch nothing reads goes (its relu and the maxpool under it), the
 * rest stays in order; the graph verifies and a second run removes nothing.
 * Its results on every model are test_pass_invariance's. */
TEST(dce_drops_dead_branches) {
    ir_graph *g = small_cnn(1);
    int n0 = g->n, x = tg_find(g, "image");
    int dead = tg_node(g, IR_OP_RELU, &x, 1, NULL, NULL);
    tg_node(g, IR_OP_MAXPOOL, &dead, 1, (int64_t[]){2, 2, 0}, NULL);
    int removed = -1;
    CHECK(pass_dce(&g, &removed, err, sizeof err) == 0 && removed == 2 && g->n == n0);
    CHECK(tg_find(g, "logits") >= 0 && tg_find(g, "loss") >= 0);
    CHECK(pass_dce(&g, &removed, err, sizeof err) == 0 && removed == 0);
    /* after autodiff and the optimizer every node leads to the update */
    pass_options o = pass_default_options();
    ir_train t;
    ir_train_defaults(&t);
    CHECK(pass_run_train(&g, &t, &o, err, sizeof err) == 0);
    int n1 = g->n;
    pass_unfuse(g);
    CHECK(pass_dce(&g, &removed, err, sizeof err) == 0 && g->n == n1 - removed);
    ir_free(g);
}

/* Synchronised BatchNorm on one replica (replica_scale 1): the same
 * training step as per-device BatchNorm, in the reference interpreter, with
 * two replica means per batchnorm forward (mean, variance) and two
 * backward (dgamma, dbeta), each a bucket of its own after the gradients'. */
TEST(sync_batchnorm_on_one_replica) {
    static const char net[] = "input image[3, 4, 4]\n"
                              "input label class(5)\n"
                              "network syncbn {\n"
                              "    x = relu(batchnorm(conv(image, 4, k=3, p=1, bias=false)))\n"
                              "    x = relu(batchnorm(conv(x, 4, k=3, p=1), sync=true) + x)\n"
                              "    logits = dense(global_avgpool(x), 5)\n"
                              "    loss = softmax_cross_entropy(logits, label)\n"
                              "}\n"
                              "train {\n    batch 3 per device\n    epochs 1\n    lr {0: 0.1}\n}\n";
    fe_program *fp = fe_parse_string_err("syncbn.net", net, sizeof net - 1, err, sizeof err);
    CHECK_MSG(fp != NULL, "%s", err);
    if (!fp) return;
    ir_graph *g[3];
    for (int k = 0; k < 3; k++) { /* per device; the .net's one sync=true; --sync-bn */
        g[k] = fe_build_graph(fp, 3, 1);
        for (int i = 0; i < g[k]->n && k == 0; i++)
            if (g[k]->nodes[i].op == IR_OP_BATCHNORM) g[k]->nodes[i].iattr[1] = 0;
        CHECK(pass_lower_sync(&g[k], k == 2, err, sizeof err) == 0);
        CHECK_MSG(pass_autodiff(&g[k], err, sizeof err) == 0 &&
                      pass_optimizer(&g[k], fe_train(fp), err, sizeof err) == 0 &&
                      pass_partition(&g[k], 0, err, sizeof err) == 0,
                  "%s", err);
        int syncs = 0, first_sync_bucket = 1 << 30, last_grad_bucket = -1;
        for (int i = 0; i < g[k]->n; i++) {
            const ir_node *n = &g[k]->nodes[i];
            if (n->op != IR_OP_ALLREDUCE) continue;
            if (n->iattr[2]) {
                syncs++;
                if (n->iattr[0] < first_sync_bucket) first_sync_bucket = (int)n->iattr[0];
            } else if (n->iattr[0] > last_grad_bucket) {
                last_grad_bucket = (int)n->iattr[0];
            }
        }
        CHECK_MSG(syncs == 4 * k, "graph %d: %d synchronised statistics", k, syncs);
        CHECK(count_op(g[k], IR_OP_BN_UNBIAS) == k);
        CHECK(k == 0 || first_sync_bucket == last_grad_bucket + 1);
        CHECK((tg_find(g[k], FMT_REPLICA_SCALE) >= 0) == (k > 0));
    }
    oracle_interp *it[3];
    for (int k = 0; k < 3; k++) {
        it[k] = oracle_interp_new(g[k]);
        fill_sources(g[k], it[k]);
        int rs = tg_find(g[k], FMT_REPLICA_SCALE);
        if (rs >= 0) oracle_interp_buffer(it[k], rs)[0] = 1;
        for (int step = 0; step < 2; step++) oracle_interp_run(it[k]);
    }
    int compared = 0;
    for (int i = 0; i < g[0]->n; i++) {
        const ir_node *n = &g[0]->nodes[i];
        if (!ir_is_persistent(n->op) && !(n->flags & (IR_FLAG_GRAD | IR_FLAG_LOSS))) continue;
        for (int k = 1; k < 3; k++) {
            int j = tg_find(g[k], n->name);
            CHECK_MSG(j >= 0, "%s", n->name);
            if (j < 0) continue;
            double worst = 0;
            for (int64_t e = 0; e < ir_numel(&n->type); e++)
                worst = fmax(worst, fabs(oracle_interp_buffer(it[0], i)[e] -
                                         oracle_interp_buffer(it[k], j)[e]));
            CHECK_MSG(worst <= 1e-12, "graph %d: %s differs by %g", k, n->name, worst);
            compared++;
        }
    }
    CHECK(compared > 20);
    for (int k = 0; k < 3; k++) oracle_interp_free(it[k]), ir_free(g[k]);
    fe_free(fp);
}

/* adamw(exclude=(bias, norm)), nanoGPT's rule: weight decay on the
 * matrices only; a layernorm's gamma and beta and every bias get wd 0. */
TEST(adamw_decays_only_matrices) {
    static const char net[] = "input image[6]\n"
                              "input label class(3)\n"
                              "network n {\n"
                              "    x = layernorm(dense(image, 4))\n"
                              "    logits = dense(x, 3, bias=false)\n"
                              "    loss = softmax_cross_entropy(logits, label)\n"
                              "}\n"
                              "train {\n  batch 2 per device\n  epochs 1\n  lr {0: 0.1}\n"
                              "  optimizer adamw(wd=0.1, exclude=(bias, norm))\n}\n";
    fe_program *fp = fe_parse_string_err("decay.net", net, sizeof net - 1, err, sizeof err);
    CHECK_MSG(fp != NULL, "%s", err);
    if (!fp) return;
    ir_graph *g = fe_build_graph(fp, 2, 1);
    CHECK(pass_lower_sync(&g, 0, err, sizeof err) == 0 && pass_autodiff(&g, err, sizeof err) == 0);
    CHECK_MSG(pass_optimizer(&g, fe_train(fp), err, sizeof err) == 0, "%s", err);
    int decayed = 0, plain = 0;
    for (int i = 0; i < g->n; i++) {
        const ir_node *n = &g->nodes[i];
        if (n->op != IR_OP_ADAM_DIR) continue;
        const char *w = g->nodes[n->input[0]].name;
        int matrix = g->nodes[n->input[0]].type.ndim >= 2;
        CHECK_MSG(n->fattr[1] == (matrix ? 0.1 : 0.0), "%s: wd %g", w, n->fattr[1]);
        decayed += matrix, plain += !matrix;
    }
    CHECK(decayed == 2 && plain == 3); /* two weights; dense0.bias, gamma, beta */
    ir_free(g);
    fe_free(fp);
}

/* clip_grad_norm C, PyTorch's clip_grad_norm_ in f64: after one step every
 * momentum is v' = 0.9·v - lr·g·c, g = grad·grad_scale, c = min(1, C/(‖g‖
 * + 1e-6)), ‖g‖ over every parameter's gradient; with C 0.01 the norm is
 * far above C (clipped), with C 1e5 far below (c = 1). Tolerance 1e-12:
 * the test sums the squares in another order than sumsq and the add chain
 * (a few roundings of 2^-53 on values of order 1). */
TEST(clip_grad_norm_is_pytorchs) {
    static const double clips[] = {0.01, 1e5};
    for (int k = 0; k < 2; k++) {
        char net[1024];
        snprintf(net, sizeof net,
                 "input image[6]\ninput label class(3)\n"
                 "network n {\n    x = layernorm(dense(image, 4))\n"
                 "    logits = dense(x, 3)\n    loss = softmax_cross_entropy(logits, label)\n}\n"
                 "train {\n  batch 2 per device\n  epochs 1\n  lr {0: 0.1}\n"
                 "  optimizer sgd(momentum=0.9, wd=0)\n  clip_grad_norm %g\n}\n",
                 clips[k]);
        fe_program *fp = fe_parse_string_err("clip.net", net, strlen(net), err, sizeof err);
        CHECK_MSG(fp != NULL, "%s", err);
        if (!fp) return;
        ir_graph *g = fe_build_graph(fp, 2, 1);
        CHECK(pass_lower_sync(&g, 0, err, sizeof err) == 0 &&
              pass_autodiff(&g, err, sizeof err) == 0);
        CHECK_MSG(pass_optimizer(&g, fe_train(fp), err, sizeof err) == 0 &&
                      pass_partition(&g, 0, err, sizeof err) == 0,
                  "%s", err);
        CHECK(count_op(g, IR_OP_CLIP_SCALE) == 1 && count_op(g, IR_OP_SUMSQ) == 6);
        oracle_interp *it = oracle_interp_new(g);
        fill_sources(g, it);
        double v0[6][64], lr = oracle_interp_buffer(it, tg_find(g, "lr"))[0];
        double gs = oracle_interp_buffer(it, tg_find(g, "grad_scale"))[0];
        int params[6], np = 0;
        for (int i = 0; i < g->n && np < 6; i++)
            if (g->nodes[i].op == IR_OP_PARAM) params[np++] = i;
        CHECK(np == 6);
        for (int p = 0; p < np; p++) {
            char name[IR_NAME_MAX + 16];
            snprintf(name, sizeof name, "%s.momentum", g->nodes[params[p]].name);
            int64_t n = ir_numel(&g->nodes[params[p]].type);
            CHECK(n <= 64);
            memcpy(v0[p], oracle_interp_buffer(it, tg_find(g, name)), sizeof(double) * (size_t)n);
        }
        oracle_interp_run(it);
        double sq = 0;
        for (int p = 0; p < np; p++) {
            char name[IR_NAME_MAX + 16];
            snprintf(name, sizeof name, "%s.grad", g->nodes[params[p]].name);
            const double *gr = oracle_interp_buffer(it, tg_find(g, name));
            for (int64_t e = 0; e < ir_numel(&g->nodes[params[p]].type); e++) sq += gr[e] * gr[e];
        }
        double norm = sqrt(sq) * gs, c = fmin(1, clips[k] / (norm + 1e-6));
        CHECK_MSG(k == 0 ? c < 0.1 : c == 1, "norm %g, c %g", norm, c);
        double worst = 0;
        for (int p = 0; p < np; p++) {
            char name[IR_NAME_MAX + 16];
            snprintf(name, sizeof name, "%s.grad", g->nodes[params[p]].name);
            const double *gr = oracle_interp_buffer(it, tg_find(g, name));
            snprintf(name, sizeof name, "%s.momentum", g->nodes[params[p]].name);
            const double *v = oracle_interp_buffer(it, tg_find(g, name));
            for (int64_t e = 0; e < ir_numel(&g->nodes[params[p]].type); e++)
                worst = fmax(worst, fabs(v[e] - (0.9 * v0[p][e] - lr * gr[e] * gs * c)));
        }
        CHECK_MSG(worst <= 1e-12, "clip %g: momentum off by %g", clips[k], worst);
        oracle_interp_free(it);
        ir_free(g);
        fe_free(fp);
    }
}

int main(void) {
    RUN(lower_keeps_results);
    RUN(dce_drops_dead_branches);
    RUN(running_variance_is_unbiased);
    RUN(lower_refuses_one_value_per_channel);
    RUN(optimizer_step_is_mxnet_sgd);
    RUN(pipeline_verifies_and_dumps);
    RUN(gradients_are_named_and_flagged);
    RUN(pass_errors);
    RUN(sync_batchnorm_on_one_replica);
    RUN(adamw_decays_only_matrices);
    RUN(clip_grad_norm_is_pytorchs);
    return harness_done();
}
