/* Tests for passes/partition.c: one allreduce per parameter gradient, right
 * after it; the update reads the sum, every other reader (BatchNorm's data
 * gradient) the local gradient; buckets filled in backward completion order
 * up to the cap, offsets packing each bucket; invariance with one replica
 * (interpreter and generated code); the pipeline runs it before fuse; the
 * executor's bucket schedule. */
#include <stdint.h>
#include <stdlib.h>

#include "codegen/codegen.h"
#include "frontend/frontend.h"
#include "base/hash.h"
#include "ir/ir.h"
#include "passes/passes.h"
#include "runtime/comm/comm.h"
#include "runtime/runtime.h"
#include "tests/fixture.h"
#include "tests/harness.h"
#include "tests/oracle/interp.h"

static char err[1024];

/* A small net with a dense layer without BatchNorm and a conv layer with
 * it, so gradients come in several sizes and BatchNorm's dgamma/dbeta have
 * a second reader. */
static const char *NET = FX_NET("part",
                                FX_CONV_BN "    x = relu(dense(flatten(x), 16))\n"
                                           "    logits = dense(x, 10)\n",
                                4, 4);

/* lower + autodiff + optimizer: the graph partition sees in the pipeline. */
static ir_graph *before_partition(fe_program **fpp) {
    fe_program *fp = fe_parse_string("part.net", NET, strlen(NET));
    if (!fp) return NULL;
    ir_graph *g = fe_build_graph(fp, 4, 1);
    if (!g || pass_lower(&g, err, sizeof err) || pass_autodiff(&g, err, sizeof err) ||
        pass_optimizer(&g, fe_train(fp), err, sizeof err)) {
        fprintf(stderr, "building: %s\n", err);
        ir_free(g);
        fe_free(fp);
        return NULL;
    }
    *fpp = fp;
    return g;
}

static int count_op(const ir_graph *g, ir_op o) {
    int c = 0;
    for (int i = 0; i < g->n; i++) c += g->nodes[i].op == o;
    return c;
}

TEST(one_allreduce_per_gradient_right_after_it) {
    fe_program *fp = NULL;
    ir_graph *g = before_partition(&fp);
    CHECK(g != NULL);
    if (!g) return;
    int grads = 0;
    for (int i = 0; i < g->n; i++) grads += (g->nodes[i].flags & IR_FLAG_GRAD) != 0;
    CHECK(grads == 7); /* conv.w, bn gamma/beta, dense0 w/b, dense1 w/b */
    int before = g->n;
    CHECK(pass_partition(&g, 0, err, sizeof err) == 0);
    CHECK(ir_verify(g, err, sizeof err) == 0);
    CHECK(g->n == before + grads);
    CHECK(count_op(g, IR_OP_ALLREDUCE) == grads);
    for (int i = 0; i < g->n; i++) {
        const ir_node *n = &g->nodes[i];
        if (n->op != IR_OP_ALLREDUCE) continue;
        const ir_node *gr = &g->nodes[n->input[0]];
        CHECK(n->input[0] == i - 1); /* right after its gradient */
        CHECK(gr->flags & IR_FLAG_GRAD);
        CHECK(ir_type_equal(&n->type, &gr->type));
        char want[IR_NAME_MAX + 8];
        snprintf(want, sizeof want, "%s.sum", gr->name);
        CHECK_STR(n->name, want);
        CHECK(!(n->flags & IR_FLAG_GRAD)); /* the local gradient keeps the flag */
    }
    ir_free(g);
    fe_free(fp);
}

TEST(update_reads_the_sum_backward_reads_local) {
    fe_program *fp = NULL;
    ir_graph *g = before_partition(&fp);
    if (!g) return;
    CHECK(pass_partition(&g, 0, err, sizeof err) == 0);
    int sgd = 0, bn_data = 0;
    for (int i = 0; i < g->n; i++) {
        const ir_node *n = &g->nodes[i];
        if (n->op == IR_OP_SGD_MOMENTUM) {
            sgd++;
            const ir_node *s = &g->nodes[n->input[1]];
            CHECK(s->op == IR_OP_ALLREDUCE);
            /* the sum of this parameter's gradient */
            char want[IR_NAME_MAX + 16];
            snprintf(want, sizeof want, "%s.grad", g->nodes[n->input[0]].name);
            CHECK_STR(g->nodes[s->input[0]].name, want);
        }
        if (n->op == IR_OP_BN_GRAD_DATA) {
            bn_data++;
            /* inputs 5, 6: dgamma and dbeta of this device's batch */
            for (int k = 5; k <= 6; k++) {
                CHECK(g->nodes[n->input[k]].flags & IR_FLAG_GRAD);
                CHECK(g->nodes[n->input[k]].op != IR_OP_ALLREDUCE);
            }
        }
        /* nothing but the update reads a sum */
        for (int k = 0; k < n->ninputs; k++)
            if (g->nodes[n->input[k]].op == IR_OP_ALLREDUCE)
                CHECK(n->op == IR_OP_SGD_MOMENTUM && k == 1);
    }
    CHECK(sgd == 7 && bn_data == 1);
    ir_free(g);
    fe_free(fp);
}

