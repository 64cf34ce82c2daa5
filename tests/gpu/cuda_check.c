/* tests/gpu/cuda_check.c — cuda vs cpu on one plan, and the cuda backend's
 * step timings (tests/gpu/check.sh runs it on a GPU machine).
 *
 *     cuda_check PLAN [--seed S] [--bench N] [--figures FILE] [--table FILE]
 *                [--ref PLAN2] [--tag T]
 *
 * Parity: both backends start from the same weights (initialised on the
 * cpu, copied to the device bit for bit) and take one training step on the
 * same batch; then the eval program runs on both. The cpu takes the step
 * twice, in its default order and in another (RT_SUM_ORDER_SPLIT_K), and
 * what separates those two, per tensor, is the floor: the GPU's distance
 * from the cpu (relative L2, ||cuda - cpu|| / ||cpu||) is judged in units
 * of it (see parity() below for the limit, 10 floors, and why). Gated: the
 * per-sample loss, the train logits and the BatchNorm running statistics;
 * gradients, momentum, weights and the eval logits after the step are
 * figures (per class: the median and largest ratio, and which tensor), not
 * gates. A bf16 plan is held to the cpu's bf16 plan (format/bf16.h emulates
 * it bit for bit) in two orders the same way. --table FILE appends the
 * classes as markdown rows (check.sh puts them in summary.md), --tag T
 * starts every figure's name with T_. --ref PLAN2 runs PLAN2 on the cpu
 * instead (the fp32 plan of the same model: bf16 against fp32); at bf16's
 * own error (tests/bf16_test.sh: update errors of 0.3-0.5 relative L2) no
 * floor of two fp32 orders applies, so then nothing is gated.
 * Then the same step replayed as a CUDA graph from the same starting
 * weights must give the eager cuda step's results (relative L2 1e-6 on
 * every tensor; cuBLAS and the kernels are deterministic, so expect 0).
 * DPC_CHECK_BREAK=REL starts the GPU with one weight off by REL relative:
 * the gates must fail (tests/gpu_rehearsal_test.sh shows they do).
 *
 * Bench (--bench N): N steady-state training steps after warm-up, eagerly
 * and as a graph, each step copying its inputs and reading the losses as
 * dprun does: ms per step, images per second, and launches per step (kernel
 * launches plus GEMM calls the host makes; one graph launch with the
 * graph's node count when replayed).
 *
 * Prints one `ok`/`FAIL` line per check, `figure: NAME VALUE` lines (also
 * appended to --figures FILE) and `N passed, N failed`. Exit status: 0, 1 on
 * a failed check, 2 when there is no CUDA device (nothing was checked).
 */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "format/plan.h"
#include "runtime/device/device.h"
#include "runtime/cuda/cuda.h"
#include "runtime/clock.h"
#include "runtime/exec/exec.h"
#include "runtime/data/data.h"

static int passed, failed;
static FILE *figures;
static char err[4096];

