/* runtime/train/checkpoint.c — checkpoints as safetensors files with a checksum
 * and the run's position in the metadata (checkpoint.h). */
#include "runtime/train/checkpoint.h"
#include "ir/err.h"
#include "ir/hash.h"
#include "ir/parse.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "runtime/check.h"
#include "runtime/exec/exec.h"
#include "runtime/train/safetensors.h"

static void ckpt_path(const char *dir, char *path, size_t len) {
    snprintf(path, len, "%s/%s", dir, RT_CKPT_FILE);
}

int rt_ckpt_exists(const char *dir) {
    char path[4096];
    ckpt_path(dir, path, sizeof path);
    struct stat sb;
    return stat(path, &sb) == 0;
}

/* ---- the checksum: FNV-1a 64 (as plan files), fed piece by piece ---- */

/* One tensor's table entry: name, rank and shape. */
static uint64_t fnv_entry(uint64_t h, const char *name, int ndim, const int64_t *shape) {
    h = ir_fnv1a_str(h, name);
    h = ir_fnv1a(h, &ndim, sizeof ndim);
    return ir_fnv1a(h, shape, sizeof *shape * (size_t)ndim);
}

/* ---- which tensors ---- */

/* BatchNorm running statistics: the eval program's STATE tensors (it holds
 * no optimizer state). They are the only persistent tensors that differ
 * between replicas. */
static int per_replica(const dpc_plan *plan, const char *name) {
    for (int i = 0; i < plan->eval->n; i++)
        if (plan->eval->nodes[i].op == IR_OP_STATE && !strcmp(plan->eval->nodes[i].name, name))
            return 1;
    return 0;
}

int64_t rt_ckpt_stats_count(const dpc_plan *plan, rt_store *st) {
    int64_t n = 0;
    for (int i = 0; i < rt_store_count(st); i++)
        if (per_replica(plan, rt_store_name(st, i))) n += ir_numel(rt_store_type(st, i));
    return n;
}

/* Copies replica st's statistics out of (to_store 0) or into (1) buf. */
static void stats_copy(const dpc_plan *plan, rt_store *st, float *buf, int to_store) {
    for (int i = 0; i < rt_store_count(st); i++) {
        if (!per_replica(plan, rt_store_name(st, i))) continue;
        if (to_store)
            rt_store_write(st, i, buf);
        else
            rt_store_read(st, i, buf);
        buf += ir_numel(rt_store_type(st, i));
    }
}

void rt_ckpt_stats_read(const dpc_plan *plan, rt_store *st, float *out) {
    stats_copy(plan, st, out, 0);
}
void rt_ckpt_stats_write(const dpc_plan *plan, rt_store *st, const float *in) {
    stats_copy(plan, st, (float *)in, 1);
}

typedef struct {
    char name[IR_NAME_MAX + 32];
    int replica, index; /* replica, and its tensor's entry in the store */
    int64_t offset;     /* replica >= 1: where in stats[] its floats begin */
} slot;

/* The checkpoint's tensors in file order: replica 0's store, then each
 * further replica's BatchNorm statistics (as laid out in stats[], the
 * replica's S floats after the previous one's). Returns how many (slots
 * sized by the caller: total * store count). */
static int list_slots(const dpc_plan *plan, rt_store *store0, int total, slot *out) {
    int k = 0, count = rt_store_count(store0);
    int64_t off = 0;
    for (int r = 0; r < total; r++)
        for (int i = 0; i < count; i++) {
            const char *name = rt_store_name(store0, i);
            int stat = per_replica(plan, name);
            if (r > 0 && !stat) continue;
            if (r == 0)
                snprintf(out[k].name, sizeof out[k].name, "%s", name);
            else
                snprintf(out[k].name, sizeof out[k].name, "replica.%d/%s", r, name);
            out[k].replica = r, out[k].index = i, out[k].offset = stat ? off : -1;
            if (stat) off += ir_numel(rt_store_type(store0, i));
            k++;
        }
    return k;
}

/* ---- metadata ---- */

enum { META_MAX = 48 };

typedef struct {
    const char *kv[META_MAX + 1];
    char val[META_MAX / 2][4200]; /* metrics_path is up to 4096 */
    int n;
} meta_list;

