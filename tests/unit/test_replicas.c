/* Tests for runtime/train/replicas.c with the partition pass and the local
 * collective: N replicas x batch b train exactly like 1 replica x batch N*b
 * when there is no BatchNorm; with BatchNorm each replica normalises its own
 * sub-batch ("ghost" BatchNorm: checked against per-sub-batch runs of the
 * single-device program) and the update uses the summed gradient; results
 * do not depend on thread timing or bucket size; start-up broadcast;
 * failures do not hang; placement and banner. */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>

#include "frontend/frontend.h"
#include "passes/passes.h"
#include "runtime/comm/comm.h"
#include "runtime/train/replicas.h"
#include "runtime/runtime.h"
#include "tests/fixture.h"
#include "tests/harness.h"

static char err[2048];
static rt_backend *be;
static rt_backend *bes[16]; /* every replica on the one cpu backend */

static const char *MLP = FX_NET("mlp_tiny",
                                "    x = relu(dense(flatten(image), 32))\n"
                                "    logits = dense(x, 10)\n",
                                3, 5);
static const char *BN = FX_NET("bn_tiny", FX_BN_RESIDUAL FX_GAP_LOGITS, 4, 5);

#define IMG (3 * 8 * 8)

static dpc_plan *make_plan(const char *src, int batch, size_t bucket_bytes, int fuse) {
    pass_options o = pass_default_options();
    o.fuse = fuse;
    o.bucket_bytes = bucket_bytes;
    return fx_plan(src, batch, &o, 1, err, sizeof err);
}

static void batch_data(int step, int n, float *img, int32_t *lab) {
    uint64_t h = 0x9E3779B97F4A7C15ull * (uint64_t)(step + 1);
    for (int i = 0; i < n * IMG; i++) {
        h ^= h << 13, h ^= h >> 7, h ^= h << 17;
        img[i] = (float)((double)(h >> 11) / (double)(1ull << 53) * 2 - 1);
    }
    for (int i = 0; i < n; i++) lab[i] = (int32_t)((i * 7 + step * 3) % 10);
}

/* |a - b| <= tol * (|b| + rms(b)) for every element; the count of misses.
 * N replicas against one with N times the batch sum the same gradients in
 * other groups (the all-reduce's): F32_REORDER_TOL, measured under a tenth
 * of it on OpenBLAS's Haswell, SkylakeX and default kernels. */
static int near_all(const char *what, const float *a, const float *b, int64_t n, double tol) {
    double ss = 0;
    for (int64_t i = 0; i < n; i++) ss += (double)b[i] * b[i];
    double rms = sqrt(ss / (double)(n ? n : 1));
    int bad = 0;
    for (int64_t i = 0; i < n; i++)
        if (!(fabs((double)a[i] - b[i]) <= tol * (fabs(b[i]) + rms))) {
            if (!bad)
                fprintf(stderr, "  %s[%lld]: %.9g vs %.9g (rms %.3g)\n", what, (long long)i, a[i],
                        b[i], rms);
            bad++;
        }
    return bad;
}

static float *read_tensor(rt_store *st, int i) {
    int64_t n = ir_numel(rt_store_type(st, i));
    float *x = malloc(sizeof(float) * (size_t)(n ? n : 1));
    rt_store_read(st, i, x);
    return x;
}

/* Whether every persistent tensor of replicas a..b of R is bit-identical
 * (parameters and optimizer state; BatchNorm statistics differ by design
 * when `all` is 0). */
static int replicas_identical(rt_replicas *R, int all) {
    int bad = 0;
    rt_store *s0 = rt_replicas_store(R, 0);
    for (int r = 1; r < rt_replicas_count(R); r++)
        for (int i = 0; i < rt_store_count(s0); i++) {
            const char *name = rt_store_name(s0, i);
            if (!all && strstr(name, "running_")) continue;
            float *a = read_tensor(s0, i), *b = read_tensor(rt_replicas_store(R, r), i);
            bad += memcmp(a, b, sizeof(float) * (size_t)ir_numel(rt_store_type(s0, i))) != 0;
            free(a), free(b);
        }
    return bad;
}

