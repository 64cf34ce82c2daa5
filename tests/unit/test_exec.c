/* tests/unit/test_exec.c — every op on the cpu backend (generated C,
 * compiled at run time, OpenBLAS GEMMs) against the double-precision
 * reference interpreter; the parameter store; the compile cache. */
#include <dlfcn.h>
#include <pthread.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

#include "codegen/codegen.h"
#include "frontend/frontend.h"
#include "base/err.h"
#include "passes/passes.h"
#include "runtime/device/device.h"
#include "runtime/runtime.h"
#include "tests/graphs.h"
#include "tests/harness.h"
#include "tests/oracle/interp.h"

static rt_backend *be;
static char err[4096];

/* ---- running a graph both ways ------------------------------------------------ */

/* Source values: uniform in [-1, 1], or [0.5, 1.5] for names starting with
 * "pos" (variances), 0 for names starting with "zero", 3 for "step" (the
 * step number a loop sets), class indices for i32 inputs (the input's
 * `classes`, with the label named "badlabel" getting one out-of-range
 * entry). */
static void fill_sources(const ir_graph *g, rt_rng *rng, float **vals) {
    for (int i = 0; i < g->n; i++) {
        const ir_node *n = &g->nodes[i];
        if (!ir_is_source(n->op)) continue;
        int64_t cnt = ir_numel(&n->type);
        vals[i] = malloc(sizeof(float) * (size_t)cnt);
        if (n->type.dtype == IR_I32) {
            int32_t *lab = (int32_t *)vals[i];
            int64_t classes = n->iattr[0] > 0 ? n->iattr[0] : 10;
            for (int64_t j = 0; j < cnt; j++)
                lab[j] = (int32_t)rt_rng_below(rng, (uint64_t)classes);
            if (!strcmp(n->name, "badlabel")) lab[cnt - 1] = (int32_t)classes;
        } else {
            int pos = !strncmp(n->name, "pos", 3);
            for (int64_t j = 0; j < cnt; j++)
                vals[i][j] = pos ? rt_rng_uniform_range(rng, 0.5f, 1.5f)
                                 : rt_rng_uniform_range(rng, -1.0f, 1.0f);
            if (!strncmp(n->name, "zero", 4) || !strcmp(n->name, "step"))
                for (int64_t j = 0; j < cnt; j++) vals[i][j] = n->name[0] == 'z' ? 0.0f : 3.0f;
        }
    }
}

/* compare's rtol: the rounding both orders share. The generated kernels
 * round and sum in one order on every CPU (-ffp-contract=off, nothing
 * reassociated), so this part is the same everywhere. */
#define TOL F32_REORDER_TOL

/* The order-dependent rounding of a tensor: max |a - b| / (|ref| + rms(ref))
 * over two cpu results summed in different orders (NaN and inf left to
 * compare). */
static double order_noise(const float *a, const float *b, const double *ref, int64_t n,
                          double rms) {
    double worst = 0;
    for (int64_t i = 0; i < n; i++)
        if (isfinite(a[i]) && isfinite(b[i]) && isfinite(ref[i]))
            worst = fmax(worst, fabs((double)a[i] - b[i]) / (fabs(ref[i]) + rms + 1e-30));
    return worst;
}

/* The two orders' difference estimates either one's error: within half of
 * it to twice it at the worst element of every tensor here, on OpenBLAS's
 * Haswell, SkylakeX and default kernels; NOISE_HEADROOM is four times that.
 * A wrong result in one order widens its own floor, so the floor is capped
 * at NOISE_CAP, several times ResNet-18's step (the noisiest here) and far
 * below a wrong kernel's O(1). */
#define NOISE_HEADROOM 8.0
#define NOISE_CAP      5e-3

/* got ~ ref: |got - ref| <= (TOL + noise) * (|ref| + rms(ref)); NaN
 * matches NaN. TOL bounds the rounding both orders share; noise, the
 * GEMMs' and convolutions' order-dependent part, measured from other: the
 * same graph with every GEMM's k summed in two halves. */
static int compare(const char *what, int node, const float *got, const float *other,
                   const double *ref, int64_t n) {
    double ss = 0;
    for (int64_t i = 0; i < n; i++)
        if (ref[i] == ref[i] && !isinf(ref[i])) ss += ref[i] * ref[i];
    double rms = sqrt(ss / (double)(n ? n : 1));
    double noise = order_noise(got, other, ref, n, rms);
    double tol = TOL + fmin(NOISE_HEADROOM * noise, NOISE_CAP);
    int bad = 0;
    for (int64_t i = 0; i < n; i++) {
        double r = ref[i], gv = got[i];
        if (r != r || gv != gv) {
            if ((r != r) != (gv != gv))
                bad++;
            else
                continue;
        } else if (isinf(r) || isinf(gv)) {
            if (r != gv) bad++;
        } else if (fabs(gv - r) > tol * (fabs(r) + rms) + 1e-30) {
            bad++;
        }
        if (bad == 1 && (r != gv)) {
            fprintf(stderr,
                    "  %s node %d [%lld]: got %.9g, expected %.9g (rms %.3g, tol %.3g of which "
                    "measured %.3g)\n",
                    what, node, (long long)i, gv, r, rms, tol, tol - TOL);
            bad++; /* print only the first */
        }
    }
    return bad ? -1 : 0;
}

/* The options the executor renders with (NULL: dprun's defaults). */
static const cg_options *exec_opts;

/* g on the cpu backend (with the plan if given) from the source values
 * vals, every GEMM summed in `order`: out[i] the value of every stored f32
 * node afterwards (params and state updated in place included); -1 when it
 * does not build or run. */
static int run_cpu(const ir_graph *g, const dpc_plan *plan, float **vals, rt_sum_order order,
                   const unsigned char *stored, float **out) {
    rt_sum_order was = rt_cpu_set_sum_order(order);
    rt_store *st = rt_store_new(be, g);
    rt_exec *ex = rt_exec_new_opts(be, st, g, plan, exec_opts, err, sizeof err);
    int rc = 0;
    if (!ex) {
        fprintf(stderr, "  rt_exec_new: %s\n", err);
        rc = -1;
    }
    for (int i = 0; i < g->n && ex; i++) {
        const ir_node *n = &g->nodes[i];
        if (!vals[i]) continue;
        size_t bytes = (size_t)ir_numel(&n->type) * 4;
        if (n->op == IR_OP_INPUT)
            CHECK(rt_exec_set_input(ex, n->name, vals[i], bytes) == 0);
        else
            rt_store_write(st, rt_store_find(st, n->name), vals[i]);
    }
    if (ex && rt_exec_run(ex, err, sizeof err)) {
        fprintf(stderr, "  rt_exec_run: %s\n", err);
        rc = -1;
    }
    for (int i = 0; i < g->n && !rc; i++) {
        const ir_node *n = &g->nodes[i];
        int64_t cnt = ir_numel(&n->type);
        if (n->type.dtype == IR_I32 || !stored[i]) continue;
        out[i] = malloc(sizeof(float) * (size_t)cnt);
        if (rt_exec_get_node(ex, i, out[i], (size_t)cnt * 4)) {
            fprintf(stderr, "  rt_exec_get_node %d failed\n", i);
            rc = -1;
        }
    }
    rt_exec_free(ex);
    rt_store_free(st);
    rt_cpu_set_sum_order(was);
    return rc;
}

/* Runs g on the cpu backend (with the plan if given), twice in two orders
 * of summation, and in the interpreter from the same source values;
 * compares every non-source node and every param/state afterwards, each
 * order against the interpreter within TOL plus their measured difference
 * (compare). Returns the number of mismatching tensors. */
static int run_both(const ir_graph *g, const dpc_plan *plan) {
    if (ir_verify(g, err, sizeof err)) {
        fprintf(stderr, "  graph does not verify: %s\n", err);
        return 1;
    }
    rt_rng rng;
    rt_rng_seed(&rng, 1234);
    float **vals = calloc((size_t)g->n, sizeof *vals);
    float **got[2] = {calloc((size_t)g->n, sizeof(float *)), calloc((size_t)g->n, sizeof(float *))};
    fill_sources(g, &rng, vals);
    /* Fused values nothing outside their group reads are never stored. */
    unsigned char *stored = malloc((size_t)g->n);
    ir_stored(g, stored);
    int bad = run_cpu(g, plan, vals, RT_SUM_ORDER_DEFAULT, stored, got[0]) ||
              run_cpu(g, plan, vals, RT_SUM_ORDER_SPLIT_K, stored, got[1]);
    oracle_interp *it = oracle_interp_new(g);
    for (int i = 0; i < g->n && !bad; i++) {
        const ir_node *n = &g->nodes[i];
        if (!vals[i]) continue;
        double *d = oracle_interp_buffer(it, i);
        for (int64_t j = 0; j < ir_numel(&n->type); j++)
            d[j] = n->type.dtype == IR_I32 ? (double)((int32_t *)vals[i])[j] : (double)vals[i][j];
    }
    if (!bad) oracle_interp_run(it);
    for (int i = 0; i < g->n && !bad; i++) {
        if (!got[0][i]) continue;
        const double *ref = oracle_interp_buffer(it, i);
        int64_t cnt = ir_numel(&g->nodes[i].type);
        for (int o = 0; o < 2 && !bad; o++)
            if (compare(ir_ops[g->nodes[i].op].name, i, got[o][i], got[!o][i], ref, cnt)) {
                if (o) fprintf(stderr, "  (summed in split-k order)\n");
                bad++;
            }
    }
    free(stored);
    oracle_interp_free(it);
    for (int i = 0; i < g->n; i++) free(vals[i]), free(got[0][i]), free(got[1][i]);
    free(vals), free(got[0]), free(got[1]);
    return bad;
}

/* ---- GEMM-backed ops ------------------------------------------------------------- */

typedef struct {
    int64_t N, C, H, W, K, k, s, p, groups;
} conv_case;

/* conv, conv_grad_data and conv_grad_weight of one shape in one graph. */
static ir_graph *conv_graph(conv_case c) {
    int64_t G = c.groups;
    ir_graph *g = ir_new();
    int x = ir_add_input(g, "x", ir_shape4(c.N, c.C, c.H, c.W), 0);
    int w = ir_add_param(g, "w", ir_shape4(c.K, c.C / G, c.k, c.k), IR_INIT_XAVIER);
    int y = N(CONV, x, w), IA(c.k, c.s, c.p, G), NULL);
    const ir_type *yt = &g->nodes[y].type;
    int dy = ir_add_input(g, "dy", *yt, 0);
    N(CONV_GRAD_DATA, dy, w), IA(c.k, c.s, c.p, c.H, c.W, G), NULL);
    N(CONV_GRAD_WEIGHT, dy, x), IA(c.k, c.s, c.p, G), NULL);
    return g;
}

static const conv_case conv_cases[] = {
    {3, 5, 11, 9, 7, 3, 2, 1, 1},  /* odd sizes, stride 2 */
    {3, 3, 13, 10, 4, 7, 2, 3, 1}, /* the stem's 7x7/2 pad 3, non-square */
    {3, 6, 5, 7, 4, 1, 1, 0, 1},   /* pointwise */
    {3, 6, 7, 5, 5, 1, 2, 0, 1},   /* 1x1/2 shortcut */
    {1, 2, 4, 4, 3, 3, 1, 1, 1},   /* batch 1 */
    {2, 3, 6, 6, 2, 5, 3, 2, 1},   /* stride 3, k 5 */
    /* grouped: the direct kernels */
    {3, 6, 7, 5, 4, 3, 1, 1, 2}, /* 2 groups, 3 -> 2 channels each */
    {2, 8, 9, 9, 8, 3, 2, 1, 8}, /* depthwise 3x3/2 */
    {2, 4, 6, 5, 8, 3, 1, 0, 4}, /* depthwise, 2 outputs per channel */
    {1, 6, 5, 5, 3, 1, 1, 0, 3}, /* grouped 1x1 */
};

