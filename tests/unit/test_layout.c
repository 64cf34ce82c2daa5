/* tests/unit/test_layout.c — the layout pass (passes/layout.c).
 *
 * Invariance (docs/DESIGN.md §5): two training steps and an eval pass of
 * every model, fp32 and bf16, fused and unfused, with the layout pass on
 * give BIT-IDENTICAL losses, logits, gradients, parameters, momenta and
 * BatchNorm statistics to the pass off: a channel-major tensor holds the
 * same values, every kernel computes each element by the same expression
 * and every channel reduction visits a channel's elements in the same
 * order q = n*inner + j (so the same lanes and sums), and the GEMMs run the
 * same shapes with only a leading dimension changed.
 *
 * Properties: every transpose the pass leaves has a reason that the report
 * names; codegen transposes nothing else (no to_cnhw/from_cnhw outside a
 * transpose node's step), while the same model without the pass does;
 * ir_verify refuses layouts codegen could not honour; the reference
 * interpreter gives the graph with the pass the same doubles as without
 * (tests/passcheck.h's pc_interp_same).
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

/* A model whose conv activations meet a flatten (to a dense layer), so
 * transposes remain: NCHW for the flatten, and back to CNHW for its
 * gradient (a reshape_like of dense's NCHW data gradient). */
static const char flat_net[] = "input image[3, 6, 6]\n"
                               "input label class(10)\n"
                               "network flat {\n"
                               "    x = relu(batchnorm(conv(image, 4, k=3, p=1, bias=false)))\n"
                               "    x = maxpool(x, k=2)\n"
                               "    logits = dense(flatten(x), 10)\n"
                               "    loss = softmax_cross_entropy(logits, label)\n"
                               "}\n"
                               "train {\n"
                               "    batch 4 per device\n"
                               "    epochs 1\n"
                               "    lr {0: 0.1}\n"
                               "    eval batch 4\n"
                               "}\n";

/* The shape ops on channel-major maps (codegen/shape.c addresses NCHW
 * only): the pass puts a transpose in front of the permute, and the
 * conv after the split-and-concat reads an NCHW value; test_exec checks
 * the same net against the interpreter. */
static const char shapes_net[] = "input image[3, 16, 16]\n"
                                 "input label class(10)\n"
                                 "network cv {\n"
                                 "    x = relu(conv(image, 8, k=3, s=2, p=1))\n"
                                 "    x = permute(x, 0, 2, 3, 1)\n"
                                 "    a, b = split(x, 2, axis=1)\n"
                                 "    x = relu(conv(concat(b, a, axis=2), 8, k=3, p=1))\n"
                                 "    x = slice(x, 1, -1, axis=-2)\n"
                                 "    logits = dense(global_avgpool(x), 10)\n"
                                 "    loss = softmax_cross_entropy(logits, label)\n"
                                 "}\n"
                                 "train {\n"
                                 "    batch 4 per device\n"
                                 "    epochs 1\n"
                                 "    lr {0: 0.1}\n"
                                 "    eval batch 4\n"
                                 "}\n";

static fe_program *parse_model(const char *model) {
    if (!strcmp(model, "shapes"))
        return fe_parse_string_err("shapes.net", shapes_net, sizeof shapes_net - 1, err,
                                   sizeof err);
    if (strcmp(model, "flat")) return fe_parse_file(model);
    return fe_parse_string_err("flat.net", flat_net, sizeof flat_net - 1, err, sizeof err);
}

/* The model at the given batch: layout off against on, fused and unfused
 * (bf16 stores differ between those two: fused values stay in registers),
 * in fp32 and bf16 (tests/passcheck.h runs and compares the plans). */
static void check_invariance(const char *model, int batch) {
    fe_program *fp = parse_model(model);
    CHECK_MSG(fp != NULL, "%s", err);
    if (!fp) return;
    for (int mode = 0; mode < 4; mode++) {
        const char *prec = mode & 2 ? "bf16" : "fp32", *fuse = mode & 1 ? "" : ",fuse";
        char off[200], on[200];
        snprintf(off, sizeof off,
                 "lower,autodiff,optimizer,partition,precision(precision=%s)%s,memplan", prec,
                 fuse);
        snprintf(on, sizeof on,
                 "lower,autodiff,optimizer,partition,precision(precision=%s),layout%s,memplan",
                 prec, fuse);
        CHECK_MSG(pc_same_program(fp, model, batch, on, off), "%s: '%s' vs '%s'", model, on, off);
    }
    fe_free(fp);
}

TEST(mlp_is_invariant) { check_invariance("models/mlp.net", 8); }
TEST(cnn_small_is_invariant) { check_invariance("models/cnn_small.net", 8); }
TEST(flatten_model_is_invariant) { check_invariance("flat", 4); }
TEST(shape_ops_model_is_invariant) { check_invariance("shapes", 4); }
/* Chunked convolutions: the GEMMs write and read a channel-major tensor's
 * chunk in place (rows N*P apart), col2im writes its part of dx rows. */
