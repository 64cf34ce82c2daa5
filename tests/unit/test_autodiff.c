/* Tests for passes/autodiff.c: every differentiable op's gradient rule
 * against central finite differences of the reference interpreter.
 *
 * Each test builds a small forward graph ending in per-sample softmax
 * cross-entropy (after a fixed random projection where the op under test
 * does not produce logits), runs lower + autodiff, evaluates the gradient
 * graph with the interpreter, and compares every parameter's "P.grad" with
 * (L(p+h) - L(p-h)) / 2h, where L is the SUMMED loss of the original,
 * unlowered graph: so lowering is checked along the way. Tensors whose
 * gradient we want to see (the data input of conv, pools, ...) are made
 * parameters. Values are chosen away from the kinks of relu and maxpool
 * (and each test checks that margin) except in the explicit tie tests,
 * which check maxpool's routing rule directly.
 */
#include <stdint.h>
#include <stdlib.h>

#include "ir/ir.h"
#include "passes/passes.h"
#include "tests/graphs.h"
#include "tests/harness.h"
#include "tests/oracle/interp.h"

static char err[256];

/* ---- deterministic values ------------------------------------------------------- */

static uint64_t rng_state = 0x2545F4914F6CDD1Dull;

static double rnd(void) { return tg_rnd(&rng_state); } /* uniform in [-1, 1) */

/* ---- graph building ------------------------------------------------------------- */

static int param(ir_graph *g, const char *name, ir_type t) {
    return ir_add_param(g, name, t, IR_INIT_XAVIER);
}

static int conv(ir_graph *g, int x, const char *name, int cout, int k, int s, int p) {
    const ir_type *xt = &g->nodes[x].type;
    int w = param(g, name, ir_shape4(cout, xt->dim[1], k, k));
    return tg_node(g, IR_OP_CONV, (int[]){x, w}, 2, (int64_t[]){k, s, p, 1}, NULL);
}

static int batchnorm(ir_graph *g, int x, const char *name) {
    int bn[4];
    tg_bn_params(g, x, name, bn);
    return tg_node(g, IR_OP_BATCHNORM, (int[]){x, bn[0], bn[1], bn[2], bn[3]}, 5, (int64_t[]){1, 0},
                   (double[]){1e-5, 0.9});
}

/* softmax_cross_entropy(logits, label) flagged as the loss. */
static int loss_on(ir_graph *g, int logits) {
    const ir_type *t = &g->nodes[logits].type;
    int label = ir_add_input(g, "label", (ir_type){1, {t->dim[0]}, IR_I32}, t->dim[1]);
    int l = tg_node(g, IR_OP_SOFTMAX_CE, (int[]){logits, label}, 2, NULL, NULL);
    if (l >= 0) g->nodes[l].flags |= IR_FLAG_LOSS | IR_FLAG_OUTPUT;
    return l;
}

/* Any tensor to a loss: flatten, a fixed random projection to 3 classes
 * (an input, so it gets no gradient), softmax cross-entropy. */
static int head(ir_graph *g, int t) {
    if (g->nodes[t].type.ndim != 2) t = tg_node(g, IR_OP_FLATTEN, &t, 1, NULL, NULL);
    int proj = ir_add_input(g, "proj", ir_shape2(3, g->nodes[t].type.dim[1]), 0);
    return loss_on(g, tg_node(g, IR_OP_DENSE, (int[]){t, proj}, 2, NULL, NULL));
}

/* ---- values for every source, shared by the forward and gradient graphs ---------- */

typedef struct {
    ir_graph *fwd;      /* the original (unlowered) forward graph */
    double **val;       /* per fwd node: source values, NULL for other nodes */
    ir_graph *grad;     /* lower + autodiff of fwd */
    oracle_interp *fit; /* interpreter on fwd, for the finite differences */
} fixture;

static void fixture_init(fixture *f, ir_graph *g) {
    f->fwd = g;
    f->grad = NULL;
    f->fit = NULL;
    f->val = calloc((size_t)g->n, sizeof *f->val);
    for (int i = 0; i < g->n; i++) {
        const ir_node *n = &g->nodes[i];
        if (!ir_is_source(n->op)) continue;
        int64_t m = ir_numel(&n->type);
        f->val[i] = malloc(sizeof(double) * (size_t)m);
        for (int64_t e = 0; e < m; e++) {
            double r = rnd();
            if (n->type.dtype == IR_I32) /* labels: class indices */
                f->val[i][e] = (double)((int64_t)((r + 1) / 2 * (double)n->iattr[0]) % n->iattr[0]);
            else if (n->op == IR_OP_STATE) /* running statistics: variance must be positive */
                f->val[i][e] = 1 + 0.5 * r;
            else if (strstr(n->name, ".gamma")) /* far from the initial 1, either sign */
                f->val[i][e] = 1.5 * r + (r < 0 ? -0.5 : 0.5);
            else
                f->val[i][e] = r;
        }
    }
}

static void fixture_free(fixture *f) {
    for (int i = 0; i < f->fwd->n; i++) free(f->val[i]);
    free(f->val);
    oracle_interp_free(f->fit);
    ir_free(f->fwd);
    ir_free(f->grad);
}

static int source_named(const ir_graph *g, const char *name) {
    for (int i = 0; i < g->n; i++) {
        ir_op o = g->nodes[i].op;
        if (ir_is_source(o) && !strcmp(g->nodes[i].name, name)) return i;
    }
    return -1;
}

static int node_named(const ir_graph *g, const char *name) {
    for (int i = 0; i < g->n; i++)
        if (!strcmp(g->nodes[i].name, name)) return i;
    return -1;
}

/* Copies the fixture's source values into an interpreter on graph g, by name. */
static void load(const fixture *f, const ir_graph *g, oracle_interp *it) {
    for (int i = 0; i < f->fwd->n; i++) {
        if (!f->val[i]) continue;
        int j = source_named(g, f->fwd->nodes[i].name);
        if (j < 0) continue;
        memcpy(oracle_interp_buffer(it, j), f->val[i],
               sizeof(double) * (size_t)ir_numel(&f->fwd->nodes[i].type));
    }
}

static double summed_loss(fixture *f) {
    if (!f->fit) f->fit = oracle_interp_new(f->fwd);
    load(f, f->fwd, f->fit); /* batchnorm moved the running statistics: reset them */
    oracle_interp_run(f->fit);
    int l = ir_loss_node(f->fwd);
    double sum = 0;
    for (int64_t i = 0; i < ir_numel(&f->fwd->nodes[l].type); i++)
        sum += oracle_interp_buffer(f->fit, l)[i];
    return sum;
}

/* Builds the gradient graph; 0 on success. */
static int differentiate(fixture *f) {
    f->grad = ir_clone(f->fwd);
    if (pass_lower(&f->grad, err, sizeof err) || pass_autodiff(&f->grad, err, sizeof err)) {
        fprintf(stderr, "passes: %s\n", err);
        return -1;
    }
    if (ir_verify(f->grad, err, sizeof err)) {
        fprintf(stderr, "verify: %s\n", err);
        return -1;
    }
    return 0;
}

/* Smallest distance of the forward pass to a kink: |relu input| and the
 * gap between the best and second-best element of each maxpool window.
 * Finite differences straddling a kink would measure nothing useful. */
static double kink_margin(fixture *f) {
    summed_loss(f);
    double margin = INFINITY;
    for (int i = 0; i < f->fwd->n; i++) {
        const ir_node *n = &f->fwd->nodes[i];
        const double *x = n->ninputs ? oracle_interp_buffer(f->fit, n->input[0]) : NULL;
        const ir_type *xt = n->ninputs ? &f->fwd->nodes[n->input[0]].type : NULL;
        if (n->op == IR_OP_RELU)
            for (int64_t e = 0; e < ir_numel(xt); e++) margin = fmin(margin, fabs(x[e]));
        if (n->op == IR_OP_CLIP)
            for (int64_t e = 0; e < ir_numel(xt); e++)
                margin = fmin(margin, fmin(fabs(x[e] - n->fattr[0]), fabs(x[e] - n->fattr[1])));
        if (n->op != IR_OP_MAXPOOL) continue;
        int64_t k = n->iattr[0], s = n->iattr[1], p = n->iattr[2];
        for (int64_t b = 0; b < n->type.dim[0] * n->type.dim[1]; b++)
            for (int64_t oh = 0; oh < n->type.dim[2]; oh++)
                for (int64_t ow = 0; ow < n->type.dim[3]; ow++) {
                    double best = -INFINITY, second = -INFINITY;
                    for (int64_t i2 = 0; i2 < k; i2++)
                        for (int64_t j2 = 0; j2 < k; j2++) {
                            int64_t h = oh * s - p + i2, w = ow * s - p + j2;
                            if (h < 0 || h >= xt->dim[2] || w < 0 || w >= xt->dim[3]) continue;
                            double v = x[(b * xt->dim[2] + h) * xt->dim[3] + w];
                            if (v > best)
                                second = best, best = v;
                            else if (v > second)
                                second = v;
                        }
                    /* a window of relu zeros ties, but every candidate has a zero
                     * gradient; the relu margin covers how close they are to moving */
                    int relu_zeros = f->fwd->nodes[n->input[0]].op == IR_OP_RELU && best == 0;
                    if (second > -INFINITY && !relu_zeros) margin = fmin(margin, best - second);
                }
    }
    return margin;
}

