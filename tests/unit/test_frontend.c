/* Tests for frontend/: the models, parameter naming, modes, the train
 * section, diagnostics (captured from stderr) and robustness against
 * truncated and mutated sources. Run from the repository root. */
#include <dirent.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "frontend/frontend.h"
#include "ir/ir.h"
#include "tests/harness.h"

/* ---- helpers ----------------------------------------------------------- */

static char errbuf[4096];

/* Diagnostics go to stderr; tests send them to errbuf to check them. */
static int saved_fd = -1;
static FILE *capture_file;

static void capture_begin(void) {
    fflush(stderr);
    saved_fd = dup(2);
    capture_file = tmpfile();
    dup2(fileno(capture_file), 2);
}

static void capture_end(void) {
    fflush(stderr);
    dup2(saved_fd, 2);
    close(saved_fd);
    rewind(capture_file);
    size_t n = fread(errbuf, 1, sizeof errbuf - 1, capture_file);
    errbuf[n] = 0;
    fclose(capture_file);
}

#define CAPTURE(lhs, expr) \
    do {                   \
        capture_begin();   \
        lhs = (expr);      \
        capture_end();     \
    } while (0)

static fe_program *parse(const char *src) {
    fe_program *p;
    CAPTURE(p, fe_parse_string("t.net", src, strlen(src)));
    return p;
}

static char *read_file(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *buf = malloc((size_t)n + 1);
    *len = fread(buf, 1, (size_t)n, f);
    buf[*len] = 0;
    fclose(f);
    return buf;
}

static int count_sources(const ir_graph *g) {
    int n = 0;
    for (int i = 0; i < g->n; i++) n += ir_is_persistent(g->nodes[i].op);
    return n;
}

/* Index of the first node with op `op` at or after `from`, or -1. */
static int find_op(const ir_graph *g, ir_op op, int from) {
    for (int i = from; i < g->n; i++)
        if (g->nodes[i].op == op) return i;
    return -1;
}

static int find_name(const ir_graph *g, const char *name) {
    for (int i = 0; i < g->n; i++)
        if (!strcmp(g->nodes[i].name, name)) return i;
    return -1;
}

/* Field by field: struct padding may differ between equal nodes. */
static int node_equal(const ir_node *a, const ir_node *b) {
    if (a->op != b->op || a->ninputs != b->ninputs || a->flags != b->flags || a->line != b->line ||
        a->col != b->col || strcmp(a->name, b->name) || !ir_type_equal(&a->type, &b->type))
        return 0;
    for (int i = 0; i < a->ninputs; i++)
        if (a->input[i] != b->input[i]) return 0;
    for (int i = 0; i < IR_MAX_IATTRS; i++)
        if (a->iattr[i] != b->iattr[i]) return 0;
    for (int i = 0; i < IR_MAX_FATTRS; i++)
        if (a->fattr[i] != b->fattr[i]) return 0;
    return 1;
}

static const char *small_net = "input image[3, 8, 8]\n"
                               "input label class(4)\n"
                               "block unit(x, c) {\n"
                               "    y = relu(batchnorm(conv(x, c, k=3, p=1, bias=false)))\n"
                               "    return y\n"
                               "}\n"
                               "network tiny {\n"
                               "    x = unit(image, 4)\n"
                               "    x = unit(x, 4)\n"
                               "    x = conv(x, 6, k=1)\n"
                               "    logits = dense(flatten(x), 4)\n"
                               "    loss = softmax_cross_entropy(logits, label)\n"
                               "}\n";

/* ---- models ------------------------------------------------------------ */

typedef struct {
    const char *path, *network;
    int64_t params;
} model;

static const model models[] = {
    {"models/resnet18.net", "resnet18_v1", 11181642},
    {"models/resnet18_cifar.net", "resnet18_cifar", 11173962},
    {"models/mlp.net", "mlp", 3072 * 128 + 128 + 128 * 10 + 10},
    {"models/cnn_small.net", "cnn_small", 29018},
    /* Gluon's model zoo with classes=10, counted from its source's layers */
    {"models/resnet34.net", "resnet34_v1", 21289802},
    {"models/resnet50.net", "resnet50_v1", 23547402},
    {"models/resnet18_v2.net", "resnet18_v2", 11179978},
    {"models/mobilenet_v2.net", "mobilenet_v2_1_0", 2237760},
};

TEST(models_parse_and_count_params) {
    for (size_t m = 0; m < sizeof models / sizeof models[0]; m++) {
        fe_program *p = fe_parse_file(models[m].path);
        CHECK_MSG(p != NULL, "%s", models[m].path);
        if (!p) continue;
        CHECK_STR(fe_network_name(p), models[m].network);
        const ir_train *t = fe_train(p);
        ir_graph *g = fe_build_graph(p, t->batch, 1);
        CHECK(g != NULL);
        if (g) {
            char err[256] = "";
            CHECK_MSG(ir_verify(g, err, sizeof err) == 0, "%s: %s", models[m].path, err);
            CHECK_MSG(ir_num_params(g) == models[m].params, "%s: %lld", models[m].path,
                      (long long)ir_num_params(g));
            int loss = ir_loss_node(g);
            CHECK(loss >= 0 && g->nodes[loss].op == IR_OP_SOFTMAX_CE);
            if (loss >= 0) {
                CHECK(g->nodes[loss].flags == (IR_FLAG_LOSS | IR_FLAG_OUTPUT));
                CHECK(g->nodes[g->nodes[loss].input[0]].flags & IR_FLAG_OUTPUT);
                CHECK_STR(g->nodes[loss].name, "loss");
                CHECK_STR(g->nodes[g->nodes[loss].input[0]].name, "logits");
            }
        }
        ir_free(g);
        fe_free(p);
    }
}

/* The same text through fe_parse_string gives the same graph. */
TEST(models_from_strings) {
    for (size_t m = 0; m < sizeof models / sizeof models[0]; m++) {
        size_t len;
        char *src = read_file(models[m].path, &len);
        CHECK(src != NULL);
        if (!src) continue;
        fe_program *a = fe_parse_string(models[m].path, src, len);
        fe_program *b = fe_parse_file(models[m].path);
        CHECK(a && b);
        if (a && b) {
            ir_graph *ga = fe_build_graph(a, 16, 1), *gb = fe_build_graph(b, 16, 1);
            CHECK(ga && gb && ga->n == gb->n);
            for (int i = 0; ga && gb && i < ga->n && i < gb->n; i++)
                CHECK(node_equal(&ga->nodes[i], &gb->nodes[i]));
            CHECK(!memcmp(fe_train(a), fe_train(b), sizeof(ir_train)));
            ir_free(ga);
            ir_free(gb);
        }
        fe_free(a);
        fe_free(b);
        free(src);
    }
}

TEST(resnet18_schedule) {
    fe_program *p = fe_parse_file("models/resnet18.net");
    CHECK(p != NULL);
    if (!p) return;
    const ir_train *t = fe_train(p);
    CHECK(t->batch == 128);
    CHECK(t->epochs == 45);
    CHECK_NEAR(t->init_magnitude, 2.24, 0); /* strtod: the literal's double */
    CHECK(t->optimizer == IR_OPT_SGD);
    CHECK_NEAR(t->momentum, 0.9, 0);
    CHECK_NEAR(t->wd, 0.0001, 0);
    CHECK(t->lr_steps == 4);
    int epochs[] = {0, 35, 40, 44};
    double lrs[] = {0.1, 0.05, 0.02, 0.01};
    for (int i = 0; i < 4; i++) {
        CHECK(t->lr_epoch[i] == epochs[i]);
        CHECK_NEAR(t->lr_value[i], lrs[i], 0);
    }
    CHECK(t->lr_scaling == IR_LR_SCALING_LINEAR);
    CHECK(t->reference_batch == 128);
    CHECK(t->warmup_epochs == 5);
    CHECK_STR(t->dataset, "cifar10");
    CHECK(t->pad == 4 && t->random_crop == 32 && t->random_mirror == 1 && t->normalize == 1);
    double mean[] = {0.4914, 0.4822, 0.4465}, std[] = {0.2023, 0.1994, 0.2010};
    for (int c = 0; c < 3; c++) {
        CHECK_NEAR(t->mean[c], mean[c], 0);
        CHECK_NEAR(t->std[c], std[c], 0);
    }
    CHECK(t->eval_batch == 80);
    char err[256];
    CHECK(ir_train_check(t, err, sizeof err) == 0);
    fe_free(p);
}