/* Every optimizer's update reads the sums (lars's gradient norm, the adam
 * moments too): no update op reads a local gradient, every sum is read. */
TEST(every_optimizer_reads_the_sums) {
    for (int o = IR_OPT_SGD; o <= IR_OPT_ADAMW; o++) {
        fe_program *fp = fe_parse_string("part.net", NET, strlen(NET));
        ir_graph *g = fp ? fe_build_graph(fp, 4, 1) : NULL;
        ir_train t = *fe_train(fp);
        t.optimizer = (ir_optimizer)o, t.nesterov = o == IR_OPT_SGD;
        CHECK(g && pass_lower(&g, err, sizeof err) == 0 &&
              pass_autodiff(&g, err, sizeof err) == 0 &&
              pass_optimizer(&g, &t, err, sizeof err) == 0 &&
              pass_partition(&g, 0, err, sizeof err) == 0);
        int *readers = calloc((size_t)(g ? g->n : 1), sizeof *readers);
        for (int i = 0; g && i < g->n; i++) {
            const ir_node *n = &g->nodes[i];
            int update = n->op == IR_OP_SGD_MOMENTUM || n->op == IR_OP_ADAM_M ||
                         n->op == IR_OP_ADAM_V || n->op == IR_OP_SUMSQ;
            for (int k = 0; k < n->ninputs; k++) {
                const ir_node *in = &g->nodes[n->input[k]];
                CHECK_MSG(!update || !(in->flags & IR_FLAG_GRAD), "%s: %s reads local '%s'",
                          ir_optimizer_names[o], ir_ops[n->op].name, in->name);
                readers[n->input[k]]++;
            }
        }
        for (int i = 0; g && i < g->n; i++)
            if (g->nodes[i].op == IR_OP_ALLREDUCE) CHECK(readers[i] > 0);
        free(readers);
        ir_free(g);
        fe_free(fp);
    }
}

/* Bucket ids and offsets against a re-computation from the gradients'
 * sizes in graph order, for several caps. */
static int check_buckets(const ir_graph *g, size_t cap) {
    int bad = 0;
    int64_t bucket = 0, used = 0;
    int last_bucket = -1;
    for (int i = 0; i < g->n; i++) {
        const ir_node *n = &g->nodes[i];
        if (n->op != IR_OP_ALLREDUCE) continue;
        int64_t bytes = ir_numel(&n->type) * 4;
        if (used > 0 && used + bytes > (int64_t)cap) bucket++, used = 0;
        if (n->iattr[0] != bucket || n->iattr[1] != used / 4) {
            fprintf(stderr, "  node %d: bucket %lld offset %lld, want %lld %lld\n", i,
                    (long long)n->iattr[0], (long long)n->iattr[1], (long long)bucket,
                    (long long)(used / 4));
            bad++;
        }
        /* buckets appear in graph order: backward completion order */
        if (n->iattr[0] < last_bucket) bad++;
        last_bucket = (int)n->iattr[0];
        used += bytes;
        /* under the cap unless a single gradient is larger */
        if (used > (int64_t)cap && n->iattr[1] != 0) bad++;
    }
    return bad;
}

