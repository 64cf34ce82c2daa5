/* runtime/files/params.c — parameter files: --save-params writes replica
 * 0's parameters and BatchNorm statistics as safetensors, --load-params
 * reads them back after checking every name, shape and value: all of them
 * (a checkpoint's own reader, checkpoint.c, stays that strict), or with
 * --name-map, --allow-missing and --allow-unused a foreign or partial file,
 * as PyTorch's load_state_dict(strict=False) reports missing and unexpected
 * keys. */
#include <fnmatch.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/err.h"
#include "base/file.h"
#include "ir/names.h"
#include "runtime/check.h"
#include "runtime/device/device.h"
#include "runtime/exec/exec.h"
#include "runtime/files/files.h"
#include "runtime/log.h"

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

int rt_params_save(const dpc_plan *plan, rt_store *st, const char *path, char *err, size_t errlen) {
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
    char why[1024];
    int rc = rt_store_failed(st, why, sizeof why) /* what was read is not the tensors */
                 ? base_fail(err, errlen, "--save-params %s not written: %s", path, why)
                 : rt_st_write(path, e, n, meta, err, errlen);
    for (int i = 0; i < n; i++) free(data[i]);
    free(data);
    free(e);
    free(idx);
    return rc;
}

/* The --name-map file: `DPC_NAME FILE_NAME` per line, `#` to the end of a
 * line a comment. from[k] becomes the file's name for store entry k (else
 * the entry's own name); each dpc name and each file name at most once,
 * each dpc name one that --save-params writes. */
#define MAP_MAX_BYTES (64u << 20)

typedef struct {
    char **name; /* the map's file names, by line; for the index */
    int n;
} map_names;

static const char *map_name_of(const void *ctx, int i) { return ((const map_names *)ctx)->name[i]; }

static int read_name_map(const dpc_plan *plan, const rt_store *st, const unsigned char *saved,
                         const char *path, const char **from, map_names *mn, char *err,
                         size_t errlen) {
    size_t len;
    unsigned char *buf = base_file_read(path, MAP_MAX_BYTES, &len, err, errlen);
    if (!buf) return -1;
    char *text = malloc(len + 1);
    RT_CHECK_ALLOC(text);
    memcpy(text, buf, len);
    text[len] = 0;
    free(buf);
    if (memchr(text, 0, len)) {
        free(text);
        return base_fail(err, errlen, "%s: a NUL byte; a name map is text", path);
    }
    mn->name = NULL, mn->n = 0;
    ir_names seen = ir_names_new(map_name_of, mn, 64);
    int rc = 0, line = 0, cap = 0;
    for (char *p = text, *next; p && !rc; p = next) {
        line++;
        next = strchr(p, '\n');
        if (next) *next++ = 0;
        char *hash = strchr(p, '#');
        if (hash) *hash = 0;
        char *tok[3] = {NULL, NULL, NULL};
        int nt = 0;
        char *save = NULL;
        for (char *q = strtok_r(p, " \t\r", &save); q && nt < 3; q = strtok_r(NULL, " \t\r", &save))
            tok[nt++] = q;
        if (nt == 0) continue;
        if (nt != 2) {
            rc = base_fail(err, errlen, "%s:%d: expected `DPC_NAME FILE_NAME`, got %d word%s", path,
                           line, nt, nt == 1 ? "" : "s or more");
            break;
        }
        for (int t = 0; t < 2 && !rc; t++)
            if (base_has_control(tok[t], strlen(tok[t])) || strlen(tok[t]) >= 4096)
                rc = base_fail(err, errlen,
                               "%s:%d: the name '%s' has control characters or is too long", path,
                               line, BASE_ESC(tok[t]));
        if (rc) break;
        int k = rt_store_find(st, tok[0]);
        if (k < 0 || !saved[k]) {
            rc = base_fail(err, errlen, "%s:%d: '%s' is not a parameter or statistic of %s", path,
                           line, BASE_ESC(tok[0]), plan->model);
            break;
        }
        if (from[k] != rt_store_name(st, k)) {
            rc =
                base_fail(err, errlen, "%s:%d: '%s' is mapped twice", path, line, BASE_ESC(tok[0]));
            break;
        }
        if (mn->n == cap) {
            cap = cap ? 2 * cap : 64;
            char **p2 = realloc(mn->name, sizeof *p2 * (size_t)cap);
            RT_CHECK_ALLOC(p2);
            mn->name = p2;
        }
        mn->name[mn->n] = strdup(tok[1]);
        RT_CHECK_ALLOC(mn->name[mn->n]);
        if (ir_names_add(&seen, mn->n) >= 0) {
            rc = base_fail(err, errlen, "%s:%d: file name '%s' is mapped twice", path, line,
                           BASE_ESC(tok[1]));
            free(mn->name[mn->n]);
            break;
        }
        from[k] = mn->name[mn->n++];
    }
    ir_names_free(&seen);
    free(text);
    return rc;
}