/* ---- parameters ---------------------------------------------------------- */

TEST(small_net_parameter_names_and_order) {
    fe_program *p = parse(small_net);
    CHECK_MSG(p != NULL, "%s", errbuf);
    if (!p) return;
    ir_graph *g = fe_build_graph(p, 5, 1);
    CHECK(g != NULL);
    if (!g) {
        fe_free(p);
        return;
    }
    static const struct {
        const char *name;
        ir_op op;
        ir_init init;
        int ndim;
        int64_t dim[4];
    } want[] = {
        {"image", IR_OP_INPUT, 0, 4, {5, 3, 8, 8}},
        {"label", IR_OP_INPUT, 4, 1, {5}},
        {"unit0.conv0.weight", IR_OP_PARAM, IR_INIT_XAVIER, 4, {4, 3, 3, 3}},
        {"unit0.batchnorm0.gamma", IR_OP_PARAM, IR_INIT_ONE, 1, {4}},
        {"unit0.batchnorm0.beta", IR_OP_PARAM, IR_INIT_ZERO, 1, {4}},
        {"unit0.batchnorm0.running_mean", IR_OP_STATE, IR_INIT_ZERO, 1, {4}},
        {"unit0.batchnorm0.running_var", IR_OP_STATE, IR_INIT_ONE, 1, {4}},
        {"unit1.conv0.weight", IR_OP_PARAM, IR_INIT_XAVIER, 4, {4, 4, 3, 3}},
        {"unit1.batchnorm0.gamma", IR_OP_PARAM, IR_INIT_ONE, 1, {4}},
        {"unit1.batchnorm0.beta", IR_OP_PARAM, IR_INIT_ZERO, 1, {4}},
        {"unit1.batchnorm0.running_mean", IR_OP_STATE, IR_INIT_ZERO, 1, {4}},
        {"unit1.batchnorm0.running_var", IR_OP_STATE, IR_INIT_ONE, 1, {4}},
        {"conv0.weight", IR_OP_PARAM, IR_INIT_XAVIER, 4, {6, 4, 1, 1}},
        {"conv0.bias", IR_OP_PARAM, IR_INIT_ZERO, 1, {6}},
        {"dense0.weight", IR_OP_PARAM, IR_INIT_XAVIER, 2, {4, 384}},
        {"dense0.bias", IR_OP_PARAM, IR_INIT_ZERO, 1, {4}},
    };
    int k = 0, n = (int)(sizeof want / sizeof want[0]);
    for (int i = 0; i < g->n; i++) {
        const ir_node *nd = &g->nodes[i];
        if (!ir_is_source(nd->op)) continue;
        CHECK(k < n);
        if (k >= n) break;
        CHECK_STR(nd->name, want[k].name);
        CHECK(nd->op == want[k].op);
        CHECK(nd->iattr[0] == (int64_t)want[k].init);
        CHECK(nd->type.ndim == want[k].ndim);
        for (int d = 0; d < want[k].ndim; d++) CHECK(nd->type.dim[d] == want[k].dim[d]);
        k++;
    }
    CHECK(k == n);
    CHECK(g->nodes[find_name(g, "label")].type.dtype == IR_I32);
    CHECK(ir_num_params(g) == 4 * 27 + 8 + 4 * 36 + 8 + 24 + 6 + 4 * 384 + 4);
    ir_free(g);
    fe_free(p);
}

/* Same names, kinds and parameter shapes at every batch and in both modes. */
TEST(names_independent_of_batch_and_mode) {
    for (size_t m = 0; m < sizeof models / sizeof models[0]; m++) {
        fe_program *p = fe_parse_file(models[m].path);
        CHECK(p != NULL);
        if (!p) continue;
        ir_graph *g[4] = {fe_build_graph(p, 7, 1), fe_build_graph(p, 128, 1),
                          fe_build_graph(p, 7, 0), fe_build_graph(p, 80, 0)};
        CHECK(g[0] && g[1] && g[2] && g[3]);
        for (int v = 1; v < 4 && g[0] && g[v]; v++) {
            CHECK(g[v]->n == g[0]->n);
            CHECK(count_sources(g[v]) == count_sources(g[0]));
            for (int i = 0; i < g[0]->n && i < g[v]->n; i++) {
                const ir_node *a = &g[0]->nodes[i], *b = &g[v]->nodes[i];
                CHECK(a->op == b->op);
                CHECK_STR(a->name, b->name);
                if (ir_is_persistent(a->op)) CHECK(ir_type_equal(&a->type, &b->type));
            }
        }
        for (int v = 0; v < 4; v++) ir_free(g[v]);
        fe_free(p);
    }
}

TEST(batchnorm_training_flag_per_mode) {
    fe_program *p = fe_parse_file("models/resnet18.net");
    CHECK(p != NULL);
    if (!p) return;
    ir_graph *train = fe_build_graph(p, 4, 1), *eval = fe_build_graph(p, 4, 0);
    CHECK(train && eval);
    int nbn = 0;
    for (int i = find_op(train, IR_OP_BATCHNORM, 0); i >= 0;
         i = find_op(train, IR_OP_BATCHNORM, i + 1)) {
        nbn++;
        CHECK(train->nodes[i].iattr[0] == 1);
        CHECK(eval->nodes[i].op == IR_OP_BATCHNORM && eval->nodes[i].iattr[0] == 0);
        CHECK_NEAR(train->nodes[i].fattr[0], 1e-5, 0); /* parsed: exact */
        CHECK_NEAR(train->nodes[i].fattr[1], 0.9, 0);
        /* inputs: x, gamma, beta (params), running mean and var (state) */
        const ir_node *n = &train->nodes[i];
        CHECK(train->nodes[n->input[1]].op == IR_OP_PARAM);
        CHECK(train->nodes[n->input[2]].op == IR_OP_PARAM);
        CHECK(train->nodes[n->input[3]].op == IR_OP_STATE);
        CHECK(train->nodes[n->input[4]].op == IR_OP_STATE);
    }
    CHECK(nbn == 20);
    ir_free(train);
    ir_free(eval);
    fe_free(p);
}

TEST(positions_and_labels) {
    fe_program *p = parse(small_net);
    CHECK(p != NULL);
    if (!p) return;
    ir_graph *g = fe_build_graph(p, 2, 1);
    CHECK(g != NULL);
    if (g) {
        int conv = find_op(g, IR_OP_CONV, 0); /* inside unit: line 4, col 24 */
        CHECK(conv >= 0 && g->nodes[conv].line == 4 && g->nodes[conv].col == 24);
        /* ops inside blocks take scoped labels: the instance's (as its
         * parameters), the statement's, the op's */
        CHECK_STR(g->nodes[conv].name, "unit0.conv0");
        int bn = find_op(g, IR_OP_BATCHNORM, 0);
        CHECK(bn >= 0 && !strcmp(g->nodes[bn].name, "unit0.batchnorm0"));
        int flat = find_op(g, IR_OP_FLATTEN, 0); /* the network's own ops: unlabelled */
        CHECK(flat >= 0 && g->nodes[flat].name[0] == 0);
        int top = g->nodes[flat].input[0]; /* x = conv(x, 6, k=1): the statement wins */
        CHECK_STR(g->nodes[top].name, "x");
        CHECK_STR(g->nodes[g->nodes[top].input[0]].name, "conv0");
        int w = find_name(g, "unit0.conv0.weight");
        CHECK(w >= 0 && g->nodes[w].line == 4 && g->nodes[w].col == 24);
        int loss = ir_loss_node(g);
        CHECK(loss >= 0 && g->nodes[loss].line == 12 && g->nodes[loss].col == 12);
        /* the relu returned by the first unit call is labelled x */
        int relu = find_op(g, IR_OP_RELU, 0);
        CHECK(relu >= 0 && !strcmp(g->nodes[relu].name, "x"));
        CHECK_STR(g->nodes[find_name(g, "logits")].name, "logits");
        CHECK(g->nodes[find_name(g, "logits")].op == IR_OP_BIAS_ADD);
    }
    ir_free(g);
    fe_free(p);
}

/* ---- language details ---------------------------------------------------- */

static ir_graph *build_src(const char *src, int batch) {
    fe_program *p = parse(src);
    CHECK_MSG(p != NULL, "%s", errbuf);
    ir_graph *g = p ? fe_build_graph(p, batch, 1) : NULL;
    fe_free(p);
    return g;
}