TEST(chunked_convs_are_invariant) {
    pc_scratch_max = 96 << 10;
    check_invariance("models/cnn_small.net", 8);
    pc_scratch_max = 0;
}
TEST(resnet18_is_invariant) { check_invariance("models/resnet18.net", 4); }
TEST(resnet18_cifar_is_invariant) { check_invariance("models/resnet18_cifar.net", 2); }

/* Steps that run a to_cnhw or from_cnhw kernel without being a transpose
 * node's: transposes nobody gave a reason for. */
static int hidden_transposes(const ir_graph *g) {
    cg_program *cp = cg_generate(g, CG_DIALECT_C, NULL, err, sizeof err);
    CHECK_MSG(cp != NULL, "%s", err);
    if (!cp) return -1;
    int hidden = 0;
    for (int s = 0; s < cp->nsteps; s++) {
        const cg_step *st = &cp->steps[s];
        for (int c = st->first_call; c < st->first_call + st->ncalls; c++) {
            const cg_call *call = &cp->calls[c];
            if (call->kind != CG_CALL_KERNEL) continue;
            const char *name = cp->kernels[call->kernel].name;
            if ((strstr(name, "_to_cnhw") || strstr(name, "_from_cnhw")) &&
                g->nodes[st->node].op != IR_OP_TRANSPOSE)
                hidden++;
        }
    }
    cg_program_free(cp);
    return hidden;
}

/* Every transpose left has a reason, the report prints each with it, and
 * nothing else transposes. */
TEST(no_transpose_without_a_reason) {
    const char *models[] = {"flat", "models/cnn_small.net", "models/resnet18_cifar.net",
                            "models/mlp.net"};
    for (int k = 0; k < 4; k++) {
        fe_program *fp = parse_model(models[k]);
        CHECK(fp != NULL);
        if (!fp) continue;
        for (int training = 1; training >= 0; training--) {
            ir_train t = *fe_train(fp);
            ir_graph *g = fe_build_graph(fp, 2, training);
            pass_options o = pass_default_options();
            int rc = training ? pass_run_train(&g, &t, &o, err, sizeof err)
                              : pass_run_eval(&g, &o, err, sizeof err);
            CHECK_MSG(rc == 0, "%s", err);
            int before = hidden_transposes(g);
            /* the same program through the layout pass (and fuse again) */
            pass_unfuse(g);
            CHECK(pass_layout(&g, err, sizeof err) == 0);
            uint64_t h = ir_graph_hash(g);
            CHECK(pass_layout(&g, err, sizeof err) == 0 && ir_graph_hash(g) == h); /* idempotent */
            CHECK(pass_fuse(&g, err, sizeof err) == 0);
            CHECK(pass_layout(&g, err, sizeof err) != 0 && strstr(err, "before fuse"));
            int after = hidden_transposes(g), explicit_ = 0, cnhw = 0;
            for (int i = 0; i < g->n; i++) {
                const ir_node *n = &g->nodes[i];
                cnhw += (n->flags & IR_FLAG_CNHW) != 0;
                if (n->op != IR_OP_TRANSPOSE) continue;
                explicit_++;
                CHECK_MSG(pass_layout_reason(n->iattr[0]) != NULL, "%s: %%%d has reason %d",
                          models[k], i, (int)n->iattr[0]);
            }
            CHECK_MSG(after == 0, "%s: %d transposes without a reason", models[k], after);
            /* the models with convolutions transposed inside their GEMM
             * lowering before; now their activations are channel-major */
            CHECK(k == 3 ? before == 0 && cnhw == 0 : before > 0 && cnhw > 0);
            char *text = NULL;
            size_t len = 0;
            FILE *f = open_memstream(&text, &len);
            pass_layout_report(g, training ? "train" : "eval", f);
            fclose(f);
            int lines = 0, reasons = 0;
            for (char *p = text; (p = strchr(p, '\n')); p++) lines++;
            for (int w = 1; w < PASS_LAYOUT_WHY_COUNT; w++)
                for (char *p = text; (p = strstr(p, pass_layout_reason(w))); p++) reasons++;
            CHECK_MSG(lines == 1 + explicit_ && reasons == explicit_, "%s", text);
            if (k == 0) { /* flatten (NCHW) forward; its gradient back to CNHW in training */
                CHECK_MSG(explicit_ == (training ? 2 : 1), "%s", text);
                CHECK(strstr(text, pass_layout_reason(PASS_LAYOUT_WHY_VIEW)) != NULL);
                CHECK(!training ||
                      strstr(text, pass_layout_reason(PASS_LAYOUT_WHY_VIEW_RESULT)) != NULL);
            } else {
                CHECK_MSG(explicit_ == 0, "%s", text); /* ResNets: none at all */
            }
            free(text);
            ir_free(g);
        }
        fe_free(fp);
    }
}

/* What ir_verify refuses: a channel-major source, a mixed-layout
 * elementwise op, a view in another layout, a transpose to its own layout. */