TEST(conv_ops) {
    for (size_t i = 0; i < sizeof conv_cases / sizeof *conv_cases; i++) {
        ir_graph *g = conv_graph(conv_cases[i]);
        CHECK_MSG(run_both(g, NULL) == 0, "conv case %zu", i);
        ir_free(g);
    }
}

/* The chunked path (several im2col/GEMM rounds, a short last chunk), taken
 * by shrinking the scratch bound and handing the program over in a plan
 * section, as dprun will. */
TEST(conv_chunked_via_plan_section) {
    conv_case c = {5, 3, 7, 6, 4, 3, 2, 1, 1};
    ir_graph *g = conv_graph(c);
    cg_options o = cg_default_options();
    o.scratch_max_bytes = 2 * (27 + 4) * 12 * 4; /* two images: columns + CNHW block */
    cg_program *p = cg_generate(g, CG_DIALECT_C, &o, err, sizeof err);
    CHECK(p != NULL);
    if (!p) return;
    CHECK(p->scratch == 2 * (27 + 4) * 12);
    int gemms = 0;
    for (int i = 0; i < p->ncalls; i++) gemms += p->calls[i].kind == CG_CALL_GEMM;
    CHECK(gemms == 3 + 3 + 3); /* one GEMM per chunk (2, 2, 1 images) and op */
    unsigned char *bytes;
    size_t len;
    CHECK(cg_program_serialize(p, &bytes, &len) == 0);
    dpc_plan plan = {0};
    CHECK(plan_add_section(&plan, "KCPU", bytes, len) == 0);
    /* dprun renders with dpc's defaults: this program is not that one */
    rt_store *st0 = rt_store_new(be, g);
    CHECK(rt_exec_new(be, st0, g, &plan, err, sizeof err) == NULL);
    CHECK_MSG(strstr(err, "is not what its graph renders (kernel k0_im2col differs)"), "%s", err);
    rt_store_free(st0);
    exec_opts = &o;
    CHECK(run_both(g, &plan) == 0);
    plan_free_sections(&plan);
    /* a section for another graph: kernels are generated instead */
    ir_graph *other = conv_graph((conv_case){2, 3, 7, 6, 4, 3, 2, 1, 1});
    CHECK(plan_add_section(&plan, "KCPU", bytes, len) == 0);
    CHECK(run_both(other, &plan) == 0);
    plan_free_sections(&plan);
    ir_free(other);
    /* a truncated section is refused with a message */
    CHECK(plan_add_section(&plan, "KCPU", bytes, len - 3) == 0);
    rt_store *st = rt_store_new(be, g);
    CHECK(rt_exec_new_opts(be, st, g, &plan, &o, err, sizeof err) == NULL);
    CHECK(strstr(err, "KCPU") != NULL);
    rt_store_free(st);
    plan_free_sections(&plan);
    exec_opts = NULL;
    free(bytes);
    cg_program_free(p);
    ir_free(g);
}

TEST(dense_ops) {
    ir_graph *g = ir_new();
    int x = ir_add_input(g, "x", ir_shape2(3, 17), 0);
    int w = ir_add_param(g, "w", ir_shape2(10, 17), IR_INIT_XAVIER);
    int dy = ir_add_input(g, "dy", ir_shape2(3, 10), 0);
    N(DENSE, x, w), NULL, NULL);
    N(DENSE_GRAD_DATA, dy, w), NULL, NULL);
    N(DENSE_GRAD_WEIGHT, dy, x), NULL, NULL);
    CHECK(run_both(g, NULL) == 0);
    ir_free(g);
}

/* Every conv and dense shape of a CIFAR ResNet-18 (32x32 input), batch 2. */
TEST(resnet18_gemm_shapes) {
    static const int64_t shapes[][6] = {
        /* C, K, H, k, s, p */
        {3, 64, 32, 7, 2, 3},   {64, 64, 8, 3, 1, 1},   {64, 128, 8, 3, 2, 1},
        {128, 128, 4, 3, 1, 1}, {64, 128, 8, 1, 2, 0},  {128, 256, 4, 3, 2, 1},
        {256, 256, 2, 3, 1, 1}, {128, 256, 4, 1, 2, 0}, {256, 512, 2, 3, 2, 1},
        {512, 512, 1, 3, 1, 1}, {256, 512, 2, 1, 2, 0},
    };
    ir_graph *g = ir_new();
    char name[32];
    for (size_t i = 0; i < sizeof shapes / sizeof *shapes; i++) {
        const int64_t *s = shapes[i];
        snprintf(name, sizeof name, "x%zu", i);
        int x = ir_add_input(g, name, ir_shape4(2, s[0], s[2], s[2]), 0);
        snprintf(name, sizeof name, "w%zu", i);
        int w = ir_add_param(g, name, ir_shape4(s[1], s[0], s[3], s[3]), IR_INIT_XAVIER);
        int y = N(CONV, x, w), IA(s[3], s[4], s[5], 1), NULL);
        snprintf(name, sizeof name, "dy%zu", i);
        int dy = ir_add_input(g, name, g->nodes[y].type, 0);
        N(CONV_GRAD_DATA, dy, w), IA(s[3], s[4], s[5], s[2], s[2], 1), NULL);
        N(CONV_GRAD_WEIGHT, dy, x), IA(s[3], s[4], s[5], 1), NULL);
    }
    int x = ir_add_input(g, "feat", ir_shape2(2, 512), 0);
    int w = ir_add_param(g, "fc.weight", ir_shape2(10, 512), IR_INIT_XAVIER);
    int dy = ir_add_input(g, "dlogits", ir_shape2(2, 10), 0);
    N(DENSE, x, w), NULL, NULL);
    N(DENSE_GRAD_DATA, dy, w), NULL, NULL);
    N(DENSE_GRAD_WEIGHT, dy, x), NULL, NULL);
    CHECK(run_both(g, NULL) == 0);
    ir_free(g);
}

/* ---- elementwise, injective, reductions, pooling --------------------------------- */

TEST(bias_add_relu_add) {
    ir_graph *g = ir_new();
    int x = ir_add_input(g, "x", ir_shape4(3, 5, 4, 7), 0);
    int b = ir_add_param(g, "b", ir_shape1(5), IR_INIT_ZERO);
    int y = N(BIAS_ADD, x, b), NULL, NULL);
    int r = N(RELU, y), NULL, NULL);
    N(ADD, r, x), NULL, NULL);
    int x2 = ir_add_input(g, "x2", ir_shape2(3, 5), 0);
    N(BIAS_ADD, x2, b), NULL, NULL);
    N(RELU, x2), NULL, NULL);
    CHECK(run_both(g, NULL) == 0);
    ir_free(g);
}

/* The gather and its scatter-add gradient, ids [3, 5] with some repeated
 * and the last one out of range (clamped, as the interpreter does). */
TEST(embedding_ops) {
    ir_graph *g = ir_new();
    int ids = ir_add_input(g, "badlabel", (ir_type){2, {3, 5}, IR_I32}, 7); /* last id: 7 */
    int w = ir_add_param(g, "w", ir_shape2(7, 4), IR_INIT_XAVIER);
    N(EMBEDDING, ids, w), NULL, NULL);
    int dy = ir_add_input(g, "dy", (ir_type){3, {3, 5, 4}, IR_F32}, 0);
    N(EMBEDDING_GRAD, dy, ids), IA(7), NULL);
    CHECK(run_both(g, NULL) == 0);
    ir_free(g);
}

/* positions over ids [3, 5] and over floats [3, 4, 6] (x only gives T),
 * a table [6, 4] longer than both; the gradient's sum over the batch with
 * its zero rows past T. */
TEST(positions_ops) {
    ir_graph *g = ir_new();
    int ids = ir_add_input(g, "ids", (ir_type){2, {3, 5}, IR_I32}, 7);
    int xf = ir_add_input(g, "xf", (ir_type){3, {3, 4, 6}, IR_F32}, 0);
    int w = ir_add_param(g, "w", ir_shape2(6, 4), IR_INIT_XAVIER);
    N(POSITIONS, ids, w), NULL, NULL);
    N(POSITIONS, xf, w), NULL, NULL);
    int dy = ir_add_input(g, "dy", (ir_type){3, {3, 5, 4}, IR_F32}, 0);
    N(POSITIONS_GRAD, dy), IA(6), NULL);
    CHECK(run_both(g, NULL) == 0);
    ir_free(g);
}

/* An embedding table starts N(0, 0.02²): its mean and spread, and the
 * same values for the same seed. */
TEST(normal_init) {
    ir_graph *g = ir_new();
    ir_add_param(g, "embedding0.weight", ir_shape2(500, 8), IR_INIT_NORMAL);
    float a[4000], b[4000];
    for (int k = 0; k < 2; k++) {
        rt_store *st = rt_store_new(be, g);
        rt_store_init(st, g, NULL, 42);
        rt_store_read(st, 0, k ? b : a);
        rt_store_free(st);
    }
    CHECK(memcmp(a, b, sizeof a) == 0);
    double sum = 0, sq = 0;
    for (int i = 0; i < 4000; i++) sum += a[i], sq += (double)a[i] * a[i];
    double mean = sum / 4000, sd = sqrt(sq / 4000 - mean * mean);
    CHECK_MSG(fabs(mean) < 0.0015 && fabs(sd - 0.02) < 0.001, "mean %g sd %g", mean, sd);
    ir_free(g);
}

/* The train section's init on a dense weight [400, 25] (made xavier) and
 * a table [500, 8]: normal(std=0.05) gives both N(0, 0.05²); kaiming the
 * weight He's N(0, 2/25), the table GPT-2's 0.02. Bounds: the sample sd
 * of n normals is within a few sd/sqrt(2n) (under 3% here at 5 of them),
 * the mean within a few sd/sqrt(n). */
TEST(train_section_init_kinds) {
    ir_graph *g = ir_new();
    ir_add_param(g, "dense0.weight", ir_shape2(400, 25), IR_INIT_XAVIER);
    ir_add_param(g, "embedding0.weight", ir_shape2(500, 8), IR_INIT_NORMAL);
    static const struct {
        int kind;
        double std, want[2];
    } cases[] = {{IR_TRAIN_INIT_NORMAL, 0.05, {0.05, 0.05}},
                 {IR_TRAIN_INIT_KAIMING, 0, {0.28284271247461906, 0.02}}};
    for (int c = 0; c < 2; c++) {
        ir_train t;
        ir_train_defaults(&t);
        t.init_kind = cases[c].kind, t.init_std = cases[c].std;
        rt_store *st = rt_store_new(be, g);
        CHECK(rt_store_init(st, g, &t, 7) == 0);
        for (int p = 0; p < 2; p++) {
            static float v[10000];
            rt_store_read(st, p, v);
            double sum = 0, sq = 0;
            for (int i = 0; i < 4000 + 6000 * !p; i++) sum += v[i], sq += (double)v[i] * v[i];
            double n = 4000 + 6000 * !p, mean = sum / n, sd = sqrt(sq / n - mean * mean);
            double w = cases[c].want[p];
            CHECK_MSG(fabs(mean) < 5 * w / sqrt(n) && fabs(sd - w) < 0.03 * w,
                      "init %d tensor %d: mean %g sd %g, want sd %g", cases[c].kind, p, mean, sd,
                      w);
        }
        rt_store_free(st);
    }
    ir_free(g);
}

