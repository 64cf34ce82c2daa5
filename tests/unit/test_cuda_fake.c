/* tests/unit/test_cuda_fake.c — the cuda backend end to end on a host-side
 * stand-in for libcuda and libcublas (tests/fake/fake_cuda.c, built by make
 * next to the tests): device selection, zero-filled allocations, staged
 * copies, launch arguments, GEMM pointers and offsets, the training step of
 * cnn_small and resnet18 through rt_exec, and CUDA-graph capture and replay.
 * The fake runs the C-dialect function of each kernel (same names and
 * arguments as the CUDA dialect; the CUDA module itself is still compiled by
 * NVRTC and handed to the fake driver as a cubin) and cblas for GEMMs, so
 * results equal the cpu backend's up to the order of GEMM sums (1e-4
 * relative; a wrong pointer, offset, argument or order is off by O(1)),
 * and a replayed graph equals the eager step bit for bit.
 * What only a GPU can show (the CUDA kernels' results, real asynchrony) is
 * tests/gpu/check.sh's. Without the CUDA toolkit there is nothing to test.
 */
#include <dlfcn.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "codegen/codegen.h"
#include "frontend/frontend.h"
#include "passes/passes.h"
#include "runtime/backend.h"
#include "runtime/backend_cuda.h"
#include "runtime/backend_select.h"
#include "runtime/compile_cache.h"
#include "runtime/exec.h"
#include "runtime/rng.h"
#include "tests/harness.h"

#ifdef DPC_HAVE_CUDA

/* The C dialect's kernel ABI (codegen.h); the fake runs [0, count). */
typedef void (*c_kernel)(void *const *arg, long long count, long long lo, long long hi);

static char err[8192];
static char fake_path[1024];
static void (*fake_register)(const char *, c_kernel, int);
static void (*fake_reset)(void);
static void *c_modules[16];
static int n_c_modules;

/* Loads the fake before the backend's loader does, so both share it. */
static int load_fake(void) {
    const char *build = getenv("DPC_BUILD");
    snprintf(fake_path, sizeof fake_path, "%s/fake/libfakecuda.so", build && *build ? build : "build/rel");
    void *h = dlopen(fake_path, RTLD_NOW | RTLD_LOCAL | RTLD_NODELETE);
    if (!h) {
        fprintf(stderr, "cannot load the fake driver: %s (run through make test)\n", dlerror());
        return -1;
    }
    void *reg = dlsym(h, "fake_cuda_register"), *reset = dlsym(h, "fake_cuda_reset");
    if (!reg || !reset) return -1;
    memcpy(&fake_register, &reg, sizeof reg); /* POSIX: dlsym's void * is the function */
    memcpy(&fake_reset, &reset, sizeof reset);
    setenv("DPC_LIBCUDA", fake_path, 1);
    setenv("DPC_LIBCUBLAS", fake_path, 1);
    return 0;
}

static ir_graph *model_graph(const char *path, int batch, int training) {
    fe_program *fp = fe_parse_file(path);
    if (!fp) return NULL;
    ir_graph *g = fe_build_graph(fp, batch, training);
    pass_options o = pass_default_options();
    int rc = !g ? -1
             : training ? pass_run_train(&g, fe_train(fp), &o, err, sizeof err)
                        : pass_run_eval(&g, &o, err, sizeof err);
    fe_free(fp);
    if (rc) {
        fprintf(stderr, "  %s: %s\n", path, err);
        ir_free(g);
        return NULL;
    }
    return g;
}

/* Registers g's C-dialect kernels with the fake under their names; checks
 * that the CUDA dialect has the same kernels (names, buffer counts). */