static int matches_any(const rt_params_load_options *o, const char *name) {
    for (int i = 0; i < o->n_allow_missing; i++)
        if (fnmatch(o->allow_missing[i], name, 0) == 0) return 1;
    return 0;
}

static const char *shape_str(int ndim, const int64_t *dim, char *buf, size_t len) {
    snprintf(buf, len, "[");
    for (int d = 0; d < ndim; d++)
        snprintf(buf + strlen(buf), len - strlen(buf), "%s%lld", d ? "," : "", (long long)dim[d]);
    snprintf(buf + strlen(buf), len - strlen(buf), "]");
    return buf;
}

/* What --load-params works out before it writes a byte into the store. */
typedef struct {
    const dpc_plan *plan;
    rt_store *st;
    const rt_params_load_options *o;
    const char *path;
    rt_st_file *f;
    int n, *idx;       /* what --save-params writes: n store indices */
    const char **from; /* the file's name for store entry k */
    int *src;          /* the file's tensor for idx[i], or -1 */
    int *owner;        /* idx's i for the file's tensor j, or -1 */
    int loaded, missing, unallowed, skipped, first_missing;
    char *err;
    size_t errlen;
} loading;

/* Matching: every parameter and statistic found in the file under its
 * (mapped) name, or missing. */
static int match_names(loading *L) {
    for (int i = 0; i < L->n; i++) {
        int k = L->idx[i], j = rt_st_find(L->f, L->from[k]);
        L->src[i] = j;
        if (j >= 0 && L->owner[j] >= 0) /* a map naming another parameter's own name */
            return base_fail(L->err, L->errlen,
                             "%s: tensor '%s' would be read for both %s and %s (%s)", L->path,
                             BASE_ESC(L->from[k]), rt_store_name(L->st, L->idx[L->owner[j]]),
                             rt_store_name(L->st, k), L->o->name_map);
        if (j >= 0) {
            L->owner[j] = i, L->loaded++;
        } else {
            if (!matches_any(L->o, rt_store_name(L->st, k)) && L->unallowed++ == 0)
                L->first_missing = i;
            L->missing++;
        }
    }
    return 0;
}

/* Validation: every tensor of the file, in its order, one of ours with
 * our shape, or skipped with --allow-unused. */
static int check_file_tensors(loading *L) {
    const rt_params_load_options *o = L->o;
    for (int j = 0; j < L->f->n; j++) {
        const rt_st_tensor *ft = &L->f->tensors[j];
        if (L->owner[j] < 0) {
            int k = rt_store_find(L->st, ft->name);
            if (!o->allow_unused && k >= 0 && L->from[k] != rt_store_name(L->st, k))
                return base_fail(L->err, L->errlen,
                                 "%s: tensor '%s' is not read: %s reads that parameter from '%s' "
                                 "(--allow-unused skips it)",
                                 L->path, BASE_ESC(ft->name), o->name_map, BASE_ESC(L->from[k]));
            if (!o->allow_unused)
                return base_fail(L->err, L->errlen,
                                 "%s: tensor '%s' is not a parameter of %s%s%s (--allow-unused "
                                 "skips it)",
                                 L->path, BASE_ESC(ft->name), L->plan->model,
                                 o->name_map ? " nor mapped to one by " : "",
                                 o->name_map ? o->name_map : "");
            L->skipped++;
            continue;
        }
        int k = L->idx[L->owner[j]];
        const ir_type *t = rt_store_type(L->st, k);
        int same = t->ndim == ft->ndim;
        for (int d = 0; same && d < t->ndim; d++) same = t->dim[d] == ft->shape[d];
        if (!same) {
            char want[64], got[128];
            ir_type_str(t, want, sizeof want);
            int renamed = L->from[k] != rt_store_name(L->st, k);
            return base_fail(L->err, L->errlen, "%s: tensor '%s' has shape %s; %s needs %s%s%s",
                             L->path, BASE_ESC(ft->name),
                             shape_str(ft->ndim, ft->shape, got, sizeof got), L->plan->model, want,
                             renamed ? " for " : "", renamed ? rt_store_name(L->st, k) : "");
        }
    }
    return 0;
}

/* Validation: the first parameter the file lacks that no --allow-missing
 * pattern allows. */
static int check_missing(const loading *L) {
    if (L->first_missing < 0) return 0;
    int k = L->idx[L->first_missing], renamed = L->from[k] != rt_store_name(L->st, k);
    return base_fail(L->err, L->errlen,
                     "%s: no tensor '%s'%s%s (%s needs every parameter and BatchNorm statistic; "
                     "%d missing, %d of them not matched by --allow-missing PATTERN, which keeps "
                     "the initial values of those it matches)",
                     L->path, BASE_ESC(L->from[k]), renamed ? " for " : "",
                     renamed ? rt_store_name(L->st, k) : "", L->plan->model, L->missing,
                     L->unallowed);
}

