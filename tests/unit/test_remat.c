/* tests/unit/test_remat.c — activation recomputation (passes/remat.c).
 *
 * Its own properties: on every ResNet it frees activations and the planned
 * arena shrinks; a budget between the smallest arena and none is met; a
 * budget it cannot meet is refused with the best arena and the shortfall;
 * a budget already met changes nothing; every recomputed chain reads its
 * parameters before their update, and the freed originals die in the
 * forward pass. Bit-identical results with the pass on and off are
 * test_pass_invariance's (every model, fp32 and bf16); the reference
 * interpreter check is here: the recomputed training step against
 * runtime/interp on the same inputs.
 */
#include <stdlib.h>
#include <string.h>

#include "tests/fixture.h"
#include "tests/graphs.h"
#include "tests/harness.h"
#include "tests/passcheck.h"

static char err[4096];

static int64_t arena(const ir_graph *g) {
    fmt_memplan *m = pass_memplan_run(g, err, sizeof err);
    CHECK_MSG(m != NULL, "%s", err);
    int64_t a = m ? m->arena_bytes : -1;
    fmt_memplan_free(m);
    return a;
}

static ir_graph *model(const char *path, int batch) {
    ir_graph *g = fx_model_graph(path, batch, 1, NULL, err, sizeof err);
    CHECK_MSG(g != NULL, "%s", err);
    return g;
}

TEST(resnets_shrink) {
    const char *paths[] = {"models/resnet18.net", "models/resnet18_cifar.net",
                           "models/cnn_small.net"};
    for (int k = 0; k < 3; k++) {
        ir_graph *g = model(paths[k], 8);
        if (!g) continue;
        int n0 = g->n;
        int64_t a0 = arena(g);
        pass_remat_report r;
        CHECK_MSG(pass_remat(&g, 0, &r, err, sizeof err) == 0, "%s", err);
        CHECK(r.arena_before == a0 && r.arena_after == arena(g));
        CHECK_MSG(r.recomputed > 0 && r.arena_after < a0, "%s: %d recomputed, %lld -> %lld",
                  paths[k], r.recomputed, (long long)a0, (long long)r.arena_after);
        CHECK(g->n == n0 + r.nodes_added && r.candidates >= r.recomputed);
        CHECK(ir_verify(g, err, sizeof err) == 0);
        ir_free(g);
    }
}

TEST(budget_met_or_refused) {
    ir_graph *g = model("models/resnet18_cifar.net", 8);
    if (!g) return;
    int64_t a0 = arena(g);
    ir_graph *least = ir_clone(g);
    pass_remat_report r;
    CHECK(pass_remat(&least, 0, &r, err, sizeof err) == 0);
    int64_t amin = r.arena_after, budget = (a0 + amin) / 2;
    int all = r.recomputed;
    ir_graph *mid = ir_clone(g);
    CHECK_MSG(pass_remat(&mid, budget, &r, err, sizeof err) == 0, "%s", err);
    CHECK(r.arena_after <= budget && arena(mid) <= budget && r.recomputed <= all);
    /* a budget already met: the same graph */
    ir_graph *same = ir_clone(g);
    CHECK(pass_remat(&same, a0, &r, err, sizeof err) == 0 && r.recomputed == 0);
    CHECK(ir_graph_hash(same) == ir_graph_hash(g) && same->n == g->n);
    /* below the least it can do: refused, the graph left as it was */
    ir_graph *tight = ir_clone(g);
    CHECK(pass_remat(&tight, amin / 2, &r, err, sizeof err) == -1);
    CHECK_MSG(strstr(err, "remat: the budget of") && strstr(err, "cannot be met") &&
                  strstr(err, "MiB over"),
              "%s", err);
    CHECK(ir_graph_hash(tight) == ir_graph_hash(g));
    ir_free(g), ir_free(least), ir_free(mid), ir_free(same), ir_free(tight);
}

/* Every copy sits before the group of its first backward reader, reads no
 * parameter after its update, and the tensor it replaces is no longer read
 * by the backward pass: its lifetime ends before the loss. */
TEST(copies_replace_backward_reads) {
    ir_graph *g = model("models/resnet18_cifar.net", 8);
    if (!g) return;
    int n0 = g->n;
    pass_remat_report r;
    CHECK(pass_remat(&g, 0, &r, err, sizeof err) == 0 && r.recomputed > 0);
    int loss = ir_loss_node(g);
    fmt_memplan *m = pass_memplan_run(g, err, sizeof err);
    CHECK(m != NULL && loss >= 0);
    int freed = 0;
    for (int i = 0; m && i < loss; i++) {
        const ir_node *n = &g->nodes[i];
        if (n->op == IR_OP_RELU && m->bytes[i] > 0 && m->last[i] < m->step[loss]) freed++;
    }
    /* one relu per freed activation (each chain ends in one) */
    CHECK_MSG(freed >= r.recomputed, "%d relus die before the loss, %d recomputed", freed,
              r.recomputed);
    int copies = 0;
    for (int i = loss; i < g->n; i++) copies += g->nodes[i].op == IR_OP_BN_APPLY;
    /* (a down block's chain has two: its shortcut's BatchNorm too) */
    CHECK(copies >= r.recomputed && copies <= 2 * r.recomputed && g->n == n0 + r.nodes_added);
    fmt_memplan_free(m);
    ir_free(g);
}

/* The reference interpreter (double precision, naive loops) on the graph
 * with and without the pass, from the same random sources: every gradient
 * and every updated parameter and state the same double, bit for bit. */
TEST(interpreter_agrees) {
    const char *paths[] = {"models/cnn_small.net", "models/resnet18_cifar.net"};
    for (int k = 0; k < 2; k++) {
        ir_graph *g = model(paths[k], 2);
        if (!g) continue;
        ir_graph *h = ir_clone(g);
        pass_remat_report r;
        CHECK(pass_remat(&h, 0, &r, err, sizeof err) == 0 && r.recomputed > 0);
        int compared = pc_interp_same(g, h);
        CHECK_MSG(compared > 20, "%s: %d", paths[k], compared);
        ir_free(g), ir_free(h);
    }
}

/* A pipeline with remat runs through the driver's registry like any pass;
 * it needs autodiff, and fuse (when present) before it. */
TEST(pipeline_rules) {
    pass_options o = pass_default_options();
    pass_pipeline base, pl;
    pass_pipeline_default(&o, &base);
    CHECK(pass_pipeline_find(&base, "remat") == -1); /* not in the default */
    CHECK(pass_pipeline_parse("lower,autodiff,optimizer,fuse,remat(budget_mb=24),memplan", &base,
                              &pl, err, sizeof err) == 0);
    CHECK(pass_pipeline_parse("lower,remat", &base, &pl, err, sizeof err) == -1 &&
          strstr(err, "remat"));
    CHECK(pass_pipeline_parse("lower,autodiff,remat,fuse", &base, &pl, err, sizeof err) == -1 &&
          strstr(err, "fuse"));
    CHECK(pass_pipeline_parse("lower,autodiff,remat(budget_mb=-1)", &base, &pl, err, sizeof err) ==
              -1 &&
          strstr(err, "budget_mb"));
}

int main(void) {
    RUN(resnets_shrink);
    RUN(budget_met_or_refused);
    RUN(copies_replace_backward_reads);
    RUN_TIER("test", interpreter_agrees);
    RUN(pipeline_rules);
    return harness_done();
}
