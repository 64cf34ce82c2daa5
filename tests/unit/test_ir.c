/* Tests for ir/: op table, shape rules, verifier, text form, schedule checks. */
#include <math.h>
#include <stdlib.h>

#include "base/err.h"
#include "base/hash.h"
#include "ir/ir.h"
#include "tests/harness.h"

static char err[256];

static int conv(ir_graph *g, int x, int cout, int cin, int k, int s, int p) {
    char name[32];
    snprintf(name, sizeof name, "w%d", g->n);
    int w = ir_add_param(g, name, ir_shape4(cout, cin, k, k), IR_INIT_XAVIER);
    return ir_add_node(g, IR_OP_CONV, (int[]){x, w}, 2, (int64_t[]){k, s, p, 1}, NULL, err,
                       sizeof err);
}

TEST(op_table_lookup) {
    CHECK(ir_op_by_name("conv") == IR_OP_CONV);
    CHECK(ir_op_by_name("softmax_cross_entropy") == IR_OP_SOFTMAX_CE);
    CHECK(ir_op_by_name("conv2") == -1);
    CHECK(ir_op_num_iattrs(IR_OP_CONV) == 4);
    CHECK(ir_op_num_fattrs(IR_OP_BATCHNORM) == 2);
    CHECK(ir_op_num_iattrs(IR_OP_RELU) == 0);
    char buf[16];
    CHECK_STR(ir_op_attr_name(IR_OP_CONV, 0, 1, buf, sizeof buf), "s");
    CHECK_STR(ir_op_attr_name(IR_OP_BATCHNORM, 1, 1, buf, sizeof buf), "momentum");
    CHECK_STR(ir_op_attr_name(IR_OP_RELU, 0, 0, buf, sizeof buf), "");
    for (int i = 0; i < IR_OP_COUNT; i++) CHECK(ir_ops[i].min_arity <= ir_ops[i].max_arity);
}

/* The op table's fusion class is the one classification: an op is
 * POINTWISE exactly when it has a per-element expression, sources are
 * NONE, and an op outside the table is NONE. */
TEST(fusion_class_agrees_with_expressions) {
    for (int i = 0; i < IR_OP_COUNT; i++) {
        CHECK_MSG((ir_op_fuse(i) == IR_FUSE_POINTWISE) == (ir_op_expr(i) != NULL), "op %s",
                  ir_ops[i].name);
        if (ir_is_source(i) || ir_is_view(i))
            CHECK_MSG(ir_op_fuse(i) == IR_FUSE_NONE, "op %s", ir_ops[i].name);
    }
    CHECK(ir_op_fuse(IR_OP_BN_MEAN) == IR_FUSE_CHANNEL &&
          ir_op_fuse(IR_OP_SOFTMAX_CE) == IR_FUSE_ROW);
    CHECK(ir_op_fuse(IR_OP_CONV) == IR_FUSE_OPAQUE && ir_op_fuse(IR_OP_MAXPOOL) == IR_FUSE_WINDOW);
    CHECK(ir_op_fuse(IR_OP_COUNT) == IR_FUSE_NONE);
}

/* Plan files store ops by index: the table's order is part of the format.
 * A new op is appended at the end (extend this list), never inserted, or
 * PLAN_VERSION (format/plan.h) is bumped. */