/* The analytic gradient of every parameter against central differences.
 * Returns the number of parameters compared. */
static int check_gradients(fixture *f) {
    /* Central differences in f64: truncation h^2 |L'''| / 6 (~1e-12) and
     * cancellation 2^-53 |L| / h (~1e-10 |L|), both under the 1e-8 absolute
     * and 1e-6 relative tolerance below for these losses; inputs stay 100 h
     * from a kink (kink_margin) so no step crosses one. */
    const double h = 1e-6;
    if (differentiate(f)) {
        CHECK_MSG(0, "differentiation failed: %s", err);
        return 0;
    }
    CHECK_MSG(kink_margin(f) > 1e-4, "inputs too close to a relu/maxpool kink (%g)",
              kink_margin(f));
    oracle_interp *it = oracle_interp_new(f->grad);
    load(f, f->grad, it);
    oracle_interp_run(it);
    int compared = 0;
    for (int p = 0; p < f->fwd->n; p++) {
        const ir_node *pn = &f->fwd->nodes[p];
        if (pn->op != IR_OP_PARAM) continue;
        char name[IR_NAME_MAX + 8];
        snprintf(name, sizeof name, "%s.grad", pn->name);
        int gnode = node_named(f->grad, name);
        CHECK_MSG(gnode >= 0, "no node named %s", name);
        if (gnode < 0) continue;
        CHECK(f->grad->nodes[gnode].flags & IR_FLAG_GRAD);
        CHECK(ir_type_equal(&f->grad->nodes[gnode].type, &pn->type));
        const double *analytic = oracle_interp_buffer(it, gnode);
        double worst = 0, biggest = 0;
        int64_t worst_at = 0;
        for (int64_t e = 0; e < ir_numel(&pn->type); e++) {
            double keep = f->val[p][e];
            f->val[p][e] = keep + h;
            double up = summed_loss(f);
            f->val[p][e] = keep - h;
            double down = summed_loss(f);
            f->val[p][e] = keep;
            double numeric = (up - down) / (2 * h), a = analytic[e];
            double excess = fabs(a - numeric) - (1e-6 * fmax(fabs(a), fabs(numeric)) + 1e-8);
            if (excess > worst) worst = excess, worst_at = e;
            biggest = fmax(biggest, fabs(a));
            if (e == worst_at && excess > 0)
                fprintf(stderr, "  %s[%lld]: analytic %.12g numeric %.12g\n", pn->name,
                        (long long)e, a, numeric);
        }
        CHECK_MSG(worst <= 0, "%s: gradient differs from finite differences", pn->name);
        /* a gradient that is zero everywhere would pass without testing anything */
        CHECK_MSG(biggest > 1e-4, "%s: gradient is (nearly) zero: %g", pn->name, biggest);
        compared++;
    }
    oracle_interp_free(it);
    return compared;
}

static int count_op(const ir_graph *g, ir_op o) {
    int c = 0;
    for (int i = 0; i < g->n; i++) c += g->nodes[i].op == o;
    return c;
}

/* ---- per-op tests ------------------------------------------------------------------- */

/* conv with the data as a parameter too, so dL/dx is checked, and a bias. */
static void conv_case(int k, int s, int p) {
    ir_graph *g = ir_new();
    int x = param(g, "x", ir_shape4(2, 2, 7, 6));
    int y = conv(g, x, "w", 3, k, s, p);
    int b = param(g, "b", ir_shape1(3));
    head(g, tg_node(g, IR_OP_BIAS_ADD, (int[]){y, b}, 2, NULL, NULL));
    fixture f;
    fixture_init(&f, g);
    CHECK_MSG(check_gradients(&f) == 3, "conv k=%d s=%d p=%d", k, s, p);
    fixture_free(&f);
}

TEST(conv_gradients) {
    static const int cases[][3] = {{1, 1, 0}, {1, 2, 0}, {3, 1, 0}, {3, 1, 1}, {3, 2, 0},
                                   {3, 2, 1}, {7, 1, 3}, {7, 2, 3}, {5, 3, 2}};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        conv_case(cases[i][0], cases[i][1], cases[i][2]);
}

/* Grouped and depthwise convolution (the direct kernels' shapes): both
 * gradients against finite differences. */
TEST(grouped_conv_gradients) {
    static const int cases[][6] = {/* C, K, groups, k, s, p */
                                   {4, 6, 2, 3, 1, 1},
                                   {4, 4, 4, 3, 2, 1},
                                   {6, 3, 3, 1, 1, 0},
                                   {3, 6, 3, 3, 1, 0}};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const int *c = cases[i];
        ir_graph *g = ir_new();
        int x = param(g, "x", ir_shape4(2, c[0], 5, 6));
        int w = param(g, "w", ir_shape4(c[1], c[0] / c[2], c[3], c[3]));
        head(g,
             tg_node(g, IR_OP_CONV, (int[]){x, w}, 2, (int64_t[]){c[3], c[4], c[5], c[2]}, NULL));
        fixture f;
        fixture_init(&f, g);
        CHECK_MSG(check_gradients(&f) == 2, "conv C=%d K=%d groups=%d k=%d s=%d p=%d", c[0], c[1],
                  c[2], c[3], c[4], c[5]);
        int gd = -1;
        for (int j = 0; f.grad && j < f.grad->n; j++)
            if (f.grad->nodes[j].op == IR_OP_CONV_GRAD_DATA) gd = j;
        CHECK(gd >= 0 && ir_conv_groups(&f.grad->nodes[gd]) == c[2]);
        fixture_free(&f);
    }
}

TEST(conv_on_an_input_gets_no_data_gradient) {
    ir_graph *g = ir_new();
    int x = ir_add_input(g, "image", ir_shape4(2, 2, 5, 5), 0);
    head(g, conv(g, x, "w", 3, 3, 2, 1));
    fixture f;
    fixture_init(&f, g);
    CHECK(check_gradients(&f) == 1);
    CHECK(count_op(f.grad, IR_OP_CONV_GRAD_DATA) == 0);
    CHECK(count_op(f.grad, IR_OP_CONV_GRAD_WEIGHT) == 1);
    fixture_free(&f);
}

TEST(bias_add_gradients) {
    for (int rank = 2; rank <= 4; rank += 2) {
        ir_graph *g = ir_new();
        int x = param(g, "x", rank == 4 ? ir_shape4(2, 3, 2, 2) : ir_shape2(4, 3));
        int b = param(g, "b", ir_shape1(3));
        head(g, tg_node(g, IR_OP_BIAS_ADD, (int[]){x, b}, 2, NULL, NULL));
        fixture f;
        fixture_init(&f, g);
        CHECK(check_gradients(&f) == 2);
        fixture_free(&f);
    }
}

TEST(batchnorm_training_gradients) {
    ir_type shapes[] = {ir_shape4(3, 2, 3, 3), ir_shape2(5, 3), ir_shape4(2, 3, 1, 1)};
    for (int i = 0; i < 3; i++) {
        ir_graph *g = ir_new();
        int x = param(g, "x", shapes[i]);
        head(g, batchnorm(g, x, "bn"));
        fixture f;
        fixture_init(&f, g);
        CHECK_MSG(check_gradients(&f) == 3, "shape %d", i); /* x, gamma, beta */
        /* the fused rule, not a chain through bn_mean/bn_var */
        CHECK(count_op(f.grad, IR_OP_BN_GRAD_DATA) == 1);
        CHECK(count_op(f.grad, IR_OP_BN_GRAD_GAMMA) == 1);
        fixture_free(&f);
    }
}

/* batchnorm(scale=false, center=false): gamma and beta are state, not
 * trained (frontend/elab.c), so only x gets a gradient, through the same
 * fused rule, which still needs dgamma and dbeta. */