TEST(verify_refuses_bad_layouts) {
    ir_graph *g = ir_new();
    int x = ir_add_input(g, "x", ir_shape4(2, 3, 4, 4), IR_F32);
    int w = ir_add_param(g, "w", ir_shape4(3, 3, 3, 3), IR_INIT_XAVIER);
    int c = ir_add_node(g, IR_OP_CONV, (int[]){x, w}, 2, (int64_t[]){3, 1, 1, 1}, NULL, err,
                        sizeof err);
    int r = ir_add_node(g, IR_OP_RELU, (int[]){c}, 1, NULL, NULL, err, sizeof err);
    int a = ir_add_node(g, IR_OP_ADD, (int[]){r, x}, 2, NULL, NULL, err, sizeof err);
    int f = ir_add_node(g, IR_OP_FLATTEN, (int[]){r}, 1, NULL, NULL, err, sizeof err);
    CHECK(ir_verify(g, err, sizeof err) == 0);
    g->nodes[c].flags |= IR_FLAG_CNHW;
    CHECK(ir_verify(g, err, sizeof err) != 0 && strstr(err, "input 0"));
    g->nodes[r].flags |= IR_FLAG_CNHW;
    CHECK(ir_verify(g, err, sizeof err) != 0 && strstr(err, "node 4 (add)"));
    g->nodes[a].flags |= IR_FLAG_CNHW;
    CHECK(ir_verify(g, err, sizeof err) != 0 && strstr(err, "node 4 (add)")); /* x is NCHW */
    g->nodes[a].flags &= ~(unsigned)IR_FLAG_CNHW;
    g->nodes[a].input[0] = c;
    g->nodes[a].input[1] = c;
    CHECK(ir_verify(g, err, sizeof err) != 0 && strstr(err, "node 4 (add)"));
    g->nodes[a].flags |= IR_FLAG_CNHW;
    CHECK(ir_verify(g, err, sizeof err) != 0 && strstr(err, "another layout")); /* the flatten */
    g->nodes[f].input[0] = x;
    CHECK(ir_verify(g, err, sizeof err) == 0);
    g->nodes[x].flags |= IR_FLAG_CNHW;
    CHECK(ir_verify(g, err, sizeof err) != 0 && strstr(err, "source"));
    g->nodes[x].flags &= ~(unsigned)IR_FLAG_CNHW;
    int t = ir_add_node(g, IR_OP_TRANSPOSE, (int[]){c}, 1, (int64_t[]){1}, NULL, err, sizeof err);
    CHECK(t >= 0);
    g->nodes[t].flags |= IR_FLAG_CNHW;
    CHECK(ir_verify(g, err, sizeof err) != 0 && strstr(err, "already in its layout"));
    g->nodes[t].flags &= ~(unsigned)IR_FLAG_CNHW;
    CHECK(ir_verify(g, err, sizeof err) == 0);
    /* the dump names the layout only where it is not the default */
    char *text = NULL;
    size_t len = 0;
    FILE *mf = open_memstream(&text, &len);
    ir_dump(g, mf);
    fclose(mf);
    CHECK(strstr(text, "%2 = conv %0 %1 k=3 s=1 p=1 g=1 : [2,3,4,4] cnhw\n") != NULL);
    CHECK(strstr(text, "%0 = input \"x\" : [2,3,4,4]\n") != NULL);
    free(text);
    ir_free(g);
}

/* The reference interpreter on the training graph with and without the
 * pass, from the same random sources: every gradient, loss, parameter and
 * state the same double (its tensors are logical, a transpose a copy). */
TEST(interpreter_agrees) {
    const char *models[] = {"models/cnn_small.net", "models/resnet18_cifar.net"};
    for (int k = 0; k < 2; k++) {
        fe_program *fp = parse_model(models[k]);
        CHECK(fp != NULL);
        if (!fp) continue;
        ir_train t = *fe_train(fp);
        ir_graph *g[2];
        for (int on = 0; on < 2; on++) {
            g[on] = fe_build_graph(fp, 2, 1);
            pass_options o = pass_default_options();
            o.layout = on;
            CHECK_MSG(pass_run_train(&g[on], &t, &o, err, sizeof err) == 0, "%s", err);
        }
        int cnhw = 0;
        for (int i = 0; i < g[1]->n; i++) cnhw += (g[1]->nodes[i].flags & IR_FLAG_CNHW) != 0;
        CHECK(cnhw > 10);
        int compared = pc_interp_same(g[0], g[1]);
        CHECK_MSG(compared > 20, "%s: %d", models[k], compared);
        ir_free(g[0]), ir_free(g[1]);
        fe_free(fp);
    }
}

int main(void) {
    pc_backend = rt_backend_cpu();
    RUN(verify_refuses_bad_layouts);
    RUN(no_transpose_without_a_reason);
    RUN_TIER("test", interpreter_agrees);
    RUN(mlp_is_invariant);
    RUN(cnn_small_is_invariant);
    RUN(flatten_model_is_invariant);
    RUN(shape_ops_model_is_invariant);
    RUN(chunked_convs_are_invariant);
    RUN_TIER("test", resnet18_is_invariant);
    RUN(resnet18_cifar_is_invariant);
    rt_backend_free(pc_backend);
    return harness_done();
}
