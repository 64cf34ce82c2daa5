/* tests/parity/dpc_step.c — one training step of a plan on the cpu backend,
 * from given weights and a given batch; the dpc half of the PyTorch parity
 * test (tests/parity_test.sh runs it through tests/parity/torch_step.py).
 *
 * Usage:
 *     dpc_step PLAN --names
 *     dpc_step PLAN INIT.safetensors IMAGE.f32 LABEL.i32 LR OUT.safetensors
 *
 * --names prints `NAME d0,d1,...` for every parameter and BatchNorm running
 * statistic in definition order (what INIT must hold) and the batch last
 * (`batch N`).
 *
 *   INIT     every parameter and BatchNorm running statistic of the plan
 *            (dpc names, F32); optimizer state starts at zero
 *   IMAGE    the batch, float32 NCHW, already normalised (raw bytes)
 *   LABEL    int32 class indices (raw bytes)
 *   LR       learning rate; grad_scale is 1/batch (one device)
 *
 * OUT holds, in this order: "loss" (per sample) and "logits" of the step,
 * "PARAM.grad" for every parameter (gradient of the summed loss), "relu.K"
 * for the K-th ReLU output of the forward pass, "maxpool.K.in" for the K-th
 * max-pool's input, then every persistent tensor after the step (parameters,
 * running statistics, optimizer state). Its metadata records model, batch, lr, momentum, wd.
 * Exits 0, or 1 with one line on stderr.
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ir/plan.h"
#include "runtime/exec.h"
#include "runtime/runtime.h"
#include "runtime/safetensors.h"

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
        if ((n->op == IR_OP_PARAM || n->op == IR_OP_STATE) && !strcmp(n->name, name)) return 1;
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
        if (!same_shape(rt_store_type(st, k), ft)) die("%s: '%s' has the wrong shape", path, ft->name);
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
        if (n->op != IR_OP_PARAM && n->op != IR_OP_STATE) continue;
        printf("%s ", n->name);
        for (int d = 0; d < n->type.ndim; d++) printf("%s%lld", d ? "," : "", (long long)n->type.dim[d]);
        printf("\n");
    }
    const ir_node *image = find_named(plan->train, "image");
    if (!image) die("%s: no input 'image'", plan_path);
    printf("batch %lld\n", (long long)image->type.dim[0]);
    plan_free(plan);
    return 0;
}

int main(int argc, char **argv) {
    if (argc == 3 && !strcmp(argv[2], "--names")) return list_names(argv[1]);
    if (argc != 7) die("usage: dpc_step PLAN INIT.safetensors IMAGE.f32 LABEL.i32 LR OUT.safetensors");
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
    const ir_node *loss = find_named(g, "loss"), *logits = find_named(g, "logits");
    if (!image || !label || !loss || !logits) die("%s: no image, label, loss or logits", plan_path);
    if (label->type.dtype != IR_I32 || image->type.dtype != IR_F32) die("unexpected input dtypes");
    int64_t batch = image->type.dim[0];

    rt_backend *be = rt_backend_cpu();
    rt_store *st = rt_store_new(be, g);
    rt_store_init(st, g, &plan->schedule, 1); /* optimizer state: zero */
    rt_exec *ex = rt_exec_new(be, st, g, plan, err, sizeof err);
    if (!ex) die("%s", err);
    load_init(plan, st, init_path);

    size_t image_bytes = sizeof(float) * (size_t)ir_numel(&image->type);
    size_t label_bytes = sizeof(int32_t) * (size_t)ir_numel(&label->type);
    void *img = read_raw(image_path, image_bytes), *lab = read_raw(label_path, label_bytes);
    if (rt_exec_set_input(ex, "image", img, image_bytes) ||
        rt_exec_set_input(ex, "label", lab, label_bytes) || rt_exec_set_scalar(ex, "lr", lr) ||
        rt_exec_set_scalar(ex, "grad_scale", 1.0f / (float)batch))
        die("cannot set the inputs of the train program");
    free(img);
    free(lab);
    if (rt_exec_run(ex, err, sizeof err)) die("step failed: %s", err);

    out_list o = {0};
    if (rt_exec_get(ex, "loss", out_add(&o, "loss", &loss->type),
                    sizeof(float) * (size_t)ir_numel(&loss->type)) ||
        rt_exec_get(ex, "logits", out_add(&o, "logits", &logits->type),
                    sizeof(float) * (size_t)ir_numel(&logits->type)))
        die("cannot read loss or logits");
    for (int i = 0; i < g->n; i++) {
        const ir_node *n = &g->nodes[i];
        if (n->op != IR_OP_PARAM) continue;
        char name[IR_NAME_MAX + 8];
        snprintf(name, sizeof name, "%s.grad", n->name);
        const ir_node *gn = find_named(g, name);
        if (!gn || !(gn->flags & IR_FLAG_GRAD) || !ir_type_equal(&gn->type, &n->type))
            die("no gradient node '%s'", name);
        if (rt_exec_get_node(ex, (int)(gn - g->nodes), out_add(&o, name, &gn->type),
                             sizeof(float) * (size_t)ir_numel(&gn->type)))
            die("cannot read '%s'", name);
    }
    /* Forward ReLU outputs, "relu.K" in graph order: the reference takes
     * dpc's side of the kink where rounding puts an input on the other side
     * of zero. They are read after the step: relu_grad and maxpool_grad read
     * these buffers in the backward pass, so they live at least that long,
     * but a memory planner that reuses them afterwards would break this
     * (the test then fails loudly on the ReLU/max-pool checks). */
    for (int i = 0, k = 0; i < g->n; i++) {
        const ir_node *n = &g->nodes[i];
        if (n->op != IR_OP_RELU) continue;
        char name[32];
        snprintf(name, sizeof name, "relu.%d", k++);
        if (rt_exec_get_node(ex, i, out_add(&o, name, &n->type),
                             sizeof(float) * (size_t)ir_numel(&n->type)))
            die("cannot read '%s'", name);
    }
    /* Inputs of the forward max-pools, "maxpool.K.in": the reference routes
     * each window's gradient where dpc's maximum is, for near-ties. */
    for (int i = 0, k = 0; i < g->n; i++) {
        const ir_node *n = &g->nodes[i];
        if (n->op != IR_OP_MAXPOOL) continue;
        const ir_node *in = &g->nodes[n->input[0]];
        char name[32];
        snprintf(name, sizeof name, "maxpool.%d.in", k++);
        if (rt_exec_get_node(ex, n->input[0], out_add(&o, name, &in->type),
                             sizeof(float) * (size_t)ir_numel(&in->type)))
            die("cannot read '%s'", name);
    }
    for (int k = 0; k < rt_store_count(st); k++) {
        const ir_type *t = rt_store_type(st, k);
        if (t->dtype != IR_F32) die("'%s' is not F32", rt_store_name(st, k));
        rt_store_read(st, k, out_add(&o, rt_store_name(st, k), t));
    }
    for (int i = 0; i < o.n; i++) o.e[i].shape = o.shape[i];

    char sbatch[32], slr[32], smom[32], swd[32];
    snprintf(sbatch, sizeof sbatch, "%lld", (long long)batch);
    snprintf(slr, sizeof slr, "%.9g", (double)lr);
    snprintf(smom, sizeof smom, "%.17g", plan->schedule.momentum);
    snprintf(swd, sizeof swd, "%.17g", plan->schedule.wd);
    const char *meta[] = {"model", plan->model, "batch", sbatch, "lr", slr,
                          "momentum", smom, "wd", swd, NULL};
    if (rt_st_write(out_path, o.e, o.n, meta, err, sizeof err)) die("%s", err);

    for (int i = 0; i < o.n; i++) {
        free((char *)o.e[i].name);
        free(o.data[i]);
    }
    free(o.e);
    free(o.data);
    free(o.shape);
    rt_exec_free(ex);
    rt_store_free(st);
    rt_backend_free(be);
    plan_free(plan);
    return 0;
}