/* GPT-2's scaled init: M = 2 weights marked scaled start N(0, (S/√2)²),
 * S the train section's normal std (0.05 given; 0.02 under xavier), while
 * the unmarked dense weight keeps its kind (normal S; xavier's U(-s, s),
 * s = sqrt(2.24/212.5): sd s/√3). Tolerance as train_section_init_kinds'
 * (3% of sd for 10000 draws: ~4 standard errors). */
TEST(scaled_init_spread) {
    ir_graph *g = ir_new();
    ir_add_param(g, "dense0.weight", ir_shape2(400, 25), IR_INIT_XAVIER);
    ir_add_param(g, "dense1.weight", ir_shape2(400, 25), IR_INIT_SCALED);
    ir_add_param(g, "dense2.weight", ir_shape2(400, 25), IR_INIT_SCALED);
    static const struct {
        int kind;
        double std, want[3];
    } cases[] = {{IR_TRAIN_INIT_NORMAL, 0.05, {0.05, 0.05 / M_SQRT2, 0.05 / M_SQRT2}},
                 {IR_TRAIN_INIT_XAVIER, 0, {0.0592767, 0.02 / M_SQRT2, 0.02 / M_SQRT2}}};
    for (int c = 0; c < 2; c++) {
        ir_train t;
        ir_train_defaults(&t);
        t.init_kind = cases[c].kind, t.init_std = cases[c].std;
        rt_store *st = rt_store_new(be, g);
        CHECK(rt_store_init(st, g, &t, 7) == 0);
        for (int p = 0; p < 3; p++) {
            static float v[10000];
            rt_store_read(st, p, v);
            double sum = 0, sq = 0, n = 10000;
            for (int i = 0; i < 10000; i++) sum += v[i], sq += (double)v[i] * v[i];
            double mean = sum / n, sd = sqrt(sq / n - mean * mean), w = cases[c].want[p];
            CHECK_MSG(fabs(mean) < 5 * w / sqrt(n) && fabs(sd - w) < 0.03 * w,
                      "init %d tensor %d: mean %g sd %g, want sd %g", cases[c].kind, p, mean, sd,
                      w);
        }
        rt_store_free(st);
    }
    ir_free(g);
}

static void batchnorm_graph(int rank4, int training) {
    ir_graph *g = ir_new();
    int x = ir_add_input(g, "x", rank4 ? ir_shape4(3, 5, 3, 7) : ir_shape2(7, 5), 0);
    int ga = ir_add_param(g, "gamma", ir_shape1(5), IR_INIT_ONE);
    int be_ = ir_add_param(g, "beta", ir_shape1(5), IR_INIT_ZERO);
    int rm = ir_add_state(g, "rmean", ir_shape1(5), IR_INIT_ZERO);
    int rv = ir_add_state(g, "pos_rvar", ir_shape1(5), IR_INIT_ONE);
    N(BATCHNORM, x, ga, be_, rm, rv), IA(training), FA(1e-5, 0.9));
    CHECK_MSG(run_both(g, NULL) == 0, "rank4 %d training %d", rank4, training);
    ir_free(g);
}

TEST(batchnorm_op) {
    batchnorm_graph(1, 1);
    batchnorm_graph(0, 1);
    batchnorm_graph(1, 0);
}

TEST(pooling) {
    static const int64_t cases[][3] = {{3, 2, 1}, {2, 2, 0}, {3, 1, 1}, {1, 2, 0}, {5, 3, 2}};
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        ir_graph *g = ir_new();
        int64_t k = cases[i][0], s = cases[i][1], p = cases[i][2];
        int x = ir_add_input(g, "x", ir_shape4(3, 4, 9, 11), 0);
        int mp = N(MAXPOOL, x), IA(k, s, p), NULL);
        int ap = N(AVGPOOL, x), IA(k, s, p), NULL);
        int dy = ir_add_input(g, "dy", g->nodes[mp].type, 0);
        N(MAXPOOL_GRAD, dy, x), IA(k, s, p), NULL);
        N(AVGPOOL_GRAD, dy), IA(k, s, p, 9, 11), NULL);
        (void)ap;
        CHECK_MSG(run_both(g, NULL) == 0, "pool k%lld s%lld p%lld", (long long)k, (long long)s,
                  (long long)p);
        ir_free(g);
    }
}

/* Ties: every window of a constant input has its first element win. */
TEST(maxpool_ties) {
    ir_graph *g = ir_new();
    int x = ir_add_input(g, "x", ir_shape4(1, 1, 5, 5), 0);
    int mp = N(MAXPOOL, x), IA(3, 2, 1), NULL);
    int dy = ir_add_input(g, "dy", g->nodes[mp].type, 0);
    int gr = N(MAXPOOL_GRAD, dy, x), IA(3, 2, 1), NULL);
    rt_store *st = rt_store_new(be, g);
    rt_exec *ex = rt_exec_new(be, st, g, NULL, err, sizeof err);
    CHECK(ex != NULL);
    if (ex) {
        float xs[25], dys[9], out[25];
        for (int i = 0; i < 25; i++) xs[i] = 1.0f;
        for (int i = 0; i < 9; i++) dys[i] = (float)(i + 1);
        CHECK(rt_exec_set_input(ex, "x", xs, sizeof xs) == 0);
        CHECK(rt_exec_set_input(ex, "dy", dys, sizeof dys) == 0);
        CHECK(rt_exec_run(ex, err, sizeof err) == 0);
        CHECK(rt_exec_get_node(ex, gr, out, sizeof out) == 0);
        /* window (oh, ow) starts at (2oh-1, 2ow-1), clipped: its first element
         * is (max(0, 2oh-1), max(0, 2ow-1)). */
        CHECK_NEAR(out[0], 1, 0); /* window (0,0) */
        CHECK_NEAR(out[1], 2, 0); /* window (0,1) */
        CHECK_NEAR(out[5], 4, 0); /* window (1,0) */
        CHECK_NEAR(out[6], 5, 0); /* window (1,1) */
        CHECK_NEAR(out[2], 0, 0);
        CHECK_NEAR(out[3], 3, 0); /* window (0,2) starts at column 3 */
    }
    rt_exec_free(ex);
    rt_store_free(st);
    ir_free(g);
}

TEST(global_avgpool_flatten_reshape) {
    ir_graph *g = ir_new();
    int x = ir_add_input(g, "x", ir_shape4(3, 5, 7, 3), 0);
    int gp = N(GLOBAL_AVGPOOL, x), NULL, NULL);
    N(GLOBAL_AVGPOOL_GRAD, gp), IA(7, 3), NULL);
    int f = N(FLATTEN, x), NULL, NULL);
    N(RELU, f), NULL, NULL);
    int r = N(RESHAPE_LIKE, f, x), NULL, NULL);
    N(ADD, r, x), NULL, NULL);
    CHECK(run_both(g, NULL) == 0);
    ir_free(g);
}

TEST(softmax_cross_entropy) {
    ir_graph *g = ir_new();
    int lo = ir_add_input(g, "logits", ir_shape2(5, 10), 0);
    int lab = ir_add_input(g, "badlabel", (ir_type){1, {5}, IR_I32}, 10);
    int dl = ir_add_input(g, "dloss", ir_shape1(5), 0);
    N(SOFTMAX_CE, lo, lab), NULL, NULL);
    N(SOFTMAX_CE_GRAD, lo, lab, dl), NULL, NULL);
    CHECK(run_both(g, NULL) == 0);
    ir_free(g);
    /* a larger, well-labelled case with 3 classes */
    g = ir_new();
    lo = ir_add_input(g, "logits", ir_shape2(7, 3), 0);
    lab = ir_add_input(g, "label", (ir_type){1, {7}, IR_I32}, 3);
    dl = ir_add_input(g, "dloss", ir_shape1(7), 0);
    int l = N(SOFTMAX_CE, lo, lab), NULL, NULL);
    int one = N(ONES_LIKE, l), NULL, NULL);
    N(SOFTMAX_CE_GRAD, lo, lab, one), NULL, NULL);
    N(SOFTMAX_CE_GRAD, lo, lab, dl), NULL, NULL);
    CHECK(run_both(g, NULL) == 0);
    ir_free(g);
    /* label smoothing: the loss with its gradient, and each alone */
    for (int lone = 0; lone < 2; lone++) {
        g = ir_new();
        lo = ir_add_input(g, "logits", ir_shape2(6, 7), 0);
        lab = ir_add_input(g, "label", (ir_type){1, {6}, IR_I32}, 7);
        dl = ir_add_input(g, "dloss", ir_shape1(6), 0);
        l = N(SOFTMAX_CE, lo, lab), NULL, (double[]){0.1});
        if (!lone) one = N(ONES_LIKE, l), NULL, NULL);
        N(SOFTMAX_CE_GRAD, lo, lab, lone ? dl : one), NULL, (double[]){0.25});
        CHECK(run_both(g, NULL) == 0);
        ir_free(g);
    }
}

/* The sequence loss and its gradient: ignore = 2 drops about a quarter of
 * the targets (class indices in [0, 4)); a bad target makes the last
 * sequence NaN. */
TEST(seq_cross_entropy) {
    for (int bad = 0; bad < 2; bad++) {
        ir_graph *g = ir_new();
        int lo = ir_add_input(g, "logits", (ir_type){3, {5, 3, 4}, IR_F32}, 0);
        int lab = ir_add_input(g, bad ? "badlabel" : "label", (ir_type){2, {5, 3}, IR_I32}, 4);
        int dl = ir_add_input(g, "dloss", ir_shape1(5), 0);
        int64_t ig = bad ? -1 : 2;
        int l = N(SEQ_CE, lo, lab), &ig, NULL);
        int one = N(ONES_LIKE, l), NULL, NULL);
        N(SEQ_CE_GRAD, lo, lab, one), &ig, NULL);
        N(SEQ_CE_GRAD, lo, lab, dl), &ig, NULL);
        CHECK_MSG(run_both(g, NULL) == 0, "bad %d", bad);
        ir_free(g);
    }
}

/* Fused attention, its log-sum-exp and the three gradients against the
 * interpreter: 37 queries against 45 keys (neither a multiple of the
 * 32-key tile), 3 heads of 4; with and without the causal mask, and with
 * dropout (the mask bits must agree exactly, or whole weights differ). */
TEST(attention_ops) {
    for (int c = 0; c < 4; c++) {
        int causal = c & 1;
        double p = c & 2 ? 0.25 : 0;
        ir_graph *g = ir_new();
        int q = ir_add_input(g, "q", (ir_type){3, {2, 37, 12}, IR_F32}, 0);
        int k = ir_add_input(g, "k", (ir_type){3, {2, 45, 12}, IR_F32}, 0);
        int v = ir_add_input(g, "v", (ir_type){3, {2, 45, 12}, IR_F32}, 0);
        int dy = ir_add_input(g, "dy", (ir_type){3, {2, 37, 12}, IR_F32}, 0);
        int key = ir_add_input(g, "step", ir_shape1(4), 0); /* 3.0: key chunks of 3 */
        int in[7] = {dy, q, k, v, 0, 0, key};
        int o = p > 0 ? N(ATTENTION, q, k, v, key), IA(3, causal, 2), FA(0.6, p))
                      : N(ATTENTION, q, k, v), IA(3, causal, 2), FA(0.6, 0));
        int l = N(ATTENTION_LSE, q, k, v), IA(3, causal), FA(0.6));
        in[4] = o, in[5] = l;
        for (int w = 0; w < 3; w++)
            tg_node(g, IR_OP_ATTENTION_GRAD, in, p > 0 ? 7 : 6, IA(3, causal, 2, w), FA(0.6, p));
        CHECK_MSG(run_both(g, NULL) == 0, "causal %d p %g", causal, p);
        ir_free(g);
    }
}