static int register_kernels(const ir_graph *g) {
    cg_program *pc = cg_generate(g, CG_DIALECT_C, NULL, err, sizeof err);
    cg_program *pu = pc ? cg_generate(g, CG_DIALECT_CUDA, NULL, err, sizeof err) : NULL;
    int rc = pc && pu ? 0 : -1;
    CHECK_MSG(!rc, "%s", err);
    if (!rc && pc->nkernels != pu->nkernels) rc = -1;
    for (int k = 0; !rc && k < pc->nkernels; k++)
        if (strcmp(pc->kernels[k].name, pu->kernels[k].name) || pc->kernels[k].nargs != pu->kernels[k].nargs)
            rc = -1;
    CHECK_MSG(!rc, "the C and CUDA dialects emit different kernels");
    char *so = rc ? NULL : rt_cache_compile_c(pc->source, NULL, err, sizeof err);
    void *h = so ? dlopen(so, RTLD_NOW | RTLD_LOCAL | RTLD_NODELETE) : NULL;
    if (!rc && !h) {
        CHECK_MSG(0, "C module: %s", so ? dlerror() : err);
        rc = -1;
    }
    for (int k = 0; !rc && k < pc->nkernels; k++) {
        void *sym = dlsym(h, pc->kernels[k].name);
        c_kernel fn;
        memcpy(&fn, &sym, sizeof fn);
        if (!sym) rc = -1;
        else fake_register(pc->kernels[k].name, fn, pc->kernels[k].nargs);
    }
    if (h && n_c_modules < 16) c_modules[n_c_modules++] = h;
    free(so);
    cg_program_free(pc);
    cg_program_free(pu);
    return rc;
}

/* ---- selection and memory ---------------------------------------------------------- */

TEST(auto_opens_the_device_without_a_notice) {
    char why[256] = "";
    CHECK_MSG(rt_cuda_device_count(why, sizeof why) == 1, "%s", why);
    int fb = -1;
    rt_backend *be = rt_backend_open("auto", &fb, err, sizeof err);
    CHECK_MSG(be && !strcmp(be->name, "cuda") && fb == 0, "%s", err);
    if (!be) return;
    CHECK(rt_backend_is_cuda(be));
    CHECK_MSG(strstr(rt_cuda_device_name(be), "sm_90, 132 SMs"), "%s", rt_cuda_device_name(be));
    CHECK(be->dialect == CG_DIALECT_CUDA);
    rt_backend_free(be);
    be = rt_backend_open_on("cuda", 3, NULL, err, sizeof err);
    CHECK(be == NULL && strstr(err, "no CUDA device 3"));
}

TEST(memory_is_zeroed_and_copies_round_trip) {
    rt_backend *be = rt_backend_cuda(0, err, sizeof err);
    CHECK_MSG(be != NULL, "%s", err);
    if (!be) return;
    enum { N = 7 }; /* more than the staging ring holds */
    size_t sizes[N] = {4, 1000, 1 << 20, 12, 3 << 20, 256, 77777};
    void *dev[N];
    unsigned char *host[N], *back[N];
    for (int i = 0; i < N; i++) {
        dev[i] = be->alloc(be, sizes[i]);
        back[i] = malloc(sizes[i]);
        be->copy_out(be, back[i], dev[i], sizes[i]);
        size_t nz = 0;
        for (size_t j = 0; j < sizes[i]; j++) nz += back[i][j] != 0;
        CHECK_MSG(nz == 0, "allocation %d has %zu non-zero bytes", i, nz);
        host[i] = malloc(sizes[i]);
        for (size_t j = 0; j < sizes[i]; j++) host[i][j] = (unsigned char)(j * 7 + (size_t)i);
        be->copy_in(be, dev[i], host[i], sizes[i]);
        memset(host[i], 0, 1); /* the caller's buffer is free on return */
        host[i][0] = (unsigned char)i;
    }
    for (int i = 0; i < N; i++) {
        be->copy_out(be, back[i], dev[i], sizes[i]);
        CHECK_MSG(!memcmp(back[i], host[i], sizes[i]), "buffer %d", i);
    }
    /* Offsets inside a buffer name locations in it (backend.h). */
    be->copy(be, (char *)dev[2] + 100, (char *)dev[1] + 10, 500);
    be->copy_out(be, back[2], dev[2], sizes[2]);
    CHECK(!memcmp(back[2] + 100, host[1] + 10, 500) && !memcmp(back[2], host[2], 100));
    rt_cuda_stats s;
    CHECK(rt_cuda_stats_get(be, &s) == 0 && s.copies_in == N && s.copies_out == 2 * N + 1);
    for (int i = 0; i < N; i++) {
        be->free(be, dev[i]);
        free(host[i]);
        free(back[i]);
    }
    CHECK(be->sync(be, err, sizeof err) == 0);
    rt_backend_free(be);
}