TEST(arguments_defaults_and_arithmetic) {
    ir_graph *g = build_src("input image[3, 16, 16]; input label class(10);\n"
                            "block twice(x, c) { return conv(x, c + c, 1, 1, 0, false) }\n"
                            "block shadow(image) { image = relu(image); return image }\n"
                            "network n {\n"
                            "  c = 4\n"
                            "  x = twice(image, c=c)\n" /* keyword argument to a block */
                            "  x = maxpool(x, 2)\n"     /* s defaults to k */
                            "  x = avgpool(x, k=3, s=1, p=1)\n"
                            "  y = shadow(x)\n"
                            "  x = add(x, y) + y\n"
                            "  x = batchnorm(x, eps=1e-3, momentum=0)\n"
                            "  logits = dense(global_avgpool(x), 10, bias=false)\n"
                            "  loss = softmax_cross_entropy(logits, label)\n"
                            "}\n",
                            3);
    CHECK(g != NULL);
    if (!g) return;
    int w = find_name(g, "twice0.conv0.weight");
    CHECK(w >= 0 && g->nodes[w].type.dim[0] == 8 && g->nodes[w].type.dim[2] == 1);
    CHECK(find_name(g, "twice0.conv0.bias") < 0);
    CHECK(find_name(g, "dense0.bias") < 0);
    int mp = find_op(g, IR_OP_MAXPOOL, 0);
    CHECK(mp >= 0 && g->nodes[mp].iattr[0] == 2 && g->nodes[mp].iattr[1] == 2 &&
          g->nodes[mp].type.dim[2] == 8);
    int ap = find_op(g, IR_OP_AVGPOOL, 0);
    CHECK(ap >= 0 && g->nodes[ap].type.dim[2] == 8);
    int bn = find_op(g, IR_OP_BATCHNORM, 0);
    CHECK(bn >= 0 && g->nodes[bn].fattr[0] == 1e-3 && g->nodes[bn].fattr[1] == 0);
    int adds = 0;
    for (int i = find_op(g, IR_OP_ADD, 0); i >= 0; i = find_op(g, IR_OP_ADD, i + 1)) adds++;
    CHECK(adds == 2);
    ir_free(g);
}

/* Constants and arithmetic with Python's rules: precedence, parentheses,
 * unary minus, floor division rounding down, `/` giving a number; the
 * constants size inputs, operator arguments and the train section's
 * batch; the tensor operators become sub, mul_const, add_const and mul. */
TEST(constants_and_arithmetic) {
    fe_program *p = parse("const a = 7 // 2\n"              /* 3 */
                          "const b = -7 // 2\n"             /* -4 */
                          "const c = 2 + 3 * 4 - (1 - 1)\n" /* 14 */
                          "const d = (2 + 3) * 4\n"         /* 20 */
                          "const e = -2 * -3\n"             /* 6 */
                          "const f = 7 / 2\n"               /* 3.5 */
                          "const g = 0.02 / sqrt(2 * 2)\n"  /* 0.01 */
                          "const block = 4\n"
                          "input image[block, 8, 8]\n"
                          "input label class(c - 4)\n"
                          "network n {\n"
                          "  x = dense(flatten(image), a - b + d * 0 + e)\n" /* 13 */
                          "  x = clip(x, g, f)\n"
                          "  y = x * f - x / 2 + 1 - -x\n"
                          "  x = 2 - sub(x, y) * x\n"
                          "  logits = dense(x, 10)\n"
                          "  loss = softmax_cross_entropy(logits, label)\n"
                          "}\n"
                          "train { batch block * 2 }\n");
    CHECK_MSG(p != NULL, "%s", errbuf);
    if (!p) return;
    CHECK(fe_train(p)->batch == 8);
    ir_graph *g = fe_build_graph(p, 2, 1);
    fe_free(p);
    CHECK(g != NULL);
    if (!g) return;
    CHECK(g->nodes[0].type.dim[1] == 4 && g->nodes[1].iattr[0] == 10);
    int w = find_name(g, "dense0.weight");
    CHECK(w >= 0 && g->nodes[w].type.dim[0] == 13);
    int cl = find_op(g, IR_OP_CLIP, 0);
    CHECK(cl >= 0 && g->nodes[cl].fattr[0] == 0.02 / 2 && g->nodes[cl].fattr[1] == 3.5);
    /* x * 3.5, x / 2, their sub, + 1, -x, the sub of that, sub(x, y), its
     * product with x, then 2 - that: -(...) + 2 */
    const ir_op want[] = {IR_OP_MUL_CONST, IR_OP_MUL_CONST, IR_OP_SUB, IR_OP_ADD_CONST,
                          IR_OP_MUL_CONST, IR_OP_SUB,       IR_OP_SUB, IR_OP_MUL,
                          IR_OP_MUL_CONST, IR_OP_ADD_CONST};
    const double attr[] = {3.5, 0.5, 0, 1, -1, 0, 0, 0, -1, 2};
    int k = 0;
    for (int i = cl + 1; i < g->n && k < 10; i++) {
        ir_op op = g->nodes[i].op;
        if (op == IR_OP_PARAM || op == IR_OP_DENSE) break;
        CHECK_MSG(op == want[k], "op %d: %s", k, ir_ops[op].name);
        if (op == IR_OP_MUL_CONST || op == IR_OP_ADD_CONST)
            CHECK_MSG(g->nodes[i].fattr[0] == attr[k], "op %d: %g", k, g->nodes[i].fattr[0]);
        k++;
    }
    CHECK(k == 10);
    ir_free(g);
}

/* repeat runs its body in the enclosing scope: the calls number on, and a
 * repeat of 0 leaves a name it would assign unassigned. */
TEST(repeat_statements) {
    ir_graph *g = build_src("const n = 3\ninput image[3, 8, 8]; input label class(10)\n"
                            "block b(x) { repeat 2 { x = dense(x, 4) } return x }\n"
                            "network net {\n"
                            "  x = flatten(image)\n"
                            "  repeat n - 1 { x = b(x); repeat 0 { x = relu(x) } }\n"
                            "  logits = dense(x, 10)\n"
                            "  loss = softmax_cross_entropy(logits, label)\n"
                            "}\n",
                            2);
    CHECK(g != NULL);
    if (!g) return;
    CHECK(find_name(g, "b0.dense1.weight") >= 0 && find_name(g, "b1.dense1.weight") >= 0);
    CHECK(find_name(g, "b2.dense0.weight") < 0 && find_name(g, "dense0.weight") >= 0);
    CHECK(find_op(g, IR_OP_RELU, 0) < 0);
    ir_free(g);
    fe_program *p = parse("input image[3, 8, 8]; input label class(10)\n"
                          "network net {\n"
                          "  repeat 0 { y = flatten(image) }\n"
                          "  logits = dense(y, 10)\n"
                          "  loss = softmax_cross_entropy(logits, label)\n"
                          "}\n");
    CHECK(p == NULL && strstr(errbuf, "4:18: error: unknown name 'y'"));
    fe_free(p);
}

/* relu6 is clip(x, 0, 6); mul picks the elementwise or the per-channel
 * product by the shapes, the factor on either side. */
TEST(activations_and_mul) {
    ir_graph *g = build_src("input image[3, 8, 8]; input label class(10);\n"
                            "network n {\n"
                            "  x = relu6(conv(image, 4, k=3, p=1))\n"
                            "  x = clip(x, -1, 2.5)\n"
                            "  x = mul(x, sigmoid(x))\n"
                            "  s = sigmoid(dense(global_avgpool(x), 4))\n"
                            "  x = mul(s, x)\n"
                            "  x = mul(x, avgpool(x, k=8))\n"
                            "  logits = dense(global_avgpool(x), 10)\n"
                            "  loss = softmax_cross_entropy(logits, label)\n"
                            "}\n",
                            2);
    CHECK(g != NULL);
    if (!g) return;
    int c0 = find_op(g, IR_OP_CLIP, 0), c1 = c0 < 0 ? -1 : find_op(g, IR_OP_CLIP, c0 + 1);
    CHECK(c0 >= 0 && g->nodes[c0].fattr[0] == 0 && g->nodes[c0].fattr[1] == 6);
    CHECK(c1 >= 0 && g->nodes[c1].fattr[0] == -1 && g->nodes[c1].fattr[1] == 2.5);
    int m = find_op(g, IR_OP_MUL, 0);
    CHECK(m >= 0 && find_op(g, IR_OP_MUL, m + 1) < 0);
    int mc = find_op(g, IR_OP_MUL_CHANNEL, 0);
    CHECK(mc >= 0 && g->nodes[mc].type.ndim == 4 &&
          g->nodes[g->nodes[mc].input[1]].type.ndim == 2); /* swapped: x first */
    int mc2 = mc < 0 ? -1 : find_op(g, IR_OP_MUL_CHANNEL, mc + 1);
    CHECK(mc2 >= 0 && g->nodes[g->nodes[mc2].input[1]].type.dim[2] == 1);
    ir_free(g);
}

