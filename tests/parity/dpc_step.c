/* tests/parity/dpc_step.c — training steps of a plan on the cpu backend,
 * from given weights and given batches, on one or more replicas (the
 * data-parallel runtime dprun uses: runtime/train/replicas.h, local all-reduce);
 * the dpc half of the PyTorch parity test (tests/parity_test.sh runs it
 * through tests/parity/torch_step.py).
 *
 * Usage:
 *     dpc_step PLAN --names
 *     dpc_step PLAN INIT.safetensors IMAGE.f32 LABEL.i32 LR OUT.safetensors [--replicas R] [--steps K]
 *
 * --names prints `NAME d0,d1,...` for every parameter and BatchNorm running
 * statistic in definition order (what INIT must hold) and the batch last
 * (`batch N`).
 *
 *   INIT     every parameter and BatchNorm running statistic of the plan
 *            (dpc names, F32); optimizer state starts at zero
 *   IMAGE    K*R*b images, float32 NCHW, already normalised (raw bytes):
 *            step s takes [s*R*b, (s+1)*R*b), replica r the r-th b of those
 *   LABEL    int32 class indices, in the same order (raw bytes)
 *   LR       learning rate; grad_scale is 1/(R*b)
 *
 * OUT holds "sS.rR.loss" (per sample) and "sS.rR.logits" of step S on
 * replica R, "sS.rR.relu.K" / "sS.rR.clip.K" for its K-th forward ReLU /
 * clip output and "sS.rR.maxpool.K.in" for its K-th max-pool's input; "PARAM.grad" for
 * every parameter (replica 0's gradient of its summed loss in the last
 * step); every persistent tensor of replica 0 after the steps (parameters,
 * running statistics, optimizer state) and "rR.NAME" for the running
 * statistics of replica R >= 1; with K > 1 also "s0.NAME" for every
 * parameter and optimizer state of replica 0 after the first step (so one
 * run checks the first step's update and the last's). Its metadata records
 * model, batch, lr, momentum, wd, replicas, steps, and the optimizer with
 * its other hyper-parameters. Exits 0, or 1 with one line on stderr.
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "format/plan.h"
#include "runtime/comm/comm.h"
#include "runtime/exec/exec.h"
#include "runtime/train/replicas.h"
#include "runtime/runtime.h"
#include "runtime/files/files.h"

static void die(const char *fmt, ...) __attribute__((format(printf, 1, 2), noreturn));
static void die(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "dpc_step: ");
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
    exit(1);
}

static void *xmalloc(size_t n) {
    void *p = malloc(n ? n : 1);
    if (!p) die("out of memory");
    return p;
}

/* Reads exactly `bytes` bytes of a raw file. */
static void *read_raw(const char *path, size_t bytes) {
    FILE *f = fopen(path, "rb");
    if (!f) die("cannot open %s", path);
    void *buf = xmalloc(bytes);
    size_t got = fread(buf, 1, bytes, f);
    int extra = fgetc(f) != EOF;
    fclose(f);
    if (got != bytes || extra) die("%s: expected exactly %zu bytes", path, bytes);
    return buf;
}

static const ir_node *find_named(const ir_graph *g, const char *name) {
    for (int i = 0; i < g->n; i++)
        if (!strcmp(g->nodes[i].name, name)) return &g->nodes[i];
    return NULL;
}

/* Parameters and BatchNorm statistics: the eval program's sources (it holds
 * no optimizer state), as --save-params writes them. */
static int is_saved(const ir_graph *eval, const char *name) {
    for (int i = 0; i < eval->n; i++) {
        const ir_node *n = &eval->nodes[i];
        if (ir_is_persistent(n->op) && !strcmp(n->name, name)) return 1;
    }
    return 0;
}

static int same_shape(const ir_type *t, const rt_st_tensor *ft) {
    if (t->ndim != ft->ndim) return 0;
    for (int d = 0; d < t->ndim; d++)
        if (t->dim[d] != ft->shape[d]) return 0;
    return 1;
}