TEST(op_order_is_pinned) {
    static const char *const order[] = {"input",
                                        "param",
                                        "state",
                                        "conv",
                                        "bias_add",
                                        "batchnorm",
                                        "relu",
                                        "add",
                                        "maxpool",
                                        "avgpool",
                                        "global_avgpool",
                                        "flatten",
                                        "dense",
                                        "softmax_cross_entropy",
                                        "bn_mean",
                                        "bn_var",
                                        "bn_apply",
                                        "ema",
                                        "assign",
                                        "ones_like",
                                        "conv_grad_data",
                                        "conv_grad_weight",
                                        "bias_grad",
                                        "bn_grad_gamma",
                                        "bn_grad_data",
                                        "relu_grad",
                                        "maxpool_grad",
                                        "avgpool_grad",
                                        "global_avgpool_grad",
                                        "reshape_like",
                                        "dense_grad_data",
                                        "dense_grad_weight",
                                        "softmax_ce_grad",
                                        "sgd_momentum",
                                        "allreduce",
                                        "transpose",
                                        "scale",
                                        "bn_unbias",
                                        "sumsq",
                                        "lars_lr",
                                        "adam_m",
                                        "adam_v",
                                        "bias_correction",
                                        "adam_dir",
                                        "lamb_lr",
                                        "descend",
                                        "sigmoid",
                                        "sigmoid_grad",
                                        "clip",
                                        "clip_grad",
                                        "mul",
                                        "mul_channel",
                                        "plane_dot",
                                        "concat",
                                        "channel_slice",
                                        "dropout",
                                        "tanh",
                                        "tanh_grad",
                                        "gelu",
                                        "gelu_grad",
                                        "gelu_tanh",
                                        "gelu_tanh_grad",
                                        "layernorm",
                                        "layernorm_stats",
                                        "layernorm_grad_data",
                                        "layernorm_grad_gamma",
                                        "sum_leading",
                                        "softmax",
                                        "softmax_grad",
                                        "embedding",
                                        "embedding_grad",
                                        "bias_add_last",
                                        "matmul",
                                        "seq_cross_entropy",
                                        "seq_ce_grad",
                                        "sub",
                                        "mul_const",
                                        "add_const",
                                        "reshape",
                                        "permute",
                                        "slice",
                                        "slice_grad",
                                        "causal_mask",
                                        "pad_mask",
                                        "attention",
                                        "attention_lse",
                                        "attention_grad",
                                        "clip_scale",
                                        "positions",
                                        "positions_grad"};
    CHECK(IR_OP_COUNT == (int)(sizeof order / sizeof *order));
    for (int i = 0; i < IR_OP_COUNT && i < (int)(sizeof order / sizeof *order); i++)
        CHECK_MSG(!strcmp(ir_ops[i].name, order[i]), "op %d is %s, the plan format says %s", i,
                  ir_ops[i].name, order[i]);
}

TEST(conv_and_pool_shapes) {
    ir_graph *g = ir_new();
    int x = ir_add_input(g, "image", ir_shape4(128, 3, 32, 32), 0);
    int c = conv(g, x, 64, 3, 7, 2, 3);
    CHECK(c >= 0);
    char buf[64];
    CHECK_STR(ir_type_str(&g->nodes[c].type, buf, sizeof buf), "[128,64,16,16]");
    int m = ir_add_node(g, IR_OP_MAXPOOL, &c, 1, (int64_t[]){3, 2, 1}, NULL, err, sizeof err);
    CHECK_STR(ir_type_str(&g->nodes[m].type, buf, sizeof buf), "[128,64,8,8]");
    int d = conv(g, m, 128, 64, 1, 2, 0);
    CHECK_STR(ir_type_str(&g->nodes[d].type, buf, sizeof buf), "[128,128,4,4]");
    int gp = ir_add_node(g, IR_OP_GLOBAL_AVGPOOL, &d, 1, NULL, NULL, err, sizeof err);
    CHECK_STR(ir_type_str(&g->nodes[gp].type, buf, sizeof buf), "[128,128]");
    int f = ir_add_node(g, IR_OP_FLATTEN, &m, 1, NULL, NULL, err, sizeof err);
    CHECK_STR(ir_type_str(&g->nodes[f].type, buf, sizeof buf), "[128,4096]");
    int a = ir_add_node(g, IR_OP_AVGPOOL, &c, 1, (int64_t[]){2, 2, 0}, NULL, err, sizeof err);
    CHECK_STR(ir_type_str(&g->nodes[a].type, buf, sizeof buf), "[128,64,8,8]");
    CHECK(ir_verify(g, err, sizeof err) == 0);
    ir_free(g);
}