static rt_replicas *replicas(const dpc_plan *p, int n, rt_coll **c, uint64_t seed) {
    *c = n > 1 ? rt_coll_local_new(n, be) : NULL;
    rt_replicas *R = rt_replicas_new(bes, p, n, *c, err, sizeof err);
    if (!R) {
        fprintf(stderr, "replicas: %s\n", err);
        return NULL;
    }
    rt_store_init(rt_replicas_store(R, 0), p->train, &p->schedule, seed);
    if (rt_replicas_sync(R, err, sizeof err)) fprintf(stderr, "sync: %s\n", err);
    return R;
}

/* ---- no BatchNorm: N x b == 1 x N*b ---- */

static int mlp_equivalence(int n, int fuse) {
    int b = 3, G = n * b, steps = 5, bad = 0;
    dpc_plan *pn = make_plan(MLP, b, 0, fuse), *p1 = make_plan(MLP, G, 0, fuse);
    if (!pn || !p1) return 1;
    rt_coll *cn, *c1;
    rt_replicas *Rn = replicas(pn, n, &cn, 11), *R1 = replicas(p1, 1, &c1, 11);
    if (!Rn || !R1) return 1;
    float *img = malloc(sizeof(float) * (size_t)(G * IMG)), *ln = malloc(sizeof(float) * (size_t)G);
    float *l1 = malloc(sizeof(float) * (size_t)G);
    int32_t *lab = malloc(sizeof(int32_t) * (size_t)G);
    for (int s = 0; s < steps && !bad; s++) {
        batch_data(s, G, img, lab);
        float lr = 0.1f, gs = 1.0f / (float)G;
        if (rt_replicas_step(Rn, img, lab, lr, gs, ln, err, sizeof err) ||
            rt_replicas_step(R1, img, lab, lr, gs, l1, err, sizeof err)) {
            fprintf(stderr, "step: %s\n", err);
            bad++;
            break;
        }
        bad += near_all("loss", ln, l1, G, F32_REORDER_TOL);
        rt_store *a = rt_replicas_store(Rn, 0), *r = rt_replicas_store(R1, 0);
        for (int i = 0; i < rt_store_count(a); i++) {
            float *x = read_tensor(a, i), *y = read_tensor(r, i);
            bad +=
                near_all(rt_store_name(a, i), x, y, ir_numel(rt_store_type(a, i)), F32_REORDER_TOL);
            free(x), free(y);
        }
        bad += replicas_identical(Rn, 1);
    }
    free(img), free(ln), free(l1), free(lab);
    rt_replicas_free(Rn);
    rt_replicas_free(R1);
    rt_coll_free(cn);
    fx_plan_free(pn);
    fx_plan_free(p1);
    return bad;
}

TEST(n_replicas_equal_one_replica_with_n_times_the_batch) {
    CHECK(mlp_equivalence(4, 1) == 0);
    CHECK(mlp_equivalence(2, 0) == 0); /* unfused too */
    CHECK(mlp_equivalence(1, 1) == 0);
}

/* ---- BatchNorm: ghost batch norm over the replicas' sub-batches ---- */