TEST(buckets_in_completion_order_up_to_the_cap) {
    fe_program *fp = NULL;
    ir_graph *base = before_partition(&fp);
    if (!base) return;
    /* gradient bytes in completion order: 40, 640 (dense1 b, w), 64,
     * 16384 (dense0), 16, 16 (bn), 432 (conv): caps that split them in
     * various ways */
    size_t caps[] = {1, 64, 700, 800, 17000, (size_t)1 << 30, 0};
    int want_buckets[] = {7, 6, 4, 3, 2, 1, 1};
    for (int c = 0; c < 7; c++) {
        ir_graph *g = ir_clone(base);
        CHECK(pass_partition(&g, caps[c], err, sizeof err) == 0);
        size_t cap = pass_partition_bucket_bytes(caps[c]);
        CHECK_MSG(check_buckets(g, cap) == 0, "cap %zu", cap);
        pass_bucket b[16];
        int nb = pass_partition_buckets(g, b, 16);
        CHECK_MSG(nb == want_buckets[c], "cap %zu: %d buckets", cap, nb);
        int grads = 0;
        for (int k = 0; k < nb && k < 16; k++) {
            grads += b[k].grads;
            CHECK(b[k].grads > 0 && b[k].first <= b[k].last);
            if (k) CHECK(b[k].first > b[k - 1].last); /* one after another */
        }
        CHECK(grads == 7);
        ir_free(g);
    }
    CHECK(pass_partition_bucket_bytes(0) == ((size_t)25 << 20));
    ir_free(base);
    fe_free(fp);
}

TEST(refuses_twice_and_leaves_graphs_without_gradients) {
    fe_program *fp = NULL;
    ir_graph *g = before_partition(&fp);
    if (!g) return;
    CHECK(pass_partition(&g, 0, err, sizeof err) == 0);
    ir_graph *keep = g;
    CHECK(pass_partition(&g, 0, err, sizeof err) == -1);
    CHECK(strstr(err, "partitioned already") != NULL);
    CHECK(g == keep); /* a failed pass leaves the graph */
    ir_free(g);
    ir_graph *e = fe_build_graph(fp, 4, 0);
    CHECK(pass_lower(&e, err, sizeof err) == 0);
    int n = e->n;
    CHECK(pass_partition(&e, 0, err, sizeof err) == 0);
    CHECK(e->n == n && count_op(e, IR_OP_ALLREDUCE) == 0);
    ir_free(e);
    fe_free(fp);
}

TEST(shape_rule_and_dump) {
    ir_graph *g = ir_new();
    int x = ir_add_input(g, "x", ir_shape2(2, 3), 0);
    int s = ir_add_node(g, IR_OP_ALLREDUCE, &x, 1, (int64_t[]){1, 6, 0}, NULL, err, sizeof err);
    CHECK(s >= 0);
    CHECK(ir_type_equal(&g->nodes[s].type, &g->nodes[x].type));
    CHECK(ir_add_node(g, IR_OP_ALLREDUCE, &x, 1, (int64_t[]){-1, 0, 0}, NULL, err, sizeof err) < 0);
    int l = ir_add_input(g, "l", (ir_type){1, {2}, IR_I32}, 10);
    CHECK(ir_add_node(g, IR_OP_ALLREDUCE, &l, 1, NULL, NULL, err, sizeof err) < 0);
    CHECK(strstr(err, "f32") != NULL);
    CHECK(ir_op_by_name("allreduce") == IR_OP_ALLREDUCE);
    char buf[16];
    CHECK_STR(ir_op_attr_name(IR_OP_ALLREDUCE, 0, 0, buf, sizeof buf), "bucket");
    CHECK_STR(ir_op_attr_name(IR_OP_ALLREDUCE, 0, 1, buf, sizeof buf), "offset");
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    ir_dump(g, f);
    fclose(f);
    CHECK_MSG(strstr(text, "allreduce %0 bucket=1 offset=6") != NULL, "%s", text);
    free(text);
    ir_free(g);
}

/* ---- one replica: partition changes no value ---- */

static void fill(const ir_graph *g, oracle_interp *it, uint64_t seed) {
    for (int i = 0; i < g->n; i++) {
        const ir_node *n = &g->nodes[i];
        if (!ir_is_source(n->op)) continue;
        uint64_t h = base_fnv1a(seed, n->name, strlen(n->name));
        double *b = oracle_interp_buffer(it, i);
        for (int64_t e = 0; e < ir_numel(&n->type); e++) {
            h ^= h << 13, h ^= h >> 7, h ^= h << 17;
            double r = (double)(h >> 11) / (double)(1ull << 53);
            b[e] = n->type.dtype == IR_I32          ? (double)(h % 10)
                   : !strcmp(n->name, "lr")         ? 0.1
                   : !strcmp(n->name, "grad_scale") ? 0.25
                   : strstr(n->name, "running_var") ? 0.5 + r
                                                    : 2 * r - 1;
        }
    }
}