static void load_init(const dpc_plan *plan, rt_store *st, const char *path) {
    char err[512];
    rt_st_file *f = rt_st_read(path, err, sizeof err);
    if (!f) die("%s", err);
    for (int i = 0; i < f->n; i++) {
        const rt_st_tensor *ft = &f->tensors[i];
        int k = rt_store_find(st, ft->name);
        if (k < 0 || !is_saved(plan->eval, ft->name))
            die("%s: '%s' is not a parameter or statistic of %s", path, ft->name, plan->model);
        if (!same_shape(rt_store_type(st, k), ft))
            die("%s: '%s' has the wrong shape", path, ft->name);
        float *buf = xmalloc(sizeof(float) * (size_t)ft->numel);
        rt_st_copy(f, i, buf);
        rt_store_write(st, k, buf);
        free(buf);
    }
    for (int k = 0; k < rt_store_count(st); k++)
        if (is_saved(plan->eval, rt_store_name(st, k)) && rt_st_find(f, rt_store_name(st, k)) < 0)
            die("%s: no tensor '%s'", path, rt_store_name(st, k));
    rt_st_free(f);
}

typedef struct {
    int n, cap;
    rt_st_entry *e;
    float **data;
    int64_t (*shape)[IR_MAX_DIMS];
} out_list;

static float *out_add(out_list *o, const char *name, const ir_type *t) {
    if (o->n == o->cap) {
        o->cap = o->cap ? 2 * o->cap : 64;
        o->e = realloc(o->e, sizeof *o->e * (size_t)o->cap);
        o->data = realloc(o->data, sizeof *o->data * (size_t)o->cap);
        o->shape = realloc(o->shape, sizeof *o->shape * (size_t)o->cap);
        if (!o->e || !o->data || !o->shape) die("out of memory");
    }
    int i = o->n++;
    for (int d = 0; d < t->ndim; d++) o->shape[i][d] = t->dim[d];
    o->data[i] = xmalloc(sizeof(float) * (size_t)ir_numel(t));
    char *copy = strdup(name);
    if (!copy) die("out of memory");
    o->e[i] = (rt_st_entry){copy, t->ndim, NULL, o->data[i]};
    return o->data[i];
}

static int list_names(const char *plan_path) {
    char err[1024];
    dpc_plan *plan = plan_read(plan_path, err, sizeof err);
    if (!plan) die("%s", err);
    const ir_graph *g = plan->eval;
    for (int i = 0; i < g->n; i++) {
        const ir_node *n = &g->nodes[i];
        if (!ir_is_persistent(n->op)) continue;
        printf("%s ", n->name);
        for (int d = 0; d < n->type.ndim; d++)
            printf("%s%lld", d ? "," : "", (long long)n->type.dim[d]);
        printf("\n");
    }
    const ir_node *image = find_named(plan->train, "image");
    if (!image) die("%s: no input 'image'", plan_path);
    printf("batch %lld\n", (long long)image->type.dim[0]);
    plan_free(plan);
    return 0;
}

/* Reads node i of replica r's train program after a step into OUT as NAME. */
static void out_node(out_list *o, rt_replicas *R, int r, const ir_graph *g, int i,
                     const char *name) {
    const ir_type *t = &g->nodes[i].type;
    if (rt_exec_get_node(rt_replicas_train(R, r), i, out_add(o, name, t),
                         sizeof(float) * (size_t)ir_numel(t)))
        die("cannot read '%s' of replica %d", name, r);
}

/* What the reference needs of step s on replica r: the per-sample losses
 * and logits, the forward ReLU and clip outputs ("relu.K", "clip.K" in
 * graph order) and max-pool inputs ("maxpool.K.in"), prefixed "sS.rR.". The
 * reference takes dpc's side of a kink or a max-pool near-tie where rounding decides
 * (tests/parity/torch_step.py). They are read after the step: relu_grad
 * and maxpool_grad read these buffers in the backward pass, so they live at
 * least that long, but a memory planner that reuses them afterwards would
 * break this (the test then fails loudly on the ReLU/max-pool checks). */
static void out_step(out_list *o, rt_replicas *R, int r, const ir_graph *g, int s) {
    char name[IR_NAME_MAX + 32];
    int relu = 0, clip = 0, pool = 0;
    for (int i = 0; i < g->n; i++) {
        const ir_node *n = &g->nodes[i];
        if (!strcmp(n->name, "loss") || !strcmp(n->name, "logits")) {
            snprintf(name, sizeof name, "s%d.r%d.%s", s, r, n->name);
            out_node(o, R, r, g, i, name);
        } else if (n->op == IR_OP_RELU) {
            snprintf(name, sizeof name, "s%d.r%d.relu.%d", s, r, relu++);
            out_node(o, R, r, g, i, name);
        } else if (n->op == IR_OP_CLIP) {
            snprintf(name, sizeof name, "s%d.r%d.clip.%d", s, r, clip++);
            out_node(o, R, r, g, i, name);
        } else if (n->op == IR_OP_MAXPOOL) {
            snprintf(name, sizeof name, "s%d.r%d.maxpool.%d.in", s, r, pool++);
            out_node(o, R, r, g, n->input[0], name);
        }
    }
}