TEST(shape_errors_name_the_shapes) {
    ir_graph *g = ir_new();
    int x = ir_add_input(g, "image", ir_shape4(8, 3, 32, 32), 0);
    int y = ir_add_input(g, "other", ir_shape4(8, 3, 16, 16), 0);
    CHECK(ir_add_node(g, IR_OP_ADD, (int[]){x, y}, 2, NULL, NULL, err, sizeof err) == -1);
    CHECK_STR(err, "add: shapes differ: [8,3,32,32] vs [8,3,16,16]");
    int w = ir_add_param(g, "dw", ir_shape2(10, 3072), IR_INIT_XAVIER);
    CHECK(ir_add_node(g, IR_OP_DENSE, (int[]){x, w}, 2, NULL, NULL, err, sizeof err) == -1);
    CHECK(strstr(err, "use flatten") != NULL);
    CHECK(conv(g, x, 16, 4, 3, 1, 1) == -1); /* channel mismatch */
    CHECK(strstr(err, "does not fit") != NULL);
    CHECK(conv(g, y, 16, 3, 40, 1, 1) == -1); /* kernel larger than input */
    CHECK(strstr(err, "larger than the padded input") != NULL);
    CHECK(conv(g, x, 16, 3, 3, 0, 1) == -1);
    CHECK_STR(err, "conv: stride must be positive, got 0");
    int lbl = ir_add_input(g, "label", (ir_type){1, {8}, IR_I32}, 10);
    int f = ir_add_node(g, IR_OP_FLATTEN, &x, 1, NULL, NULL, err, sizeof err);
    int w2 = ir_add_param(g, "dw2", ir_shape2(7, 3072), IR_INIT_XAVIER);
    int logits = ir_add_node(g, IR_OP_DENSE, (int[]){f, w2}, 2, NULL, NULL, err, sizeof err);
    CHECK(logits >= 0);
    CHECK(ir_add_node(g, IR_OP_SOFTMAX_CE, (int[]){logits, lbl}, 2, NULL, NULL, err, sizeof err) ==
          -1);
    CHECK(strstr(err, "7 logits per sample but 10 classes") != NULL);
    CHECK(ir_add_node(g, IR_OP_RELU, (int[]){lbl}, 1, NULL, NULL, err, sizeof err) == -1);
    CHECK(ir_add_node(g, IR_OP_RELU, (int[]){x, x}, 2, NULL, NULL, err, sizeof err) == -1);
    CHECK(ir_add_node(g, IR_OP_RELU, (int[]){99}, 1, NULL, NULL, err, sizeof err) == -1);
    ir_free(g);
}