TEST(batchnorm_fixed_affine_gradients) {
    ir_graph *g = ir_new();
    int x = param(g, "x", ir_shape4(3, 2, 3, 3));
    ir_type c = ir_shape1(2);
    int in[5] = {x, ir_add_state(g, "bn.gamma", c, IR_INIT_ONE),
                 ir_add_state(g, "bn.beta", c, IR_INIT_ZERO),
                 ir_add_state(g, "bn.running_mean", c, IR_INIT_ZERO),
                 ir_add_state(g, "bn.running_var", c, IR_INIT_ONE)};
    head(g, tg_node(g, IR_OP_BATCHNORM, in, 5, (int64_t[]){1, 0}, (double[]){1e-5, 0.9}));
    fixture f;
    fixture_init(&f, g);
    CHECK(check_gradients(&f) == 1);
    CHECK(count_op(f.grad, IR_OP_BN_GRAD_DATA) == 1);
    CHECK(node_named(f.grad, "bn.gamma.grad") < 0 && node_named(f.grad, "bn.beta.grad") < 0);
    fixture_free(&f);
}

TEST(relu_gradients) {
    ir_graph *g = ir_new();
    int x = param(g, "x", ir_shape4(2, 2, 3, 3));
    head(g, tg_node(g, IR_OP_RELU, &x, 1, NULL, NULL));
    fixture f;
    fixture_init(&f, g);
    for (int e = 0; e < 36; e++) /* both signs, never near 0 */
        f.val[x][e] = (e % 3 ? 1 : -1) * (0.1 + fabs(rnd()));
    CHECK(check_gradients(&f) == 1);
    fixture_free(&f);
}

TEST(add_gradients_and_accumulation) {
    /* two params through add */
    ir_graph *g = ir_new();
    int a = param(g, "a", ir_shape2(3, 4)), b = param(g, "b", ir_shape2(3, 4));
    head(g, tg_node(g, IR_OP_ADD, (int[]){a, b}, 2, NULL, NULL));
    fixture f;
    fixture_init(&f, g);
    CHECK(check_gradients(&f) == 2);
    /* both get dy unchanged: each needs its own node, not one shared one */
    int ga = node_named(f.grad, "a.grad"), gb = node_named(f.grad, "b.grad");
    CHECK(ga >= 0 && gb >= 0 && ga != gb);
    fixture_free(&f);

    /* add(x, x): the two pass-through contributions are summed */
    g = ir_new();
    int x = param(g, "x", ir_shape2(3, 4));
    head(g, tg_node(g, IR_OP_ADD, (int[]){x, x}, 2, NULL, NULL));
    fixture_init(&f, g);
    CHECK(check_gradients(&f) == 1);
    fixture_free(&f);

    /* u = conv(x, w) read twice (add(u, relu(u))), w read by two convs */
    g = ir_new();
    x = param(g, "x", ir_shape4(2, 2, 4, 4));
    int w = param(g, "w", ir_shape4(2, 2, 3, 3));
    int u = tg_node(g, IR_OP_CONV, (int[]){x, w}, 2, (int64_t[]){3, 1, 1, 1}, NULL);
    int r = tg_node(g, IR_OP_RELU, &u, 1, NULL, NULL);
    int s = tg_node(g, IR_OP_ADD, (int[]){u, r}, 2, NULL, NULL);
    int v = tg_node(g, IR_OP_CONV, (int[]){s, w}, 2, (int64_t[]){3, 1, 1, 1}, NULL);
    head(g, v);
    fixture_init(&f, g);
    CHECK(check_gradients(&f) == 2);
    CHECK(count_op(f.grad, IR_OP_CONV_GRAD_WEIGHT) == 2);
    fixture_free(&f);
}

/* Distinct values 0.05 apart in a shuffled order: every window has a clear
 * winner, and no value sits near the boundaries. */
static void spaced_values(double *v, int64_t n) {
    for (int64_t i = 0; i < n; i++) v[i] = 0.05 * (double)(i - n / 2);
    for (int64_t i = n - 1; i > 0; i--) {
        int64_t j = (int64_t)((rnd() + 1) / 2 * (double)(i + 1)) % (i + 1);
        double t = v[i];
        v[i] = v[j], v[j] = t;
    }
}

TEST(maxpool_gradients) {
    static const int cases[][3] = {{2, 2, 0}, {2, 1, 0}, {3, 2, 1},
                                   {3, 1, 1}, {3, 2, 0}, {3, 3, 1}};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        ir_graph *g = ir_new();
        int x = param(g, "x", ir_shape4(2, 2, 5, 6));
        head(g, tg_node(g, IR_OP_MAXPOOL, &x, 1, (int64_t[]){cases[i][0], cases[i][1], cases[i][2]},
                        NULL));
        fixture f;
        fixture_init(&f, g);
        spaced_values(f.val[x], 120);
        CHECK_MSG(check_gradients(&f) == 1, "maxpool k=%d s=%d p=%d", cases[i][0], cases[i][1],
                  cases[i][2]);
        fixture_free(&f);
    }
}

/* Ties: the whole window's gradient goes to its first maximum in row-major
 * order, and padding (which counts as -inf) never takes it. */
static void tie_case(int k, int s, int p, const double *x, const double *want_mask, int hw) {
    ir_graph *g = ir_new();
    int xp = param(g, "x", ir_shape4(1, 1, hw, hw));
    head(g, tg_node(g, IR_OP_MAXPOOL, &xp, 1, (int64_t[]){k, s, p}, NULL));
    fixture f;
    fixture_init(&f, g);
    memcpy(f.val[xp], x, sizeof(double) * (size_t)(hw * hw));
    CHECK(differentiate(&f) == 0);
    int mg = -1;
    for (int i = 0; i < f.grad->n; i++)
        if (f.grad->nodes[i].op == IR_OP_MAXPOOL_GRAD) mg = i;
    CHECK(mg >= 0);
    if (mg >= 0) {
        oracle_interp *it = oracle_interp_new(f.grad);
        load(&f, f.grad, it);
        oracle_interp_run(it);
        /* want_mask[e] = 1 + the index of the output window routed to e, or 0 */
        const double *dy = oracle_interp_buffer(it, f.grad->nodes[mg].input[0]);
        const double *dx = oracle_interp_buffer(it, node_named(f.grad, "x.grad"));
        for (int e = 0; e < hw * hw; e++) {
            double want = want_mask[e] > 0 ? dy[(int)want_mask[e] - 1] : 0;
            CHECK_MSG(dx[e] == want, "k=%d s=%d p=%d: x.grad[%d] = %g, want %g", k, s, p, e, dx[e],
                      want);
        }
        oracle_interp_free(it);
    }
    fixture_free(&f);
}

TEST(maxpool_ties_route_to_first_maximum) {
    /* 4x4, k2 s2: window 0 all equal, window 1 ties across its second row,
     * window 2 across its last row, window 3 down its last column. */
    const double x1[16] = {1, 1,  0, 0, /* */
                           1, 1,  3, 3, /* */
                           2, -1, 7, 9, /* */
                           5, 5,  2, 9};
    const double m1[16] = {1, 0, 0, 0, 0, 0, 2, 0, 0, 0, 0, 4, 3, 0, 0, 0};
    tie_case(2, 2, 0, x1, m1, 4);
    /* all equal and negative, k3 s2 p1: the padded zeros must not win, and
     * the first valid element of each window does. */
    const double x2[16] = {-1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1};
    const double m2[16] = {1, 2, 0, 0, 3, 4, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0};
    tie_case(3, 2, 1, x2, m2, 4);
}

TEST(avgpool_gradients) {
    static const int cases[][3] = {{2, 2, 0}, {3, 2, 1}, {3, 1, 1},
                                   {3, 2, 0}, {2, 1, 1}, {5, 2, 2}};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        ir_graph *g = ir_new();
        int x = param(g, "x", ir_shape4(2, 2, 5, 6));
        head(g, tg_node(g, IR_OP_AVGPOOL, &x, 1, (int64_t[]){cases[i][0], cases[i][1], cases[i][2]},
                        NULL));
        fixture f;
        fixture_init(&f, g);
        CHECK_MSG(check_gradients(&f) == 1, "avgpool k=%d s=%d p=%d", cases[i][0], cases[i][1],
                  cases[i][2]);
        fixture_free(&f);
    }
}

TEST(global_avgpool_and_flatten_gradients) {
    ir_graph *g = ir_new();
    int x = param(g, "x", ir_shape4(2, 3, 3, 2));
    head(g, tg_node(g, IR_OP_GLOBAL_AVGPOOL, &x, 1, NULL, NULL));
    fixture f;
    fixture_init(&f, g);
    CHECK(check_gradients(&f) == 1);
    fixture_free(&f);

    g = ir_new();
    x = param(g, "x", ir_shape4(2, 3, 2, 2));
    head(g, x); /* head() flattens */
    fixture_init(&f, g);
    CHECK(check_gradients(&f) == 1);
    CHECK(count_op(f.grad, IR_OP_RESHAPE_LIKE) == 1);
    fixture_free(&f);
}