/* ---- a training step ----------------------------------------------------------------- */

typedef struct {
    rt_backend *be;
    rt_store *st;
    rt_exec *ex;
} side;

static void fill_inputs(rt_exec *ex, const ir_graph *g, uint64_t seed) {
    rt_rng r;
    rt_rng_seed(&r, seed);
    for (int i = 0; i < g->n; i++) {
        const ir_node *n = &g->nodes[i];
        if (n->op != IR_OP_INPUT) continue;
        int64_t numel = ir_numel(&n->type);
        if (!strcmp(n->name, "lr")) {
            rt_exec_set_scalar(ex, "lr", 0.1f);
        } else if (!strcmp(n->name, "grad_scale")) {
            rt_exec_set_scalar(ex, "grad_scale", 0.25f);
        } else if (n->type.dtype == IR_I32) {
            int32_t *v = malloc(sizeof *v * (size_t)numel);
            for (int64_t j = 0; j < numel; j++) v[j] = (int32_t)(rt_rng_next(&r) % 10);
            CHECK(rt_exec_set_input(ex, n->name, v, sizeof *v * (size_t)numel) == 0);
            free(v);
        } else {
            float *v = malloc(sizeof *v * (size_t)numel);
            for (int64_t j = 0; j < numel; j++) v[j] = rt_rng_uniform_range(&r, -2, 2);
            CHECK(rt_exec_set_input(ex, n->name, v, sizeof *v * (size_t)numel) == 0);
            free(v);
        }
    }
}

/* What a step leaves that stays valid after it (exec.h: outputs,
 * gradients) and every store tensor, as host copies. */
typedef struct {
    int n;          /* entries: live nodes, then store tensors */
    char **what;
    float **v;      /* raw bytes as floats (i32 outputs compare bitwise too) */
    int64_t *len;
} state;

static state state_of(side *sd, const ir_graph *g) {
    state s = {0, NULL, NULL, NULL};
    int cap = g->n + rt_store_count(sd->st) + 1;
    s.what = calloc((size_t)cap, sizeof *s.what);
    s.v = calloc((size_t)cap, sizeof *s.v);
    s.len = calloc((size_t)cap, sizeof *s.len);
    for (int i = 0; i < g->n; i++) {
        const ir_node *n = &g->nodes[i];
        if (!(n->flags & (IR_FLAG_OUTPUT | IR_FLAG_LOSS | IR_FLAG_GRAD))) continue;
        size_t bytes = (size_t)ir_numel(&n->type) * ir_dtype_size(n->type.dtype);
        float *x = malloc(bytes + 4);
        if (rt_exec_get_node(sd->ex, i, x, bytes)) {
            free(x);
            continue;
        }
        char name[300];
        snprintf(name, sizeof name, "node %d (%s '%s')", i, ir_ops[n->op].name, n->name);
        s.what[s.n] = strdup(name);
        s.v[s.n] = x;
        s.len[s.n++] = (int64_t)(bytes / 4);
    }
    for (int i = 0; i < rt_store_count(sd->st); i++) {
        int64_t n = ir_numel(rt_store_type(sd->st, i));
        float *x = malloc(sizeof(float) * (size_t)n);
        rt_store_read(sd->st, i, x);
        s.what[s.n] = strdup(rt_store_name(sd->st, i));
        s.v[s.n] = x;
        s.len[s.n++] = n;
    }
    return s;
}

static void state_free(state *s) {
    for (int i = 0; i < s->n; i++) free(s->what[i]), free(s->v[i]);
    free(s->what), free(s->v), free(s->len);
}

/* tol 0: bit for bit. Else relative L2 per tensor: the cpu backend splits
 * GEMMs into blocks across its threads (a dense layer's columns become
 * matrix-vector products), the fake runs each as one cblas call, so sums
 * of the same products come in another order; a wrong pointer, offset or
 * argument is off by O(1). Returns the number of tensors that differ. */
