/* tests/unit/test_fuse.c — the fusion pass and fused kernels.
 *
 * Structure: which nodes a graph's groups hold, the rules that refuse a
 * merge (a cycle through another group, a read of a value an assign
 * overwrote, a shape the kernel cannot loop over), contiguity, the dump,
 * the DOT clusters and the plan file's GRPS section.
 *
 * Invariance (docs/DESIGN.md §5: every pass leaves results unchanged): two training
 * steps and an eval pass of every model with fusion on and off and memory
 * planning on and off give BIT-IDENTICAL losses, logits, gradients,
 * parameters, momenta and BatchNorm statistics: the fused kernels evaluate
 * the same expressions in the same order (reductions accumulate in the
 * same (n, j) order), and modules are compiled with -ffp-contract=off. The
 * same holds on random chains of pointwise ops and reductions.
 */
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "codegen/codegen.h"
#include "frontend/frontend.h"
#include "format/plan.h"
#include "passes/passes.h"
#include "runtime/runtime.h"
#include "tests/graphs.h"
#include "tests/harness.h"
#include "tests/passcheck.h"

static char err[4096];

/* Members of node i's group, as "op op op" (or the op alone). */
static const char *group_of(const ir_graph *g, int i, char *buf, size_t n) {
    size_t used = 0;
    buf[0] = 0;
    int grp = g->nodes[i].group;
    for (int j = 0; j < g->n && used < n; j++)
        if (j == i || (grp && g->nodes[j].group == grp))
            used += (size_t)snprintf(buf + used, n - used, "%s%s", used ? " " : "",
                                     ir_ops[g->nodes[j].op].name);
    return buf;
}

static int count_groups_with(const ir_graph *g, const char *ops) {
    int count = 0;
    char buf[512];
    for (int grp = 1; grp <= ir_num_groups(g); grp++)
        for (int i = 0; i < g->n; i++)
            if (g->nodes[i].group == grp) {
                count += !strcmp(group_of(g, i, buf, sizeof buf), ops);
                break;
            }
    return count;
}

/* ---- structure ------------------------------------------------------------------------ */

/* conv -> batchnorm (lowered) -> relu, through the whole training pipeline. */
static ir_graph *bn_relu_net(int residual) {
    ir_graph *g = ir_new();
    int x = ir_add_input(g, "image", ir_shape4(4, 3, 6, 6), 0);
    int lab = ir_add_input(g, "label", (ir_type){1, {4}, IR_I32}, 5);
    int w = ir_add_param(g, "conv.weight", ir_shape4(3, 3, 3, 3), IR_INIT_XAVIER);
    int ga = ir_add_param(g, "bn.gamma", ir_shape1(3), IR_INIT_ONE);
    int bt = ir_add_param(g, "bn.beta", ir_shape1(3), IR_INIT_ZERO);
    int rm = ir_add_state(g, "bn.running_mean", ir_shape1(3), IR_INIT_ZERO);
    int rv = ir_add_state(g, "bn.running_var", ir_shape1(3), IR_INIT_ONE);
    int fw = ir_add_param(g, "fc.weight", ir_shape2(5, 3), IR_INIT_XAVIER);
    int c = N(CONV, x, w), (int64_t[]){3, 1, 1, 1}, NULL);
    int bn = N(BATCHNORM, c, ga, bt, rm, rv), IA(1), FA(1e-5, 0.9));
    int r = residual ? N(ADD, x, bn), NULL, NULL) : bn;
    r = N(RELU, r), NULL, NULL);
    int gp = N(GLOBAL_AVGPOOL, r), NULL, NULL);
    int fc = N(DENSE, gp, fw), NULL, NULL);
    int loss = N(SOFTMAX_CE, fc, lab), NULL, NULL);
    g->nodes[loss].flags |= IR_FLAG_LOSS | IR_FLAG_OUTPUT;
    snprintf(g->nodes[loss].name, IR_NAME_MAX, "loss");
    g->nodes[fc].flags |= IR_FLAG_OUTPUT;
    snprintf(g->nodes[fc].name, IR_NAME_MAX, "logits");
    return g;
}