TEST(interpreter_results_unchanged) {
    fe_program *fp = NULL;
    ir_graph *a = before_partition(&fp);
    if (!a) return;
    ir_graph *b = ir_clone(a);
    CHECK(pass_partition(&b, 64, err, sizeof err) == 0);
    oracle_interp *ia = oracle_interp_new(a), *ib = oracle_interp_new(b);
    fill(a, ia, 7);
    fill(b, ib, 7);
    oracle_interp_run(ia);
    oracle_interp_run(ib);
    /* Every node of a has its twin in b (same name or same position among
     * the non-allreduce nodes); parameters and states are updated alike. */
    int j = 0, bad = 0;
    for (int i = 0; i < a->n; i++, j++) {
        while (b->nodes[j].op == IR_OP_ALLREDUCE) j++;
        CHECK(a->nodes[i].op == b->nodes[j].op);
        const double *x = oracle_interp_buffer(ia, i), *y = oracle_interp_buffer(ib, j);
        bad += memcmp(x, y, sizeof(double) * (size_t)ir_numel(&a->nodes[i].type)) != 0;
    }
    CHECK(bad == 0);
    oracle_interp_free(ia);
    oracle_interp_free(ib);
    ir_free(a);
    ir_free(b);
    fe_free(fp);
}

/* The whole pipeline (fused) with and without partition, as generated C on
 * the cpu backend: the parameters after a step are bit-identical (an
 * allreduce over one replica is a copy). */
TEST(generated_code_unchanged_and_pipeline_order) {
    fe_program *fp = fe_parse_string("part.net", NET, strlen(NET));
    if (!fp) return;
    ir_graph *g = fe_build_graph(fp, 4, 1);
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    pass_options o = pass_default_options();
    o.dump_after = "partition";
    o.dump = f;
    CHECK(pass_run_train(&g, fe_train(fp), &o, err, sizeof err) == 0);
    fclose(f);
    CHECK(text && strstr(text, "allreduce") && !strstr(text, "@g")); /* before fuse */
    free(text);
    int found = 0;
    for (int i = 0; pass_registry[i].name; i++) {
        if (!strcmp(pass_registry[i].name, "partition")) {
            CHECK(i > 0 && !strcmp(pass_registry[i - 1].name, "optimizer"));
            CHECK(pass_registry[i + 1].name &&
                  !strcmp(pass_registry[i + 1].name, "precision")); /* then fuse */
            found = 1;
        }
    }
    CHECK(found);
    CHECK(count_op(g, IR_OP_ALLREDUCE) == 7);
    for (int i = 0; i < g->n; i++)
        if (g->nodes[i].op == IR_OP_ALLREDUCE) CHECK(g->nodes[i].group == 0); /* never fused */

    cg_program *p = cg_generate(g, CG_DIALECT_C, NULL, err, sizeof err);
    CHECK(p != NULL);
    int steps = 0;
    for (int s = 0; p && s < p->nsteps; s++)
        if (p->steps[s].op == IR_OP_ALLREDUCE) {
            steps++;
            /* no kernel: the executor hands it to the collective */
            CHECK(p->steps[s].ncalls == 0 && p->steps[s].nbuf == 2 && p->steps[s].alias == -1);
        }
    CHECK(steps == 7);
    cg_program_free(p);

    rt_backend *be = rt_backend_cpu();
    rt_store *st = rt_store_new(be, g);
    ir_train t = *fe_train(fp);
    rt_store_init(st, g, &t, 3);
    rt_exec *ex = rt_exec_new(be, st, g, NULL, err, sizeof err);
    CHECK_MSG(ex != NULL, "%s", err);
    float img[4 * 3 * 8 * 8];
    int32_t lab[4] = {1, 2, 3, 4};
    for (int i = 0; i < 4 * 3 * 8 * 8; i++) img[i] = (float)((i * 37) % 17) / 17.0f - 0.5f;
    if (ex) {
        CHECK(rt_exec_set_input(ex, "image", img, sizeof img) == 0);
        CHECK(rt_exec_set_input(ex, "label", lab, sizeof lab) == 0);
        CHECK(rt_exec_set_scalar(ex, "lr", 0.1f) == 0 &&
              rt_exec_set_scalar(ex, "grad_scale", 0.25f) == 0);
        CHECK(rt_exec_run(ex, err, sizeof err) == 0);
        /* the sum of one replica is the local gradient */
        float gl[160], gs[160];
        CHECK(rt_exec_get(ex, "dense1.weight.grad", gl, sizeof gl) == 0);
        CHECK(rt_exec_get(ex, "dense1.weight.grad.sum", gs, sizeof gs) == 0);
        CHECK(memcmp(gl, gs, sizeof gl) == 0);
    }
    rt_exec_free(ex);
    rt_store_free(st);
    rt_backend_free(be);
    ir_free(g);
    fe_free(fp);
}