static void bn_primitives(int rank4) {
    ir_graph *g = ir_new();
    ir_type xt = rank4 ? ir_shape4(3, 5, 3, 7) : ir_shape2(9, 5);
    int x = ir_add_input(g, "x", xt, 0);
    int dy = ir_add_input(g, "dy", xt, 0);
    int ga = ir_add_param(g, "gamma", ir_shape1(5), IR_INIT_ONE);
    int bt = ir_add_param(g, "beta", ir_shape1(5), IR_INIT_ZERO);
    int mean = N(BN_MEAN, x), NULL, NULL);
    int var = N(BN_VAR, x, mean), NULL, NULL);
    N(BN_APPLY, x, mean, var, ga, bt), NULL, FA(1e-5));
    int dg = N(BN_GRAD_GAMMA, dy, x, mean, var), NULL, FA(1e-5));
    int db = N(BIAS_GRAD, dy), NULL, NULL);
    N(BN_GRAD_DATA, dy, x, mean, var, ga, dg, db), NULL, FA(1e-5));
    /* and with independent statistics inputs */
    int m2 = ir_add_input(g, "m2", ir_shape1(5), 0);
    int v2 = ir_add_input(g, "pos_v2", ir_shape1(5), 0);
    N(BN_VAR, x, m2), NULL, NULL);
    N(BN_APPLY, x, m2, v2, ga, bt), NULL, FA(1e-3));
    N(BN_GRAD_DATA, dy, x, m2, v2, ga, m2, v2), NULL, FA(1e-3));
    CHECK_MSG(run_both(g, NULL) == 0, "rank4 %d", rank4);
    ir_free(g);
}

TEST(bn_primitive_ops) {
    bn_primitives(1);
    bn_primitives(0);
}

TEST(ema_assign_ones_relu_grad) {
    ir_graph *g = ir_new();
    int rm = ir_add_state(g, "running", ir_shape1(6), IR_INIT_ZERO);
    int v = ir_add_input(g, "value", ir_shape1(6), 0);
    int e = N(EMA, rm, v), NULL, FA(0.9, 1.25));
    N(ONES_LIKE, e), NULL, NULL);
    int dy = ir_add_input(g, "dy", ir_shape4(2, 3, 1, 5), 0);
    int y = ir_add_input(g, "y", ir_shape4(2, 3, 1, 5), 0);
    N(RELU_GRAD, dy, y), NULL, NULL);
    N(ASSIGN, rm, e), NULL, NULL);
    CHECK(run_both(g, NULL) == 0);
    ir_free(g);
}

TEST(sgd_momentum_update) {
    ir_graph *g = ir_new();
    int w = ir_add_param(g, "w", ir_shape4(4, 3, 3, 3), IR_INIT_XAVIER);
    int gr = ir_add_input(g, "grad", ir_shape4(4, 3, 3, 3), 0);
    int v = ir_add_state(g, "w.momentum", ir_shape4(4, 3, 3, 3), IR_INIT_ZERO);
    int lr = ir_add_input(g, "lr", ir_shape1(1), 0);
    int gs = ir_add_input(g, "grad_scale", ir_shape1(1), 0);
    int nv = N(SGD_MOMENTUM, w, gr, v, lr, gs), NULL, FA(0.9, 1e-4));
    int nw = N(ADD, w, nv), NULL, NULL);
    N(ASSIGN, v, nv), NULL, NULL);
    N(ASSIGN, w, nw), NULL, NULL);
    CHECK(run_both(g, NULL) == 0);
    ir_free(g);
}

/* The other optimizers' ops (lars, lamb), unfused, against the
 * interpreter: sumsq over a tensor of 36864 elements (many lanes; the
 * whole-tensor reduction), and the zero-norm branches (trust 1, r 1). */
TEST(optimizer_ops) {
    ir_graph *g = ir_new();
    ir_type big = ir_shape4(64, 64, 3, 3), small = ir_shape1(37);
    int w = ir_add_param(g, "w", big, IR_INIT_XAVIER);
    int gr = ir_add_input(g, "grad", big, 0);
    int v = ir_add_state(g, "w.momentum", big, IR_INIT_ZERO);
    int lr = ir_add_input(g, "poslr", ir_shape1(1), 0);
    int gs = ir_add_input(g, "posgs", ir_shape1(1), 0);
    int step = ir_add_input(g, "step", ir_shape1(1), 0);
    int wsq = N(SUMSQ, w), NULL, NULL);
    int gsq = N(SUMSQ, gr), NULL, NULL);
    int lrt = N(LARS_LR, wsq, gsq, lr, gs), NULL, FA(0.001, 1e-4, 1e-9));
    int nv = N(SGD_MOMENTUM, w, gr, v, lrt, gs), NULL, FA(0.9, 1e-4));
    int nw = N(ADD, w, nv), NULL, NULL);
    /* lamb on a [37] parameter */
    int b = ir_add_param(g, "b", small, IR_INIT_XAVIER);
    int bg = ir_add_input(g, "bgrad", small, 0);
    int m = ir_add_state(g, "b.adam_m", small, IR_INIT_ZERO);
    int pv = ir_add_state(g, "posv", small, IR_INIT_ZERO);
    int m2 = N(ADAM_M, m, bg, gs), NULL, FA(0.9));
    int v2 = N(ADAM_V, pv, bg, gs), NULL, FA(0.999));
    int c1 = N(BIAS_CORRECTION, step), NULL, FA(0.9));
    int c2 = N(BIAS_CORRECTION, step), NULL, FA(0.999));
    int u = N(ADAM_DIR, b, m2, v2, c1, c2), NULL, FA(1e-6, 0.01));
    int bsq = N(SUMSQ, b), NULL, NULL);
    int usq = N(SUMSQ, u), NULL, NULL);
    int lrr = N(LAMB_LR, bsq, usq, lr), NULL, NULL);
    int nb = N(DESCEND, b, u, lrr), NULL, NULL);
    /* zero norms: lr passes through */
    int z = ir_add_input(g, "zero", ir_shape1(5), 0);
    int zsq = N(SUMSQ, z), NULL, NULL);
    int zl = N(LARS_LR, zsq, gsq, lr, gs), NULL, FA(0.001, 1e-4, 1e-9));
    int zr = N(LAMB_LR, bsq, zsq, lr), NULL, NULL);
    N(ADD, zl, zr), NULL, NULL);
    N(ASSIGN, v, nv), NULL, NULL);
    N(ASSIGN, w, nw), NULL, NULL);
    N(ASSIGN, m, m2), NULL, NULL);
    N(ASSIGN, pv, v2), NULL, NULL);
    N(ASSIGN, b, nb), NULL, NULL);
    CHECK(run_both(g, NULL) == 0);
    ir_free(g);
}

/* cnn_small's training step with each optimizer as the frontend and the
 * default passes (fusion included) build it, against the interpreter; the
 * last with clip_grad_norm (its sumsqs, add chain and clip_scale). */
TEST(optimizer_training_steps_match_interpreter) {
    static const char *const specs[] = {"sgd(nesterov=true)", "lars(wd=0.0005)", "lamb(wd=0.01)",
                                        "adamw(wd=0.01)", "adamw(wd=0.01) clip_grad_norm 0.05"};
    size_t len;
    char *src = NULL;
    FILE *f = fopen("models/cnn_small.net", "rb");
    CHECK(f != NULL);
    if (!f) return;
    src = malloc(1 << 16);
    len = fread(src, 1, (1 << 16) - 1, f);
    fclose(f);
    src[len] = 0;
    char *at = strstr(src, "optimizer sgd(momentum=0.9, wd=0.0001)");
    CHECK(at != NULL);
    for (int k = 0; at && k < 5; k++) {
        char buf[1 << 16];
        snprintf(buf, sizeof buf, "%.*soptimizer %s%s", (int)(at - src), src, specs[k],
                 at + strlen("optimizer sgd(momentum=0.9, wd=0.0001)"));
        fe_program *fp = fe_parse_string("cnn_small.net", buf, strlen(buf));
        CHECK(fp != NULL);
        if (!fp) continue;
        ir_graph *g = fe_build_graph(fp, 4, 1);
        pass_options o = pass_default_options();
        CHECK(g && pass_run_train(&g, fe_train(fp), &o, err, sizeof err) == 0);
        if (g) CHECK(run_both(g, NULL) == 0);
        ir_free(g);
        fe_free(fp);
    }
    free(src);
}

/* A whole small training step: forward, backward, SGD and BN updates. */
static ir_graph *small_cnn(void) {
    ir_graph *g = ir_new();
    int x = ir_add_input(g, "image", ir_shape4(3, 3, 9, 9), 0);
    int lab = ir_add_input(g, "label", (ir_type){1, {3}, IR_I32}, 10);
    int lr = ir_add_input(g, "lr", ir_shape1(1), 0);
    int gs = ir_add_input(g, "grad_scale", ir_shape1(1), 0);
    int w1 = ir_add_param(g, "conv.weight", ir_shape4(4, 3, 3, 3), IR_INIT_XAVIER);
    int ga = ir_add_param(g, "bn.gamma", ir_shape1(4), IR_INIT_ONE);
    int bt = ir_add_param(g, "bn.beta", ir_shape1(4), IR_INIT_ZERO);
    int rm = ir_add_state(g, "bn.running_mean", ir_shape1(4), IR_INIT_ZERO);
    int w2 = ir_add_param(g, "fc.weight", ir_shape2(10, 4), IR_INIT_XAVIER);
    int b2 = ir_add_param(g, "fc.bias", ir_shape1(10), IR_INIT_ZERO);
    int v1 = ir_add_state(g, "conv.weight.momentum", ir_shape4(4, 3, 3, 3), IR_INIT_ZERO);
    int v2 = ir_add_state(g, "fc.weight.momentum", ir_shape2(10, 4), IR_INIT_ZERO);
    int c = N(CONV, x, w1), IA(3, 2, 1, 1), NULL);
    int mean = N(BN_MEAN, c), NULL, NULL);
    int var = N(BN_VAR, c, mean), NULL, NULL);
    int bn = N(BN_APPLY, c, mean, var, ga, bt), NULL, FA(1e-5));
    int r = N(RELU, bn), NULL, NULL);
    int mp = N(MAXPOOL, r), IA(3, 2, 1), NULL);
    int gp = N(GLOBAL_AVGPOOL, mp), NULL, NULL);
    int fc = N(DENSE, gp, w2), NULL, NULL);
    int lo = N(BIAS_ADD, fc, b2), NULL, NULL);
    int loss = N(SOFTMAX_CE, lo, lab), NULL, NULL);
    g->nodes[loss].flags |= IR_FLAG_LOSS;
    snprintf(g->nodes[loss].name, IR_NAME_MAX, "loss");
    int ema = N(EMA, rm, mean), NULL, FA(0.9, 1.0));
    int one = N(ONES_LIKE, loss), NULL, NULL);
    int dlo = N(SOFTMAX_CE_GRAD, lo, lab, one), NULL, NULL);
    N(BIAS_GRAD, dlo), NULL, NULL);
    int dw2 = N(DENSE_GRAD_WEIGHT, dlo, gp), NULL, NULL);
    int dgp = N(DENSE_GRAD_DATA, dlo, w2), NULL, NULL);
    int dmp = N(GLOBAL_AVGPOOL_GRAD, dgp), IA(3, 3), NULL);
    int dr = N(MAXPOOL_GRAD, dmp, r), IA(3, 2, 1), NULL);
    int dbn = N(RELU_GRAD, dr, r), NULL, NULL);
    int dg = N(BN_GRAD_GAMMA, dbn, c, mean, var), NULL, FA(1e-5));
    int db = N(BIAS_GRAD, dbn), NULL, NULL);
    int dc = N(BN_GRAD_DATA, dbn, c, mean, var, ga, dg, db), NULL, FA(1e-5));
    int dw1 = N(CONV_GRAD_WEIGHT, dc, x), IA(3, 2, 1, 1), NULL);
    N(CONV_GRAD_DATA, dc, w1), IA(3, 2, 1, 9, 9, 1), NULL);
    int nv1 = N(SGD_MOMENTUM, w1, dw1, v1, lr, gs), NULL, FA(0.9, 1e-4));
    int nw1 = N(ADD, w1, nv1), NULL, NULL);
    int nv2 = N(SGD_MOMENTUM, w2, dw2, v2, lr, gs), NULL, FA(0.9, 1e-4));
    int nw2 = N(ADD, w2, nv2), NULL, NULL);
    N(ASSIGN, v1, nv1), NULL, NULL);
    N(ASSIGN, w1, nw1), NULL, NULL);
    N(ASSIGN, v2, nv2), NULL, NULL);
    N(ASSIGN, w2, nw2), NULL, NULL);
    N(ASSIGN, rm, ema), NULL, NULL);
    return g;
}