TEST(groups_of_a_training_step) {
    for (int residual = 0; residual < 2; residual++) {
        ir_graph *g = bn_relu_net(residual);
        pass_options o = pass_default_options();
        CHECK(pass_run_train(&g, NULL, &o, err, sizeof err) == 0);
        CHECK(ir_verify(g, err, sizeof err) == 0);
        /* forward BatchNorm: statistics, normalise, running statistics, relu */
        CHECK(count_groups_with(
                  g, residual ? "bn_mean bn_var bn_apply ema ema add relu assign assign"
                              : "bn_mean bn_var bn_apply ema ema relu assign assign") == 1);
        /* loss and its gradient */
        CHECK(count_groups_with(g, "softmax_cross_entropy ones_like softmax_ce_grad") == 1);
        /* backward BatchNorm */
        CHECK(count_groups_with(
                  g, "global_avgpool_grad relu_grad bn_grad_gamma bias_grad bn_grad_data") == 1);
        /* every update reads its gradient's all-reduced sum (partition), so
         * none joins the backward kernels: one kernel per parameter */
        CHECK(count_groups_with(g, "sgd_momentum add assign assign") == 4);
        /* opaque ops stay alone */
        for (int i = 0; i < g->n; i++)
            if (ir_ops[g->nodes[i].op].fuse == IR_FUSE_OPAQUE ||
                ir_ops[g->nodes[i].op].fuse == IR_FUSE_WINDOW)
                CHECK(g->nodes[i].group == 0);
        ir_free(g);
    }
}

/* Two branches where joining both chains would need group A before and
 * after group B: a1 -> b1 and b2 -> a2 with a and b pointwise. */
TEST(no_cycle_through_another_group) {
    ir_graph *g = ir_new();
    int x = ir_add_input(g, "x", ir_shape2(2, 3), 0);
    int w = ir_add_param(g, "w", ir_shape2(3, 3), IR_INIT_XAVIER);
    int a1 = N(RELU, x), NULL, NULL);
    int d1 = N(DENSE, a1, w), NULL, NULL);  /* opaque between a1 and b */
    int b1 = N(RELU, d1), NULL, NULL);
    int b2 = N(ADD, b1, d1), NULL, NULL);
    int d2 = N(DENSE, b2, w), NULL, NULL);
    int a2 = N(ADD, a1, d2), NULL, NULL); /* a1 and a2 would be one group: a cycle via d1, d2 */
    g->nodes[a2].flags |= IR_FLAG_OUTPUT;
    CHECK(pass_fuse(&g, err, sizeof err) == 0);
    CHECK(ir_verify(g, err, sizeof err) == 0);
    int ia1 = -1, ia2 = -1;
    for (int i = 0; i < g->n; i++) {
        if (g->nodes[i].op == IR_OP_RELU && g->nodes[g->nodes[i].input[0]].op == IR_OP_INPUT)
            ia1 = i;
        if (g->nodes[i].op == IR_OP_ADD && g->nodes[i].flags & IR_FLAG_OUTPUT) ia2 = i;
    }
    CHECK(ia1 >= 0 && ia2 >= 0);
    CHECK(g->nodes[ia1].group == 0 || g->nodes[ia1].group != g->nodes[ia2].group);
    /* b1 and b2 do fuse */
    CHECK(count_groups_with(g, "relu add") == 1);
    (void)b2;
    ir_free(g);
}

/* An assign overwrites a parameter: a reader outside its group must run
 * first, whatever order fusion picks. */
TEST(assign_waits_for_readers) {
    ir_graph *g = ir_new();
    int x = ir_add_input(g, "x", ir_shape2(2, 3), 0);
    int w = ir_add_param(g, "w", ir_shape2(2, 3), IR_INIT_XAVIER);
    int r = N(RELU, x), NULL, NULL);
    int s = N(ADD, r, w), NULL, NULL);    /* reads w */
    int w2 = N(RELU, r), NULL, NULL);
    N(ASSIGN, w, w2), NULL, NULL);        /* may join r's group, but after s */
    int t = N(ADD, s, s), NULL, NULL);
    g->nodes[t].flags |= IR_FLAG_OUTPUT;
    CHECK(pass_fuse(&g, err, sizeof err) == 0);
    CHECK(ir_verify(g, err, sizeof err) == 0); /* assign after every read of w */
    ir_free(g);
}