static void figure(const char *name, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static const char *fig_tag = ""; /* --tag: "bf16_" */
static void figure(const char *name, const char *fmt, ...) {
    char v[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(v, sizeof v, fmt, ap);
    va_end(ap);
    printf("figure: %s%s %s\n", fig_tag, name, v);
    if (figures) fprintf(figures, "%s%s %s\n", fig_tag, name, v);
}

static void *xmalloc(size_t n) {
    void *p = malloc(n ? n : 1);
    if (!p) {
        fprintf(stderr, "cuda_check: out of memory\n");
        exit(1);
    }
    return p;
}

/* Relative L2 error and max abs difference of got against ref. */
static double rel_l2(const float *got, const float *ref, int64_t n, double *max_abs) {
    double num = 0, den = 0, mx = 0;
    for (int64_t i = 0; i < n; i++) {
        double d = (double)got[i] - (double)ref[i];
        num += d * d;
        den += (double)ref[i] * ref[i];
        if (fabs(d) > mx || d != d) mx = d != d ? INFINITY : fabs(d);
    }
    if (max_abs) *max_abs = mx;
    if (num != num) return INFINITY;
    return den > 0 ? sqrt(num / den) : sqrt(num);
}

/* One check line; worst[] keeps the largest error per class for the
 * summary figures. */
static void compare(const char *what, const float *got, const float *ref, int64_t n, double tol,
                    double *worst) {
    double mx;
    double e = rel_l2(got, ref, n, &mx);
    int ok = e <= tol;
    if (worst && e > *worst) *worst = e;
    ok ? passed++ : failed++;
    if (!ok || getenv("CUDA_CHECK_VERBOSE"))
        printf("%s %s: rel L2 %.3g (tol %.0e), max |diff| %.3g over %lld values\n",
               ok ? "ok  " : "FAIL", what, e, tol, mx, (long long)n);
}

typedef struct {
    rt_backend *be;
    rt_store *st;
    rt_exec *train, *eval;
} side;

static int side_open(side *s, rt_backend *be, const dpc_plan *plan) {
    s->be = be;
    s->st = rt_store_new(be, plan->train);
    s->train = rt_exec_new(be, s->st, plan->train, plan, err, sizeof err);
    if (!s->train) {
        fprintf(stderr, "cuda_check: %s: train program: %s\n", be->name, err);
        return -1;
    }
    s->eval = rt_exec_new(be, s->st, plan->eval, plan, err, sizeof err);
    if (!s->eval) {
        fprintf(stderr, "cuda_check: %s: eval program: %s\n", be->name, err);
        return -1;
    }
    return 0;
}

static void side_close(side *s) {
    rt_exec_free(s->train);
    rt_exec_free(s->eval);
    rt_store_free(s->st);
}

/* Every persistent tensor, host copies, in store order. */
typedef struct {
    int n;
    float **t;
    int64_t *numel;
} snapshot;

static snapshot snap(rt_store *st) {
    snapshot s;
    s.n = rt_store_count(st);
    s.t = xmalloc(sizeof *s.t * (size_t)s.n);
    s.numel = xmalloc(sizeof *s.numel * (size_t)s.n);
    for (int i = 0; i < s.n; i++) {
        s.numel[i] = ir_numel(rt_store_type(st, i));
        s.t[i] = xmalloc(sizeof(float) * (size_t)s.numel[i]);
        rt_store_read(st, i, s.t[i]);
    }
    return s;
}

static void restore(rt_store *st, const snapshot *s) {
    for (int i = 0; i < s->n; i++) rt_store_write(st, i, s->t[i]);
}

static void snap_free(snapshot *s) {
    for (int i = 0; i < s->n; i++) free(s->t[i]);
    free(s->t);
    free(s->numel);
}

static int ends_with(const char *s, const char *suffix) {
    size_t a = strlen(s), b = strlen(suffix);
    return a >= b && !strcmp(s + a - b, suffix);
}

typedef struct {
    float *img, *eimg;
    int32_t *lab, *elab;
    size_t img_bytes, eimg_bytes;
    int batch, ebatch, classes;
} batch_data;

static int node_dim0(const ir_graph *g, const char *name, int64_t *numel) {
    for (int i = 0; i < g->n; i++)
        if (g->nodes[i].op == IR_OP_INPUT && !strcmp(g->nodes[i].name, name)) {
            *numel = ir_numel(&g->nodes[i].type);
            return (int)g->nodes[i].type.dim[0];
        }
    return -1;
}

static int logits_classes(const ir_graph *g) {
    for (int i = g->n - 1; i >= 0; i--)
        if (!strcmp(g->nodes[i].name, "logits") && g->nodes[i].type.ndim == 2)
            return (int)g->nodes[i].type.dim[1];
    return 10;
}

/* A deterministic batch: images like normalised CIFAR pixels, labels. */
static void make_batch(batch_data *b, const dpc_plan *plan, uint64_t seed) {
    int64_t n = 0, en = 0;
    b->batch = node_dim0(plan->train, "image", &n);
    b->ebatch = node_dim0(plan->eval, "image", &en);
    b->classes = logits_classes(plan->eval);
    b->img_bytes = sizeof(float) * (size_t)n;
    b->eimg_bytes = sizeof(float) * (size_t)en;
    b->img = xmalloc(b->img_bytes);
    b->eimg = xmalloc(b->eimg_bytes);
    b->lab = xmalloc(sizeof(int32_t) * (size_t)b->batch);
    b->elab = xmalloc(sizeof(int32_t) * (size_t)b->ebatch);
    rt_rng r;
    rt_rng_seed(&r, seed ^ 0x5eed);
    for (int64_t i = 0; i < n; i++) b->img[i] = rt_rng_uniform_range(&r, -2.0f, 2.0f);
    for (int64_t i = 0; i < en; i++) b->eimg[i] = rt_rng_uniform_range(&r, -2.0f, 2.0f);
    for (int i = 0; i < b->batch; i++)
        b->lab[i] = (int32_t)(rt_rng_next(&r) % (uint64_t)b->classes);
    for (int i = 0; i < b->ebatch; i++)
        b->elab[i] = (int32_t)(rt_rng_next(&r) % (uint64_t)b->classes);
}

static int set_train_inputs(rt_exec *ex, const batch_data *b) {
    if (rt_exec_set_input(ex, "image", b->img, b->img_bytes) ||
        rt_exec_set_input(ex, "label", b->lab, sizeof(int32_t) * (size_t)b->batch) ||
        rt_exec_set_scalar(ex, "lr", 0.1f) ||
        rt_exec_set_scalar(ex, "grad_scale", 1.0f / (float)b->batch)) {
        fprintf(stderr, "cuda_check: the train program refused its inputs\n");
        return -1;
    }
    return 0;
}

/* What one step leaves, read back: losses, train logits (if readable),
 * gradients (if readable), the store, eval logits. */
typedef struct {
    float *loss, *logits, *elogits;
    int has_logits;
    float **grad;
    snapshot after;
} result;

static int collect(side *s, const batch_data *b, const snapshot *before, result *r, int with_eval) {
    memset(r, 0, sizeof *r);
    r->loss = xmalloc(sizeof(float) * (size_t)b->batch);
    if (rt_exec_get(s->train, "loss", r->loss, sizeof(float) * (size_t)b->batch)) {
        fprintf(stderr, "cuda_check: cannot read the loss\n");
        return -1;
    }
    r->logits = xmalloc(sizeof(float) * (size_t)b->batch * (size_t)b->classes);
    r->has_logits = !rt_exec_get(s->train, "logits", r->logits,
                                 sizeof(float) * (size_t)b->batch * (size_t)b->classes);
    r->grad = calloc((size_t)before->n, sizeof *r->grad);
    for (int i = 0; i < before->n; i++) {
        char name[300];
        snprintf(name, sizeof name, "%s.grad", rt_store_name(s->st, i));
        r->grad[i] = xmalloc(sizeof(float) * (size_t)before->numel[i]);
        if (rt_exec_get(s->train, name, r->grad[i], sizeof(float) * (size_t)before->numel[i])) {
            free(r->grad[i]);
            r->grad[i] = NULL;
        }
    }
    r->after = snap(s->st);
    if (with_eval) {
        if (rt_exec_set_input(s->eval, "image", b->eimg, b->eimg_bytes)) {
            fprintf(stderr, "cuda_check: the eval program refused its image\n");
            return -1;
        }
        rt_exec_set_input(s->eval, "label", b->elab, sizeof(int32_t) * (size_t)b->ebatch);
        if (rt_exec_run(s->eval, err, sizeof err)) {
            fprintf(stderr, "cuda_check: %s: eval: %s\n", s->be->name, err);
            return -1;
        }
        r->elogits = xmalloc(sizeof(float) * (size_t)b->ebatch * (size_t)b->classes);
        if (rt_exec_get(s->eval, "logits", r->elogits,
                        sizeof(float) * (size_t)b->ebatch * (size_t)b->classes)) {
            fprintf(stderr, "cuda_check: cannot read the eval logits\n");
            return -1;
        }
    }
    return 0;
}

static void result_free(result *r, int n) {
    free(r->loss);
    free(r->logits);
    free(r->elogits);
    for (int i = 0; r->grad && i < n; i++) free(r->grad[i]);
    free(r->grad);
    if (r->after.t) snap_free(&r->after);
}

/* The CUDA graph's step against the eager one: the same kernels and cuBLAS
 * calls on the same data, so any difference is the capture's (rel L2 1e-6;
 * expect 0). */
static void compare_graph(side *s, const batch_data *b, const result *got, const result *ref) {
    char what[400];
    double w_fwd = 0, w_rest = 0;
    const double t = 1e-6;
    compare("graph vs eager: loss", got->loss, ref->loss, b->batch, t, &w_fwd);
    if (got->has_logits && ref->has_logits)
        compare("graph vs eager: train logits", got->logits, ref->logits,
                (int64_t)b->batch * b->classes, t, &w_fwd);
    for (int i = 0; i < ref->after.n; i++) {
        const char *name = rt_store_name(s->st, i);
        if (got->grad[i] && ref->grad[i]) {
            snprintf(what, sizeof what, "graph vs eager: %s.grad", name);
            compare(what, got->grad[i], ref->grad[i], ref->after.numel[i], t, &w_rest);
        }
        snprintf(what, sizeof what, "graph vs eager: %s (after the step)", name);
        compare(what, got->after.t[i], ref->after.t[i], ref->after.numel[i], t, &w_rest);
    }
    figure("graph_vs_eager_worst_rel_l2_forward", "%.3g", w_fwd);
    figure("graph_vs_eager_worst_rel_l2_state",
           "%.3g (gradients, weights, momentum, running "
           "statistics)",
           w_rest);
}

/* ---- parity against the cpu's own spread -------------------------------------------
 *
 * The cpu takes the step twice: in its default order, and with every GEMM's
 * k summed as two halves and the convolutions by im2col GEMMs
 * (RT_SUM_ORDER_SPLIT_K). Both are right; what separates them, per tensor,
 * is what rounding in another order makes through this network and batch:
 * the floor. The GPU sums in its own order, so its distance from the cpu
 * (rel L2, against the default order) is read in units of that floor.
 *
 * floor = max(measured, FLOOR_ULPS roundings of the tensor's own type,
 * relative: 2^-22 for f32, 2^-6 for bf16): a tensor both cpu orders happen
 * to round alike (a short sum) has a measured floor of 0, and a GPU a few
 * roundings off it is still right. (A bf16 plan's loss, logits, gradients
 * and state are f32: its activations' bf16 roundings show in the measured
 * floor, not in this least one.)
 *
 * Gated (ratio <= FLOOR_MULTIPLE): the forward pass (per-sample loss, train
 * logits) and the BatchNorm running statistics, which depend on the forward
 * pass alone. A correct GPU's order is one more order like the cpu's two:
 * its rounding errors are of the same kind and size (each dot product's
 * error grows like sqrt(k) units whatever the blocking), so its distance
 * from the cpu is of the floor's size; 10 leaves room for an order that
 * rounds several times more (other reduction trees, float atomics) and for
 * the floor being one sample of the spread, while a wrong kernel (a missing
 * term, a wrong index, a race) moves these tensors by 1e-3 to 1 relative,
 * 1e3 to 1e6 floors in fp32.
 * Reported, not gated: gradients, momentum, weights and the eval logits
 * after the step: the backward pass through BatchNorm amplifies the
 * forward's rounding chaotically (52 of ResNet-18's 62 gradients differ
 * by more than 2e-3 between two cpu orders), so one step's floor is
 * too noisy a sample to gate on; their ratios are figures. */
#define FLOOR_MULTIPLE 10.0
#define FLOOR_ULPS     4.0

typedef enum { K_FORWARD, K_BN, K_GRAD, K_MOMENTUM, K_WEIGHT, K_EVAL, K_COUNT } parity_class;
static const struct {
    const char *name, *what;
    int gated;
} classes[K_COUNT] = {
    [K_FORWARD] = {"forward", "loss, train logits", 1},
    [K_BN] = {"bn_running", "BatchNorm running mean, var", 1},
    [K_GRAD] = {"gradients", "parameter gradients", 0},
    [K_MOMENTUM] = {"momentum", "momentum after the step", 0},
    [K_WEIGHT] = {"weights", "weights after the step", 0},
    [K_EVAL] = {"eval_logits", "eval logits after the step", 0},
};

typedef struct {
    int n;
    double ratio[4096], floor[4096], worst_ratio;
    char worst[200]; /* the tensor of the largest ratio */
} class_rows;

static int gate_parity = 1; /* 0 with --ref: bf16 against fp32 has no floor */
static FILE *table;         /* --table */

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y) + (x != x) - (y != y);
}