TEST(multi_op_training_step) {
    ir_graph *g = small_cnn();
    CHECK(run_both(g, NULL) == 0);
    ir_free(g);
}

/* The real thing: ResNet-18 as the frontend and passes build its training
 * step (forward, backward, SGD, BatchNorm updates), batch 8, every node and
 * every updated parameter against the interpreter. Float rounding grows
 * through 20 layers, most of all through BatchNorm over M = batch values
 * per channel at 1x1, by as much as the order of summation changes it
 * (one CPU's OpenBLAS kernels ten times another's at batch 4): run_both's
 * floor, measured in the same run, follows it. */
TEST(resnet18_training_step_matches_interpreter) {
    fe_program *fp = fe_parse_file("models/resnet18.net");
    CHECK(fp != NULL);
    if (!fp) return;
    ir_graph *g = fe_build_graph(fp, 8, 1);
    pass_options o = pass_default_options();
    CHECK(g && pass_run_train(&g, fe_train(fp), &o, err, sizeof err) == 0);
    if (g) CHECK(run_both(g, NULL) == 0);
    ir_free(g);
    fe_free(fp);
}

/* A parsed test net through the default training passes at batch 4, and
 * how many nodes of each op it has; NULL (checked) when it fails. */
static ir_graph *trained_graph(fe_program *fp, int ops[IR_OP_COUNT]) {
    ir_graph *g = fe_build_graph(fp, 4, 1);
    pass_options o = pass_default_options();
    CHECK(g && pass_run_train(&g, fe_train(fp), &o, err, sizeof err) == 0);
    for (int i = 0; g && i < g->n; i++) ops[g->nodes[i].op]++;
    return g;
}

/* sigmoid, clip, relu6, mul (elementwise and per channel, both factor
 * shapes), grouped convolution (depthwise, grouped 1x1), concat and dropout through the
 * frontend and the default passes: the generated C kernels of a whole
 * training step against the interpreter. */
TEST(se_small_training_step_matches_interpreter) {
    fe_program *fp = fe_parse_file("tests/nets/se_small.net");
    CHECK(fp != NULL);
    if (!fp) return;
    int ops[IR_OP_COUNT] = {0};
    ir_graph *g = trained_graph(fp, ops);
    CHECK(ops[IR_OP_SIGMOID] == 3 && ops[IR_OP_SIGMOID_GRAD] == 3);
    CHECK(ops[IR_OP_CLIP] > 0 && ops[IR_OP_CLIP_GRAD] == ops[IR_OP_CLIP]);
    CHECK(ops[IR_OP_MUL_CHANNEL] >= 2 && ops[IR_OP_PLANE_DOT] == 2 && ops[IR_OP_MUL] >= 2);
    int grouped = 0;
    for (int i = 0; g && i < g->n; i++)
        grouped += (g->nodes[i].op == IR_OP_CONV || g->nodes[i].op == IR_OP_CONV_GRAD_DATA ||
                    g->nodes[i].op == IR_OP_CONV_GRAD_WEIGHT) &&
                   ir_conv_groups(&g->nodes[i]) > 1;
    CHECK(grouped == 6);
    CHECK(ops[IR_OP_CONCAT] == 1 && ops[IR_OP_CHANNEL_SLICE] == 2);
    CHECK(ops[IR_OP_DROPOUT] == 4); /* two forward, their two gradients */
    if (g) CHECK(run_both(g, NULL) == 0);
    ir_free(g);
    fe_free(fp);
}

/* layernorm, softmax, tanh and gelu in both forms (tests/nets/attn_small.net) through the
 * frontend and the default passes: the generated C kernels of a whole
 * training step against the interpreter. */
TEST(attn_small_training_step_matches_interpreter) {
    fe_program *fp = fe_parse_file("tests/nets/attn_small.net");
    CHECK(fp != NULL);
    if (!fp) return;
    int ops[IR_OP_COUNT] = {0};
    ir_graph *g = trained_graph(fp, ops);
    CHECK(ops[IR_OP_GELU] == 1 && ops[IR_OP_GELU_GRAD] == 1);
    CHECK(ops[IR_OP_GELU_TANH] == 1 && ops[IR_OP_GELU_TANH_GRAD] == 1);
    CHECK(ops[IR_OP_TANH] == 1 && ops[IR_OP_TANH_GRAD] == 1);
    CHECK(ops[IR_OP_LAYERNORM] == 2 && ops[IR_OP_LAYERNORM_GRAD_DATA] == 2);
    CHECK(ops[IR_OP_LAYERNORM_GRAD_GAMMA] == 2 && ops[IR_OP_SUM_LEADING] == 2);
    CHECK(ops[IR_OP_SOFTMAX] == 1 && ops[IR_OP_SOFTMAX_GRAD] == 1);
    if (g) CHECK(run_both(g, NULL) == 0);
    ir_free(g);
    fe_free(fp);
}

/* Learned positions and the class token (tests/nets/gpt_tiny.net: GPT-2's
 * input end, split, attention and the tied head; vit_tiny.net: patches,
 * class_token, positions, the class row read out) through the frontend
 * and the default passes: the generated C kernels of a whole training
 * step against the interpreter. */
TEST(gpt_vit_tiny_training_steps_match_interpreter) {
    static const char *const nets[2] = {"tests/nets/gpt_tiny.net", "tests/nets/vit_tiny.net"};
    for (int k = 0; k < 2; k++) {
        fe_program *fp = fe_parse_file(nets[k]);
        CHECK(fp != NULL);
        if (!fp) return;
        int ops[IR_OP_COUNT] = {0};
        ir_graph *g = trained_graph(fp, ops);
        /* gpt: positions; vit: class_token's and positions */
        CHECK(ops[IR_OP_POSITIONS] == k + 1 && ops[IR_OP_POSITIONS_GRAD] == k + 1);
        if (g) CHECK(run_both(g, NULL) == 0);
        ir_free(g);
        fe_free(fp);
    }
}

/* The language's constants, repeat and tensor arithmetic
 * (tests/nets/arith_small.net: sub, mul_const, add_const, mul) through the
 * frontend and the default passes: the generated C kernels of a whole
 * training step against the interpreter. */
TEST(arith_small_training_step_matches_interpreter) {
    fe_program *fp = fe_parse_file("tests/nets/arith_small.net");
    CHECK(fp != NULL);
    if (!fp) return;
    int ops[IR_OP_COUNT] = {0};
    ir_graph *g = trained_graph(fp, ops);
    CHECK(ops[IR_OP_SUB] >= 3 && ops[IR_OP_MUL_CONST] >= 6 && ops[IR_OP_ADD_CONST] >= 2);
    CHECK(ops[IR_OP_MUL] >= 1);
    if (g) CHECK(run_both(g, NULL) == 0);
    ir_free(g);
    fe_free(fp);
}

/* attention from primitives (tests/nets/shape_small.net): reshape, a
 * three-way split (whose gradient is one concat), permute and transpose
 * at rank 4, the causal mask, slice and concat along the last axis,
 * through the frontend and the default passes: the generated C kernels
 * of a whole training step against the interpreter. */
TEST(shape_small_training_step_matches_interpreter) {
    fe_program *fp = fe_parse_file("tests/nets/shape_small.net");
    CHECK(fp != NULL);
    if (!fp) return;
    int ops[IR_OP_COUNT] = {0};
    ir_graph *g = trained_graph(fp, ops);
    CHECK_MSG(ops[IR_OP_RESHAPE] == 7 && ops[IR_OP_PERMUTE] == 8, "reshape %d permute %d",
              ops[IR_OP_RESHAPE], ops[IR_OP_PERMUTE]);
    /* 3 split, 1 slice, the concat gradient 2; the split gradient one concat */
    CHECK_MSG(ops[IR_OP_SLICE] == 6 && ops[IR_OP_SLICE_GRAD] == 1, "slice %d slice_grad %d",
              ops[IR_OP_SLICE], ops[IR_OP_SLICE_GRAD]);
    CHECK(ops[IR_OP_CONCAT] == 2 && ops[IR_OP_CAUSAL_MASK] == 2);
    if (g) CHECK(run_both(g, NULL) == 0);
    ir_free(g);
    fe_free(fp);
}

/* The shape ops on convolution maps: permute, split along H, concat
 * along W, slice along H (test_layout runs the net with the layout pass
 * too). */
static const char conv_shapes_net[] =
    "input image[3, 16, 16]\n"
    "input label class(10)\n"
    "network cv {\n"
    "    x = relu(conv(image, 8, k=3, s=2, p=1))\n"
    "    x = permute(x, 0, 2, 3, 1)\n"
    "    a, b = split(x, 2, axis=1)\n"
    "    x = relu(conv(concat(b, a, axis=2), 8, k=3, p=1))\n"
    "    logits = dense(global_avgpool(slice(x, 1, -1, axis=-2)), 10)\n"
    "    loss = softmax_cross_entropy(logits, label)\n"
    "}\n";

TEST(shape_ops_on_conv_maps_match_interpreter) {
    fe_program *fp = fe_parse_string("cv.net", conv_shapes_net, sizeof conv_shapes_net - 1);
    CHECK(fp != NULL);
    if (!fp) return;
    int ops[IR_OP_COUNT] = {0};
    ir_graph *g = trained_graph(fp, ops);
    CHECK_MSG(ops[IR_OP_PERMUTE] == 2 && ops[IR_OP_CONCAT] == 2, "permute %d concat %d",
              ops[IR_OP_PERMUTE], ops[IR_OP_CONCAT]);
    if (g) CHECK(run_both(g, NULL) == 0);
    ir_free(g);
    fe_free(fp);
}

/* Fused attention through the frontend and the default passes
 * (tests/nets/attn_fused.net: causal with dropout, then unmasked with one
 * head, q = v): the generated C kernels of a whole training step against
 * the interpreter. */
TEST(attn_fused_training_step_matches_interpreter) {
    fe_program *fp = fe_parse_file("tests/nets/attn_fused.net");
    CHECK(fp != NULL);
    if (!fp) return;
    int ops[IR_OP_COUNT] = {0};
    ir_graph *g = trained_graph(fp, ops);
    CHECK(ops[IR_OP_ATTENTION] == 2 && ops[IR_OP_ATTENTION_LSE] == 2);
    CHECK(ops[IR_OP_ATTENTION_GRAD] == 6);
    if (g) CHECK(run_both(g, NULL) == 0);
    ir_free(g);
    fe_free(fp);
}