TEST(dense_gradients) {
    ir_graph *g = ir_new();
    int x = param(g, "x", ir_shape2(3, 5));
    int w = param(g, "w", ir_shape2(4, 5));
    loss_on(g, tg_node(g, IR_OP_DENSE, (int[]){x, w}, 2, NULL, NULL));
    fixture f;
    fixture_init(&f, g);
    CHECK(check_gradients(&f) == 2);
    fixture_free(&f);
}

/* Softmax cross-entropy with label smoothing e (PyTorch's label_smoothing;
 * 0: none): finite differences at logits spread by `spread`, the attribute
 * carried to the gradient op, and the gradient exactly
 * softmax - (1-e)*onehot - e/K, the sum's (no 1/N). */
static void check_cross_entropy_gradient(double e, double spread) {
    ir_graph *g = ir_new();
    int z = param(g, "z", ir_shape2(4, 5));
    int l = loss_on(g, z);
    g->nodes[l].fattr[0] = e;
    fixture f;
    fixture_init(&f, g);
    for (int i = 0; i < 20; i++) f.val[z][i] *= spread; /* peaked and flat rows */
    CHECK(check_gradients(&f) == 1);
    int gr = -1;
    for (int i = 0; i < f.grad->n; i++)
        if (f.grad->nodes[i].op == IR_OP_SOFTMAX_CE_GRAD) gr = i;
    CHECK(gr >= 0 && f.grad->nodes[gr].fattr[0] == e);
    oracle_interp *it = oracle_interp_new(f.grad);
    load(&f, f.grad, it);
    oracle_interp_run(it);
    const double *d = oracle_interp_buffer(it, node_named(f.grad, "z.grad"));
    const double *lbl = f.val[source_named(f.fwd, "label")];
    for (int n = 0; n < 4; n++) {
        double zmax = -INFINITY, sum = 0;
        for (int k = 0; k < 5; k++) zmax = fmax(zmax, f.val[z][n * 5 + k]);
        for (int k = 0; k < 5; k++) sum += exp(f.val[z][n * 5 + k] - zmax);
        for (int k = 0; k < 5; k++)
            CHECK_NEAR(d[n * 5 + k],
                       exp(f.val[z][n * 5 + k] - zmax) / sum - (1 - e) * (k == (int)lbl[n]) - e / 5,
                       8 * F64_U); /* exp, a sum of 5, a division: values under 1 */
    }
    oracle_interp_free(it);
    fixture_free(&f);
}

TEST(sigmoid_gradients) {
    ir_graph *g = ir_new();
    int x = param(g, "x", ir_shape4(2, 2, 3, 3));
    head(g, tg_node(g, IR_OP_SIGMOID, &x, 1, NULL, NULL));
    fixture f;
    fixture_init(&f, g);
    for (int e = 0; e < 36; e++) f.val[x][e] *= 4; /* into both tails */
    CHECK(check_gradients(&f) == 1);
    CHECK(count_op(f.grad, IR_OP_SIGMOID_GRAD) == 1);
    fixture_free(&f);
}

/* clip(x, -0.5, 0.7) at values 0.05 apart that stay 0.012 from either
 * bound, on both sides of each; then at the bounds themselves, where
 * MXNet's clip (and so dpc's) passes the gradient. */
TEST(clip_gradients) {
    const double lo = -0.5, hi = 0.7;
    ir_graph *g = ir_new();
    int x = param(g, "x", ir_shape4(2, 2, 3, 3));
    head(g, tg_node(g, IR_OP_CLIP, &x, 1, NULL, (double[]){lo, hi}));
    fixture f;
    fixture_init(&f, g);
    for (int e = 0; e < 36; e++) f.val[x][(e * 7) % 36] = 0.05 * (e - 18) + 0.012;
    CHECK(check_gradients(&f) == 1);
    int cg = -1;
    for (int i = 0; i < f.grad->n; i++)
        if (f.grad->nodes[i].op == IR_OP_CLIP_GRAD) cg = i;
    CHECK(cg >= 0 && f.grad->nodes[cg].fattr[0] == lo && f.grad->nodes[cg].fattr[1] == hi);
    if (cg >= 0) {
        f.val[x][0] = lo, f.val[x][1] = hi, f.val[x][2] = lo - 0.01, f.val[x][3] = hi + 0.01;
        oracle_interp *it = oracle_interp_new(f.grad);
        load(&f, f.grad, it);
        oracle_interp_run(it);
        const double *dy = oracle_interp_buffer(it, f.grad->nodes[cg].input[0]);
        const double *dx = oracle_interp_buffer(it, node_named(f.grad, "x.grad"));
        CHECK(dy[0] != 0 && dx[0] == dy[0] && dx[1] == dy[1]);
        CHECK(dx[2] == 0 && dx[3] == 0);
        oracle_interp_free(it);
    }
    fixture_free(&f);
}

TEST(mul_gradients) {
    ir_graph *g = ir_new();
    int a = param(g, "a", ir_shape4(2, 3, 2, 2)), b = param(g, "b", ir_shape4(2, 3, 2, 2));
    head(g, tg_node(g, IR_OP_MUL, (int[]){a, b}, 2, NULL, NULL));
    fixture f;
    fixture_init(&f, g);
    CHECK(check_gradients(&f) == 2);
    fixture_free(&f);

    /* mul(x, x): both contributions, summed */
    g = ir_new();
    int x = param(g, "x", ir_shape2(3, 4));
    head(g, tg_node(g, IR_OP_MUL, (int[]){x, x}, 2, NULL, NULL));
    fixture_init(&f, g);
    CHECK(check_gradients(&f) == 1);
    fixture_free(&f);
}

/* x[N,C,H,W] times one factor per plane, the factor [N,C,1,1] or [N,C]. */
TEST(mul_channel_gradients) {
    ir_type factors[] = {ir_shape4(2, 3, 1, 1), ir_shape2(2, 3)};
    for (int i = 0; i < 2; i++) {
        ir_graph *g = ir_new();
        int x = param(g, "x", ir_shape4(2, 3, 3, 2)), s = param(g, "s", factors[i]);
        head(g, tg_node(g, IR_OP_MUL_CHANNEL, (int[]){x, s}, 2, NULL, NULL));
        fixture f;
        fixture_init(&f, g);
        CHECK_MSG(check_gradients(&f) == 2, "factor rank %d", factors[i].ndim);
        CHECK(count_op(f.grad, IR_OP_PLANE_DOT) == 1);
        fixture_free(&f);
    }
}

/* A squeeze-and-excitation block: the factor computed from x itself,
 * sigmoid(dense(relu(dense(global_avgpool(x))))), scales x's planes; then
 * relu6 (clip 0..6) of the product. x gets three gradient paths. */
TEST(squeeze_excitation_gradients) {
    ir_graph *g = ir_new();
    int x = param(g, "x", ir_shape4(2, 4, 3, 3));
    int w1 = param(g, "w1", ir_shape2(2, 4)), w2 = param(g, "w2", ir_shape2(4, 2));
    int p = tg_node(g, IR_OP_GLOBAL_AVGPOOL, &x, 1, NULL, NULL);
    int h = tg_node(g, IR_OP_DENSE, (int[]){p, w1}, 2, NULL, NULL);
    int r = tg_node(g, IR_OP_RELU, &h, 1, NULL, NULL);
    int z = tg_node(g, IR_OP_DENSE, (int[]){r, w2}, 2, NULL, NULL);
    int s = tg_node(g, IR_OP_SIGMOID, &z, 1, NULL, NULL);
    int y = tg_node(g, IR_OP_MUL_CHANNEL, (int[]){x, s}, 2, NULL, NULL);
    head(g, tg_node(g, IR_OP_CLIP, &y, 1, NULL, (double[]){0, 6}));
    fixture f;
    fixture_init(&f, g);
    for (int e = 0; e < 8; e++) f.val[w1][e] = 0.3 + 0.1 * e; /* relu inputs away from 0 */
    for (int e = 0; e < 72; e++) f.val[x][e] = 0.1 + fabs(f.val[x][e]); /* positive planes */
    CHECK(check_gradients(&f) == 3);
    fixture_free(&f);
}

/* concat of three tensors of 1, 3 and 2 channels (the middle one twice),
 * rank 4 and rank 2: each input's gradient is its slice of dy. */