static double median(double *v, int n) {
    if (!n) return 0;
    qsort(v, (size_t)n, sizeof *v, cmp_double);
    return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

/* One rounding of a tensor of type t, relative. */
static double rounding(ir_dtype t) { return t == IR_BF16 ? 0x1p-8 : 0x1p-24; }

/* The type of the graph's value called name (f32 when there is none). */
static ir_dtype named_dtype(const ir_graph *g, const char *name) {
    for (int i = g->n - 1; i >= 0; i--)
        if (!strcmp(g->nodes[i].name, name)) return g->nodes[i].type.dtype;
    return IR_F32;
}

static void floor_compare(class_rows *rows, parity_class k, const char *what, ir_dtype t,
                          const float *got, const float *ref, const float *ref2, int64_t n) {
    double mx;
    double measured = rel_l2(ref2, ref, n, NULL), least = FLOOR_ULPS * rounding(t);
    double fl = measured > least ? measured : least;
    double e = rel_l2(got, ref, n, &mx);
    double ratio = e / fl; /* NaN or inf in got: inf */
    class_rows *r = &rows[k];
    if (r->n < (int)(sizeof r->ratio / sizeof *r->ratio))
        r->ratio[r->n] = ratio, r->floor[r->n] = fl, r->n++;
    if (!r->worst[0] || ratio > r->worst_ratio || ratio != ratio) {
        r->worst_ratio = ratio;
        snprintf(r->worst, sizeof r->worst, "%s", what);
    }
    int gated = gate_parity && classes[k].gated, ok = !gated || ratio <= FLOOR_MULTIPLE;
    if (gated) ok ? passed++ : failed++;
    if (!ok || getenv("CUDA_CHECK_VERBOSE"))
        printf("%s cuda vs cpu: %s: rel L2 %.3g = %.3g x the cpu's floor %.3g (measured %.3g)%s, "
               "max |diff| %.3g over %lld values\n",
               !gated ? "info"
               : ok   ? "ok  "
                      : "FAIL",
               what, e, ratio, fl, measured, ok ? "" : ", over the limit", mx, (long long)n);
}

/* got (the GPU) against ref (the cpu, default order) in units of the
 * spread between ref and ref2 (the cpu, split-k order); the table's rows
 * go to stdout, --table and the figures. */
static void parity(side *s, const dpc_plan *plan, const batch_data *b, const result *got,
                   const result *ref, const result *ref2) {
    static class_rows rows[K_COUNT];
    char line[K_COUNT][400] = {{0}};
    memset(rows, 0, sizeof rows);
    floor_compare(rows, K_FORWARD, "loss", named_dtype(plan->train, "loss"), got->loss, ref->loss,
                  ref2->loss, b->batch);
    if (got->has_logits && ref->has_logits && ref2->has_logits)
        floor_compare(rows, K_FORWARD, "train logits", named_dtype(plan->train, "logits"),
                      got->logits, ref->logits, ref2->logits, (int64_t)b->batch * b->classes);
    for (int i = 0; i < ref->after.n; i++) {
        const char *name = rt_store_name(s->st, i);
        int64_t n = ref->after.numel[i];
        ir_dtype t = rt_store_type(s->st, i)->dtype;
        char what[300];
        if (got->grad[i] && ref->grad[i] && ref2->grad[i]) {
            snprintf(what, sizeof what, "%s.grad", name);
            floor_compare(rows, K_GRAD, what, named_dtype(plan->train, what), got->grad[i],
                          ref->grad[i], ref2->grad[i], n);
        }
        parity_class k = ends_with(name, ".momentum") ? K_MOMENTUM
                         : strstr(name, "running_")   ? K_BN
                                                      : K_WEIGHT;
        floor_compare(rows, k, name, t, got->after.t[i], ref->after.t[i], ref2->after.t[i], n);
    }
    if (got->elogits && ref->elogits && ref2->elogits)
        floor_compare(rows, K_EVAL, "eval logits", named_dtype(plan->eval, "logits"), got->elogits,
                      ref->elogits, ref2->elogits, (int64_t)b->ebatch * b->classes);
    const char *tag = fig_tag[0] ? fig_tag : "fp32_";
    printf("cuda vs cpu, in units of the cpu's own spread (limit %.0f x where gated):\n",
           FLOOR_MULTIPLE);
    printf("  %-12s %-5s %7s %10s %10s %10s %5s  %s\n", "class", "gate", "tensors", "floor_med",
           "ratio_med", "ratio_max", "over", "worst");
    for (int k = 0; k < K_COUNT; k++) {
        class_rows *r = &rows[k];
        if (!r->n) continue;
        double worst = r->worst_ratio;
        int over = 0;
        for (int i = 0; i < r->n; i++) over += !(r->ratio[i] <= FLOOR_MULTIPLE);
        double fmed = median(r->floor, r->n), rmed = median(r->ratio, r->n);
        const char *gate = !gate_parity ? "no" : classes[k].gated ? "yes" : "no";
        printf("  %-12s %-5s %7d %10.3g %10.3g %10.3g %5d  %s\n", classes[k].name, gate, r->n, fmed,
               rmed, worst, over, r->worst);
        if (table)
            fprintf(table, "| %.*s | %s | %s | %d | %.3g | %.3g | %.3g (%s) | %d |\n",
                    (int)strlen(tag) - 1, tag, classes[k].name, gate, r->n, fmed, rmed, worst,
                    r->worst, over);
        snprintf(line[k], sizeof line[k], "median %.3g max %.3g (%s), %d of %d over %.0f x%s", rmed,
                 worst, r->worst, over, r->n, FLOOR_MULTIPLE,
                 gate_parity && classes[k].gated ? ", gated" : "");
    }
    for (int k = 0; k < K_COUNT; k++) {
        char name[96];
        snprintf(name, sizeof name, "cuda_vs_cpu_floor_ratio_%s", classes[k].name);
        if (line[k][0]) figure(name, "%s", line[k]);
    }
}

/* ---- timing ---------------------------------------------------------------------- */

static int one_step(side *s, const batch_data *b, rt_cuda_graph *g, float *loss) {
    if (set_train_inputs(s->train, b)) return -1;
    int rc = g ? rt_cuda_graph_launch(s->be, g, err, sizeof err)
               : rt_exec_run(s->train, err, sizeof err);
    if (rc) {
        fprintf(stderr, "cuda_check: step: %s\n", err);
        return -1;
    }
    return rt_exec_get(s->train, "loss", loss, sizeof(float) * (size_t)b->batch);
}

static int bench(side *s, const batch_data *b, rt_cuda_graph *g, int steps, const char *tag) {
    float *loss = xmalloc(sizeof(float) * (size_t)b->batch);
    for (int i = 0; i < 3; i++)
        if (one_step(s, b, g, loss)) return -1;
    rt_cuda_stats s0, s1;
    rt_cuda_stats_get(s->be, &s0);
    double t0 = rt_now();
    for (int i = 0; i < steps; i++)
        if (one_step(s, b, g, loss)) return -1;
    double t = rt_now() - t0;
    rt_cuda_stats_get(s->be, &s1);
    char name[64];
    snprintf(name, sizeof name, "%s_ms_per_step", tag);
    figure(name, "%.3f", 1e3 * t / steps);
    snprintf(name, sizeof name, "%s_img_per_s", tag);
    figure(name, "%.0f", steps * b->batch / t);
    snprintf(name, sizeof name, "%s_launches_per_step", tag);
    double launches = (double)(s1.launches - s0.launches) / steps;
    double gemms = (double)(s1.gemms - s0.gemms) / steps;
    double graphs = (double)(s1.graph_launches - s0.graph_launches) / steps;
    if (g)
        figure(name, "%.0f graph launch (%d nodes in the graph)", graphs, rt_cuda_graph_nodes(g));
    else
        figure(name, "%.0f (%.0f kernels + %.0f GEMMs)", launches + gemms, launches, gemms);
    free(loss);
    return 0;
}

/* DPC_CHECK_BREAK=REL (tests of this check): the GPU starts every step
 * with its first weight's first value off by REL relative, as if the first
 * kernel read one wrong value; the parity gates must catch it. */
static void gpu_restore(side *g, const snapshot *init) {
    restore(g->st, init);
    const char *v = getenv("DPC_CHECK_BREAK");
    if (!v || !*v) return;
    for (int i = 0; i < init->n; i++) {
        const char *name = rt_store_name(g->st, i);
        if (ends_with(name, ".momentum") || strstr(name, "running_") || !init->numel[i]) continue;
        float *t = xmalloc(sizeof(float) * (size_t)init->numel[i]);
        memcpy(t, init->t[i], sizeof(float) * (size_t)init->numel[i]);
        t[0] = t[0] != 0 ? t[0] * (1.0f + (float)atof(v)) : (float)atof(v);
        rt_store_write(g->st, i, t);
        static int said;
        if (!said++)
            printf("DPC_CHECK_BREAK=%s: the GPU's %s[0] is %.9g, not %.9g\n", v, name, t[0],
                   init->t[i][0]);
        free(t);
        return;
    }
}

int main(int argc, char **argv) {
    const char *path = NULL, *fig = NULL, *ref_path = NULL, *table_path = NULL;
    uint64_t seed = 1;
    int steps = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--seed") && i + 1 < argc)
            seed = strtoull(argv[++i], NULL, 10);
        else if (!strcmp(argv[i], "--bench") && i + 1 < argc)
            steps = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--figures") && i + 1 < argc)
            fig = argv[++i];
        else if (!strcmp(argv[i], "--ref") && i + 1 < argc)
            ref_path = argv[++i];
        else if (!strcmp(argv[i], "--table") && i + 1 < argc)
            table_path = argv[++i];
        else if (!strcmp(argv[i], "--tag") && i + 1 < argc) {
            static char tag[64];
            snprintf(tag, sizeof tag, "%s_", argv[++i]);
            fig_tag = tag;
        } else if (argv[i][0] != '-' && !path)
            path = argv[i];
        else {
            fprintf(
                stderr,
                "usage: cuda_check PLAN [--seed S] [--bench N] [--figures FILE] [--table FILE] [--ref PLAN2] [--tag T]\n");
            return 1;
        }
    }
    if (!path) {
        fprintf(
            stderr,
            "usage: cuda_check PLAN [--seed S] [--bench N] [--figures FILE] [--table FILE] [--ref PLAN2] [--tag T]\n");
        return 1;
    }
    dpc_plan *plan = plan_read(path, err, sizeof err);
    if (!plan) {
        fprintf(stderr, "cuda_check: %s\n", err);
        return 1;
    }
    dpc_plan *ref = ref_path ? plan_read(ref_path, err, sizeof err) : NULL;
    if (ref_path && !ref) {
        fprintf(stderr, "cuda_check: %s\n", err);
        return 1;
    }
    rt_backend *gpu = rt_backend_cuda(0, err, sizeof err);
    if (!gpu) {
        fprintf(stderr, "cuda_check: no CUDA device to check (%s)\n", err);
        plan_free(plan);
        return 2;
    }
    if (fig) figures = fopen(fig, "a");
    if (table_path) table = fopen(table_path, "a");
    gate_parity = !ref;
    figure("device", "%s", rt_cuda_device_name(gpu));
    rt_backend *cpu = rt_backend_cpu();
    /* Where the GPU has no cuDNN it runs each library convolution's im2col
     * alternative: the cpu reference runs the same, so the comparison stays
     * kernel against kernel. With cuDNN, it is cuDNN against oneDNN. */
    if (!gpu->conv) cpu->conv = NULL;
    figure("convolutions", "%s on the GPU, %s on the cpu", gpu->conv ? "cuDNN" : "im2col + GEMM",
           cpu->conv ? "oneDNN" : "im2col + GEMM");
    side c = {0}, g = {0};
    double t0 = rt_now();
    if (side_open(&c, cpu, ref ? ref : plan)) return 1;
    double t1 = rt_now();
    if (side_open(&g, gpu, plan)) return 1;
    double t2 = rt_now();
    figure("cpu_build_s", "%.1f (compile and bind train+eval)", t1 - t0);
    figure("cuda_build_s", "%.1f (NVRTC or cache, load, bind train+eval)", t2 - t1);

    /* Same starting point: the cpu's initialisation, copied bit for bit. */
    rt_store_init(c.st, (ref ? ref : plan)->train, &plan->schedule, seed);
    snapshot init = snap(c.st);
    gpu_restore(&g, &init);
    batch_data b;
    make_batch(&b, plan, seed);

    result rc_, rc2, rg_;
    if (set_train_inputs(c.train, &b) || rt_exec_run(c.train, err, sizeof err) ||
        collect(&c, &b, &init, &rc_, 1)) {
        fprintf(stderr, "cuda_check: cpu step: %s\n", err);
        return 1;
    }
    /* The floor: the same step on the cpu summing in another order. */
    restore(c.st, &init);
    rt_sum_order was = rt_cpu_set_sum_order(RT_SUM_ORDER_SPLIT_K);
    if (set_train_inputs(c.train, &b) || rt_exec_run(c.train, err, sizeof err) ||
        collect(&c, &b, &init, &rc2, 1)) {
        fprintf(stderr, "cuda_check: cpu step (split-k order): %s\n", err);
        return 1;
    }
    rt_cpu_set_sum_order(was);
    if (set_train_inputs(g.train, &b) || rt_exec_run(g.train, err, sizeof err)) {
        fprintf(stderr, "cuda_check: cuda step: %s\n", err);
        return 1;
    }
    if (collect(&g, &b, &init, &rg_, 1)) return 1;
    double loss = 0;
    for (int i = 0; i < b.batch; i++) loss += rc_.loss[i];
    figure("step_mean_loss_cpu", "%.6f", loss / b.batch);
    parity(&g, plan, &b, &rg_, &rc_, &rc2);

    /* The same step as a CUDA graph: capture, then replay from the same
     * starting weights and batch; it must equal the eager cuda step. */
    rt_cuda_graph *graph = NULL;
    if (rt_cuda_graph_begin(gpu, err, sizeof err) || rt_exec_run(g.train, err, sizeof err) ||
        !(graph = rt_cuda_graph_end(gpu, err, sizeof err))) {
        printf("FAIL CUDA graph capture: %s\n", err);
        failed++;
    } else {
        passed++;
        gpu_restore(&g, &init);
        result rr;
        if (set_train_inputs(g.train, &b) || rt_cuda_graph_launch(gpu, graph, err, sizeof err) ||
            rt_backend_sync(gpu, err, sizeof err) || collect(&g, &b, &init, &rr, 0)) {
            printf("FAIL CUDA graph replay: %s\n", err);
            failed++;
        } else {
            compare_graph(&g, &b, &rr, &rg_);
        }
        result_free(&rr, init.n);
    }
    if (steps > 0) {
        gpu_restore(&g, &init);
        if (bench(&g, &b, NULL, steps, "cuda_eager") ||
            (graph && bench(&g, &b, graph, steps, "cuda_graph")))
            failed++;
    }
    rt_cuda_graph_free(gpu, graph);
    result_free(&rc_, init.n);
    result_free(&rc2, init.n);
    result_free(&rg_, init.n);
    snap_free(&init);
    free(b.img), free(b.eimg), free(b.lab), free(b.elab);
    side_close(&c);
    side_close(&g);
    rt_backend_free(cpu);
    rt_backend_free(gpu);
    plan_free(plan);
    if (ref) plan_free(ref);
    if (figures) fclose(figures);
    if (table) fclose(table);
    printf("%d passed, %d failed\n", passed, failed);
    return failed ? 1 : 0;
}