TEST(batchnorm_per_replica_and_summed_update) {
    int n = 3, b = 4, steps = 3, bad = 0;
    dpc_plan *p = make_plan(BN, b, 256, 1); /* small buckets: several in flight */
    if (!p) {
        CHECK(0);
        return;
    }
    rt_coll *c;
    rt_replicas *R = replicas(p, n, &c, 5);
    /* the reference: the same program alone (no collective) */
    rt_store *rs = rt_store_new(be, p->train);
    rt_exec *ref = rt_exec_new(be, rs, p->train, p, err, sizeof err);
    CHECK(R && ref);
    if (!R || !ref) return;
    const ir_graph *g = p->train;
    const ir_train *t = &p->schedule;
    int nst = rt_store_count(rs);
    float *img = malloc(sizeof(float) * (size_t)(n * b * IMG));
    int32_t *lab = malloc(sizeof(int32_t) * (size_t)(n * b));
    for (int s = 0; s < steps; s++) {
        batch_data(100 + s, n * b, img, lab);
        float lr = 0.05f, gs = 1.0f / (float)(n * b);
        /* before: every replica's tensors */
        float ***snap = calloc((size_t)n, sizeof *snap);
        for (int r = 0; r < n; r++) {
            snap[r] = calloc((size_t)nst, sizeof **snap);
            for (int i = 0; i < nst; i++) snap[r][i] = read_tensor(rt_replicas_store(R, r), i);
        }
        CHECK(rt_replicas_step(R, img, lab, lr, gs, NULL, err, sizeof err) == 0);
        /* each sub-batch through the single-device program from replica
         * r's state: its local gradients and BatchNorm statistics */
        double **sum = calloc((size_t)g->n, sizeof *sum);
        for (int r = 0; r < n; r++) {
            for (int i = 0; i < nst; i++) rt_store_write(rs, i, snap[r][i]);
            CHECK(rt_exec_set_input(ref, "image", img + (size_t)r * b * IMG,
                                    sizeof(float) * (size_t)(b * IMG)) == 0);
            CHECK(rt_exec_set_input(ref, "label", lab + r * b, sizeof(int32_t) * (size_t)b) == 0);
            CHECK(rt_exec_set_scalar(ref, "lr", lr) == 0 &&
                  rt_exec_set_scalar(ref, "grad_scale", gs) == 0);
            CHECK(rt_exec_run(ref, err, sizeof err) == 0);
            for (int k = 0; k < g->n; k++) {
                if (!(g->nodes[k].flags & IR_FLAG_GRAD)) continue;
                int64_t cnt = ir_numel(&g->nodes[k].type);
                float *want = malloc(sizeof(float) * (size_t)cnt),
                      *got = malloc(sizeof(float) * (size_t)cnt);
                rt_exec_get_node(ref, k, want, sizeof(float) * (size_t)cnt);
                rt_exec_get_node(rt_replicas_train(R, r), k, got, sizeof(float) * (size_t)cnt);
                /* the replica's local gradient is its own sub-batch's: the
                 * all-reduce changed nothing the backward pass read */
                bad += memcmp(want, got, sizeof(float) * (size_t)cnt) != 0;
                if (!sum[k]) sum[k] = calloc((size_t)cnt, sizeof(double));
                for (int64_t e = 0; e < cnt; e++) sum[k][e] += want[e];
                free(want), free(got);
            }
            /* per-device BatchNorm: replica r's running statistics are those
             * of its own sub-batch */
            for (int i = 0; i < nst; i++) {
                if (!strstr(rt_store_name(rs, i), "running_")) continue;
                float *want = read_tensor(rs, i), *got = read_tensor(rt_replicas_store(R, r), i);
                bad +=
                    memcmp(want, got, sizeof(float) * (size_t)ir_numel(rt_store_type(rs, i))) != 0;
                free(want), free(got);
            }
        }
        /* the update: MXNet SGD with the summed gradient, from the state
         * before the step (replica 0's; all replicas agree on it) */
        rt_store *s0 = rt_replicas_store(R, 0);
        for (int k = 0; k < g->n; k++) {
            if (!(g->nodes[k].flags & IR_FLAG_GRAD)) continue;
            char pname[IR_NAME_MAX], mname[IR_NAME_MAX + 16];
            snprintf(pname, sizeof pname, "%s", g->nodes[k].name);
            pname[strlen(pname) - 5] = 0; /* strip ".grad" */
            snprintf(mname, sizeof mname, "%s.momentum", pname);
            int wi = rt_store_find(s0, pname), vi = rt_store_find(s0, mname);
            CHECK(wi >= 0 && vi >= 0);
            if (wi < 0 || vi < 0) continue;
            int64_t cnt = ir_numel(&g->nodes[k].type);
            float *w = snap[0][wi], *v = snap[0][vi];
            float *want = malloc(sizeof(float) * (size_t)cnt);
            for (int64_t e = 0; e < cnt; e++) {
                float gsum = (float)sum[k][e];
                float v2 = (float)t->momentum * v[e] - lr * (gsum * gs + (float)t->wd * w[e]);
                want[e] = w[e] + v2;
            }
            float *got = read_tensor(s0, wi);
            /* the f32 all-reduce of N against this double sum: N roundings of
             * the gradient, a few more in the update */
            bad += near_all(pname, got, want, cnt, 16 * F32_U);
            free(want), free(got);
        }
        bad += replicas_identical(R, 0);
        for (int k = 0; k < g->n; k++) free(sum[k]);
        free(sum);
        for (int r = 0; r < n; r++) {
            for (int i = 0; i < nst; i++) free(snap[r][i]);
            free(snap[r]);
        }
        free(snap);
    }
    CHECK(bad == 0);
    free(img), free(lab);
    rt_exec_free(ref);
    rt_store_free(rs);
    rt_replicas_free(R);
    rt_coll_free(c);
    fx_plan_free(p);
}