TEST(concat_gradients) {
    for (int rank = 2; rank <= 4; rank += 2) {
        ir_graph *g = ir_new();
        ir_type t[3];
        for (int k = 0; k < 3; k++)
            t[k] = rank == 4 ? ir_shape4(2,
                                         k == 0   ? 1
                                         : k == 1 ? 3
                                                  : 2,
                                         2, 3)
                             : ir_shape2(2, k == 0   ? 1
                                            : k == 1 ? 3
                                                     : 2);
        int a = param(g, "a", t[0]), b = param(g, "b", t[1]), c = param(g, "c", t[2]);
        head(g, tg_node(g, IR_OP_CONCAT, (int[]){a, b, c, b}, 4, (int64_t[]){1}, NULL));
        fixture f;
        fixture_init(&f, g);
        CHECK_MSG(check_gradients(&f) == 3, "concat rank %d", rank);
        CHECK(count_op(f.grad, IR_OP_CHANNEL_SLICE) == 4);
        fixture_free(&f);
    }
}

/* dropout at a fixed key: linear in x, so finite differences hold; about
 * p of the elements dropped, the rest scaled by 1/(1-p), and the gradient
 * the same mask on dy. */
TEST(dropout_gradients) {
    const double p = 0.3;
    ir_graph *g = ir_new();
    int x = param(g, "x", ir_shape4(2, 3, 8, 8));
    int key = ir_add_input(g, "dropout_key", ir_shape1(4), 0);
    int d = tg_node(g, IR_OP_DROPOUT, (int[]){x, key}, 2, (int64_t[]){5}, (double[]){p});
    head(g, d);
    fixture f;
    fixture_init(&f, g);
    const double k[4] = {0x1234, 0xbeef, 7, 0xffff};
    memcpy(f.val[key], k, sizeof k);
    CHECK(check_gradients(&f) == 1);
    summed_loss(&f);
    const double *y = oracle_interp_buffer(f.fit, d);
    int dropped = 0;
    for (int e = 0; e < 384; e++) {
        if (y[e] == 0)
            dropped++;
        else
            CHECK_NEAR(y[e], f.val[x][e] / (1 - p),
                       4 * F64_U * fabs(y[e])); /* scale: 2 roundings */
    }
    CHECK_MSG(dropped > 384 * 0.2 && dropped < 384 * 0.4, "%d of 384 dropped", dropped);
    oracle_interp *it = oracle_interp_new(f.grad);
    load(&f, f.grad, it);
    oracle_interp_run(it);
    const double *dx = oracle_interp_buffer(it, node_named(f.grad, "x.grad"));
    for (int e = 0; e < 384; e++) CHECK((dx[e] == 0) == (y[e] == 0) || f.val[x][e] == 0);
    oracle_interp_free(it);
    fixture_free(&f);
}

/* The weight's gradient is a scatter-add of dy's rows: 10 ids over a
 * vocabulary of 7 repeat some rows (their gradients sum) and may leave
 * others out (zero), both against finite differences. */
TEST(embedding_gradients) {
    ir_graph *g = ir_new();
    int ids = ir_add_input(g, "ids", (ir_type){2, {2, 5}, IR_I32}, 7); /* ids in [0, 7) */
    int w = param(g, "emb.weight", ir_shape2(7, 4));
    int e = tg_node(g, IR_OP_EMBEDDING, (int[]){ids, w}, 2, NULL, NULL);
    CHECK(e >= 0 && g->nodes[e].type.ndim == 3 && g->nodes[e].type.dim[2] == 4);
    head(g, e);
    fixture f;
    fixture_init(&f, g);
    f.val[ids][0] = f.val[ids][9] = 3; /* one row picked twice at least */
    CHECK(check_gradients(&f) == 1);
    CHECK(count_op(f.grad, IR_OP_EMBEDDING_GRAD) == 1);
    fixture_free(&f);
}

/* GPT-2's input: embedding + positions. The table [6, 4] is longer than
 * T = 5, so its last row's gradient is zero; the others sum over the
 * batch. Against finite differences. */
TEST(positions_gradients) {
    ir_graph *g = ir_new();
    int ids = ir_add_input(g, "ids", (ir_type){2, {2, 5}, IR_I32}, 7);
    int w = param(g, "emb.weight", ir_shape2(7, 4)), pw = param(g, "pos.weight", ir_shape2(6, 4));
    int e = tg_node(g, IR_OP_EMBEDDING, (int[]){ids, w}, 2, NULL, NULL);
    int p = tg_node(g, IR_OP_POSITIONS, (int[]){ids, pw}, 2, NULL, NULL);
    CHECK(p >= 0 && g->nodes[p].type.ndim == 3 && g->nodes[p].type.dim[1] == 5);
    head(g, tg_node(g, IR_OP_ADD, (int[]){e, p}, 2, NULL, NULL));
    fixture f;
    fixture_init(&f, g);
    CHECK(check_gradients(&f) == 2); /* both parameters */
    CHECK(count_op(f.grad, IR_OP_POSITIONS_GRAD) == 1);
    fixture_free(&f);
}

/* class_token as the frontend builds it: the row [1, 4] broadcast by
 * positions over a one-row slice of x, concatenated before x [2, 3, 4]. */
TEST(class_token_gradients) {
    ir_graph *g = ir_new();
    int x = param(g, "x", (ir_type){3, {2, 3, 4}, IR_F32}), c = param(g, "cls", ir_shape2(1, 4));
    int row = tg_node(g, IR_OP_SLICE, &x, 1, (int64_t[]){1, 0, 1}, NULL);
    int b = tg_node(g, IR_OP_POSITIONS, (int[]){row, c}, 2, NULL, NULL);
    int y = tg_node(g, IR_OP_CONCAT, (int[]){b, x}, 2, (int64_t[]){1}, NULL);
    CHECK(y >= 0 && g->nodes[y].type.dim[1] == 4);
    head(g, y);
    fixture f;
    fixture_init(&f, g);
    CHECK(check_gradients(&f) == 2); /* both parameters */
    fixture_free(&f);
}

/* seq_cross_entropy over [3, 4, 5] logits: sequence 0 keeps every
 * target, sequence 1 ignores two (its mean is over the other two), and
 * sequence 2 ignores all four (loss 0, gradient 0), against finite
 * differences and the loss's definition. */
TEST(seq_cross_entropy_gradients) {
    ir_graph *g = ir_new();
    int z = param(g, "z", (ir_type){3, {3, 4, 5}, IR_F32});
    int y = ir_add_input(g, "targets", (ir_type){2, {3, 4}, IR_I32}, 5);
    int l = tg_node(g, IR_OP_SEQ_CE, (int[]){z, y}, 2, (int64_t[]){-1}, NULL);
    CHECK(l >= 0 && g->nodes[l].type.ndim == 1 && g->nodes[l].type.dim[0] == 3);
    g->nodes[l].flags |= IR_FLAG_LOSS | IR_FLAG_OUTPUT;
    fixture f;
    fixture_init(&f, g);
    for (int i = 0; i < 60; i++) f.val[z][i] *= 3;
    f.val[y][5] = f.val[y][6] = -1;
    for (int t = 8; t < 12; t++) f.val[y][t] = -1;
    CHECK(check_gradients(&f) == 1);
    CHECK(count_op(f.grad, IR_OP_SEQ_CE_GRAD) == 1);
    summed_loss(&f); /* at the unperturbed values */
    const double *loss = oracle_interp_buffer(f.fit, l);
    double want[2] = {0, 0};
    for (int q = 0; q < 2; q++)
        for (int t = 0; t < 4; t++) {
            int r = q * 4 + t, k = (int)f.val[y][r];
            if (k < 0) continue;
            double s = 0;
            for (int j = 0; j < 5; j++) s += exp(f.val[z][r * 5 + j]);
            want[q] += (log(s) - f.val[z][r * 5 + k]) / (q ? 2 : 4);
        }
    CHECK_NEAR(loss[0], want[0], 1e-12);
    CHECK_NEAR(loss[1], want[1], 1e-12);
    CHECK(loss[2] == 0);
    oracle_interp *it = oracle_interp_new(f.grad);
    load(&f, f.grad, it);
    oracle_interp_run(it);
    const double *d = oracle_interp_buffer(it, node_named(f.grad, "z.grad"));
    for (int i = 20; i < 60; i++) /* ignored positions: 0 */
        if (i / 5 == 5 || i / 5 == 6 || i >= 40) CHECK(d[i] == 0);
    oracle_interp_free(it);
    fixture_free(&f);
}

/* The bigram model in miniature: embedding(ids, 7, 7) read as the next
 * id's logits, seq_cross_entropy against the targets. */