/* "PARAM.grad" for every parameter: replica 0's own gradient of its summed
 * loss in the last step (before the all-reduce). */
static void out_grads(out_list *o, rt_replicas *R, const ir_graph *g) {
    for (int i = 0; i < g->n; i++) {
        const ir_node *n = &g->nodes[i];
        if (n->op != IR_OP_PARAM) continue;
        char name[IR_NAME_MAX + 8];
        snprintf(name, sizeof name, "%s.grad", n->name);
        const ir_node *gn = find_named(g, name);
        if (!gn || !(gn->flags & IR_FLAG_GRAD) || !ir_type_equal(&gn->type, &n->type))
            die("no gradient node '%s'", name);
        out_node(o, R, 0, g, (int)(gn - g->nodes), name);
    }
}

static int parse_count(const char *flag, const char *v, int max) {
    char *end;
    long n = strtol(v, &end, 10);
    if (*end || end == v || n < 1 || n > max) die("%s must be 1..%d, got '%s'", flag, max, v);
    return (int)n;
}

int main(int argc, char **argv) {
    if (argc == 3 && !strcmp(argv[2], "--names")) return list_names(argv[1]);
    int replicas = 1, steps = 1;
    for (; argc >= 9; argc -= 2) {
        if (!strcmp(argv[argc - 2], "--replicas"))
            replicas = parse_count("--replicas", argv[argc - 1], 64);
        else if (!strcmp(argv[argc - 2], "--steps"))
            steps = parse_count("--steps", argv[argc - 1], 100);
        else
            break;
    }
    if (argc != 7)
        die("usage: dpc_step PLAN INIT.safetensors IMAGE.f32 LABEL.i32 LR OUT.safetensors "
            "[--replicas R] [--steps K]");
    const char *plan_path = argv[1], *init_path = argv[2], *image_path = argv[3],
               *label_path = argv[4], *out_path = argv[6];
    char *end;
    float lr = strtof(argv[5], &end);
    if (*end || end == argv[5]) die("bad learning rate '%s'", argv[5]);

    char err[1024];
    dpc_plan *plan = plan_read(plan_path, err, sizeof err);
    if (!plan) die("%s", err);
    const ir_graph *g = plan->train;
    const ir_node *image = find_named(g, "image"), *label = find_named(g, "label");
    if (!image || !label || !find_named(g, "loss") || !find_named(g, "logits"))
        die("%s: no image, label, loss or logits", plan_path);
    if (label->type.dtype != IR_I32 || image->type.dtype != IR_F32) die("unexpected input dtypes");
    int64_t batch = image->type.dim[0];

    rt_replicas_cpu_threads(replicas);
    rt_backend *be = rt_backend_cpu();
    rt_backend *bes[64];
    int devices;
    if (rt_replicas_open_backends(be, replicas, bes, &devices, err, sizeof err)) die("%s", err);
    rt_coll *coll = rt_replicas_coll_new(bes, replicas, 1, err, sizeof err);
    if (!coll && err[0]) die("%s", err);
    rt_replicas *R = rt_replicas_new(bes, plan, replicas, coll, err, sizeof err);
    if (!R) die("%s", err);
    rt_store *st = rt_replicas_store(R, 0);
    rt_store_init(st, g, &plan->schedule, 1); /* optimizer state: zero */
    load_init(plan, st, init_path);
    if (rt_replicas_sync(R, err, sizeof err)) die("%s", err);

    /* Step s takes samples [s*R*b, (s+1)*R*b): replica r its r-th slice. */
    size_t step_images = (size_t)replicas * (size_t)ir_numel(&image->type);
    size_t step_labels = (size_t)replicas * (size_t)ir_numel(&label->type);
    float *img = read_raw(image_path, sizeof(float) * step_images * (size_t)steps);
    int32_t *lab = read_raw(label_path, sizeof(int32_t) * step_labels * (size_t)steps);
    float grad_scale = 1.0f / (float)(batch * replicas);
    out_list o = {0};
    for (int s = 0; s < steps; s++) {
        rt_replicas_set_step(R, s + 1);
        if (rt_replicas_step(R, img + (size_t)s * step_images, lab + (size_t)s * step_labels, lr,
                             grad_scale, NULL, err, sizeof err))
            die("step %d failed: %s", s, err);
        for (int r = 0; r < replicas; r++) out_step(&o, R, r, g, s);
        for (int k = 0; s == 0 && steps > 1 && k < rt_store_count(st); k++) {
            const char *name = rt_store_name(st, k);
            const ir_node *n = find_named(plan->eval, name);
            if (n && n->op == IR_OP_STATE) continue; /* a running statistic */
            char sname[IR_NAME_MAX + 16];
            snprintf(sname, sizeof sname, "s0.%s", name);
            rt_store_read(st, k, out_add(&o, sname, rt_store_type(st, k)));
        }
    }
    free(img);
    free(lab);
    out_grads(&o, R, g);
    /* Every persistent tensor of replica 0 after the steps (parameters,
     * running statistics, optimizer state), and the other replicas' own
     * running statistics as "rR.NAME" (per-device BatchNorm). */
    for (int k = 0; k < rt_store_count(st); k++) {
        const ir_type *t = rt_store_type(st, k);
        if (t->dtype != IR_F32) die("'%s' is not F32", rt_store_name(st, k));
        rt_store_read(st, k, out_add(&o, rt_store_name(st, k), t));
    }
    for (int r = 1; r < replicas; r++) {
        rt_store *rs = rt_replicas_store(R, r);
        for (int k = 0; k < rt_store_count(rs); k++) {
            const char *name = rt_store_name(rs, k);
            const ir_node *n = find_named(plan->eval, name);
            if (!n || n->op != IR_OP_STATE) continue;
            char rname[IR_NAME_MAX + 16];
            snprintf(rname, sizeof rname, "r%d.%s", r, name);
            rt_store_read(rs, k, out_add(&o, rname, rt_store_type(rs, k)));
        }
    }
    for (int i = 0; i < o.n; i++) o.e[i].shape = o.shape[i];

    char sbatch[32], slr[32], smom[32], swd[32], srep[16], ssteps[16], shyper[6][32];
    snprintf(sbatch, sizeof sbatch, "%lld", (long long)batch);
    snprintf(slr, sizeof slr, "%.9g", (double)lr);
    snprintf(smom, sizeof smom, "%.17g", plan->schedule.momentum);
    snprintf(swd, sizeof swd, "%.17g", plan->schedule.wd);
    snprintf(srep, sizeof srep, "%d", replicas);
    snprintf(ssteps, sizeof ssteps, "%d", steps);
    const ir_train *tr = &plan->schedule;
    snprintf(shyper[0], sizeof shyper[0], "%.17g", tr->eta);
    snprintf(shyper[1], sizeof shyper[1], "%.17g", tr->eps);
    snprintf(shyper[2], sizeof shyper[2], "%.17g", tr->beta1);
    snprintf(shyper[3], sizeof shyper[3], "%.17g", tr->beta2);
    snprintf(shyper[4], sizeof shyper[4], "%d", tr->nesterov);
    snprintf(shyper[5], sizeof shyper[5], "%s%s", tr->exclude & IR_EXCLUDE_BN ? "bn " : "",
             tr->exclude & IR_EXCLUDE_BIAS ? "bias" : "");
    const char *meta[] = {"model",    plan->model, "batch",     sbatch,
                          "lr",       slr,         "momentum",  smom,
                          "wd",       swd,         "replicas",  srep,
                          "steps",    ssteps,      "optimizer", ir_optimizer_names[tr->optimizer],
                          "eta",      shyper[0],   "eps",       shyper[1],
                          "beta1",    shyper[2],   "beta2",     shyper[3],
                          "nesterov", shyper[4],   "exclude",   shyper[5],
                          NULL};
    if (rt_st_write(out_path, o.e, o.n, meta, err, sizeof err)) die("%s", err);

    for (int i = 0; i < o.n; i++) {
        free((char *)o.e[i].name);
        free(o.data[i]);
    }
    free(o.e);
    free(o.data);
    free(o.shape);
    rt_replicas_free(R);
    rt_coll_free(coll);
    rt_replicas_close_backends(be, replicas, bes);
    rt_backend_free(be);
    plan_free(plan);
    return 0;
}