static int state_diff(const state *a, const state *b, double tol, const char *what) {
    int diffs = 0;
    CHECK_MSG(a->n == b->n, "%s: %d vs %d tensors", what, a->n, b->n);
    for (int i = 0; i < a->n && i < b->n; i++) {
        int bad;
        double num = 0, den = 0;
        if (tol == 0) {
            bad = memcmp(a->v[i], b->v[i], sizeof(float) * (size_t)a->len[i]) != 0;
        } else {
            for (int64_t j = 0; j < a->len[i]; j++) {
                double d = (double)a->v[i][j] - b->v[i][j];
                num += d * d;
                den += (double)b->v[i][j] * b->v[i][j];
            }
            bad = !(sqrt(num) <= tol * (sqrt(den) + 1e-30));
        }
        if (bad && diffs++ < 5)
            CHECK_MSG(0, "%s: %s differs (rel L2 %.3g)", what, a->what[i],
                      den > 0 ? sqrt(num / den) : sqrt(num));
    }
    return diffs;
}

static void step_matches_cpu(const char *model, int batch) {
    ir_graph *g = model_graph(model, batch, 1);
    CHECK(g != NULL);
    if (!g || register_kernels(g)) {
        ir_free(g);
        return;
    }
    side c = {rt_backend_cpu(), NULL, NULL}, u = {rt_backend_cuda(0, err, sizeof err), NULL, NULL};
    CHECK_MSG(u.be != NULL, "%s", err);
    if (!u.be) {
        rt_backend_free(c.be);
        ir_free(g);
        return;
    }
    side *sides[2] = {&c, &u};
    ir_train t;
    ir_train_defaults(&t);
    for (int k = 0; k < 2; k++) {
        sides[k]->st = rt_store_new(sides[k]->be, g);
        rt_store_init(sides[k]->st, g, &t, 11);
        sides[k]->ex = rt_exec_new(sides[k]->be, sides[k]->st, g, NULL, err, sizeof err);
        CHECK_MSG(sides[k]->ex != NULL, "%s: %s", sides[k]->be->name, err);
    }
    if (c.ex && u.ex) {
        cg_program *p = cg_generate(g, CG_DIALECT_CUDA, NULL, err, sizeof err);
        int gemms = 0, launches = cg_program_launches(p, &gemms);
        rt_cuda_stats s0, s1;
        rt_cuda_stats_get(u.be, &s0);
        for (int k = 0; k < 2; k++) {
            fill_inputs(sides[k]->ex, g, 5);
            CHECK_MSG(rt_exec_run(sides[k]->ex, err, sizeof err) == 0, "%s", err);
        }
        rt_cuda_stats_get(u.be, &s1);
        CHECK_MSG(s1.launches - s0.launches + s1.gemms - s0.gemms == launches &&
                      s1.gemms - s0.gemms == gemms,
                  "%lld launches + %lld gemms, the program makes %d (%d gemms)",
                  (long long)(s1.launches - s0.launches), (long long)(s1.gemms - s0.gemms), launches,
                  gemms);
        state sc = state_of(&c, g), su = state_of(&u, g);
        CHECK(state_diff(&su, &sc, 1e-4, model) == 0);
        state_free(&sc);

        /* Graph: record the step, restore the starting weights and replay:
         * the result is the eager step's. */
        int n = rt_store_count(u.st);
        float **init = malloc(sizeof *init * (size_t)n);
        rt_store *fresh = rt_store_new(c.be, g);
        rt_store_init(fresh, g, &t, 11);
        for (int i = 0; i < n; i++) {
            init[i] = malloc(sizeof(float) * (size_t)ir_numel(rt_store_type(u.st, i)));
            rt_store_read(fresh, i, init[i]);
        }
        rt_store_free(fresh);
        CHECK(rt_cuda_graph_begin(u.be, err, sizeof err) == 0);
        CHECK(rt_cuda_graph_begin(u.be, err, sizeof err) == -1 && strstr(err, "already"));
        CHECK_MSG(rt_exec_run(u.ex, err, sizeof err) == 0, "%s", err);
        rt_cuda_graph *gr = rt_cuda_graph_end(u.be, err, sizeof err);
        CHECK_MSG(gr != NULL, "%s", err);
        CHECK(rt_cuda_graph_end(u.be, err, sizeof err) == NULL);
        rt_cuda_stats s2;
        rt_cuda_stats_get(u.be, &s2);
        CHECK(s2.launches == s1.launches && s2.captured_launches + s2.captured_gemms == launches);
        if (gr) {
            CHECK(rt_cuda_graph_nodes(gr) == launches);
            for (int rep = 0; rep < 2; rep++) { /* a graph replays as often as asked */
                for (int i = 0; i < n; i++) rt_store_write(u.st, i, init[i]);
                fill_inputs(u.ex, g, 5);
                CHECK(rt_cuda_graph_launch(u.be, gr, err, sizeof err) == 0);
                CHECK(u.be->sync(u.be, err, sizeof err) == 0);
                state sr = state_of(&u, g);
                CHECK(state_diff(&sr, &su, 0, "graph replay vs eager") == 0);
                state_free(&sr);
            }
            rt_cuda_graph_free(u.be, gr);
        }
        for (int i = 0; i < n; i++) free(init[i]);
        free(init);
        state_free(&su);
        cg_program_free(p);
    }
    for (int k = 0; k < 2; k++) {
        rt_exec_free(sides[k]->ex);
        rt_store_free(sides[k]->st);
        rt_backend_free(sides[k]->be);
    }
    fake_reset();
    ir_free(g);
}