/* The executor's bucket schedule with a queue of a 1-replica communicator
 * attached: buckets registered with the right pieces; a run gives the same
 * values as the copy kernels. */
TEST(executor_hands_buckets_to_the_queue) {
    fe_program *fp = fe_parse_string("part.net", NET, strlen(NET));
    if (!fp) return;
    ir_graph *g = fe_build_graph(fp, 4, 1);
    pass_options o = pass_default_options();
    o.bucket_bytes = 700; /* 4 buckets */
    CHECK(pass_run_train(&g, fe_train(fp), &o, err, sizeof err) == 0);
    rt_backend *be = rt_backend_cpu();
    ir_train t = *fe_train(fp);
    rt_store *s1 = rt_store_new(be, g), *s2 = rt_store_new(be, g);
    rt_store_init(s1, g, &t, 5);
    rt_store_init(s2, g, &t, 5);
    rt_exec *e1 = rt_exec_new(be, s1, g, NULL, err, sizeof err);
    rt_exec *e2 = rt_exec_new(be, s2, g, NULL, err, sizeof err);
    rt_coll *c = rt_coll_local_new(1, be);
    rt_coll_queue *q = rt_coll_queue_new(c, 0);
    CHECK(e1 && e2);
    if (!e1 || !e2) return;
    CHECK(rt_exec_set_collective(e2, q, err, sizeof err) == 0);
    CHECK(rt_coll_queue_buckets(q) == 4);
    CHECK(rt_exec_set_collective(e2, q, err, sizeof err) == -1); /* the queue is taken */
    float img[4 * 3 * 8 * 8];
    int32_t lab[4] = {9, 0, 3, 3};
    for (int step = 0; step < 3; step++) {
        for (int i = 0; i < 4 * 3 * 8 * 8; i++)
            img[i] = (float)((i * 13 + step) % 23) / 23.0f - 0.5f;
        rt_exec *ex[2] = {e1, e2};
        for (int k = 0; k < 2; k++) {
            CHECK(rt_exec_set_input(ex[k], "image", img, sizeof img) == 0);
            CHECK(rt_exec_set_input(ex[k], "label", lab, sizeof lab) == 0);
            CHECK(rt_exec_set_scalar(ex[k], "lr", 0.05f) == 0);
            CHECK(rt_exec_set_scalar(ex[k], "grad_scale", 0.25f) == 0);
            CHECK(rt_exec_run(ex[k], err, sizeof err) == 0);
        }
    }
    int bad = 0;
    for (int i = 0; i < rt_store_count(s1); i++) {
        int64_t n = ir_numel(rt_store_type(s1, i));
        float *a = malloc(sizeof(float) * (size_t)n), *b = malloc(sizeof(float) * (size_t)n);
        rt_store_read(s1, i, a);
        rt_store_read(s2, i, b);
        bad += memcmp(a, b, sizeof(float) * (size_t)n) != 0;
        free(a), free(b);
    }
    CHECK(bad == 0);
    rt_coll_queue_free(q);
    rt_exec_free(e1);
    rt_exec_free(e2);
    rt_coll_free(c);
    rt_store_free(s1);
    rt_store_free(s2);
    rt_backend_free(be);
    ir_free(g);
    fe_free(fp);
}

int main(void) {
    RUN(one_allreduce_per_gradient_right_after_it);
    RUN(update_reads_the_sum_backward_reads_local);
    RUN(every_optimizer_reads_the_sums);
    RUN(buckets_in_completion_order_up_to_the_cap);
    RUN(refuses_twice_and_leaves_graphs_without_gradients);
    RUN(shape_rule_and_dump);
    RUN(interpreter_results_unchanged);
    RUN(generated_code_unchanged_and_pipeline_order);
    RUN(executor_hands_buckets_to_the_queue);
    return harness_done();
}