/* tanh; gelu's approx picks the op, erf by default; any other word, or
 * an expression, is refused naming the set. */
TEST(tanh_and_gelu) {
    ir_graph *g = build_src("input image[3, 8, 8]; input label class(10);\n"
                            "network n {\n"
                            "  x = gelu(dense(flatten(image), 8))\n"
                            "  x = gelu(x, approx=tanh) + gelu(x, approx=erf)\n"
                            "  logits = dense(tanh(x), 10)\n"
                            "  loss = softmax_cross_entropy(logits, label)\n"
                            "}\n",
                            2);
    CHECK(g != NULL);
    if (!g) return;
    int e0 = find_op(g, IR_OP_GELU, 0);
    CHECK(e0 >= 0 && find_op(g, IR_OP_GELU, e0 + 1) >= 0);
    int t = find_op(g, IR_OP_GELU_TANH, 0);
    CHECK(t >= 0 && find_op(g, IR_OP_GELU_TANH, t + 1) < 0);
    CHECK(find_op(g, IR_OP_TANH, 0) >= 0);
    ir_free(g);
}

/* `input NAME int[T]`: i32 ids [N, T] next to the image and label; `int`
 * stays an ordinary name elsewhere. */
TEST(int_inputs) {
    ir_graph *g = build_src("input image[3, 8, 8]; input label class(10)\n"
                            "input tokens int[16]; input targets int[16]\n"
                            "network n {\n"
                            "  int = relu(image)\n"
                            "  logits = dense(flatten(int), 10)\n"
                            "  loss = softmax_cross_entropy(logits, label)\n"
                            "}\n",
                            2);
    CHECK(g != NULL);
    if (!g) return;
    int t = find_name(g, "tokens"), y = find_name(g, "targets");
    CHECK(t >= 0 && g->nodes[t].op == IR_OP_INPUT && g->nodes[t].type.dtype == IR_I32);
    CHECK(t >= 0 && g->nodes[t].type.ndim == 2 && g->nodes[t].type.dim[0] == 2 &&
          g->nodes[t].type.dim[1] == 16 && g->nodes[t].iattr[0] == 0);
    CHECK(y >= 0 && g->nodes[y].type.dtype == IR_I32 && g->nodes[y].type.ndim == 2);
    ir_free(g);
}

/* The shape operators: split's parts bound to their names in order, the
 * -1 dimension inferred, negative axes and bounds, the causal mask (the
 * padding mask needs token data, which no data section gives yet: its
 * rule is checked at the IR level, test_autodiff and test_codegen). */
TEST(shape_operators) {
    ir_graph *g = build_src("input image[3, 8, 8]; input label class(10)\n"
                            "network n {\n"
                            "  t = reshape(dense(flatten(image), 24), 4, -1)\n"
                            "  q, k, v = split(t, 3)\n"
                            "  s = matmul(q, transpose(k, -1, -2))\n"
                            "  s = mask(s, causal=true)\n"
                            "  o = concat(matmul(softmax(s), v), slice(t, -2, 6), axis=-1)\n"
                            "  logits = dense(flatten(permute(o, 0, 2, 1)), 10)\n"
                            "  loss = softmax_cross_entropy(logits, label)\n"
                            "}\n",
                            2);
    CHECK(g != NULL);
    if (!g) return;
    int t = find_name(g, "t"), q = find_name(g, "q"), v = find_name(g, "v");
    CHECK(t >= 0 && g->nodes[t].op == IR_OP_RESHAPE && g->nodes[t].type.dim[2] == 6);
    CHECK(q >= 0 && g->nodes[q].op == IR_OP_SLICE && g->nodes[q].iattr[1] == 0);
    CHECK(v >= 0 && g->nodes[v].op == IR_OP_SLICE && g->nodes[v].iattr[1] == 4 &&
          g->nodes[v].iattr[2] == 2);
    int cm = find_op(g, IR_OP_CAUSAL_MASK, 0);
    CHECK(cm >= 0 && g->nodes[cm].iattr[0] == 0 && find_op(g, IR_OP_PAD_MASK, 0) < 0);
    int sl = find_op(g, IR_OP_SLICE, v + 1); /* slice(t, -2, 6): [4, 6) of the last axis */
    CHECK(sl >= 0 && g->nodes[sl].iattr[0] == 2 && g->nodes[sl].iattr[1] == 4);
    int o = find_name(g, "o");
    CHECK(o >= 0 && g->nodes[o].op == IR_OP_CONCAT && g->nodes[o].type.dim[2] == 4);
    ir_free(g);
}

/* groups: the weight is [channels, C/groups, k, k], the attribute goes to
 * conv's last slot; depthwise is groups = channels. */
TEST(conv_groups) {
    ir_graph *g = build_src("input image[3, 8, 8]; input label class(10);\n"
                            "network n {\n"
                            "  x = conv(image, 16, k=1)\n"
                            "  x = conv(x, 32, k=3, p=1, groups=4, bias=false)\n"
                            "  x = conv(x, 32, k=3, s=2, p=1, groups=32)\n"
                            "  logits = dense(global_avgpool(x), 10)\n"
                            "  loss = softmax_cross_entropy(logits, label)\n"
                            "}\n",
                            2);
    CHECK(g != NULL);
    if (!g) return;
    int w1 = find_name(g, "conv1.weight"), w2 = find_name(g, "conv2.weight");
    CHECK(w1 >= 0 && g->nodes[w1].type.dim[0] == 32 && g->nodes[w1].type.dim[1] == 4);
    CHECK(w2 >= 0 && g->nodes[w2].type.dim[0] == 32 && g->nodes[w2].type.dim[1] == 1);
    int c0 = find_op(g, IR_OP_CONV, 0);
    int c1 = c0 < 0 ? -1 : find_op(g, IR_OP_CONV, c0 + 1);
    int c2 = c1 < 0 ? -1 : find_op(g, IR_OP_CONV, c1 + 1);
    CHECK(c0 >= 0 && ir_conv_groups(&g->nodes[c0]) == 1);
    CHECK(c1 >= 0 && ir_conv_groups(&g->nodes[c1]) == 4);
    CHECK(c2 >= 0 && ir_conv_groups(&g->nodes[c2]) == 32 && g->nodes[c2].type.dim[2] == 4);
    ir_free(g);
}

/* concat: the tensors given, in order, along the channels. */
TEST(concat_call) {
    ir_graph *g = build_src("input image[3, 8, 8]; input label class(10);\n"
                            "network n {\n"
                            "  a = conv(image, 4, k=1)\n"
                            "  x = concat(a, image, conv(a, 2, k=1), axis=1)\n"
                            "  logits = dense(global_avgpool(x), 10)\n"
                            "  loss = softmax_cross_entropy(logits, label)\n"
                            "}\n",
                            2);
    CHECK(g != NULL);
    if (!g) return;
    int c = find_op(g, IR_OP_CONCAT, 0);
    CHECK(c >= 0 && g->nodes[c].ninputs == 3 && g->nodes[c].type.dim[1] == 9);
    CHECK(c >= 0 && g->nodes[g->nodes[c].input[1]].op == IR_OP_INPUT);
    ir_free(g);
}

/* dropout: a node reading the runtime's key in training (salts in order),
 * the identity in evaluation. */