/* GPT-2's recipe (tests/nets/recipe_small.net): adamw with wd only on the
 * matrices, clip_grad_norm's sumsq per gradient and clip_scale, through the
 * frontend and the default passes, against the interpreter. */
TEST(recipe_small_training_step_matches_interpreter) {
    fe_program *fp = fe_parse_file("tests/nets/recipe_small.net");
    CHECK(fp != NULL);
    if (!fp) return;
    int ops[IR_OP_COUNT] = {0};
    ir_graph *g = trained_graph(fp, ops);
    CHECK(ops[IR_OP_CLIP_SCALE] == 1 && ops[IR_OP_SUMSQ] == 10 && ops[IR_OP_ADAM_DIR] == 10);
    if (g) CHECK(run_both(g, NULL) == 0);
    ir_free(g);
    fe_free(fp);
}

/* dense over the last axis of a [N, T, F] sequence (the GEMM's rows N·T)
 * with its bias along that axis, and matmul batched over the samples in
 * an attention-like block (T = F, as there is no transpose yet), through
 * the frontend and the default passes: the generated C kernels of a whole
 * training step against the interpreter. The image input as a float
 * sequence [N, 6, 6]. */
static const char seq_net[] = "input image[6, 6]\n"
                              "input label class(5)\n"
                              "network seq {\n"
                              "    h = gelu(dense(layernorm(image), 12))\n"
                              "    x = image + dense(h, 6)\n"
                              "    a = softmax(matmul(dense(x, 6), dense(x, 6, bias=false)))\n"
                              "    x = x + matmul(a, dense(tanh(x), 6))\n"
                              "    logits = dense(flatten(x), 5)\n"
                              "    loss = softmax_cross_entropy(logits, label)\n"
                              "}\n"
                              "train {\n"
                              "    optimizer sgd(momentum=0.9)\n"
                              "    lr {0: 0.05}\n"
                              "}\n";

TEST(sequence_training_step_matches_interpreter) {
    fe_program *fp = fe_parse_string("seq.net", seq_net, sizeof seq_net - 1);
    CHECK(fp != NULL);
    if (!fp) return;
    int ops[IR_OP_COUNT] = {0}, rank3 = 0;
    ir_graph *g = trained_graph(fp, ops);
    for (int i = 0; g && i < g->n; i++)
        rank3 += g->nodes[i].op == IR_OP_DENSE && g->nodes[i].type.ndim == 3;
    CHECK_MSG(rank3 == 5, "%d rank-3 dense", rank3);
    CHECK(ops[IR_OP_BIAS_ADD_LAST] == 4 && ops[IR_OP_BIAS_ADD] == 1);
    CHECK(ops[IR_OP_DENSE_GRAD_WEIGHT] == 6 && ops[IR_OP_SUM_LEADING] == 5);
    CHECK_MSG(ops[IR_OP_MATMUL] == 6, "%d matmul", ops[IR_OP_MATMUL]); /* 2 and 4 gradients */
    if (g) CHECK(run_both(g, NULL) == 0);
    ir_free(g);
    fe_free(fp);
}

/* GPT-2's tied head: dense(..., tie=e) reads embedding0.weight, the one
 * table (no dense weight; 10·4 + 4 + 4 parameters), its gradient the sum
 * of the embedding's scatter-add and the head's dense_grad_weight; a
 * training step's generated C against the interpreter. The ids are the
 * labels (no data fills an int sequence yet). */
static const char tied_net[] = "input image[3, 32, 32]\n"
                               "input label class(10)\n"
                               "network tied {\n"
                               "    e = embedding(label, 10, 4)\n"
                               "    logits = dense(layernorm(e), 10, bias=false, tie=e)\n"
                               "    loss = softmax_cross_entropy(logits, label)\n"
                               "}\n"
                               "train {\n"
                               "    optimizer adamw(wd=0.1, exclude=(bias, norm))\n"
                               "    lr {0: 0.01}\n"
                               "}\n";

TEST(tied_head_training_step_matches_interpreter) {
    fe_program *fp =
        fe_parse_string_err("tied.net", tied_net, sizeof tied_net - 1, err, sizeof err);
    CHECK_MSG(fp != NULL, "%s", err);
    if (!fp) return;
    ir_graph *g0 = fe_build_graph(fp, 3, 1);
    CHECK(g0 && ir_num_params(g0) == 10 * 4 + 4 + 4);
    ir_free(g0);
    int ops[IR_OP_COUNT] = {0};
    ir_graph *g = trained_graph(fp, ops);
    CHECK(ops[IR_OP_PARAM] == 3 && ops[IR_OP_ADAM_DIR] == 3);
    CHECK(ops[IR_OP_EMBEDDING_GRAD] == 1 && ops[IR_OP_DENSE_GRAD_WEIGHT] == 1);
    if (g) CHECK(run_both(g, NULL) == 0);
    ir_free(g);
    fe_free(fp);
}

/* --conv dense: the convolutions on 2x2 and 1x1 planes as one GEMM over
 * unrolled weights (codegen/gemm.c lower_conv_dense), forward and both
 * gradients, every node and parameter against the float64 interpreter: in
 * a net of convolutions alone, and in small_planes.net, with BatchNorm over
 * the batch's 4 values per channel at 1x1, which magnifies any change in
 * the order of summation (run_both's measured floor; a transposed tap is
 * off by O(1)). */
static const char planes_net[] = "input image[3, 2, 2]\n"
                                 "input label class(10)\n"
                                 "network planes {\n"
                                 "    x = relu(conv(image, 8, k=3, p=1, bias=false))\n"
                                 "    x = relu(conv(x, 8, k=3, p=1, bias=false))\n"
                                 "    x = relu(conv(x, 12, k=3, s=2, p=1, bias=false))\n"
                                 "    x = relu(conv(x, 12, k=3, p=1))\n"
                                 "    logits = dense(global_avgpool(conv(x, 10, k=1)), 10)\n"
                                 "    loss = softmax_cross_entropy(logits, label)\n"
                                 "}\n"
                                 "train {\n"
                                 "    optimizer sgd(momentum=0.9)\n"
                                 "    lr {0: 0.05}\n"
                                 "    data cifar10 { random_crop 2 }\n"
                                 "}\n";

static void dense_against_interpreter(fe_program *fp, int batch, int want) {
    ir_graph *g = fe_build_graph(fp, batch, 1);
    pass_options o = pass_default_options();
    o.conv = PASS_CONV_DENSE;
    CHECK(g && pass_run_train(&g, fe_train(fp), &o, err, sizeof err) == 0);
    int dense[3] = {0};
    for (int i = 0; g && i < g->n; i++)
        if (g->nodes[i].flags & IR_FLAG_CONV_DENSE) {
            int op = g->nodes[i].op;
            dense[op == IR_OP_CONV ? 0 : op == IR_OP_CONV_GRAD_DATA ? 1 : 2]++;
            CHECK(!(g->nodes[i].flags & IR_FLAG_CONV_LIB)); /* dense: no library */
        }
    /* the first convolution reads the image: no data gradient */
    int first_reads_image = dense[1] == want - 1;
    CHECK_MSG(dense[0] == want && (dense[1] == want || first_reads_image) && dense[2] == want,
              "dense: %d forward, %d data, %d weights", dense[0], dense[1], dense[2]);
    if (g) CHECK(run_both(g, NULL) == 0);
    ir_free(g);
}

TEST(dense_convolutions_match_interpreter) {
    fe_program *fp = fe_parse_string("planes.net", planes_net, sizeof planes_net - 1);
    CHECK(fp != NULL);
    if (fp) dense_against_interpreter(fp, 3, 5);
    fe_free(fp);
    fp = fe_parse_file("tests/nets/small_planes.net");
    CHECK(fp != NULL);
    if (fp) dense_against_interpreter(fp, 4, 5);
    fe_free(fp);
}

/* The store's order, initialisers, names; exec reads params by name. */
TEST(store_and_exec_api) {
    ir_graph *g = small_cnn();
    rt_store *st = rt_store_new(be, g);
    CHECK(rt_store_count(st) == 8);
    CHECK_STR(rt_store_name(st, 0), "conv.weight");
    CHECK_STR(rt_store_name(st, 5), "fc.bias");
    CHECK_STR(rt_store_name(st, 6), "conv.weight.momentum"); /* optimizer state last */
    CHECK_STR(rt_store_name(st, 7), "fc.weight.momentum");
    CHECK(rt_store_find(st, "bn.running_mean") == 3);
    CHECK(rt_store_find(st, "nope") == -1);
    ir_train t;
    ir_train_defaults(&t);
    rt_store_init(st, g, &t, 42);
    float w[108], w_again[108], gamma[4], beta[4];
    rt_store_read(st, 0, w);
    rt_store_read(st, 1, gamma);
    rt_store_read(st, 2, beta);
    /* conv.weight [4,3,3,3]: fan_in 27, fan_out 36 */
    double scale = sqrt(2.24 / ((27.0 + 36.0) / 2)), sum = 0, sq = 0;
    int inside = 1;
    for (int i = 0; i < 108; i++) {
        inside &= fabs(w[i]) <= scale * (1 + 4 * F32_U); /* scale and the sample rounded to f32 */
        sum += w[i];
        sq += w[i] * w[i];
    }
    CHECK(inside);
    /* uniform on [-scale, scale]: the mean of 108 within 6 standard errors
     * (scale / sqrt(3 * 108)), the mean square within 4 (0.086 of it) */
    CHECK(fabs(sum / 108) < 0.35 * scale);
    CHECK(fabs(sq / 108 - scale * scale / 3) < 0.35 * scale * scale / 3);
    CHECK(gamma[0] == 1 && gamma[3] == 1 && beta[0] == 0 && beta[3] == 0);
    rt_store_init(st, g, &t, 42);
    rt_store_read(st, 0, w_again);
    CHECK(memcmp(w, w_again, sizeof w) == 0);
    rt_store_init(st, g, &t, 43);
    rt_store_read(st, 0, w_again);
    CHECK(memcmp(w, w_again, sizeof w) != 0);

    rt_exec *ex = rt_exec_new(be, st, g, NULL, err, sizeof err);
    CHECK(ex != NULL);
    if (ex) {
        float img[3 * 3 * 81] = {0}, loss[3], lr = 0;
        int32_t lab[3] = {1, 2, 3};
        CHECK(rt_exec_set_input(ex, "image", img, sizeof img) == 0);
        CHECK(rt_exec_set_input(ex, "image", img, sizeof img - 4) == -1);
        CHECK(rt_exec_set_input(ex, "nope", img, sizeof img) == -1);
        CHECK(rt_exec_set_input(ex, "label", lab, sizeof lab) == 0);
        CHECK(rt_exec_set_scalar(ex, "lr", 0.0f) == 0);
        CHECK(rt_exec_set_scalar(ex, "image", 0.0f) == -1);
        CHECK(rt_exec_set_scalar(ex, "grad_scale", 1.0f / 3) == 0);
        CHECK(rt_exec_run(ex, err, sizeof err) == 0);
        CHECK(rt_exec_get(ex, "loss", loss, sizeof loss) == 0);
        /* zero image, zero bias: every logit is 0, the loss log(10), the sum
         * of exp(0) exact: log within an ulp (2 * 2^-24) and one rounding */
        for (int i = 0; i < 3; i++) CHECK_NEAR(loss[i], log(10.0), 4 * F32_U * log(10.0));
        CHECK(rt_exec_get(ex, "lr", &lr, sizeof lr) == 0);
        CHECK(rt_exec_get(ex, "loss", loss, sizeof loss - 1) == -1);
        CHECK(rt_exec_get(ex, "missing", loss, sizeof loss) == -1);
        float w_after[108];
        CHECK(rt_exec_get(ex, "conv.weight", w_after, sizeof w_after) == 0);
        /* lr 0 with zero momentum: the weights did not move */
        CHECK(memcmp(w_after, w_again, sizeof w_after) == 0);
    }
    rt_exec_free(ex);
    /* an eval-like graph that names a param the store lacks is refused */
    ir_graph *h = ir_new();
    int x = ir_add_input(h, "x", ir_shape2(2, 3), 0);
    int q = ir_add_param(h, "other", ir_shape1(3), IR_INIT_ZERO);
    ir_add_node(h, IR_OP_BIAS_ADD, (int[]){x, q}, 2, NULL, NULL, err, sizeof err);
    CHECK(rt_exec_new(be, st, h, NULL, err, sizeof err) == NULL);
    CHECK(strstr(err, "other") != NULL);
    ir_free(h);
    rt_store_free(st);
    ir_free(g);
}