/* sigmoid, clip, mul and the per-channel product: shapes, bounds, broadcast. */
TEST(activation_and_product_shapes) {
    ir_graph *g = ir_new();
    int x = ir_add_input(g, "x", ir_shape4(2, 3, 4, 4), 0);
    int lbl = ir_add_input(g, "label", (ir_type){1, {2}, IR_I32}, 10);
    int s4 = ir_add_input(g, "s4", ir_shape4(2, 3, 1, 1), 0);
    int s2 = ir_add_input(g, "s2", ir_shape2(2, 3), 0);
    int bad = ir_add_input(g, "bad", ir_shape4(2, 4, 1, 1), 0);
    int wide = ir_add_input(g, "wide", ir_shape4(2, 3, 2, 1), 0);
    char buf[64];
    int y = ir_add_node(g, IR_OP_SIGMOID, &x, 1, NULL, NULL, err, sizeof err);
    CHECK(y >= 0 && ir_type_same_shape(&g->nodes[y].type, &g->nodes[x].type));
    CHECK(ir_add_node(g, IR_OP_SIGMOID, &lbl, 1, NULL, NULL, err, sizeof err) == -1);
    CHECK_STR(err, "sigmoid: input must be a float tensor, got [2]:i32");
    CHECK(ir_add_node(g, IR_OP_CLIP, &x, 1, NULL, (double[]){0, 6}, err, sizeof err) >= 0);
    CHECK(ir_add_node(g, IR_OP_CLIP, &x, 1, NULL, (double[]){1, 1}, err, sizeof err) >= 0);
    CHECK(ir_add_node(g, IR_OP_CLIP, &x, 1, NULL, (double[]){2, 1}, err, sizeof err) == -1);
    CHECK_STR(err, "clip: lower bound 2 is above the upper bound 1");
    CHECK(ir_add_node(g, IR_OP_CLIP, &x, 1, NULL, (double[]){-INFINITY, 1}, err, sizeof err) == -1);
    CHECK(strstr(err, "bounds must be finite") != NULL);
    CHECK(ir_add_node(g, IR_OP_CLIP_GRAD, (int[]){x, x}, 2, NULL, (double[]){3, 1}, err,
                      sizeof err) == -1);
    CHECK(ir_add_node(g, IR_OP_MUL, (int[]){x, x}, 2, NULL, NULL, err, sizeof err) >= 0);
    CHECK(ir_add_node(g, IR_OP_MUL, (int[]){x, s4}, 2, NULL, NULL, err, sizeof err) == -1);
    CHECK_STR(err, "mul: shapes differ: [2,3,4,4] vs [2,3,1,1]");
    int m4 = ir_add_node(g, IR_OP_MUL_CHANNEL, (int[]){x, s4}, 2, NULL, NULL, err, sizeof err);
    int m2 = ir_add_node(g, IR_OP_MUL_CHANNEL, (int[]){x, s2}, 2, NULL, NULL, err, sizeof err);
    CHECK(m4 >= 0 && m2 >= 0);
    if (m4 >= 0) CHECK_STR(ir_type_str(&g->nodes[m4].type, buf, sizeof buf), "[2,3,4,4]");
    CHECK(ir_op_access(IR_OP_MUL_CHANNEL, 1) == 'o');
    CHECK(ir_add_node(g, IR_OP_MUL_CHANNEL, (int[]){x, bad}, 2, NULL, NULL, err, sizeof err) == -1);
    CHECK_STR(err, "mul: shapes [2,3,4,4] and [2,4,1,1] do not broadcast (the same shape, or "
                   "[N,C,H,W] with [N,C,1,1] or [N,C])");
    CHECK(ir_add_node(g, IR_OP_MUL_CHANNEL, (int[]){x, wide}, 2, NULL, NULL, err, sizeof err) ==
          -1);
    CHECK(ir_add_node(g, IR_OP_MUL_CHANNEL, (int[]){s2, s2}, 2, NULL, NULL, err, sizeof err) == -1);
    int d = ir_add_node(g, IR_OP_PLANE_DOT, (int[]){x, x}, 2, NULL, NULL, err, sizeof err);
    CHECK(d >= 0);
    if (d >= 0) CHECK_STR(ir_type_str(&g->nodes[d].type, buf, sizeof buf), "[2,3]");
    CHECK(ir_add_node(g, IR_OP_PLANE_DOT, (int[]){x, wide}, 2, NULL, NULL, err, sizeof err) == -1);
    /* concat along the channels, and the slices its gradient takes */
    int cc =
        ir_add_node(g, IR_OP_CONCAT, (int[]){x, x, m4}, 3, (int64_t[]){1}, NULL, err, sizeof err);
    CHECK(cc >= 0);
    if (cc >= 0) CHECK_STR(ir_type_str(&g->nodes[cc].type, buf, sizeof buf), "[2,9,4,4]");
    CHECK(ir_add_node(g, IR_OP_CONCAT, (int[]){x, s4}, 2, (int64_t[]){1}, NULL, err, sizeof err) ==
          -1);
    CHECK_STR(err, "concat: input 1 [2,3,1,1] does not fit input 0 [2,3,4,4] (all dimensions but "
                   "the channels must agree)");
    CHECK(ir_add_node(g, IR_OP_CONCAT, (int[]){x, s4}, 2, (int64_t[]){2}, NULL, err, sizeof err) ==
          -1);
    CHECK_STR(err, "concat: input 1 [2,3,1,1] does not fit input 0 [2,3,4,4] (all dimensions but "
                   "axis 2 must agree)");
    int c2 = ir_add_node(g, IR_OP_CONCAT, (int[]){x, x}, 2, (int64_t[]){3}, NULL, err, sizeof err);
    CHECK(c2 >= 0);
    if (c2 >= 0) CHECK_STR(ir_type_str(&g->nodes[c2].type, buf, sizeof buf), "[2,3,4,8]");
    CHECK(ir_add_node(g, IR_OP_CONCAT, (int[]){s2, s2}, 2, (int64_t[]){1}, NULL, err, sizeof err) >=
          0);
    int sl = ir_add_node(g, IR_OP_CHANNEL_SLICE, &cc, 1, (int64_t[]){6, 3}, NULL, err, sizeof err);
    CHECK(sl >= 0 && ir_type_same_shape(&g->nodes[sl].type, &g->nodes[x].type));
    CHECK(ir_add_node(g, IR_OP_CHANNEL_SLICE, &cc, 1, (int64_t[]){7, 3}, NULL, err, sizeof err) ==
          -1);
    CHECK_STR(err, "channel_slice: channels 7..9 are not within [2,9,4,4]");
    /* dropout: a key of four chunks, p in [0, 1) */
    int key = ir_add_input(g, "key", ir_shape1(4), 0);
    CHECK(ir_add_node(g, IR_OP_DROPOUT, (int[]){x, key}, 2, (int64_t[]){0}, (double[]){0.5}, err,
                      sizeof err) >= 0);
    CHECK(ir_add_node(g, IR_OP_DROPOUT, (int[]){x, key}, 2, (int64_t[]){0}, (double[]){1}, err,
                      sizeof err) == -1);
    CHECK_STR(err, "dropout: p must be in [0, 1), got 1");
    CHECK(ir_add_node(g, IR_OP_DROPOUT, (int[]){x, s2}, 2, (int64_t[]){0}, (double[]){0.5}, err,
                      sizeof err) == -1);
    CHECK(ir_verify(g, err, sizeof err) == 0);
    ir_free(g);
}