/* ---- bit-identical whatever the timing and the bucket size ---- */

static float *train_and_read(const dpc_plan *p, int n, int steps, int64_t *len) {
    rt_coll *c;
    rt_replicas *R = replicas(p, n, &c, 9);
    int b = (int)p->train->nodes[0].type.dim[0], G = n * b;
    float *img = malloc(sizeof(float) * (size_t)(G * IMG));
    int32_t *lab = malloc(sizeof(int32_t) * (size_t)G);
    for (int s = 0; s < steps; s++) {
        batch_data(s, G, img, lab);
        if (rt_replicas_step(R, img, lab, 0.1f, 1.0f / (float)G, NULL, err, sizeof err))
            fprintf(stderr, "step: %s\n", err);
    }
    rt_store *st = rt_replicas_store(R, n - 1);
    int64_t total = 0;
    for (int i = 0; i < rt_store_count(st); i++) total += ir_numel(rt_store_type(st, i));
    float *all = malloc(sizeof(float) * (size_t)total);
    int64_t at = 0;
    for (int i = 0; i < rt_store_count(st); i++) {
        rt_store_read(st, i, all + at);
        at += ir_numel(rt_store_type(st, i));
    }
    *len = total;
    free(img), free(lab);
    rt_replicas_free(R);
    rt_coll_free(c);
    return all;
}

TEST(bit_identical_across_runs_and_bucket_sizes) {
    dpc_plan *a = make_plan(BN, 2, 0, 1), *b = make_plan(BN, 2, 64, 1), *u = make_plan(BN, 2, 0, 0);
    CHECK(a && b && u);
    if (!a || !b || !u) return;
    CHECK(pass_partition_buckets(a->train, (pass_bucket[16]){{0}}, 16) == 1);
    CHECK(pass_partition_buckets(b->train, (pass_bucket[16]){{0}}, 16) > 3);
    int64_t n1, n2, n3, n4;
    float *x = train_and_read(a, 5, 3, &n1), *y = train_and_read(a, 5, 3, &n2);
    float *z = train_and_read(b, 5, 3, &n3), *w = train_and_read(u, 5, 3, &n4);
    CHECK(n1 == n2 && n1 == n3 && n1 == n4);
    CHECK(memcmp(x, y, sizeof(float) * (size_t)n1) == 0);       /* again */
    CHECK(memcmp(x, z, sizeof(float) * (size_t)n1) == 0);       /* other buckets */
    CHECK(near_all("unfused", w, x, n1, F32_REORDER_TOL) == 0); /* fusion may regroup */
    free(x), free(y), free(z), free(w);
    fx_plan_free(a), fx_plan_free(b), fx_plan_free(u);
}