TEST(dropout_call) {
    const char *src = "input image[3, 8, 8]; input label class(10);\n"
                      "network n {\n"
                      "  x = dropout(conv(image, 4, k=1), 0.5)\n"
                      "  x = dropout(x, p=0.25)\n"
                      "  logits = dense(global_avgpool(x), 10)\n"
                      "  loss = softmax_cross_entropy(logits, label)\n"
                      "}\n";
    fe_program *p = parse(src); /* its trial graph's check: the key is no data input */
    CHECK(p != NULL);
    if (!p) return;
    ir_graph *train = fe_build_graph(p, 2, 1), *eval = fe_build_graph(p, 2, 0);
    CHECK(train && eval);
    if (train && eval) {
        int d0 = find_op(train, IR_OP_DROPOUT, 0);
        int d1 = d0 < 0 ? -1 : find_op(train, IR_OP_DROPOUT, d0 + 1);
        CHECK(d0 >= 0 && train->nodes[d0].iattr[0] == 0 && train->nodes[d0].fattr[0] == 0.5);
        CHECK(d1 >= 0 && train->nodes[d1].iattr[0] == 1 && train->nodes[d1].fattr[0] == 0.25);
        int key = find_name(train, IR_DROPOUT_KEY);
        CHECK(key >= 0 && train->nodes[key].op == IR_OP_INPUT && d0 >= 0 &&
              train->nodes[d0].input[1] == key && train->nodes[d1].input[1] == key);
        CHECK(find_op(eval, IR_OP_DROPOUT, 0) < 0 && find_name(eval, IR_DROPOUT_KEY) < 0);
    }
    ir_free(train);
    ir_free(eval);
    fe_free(p);
}

/* gamma_init=0, and the residual marker under the train section's switch. */
TEST(batchnorm_gamma_init) {
    static const char *body =
        "input image[3, 8, 8]; input label class(10)\n"
        "block branch(x) { return batchnorm(conv(x, 3, k=1), residual_last=true) }\n"
        "network n {\n"
        "  x = batchnorm(image, gamma_init=0)\n"
        "  x = x + branch(x)\n"
        "  x = x + batchnorm(conv(x, 3, k=1), residual_last=true, gamma_init=1)\n"
        "  logits = dense(global_avgpool(x), 10)\n"
        "  loss = softmax_cross_entropy(logits, label)\n"
        "}\n";
    char src[1024];
    for (int on = 0; on < 2; on++) {
        snprintf(src, sizeof src, "%s%s", body, on ? "train { zero_init_residual }\n" : "");
        ir_graph *g = build_src(src, 2);
        CHECK(g != NULL);
        if (!g) continue;
        const char *names[3] = {"batchnorm0.gamma", "branch0.batchnorm0.gamma", "batchnorm1.gamma"};
        const ir_init want[2][3] = {{IR_INIT_ZERO, IR_INIT_ONE, IR_INIT_ONE},
                                    {IR_INIT_ZERO, IR_INIT_ZERO, IR_INIT_ONE}};
        for (int k = 0; k < 3; k++) {
            int i = find_name(g, names[k]);
            CHECK_MSG(i >= 0 && g->nodes[i].iattr[0] == (int64_t)want[on][k], "%s (switch %d)",
                      names[k], on);
        }
        int beta = find_name(g, "branch0.batchnorm0.beta");
        CHECK(beta >= 0 && g->nodes[beta].iattr[0] == IR_INIT_ZERO);
        ir_free(g);
    }
}

/* scale=false / center=false: gamma / beta become untrained state at 1 / 0,
 * each independently; the running statistics are unchanged. */
TEST(batchnorm_without_affine) {
    ir_graph *g = build_src("input image[3, 8, 8]; input label class(10)\n"
                            "network n {\n"
                            "  x = batchnorm(image, scale=false, center=false)\n"
                            "  x = batchnorm(conv(x, 4, k=1), center=false)\n"
                            "  x = batchnorm(x, scale=false)\n"
                            "  logits = dense(global_avgpool(x), 10)\n"
                            "  loss = softmax_cross_entropy(logits, label)\n"
                            "}\n",
                            2);
    CHECK(g != NULL);
    if (!g) return;
    static const struct {
        const char *name;
        ir_op op;
        ir_init init;
    } want[] = {{"batchnorm0.gamma", IR_OP_STATE, IR_INIT_ONE},
                {"batchnorm0.beta", IR_OP_STATE, IR_INIT_ZERO},
                {"batchnorm0.running_var", IR_OP_STATE, IR_INIT_ONE},
                {"batchnorm1.gamma", IR_OP_PARAM, IR_INIT_ONE},
                {"batchnorm1.beta", IR_OP_STATE, IR_INIT_ZERO},
                {"batchnorm2.gamma", IR_OP_STATE, IR_INIT_ONE},
                {"batchnorm2.beta", IR_OP_PARAM, IR_INIT_ZERO}};
    for (size_t k = 0; k < sizeof want / sizeof want[0]; k++) {
        int i = find_name(g, want[k].name);
        CHECK_MSG(i >= 0 && g->nodes[i].op == want[k].op &&
                      g->nodes[i].iattr[0] == (int64_t)want[k].init,
                  "%s", want[k].name);
    }
    /* conv 4*3 + bias 4, batchnorm1's gamma 4, batchnorm2's beta 4, dense 10*4 + 10 */
    CHECK(ir_num_params(g) == 12 + 4 + 4 + 4 + 40 + 10);
    char err[256] = "";
    CHECK_MSG(ir_verify(g, err, sizeof err) == 0, "%s", err);
    ir_free(g);
}

TEST(train_section_variants) {
    const char *net =
        "input image[4]\ninput label class(2)\n"
        "network n { logits = dense(image, 2); loss = softmax_cross_entropy(logits, label) }\n";
    char src[2048];
    /* no train section: the defaults */
    fe_program *p = parse(net);
    CHECK(p != NULL);
    ir_train d;
    ir_train_defaults(&d);
    if (p) CHECK(!memcmp(fe_train(p), &d, sizeof d));
    fe_free(p);

    snprintf(src, sizeof src,
             "%strain { batch 32; epochs 3; lr {0: 1, 2: 0.5,}; lr_scaling linear; "
             "warmup 0 epochs; data cifar10; eval batch 7; init xavier; optimizer sgd() }",
             net);
    p = parse(src);
    CHECK_MSG(p != NULL, "%s", errbuf);
    if (p) {
        const ir_train *t = fe_train(p);
        CHECK(t->batch == 32 && t->epochs == 3 && t->eval_batch == 7);
        CHECK(t->lr_steps == 2 && t->lr_epoch[1] == 2 && t->lr_value[0] == 1.0);
        CHECK(t->lr_scaling == IR_LR_SCALING_LINEAR && t->reference_batch == d.reference_batch);
        CHECK(t->pad == 0 && t->random_crop == 0 && !t->random_mirror && !t->normalize);
        CHECK(t->init_magnitude == d.init_magnitude && t->momentum == d.momentum);
    }
    fe_free(p);

    /* each optimizer's defaults (README), and arguments over them */
    static const struct {
        const char *spec;
        ir_optimizer opt;
        int nesterov, exclude;
        double eps, wd;
    } opts[] = {
        {"sgd(nesterov=true)", IR_OPT_SGD, 1, 0, 1e-9, 1e-4},
        {"lars(wd=5e-4)", IR_OPT_LARS, 0, IR_EXCLUDE_BN | IR_EXCLUDE_BIAS, 1e-9, 5e-4},
        {"lamb(exclude=(bias), eps=1e-5)", IR_OPT_LAMB, 0, IR_EXCLUDE_BIAS, 1e-5, 1e-4},
        {"adamw(wd=0.01)", IR_OPT_ADAMW, 0, 0, 1e-8, 0.01},
        {"lamb(exclude=())", IR_OPT_LAMB, 0, 0, 1e-6, 1e-4},
        {"adamw(exclude=(bias, norm))", IR_OPT_ADAMW, 0, IR_EXCLUDE_BIAS | IR_EXCLUDE_NORM, 1e-8,
         1e-4},
    };
    for (int k = 0; k < (int)(sizeof opts / sizeof *opts); k++) {
        snprintf(src, sizeof src, "%strain { optimizer %s }", net, opts[k].spec);
        p = parse(src);
        CHECK_MSG(p != NULL, "%s", errbuf);
        if (!p) continue;
        const ir_train *t = fe_train(p);
        CHECK_MSG(t->optimizer == opts[k].opt && t->nesterov == opts[k].nesterov &&
                      t->exclude == opts[k].exclude && t->eps == opts[k].eps && t->wd == opts[k].wd,
                  "%s", opts[k].spec);
        CHECK(t->eta == 0.001 && t->beta1 == 0.9 && t->beta2 == 0.999 && t->momentum == 0.9);
        fe_free(p);
    }

    /* nanoGPT's schedule: warmup in steps, a cosine ending at a step */
    snprintf(src, sizeof src,
             "%strain { warmup 100 steps; lr cosine(base=1e-3, final=1e-4, steps=5000); "
             "optimizer adamw(beta2=0.99, wd=0.1, exclude=(bias, norm)); clip_grad_norm 1.0 }",
             net);
    p = parse(src);
    CHECK_MSG(p != NULL, "%s", errbuf);
    if (p) {
        const ir_train *t = fe_train(p);
        CHECK(t->warmup_steps == 100 && t->warmup_epochs == 0 && t->lr_decay_steps == 5000);
        CHECK(t->lr_kind == IR_LR_COSINE && t->lr_value[0] == 1e-3 && t->lr_final == 1e-4);
        CHECK(t->clip_norm == 1.0 && t->init_kind == IR_TRAIN_INIT_XAVIER);
    }
    fe_free(p);
    snprintf(src, sizeof src, "%strain { init normal(std=0.02) }", net);
    p = parse(src);
    CHECK_MSG(p && fe_train(p)->init_kind == IR_TRAIN_INIT_NORMAL && fe_train(p)->init_std == 0.02,
              "%s", errbuf);
    fe_free(p);
    snprintf(src, sizeof src, "%strain { init kaiming }", net);
    p = parse(src);
    CHECK_MSG(p && fe_train(p)->init_kind == IR_TRAIN_INIT_KAIMING, "%s", errbuf);
    fe_free(p);

    /* schedule words are plain names outside the train section */
    p = parse("input image[4]\ninput label class(2)\n"
              "network n { data = dense(image, 4); batch = relu(data); logits = dense(batch, 2); "
              "loss = softmax_cross_entropy(logits, label) }\n"
              "train { lr_scaling none; data cifar10 { random_mirror } }");
    CHECK_MSG(p != NULL, "%s", errbuf);
    if (p) CHECK(fe_train(p)->random_mirror == 1 && fe_train(p)->lr_scaling == IR_LR_SCALING_NONE);
    fe_free(p);
}