static ir_graph *small_net(void) {
    ir_graph *g = ir_new();
    int x = ir_add_input(g, "image", ir_shape4(4, 3, 8, 8), 0);
    int lbl = ir_add_input(g, "label", (ir_type){1, {4}, IR_I32}, 10);
    int c = conv(g, x, 8, 3, 3, 1, 1);
    int gm = ir_add_param(g, "bn.gamma", ir_shape1(8), IR_INIT_ONE);
    int bt = ir_add_param(g, "bn.beta", ir_shape1(8), IR_INIT_ZERO);
    int rm = ir_add_state(g, "bn.running_mean", ir_shape1(8), IR_INIT_ZERO);
    int rv = ir_add_state(g, "bn.running_var", ir_shape1(8), IR_INIT_ONE);
    int bn = ir_add_node(g, IR_OP_BATCHNORM, (int[]){c, gm, bt, rm, rv}, 5, (int64_t[]){1, 0},
                         (double[]){1e-5, 0.9}, err, sizeof err);
    int r = ir_add_node(g, IR_OP_RELU, &bn, 1, NULL, NULL, err, sizeof err);
    int p = ir_add_node(g, IR_OP_GLOBAL_AVGPOOL, &r, 1, NULL, NULL, err, sizeof err);
    int w = ir_add_param(g, "fc.weight", ir_shape2(10, 8), IR_INIT_XAVIER);
    int b = ir_add_param(g, "fc.bias", ir_shape1(10), IR_INIT_ZERO);
    int d = ir_add_node(g, IR_OP_DENSE, (int[]){p, w}, 2, NULL, NULL, err, sizeof err);
    int l = ir_add_node(g, IR_OP_BIAS_ADD, (int[]){d, b}, 2, NULL, NULL, err, sizeof err);
    int loss = ir_add_node(g, IR_OP_SOFTMAX_CE, (int[]){l, lbl}, 2, NULL, NULL, err, sizeof err);
    g->nodes[loss].flags |= IR_FLAG_LOSS | IR_FLAG_OUTPUT;
    snprintf(g->nodes[loss].name, IR_NAME_MAX, "loss");
    return g;
}