static void meta_add(meta_list *m, const char *key, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void meta_add(meta_list *m, const char *key, const char *fmt, ...) {
    char *v = m->val[m->n / 2];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(v, sizeof m->val[0], fmt, ap);
    va_end(ap);
    m->kv[m->n++] = key;
    m->kv[m->n++] = v;
    m->kv[m->n] = NULL;
}

int rt_ckpt_write(const char *dir, const dpc_plan *plan, rt_store *store0, int n,
                  const float *stats, const rt_ckpt_state *s, char *err, size_t errlen) {
    /* Doubles go out as hex floats ("%a"): exact, so a resumed run's sums
     * continue bit for bit. */
    meta_list *mp = calloc(1, sizeof *mp); /* 100 KB: not on the stack */
    RT_CHECK_ALLOC(mp);
    meta_add(mp, "producer", "dpc");
    meta_add(mp, "dpc_checkpoint", "%s", RT_CKPT_VERSION);
    meta_add(mp, "model", "%s", plan->model);
    meta_add(mp, "plan_checksum", "%016" PRIx64, plan->checksum);
    meta_add(mp, "replicas", "%d", n);
    meta_add(mp, "step", "%" PRId64, s->step);
    meta_add(mp, "steps_per_epoch", "%" PRId64, s->steps_per_epoch);
    meta_add(mp, "global_batch", "%d", s->global_batch);
    meta_add(mp, "seed", "%" PRIu64, s->seed);
    meta_add(mp, "data", "%s", s->data);
    meta_add(mp, "shuffle", "%d", s->shuffle);
    meta_add(mp, "augment", "%d", s->augment);
    meta_add(mp, "epoch_loss_sum", "%a", s->epoch_loss_sum);
    meta_add(mp, "epoch_skipped", "%" PRId64, s->epoch_skipped);
    meta_add(mp, "prev_lr", "%a", s->prev_lr);
    meta_add(mp, "epoch_seconds", "%a", s->epoch_seconds);
    meta_add(mp, "total_seconds", "%a", s->total_seconds);
    meta_add(mp, "metrics_bytes", "%" PRId64, s->metrics_bytes);
    meta_add(mp, "metrics_pending", "%s", s->metrics_pending);
    meta_add(mp, "metrics_path", "%s", s->metrics_path);
    meta_add(mp, "flags", "%s", s->flags);

    int count = rt_store_count(store0);
    slot *sl = calloc((size_t)(n * count) + 1, sizeof *sl);
    RT_CHECK_ALLOC(sl);
    int k = list_slots(plan, store0, n, sl);
    rt_st_entry *e = calloc((size_t)k + 1, sizeof *e);
    float **data = calloc((size_t)k + 1, sizeof *data);
    RT_CHECK_ALLOC(e && data);
    uint64_t h = IR_FNV1A_INIT;
    for (int i = 0; i < mp->n; i++) h = ir_fnv1a_str(h, mp->kv[i]);
    for (int i = 0; i < k; i++) {
        const ir_type *t = rt_store_type(store0, sl[i].index);
        size_t bytes = sizeof(float) * (size_t)ir_numel(t);
        data[i] = malloc(bytes + 1);
        RT_CHECK_ALLOC(data[i]);
        if (sl[i].replica == 0)
            rt_store_read(store0, sl[i].index, data[i]);
        else
            memcpy(data[i], stats + sl[i].offset, bytes);
        e[i] = (rt_st_entry){sl[i].name, t->ndim, t->dim, data[i]};
        h = fnv_entry(h, sl[i].name, t->ndim, t->dim);
    }
    for (int i = 0; i < k; i++)
        h = ir_fnv1a(h, data[i],
                     sizeof(float) * (size_t)ir_numel(rt_store_type(store0, sl[i].index)));
    meta_add(mp, "checksum", "%016" PRIx64, h);

    /* rt_st_write_in syncs the file and DIR (ir_file): it survives a crash.
     * The name is dprun's own: never written through a link; DIR is created
     * when missing. */
    char why[1024];
    int rc = rt_st_write_in(dir, RT_CKPT_FILE, e, k, mp->kv, why, sizeof why);
    if (rc) ir_fail(err, errlen, "--checkpoint %s", why);
    free(mp);
    for (int i = 0; i < k; i++) free(data[i]);
    free(data);
    free(e);
    free(sl);
    return rc;
}

/* ---- reading ---- */

static const char *need_meta(const rt_st_file *f, const char *path, const char *key, char *err,
                             size_t errlen) {
    const char *v = rt_st_meta(f, key);
    if (!v) ir_fail(err, errlen, "%s: not a dpc checkpoint: no '%s' in its metadata", path, key);
    return v;
}

/* A value that does not parse as its key's kind. */
static int corrupt(const char *path, const char *key, const char *v, char *err, size_t errlen) {
    return ir_fail(err, errlen, "%s: corrupt checkpoint: '%s' is '%s'", path, key, v);
}

static int meta_i64(const rt_st_file *f, const char *path, const char *key, int64_t *out, char *err,
                    size_t errlen) {
    const char *v = need_meta(f, path, key, err, errlen);
    return !v ? -1 : ir_parse_i64(v, out) ? corrupt(path, key, v, err, errlen) : 0;
}

static int meta_u64(const rt_st_file *f, const char *path, const char *key, uint64_t *out,
                    char *err, size_t errlen) {
    const char *v = need_meta(f, path, key, err, errlen);
    return !v ? -1 : ir_parse_u64(v, out) ? corrupt(path, key, v, err, errlen) : 0;
}

static int meta_f64(const rt_st_file *f, const char *path, const char *key, double *out, char *err,
                    size_t errlen) {
    const char *v = need_meta(f, path, key, err, errlen);
    return !v ? -1 : ir_parse_f64(v, out) ? corrupt(path, key, v, err, errlen) : 0;
}

static int meta_str(const rt_st_file *f, const char *path, const char *key, char *out, size_t len,
                    char *err, size_t errlen) {
    const char *v = need_meta(f, path, key, err, errlen);
    if (!v) return -1;
    snprintf(out, len, "%s", v);
    return 0;
}

static uint64_t file_checksum(const rt_st_file *f) {
    uint64_t h = IR_FNV1A_INIT;
    for (int i = 0; i < f->nmeta; i++)
        if (strcmp(f->meta_keys[i], "checksum"))
            h = ir_fnv1a_str(ir_fnv1a_str(h, f->meta_keys[i]), f->meta_values[i]);
    for (int i = 0; i < f->n; i++)
        h = fnv_entry(h, f->tensors[i].name, f->tensors[i].ndim, f->tensors[i].shape);
    for (int i = 0; i < f->n; i++)
        h = ir_fnv1a(h, f->bytes + f->data_start + f->tensors[i].begin,
                     (size_t)(f->tensors[i].end - f->tensors[i].begin));
    return h;
}

/* Format, checksum, plan and replica count; then the position. */
static int check_header(const rt_st_file *f, const char *path, const dpc_plan *plan, int n,
                        rt_ckpt_state *s, char *err, size_t errlen) {
    const char *version = need_meta(f, path, "dpc_checkpoint", err, errlen);
    if (!version) return -1;
    if (strcmp(version, RT_CKPT_VERSION))
        return ir_fail(err, errlen, "%s: checkpoint format version %s; this dprun reads version %s",
                       path, version, RT_CKPT_VERSION);
    const char *sum = need_meta(f, path, "checksum", err, errlen);
    if (!sum) return -1;
    char want[32];
    snprintf(want, sizeof want, "%016" PRIx64, file_checksum(f));
    if (strcmp(sum, want))
        return ir_fail(err, errlen,
                       "%s: corrupt checkpoint: checksum mismatch (stored %s, computed %s)", path,
                       sum, want);
    char model[IR_NAME_MAX], plan_sum[32], mine[32];
    if (meta_str(f, path, "model", model, sizeof model, err, errlen) ||
        meta_str(f, path, "plan_checksum", plan_sum, sizeof plan_sum, err, errlen))
        return -1;
    snprintf(mine, sizeof mine, "%016" PRIx64, plan->checksum);
    if (strcmp(model, plan->model) || strcmp(plan_sum, mine))
        return ir_fail(
            err, errlen,
            "%s: the checkpoint belongs to another plan (model %s, plan checksum %s); this "
            "plan is model %s, plan checksum %s",
            path, model, plan_sum, plan->model, mine);
    int64_t replicas, v;
    if (meta_i64(f, path, "replicas", &replicas, err, errlen)) return -1;
    if (replicas != n)
        return ir_fail(
            err, errlen,
            "%s: the checkpoint was written by a run of %lld replica%s (--gpus); this run has "
            "%d",
            path, (long long)replicas, replicas == 1 ? "" : "s", n);
    memset(s, 0, sizeof *s);
    int rc = meta_i64(f, path, "step", &s->step, err, errlen);
    if (!rc) rc = meta_i64(f, path, "steps_per_epoch", &s->steps_per_epoch, err, errlen);
    if (!rc) rc = meta_i64(f, path, "global_batch", &v, err, errlen), s->global_batch = (int)v;
    if (!rc) rc = meta_u64(f, path, "seed", &s->seed, err, errlen);
    if (!rc) rc = meta_str(f, path, "data", s->data, sizeof s->data, err, errlen);
    if (!rc) rc = meta_i64(f, path, "shuffle", &v, err, errlen), s->shuffle = (int)v;
    if (!rc) rc = meta_i64(f, path, "augment", &v, err, errlen), s->augment = (int)v;
    if (!rc) rc = meta_f64(f, path, "epoch_loss_sum", &s->epoch_loss_sum, err, errlen);
    if (!rc) rc = meta_i64(f, path, "epoch_skipped", &s->epoch_skipped, err, errlen);
    if (!rc) rc = meta_f64(f, path, "prev_lr", &s->prev_lr, err, errlen);
    if (!rc) rc = meta_f64(f, path, "epoch_seconds", &s->epoch_seconds, err, errlen);
    if (!rc) rc = meta_f64(f, path, "total_seconds", &s->total_seconds, err, errlen);
    if (!rc) rc = meta_i64(f, path, "metrics_bytes", &s->metrics_bytes, err, errlen);
    if (!rc)
        rc = meta_str(f, path, "metrics_pending", s->metrics_pending, sizeof s->metrics_pending,
                      err, errlen);
    if (!rc)
        rc =
            meta_str(f, path, "metrics_path", s->metrics_path, sizeof s->metrics_path, err, errlen);
    if (!rc) rc = meta_str(f, path, "flags", s->flags, sizeof s->flags, err, errlen);
    if (!rc && (s->step < 0 || s->steps_per_epoch <= 0))
        rc = ir_fail(err, errlen, "%s: corrupt checkpoint: step %lld of %lld per epoch", path,
                     (long long)s->step, (long long)s->steps_per_epoch);
    return rc;
}

int rt_ckpt_read(const char *dir, const dpc_plan *plan, rt_store *store0, int n, float *stats,
                 rt_ckpt_state *s, char *err, size_t errlen) {
    char path[4096];
    ckpt_path(dir, path, sizeof path);
    char why[1024];
    rt_st_file *f = rt_st_read(path, why, sizeof why);
    if (!f) return ir_fail(err, errlen, "checkpoint refused: %s", why);
    int rc = check_header(f, path, plan, n, s, err, errlen);
    int count = rt_store_count(store0);
    slot *sl = calloc((size_t)(n * count) + 1, sizeof *sl);
    RT_CHECK_ALLOC(sl);
    int k = list_slots(plan, store0, n, sl);
    if (!rc && f->n != k)
        rc = ir_fail(err, errlen,
                     "%s: the checkpoint holds %d tensors; this plan with %d replica%s needs %d",
                     path, f->n, n, n == 1 ? "" : "s", k);
    /* Every tensor present with our shape before anything is written. */
    for (int i = 0; i < k && !rc; i++) {
        int j = rt_st_find(f, sl[i].name);
        const ir_type *t = rt_store_type(store0, sl[i].index);
        int same = j >= 0 && f->tensors[j].ndim == t->ndim;
        for (int d = 0; same && d < t->ndim; d++) same = f->tensors[j].shape[d] == t->dim[d];
        if (j < 0)
            rc = ir_fail(err, errlen, "%s: the checkpoint has no tensor '%s'", path, sl[i].name);
        else if (!same)
            rc = ir_fail(err, errlen, "%s: tensor '%s' has another shape than this plan's", path,
                         sl[i].name);
    }
    for (int i = 0; i < k && !rc; i++) {
        int j = rt_st_find(f, sl[i].name);
        if (sl[i].replica > 0) {
            rt_st_copy(f, j, stats + sl[i].offset);
            continue;
        }
        float *buf = malloc(sizeof(float) * (size_t)f->tensors[j].numel + 1);
        RT_CHECK_ALLOC(buf);
        rt_st_copy(f, j, buf);
        rt_store_write(store0, sl[i].index, buf);
        free(buf);
    }
    if (!rc) rt_ckpt_stats_read(plan, store0, stats); /* replica 0's, as the others' */
    if (rc) {
        /* Say once that the file was refused, keep the detail. */
        snprintf(why, sizeof why, "%s", err);
        ir_fail(err, errlen, "checkpoint refused: %s", why);
    }
    free(sl);
    rt_st_free(f);
    return rc;
}