/* ---- errors ---------------------------------------------------------------- */

typedef struct {
    const char *src;
    const char *msg; /* the whole stderr */
} bad;

#define NET_TAIL \
    "  logits = dense(flatten(x), 2)\n  loss = softmax_cross_entropy(logits, label)\n}\n"
#define NET_HEAD "input image[3, 8, 8]\ninput label class(2)\n"

static const bad bads[] = {
    {NET_HEAD "network n {\n  x = relu(image\n" NET_TAIL,
     "t.net:5:3: error: unexpected identifier 'logits', expected ')' or ','\n"},
    {NET_HEAD "network n {\n  x = conv2(image, 4, k=3)\n" NET_TAIL,
     "t.net:4:7: error: unknown operator 'conv2'; did you mean 'conv'?\n"},
    {NET_HEAD "network n {\n  x = frobnicate(image)\n" NET_TAIL,
     "t.net:4:7: error: unknown operator 'frobnicate'\n"},
    {NET_HEAD "network n {\n  x = conv(image, 4, k=3, strid=2)\n" NET_TAIL,
     "t.net:4:27: error: unknown keyword argument 'strid' for 'conv' (it takes x, channels, k, s, "
     "p, bias, groups)\n"},
    {NET_HEAD "network n {\n  x = batchnorm(image, momentun=0.9)\n" NET_TAIL,
     "t.net:4:24: error: unknown keyword argument 'momentun' for 'batchnorm'; did you mean "
     "'momentum'? (it takes x, eps, momentum, gamma_init, residual_last, sync, scale, center)\n"},
    {NET_HEAD "network n {\n  x = image + relu(image, 1)\n" NET_TAIL,
     "t.net:4:27: error: too many arguments to 'relu' (it takes 1)\n"},
    {NET_HEAD "block b(x) { return relu(x) }\nnetwork n {\n  x = b(image, k=1)\n" NET_TAIL,
     "t.net:5:16: error: unknown keyword argument 'k' for block 'b' (it takes x)\n"},
    {NET_HEAD "network n {\n  x = relu(image) + true\n" NET_TAIL,
     "t.net:4:19: error: cannot add a tensor and a boolean\n"},
    {NET_HEAD "network n {\n  x = 2 - relu(image) * (2 // 0)\n" NET_TAIL,
     "t.net:4:28: error: integer division by zero in '//'\n"},
    {NET_HEAD "network n {\n  x = relu(image)\n  loss = 3\n}\n",
     "t.net:5:10: error: loss must be the result of softmax_cross_entropy, not an integer\n"},
    {NET_HEAD "network n {\n  x = relu(image)\n  x = batchnorm(x, momentum=2)\n" NET_TAIL,
     "t.net:5:29: error: argument 'momentum' of 'batchnorm' must be in [0, 1], got 2\n"},
    {NET_HEAD "network n {\n  x = batchnorm(flatten(image), eps=0)\n" NET_TAIL,
     "t.net:4:37: error: argument 'eps' of 'batchnorm' must be positive, got 0\n"},
    {NET_HEAD "network n {\n  x = batchnorm(global_avgpool(global_avgpool(image)))\n" NET_TAIL,
     "t.net:4:17: error: global_avgpool: input must have rank 4, got [128,3]\n"},
    {NET_HEAD "network n {\n  x = maxpool(image, k=3, p=2)\n" NET_TAIL,
     "t.net:4:7: error: maxpool: padding 2 is more than half the kernel 3\n"},
    {NET_HEAD "network n {\n  x = conv(image, 16777217, k=1)\n" NET_TAIL,
     "t.net:4:19: error: argument 'channels' of 'conv' must be at most 16777216, got 16777217\n"},
    {"input image[3, 8, 8]\ninput label class(2)\n"
     "network n {\n  loss = softmax_cross_entropy(dense(flatten(image), 2), label)\n}\n"
     "train { epochs 2\n warmup 3 epochs }\n",
     "t.net:7:9: error: warmup of 3 epochs is longer than training (2 epochs)\n"},
    {"input image[3, 8, 8]\ninput label class(2)\n"
     "network n {\n  loss = softmax_cross_entropy(dense(flatten(image), 2), label)\n}\n"
     "train { epochs 2\n warmup 3 iters }\n",
     "t.net:7:11: error: unexpected identifier 'iters', expected 'epochs' or 'steps'\n"},
    {"input image[3, 8, 8]\ninput label class(2)\n"
     "network n {\n  loss = softmax_cross_entropy(dense(flatten(image), 2), label)\n}\n"
     "train { lr cosine(base=0.1, steps=2.5) }\n",
     "t.net:6:35: error: steps must be an integer, got 2.5\n"},
    {"input image[3, 8, 8]\ninput label class(2)\n"
     "network n {\n  loss = softmax_cross_entropy(dense(flatten(image), 2), label)\n}\n"
     "train { init uniform }\n",
     "t.net:6:14: error: unknown initializer 'uniform' (expected xavier, normal or kaiming)\n"},
    {"input image[3, 8, 8]\ninput label class(2)\n"
     "network n {\n  loss = softmax_cross_entropy(dense(flatten(image), 2), label)\n}\n"
     "train { clip_grad_norm 0 }\n",
     "t.net:6:24: error: clip_grad_norm must be positive, got 0\n"},
    {"input image[3, 8, 8]\ninput label class(2)\n"
     "network n {\n  loss = softmax_cross_entropy(dense(flatten(image), 2), label)\n}\n"
     "train { lr {0: 0.1, 1: 2e6} }\n",
     "t.net:6:24: error: lr must be at most 1e6, got 2e+06\n"},
    {"input image[3, 8, 8]\ninput label class(2)\n"
     "network n {\n  loss = softmax_cross_entropy(dense(flatten(image), 2), label)\n}\n"
     "train { data cifar10 { pad 4; pad 2 } }\n",
     "t.net:6:31: error: duplicate 'pad' in data section (first at 6:24)\n"},
    {"input image[3, 8, 8]\ninput label class(2)\n"
     "network n {\n  loss = softmax_cross_entropy(dense(flatten(image), 2), label)\n}\n"
     "train { lr_scaling none(reference_batch=2) }\n",
     "t.net:6:25: error: 'none' takes no arguments\n"},
    {"input image[3, 8, 8]\ninput label class(2)\n"
     "network n {\n  loss = softmax_cross_entropy(dense(flatten(image), 2), label)\n}\n"
     "train { batch 1e3 }\n",
     "t.net:6:15: error: batch must be an integer, got 1e3 (write 1000: an integer has no '.' or "
     "exponent)\n"},
    {"   \n# only a comment\n", "t.net:1:1: error: no network section\n"},
    {"network n {", "t.net:1:12: error: missing '}' to close network 'n' (opened at 1:11)\n"},
    {"network", "t.net:1:8: error: unexpected end of file, expected identifier\n"},
    {"input x[2]\ninput x[3]\nnetwork n { loss = x }",
     "t.net:2:7: error: duplicate input 'x' (first defined at 1:7)\n"},
    {"input x[2] network n { loss = relu(x) }",
     "t.net:1:31: error: loss must be the result of softmax_cross_entropy, not relu\n"},
    {"input t integer[4]\nnetwork n { loss = t }",
     "t.net:1:9: error: unknown input type 'integer' (int[...], class(K) or [...])\n"},
    {"input t int[4]\ninput label class(2)\nnetwork n {\n  x = relu(t)\n"
     "  logits = dense(x, 2)\n  loss = softmax_cross_entropy(logits, label)\n}\n",
     "t.net:4:7: error: relu: input must be a float tensor, got [128,4]:i32\n"},
    {"input x[4]\ninput label class(2)\nnetwork n {\n  e = embedding(x, 9, 2)\n"
     "  logits = dense(flatten(e), 2)\n  loss = softmax_cross_entropy(logits, label)\n}\n",
     "t.net:4:7: error: embedding: ids must be an int tensor of rank 1 to 3, got [128,4]\n"},
    {"input image int[4]\ninput label class(2)\nnetwork n {\n  e = embedding(image, 9, 2)\n"
     "  logits = dense(flatten(e), 2)\n  loss = softmax_cross_entropy(logits, label)\n}\n",
     "t.net:1:7: error: input 'image' is int; the cifar10 data fills it with pixels\n"},
    {"input t int[4]\ninput y int[4]\nnetwork n {\n  logits = embedding(t, 9, 9)\n"
     "  loss = softmax_cross_entropy(logits, y, 0.1)\n}\n",
     "t.net:5:43: error: argument 'smoothing' of 'softmax_cross_entropy' applies to rank-2 "
     "logits only, got 0.1\n"},
    {"input t int[4]\ninput y int[4]\nnetwork n {\n  e = embedding(t, 9, 3)\n"
     "  logits = dense(layernorm(e), 9, bias=false, tie=layernorm(e))\n"
     "  loss = softmax_cross_entropy(logits, y)\n}\n",
     "t.net:5:51: error: argument 'tie' of 'dense' must be the result of embedding(...)\n"},
    {"input t int[4]\ninput y int[4]\nnetwork n {\n  e = embedding(t, 9, 3)\n"
     "  logits = dense(e, 8, bias=false, tie=e)\n"
     "  loss = softmax_cross_entropy(logits, y)\n}\n",
     "t.net:5:40: error: argument 'tie' of 'dense': the embedding's table is [9,3], the dense "
     "needs [8,3] (units, input features)\n"},
    {"input x[4]\ninput label class(2)\nnetwork n {\n  logits = dense(x, 2)\n"
     "  loss = softmax_cross_entropy(logits, label, ignore=0)\n}\n",
     "t.net:5:54: error: argument 'ignore' of 'softmax_cross_entropy' applies to rank-3 logits "
     "only, got 0\n"},
    {"input x[6, 12]\ninput label class(2)\nnetwork n {\n  a = attention(x, x, x, heads=5)\n"
     "  loss = softmax_cross_entropy(dense(flatten(a), 2), label)\n}\n",
     "t.net:4:32: error: argument 'heads' of 'attention': 12 channels of q do not split into 5 "
     "heads\n"},
    {"input x[6, 12]\ninput label class(2)\nnetwork n {\n  a = attention(x, flatten(x), x, heads=2)\n"
     "  loss = softmax_cross_entropy(dense(flatten(a), 2), label)\n}\n",
     "t.net:4:20: error: argument 'k' of 'attention' must be [N, T, C], got rank 2\n"},
    {"input x[6, 12]\ninput label class(2)\nnetwork n {\n  a = attention(x, x, x, heads=2, "
     "dropout=1)\n  loss = softmax_cross_entropy(dense(flatten(a), 2), label)\n}\n",
     "t.net:4:43: error: argument 'dropout' of 'attention' must be in [0, 1), got 1\n"},
    {"network n { loss = 1e999 }", "t.net:1:20: error: number 1e999 is too large\n"},
    {"network n { loss = \xc3\xa9t\xc3\xa9 }",
     "t.net:1:20: error: unexpected character '\xc3\xa9'\n"},
    {"network n {\n  loss = relu(x)\n}\n", "t.net:2:15: error: unknown name 'x'\n"},
    {"block b(x) { return c(x) }\nblock c(x) { return b(x) }\nnetwork n { loss = b(1) }",
     "t.net:2:21: error: recursive blocks: b -> c -> b\n"},
};