TEST(verify_catches_broken_graphs) {
    ir_graph *g = small_net();
    CHECK(ir_verify(g, err, sizeof err) == 0);
    CHECK(ir_num_params(g) == 8 * 3 * 9 + 8 + 8 + 80 + 10);
    CHECK(ir_loss_node(g) == g->n - 1);

    ir_graph *bad = ir_clone(g);
    bad->nodes[9].input[0] = 10; /* forward reference */
    CHECK(ir_verify(bad, err, sizeof err) != 0);
    ir_free(bad);

    bad = ir_clone(g);
    bad->nodes[bad->n - 2].type.dim[1] = 11; /* type disagrees with the rule */
    CHECK(ir_verify(bad, err, sizeof err) != 0);
    CHECK(strstr(err, "shape rule says") != NULL);
    ir_free(bad);

    bad = ir_clone(g);
    snprintf(bad->nodes[1].name, IR_NAME_MAX, "image"); /* duplicate source */
    CHECK(ir_verify(bad, err, sizeof err) != 0);
    ir_free(bad);

    bad = ir_clone(g);
    bad->nodes[3].flags |= IR_FLAG_LOSS; /* two losses */
    CHECK(ir_verify(bad, err, sizeof err) != 0);
    ir_free(bad);

    bad = ir_clone(g);
    bad->nodes[4].op = (ir_op)IR_OP_COUNT;
    CHECK(ir_verify(bad, err, sizeof err) != 0);
    ir_free(bad);
    ir_free(g);
}

TEST(dump_is_stable_text) {
    ir_graph *g = small_net();
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    ir_dump(g, f);
    fclose(f);
    CHECK(strstr(buf, "%0 = input \"image\" : [4,3,8,8]\n") != NULL);
    CHECK(strstr(buf, "%1 = input \"label\" classes=10 : [4]:i32\n") != NULL);
    CHECK(strstr(buf, "%3 = conv %0 %2 k=3 s=1 p=1 g=1 : [4,8,8,8]\n") != NULL);
    CHECK(strstr(buf, "batchnorm %3 %4 %5 %6 %7 training=1 sync=0 eps=1e-05 momentum=0.9") != NULL);
    CHECK(strstr(buf, "softmax_cross_entropy %14 %1 smoothing=0 : [4] [output,loss]  # loss\n") !=
          NULL);
    free(buf);

    buf = NULL;
    f = open_memstream(&buf, &len);
    ir_summary(g, f);
    fclose(f);
    CHECK(strstr(buf, "parameters: 322\n") != NULL);
    free(buf);

    buf = NULL;
    f = open_memstream(&buf, &len);
    ir_dot(g, "net", f);
    fclose(f);
    CHECK(strncmp(buf, "digraph \"net\" {", 15) == 0);
    CHECK(strstr(buf, "n0 -> n3;") != NULL);
    free(buf);
    ir_free(g);
}