/* ---- start-up broadcast, failures ---- */

TEST(sync_gives_every_replica_replica_zeros_tensors) {
    dpc_plan *p = make_plan(BN, 2, 0, 1);
    if (!p) return;
    rt_coll *c = rt_coll_local_new(3, be);
    rt_replicas *R = rt_replicas_new(bes, p, 3, c, err, sizeof err);
    CHECK(R != NULL);
    if (!R) return;
    rt_store_init(rt_replicas_store(R, 0), p->train, &p->schedule, 77);
    rt_store_init(rt_replicas_store(R, 2), p->train, &p->schedule, 78); /* different */
    CHECK(replicas_identical(R, 1) > 0);
    CHECK(rt_replicas_sync(R, err, sizeof err) == 0);
    CHECK(replicas_identical(R, 1) == 0);
    CHECK(rt_replicas_total(R) == 3 && rt_replicas_global(R, 2) == 2);
    rt_replicas_free(R);
    rt_coll_free(c);
    fx_plan_free(p);
}

static int one_fails(rt_replicas *R, int r, void *arg, char *e, size_t el) {
    (void)arg;
    if (r == 1) {
        snprintf(e, el, "replica 1 ran out of luck");
        return -1;
    }
    /* the others train and block in the all-reduce until the abort */
    rt_exec *ex = rt_replicas_train(R, r);
    rt_exec_set_scalar(ex, "lr", 0.1f);
    return rt_exec_run(ex, e, el);
}

TEST(a_failing_replica_does_not_hang_the_others) {
    dpc_plan *p = make_plan(MLP, 3, 0, 1);
    if (!p) return;
    rt_coll *c = rt_coll_local_new(3, be);
    rt_replicas *R = rt_replicas_new(bes, p, 3, c, err, sizeof err);
    if (!R) return;
    CHECK(rt_replicas_run(R, one_fails, NULL, err, sizeof err) == -1);
    CHECK_MSG(strstr(err, "out of luck") != NULL, "%s", err); /* the cause, not an echo */
    CHECK(rt_coll_aborted(c));
    rt_replicas_free(R);
    rt_coll_free(c);
    /* a communicator for another replica count is refused */
    c = rt_coll_local_new(2, be);
    CHECK(rt_replicas_new(bes, p, 3, c, err, sizeof err) == NULL);
    rt_coll_free(c);
    fx_plan_free(p);
}

/* ---- gradient accumulation: n replicas x K micro-batches == n*K replicas ---- */

static int accumulation_equivalence(int n, int K, size_t bucket_bytes, int fuse) {
    int b = 4, G = n * K * b, steps = 3, bad = 0;
    dpc_plan *p = make_plan(BN, b, bucket_bytes, fuse);
    if (!p) return 1;
    rt_coll *ca = rt_coll_local_new(n, be), *cw;
    rt_replicas *Ra = rt_replicas_new_accum(bes, p, n, K, ca, err, sizeof err);
    rt_replicas *Rw = replicas(p, n * K, &cw, 5);
    if (!Ra || !Rw) return 1;
    rt_store_init(rt_replicas_store(Ra, 0), p->train, &p->schedule, 5);
    if (rt_replicas_sync(Ra, err, sizeof err)) return 1;
    bad += rt_replicas_accumulate(Ra) != K;
    bad += rt_replicas_parts_bytes(Ra) != rt_memory_accumulate(p, K) ||
           rt_replicas_parts_bytes(Ra) <= 0;
    float *img = malloc(sizeof(float) * (size_t)(G * IMG)), *la = malloc(sizeof(float) * (size_t)G);
    float *lw = malloc(sizeof(float) * (size_t)G);
    int32_t *lab = malloc(sizeof(int32_t) * (size_t)G);
    for (int s = 0; s < steps && !bad; s++) {
        batch_data(s, G, img, lab);
        float lr = 0.1f, gs = 1.0f / (float)G;
        if (rt_replicas_step(Ra, img, lab, lr, gs, la, err, sizeof err) ||
            rt_replicas_step(Rw, img, lab, lr, gs, lw, err, sizeof err)) {
            fprintf(stderr, "step: %s\n", err);
            return 1;
        }
        bad += memcmp(la, lw, sizeof(float) * (size_t)G) != 0; /* every micro-batch's losses */
        rt_store *a = rt_replicas_store(Ra, 0), *w = rt_replicas_store(Rw, 0);
        for (int i = 0; i < rt_store_count(a); i++) {
            if (strstr(rt_store_name(a, i), "running_")) continue; /* per micro-batch, by design */
            float *x = read_tensor(a, i), *y = read_tensor(w, i);
            bad += memcmp(x, y, sizeof(float) * (size_t)ir_numel(rt_store_type(a, i))) != 0;
            free(x), free(y);
        }
        bad += replicas_identical(Ra, 0);
    }
    free(img), free(la), free(lw), free(lab);
    rt_replicas_free(Ra);
    rt_replicas_free(Rw);
    rt_coll_free(ca);
    rt_coll_free(cw);
    fx_plan_free(p);
    return bad;
}