TEST(error_messages) {
    for (size_t i = 0; i < sizeof bads / sizeof bads[0]; i++) {
        fe_program *p = parse(bads[i].src);
        CHECK_MSG(p == NULL, "case %zu parsed", i);
        fe_free(p);
        CHECK_MSG(!strcmp(errbuf, bads[i].msg), "case %zu:\n   got: %s  want: %s", i, errbuf,
                  bads[i].msg);
    }
}

static void append(char **buf, size_t *len, size_t *cap, const char *s) {
    size_t n = strlen(s);
    if (*len + n + 1 > *cap) {
        *cap = (*len + n + 1) * 2;
        *buf = realloc(*buf, *cap);
    }
    memcpy(*buf + *len, s, n + 1);
    *len += n;
}

/* Inputs built to exhaust stacks, names or memory get one clean error. */
TEST(limits) {
    char *src = NULL, line[256];
    size_t len = 0, cap = 0;

    /* a long flat `+` chain is one level deep: it compiles, one add per
     * '+', folded left to right */
    append(&src, &len, &cap, NET_HEAD "network n {\n  x = image");
    for (int i = 0; i < 5000; i++) append(&src, &len, &cap, " + image");
    append(&src, &len, &cap, "\n" NET_TAIL);
    fe_program *p = parse(src);
    CHECK_MSG(p != NULL, "%s", errbuf);
    ir_graph *g = p ? fe_build_graph(p, 2, 1) : NULL;
    int adds = 0, chained = 1;
    for (int i = 0; g && i < g->n; i++)
        if (g->nodes[i].op == IR_OP_ADD) {
            /* each add reads the previous one (the first reads the input) */
            int lhs = g->nodes[i].input[0];
            chained &= adds ? g->nodes[lhs].op == IR_OP_ADD : g->nodes[lhs].op == IR_OP_INPUT;
            adds++;
        }
    CHECK_MSG(adds == 5000 && chained, "%d adds, chained %d", adds, chained);
    ir_free(g);
    fe_free(p);

    /* 300000 integer terms: no recursion along a sum, so no stack to run out of */
    len = 0;
    append(&src, &len, &cap, NET_HEAD "network n {\n  k = 0");
    for (int i = 0; i < 300000; i++) append(&src, &len, &cap, " + 1");
    append(&src, &len, &cap, "\n  x = conv(image, 2, k=1, s=k)\n" NET_TAIL);
    p = parse(src);
    CHECK_MSG(p != NULL, "%s", errbuf);
    g = p ? fe_build_graph(p, 2, 1) : NULL;
    int conv = g ? find_op(g, IR_OP_CONV, 0) : -1;
    CHECK(conv >= 0 && g->nodes[conv].iattr[1] == 300000); /* the stride: the sum */
    ir_free(g);
    fe_free(p);

    /* calls nested past the limit inside a sum still are */
    len = 0;
    append(&src, &len, &cap, NET_HEAD "network n {\n  x = image + ");
    for (int i = 0; i < 101; i++) append(&src, &len, &cap, "relu(");
    append(&src, &len, &cap, "image");
    for (int i = 0; i < 101; i++) append(&src, &len, &cap, ")");
    append(&src, &len, &cap, "\n" NET_TAIL);
    p = parse(src);
    CHECK_MSG(p == NULL && strstr(errbuf, "nested too deeply (more than 100 levels)"), "%s",
              errbuf);
    fe_free(p);

    /* each block doubles the work of the next: stopped, not run for ages */
    len = 0;
    append(&src, &len, &cap, NET_HEAD "block b0(x) { return relu(x) }\n");
    for (int i = 1; i < 40; i++) {
        snprintf(line, sizeof line, "block b%d(x) { return b%d(b%d(x)) }\n", i, i - 1, i - 1);
        append(&src, &len, &cap, line);
    }
    append(&src, &len, &cap, "network n {\n  x = b39(image)\n" NET_TAIL);
    p = parse(src);
    CHECK_MSG(p == NULL && strstr(errbuf, "too large"), "%s", errbuf);
    fe_free(p);

    /* block calls nested deeper than the limit */
    len = 0;
    append(&src, &len, &cap, NET_HEAD "block b0(x) { return relu(x) }\n");
    for (int i = 1; i < 80; i++) {
        snprintf(line, sizeof line, "block b%d(x) { return b%d(x) }\n", i, i - 1);
        append(&src, &len, &cap, line);
    }
    append(&src, &len, &cap, "network n {\n  x = b79(image)\n" NET_TAIL);
    p = parse(src);
    CHECK_MSG(p == NULL && strstr(errbuf, "nested too deeply"), "%s", errbuf);
    fe_free(p);

    /* parameter names longer than the IR allows */
    len = 0;
    append(&src, &len, &cap,
           NET_HEAD "block a_rather_long_block_name_indeed(x) { return conv(x, 2, k=1) }\n"
                    "block another_long_block_name(x) { return "
                    "a_rather_long_block_name_indeed(x) }\n"
                    "network n {\n  x = another_long_block_name(image)\n" NET_TAIL);
    p = parse(src);
    CHECK_MSG(p == NULL && strstr(errbuf, "is too long"), "%s", errbuf);
    fe_free(p);

    /* tensors too large to ever allocate */
    p = parse("input image[16777216, 16777216, 16777216]\ninput label class(2)\n"
              "network n { loss = softmax_cross_entropy(dense(flatten(image), 2), label) }");
    CHECK_MSG(p == NULL && strstr(errbuf, "too large"), "%s", errbuf);
    fe_free(p);
    free(src);

    /* the API on bad arguments */
    CHECK(fe_build_graph(NULL, 1, 1) == NULL);
    fe_free(NULL);
    p = parse(small_net);
    CHECK(p != NULL);
    if (p) {
        ir_graph *g;
        CAPTURE(g, fe_build_graph(p, 0, 1));
        CHECK(g == NULL && strstr(errbuf, "batch size 0"));
    }
    fe_free(p);
    p = parse("network n {\0}");
    CHECK(p == NULL);
    CAPTURE(p, fe_parse_string("t.net", "network n {\0}", 13));
    CHECK(p == NULL && !strcmp(errbuf, "t.net:1:1: error: not a text file\n"));
    CAPTURE(p, fe_parse_string("t.net", "\xed\xa0\x80", 3)); /* a UTF-16 surrogate */
    CHECK(p == NULL && !strcmp(errbuf, "t.net:1:1: error: not a text file\n"));
}