TEST(rng_is_deterministic) {
    rt_rng a, b;
    rt_rng_seed(&a, 7);
    rt_rng_seed(&b, 7);
    int same = 1, inrange = 1;
    for (int i = 0; i < 1000; i++) {
        float u = rt_rng_uniform(&a);
        same &= u == rt_rng_uniform(&b);
        inrange &= u >= 0 && u < 1;
        inrange &= rt_rng_below(&a, 7) < 7;
        rt_rng_below(&b, 7);
    }
    CHECK(same && inrange);
    rt_rng_seed(&b, 8);
    CHECK(rt_rng_next(&a) != rt_rng_next(&b));
}

/* ---- the compile cache -------------------------------------------------------------- */

static char unique_src[256];

/* The module for unique_src through a cache of its own: 1 when it loads
 * and its probe returns 7. */
static int load_unique(int *hit) {
    char e[2048], *so = NULL;
    rt_cache c;
    void *h = rt_cache_open(&c, e, sizeof e)
                  ? NULL
                  : rt_cache_load_c(&c, unique_src, RTLD_NOW | RTLD_LOCAL, hit, &so, e, sizeof e);
    rt_cache_close(&c);
    int (*probe)(void) = h ? (int (*)(void))dlsym(h, "dpc_probe") : NULL;
    int ok = probe && probe() == 7;
    if (!h) fprintf(stderr, "  %s\n", e);
    if (h) dlclose(h);
    free(so);
    return ok;
}

static void *compile_unique(void *arg) {
    int *ok = arg, hit;
    *ok = load_unique(&hit);
    return NULL;
}

/* The cpu backend's thread pool: a kernel split across the pool computes
 * every iteration exactly once, GEMMs split into blocks equal one call, and
 * two threads launching at once (replicas) both get whole, right results
 * (the second runs alone while the pool is busy). */
typedef struct {
    rt_kernel *k;
    int ok;
} pool_arg;

static void *launch_many(void *arg) {
    pool_arg *a = arg;
    enum { N = 100003 };
    float *out = calloc(N, sizeof *out);
    a->ok = 1;
    for (int rep = 0; rep < 200 && a->ok; rep++) {
        for (int i = 0; i < N; i++) out[i] = (float)(rep - 1);
        void *args[] = {out};
        char e[256];
        if (be->launch(be, a->k, args, 1, N, NULL, e, sizeof e)) a->ok = 0;
        for (int i = 0; i < N && a->ok; i++) /* each iteration ran once: += i + 1 */
            if (out[i] != (float)(i + rep)) a->ok = 0;
    }
    free(out);
    return NULL;
}

TEST(thread_pool_splits_kernels_and_gemms) {
    const char *src = "typedef long long idx_t;\n"
                      "const idx_t pool_probe_grain = 1000;\n"
                      "void pool_probe(void *const *arg, idx_t count, idx_t lo, idx_t hi) {\n"
                      "    float *b0 = (float *)arg[0];\n"
                      "    (void)count;\n"
                      "    for (idx_t i = lo; i < hi; i++) b0[i] += (float)i + 1.0f;\n"
                      "}\n";
    rt_module *m = be->compile(be, src, err, sizeof err);
    CHECK_MSG(m != NULL, "%s", err);
    if (!m) return;
    rt_kernel *k = be->kernel(be, m, "pool_probe", 1, err, sizeof err);
    CHECK(k != NULL);
    pool_arg a[2] = {{k, 0}, {k, 0}};
    pthread_t th[2];
    for (int i = 0; i < 2; i++) pthread_create(&th[i], NULL, launch_many, &a[i]);
    for (int i = 0; i < 2; i++) pthread_join(th[i], NULL);
    CHECK(a[0].ok && a[1].ok);
    /* a module without the grain symbol is refused with a message */
    rt_module *m2 = be->compile(be, "void lonely(void) {}\n", err, sizeof err);
    CHECK(m2 && be->kernel(be, m2, "lonely", 1, err, sizeof err) == NULL &&
          strstr(err, "lonely_grain"));
    if (m2) be->module_free(be, m2);
    be->module_free(be, m);
    /* GEMM blocks: split along m (m >= n) and along n, against one call */
    int shapes[2][3] = {{300, 70, 50}, {40, 333, 90}};
    for (int t = 0; t < 2; t++) {
        int M = shapes[t][0], Nn = shapes[t][1], K = shapes[t][2];
        cg_gemm d = {.transa = t,
                     .transb = 1 - t,
                     .m = M,
                     .n = Nn,
                     .k = K,
                     .alpha = 1,
                     .beta = 0,
                     .lda = t ? K : M,
                     .ldb = t ? K : Nn,
                     .ldc = M,
                     .batch = 1};
        float *A = malloc(sizeof(float) * (size_t)M * K),
              *B = malloc(sizeof(float) * (size_t)K * Nn);
        float *C = calloc((size_t)M * Nn, sizeof(float));
        double *R = calloc((size_t)M * Nn, sizeof(double));
        for (int i = 0; i < M * K; i++) A[i] = (float)((i * 7) % 13) - 6.0f;
        for (int i = 0; i < K * Nn; i++) B[i] = (float)((i * 5) % 11) - 5.0f;
        CHECK(be->gemm(be, &d, A, B, C, err, sizeof err) == 0);
        for (int i = 0; i < M; i++)
            for (int j = 0; j < Nn; j++)
                for (int q = 0; q < K; q++) {
                    double av = t ? A[q + (size_t)i * K] : A[i + (size_t)q * M];
                    double bv = t ? B[q + (size_t)j * K] : B[j + (size_t)q * Nn];
                    R[i + (size_t)j * M] += av * bv;
                }
        int bad = 0;
        for (int i = 0; i < M * Nn; i++) bad += C[i] != (float)R[i]; /* small integers: exact */
        CHECK_MSG(bad == 0, "gemm shape %d: %d wrong", t, bad);
        free(A), free(B), free(C), free(R);
    }
}

/* The split-k sum order (rt_cpu_set_sum_order) computes the same product:
 * exact on small integers for every transpose and with beta accumulating;
 * on fractions it rounds differently from the default order (else it would
 * measure no floor), within the bound of any f32 dot product of length k,
 * k * 2^-24 * sum |a b| per element (Higham, the recursive summation bound),
 * and doubled for the two orders. */
/* A backend whose captures the driver refuses (cuStreamBeginCapture
 * failing; the cpu backend cannot hold calls back, so a refusal at the
 * capture's end, after calls the cpu would have run, is not shown here):
 * the exec runs the step eagerly instead, gives up on graphs, and the steps
 * compute what a run without graphs computes, bit for bit. */
static int refused_begins;
static int refuse_begin(rt_backend *b, char *e, size_t n) {
    (void)b;
    refused_begins++;
    return base_fail(e, n, "operation not permitted when stream is capturing");
}
static rt_graph *refuse_end(rt_backend *b, char *e, size_t n) {
    (void)b;
    base_fail(e, n, "no capture under way");
    return NULL;
}
static int refuse_launch(rt_backend *b, rt_graph *g, char *e, size_t n) {
    (void)b, (void)g;
    return base_fail(e, n, "no graph was ever recorded");
}
static void refuse_free(rt_backend *b, rt_graph *g) { (void)b, (void)g; }

TEST(refused_capture_runs_eagerly) {
    ir_graph *g = small_cnn();
    rt_backend *fb = rt_backend_cpu();
    fb->graph_begin = refuse_begin, fb->graph_end = refuse_end;
    fb->graph_launch = refuse_launch, fb->graph_free = refuse_free;
    ir_train t;
    ir_train_defaults(&t);
    float w[2][108];
    for (int k = 0; k < 2; k++) {
        rt_store *st = rt_store_new(fb, g);
        rt_store_init(st, g, &t, 7);
        rt_exec *ex = rt_exec_new(fb, st, g, NULL, err, sizeof err);
        CHECK(ex != NULL);
        if (!ex) break;
        CHECK(rt_exec_use_graphs(ex, k) == k);
        rt_rng r;
        rt_rng_seed(&r, 3);
        for (int step = 0; step < 3; step++) {
            float img[3 * 3 * 81];
            int32_t lab[3] = {1, 2, 3};
            for (int i = 0; i < 3 * 3 * 81; i++) img[i] = rt_rng_uniform_range(&r, -1, 1);
            CHECK(rt_exec_set_input(ex, "image", img, sizeof img) == 0);
            CHECK(rt_exec_set_input(ex, "label", lab, sizeof lab) == 0);
            CHECK(rt_exec_set_scalar(ex, "lr", 0.1f) == 0);
            CHECK(rt_exec_set_scalar(ex, "grad_scale", 1.0f / 3) == 0);
            CHECK_MSG(rt_exec_run(ex, err, sizeof err) == 0, "step %d: %s", step, err);
            int64_t calls, launches;
            rt_exec_launches(ex, &calls, &launches);
            CHECK(launches == 0 && calls > 0);
        }
        CHECK(rt_exec_get(ex, "conv.weight", w[k], sizeof w[k]) == 0);
        rt_exec_free(ex);
        rt_store_free(st);
    }
    /* run 1 eager, run 2 tried to record (once), runs 2 and 3 eager */
    CHECK(refused_begins == 1);
    double d = 0;
    for (int i = 0; i < 108; i++) d = fmax(d, fabs((double)w[0][i] - w[1][i]));
    CHECK_MSG(d == 0, "max |diff| %g", d);
    rt_backend_free(fb);
    ir_free(g);
}

/* A device failure is kept by the backend's wrappers (device.h): the copy
 * that failed returns its message, and every later device call of that
 * backend (the executor's run, the store's reads, an allocation) fails at
 * once with the same first message; a call failing while a graph is being
 * captured is the capture's and is not kept. */
static int copies_left; /* copy hooks succeed this many more times */
static int failing_copy(rt_backend *b, void *dst, const void *src, size_t bytes, char *e,
                        size_t n) {
    (void)b;
    if (copies_left-- > 0) {
        if (bytes) memmove(dst, src, bytes);
        return 0;
    }
    return base_fail(e, n, "fake: copy failed on device 0");
}
static int accept_begin(rt_backend *b, char *e, size_t n) {
    (void)b, (void)e, (void)n;
    return 0;
}

