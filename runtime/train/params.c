/* runtime/train/params.c — parameter files: --save-params writes replica
 * 0's parameters and BatchNorm statistics as safetensors, --load-params
 * reads them back after checking every name, shape and value. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "ir/err.h"
#include "runtime/check.h"
#include "runtime/train/internal.h"
#include "runtime/train/safetensors.h"

/* What --save-params writes: every parameter and BatchNorm statistic in
 * definition order. The eval program holds exactly those (no optimizer
 * state), in the same order as the train program. */
static int saved_tensors(const dpc_plan *plan, const rt_store *st, int *idx) {
    int n = 0;
    for (int i = 0; i < plan->eval->n; i++) {
        const ir_node *nd = &plan->eval->nodes[i];
        if (!ir_is_persistent(nd->op)) continue;
        int k = rt_store_find(st, nd->name);
        if (k >= 0) idx[n++] = k;
    }
    return n;
}

int rt_run_save_params(const dpc_plan *plan, rt_store *st, const char *path, char *err,
                       size_t errlen) {
    int *idx = malloc(sizeof(int) * (size_t)(rt_store_count(st) + 1));
    RT_CHECK_ALLOC(idx);
    int n = saved_tensors(plan, st, idx);
    rt_st_entry *e = calloc((size_t)n + 1, sizeof *e);
    float **data = calloc((size_t)n + 1, sizeof *data);
    RT_CHECK_ALLOC(e);
    RT_CHECK_ALLOC(data);
    for (int i = 0; i < n; i++) {
        const ir_type *t = rt_store_type(st, idx[i]);
        data[i] = malloc(sizeof(float) * (size_t)ir_numel(t) + 1);
        RT_CHECK_ALLOC(data[i]);
        rt_store_read(st, idx[i], data[i]);
        e[i] = (rt_st_entry){rt_store_name(st, idx[i]), t->ndim, t->dim, data[i]};
    }
    const char *meta[] = {"producer", "dpc", "model", plan->model, NULL};
    int rc = rt_st_write(path, e, n, meta, err, errlen);
    for (int i = 0; i < n; i++) free(data[i]);
    free(data);
    free(e);
    free(idx);
    return rc;
}

int rt_run_load_params(const dpc_plan *plan, rt_store *st, const char *path, char *err,
                       size_t errlen) {
    /* No name twice, each one of the store's: a longer header is refused
     * as soon as it lists one more. */
    rt_st_file *f = rt_st_read_max(path, rt_store_count(st), err, errlen);
    if (!f) return -1;
    int rc = 0;
    /* Every tensor of the file must be one of ours, with our shape. */
    for (int i = 0; i < f->n && !rc; i++) {
        const rt_st_tensor *ft = &f->tensors[i];
        int k = rt_store_find(st, ft->name);
        if (k < 0) {
            rc = ir_fail(err, errlen, "%s: tensor '%s' is not a parameter of %s", path,
                         IR_ESC(ft->name), plan->model);
            break;
        }
        const ir_type *t = rt_store_type(st, k);
        int same = t->ndim == ft->ndim;
        for (int d = 0; same && d < t->ndim; d++) same = t->dim[d] == ft->shape[d];
        if (!same) {
            char want[64], got[128] = "[";
            ir_type_str(t, want, sizeof want);
            for (int d = 0; d < ft->ndim; d++)
                snprintf(got + strlen(got), sizeof got - strlen(got), "%s%lld", d ? "," : "",
                         (long long)ft->shape[d]);
            strcat(got, "]");
            rc = ir_fail(err, errlen, "%s: tensor '%s' has shape %s; %s needs %s", path,
                         IR_ESC(ft->name), got, plan->model, want);
            break;
        }
    }
    /* ... and every parameter and statistic must be there. */
    int *idx = malloc(sizeof(int) * (size_t)(rt_store_count(st) + 1));
    RT_CHECK_ALLOC(idx);
    int n = saved_tensors(plan, st, idx);
    for (int i = 0; i < n && !rc; i++)
        if (rt_st_find(f, rt_store_name(st, idx[i])) < 0)
            rc = ir_fail(err, errlen,
                         "%s: no tensor '%s' (%s needs every parameter and BatchNorm statistic)",
                         path, rt_store_name(st, idx[i]), plan->model);
    free(idx);
    for (int i = 0; i < f->n && !rc; i++) {
        int k = rt_store_find(st, f->tensors[i].name);
        float *buf = malloc(sizeof(float) * (size_t)f->tensors[i].numel + 1);
        RT_CHECK_ALLOC(buf);
        rt_st_copy(f, i, buf);
        /* A NaN or Inf would poison the first step: refuse it here, by name. */
        for (int64_t j = 0; j < f->tensors[i].numel && !rc; j++)
            if (!isfinite(buf[j]))
                rc = ir_fail(err, errlen,
                             "%s: tensor '%s' holds %s at element %lld; refusing to start from it",
                             path, IR_ESC(f->tensors[i].name),
                             isnan(buf[j]) ? "NaN" : "an infinity", (long long)j);
        if (!rc) rt_store_write(st, k, buf);
        free(buf);
    }
    rt_st_free(f);
    return rc;
}