/* Every golden error file fails to parse (or elaborate) with one line. */
TEST(golden_files_fail_with_one_line) {
    DIR *d = opendir("tests/golden/errors");
    CHECK(d != NULL);
    if (!d) return;
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d))) {
        size_t len = strlen(e->d_name);
        if (len < 5 || strcmp(e->d_name + len - 4, ".net")) continue;
        char path[512];
        snprintf(path, sizeof path, "tests/golden/errors/%s", e->d_name);
        fe_program *p;
        CAPTURE(p, fe_parse_file(path));
        const fe_program *q = p;
        if (p) { /* errors that only a second build would find */
            ir_graph *g;
            CAPTURE(g, fe_build_graph(p, fe_train(p)->eval_batch, 0));
            q = g ? p : NULL;
            ir_free(g);
        }
        CHECK_MSG(q == NULL, "%s parsed", path);
        fe_free(p);
        char *nl = strchr(errbuf, '\n');
        CHECK_MSG(nl && nl[1] == 0 && !strncmp(errbuf, path, strlen(path)), "%s: %s", path, errbuf);
        n++;
    }
    closedir(d);
    CHECK(n >= 35);
}

/* Truncations and byte mutations of a real model never crash or leak. */
TEST(truncated_and_mutated_sources) {
    size_t len;
    char *src = read_file("models/cnn_small.net", &len);
    CHECK(src != NULL);
    if (!src) return;
    int ok = 0;
    for (size_t cut = 0; cut < len; cut += 3) {
        fe_program *p;
        CAPTURE(p, fe_parse_string("t.net", src, cut));
        ok += p != NULL;
        if (!p) CHECK_MSG(strchr(errbuf, '\n') && strchr(errbuf, '\n')[1] == 0, "cut %zu", cut);
        fe_free(p);
    }
    CHECK(ok > 0); /* cuts between the network and the train section parse */
    char *buf = malloc(len);
    uint32_t seed = 12345;
    static const char alphabet[] = "(){}[],=:;+-#.\n 0123456789abcxyz_\x01\xc3";
    for (int trial = 0; trial < 3000; trial++) {
        memcpy(buf, src, len);
        for (int k = 0; k < 1 + trial % 3; k++) {
            seed = seed * 1664525u + 1013904223u;
            size_t at = (seed >> 8) % len;
            seed = seed * 1664525u + 1013904223u;
            buf[at] = alphabet[(seed >> 8) % (sizeof alphabet - 1)];
        }
        fe_program *p;
        CAPTURE(p, fe_parse_string("t.net", buf, len));
        if (p) {
            ir_graph *g;
            CAPTURE(g, fe_build_graph(p, 3, 0));
            CHECK(g != NULL);
            ir_free(g);
        } else {
            char *nl = strchr(errbuf, '\n');
            CHECK_MSG(nl && nl[1] == 0, "trial %d: %s", trial, errbuf);
        }
        fe_free(p);
    }
    free(buf);
    free(src);
}

/* The parameters positions, class_token and scaled_init make
 * (tests/nets/gpt_tiny.net, vit_tiny.net): names, shapes (the whole
 * position table), initialisers. */
static void check_param(const ir_graph *g, const char *name, int64_t d0, int64_t d1, int init) {
    int found = 0;
    for (int i = 0; i < g->n; i++) {
        const ir_node *n = &g->nodes[i];
        if (n->op != IR_OP_PARAM || strcmp(n->name, name)) continue;
        found = 1;
        CHECK_MSG(n->type.ndim == 2 && n->type.dim[0] == d0 && n->type.dim[1] == d1 &&
                      n->iattr[0] == init,
                  "%s: [%lld, %lld] init %lld", name, (long long)n->type.dim[0],
                  (long long)n->type.dim[1], (long long)n->iattr[0]);
    }
    CHECK_MSG(found, "no parameter %s", name);
}

TEST(positions_class_token_scaled_params) {
    fe_program *p = fe_parse_file("tests/nets/gpt_tiny.net");
    ir_graph *g = p ? fe_build_graph(p, 4, 1) : NULL;
    CHECK(g != NULL);
    if (g) {
        check_param(g, "positions0.weight", 24, 32, IR_INIT_NORMAL);
        check_param(g, "dense0.weight", 96, 32, IR_INIT_XAVIER);
        check_param(g, "dense1.weight", 32, 32, IR_INIT_SCALED);
        check_param(g, "dense3.weight", 32, 64, IR_INIT_SCALED);
    }
    ir_free(g);
    fe_free(p);
    p = fe_parse_file("tests/nets/vit_tiny.net");
    g = p ? fe_build_graph(p, 4, 1) : NULL;
    CHECK(g != NULL);
    if (g) {
        check_param(g, "class_token0.weight", 1, 24, IR_INIT_ZERO);
        check_param(g, "positions0.weight", 65, 24, IR_INIT_NORMAL);
    }
    ir_free(g);
    fe_free(p);
}

int main(void) {
    RUN(models_parse_and_count_params);
    RUN(positions_class_token_scaled_params);
    RUN(models_from_strings);
    RUN(resnet18_schedule);
    RUN(small_net_parameter_names_and_order);
    RUN(names_independent_of_batch_and_mode);
    RUN(batchnorm_training_flag_per_mode);
    RUN(positions_and_labels);
    RUN(arguments_defaults_and_arithmetic);
    RUN(constants_and_arithmetic);
    RUN(repeat_statements);
    RUN(activations_and_mul);
    RUN(tanh_and_gelu);
    RUN(int_inputs);
    RUN(conv_groups);
    RUN(shape_operators);
    RUN(concat_call);
    RUN(dropout_call);
    RUN(train_section_variants);
    RUN(error_messages);
    RUN(limits);
    RUN(batchnorm_gamma_init);
    RUN(batchnorm_without_affine);
    RUN(golden_files_fail_with_one_line);
    RUN(truncated_and_mutated_sources);
    return harness_done();
}