TEST(dump_dot_and_plan_show_groups) {
    ir_graph *g = bn_relu_net(1);
    pass_options o = pass_default_options();
    CHECK(pass_run_train(&g, NULL, &o, err, sizeof err) == 0);
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    ir_dump(g, f);
    fclose(f);
    CHECK(strstr(text,
                 "# kernel g1: 9 ops: bn_mean bn_var bn_apply ema ema add relu assign assign\n"));
    CHECK(strstr(text, " @g1\n") || strstr(text, " @g1  #"));
    free(text);
    text = NULL;
    f = open_memstream(&text, &len);
    ir_dot(g, "net", f);
    fclose(f);
    CHECK(strstr(text, "subgraph cluster_g1 {") &&
          strstr(text, "label=\"kernel g1: bn_mean bn_var"));
    free(text);
    /* the plan file keeps the groups */
    dpc_plan plan = {0};
    ir_train_defaults(&plan.schedule);
    plan.schedule.batch = plan.schedule.eval_batch = 4; /* the graphs' (ir/validate.h) */
    plan.train = g;
    plan.eval = bn_relu_net(0);
    for (int i = 0; i < plan.eval->n; i++) /* an eval program: inference batchnorm */
        if (plan.eval->nodes[i].op == IR_OP_BATCHNORM) plan.eval->nodes[i].iattr[0] = 0;
    CHECK(pass_run_eval(&plan.eval, &o, err, sizeof err) == 0);
    snprintf(plan.model, sizeof plan.model, "net");
    char path[] = "/tmp/dpc-fuse-XXXXXX";
    int fd = mkstemp(path);
    CHECK(fd >= 0);
    close(fd);
    CHECK_MSG(plan_write(&plan, path, err, sizeof err) == 0, "%s", err);
    dpc_plan *back = plan_read(path, err, sizeof err);
    CHECK(back != NULL);
    if (back) {
        CHECK(back->train->n == g->n && back->eval->n == plan.eval->n);
        for (int i = 0; i < g->n && i < back->train->n; i++)
            CHECK(back->train->nodes[i].group == g->nodes[i].group);
        for (int i = 0; i < plan.eval->n && i < back->eval->n; i++)
            CHECK(back->eval->nodes[i].group == plan.eval->nodes[i].group);
        CHECK(ir_graph_hash(back->train) == ir_graph_hash(g));
        CHECK(plan_find_section(back, "GRPS") == NULL); /* not an extra section */
        CHECK(plan_add_section(back, "GRPS", "x", 1) == -1);
        plan_free(back);
    }
    unlink(path);
    ir_free(plan.eval);
    ir_free(g);
}

/* The activations and products are pointwise: a chain fuses into one
 * kernel, the per-channel factor read from memory (its [N,C] producer is a
 * group of its own shape); concat and dropout stay alone. */
TEST(activations_and_products_fuse) {
    ir_graph *g = ir_new();
    int x = ir_add_input(g, "x", ir_shape4(2, 4, 3, 3), 0);
    int s = ir_add_input(g, "s", ir_shape2(2, 4), 0);
    int key = ir_add_input(g, "dropout_key", ir_shape1(4), 0);
    int sg = N(SIGMOID, s), NULL, NULL);
    int r = N(RELU, x), NULL, NULL);
    int m = N(MUL_CHANNEL, r, sg), NULL, NULL);
    int c = N(CLIP, m), NULL, FA(0, 6));
    int y = N(MUL, c, r), NULL, NULL);
    int cat = N(CONCAT, y, x), IA(1), NULL);
    int d = N(DROPOUT, cat, key), IA(0), FA(0.5));
    g->nodes[d].flags |= IR_FLAG_OUTPUT;
    CHECK(pass_fuse(&g, err, sizeof err) == 0);
    CHECK(count_groups_with(g, "relu mul_channel clip mul") == 1);
    for (int i = 0; i < g->n; i++) {
        ir_op op = g->nodes[i].op;
        if (op == IR_OP_CONCAT || op == IR_OP_DROPOUT) CHECK(g->nodes[i].group == 0);
    }
    ir_free(g);
}

TEST(verify_refuses_split_groups) {
    ir_graph *g = ir_new();
    int x = ir_add_input(g, "x", ir_shape1(4), 0);
    int a = N(RELU, x), NULL, NULL);
    int b = N(RELU, a), NULL, NULL);
    int c = N(RELU, b), NULL, NULL);
    g->nodes[a].group = g->nodes[c].group = 1;
    CHECK(ir_verify(g, err, sizeof err) == -1 && strstr(err, "not contiguous"));
    g->nodes[b].group = 1;
    CHECK(ir_verify(g, err, sizeof err) == 0);
    g->nodes[x].group = 1;
    CHECK(ir_verify(g, err, sizeof err) == -1 && strstr(err, "cannot be in a fusion group"));
    ir_free(g);
}

/* ---- invariance ------------------------------------------------------------------------ */

/* The model at the given batch: fusion on and off, memory planning on and
 * off, each against neither (tests/passcheck.h). */
static void check_invariance(const char *model, int batch) {
    static const char *const specs[4] = {
        "lower,autodiff,optimizer,partition,precision",
        "lower,autodiff,optimizer,partition,precision,fuse",
        "lower,autodiff,optimizer,partition,precision,memplan",
        "lower,autodiff,optimizer,partition,precision,fuse,memplan",
    };
    for (int m = 1; m < 4; m++)
        CHECK_MSG(pc_same(model, batch, specs[m], specs[0]), "%s", specs[m]);
}