TEST(bigram_gradients) {
    ir_graph *g = ir_new();
    int ids = ir_add_input(g, "ids", (ir_type){2, {2, 5}, IR_I32}, 7);
    int w = param(g, "emb.weight", ir_shape2(7, 7));
    int e = tg_node(g, IR_OP_EMBEDDING, (int[]){ids, w}, 2, NULL, NULL);
    int y = ir_add_input(g, "targets", (ir_type){2, {2, 5}, IR_I32}, 7);
    int l = tg_node(g, IR_OP_SEQ_CE, (int[]){e, y}, 2, (int64_t[]){-1}, NULL);
    CHECK(l >= 0);
    g->nodes[l].flags |= IR_FLAG_LOSS | IR_FLAG_OUTPUT;
    fixture f;
    fixture_init(&f, g);
    f.val[ids][0] = f.val[ids][9] = 3;
    CHECK(check_gradients(&f) == 1);
    fixture_free(&f);
}

/* Fused attention against central differences: q [2, Tq, 8] in 2 heads of
 * 4 against k, v [2, Tk, 8], with and without the causal mask, Tq < Tk
 * (the causal window aligned to the last key), dropout at a fixed key
 * (the mask is fixed, so the loss stays smooth), and self-attention (q =
 * k = v = x: three gradients summed into x's). */
static void check_attention(int64_t Tq, int64_t Tk, int causal, double p, int self) {
    ir_graph *g = ir_new();
    int q = param(g, "q", (ir_type){3, {2, Tq, 8}, IR_F32});
    int k = self ? q : param(g, "k", (ir_type){3, {2, Tk, 8}, IR_F32});
    int v = self ? q : param(g, "v", (ir_type){3, {2, Tk, 8}, IR_F32});
    int key = p > 0 ? ir_add_input(g, "dropout_key", ir_shape1(4), 0) : -1;
    int a = tg_node(g, IR_OP_ATTENTION, (int[]){q, k, v, key}, p > 0 ? 4 : 3,
                    (int64_t[]){2, causal, 3}, (double[]){0.5, p});
    CHECK(a >= 0);
    head(g, a);
    fixture f;
    fixture_init(&f, g);
    for (int i = 0; i < 2 * 8 * (int)Tq; i++) f.val[q][i] *= 4; /* peaked weights */
    if (key >= 0) memcpy(f.val[key], (double[]){0x1234, 0xbeef, 7, 0xffff}, 4 * sizeof(double));
    CHECK_MSG(check_gradients(&f) == (self ? 1 : 3), "Tq %d Tk %d causal %d p %g self %d", (int)Tq,
              (int)Tk, causal, p, self);
    CHECK(count_op(f.grad, IR_OP_ATTENTION_LSE) == 1);
    CHECK(count_op(f.grad, IR_OP_ATTENTION_GRAD) == 3);
    fixture_free(&f);
}

TEST(attention_gradients) {
    check_attention(5, 5, 0, 0, 0);
    check_attention(5, 5, 1, 0, 0);
    check_attention(3, 7, 0, 0, 0);
    check_attention(3, 7, 1, 0, 0);
    check_attention(6, 6, 1, 0, 1);
    check_attention(4, 6, 1, 0.3, 0);
}

/* Attention's output against its definition at one row: softmax of the
 * scaled scores over the visible keys times v, computed here directly. */
TEST(attention_definition) {
    ir_graph *g = ir_new();
    int q = param(g, "q", (ir_type){3, {1, 2, 4}, IR_F32});
    int k = param(g, "k", (ir_type){3, {1, 3, 4}, IR_F32});
    int v = param(g, "v", (ir_type){3, {1, 3, 4}, IR_F32});
    int a =
        tg_node(g, IR_OP_ATTENTION, (int[]){q, k, v}, 3, (int64_t[]){2, 1, 0}, (double[]){0.7, 0});
    head(g, a);
    fixture f;
    fixture_init(&f, g);
    summed_loss(&f);
    const double *y = oracle_interp_buffer(f.fit, a);
    /* query 0 sees keys 0..1 (causal, Tk - Tq = 1), head 1 = channels 2..3 */
    double s[2], w[2], o = 0;
    for (int j = 0; j < 2; j++)
        s[j] = 0.7 * (f.val[q][2] * f.val[k][j * 4 + 2] + f.val[q][3] * f.val[k][j * 4 + 3]);
    for (int j = 0; j < 2; j++) w[j] = exp(s[j]) / (exp(s[0]) + exp(s[1]));
    for (int j = 0; j < 2; j++) o += w[j] * f.val[v][j * 4 + 3];
    CHECK_NEAR(y[3], o, 1e-14); /* a few roundings of O(1) values */
    fixture_free(&f);
}

/* A tied head, GPT-2's: the embedding's table w [7, 4] gathered, then read
 * again as the weight of dense over the gathered rows' last axis; w.grad
 * is the sum of both reads' gradients, against finite differences. */
TEST(tied_head_gradients) {
    ir_graph *g = ir_new();
    int ids = ir_add_input(g, "ids", (ir_type){2, {2, 5}, IR_I32}, 7);
    int w = param(g, "emb.weight", ir_shape2(7, 4));
    int e = tg_node(g, IR_OP_EMBEDDING, (int[]){ids, w}, 2, NULL, NULL);
    int logits = tg_node(g, IR_OP_DENSE, (int[]){e, w}, 2, NULL, NULL);
    int y = ir_add_input(g, "targets", (ir_type){2, {2, 5}, IR_I32}, 7);
    int l = tg_node(g, IR_OP_SEQ_CE, (int[]){logits, y}, 2, (int64_t[]){-1}, NULL);
    CHECK(l >= 0);
    g->nodes[l].flags |= IR_FLAG_LOSS | IR_FLAG_OUTPUT;
    fixture f;
    fixture_init(&f, g);
    f.val[ids][0] = f.val[ids][9] = 3;
    CHECK(check_gradients(&f) == 1);
    fixture_free(&f);
}

TEST(softmax_cross_entropy_gradient) { check_cross_entropy_gradient(0, 4); }
TEST(smoothed_cross_entropy_gradient) { check_cross_entropy_gradient(0.1, 3); }

/* conv-bn-relu-maxpool, a basic residual block, a downsampling block with
 * a 1x1/2 shortcut, global_avgpool, dense with bias: ResNet in miniature. */
TEST(small_resnet_gradients) {
    ir_graph *g = ir_new();
    int x = ir_add_input(g, "image", ir_shape4(2, 3, 6, 6), 0);
    int stem = tg_node(g, IR_OP_RELU, (int[]){batchnorm(g, conv(g, x, "c0", 4, 3, 1, 1), "bn0")}, 1,
                       NULL, NULL);
    int pool = tg_node(g, IR_OP_MAXPOOL, &stem, 1, (int64_t[]){3, 2, 1}, NULL); /* 3x3 */
    int y = tg_node(g, IR_OP_RELU, (int[]){batchnorm(g, conv(g, pool, "c1", 4, 3, 1, 1), "bn1")}, 1,
                    NULL, NULL);
    y = batchnorm(g, conv(g, y, "c2", 4, 3, 1, 1), "bn2");
    int b1 = tg_node(g, IR_OP_RELU, (int[]){tg_node(g, IR_OP_ADD, (int[]){pool, y}, 2, NULL, NULL)},
                     1, NULL, NULL);
    y = tg_node(g, IR_OP_RELU, (int[]){batchnorm(g, conv(g, b1, "c3", 6, 3, 2, 1), "bn3")}, 1, NULL,
                NULL); /* 2x2 */
    y = batchnorm(g, conv(g, y, "c4", 6, 3, 1, 1), "bn4");
    int sc = batchnorm(g, conv(g, b1, "c5", 6, 1, 2, 0), "bn5");
    int b2 = tg_node(g, IR_OP_RELU, (int[]){tg_node(g, IR_OP_ADD, (int[]){sc, y}, 2, NULL, NULL)},
                     1, NULL, NULL);
    int gap = tg_node(g, IR_OP_GLOBAL_AVGPOOL, &b2, 1, NULL, NULL);
    int fc = tg_node(g, IR_OP_DENSE, (int[]){gap, param(g, "fc.weight", ir_shape2(3, 6))}, 2, NULL,
                     NULL);
    int logits =
        tg_node(g, IR_OP_BIAS_ADD, (int[]){fc, param(g, "fc.bias", ir_shape1(3))}, 2, NULL, NULL);
    snprintf(g->nodes[logits].name, IR_NAME_MAX, "logits");
    loss_on(g, logits);
    CHECK(ir_verify(g, err, sizeof err) == 0);
    fixture f;
    fixture_init(&f, g);
    CHECK(check_gradients(&f) == 6 * 3 + 2);
    /* the image is an input: the first conv gets no data gradient */
    CHECK(count_op(f.grad, IR_OP_CONV_GRAD_DATA) == 5);
    CHECK(count_op(f.grad, IR_OP_BN_GRAD_DATA) == 6);
    fixture_free(&f);
}