TEST(accumulated_micro_batches_train_as_replicas_bit_for_bit) {
    CHECK(accumulation_equivalence(2, 3, 0, 1) == 0);
    CHECK(accumulation_equivalence(2, 3, 0, 0) == 0);  /* unfused */
    CHECK(accumulation_equivalence(1, 4, 64, 1) == 0); /* one replica, a bucket per gradient */
    dpc_plan *p = make_plan(BN, 4, 0, 1);
    CHECK(p && rt_replicas_new_accum(bes, p, 1, 2, NULL, err, sizeof err) == NULL); /* no coll */
    CHECK(strstr(err, "need a communicator") != NULL);
    fx_plan_free(p);
}

TEST(placement_and_banner) {
    int dev[16];
    rt_replicas_place(16, 1, dev);
    CHECK(dev[0] == 0 && dev[15] == 0);
    rt_replicas_place(4, 2, dev);
    CHECK(dev[0] == 0 && dev[1] == 0 && dev[2] == 1 && dev[3] == 1);
    rt_replicas_place(2, 8, dev);
    CHECK(dev[0] == 0 && dev[1] == 4);
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    rt_replicas_banner_text(f, "cpu", 1, 16, 1, 1, 128);
    rt_replicas_banner_text(f, "cuda", 2, 4, 2, 1, 64);
    rt_replicas_banner_text(f, "cpu", 1, 2, 1, 4, 32);
    fclose(f);
    CHECK_MSG(strstr(text, "16 replicas x batch 128 per device = global batch 2048") != NULL, "%s",
              text);
    CHECK_MSG(strstr(text, "cpu: replicas 0-15 share it") != NULL, "%s", text);
    CHECK_MSG(
        strstr(text, "8 replicas (2 processes x 4) x batch 64 per device = global batch 512") !=
            NULL,
        "%s", text);
    CHECK_MSG(strstr(text, "cuda:1: replicas 2-3 share it") != NULL, "%s", text);
    CHECK_MSG(
        strstr(text, "2 replicas x 4 micro-batches x batch 32 per device = global batch 256") !=
            NULL,
        "%s", text);
    free(text);
}

int main(void) {
    be = rt_backend_cpu();
    for (int r = 0; r < 16; r++) bes[r] = be;
    RUN(n_replicas_equal_one_replica_with_n_times_the_batch);
    RUN(batchnorm_per_replica_and_summed_update);
    RUN(bit_identical_across_runs_and_bucket_sizes);
    RUN(sync_gives_every_replica_replica_zeros_tensors);
    RUN(a_failing_replica_does_not_hang_the_others);
    RUN(accumulated_micro_batches_train_as_replicas_bit_for_bit);
    RUN(placement_and_banner);
    rt_backend_free(be);
    return harness_done();
}