TEST(train_schedule_checks) {
    ir_train t;
    ir_train_defaults(&t);
    CHECK(ir_train_check(&t, err, sizeof err) == 0);
    t.epochs = 0;
    CHECK(ir_train_check(&t, err, sizeof err) != 0);
    ir_train_defaults(&t);
    t.lr_steps = 2;
    t.lr_epoch[1] = 0;
    t.lr_value[1] = 0.1;
    CHECK(ir_train_check(&t, err, sizeof err) != 0);
    CHECK(strstr(err, "must increase") != NULL);
    ir_train_defaults(&t);
    t.lr_value[0] = -0.1;
    CHECK(ir_train_check(&t, err, sizeof err) != 0);
    CHECK_STR(err, "lr at epoch 0 must not be negative, got -0.1");
    t.lr_value[0] = 1000001; /* the bound it breaks, the value exactly */
    CHECK(ir_train_check(&t, err, sizeof err) != 0);
    CHECK_STR(err, "lr at epoch 0 must be at most 1e6, got 1000001");
    t.lr_value[0] = 1e6;
    CHECK(ir_train_check(&t, err, sizeof err) == 0);
    ir_train_defaults(&t);
    t.warmup_epochs = 5;
    CHECK(ir_train_check(&t, err, sizeof err) != 0);
    CHECK_STR(err, "warmup of 5 epochs does not fit 1 epochs of training");
    ir_train_defaults(&t);
    t.optimizer = IR_OPT_LAMB;
    CHECK(ir_train_check(&t, err, sizeof err) == 0 && ir_train_optim_is_default(&t));
    t.beta2 = 1;
    CHECK(ir_train_check(&t, err, sizeof err) != 0);
    CHECK_STR(err, "beta2 must be in [0, 1), got 1");
    ir_train_defaults(&t);
    t.exclude = 8; /* bn, bias, norm are 1, 2, 4 */
    CHECK(ir_train_check(&t, err, sizeof err) != 0 && !ir_train_optim_is_default(&t));
    t.exclude = IR_EXCLUDE_BN, t.eps = 0;
    CHECK(ir_train_check(&t, err, sizeof err) != 0);
    CHECK_STR(err, "eps must be in (0, 1], got 0");
    t.optimizer = (ir_optimizer)4, t.eps = 1e-9;
    CHECK(ir_train_check(&t, err, sizeof err) != 0);
    CHECK_STR(err, "unknown optimizer 4");
}

/* The optimizer ops' shape rules: scalars are [1], tensors agree. */
TEST(optimizer_op_shapes) {
    ir_graph *g = ir_new();
    int w = ir_add_param(g, "w", ir_shape4(4, 3, 3, 3), IR_INIT_XAVIER);
    int b = ir_add_param(g, "b", ir_shape1(4), IR_INIT_ZERO);
    int lr = ir_add_input(g, "lr", ir_shape1(1), 0);
    int sq = ir_add_node(g, IR_OP_SUMSQ, &w, 1, NULL, NULL, err, sizeof err);
    CHECK(sq >= 0 && g->nodes[sq].type.ndim == 1 && g->nodes[sq].type.dim[0] == 1);
    CHECK(ir_op_fuse(IR_OP_SUMSQ) == IR_FUSE_CHANNEL);
    CHECK(ir_add_node(g, IR_OP_LAMB_LR, (int[]){sq, b, lr}, 3, NULL, NULL, err, sizeof err) < 0);
    CHECK_STR(err, "lamb_lr: scalar must be [1], got [4]");
    CHECK(ir_add_node(g, IR_OP_DESCEND, (int[]){w, b, lr}, 3, NULL, NULL, err, sizeof err) < 0);
    CHECK_STR(err, "descend: shapes differ: [4,3,3,3] vs [4]");
    CHECK(ir_add_node(g, IR_OP_ADAM_DIR, (int[]){w, w, w, lr, b}, 5, NULL, NULL, err, sizeof err) <
          0);
    CHECK_STR(err, "adam_dir: scalar must be [1], got [4]");
    int d = ir_add_node(g, IR_OP_DESCEND, (int[]){w, w, lr}, 3, NULL, NULL, err, sizeof err);
    CHECK(d >= 0 && ir_type_equal(&g->nodes[d].type, &g->nodes[w].type));
    CHECK(ir_op_access(IR_OP_DESCEND, 2) == 's' && ir_op_access(IR_OP_DESCEND, 1) == 'i');
    ir_free(g);
}