TEST(cnn_small_step_equals_cpu) { step_matches_cpu("models/cnn_small.net", 4); }
TEST(resnet18_step_equals_cpu) { step_matches_cpu("models/resnet18.net", 4); }

/* The eval program (another module, other kernels) on the same store. */
TEST(resnet18_eval_equals_cpu) {
    ir_graph *g = model_graph("models/resnet18.net", 6, 0);
    CHECK(g != NULL);
    if (!g || register_kernels(g)) {
        ir_free(g);
        return;
    }
    side c = {rt_backend_cpu(), NULL, NULL}, u = {rt_backend_cuda(0, err, sizeof err), NULL, NULL};
    ir_train t;
    ir_train_defaults(&t);
    side *sides[2] = {&c, &u};
    for (int k = 0; u.be && k < 2; k++) {
        sides[k]->st = rt_store_new(sides[k]->be, g);
        rt_store_init(sides[k]->st, g, &t, 3);
        sides[k]->ex = rt_exec_new(sides[k]->be, sides[k]->st, g, NULL, err, sizeof err);
        CHECK_MSG(sides[k]->ex != NULL, "%s", err);
        if (sides[k]->ex) {
            fill_inputs(sides[k]->ex, g, 9);
            CHECK(rt_exec_run(sides[k]->ex, err, sizeof err) == 0);
        }
    }
    if (c.ex && u.ex) {
        state sc = state_of(&c, g), su = state_of(&u, g);
        CHECK(state_diff(&su, &sc, 1e-4, "resnet18 eval") == 0);
        state_free(&sc);
        state_free(&su);
    }
    for (int k = 0; k < 2; k++) {
        rt_exec_free(sides[k]->ex);
        rt_store_free(sides[k]->st);
        rt_backend_free(sides[k]->be);
    }
    fake_reset();
    ir_free(g);
}

int main(void) {
    if (load_fake()) {
        printf("0 passed, 1 failed\n");
        return 1;
    }
    RUN(auto_opens_the_device_without_a_notice);
    RUN(memory_is_zeroed_and_copies_round_trip);
    RUN(cnn_small_step_equals_cpu);
    RUN(resnet18_step_equals_cpu);
    RUN(resnet18_eval_equals_cpu);
    for (int i = 0; i < n_c_modules; i++) dlclose(c_modules[i]);
    return harness_done();
}

#else

int main(void) {
    printf("note: built without the CUDA toolkit: no cuda backend to test\n");
    (void)harness_current_failed;
    (void)harness_current;
    return harness_done();
}

#endif
