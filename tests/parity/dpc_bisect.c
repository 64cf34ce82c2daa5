/* tests/parity/dpc_bisect.c — where does a compiled step depart from the
 * reference interpreter? A diagnostic for parity failures; not run by the
 * tests.
 *
 * Usage:
 *     dpc_bisect PLAN INIT.safetensors IMAGE.f32 LABEL.i32 LR [THRESHOLD]
 *
 * Runs the plan's train program once on the cpu backend and once in the
 * double-precision interpreter (runtime/exec/exec.h) from the same weights and
 * batch (the files tests/parity/torch_step.py leaves in its --dir), then
 * prints, for every node in graph order, max-abs-error / max-abs-value of
 * the compiled result against the interpreter's; nodes above THRESHOLD
 * (default 1e-4, torch_step.py's forward tolerance) are marked; "**" marks a node above it whose inputs are
 * all below: where the departure starts, with its worst element and the
 * same-shaped inputs there. Built (not run) by tests/parity_test.sh.
 *
 * The interpreter does not follow dpc at kinks the way torch_step.py's
 * reference does, so a relu_grad or maxpool_grad starting a departure may
 * be a rounding flip (an input within rounding of zero, or of a tie), not
 * a bug: the printed worst element says which.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "format/plan.h"
#include "runtime/runtime.h"
#include "runtime/files/files.h"
#include "tests/oracle/interp.h"

static void die(const char *msg, const char *arg) {
    fprintf(stderr, "dpc_bisect: %s%s\n", msg, arg ? arg : "");
    exit(1);
}

static void *read_raw(const char *path, size_t bytes) {
    FILE *f = fopen(path, "rb");
    if (!f) die("cannot open ", path);
    void *buf = malloc(bytes ? bytes : 1);
    if (!buf || fread(buf, 1, bytes, f) != bytes) die("short file ", path);
    fclose(f);
    return buf;
}

int main(int argc, char **argv) {
    if (argc != 6 && argc != 7)
        die("usage: dpc_bisect PLAN INIT.safetensors IMAGE.f32 LABEL.i32 LR [THRESHOLD]", NULL);
    double threshold = argc == 7 ? atof(argv[6]) : 1e-4;
    float lr = (float)atof(argv[5]);
    char err[1024];
    dpc_plan *plan = plan_read(argv[1], err, sizeof err);
    if (!plan) die(err, NULL);
    const ir_graph *g = plan->train;
    rt_backend *be = rt_backend_cpu();
    rt_store *st = rt_store_new(be, g);
    rt_store_init(st, g, &plan->schedule, 1);
    rt_exec *ex = rt_exec_new(be, st, g, plan, err, sizeof err);
    if (!ex) die(err, NULL);
    oracle_interp *it = oracle_interp_new(g);

    rt_st_file *f = rt_st_read(argv[2], err, sizeof err);
    if (!f) die(err, NULL);
    int64_t batch = 0;
    for (int i = 0; i < g->n; i++) {
        const ir_node *n = &g->nodes[i];
        int64_t numel = ir_numel(&n->type);
        double *ib = oracle_interp_buffer(it, i);
        if (ir_is_persistent(n->op)) {
            int k = rt_st_find(f, n->name), s = rt_store_find(st, n->name);
            float *v = calloc((size_t)numel + 1, sizeof *v);
            if (k >= 0) {
                if (f->tensors[k].numel != numel) die("wrong size: ", n->name);
                rt_st_copy(f, k, v);
                rt_store_write(st, s, v);
            }
            for (int64_t j = 0; j < numel; j++) ib[j] = v[j];
            free(v);
        } else if (n->op == IR_OP_INPUT && !strcmp(n->name, "image")) {
            batch = n->type.dim[0];
            float *v = read_raw(argv[3], sizeof(float) * (size_t)numel);
            rt_exec_set_input(ex, "image", v, sizeof(float) * (size_t)numel);
            for (int64_t j = 0; j < numel; j++) ib[j] = v[j];
            free(v);
        } else if (n->op == IR_OP_INPUT && !strcmp(n->name, "label")) {
            int32_t *v = read_raw(argv[4], sizeof(int32_t) * (size_t)numel);
            rt_exec_set_input(ex, "label", v, sizeof(int32_t) * (size_t)numel);
            for (int64_t j = 0; j < numel; j++) ib[j] = v[j];
            free(v);
        }
    }
    rt_st_free(f);
    for (int i = 0; i < g->n; i++) {
        const ir_node *n = &g->nodes[i];
        if (n->op != IR_OP_INPUT) continue;
        if (!strcmp(n->name, "lr")) oracle_interp_buffer(it, i)[0] = lr;
        if (!strcmp(n->name, "grad_scale")) oracle_interp_buffer(it, i)[0] = 1.0f / (float)batch;
    }
    rt_exec_set_scalar(ex, "lr", lr);
    rt_exec_set_scalar(ex, "grad_scale", 1.0f / (float)batch);
    if (rt_exec_run(ex, err, sizeof err)) die(err, NULL);
    oracle_interp_run(it);

    double *rel = calloc((size_t)g->n + 1, sizeof *rel);
    for (int i = 0; i < g->n; i++) {
        const ir_node *n = &g->nodes[i];
        if (n->op == IR_OP_INPUT) continue;
        int64_t numel = ir_numel(&n->type);
        size_t bytes = (size_t)numel * ir_dtype_size(n->type.dtype);
        void *host = malloc(bytes + 4);
        if (rt_exec_get_node(ex, i, host, bytes)) die("cannot read a node", NULL);
        const double *ref = oracle_interp_buffer(it, i);
        double e = 0, s = 0, worst_got = 0;
        int64_t worst = 0;
        for (int64_t j = 0; j < numel; j++) {
            double v = n->type.dtype == IR_I32 ? ((int32_t *)host)[j] : ((float *)host)[j];
            if (fabs(v - ref[j]) > e) e = fabs(v - ref[j]), worst = j, worst_got = v;
            s = fmax(s, fabs(ref[j]));
        }
        free(host);
        rel[i] = s > 0 ? e / s : (e > 0 ? INFINITY : 0);
        int fresh = rel[i] > threshold && !ir_is_persistent(n->op);
        for (int k = 0; k < n->ninputs && fresh; k++)
            if (rel[n->input[k]] > threshold) fresh = 0;
        char ty[64];
        printf("%s %%%-5d %-20s %-36s %-18s rel %.3e abs %.3e max %.3e  in:",
               rel[i] > threshold ? (fresh ? "**" : "! ") : "  ", i, ir_ops[n->op].name, n->name,
               ir_type_str(&n->type, ty, sizeof ty), rel[i], e, s);
        for (int k = 0; k < n->ninputs; k++) printf(" %%%d", n->input[k]);
        printf("\n");
        /* For a new departure: the worst element, and same-shaped inputs there. */
        if (rel[i] > threshold && fresh) {
            printf("     worst element %lld: got %.9g, reference %.9g\n", (long long)worst,
                   worst_got, ref[worst]);
            for (int k = 0; k < n->ninputs; k++) {
                const ir_node *in = &g->nodes[n->input[k]];
                if (ir_numel(&in->type) != numel || in->type.dtype != IR_F32) continue;
                float v;
                size_t one = sizeof v;
                float *all = malloc(one * (size_t)numel);
                rt_exec_get_node(ex, n->input[k], all, one * (size_t)numel);
                v = all[worst];
                free(all);
                printf("       input %%%d there: got %.9g, reference %.9g\n", n->input[k], v,
                       oracle_interp_buffer(it, n->input[k])[worst]);
            }
        }
    }
    free(rel);
    oracle_interp_free(it);
    rt_exec_free(ex);
    rt_store_free(st);
    rt_backend_free(be);
    plan_free(plan);
    return 0;
}