/* Spread over [-3, 3): both tails and the curved middle of each. */
static void activation_case(ir_op op, ir_op grad_op) {
    ir_graph *g = ir_new();
    int x = param(g, "x", ir_shape4(2, 2, 3, 3));
    head(g, tg_node(g, op, &x, 1, NULL, NULL));
    fixture f;
    fixture_init(&f, g);
    for (int e = 0; e < 36; e++) f.val[x][e] *= 3;
    CHECK_MSG(check_gradients(&f) == 1, "%s", ir_ops[op].name);
    CHECK_MSG(count_op(f.grad, grad_op) == 1, "%s", ir_ops[grad_op].name);
    fixture_free(&f);
}

TEST(tanh_gradients) { activation_case(IR_OP_TANH, IR_OP_TANH_GRAD); }
TEST(gelu_gradients) { activation_case(IR_OP_GELU, IR_OP_GELU_GRAD); }
TEST(gelu_tanh_gradients) { activation_case(IR_OP_GELU_TANH, IR_OP_GELU_TANH_GRAD); }

/* A transformer's MLP on [B, C] rows: dense, gelu(tanh), dense, tanh,
 * the weights and the data all parameters: three paths through gelu. */
TEST(mlp_gradients) {
    ir_graph *g = ir_new();
    int x = param(g, "x", ir_shape2(3, 4));
    int w1 = param(g, "w1", ir_shape2(6, 4)), w2 = param(g, "w2", ir_shape2(4, 6));
    int h = tg_node(g, IR_OP_DENSE, (int[]){x, w1}, 2, NULL, NULL);
    int a = tg_node(g, IR_OP_GELU_TANH, &h, 1, NULL, NULL);
    int y = tg_node(g, IR_OP_DENSE, (int[]){a, w2}, 2, NULL, NULL);
    int t = tg_node(g, IR_OP_TANH, &y, 1, NULL, NULL);
    head(g, tg_node(g, IR_OP_ADD, (int[]){t, x}, 2, NULL, NULL));
    fixture f;
    fixture_init(&f, g);
    CHECK(check_gradients(&f) == 3);
    fixture_free(&f);
}

/* layernorm over the last axis of [R, C] and [B, T, C]: the data, gamma
 * and beta gradients (gamma and beta away from their initial 1 and 0). */
TEST(layernorm_gradients) {
    ir_type shapes[] = {ir_shape2(3, 5), {3, {2, 3, 4}, IR_F32}};
    for (int i = 0; i < 2; i++) {
        ir_graph *g = ir_new();
        int64_t C = shapes[i].dim[shapes[i].ndim - 1];
        int x = param(g, "x", shapes[i]);
        int gamma = param(g, "ln.gamma", ir_shape1(C)), beta = param(g, "ln.beta", ir_shape1(C));
        head(g, tg_node(g, IR_OP_LAYERNORM, (int[]){x, gamma, beta}, 3, NULL, (double[]){1e-5}));
        fixture f;
        fixture_init(&f, g);
        CHECK_MSG(check_gradients(&f) == 3, "rank %d", shapes[i].ndim);
        CHECK(count_op(f.grad, IR_OP_LAYERNORM_STATS) == 1);
        CHECK(count_op(f.grad, IR_OP_SUM_LEADING) == 1);
        fixture_free(&f);
    }
}

/* softmax over the last axis of [R, C] and [B, T, C], values spread so
 * the rows are far from uniform. */
TEST(softmax_gradients) {
    ir_type shapes[] = {ir_shape2(3, 5), {3, {2, 3, 4}, IR_F32}};
    for (int i = 0; i < 2; i++) {
        ir_graph *g = ir_new();
        int x = param(g, "x", shapes[i]);
        head(g, tg_node(g, IR_OP_SOFTMAX, &x, 1, NULL, NULL));
        fixture f;
        fixture_init(&f, g);
        for (int64_t e = 0; e < ir_numel(&shapes[i]); e++) f.val[x][e] *= 3;
        CHECK_MSG(check_gradients(&f) == 1, "rank %d", shapes[i].ndim);
        CHECK(count_op(f.grad, IR_OP_SOFTMAX_GRAD) == 1);
        fixture_free(&f);
    }
}

/* dense over the last axis of [B, T, F] (the rows B·T) and its bias
 * along that axis: the data, weight and bias gradients. */
TEST(dense_rank3_gradients) {
    ir_graph *g = ir_new();
    int x = param(g, "x", (ir_type){3, {2, 3, 4}, IR_F32});
    int w = param(g, "w", ir_shape2(5, 4)), b = param(g, "b", ir_shape1(5));
    int y = tg_node(g, IR_OP_DENSE, (int[]){x, w}, 2, NULL, NULL);
    CHECK(y >= 0 && g->nodes[y].type.ndim == 3 && g->nodes[y].type.dim[2] == 5);
    head(g, tg_node(g, IR_OP_BIAS_ADD_LAST, (int[]){y, b}, 2, NULL, NULL));
    fixture f;
    fixture_init(&f, g);
    CHECK(check_gradients(&f) == 3);
    CHECK(count_op(f.grad, IR_OP_SUM_LEADING) == 1);
    CHECK(count_op(f.grad, IR_OP_DENSE_GRAD_WEIGHT) == 1);
    fixture_free(&f);
}

/* matmul batched over a leading axis of 2, in all four transposition
 * forms (the gradients use the transposed ones): both operands' gradients. */
TEST(matmul_gradients) {
    for (int t = 0; t < 4; t++) {
        int ta = t & 1, tb = t >> 1;
        ir_graph *g = ir_new();
        ir_type at = {3, {2, ta ? 4 : 3, ta ? 3 : 4}, IR_F32};
        ir_type bt = {3, {2, tb ? 5 : 4, tb ? 4 : 5}, IR_F32};
        int a = param(g, "a", at), b = param(g, "b", bt);
        int c = tg_node(g, IR_OP_MATMUL, (int[]){a, b}, 2, (int64_t[]){ta, tb}, NULL);
        CHECK(c >= 0 && g->nodes[c].type.dim[1] == 3 && g->nodes[c].type.dim[2] == 5);
        head(g, c);
        fixture f;
        fixture_init(&f, g);
        CHECK_MSG(check_gradients(&f) == 2, "ta %d tb %d", ta, tb);
        CHECK(count_op(f.grad, IR_OP_MATMUL) == 3);
        fixture_free(&f);
    }
}

/* The .net language's arithmetic: sub(a, b), a * c and a + c (mul_const,
 * add_const), each alone, then chained as `(a - b) * -0.5 + 2` with a
 * tanh after, so the curvature is not zero and b's gradient passes
 * through mul_const(-1). */
TEST(arith_gradients) {
    ir_graph *g = ir_new();
    int a = param(g, "a", ir_shape2(3, 4)), b = param(g, "b", ir_shape2(3, 4));
    head(g, tg_node(g, IR_OP_SUB, (int[]){a, b}, 2, NULL, NULL));
    fixture f;
    fixture_init(&f, g);
    CHECK(check_gradients(&f) == 2);
    CHECK(count_op(f.grad, IR_OP_MUL_CONST) == 1); /* b's: -dy */
    fixture_free(&f);

    const ir_op ops[] = {IR_OP_MUL_CONST, IR_OP_ADD_CONST};
    for (int k = 0; k < 2; k++) {
        g = ir_new();
        int x = param(g, "x", ir_shape4(2, 2, 3, 3));
        head(g, tg_node(g, ops[k], &x, 1, NULL, (double[]){-1.75}));
        fixture_init(&f, g);
        CHECK_MSG(check_gradients(&f) == 1, "%s", ir_ops[ops[k]].name);
        fixture_free(&f);
    }

    g = ir_new();
    a = param(g, "a", ir_shape2(3, 4)), b = param(g, "b", ir_shape2(3, 4));
    int d = tg_node(g, IR_OP_SUB, (int[]){a, b}, 2, NULL, NULL);
    int m = tg_node(g, IR_OP_MUL_CONST, &d, 1, NULL, (double[]){-0.5});
    int c = tg_node(g, IR_OP_ADD_CONST, &m, 1, NULL, (double[]){2});
    head(g, tg_node(g, IR_OP_TANH, &c, 1, NULL, NULL));
    fixture_init(&f, g);
    CHECK(check_gradients(&f) == 2);
    fixture_free(&f);
}

/* ---- shapes: reshape, permute, slice, split, concat off axis 1, the mask ---- */

/* reshape (a view; its gradient reshape_like) and permute at ranks 3 and 4
 * (its gradient the inverse permutation). */