TEST(device_failure_is_kept) {
    ir_graph *g = small_cnn();
    rt_backend *fb = rt_backend_cpu();
    ir_train t;
    ir_train_defaults(&t);
    rt_store *st = rt_store_new(fb, g);
    CHECK(rt_store_init(st, g, &t, 7) == 0);
    rt_exec *ex = rt_exec_new(fb, st, g, NULL, err, sizeof err);
    CHECK_MSG(ex != NULL, "%s", err);
    if (!ex) return;
    float img[3 * 3 * 81] = {0};
    int32_t lab[3] = {1, 2, 3};
    CHECK(rt_exec_set_input(ex, "image", img, sizeof img) == 0);
    CHECK(rt_exec_failed(ex, err, sizeof err) == 0);
    copies_left = 1;
    fb->copy_in = failing_copy;
    CHECK(rt_exec_set_input(ex, "label", lab, sizeof lab) == 0); /* the one left */
    CHECK(rt_exec_set_input(ex, "image", img, sizeof img) == -1);
    CHECK_MSG(rt_exec_failed(ex, err, sizeof err) == -1 &&
                  !strcmp(err, "fake: copy failed on device 0"),
              "%s", err);
    fb->copy_in = fb->copy; /* the device "works" again: the failure stays */
    CHECK(rt_exec_set_input(ex, "image", img, sizeof img) == -1);
    err[0] = 0;
    CHECK(rt_exec_run(ex, err, sizeof err) == -1 && strstr(err, "fake: copy failed on device 0"));
    float w[108];
    CHECK(rt_store_read(st, rt_store_find(st, "conv.weight"), w) == -1);
    char small[12]; /* a caller's short buffer truncates its copy, not the kept message */
    CHECK(rt_backend_alloc(fb, 64, small, sizeof small) == NULL &&
          !strncmp(small, "fake: copy", 10));
    CHECK(rt_store_failed(st, err, sizeof err) == -1 &&
          !strcmp(err, "fake: copy failed on device 0"));
    rt_exec_free(ex); /* teardown still frees */
    rt_store_free(st);
    rt_backend_free(fb);

    /* While capturing: returned, not kept; after it, kept. */
    fb = rt_backend_cpu();
    fb->graph_begin = accept_begin, fb->graph_end = refuse_end;
    fb->graph_launch = refuse_launch, fb->graph_free = refuse_free;
    fb->copy = failing_copy;
    copies_left = 0;
    float a = 1, b2 = 0;
    CHECK(rt_backend_graph_begin(fb, err, sizeof err) == 0);
    CHECK(rt_backend_copy(fb, &b2, &a, sizeof a, err, sizeof err) == -1);
    CHECK(rt_backend_graph_end(fb, err, sizeof err) == NULL);
    CHECK(rt_backend_failed(fb, err, sizeof err) == 0);
    CHECK(rt_backend_copy(fb, &b2, &a, sizeof a, NULL, 0) == -1);
    CHECK(rt_backend_failed(fb, err, sizeof err) == -1 && strstr(err, "copy failed"));
    rt_backend_free(fb);
    ir_free(g);
}

/* FTZ/DAZ (rt_cpu_flush_denormals, dprun's default): a product below the
 * smallest normal (1e-20² = 1e-40 < 2^-126) is 0 (FTZ), and a denormal
 * operand reads as 0 (DAZ: d·1 is exact, so FTZ alone keeps it), in every
 * part of a split kernel: those the pool's workers ran (told by
 * pthread_self) as well as the caller's. Turned off, both are IEEE's. */
TEST(denormals_flush_in_pool_workers) {
    const char *src = "#include <pthread.h>\n"
                      "typedef long long idx_t;\n"
                      "const idx_t ftz_probe_grain = 1;\n"
                      "void ftz_probe(void *const *arg, idx_t count, idx_t lo, idx_t hi) {\n"
                      "    const float *x = (const float *)arg[0], *one = (const float *)arg[1];\n"
                      "    float *y = (float *)arg[2];\n"
                      "    unsigned long *who = (unsigned long *)arg[3];\n"
                      "    for (idx_t i = lo; i < hi; i++) {\n"
                      "        for (volatile int k = 0; k < 20000; k++) {} /* let workers in */\n"
                      "        y[i] = x[i] * x[i];\n"
                      "        y[count + i] = x[count + i] * one[i];\n"
                      "        who[i] = (unsigned long)pthread_self();\n"
                      "    }\n"
                      "}\n";
    rt_module *m = be->compile(be, src, err, sizeof err);
    CHECK_MSG(m != NULL, "%s", err);
    if (!m) return;
    rt_kernel *k = be->kernel(be, m, "ftz_probe", 4, err, sizeof err);
    CHECK_MSG(k != NULL, "%s", err);
    enum { N = 64 };
    float x[2 * N], one[N], y[2 * N];
    unsigned long who[N];
    for (int i = 0; i < N; i++) x[i] = 1e-20f, x[N + i] = 1e-40f, one[i] = 1;
    CHECK(x[N] != 0); /* the denormal operand itself exists */
    void *args[] = {x, one, y, who};
    for (int on = 1; k && on >= 0; on--) {
        rt_cpu_flush_denormals(on);
        int by_worker = 0;
        for (int rep = 0; rep < 50 && !by_worker; rep++) { /* until a worker ran a part */
            CHECK(be->launch(be, k, args, 4, N, NULL, err, sizeof err) == 0);
            for (int i = 0; i < N; i++) by_worker |= who[i] != (unsigned long)pthread_self();
            for (int i = 0; i < N; i++)
                CHECK_MSG(on ? y[i] == 0 && y[N + i] == 0 : y[i] > 0 && y[N + i] == x[N],
                          "ftz %d, iteration %d: %g %g", on, i, y[i], y[N + i]);
        }
        CHECK(by_worker || rt_cpu_threads() == 1);
    }
    be->module_free(be, m);
}

TEST(split_k_sum_order_is_the_same_product) {
    int M = 37, N = 29, K = 301;
    float *A = malloc(sizeof(float) * (size_t)M * K), *B = malloc(sizeof(float) * (size_t)K * N);
    float *C[2] = {malloc(sizeof(float) * (size_t)M * N), malloc(sizeof(float) * (size_t)M * N)};
    double *bound = calloc((size_t)M * N, sizeof(double));
    for (int frac = 0; frac < 2; frac++)
        for (int t = 0; t < 4; t++) {
            int ta = t & 1, tb = t >> 1;
            cg_gemm d = {.transa = ta,
                         .transb = tb,
                         .m = M,
                         .n = N,
                         .k = K,
                         .alpha = 1,
                         .beta = 0.5f,
                         .lda = ta ? K : M,
                         .ldb = tb ? N : K,
                         .ldc = M,
                         .batch = 1};
            uint64_t s = 12345;
            for (int i = 0; i < M * K; i++)
                A[i] = frac ? (float)((s = s * 6364136223846793005ull + 1) >> 40) / (1 << 24) - 0.5f
                            : (float)((i * 7) % 13) - 6.0f;
            for (int i = 0; i < K * N; i++)
                B[i] = frac ? (float)((s = s * 6364136223846793005ull + 1) >> 40) / (1 << 24) - 0.5f
                            : (float)((i * 5) % 11) - 5.0f;
            for (int o = 0; o < 2; o++) {
                for (int i = 0; i < M * N; i++) C[o][i] = (float)(i % 3);
                rt_sum_order was =
                    rt_cpu_set_sum_order(o ? RT_SUM_ORDER_SPLIT_K : RT_SUM_ORDER_DEFAULT);
                CHECK(be->gemm(be, &d, A, B, C[o], err, sizeof err) == 0);
                rt_cpu_set_sum_order(was);
            }
            for (int i = 0; i < M; i++)
                for (int j = 0; j < N; j++) {
                    double b = 0;
                    for (int q = 0; q < K; q++)
                        b += fabs((double)A[ta ? q + (size_t)i * K : i + (size_t)q * M] *
                                  B[tb ? j + (size_t)q * N : q + (size_t)j * K]);
                    bound[i + (size_t)j * M] = 2.0 * F32_SUM_BOUND(K, b + 1);
                }
            int differ = 0, over = 0;
            for (int i = 0; i < M * N; i++) {
                differ += C[0][i] != C[1][i];
                over += fabs((double)C[0][i] - C[1][i]) > bound[i];
            }
            CHECK_MSG(frac ? differ > 0 && over == 0 : differ == 0,
                      "transposes %d%d, %s: %d differ, %d over the bound", ta, tb,
                      frac ? "fractions" : "integers", differ, over);
        }
    free(A), free(B), free(C[0]), free(C[1]), free(bound);
}

TEST(compile_cache_hits_and_races) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    snprintf(unique_src, sizeof unique_src,
             "/* %ld.%09ld %ld */ int dpc_probe(void) { return 7; }\n", (long)ts.tv_sec, ts.tv_nsec,
             (long)getpid());
    pthread_t th[3];
    int ok[3] = {0};
    for (int i = 0; i < 3; i++) pthread_create(&th[i], NULL, compile_unique, &ok[i]);
    for (int i = 0; i < 3; i++) pthread_join(th[i], NULL);
    CHECK(ok[0] && ok[1] && ok[2]);
    int hit = 0;
    CHECK(load_unique(&hit) && hit == 1);
}

TEST(compile_error_names_the_source) {
    rt_module *m = be->compile(be, "this is not C;\n", err, sizeof err);
    CHECK(m == NULL);
    char *c = strstr(err, "compiling ");
    CHECK(c != NULL);
    if (c) {
        char path[4096];
        sscanf(c + 10, "%4095s", path);
        CHECK(strstr(path, ".c") != NULL);
        CHECK(access(path, R_OK) == 0); /* kept for the user to look at */
    }
}

int main(void) {
    be = rt_backend_cpu();
    RUN(conv_ops);
    RUN(conv_chunked_via_plan_section);
    RUN(dense_ops);
    RUN(resnet18_gemm_shapes);
    RUN(bias_add_relu_add);
    RUN(scaled_init_spread);
    RUN(positions_ops);
    RUN(embedding_ops);
    RUN(seq_cross_entropy);
    RUN(attention_ops);
    RUN(normal_init);
    RUN(train_section_init_kinds);
    RUN(batchnorm_op);
    RUN(pooling);
    RUN(maxpool_ties);
    RUN(global_avgpool_flatten_reshape);
    RUN(softmax_cross_entropy);
    RUN(bn_primitive_ops);
    RUN(ema_assign_ones_relu_grad);
    RUN(sgd_momentum_update);
    RUN(optimizer_ops);
    RUN(optimizer_training_steps_match_interpreter);
    RUN(multi_op_training_step);
    RUN_TIER("test", resnet18_training_step_matches_interpreter);
    RUN(se_small_training_step_matches_interpreter);
    RUN(attn_small_training_step_matches_interpreter);
    RUN(gpt_vit_tiny_training_steps_match_interpreter);
    RUN(recipe_small_training_step_matches_interpreter);
    RUN(arith_small_training_step_matches_interpreter);
    RUN(shape_small_training_step_matches_interpreter);
    RUN(shape_ops_on_conv_maps_match_interpreter);
    RUN(sequence_training_step_matches_interpreter);
    RUN(tied_head_training_step_matches_interpreter);
    RUN(attn_fused_training_step_matches_interpreter);
    RUN(dense_convolutions_match_interpreter);
    RUN(store_and_exec_api);
    RUN(rng_is_deterministic);
    RUN(thread_pool_splits_kernels_and_gemms);
    RUN(denormals_flush_in_pool_workers);
    RUN(split_k_sum_order_is_the_same_product);
    RUN(refused_capture_runs_eagerly);
    RUN(device_failure_is_kept);
    RUN(compile_cache_hits_and_races);
    RUN(compile_error_names_the_source);
    rt_backend_free(be);
    return harness_done();
}