/* The NaN check: a NaN or Inf would poison the first step, so a tensor
 * holding one is refused here, by name. */
static int check_finite(const loading *L, const rt_st_tensor *ft, const float *v) {
    for (int64_t e = 0; e < ft->numel; e++)
        if (!isfinite(v[e]))
            return base_fail(L->err, L->errlen,
                             "%s: tensor '%s' holds %s at element %lld; refusing to start from it",
                             L->path, BASE_ESC(ft->name), isnan(v[e]) ? "NaN" : "an infinity",
                             (long long)e);
    return 0;
}

/* Copying: each tensor found, checked finite, into the store, in store
 * order (the tensors before a refused one are written). */
static int copy_tensors(const loading *L) {
    int rc = 0;
    for (int i = 0; i < L->n && !rc; i++) {
        if (L->src[i] < 0) continue;
        const rt_st_tensor *ft = &L->f->tensors[L->src[i]];
        float *buf = malloc(sizeof(float) * (size_t)ft->numel + 1);
        RT_CHECK_ALLOC(buf);
        rt_st_copy(L->f, L->src[i], buf);
        rc = check_finite(L, ft, buf);
        if (!rc) rt_store_write(L->st, L->idx[i], buf);
        free(buf);
    }
    return rc;
}

/* The report: counts always; each initialised and skipped name; each
 * loaded one when few, or under DPC_DEBUG. */
static void report(const loading *L) {
    char shape[128];
    rt_log(RT_LOG_INFO, "--load-params %s: %d loaded, %d missing (initialised), %d skipped",
           L->path, L->loaded, L->missing, L->skipped);
    int all = L->loaded <= 8 || rt_debug_level() >= 1;
    for (int i = 0; i < L->n; i++) {
        int k = L->idx[i];
        const ir_type *t = rt_store_type(L->st, k);
        if (L->src[i] >= 0 && !all) continue;
        ir_type_str(t, shape, sizeof shape);
        if (L->src[i] < 0)
            rt_log(RT_LOG_INFO, "  initialised %s %s", rt_store_name(L->st, k), shape);
        else if (L->from[k] != rt_store_name(L->st, k))
            rt_log(RT_LOG_INFO, "  loaded %s %s from '%s'", rt_store_name(L->st, k), shape,
                   BASE_ESC(L->from[k]));
        else
            rt_log(RT_LOG_INFO, "  loaded %s %s", rt_store_name(L->st, k), shape);
    }
    for (int j = 0; j < L->f->n; j++)
        if (L->owner[j] < 0)
            rt_log(RT_LOG_INFO, "  skipped '%s' %s", BASE_ESC(L->f->tensors[j].name),
                   shape_str(L->f->tensors[j].ndim, L->f->tensors[j].shape, shape, sizeof shape));
}

int rt_params_load(const dpc_plan *plan, rt_store *st, const rt_params_load_options *o, char *err,
                   size_t errlen) {
    int count = rt_store_count(st);
    loading L = {.plan = plan, .st = st, .o = o, .path = o->path, .first_missing = -1};
    L.err = err, L.errlen = errlen;
    L.idx = malloc(sizeof(int) * (size_t)(count + 1));
    L.from = calloc((size_t)count + 1, sizeof *L.from);
    unsigned char *saved = calloc((size_t)count + 1, 1);
    RT_CHECK_ALLOC(L.idx && L.from && saved);
    L.n = saved_tensors(plan, st, L.idx);
    for (int k = 0; k < count; k++) L.from[k] = rt_store_name(st, k);
    for (int i = 0; i < L.n; i++) saved[L.idx[i]] = 1;
    map_names mn = {NULL, 0};
    int rc =
        o->name_map ? read_name_map(plan, st, saved, o->name_map, L.from, &mn, err, errlen) : 0;
    /* No name twice, and without --allow-unused each one of ours: a longer
     * header is refused as soon as it lists one more. */
    L.f = rc ? NULL
             : rt_st_read_max(L.path, o->allow_unused ? RT_ST_MAX_TENSORS : count, err, errlen);
    if (!L.f) rc = -1;
    L.src = malloc(sizeof(int) * (size_t)(L.n + 1));
    L.owner = malloc(sizeof(int) * (L.f ? (size_t)L.f->n + 1 : 1));
    RT_CHECK_ALLOC(L.src && L.owner);
    for (int j = 0; L.f && j < L.f->n; j++) L.owner[j] = -1;
    if (!rc) rc = match_names(&L);
    if (!rc) rc = check_file_tensors(&L);
    if (!rc) rc = check_missing(&L);
    if (!rc) rc = copy_tensors(&L);
    if (!rc) report(&L);
    if (L.f) rt_st_free(L.f);
    for (int i = 0; i < mn.n; i++) free(mn.name[i]);
    free(mn.name);
    free(L.owner);
    free(L.src);
    free(saved);
    free(L.from);
    free(L.idx);
    return rc;
}