TEST(mlp_is_invariant) { check_invariance("models/mlp.net", 8); }
TEST(cnn_small_is_invariant) { check_invariance("models/cnn_small.net", 8); }
/* sigmoid, clip, relu6, mul, grouped conv, concat, dropout (tests/nets) */
TEST(se_small_is_invariant) { check_invariance("tests/nets/se_small.net", 4); }
TEST(attn_small_is_invariant) { check_invariance("tests/nets/attn_small.net", 4); }
TEST(arith_small_is_invariant) { check_invariance("tests/nets/arith_small.net", 4); }
TEST(shape_small_is_invariant) { check_invariance("tests/nets/shape_small.net", 4); }
TEST(attn_fused_is_invariant) { check_invariance("tests/nets/attn_fused.net", 4); }
TEST(resnet18_is_invariant) { check_invariance("models/resnet18.net", 4); }
TEST(resnet18_cifar_is_invariant) { check_invariance("models/resnet18_cifar.net", 2); }

/* The contract fuse.c groups by and fused.c renders by (ir/ir.h):
 * BatchNorm's mean, variance and a stored normalised value are three
 * passes over a channel; a [C] update runs between them; channel and row
 * reductions never share a group; i32 values never fuse. */
TEST(fusion_contract_levels) {
    ir_graph *g = ir_new();
    int x = ir_add_input(g, "x", ir_shape4(2, 3, 4, 4), 0);
    int ga = ir_add_param(g, "gamma", ir_shape1(3), IR_INIT_ONE);
    int bt = ir_add_param(g, "beta", ir_shape1(3), IR_INIT_ZERO);
    int lab = ir_add_input(g, "label", (ir_type){1, {2}, IR_I32}, 10);
    int mean = N(BN_MEAN, x), NULL, NULL);
    int var = N(BN_VAR, x, mean), NULL, NULL);
    int y = N(BN_APPLY, x, mean, var, ga, bt), NULL, FA(1e-5));
    int r = N(RELU, y), NULL, NULL);
    const ir_type *X = &g->nodes[x].type;
    int member[] = {mean, var, y, r}, level[4];
    unsigned char stored[] = {1, 1, 0, 1};
    CHECK(ir_channel_levels(g, member, 4, stored, X, level) == 3);
    CHECK(level[0] == 1 && level[1] == 2 && level[2] == 2 && level[3] == 2);
    CHECK(ir_channel_role(&g->nodes[mean], X) == IR_ROLE_REDUCTION);
    CHECK(ir_channel_role(&g->nodes[r], X) == IR_ROLE_ELEMENTS);
    CHECK(ir_channel_role(&g->nodes[ga], X) == IR_ROLE_PER_CHANNEL);
    stored[3] = 0; /* nothing X-shaped stored: the statistics' two passes */
    CHECK(ir_channel_levels(g, member, 4, stored, X, level) == 2);
    CHECK(ir_node_fuse_class(&g->nodes[mean]) == IR_FUSE_CHANNEL &&
          ir_node_fuse_class(&g->nodes[r]) == IR_FUSE_POINTWISE);
    CHECK(ir_node_fuse_class(&g->nodes[x]) == IR_FUSE_NONE &&
          ir_node_fuse_class(&g->nodes[lab]) == IR_FUSE_NONE);
    CHECK(ir_group_kind_of(1, 1) == -1 && ir_group_kind_of(0, 0) == IR_GROUP_ELEMENTWISE);
    CHECK(ir_group_kind_of(2, 0) == IR_GROUP_CHANNEL && ir_group_kind_of(0, 1) == IR_GROUP_ROW);
    ir_free(g);
}

int main(void) {
    pc_backend = rt_backend_cpu();
    RUN(groups_of_a_training_step);
    RUN(no_cycle_through_another_group);
    RUN(activations_and_products_fuse);
    RUN(assign_waits_for_readers);
    RUN(dump_dot_and_plan_show_groups);
    RUN(verify_refuses_split_groups);
    RUN(fusion_contract_levels);
    RUN(mlp_is_invariant);
    RUN(cnn_small_is_invariant);
    RUN(se_small_is_invariant);
    RUN(attn_small_is_invariant);
    RUN(arith_small_is_invariant);
    RUN(shape_small_is_invariant);
    RUN(attn_fused_is_invariant);
    RUN_TIER("test", resnet18_is_invariant);
    RUN(resnet18_cifar_is_invariant);
    rt_backend_free(pc_backend);
    return harness_done();
}