TEST(reshape_and_permute_gradients) {
    static const int64_t perms[][4] = {{0, 2, 1, 0}, {0, 3, 1, 2}, {0, 2, 3, 1}};
    for (int c = 0; c < 3; c++) {
        ir_graph *g = ir_new();
        int x = param(g, "x", (ir_type){3, {2, 3, 8}, IR_F32});
        int y = c ? tg_node(g, IR_OP_RESHAPE, &x, 1, (int64_t[]){3, 2, 4}, NULL) : x;
        int z = tg_node(g, IR_OP_PERMUTE, &y, 1, perms[c], NULL);
        CHECK(z >= 0);
        head(g, tg_node(g, IR_OP_RESHAPE, &z, 1, (int64_t[]){24, 0, 0}, NULL));
        fixture f;
        fixture_init(&f, g);
        CHECK_MSG(check_gradients(&f) == 1, "permute case %d", c);
        CHECK(count_op(f.grad, IR_OP_PERMUTE) == 2);
        fixture_free(&f);
    }
}

/* Two overlapping slices of one tensor: each gradient zero-padded back
 * (slice_grad), summed; no concat, they do not cover it exactly. */
TEST(slice_gradients) {
    ir_graph *g = ir_new();
    int x = param(g, "x", (ir_type){3, {2, 5, 3}, IR_F32});
    int a = tg_node(g, IR_OP_SLICE, &x, 1, (int64_t[]){1, 1, 3}, NULL);
    int b = tg_node(g, IR_OP_SLICE, &x, 1, (int64_t[]){1, 0, 3}, NULL);
    head(g, tg_node(g, IR_OP_MUL, (int[]){a, b}, 2, NULL, NULL));
    fixture f;
    fixture_init(&f, g);
    CHECK(check_gradients(&f) == 1);
    CHECK(count_op(f.grad, IR_OP_SLICE_GRAD) == 2 && count_op(f.grad, IR_OP_CONCAT) == 0);
    fixture_free(&f);
}

/* A split: slices that cover their input exactly get one concat of their
 * gradients, not zero-padded tensors summed; with one part unused, the
 * others fall back to slice_grad. */
TEST(split_gradients) {
    for (int unused = 0; unused < 2; unused++) {
        ir_graph *g = ir_new();
        int x = param(g, "x", (ir_type){3, {2, 3, 6}, IR_F32}), p[3];
        for (int k = 0; k < 3; k++) /* created out of order: the concat sorts them */
            p[k] = tg_node(g, IR_OP_SLICE, &x, 1, (int64_t[]){2, 2 * ((k + 1) % 3), 2}, NULL);
        int m = tg_node(g, IR_OP_MUL, (int[]){p[0], p[1]}, 2, NULL, NULL);
        head(g, unused ? m : tg_node(g, IR_OP_ADD, (int[]){m, p[2]}, 2, NULL, NULL));
        fixture f;
        fixture_init(&f, g);
        CHECK_MSG(check_gradients(&f) == 1, "unused %d", unused);
        CHECK(count_op(f.grad, IR_OP_CONCAT) == !unused);
        CHECK(count_op(f.grad, IR_OP_SLICE_GRAD) == (unused ? 2 : 0));
        fixture_free(&f);
    }
}

/* concat along the last axis (rank 3) and along H and W (rank 4): its
 * gradient slices dy along the same axis. */
TEST(concat_axis_gradients) {
    static const int axes[] = {2, 2, 3};
    for (int c = 0; c < 3; c++) {
        ir_graph *g = ir_new();
        int axis = axes[c];
        ir_type ta = c ? ir_shape4(2, 2, 3, 2) : (ir_type){3, {2, 3, 2}, IR_F32}, tb = ta;
        tb.dim[axis] = 3;
        int a = param(g, "a", ta), b = param(g, "b", tb);
        head(g, tg_node(g, IR_OP_CONCAT, (int[]){b, a, b}, 3, (int64_t[]){axis}, NULL));
        fixture f;
        fixture_init(&f, g);
        CHECK_MSG(check_gradients(&f) == 2, "concat case %d", c);
        CHECK(count_op(f.grad, IR_OP_SLICE) == 3 && count_op(f.grad, IR_OP_CHANNEL_SLICE) == 0);
        fixture_free(&f);
    }
}

/* The causal mask before a softmax, [N, Tq, Tk] with Tq < Tk and a square
 * rank-4 one: the masked scores get no gradient, the rest softmax's. */
TEST(causal_mask_gradients) {
    for (int c = 0; c < 2; c++) {
        ir_graph *g = ir_new();
        ir_type t = c ? ir_shape4(2, 2, 3, 3) : (ir_type){3, {2, 3, 4}, IR_F32};
        int x = param(g, "x", t);
        int m = tg_node(g, IR_OP_CAUSAL_MASK, &x, 1, (int64_t[]){0}, NULL);
        if (c) m = tg_node(g, IR_OP_RESHAPE, &m, 1, (int64_t[]){6, 3, 0}, NULL);
        head(g, tg_node(g, IR_OP_SOFTMAX, &m, 1, NULL, NULL));
        fixture f;
        fixture_init(&f, g);
        CHECK_MSG(check_gradients(&f) == 1, "mask case %d", c);
        oracle_interp *it = oracle_interp_new(f.grad);
        load(&f, f.grad, it);
        oracle_interp_run(it);
        const double *dx = oracle_interp_buffer(it, node_named(f.grad, "x.grad"));
        /* case 0: query 0 sees keys 0..1, so key 2 and 3 are masked */
        if (!c) CHECK(dx[2] == 0 && dx[3] == 0 && dx[1] != 0);
        oracle_interp_free(it);
        fixture_free(&f);
    }
}

/* The padding mask before a softmax: keys whose id is 1 get no weight and
 * no gradient; every row keeps a key of another id. */
TEST(pad_mask_gradients) {
    ir_graph *g = ir_new();
    int x = param(g, "x", (ir_type){3, {2, 3, 4}, IR_F32});
    int ids = ir_add_input(g, "ids", (ir_type){2, {2, 4}, IR_I32}, 3);
    int m = tg_node(g, IR_OP_PAD_MASK, (int[]){x, ids}, 2, (int64_t[]){1, 0}, NULL);
    head(g, tg_node(g, IR_OP_SOFTMAX, &m, 1, NULL, NULL));
    fixture f;
    fixture_init(&f, g);
    static const double id[8] = {0, 1, 2, 1, 1, 0, 0, 2};
    memcpy(f.val[ids], id, sizeof id);
    CHECK(check_gradients(&f) == 1);
    CHECK(count_op(f.grad, IR_OP_PAD_MASK) == 2);
    oracle_interp *it = oracle_interp_new(f.grad);
    load(&f, f.grad, it);
    oracle_interp_run(it);
    const double *dx = oracle_interp_buffer(it, node_named(f.grad, "x.grad"));
    CHECK(dx[1] == 0 && dx[3] == 0 && dx[12] == 0 && dx[0] != 0); /* sample 0 keys 1, 3; 1's 0 */
    oracle_interp_free(it);
    fixture_free(&f);
}

int main(void) {
    RUN(conv_gradients);
    RUN(conv_on_an_input_gets_no_data_gradient);
    RUN(grouped_conv_gradients);
    RUN(bias_add_gradients);
    RUN(batchnorm_training_gradients);
    RUN(relu_gradients);
    RUN(add_gradients_and_accumulation);
    RUN(maxpool_gradients);
    RUN(maxpool_ties_route_to_first_maximum);
    RUN(avgpool_gradients);
    RUN(global_avgpool_and_flatten_gradients);
    RUN(dense_gradients);
    RUN(softmax_cross_entropy_gradient);
    RUN(seq_cross_entropy_gradients);
    RUN(attention_gradients);
    RUN(attention_definition);
    RUN(bigram_gradients);
    RUN(tied_head_gradients);
    RUN(small_resnet_gradients);
    RUN(sigmoid_gradients);
    RUN(embedding_gradients);
    RUN(positions_gradients);
    RUN(class_token_gradients);
    RUN(clip_gradients);
    RUN(mul_gradients);
    RUN(mul_channel_gradients);
    RUN(squeeze_excitation_gradients);
    RUN(concat_gradients);
    RUN(dropout_gradients);
    RUN(smoothed_cross_entropy_gradient); /* the random stream of the others stays */
    RUN(batchnorm_fixed_affine_gradients);
    RUN(tanh_gradients);
    RUN(gelu_gradients);
    RUN(gelu_tanh_gradients);
    RUN(mlp_gradients);
    RUN(layernorm_gradients);
    RUN(softmax_gradients);
    RUN(dense_rank3_gradients);
    RUN(matmul_gradients);
    RUN(arith_gradients);
    RUN(reshape_and_permute_gradients);
    RUN(slice_gradients);
    RUN(split_gradients);
    RUN(concat_axis_gradients);
    RUN(causal_mask_gradients);
    RUN(pad_mask_gradients);
    return harness_done();
}