/* FNV-1a 64: the published vector, chaining, and the _str form's NUL. */
TEST(fnv1a_values) {
    CHECK(base_fnv1a(BASE_FNV1A_INIT, "", 0) == 0xcbf29ce484222325ull);
    CHECK(base_fnv1a(BASE_FNV1A_INIT, "a", 1) == 0xaf63dc4c8601ec8cull);
    CHECK(base_fnv1a(BASE_FNV1A_INIT, "foobar", 6) == 0x85944171f73967e8ull);
    CHECK(base_fnv1a(base_fnv1a(BASE_FNV1A_INIT, "foo", 3), "bar", 3) == 0x85944171f73967e8ull);
    CHECK(base_fnv1a_str(BASE_FNV1A_INIT, "a") == base_fnv1a(BASE_FNV1A_INIT, "a", 2));
    CHECK(base_fnv1a_str(base_fnv1a_str(BASE_FNV1A_INIT, "ab"), "c") !=
          base_fnv1a_str(base_fnv1a_str(BASE_FNV1A_INIT, "a"), "bc"));
}

/* A file's string in a message: printable ASCII as it is, everything else
 * as \xNN, '\' doubled, cut with "..." to the buffer. */
#define LONG_NAME                                                                                 \
    "0123456789012345678901234567890123456789012345678901234567890123456789012345678901234567890" \
    "12345678901234567890123456789012345678901234567890"
TEST(esc_escapes_and_bounds) {
    char b[16];
    CHECK_STR(base_esc(b, sizeof b, "conv0.weight"), "conv0.weight");
    CHECK_STR(base_esc(b, sizeof b, "a\033[1m\n"), "a\\x1b[1m\\x0a");
    CHECK_STR(base_esc(b, sizeof b, "\\\x7f\xc3\xa9"), "\\\\\\x7f\\xc3\\xa9");
    CHECK_STR(base_esc(b, sizeof b, "0123456789abcde"), "0123456789abcde"); /* 15: fits */
    CHECK_STR(base_esc(b, sizeof b, "0123456789abcdef"), "0123456789ab...");
    CHECK_STR(base_esc(b, sizeof b, "0123456789a\033b"),
              "0123456789a..."); /* never half an escape */
    CHECK_STR(base_esc(b, 4, "abcdef"), "");
    CHECK_STR(base_esc(b, 4, "abc"), "abc");
    CHECK_STR(base_esc(b, sizeof b, NULL), "(null)");
    CHECK(strlen(BASE_ESC("a\033b")) == 6 && strlen(BASE_ESC(LONG_NAME)) == BASE_ESC_MAX - 1);
    CHECK(!base_has_control("caf\xc3\xa9", 5) && base_has_control("\xc2\x9b", 2) &&
          base_has_control("a\tb", 3) && base_has_control("\x7f", 1) &&
          !base_has_control("\xc2", 1));
}

int main(void) {
    RUN(op_table_lookup);
    RUN(op_order_is_pinned);
    RUN(fusion_class_agrees_with_expressions);
    RUN(conv_and_pool_shapes);
    RUN(activation_and_product_shapes);
    RUN(shape_errors_name_the_shapes);
    RUN(verify_catches_broken_graphs);
    RUN(dump_is_stable_text);
    RUN(train_schedule_checks);
    RUN(optimizer_op_shapes);
    RUN(fnv1a_values);
    RUN(esc_escapes_and_bounds);
    return harness_done();
}
