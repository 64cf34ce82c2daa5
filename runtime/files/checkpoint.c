/* runtime/files/checkpoint.c — checkpoints as safetensors files with a checksum
 * and the run's position in the metadata (files.h): which tensors a
 * checkpoint holds, writing one, and loading one into the stores once
 * checkpoint_meta.c has checked its metadata. */
#include "runtime/files/internal.h"
#include "base/err.h"
#include "base/file.h"
#include "base/hash.h"

#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "runtime/check.h"
#include "runtime/exec/exec.h"

static void ckpt_path(const char *dir, char *path, size_t len) {
    base_path_join(path, len, dir, RT_CKPT_FILE);
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
    h = base_fnv1a_str(h, name);
    h = base_fnv1a(h, &ndim, sizeof ndim);
    return base_fnv1a(h, shape, sizeof *shape * (size_t)ndim);
}

uint64_t rt_ckpt_checksum(const rt_st_file *f) {
    uint64_t h = BASE_FNV1A_INIT;
    for (int i = 0; i < f->nmeta; i++)
        if (strcmp(f->meta_keys[i], "checksum"))
            h = base_fnv1a_str(base_fnv1a_str(h, f->meta_keys[i]), f->meta_values[i]);
    for (int i = 0; i < f->n; i++)
        h = fnv_entry(h, f->tensors[i].name, f->tensors[i].ndim, f->tensors[i].shape);
    for (int i = 0; i < f->n; i++)
        h = base_fnv1a(h, f->bytes + f->data_start + f->tensors[i].begin,
                       (size_t)(f->tensors[i].end - f->tensors[i].begin));
    return h;
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

/* The metadata keys in the order they are written (internal.h). */
const char *const rt_ckpt_keys[] = {"producer",
                                    "dpc_checkpoint",
                                    "model",
                                    "plan_checksum",
                                    "replicas",
                                    "step",
                                    "steps_per_epoch",
                                    "global_batch",
                                    "seed",
                                    "data",
                                    "shuffle",
                                    "augment",
                                    "epoch_loss_sum",
                                    "epoch_skipped",
                                    "prev_lr",
                                    "epoch_seconds",
                                    "total_seconds",
                                    "metrics_bytes",
                                    "metrics_sha256",
                                    "pending_epoch",
                                    "pending_lr",
                                    "pending_train_loss",
                                    "pending_batch",
                                    "pending_steps",
                                    "pending_seconds",
                                    "pending_input_wait_s",
                                    "pending_test_accuracy",
                                    "flags",
                                    "checksum"};
_Static_assert(sizeof rt_ckpt_keys / sizeof *rt_ckpt_keys == RT_CKPT_NKEYS,
               "RT_CKPT_NKEYS counts rt_ckpt_keys");

typedef struct {
    const char *kv[2 * RT_CKPT_NKEYS + 1];
    char val[RT_CKPT_NKEYS][1100]; /* flags is up to 1023 */
    int n;
} meta_list;

static void meta_add(meta_list *m, const char *key, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void meta_add(meta_list *m, const char *key, const char *fmt, ...) {
    CKPT_ASSERT(m->n / 2 < RT_CKPT_NKEYS && !strcmp(rt_ckpt_keys[m->n / 2], key),
                "checkpoint key %s out of order", key);
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
    meta_list *mp = calloc(1, sizeof *mp); /* 30 KB: not on the stack */
    RT_CHECK_ALLOC(mp);
    const rt_ckpt_metrics *pm = &s->pending;
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
    meta_add(mp, "metrics_sha256", "%s", s->metrics_sha256);
    meta_add(mp, "pending_epoch", "%" PRId64, pm->epoch);
    meta_add(mp, "pending_lr", "%a", pm->lr);
    meta_add(mp, "pending_train_loss", "%a", pm->train_loss);
    meta_add(mp, "pending_batch", "%" PRId64, pm->batch);
    meta_add(mp, "pending_steps", "%" PRId64, pm->steps);
    meta_add(mp, "pending_seconds", "%a", pm->seconds);
    meta_add(mp, "pending_input_wait_s", "%a", pm->input_wait_s);
    meta_add(mp, "pending_test_accuracy", "%a", pm->test_accuracy);
    meta_add(mp, "flags", "%s", s->flags);

    int count = rt_store_count(store0);
    slot *sl = calloc((size_t)(n * count) + 1, sizeof *sl);
    RT_CHECK_ALLOC(sl);
    int k = list_slots(plan, store0, n, sl);
    rt_st_entry *e = calloc((size_t)k + 1, sizeof *e);
    float **data = calloc((size_t)k + 1, sizeof *data);
    RT_CHECK_ALLOC(e && data);
    uint64_t h = BASE_FNV1A_INIT;
    for (int i = 0; i < mp->n; i++) h = base_fnv1a_str(h, mp->kv[i]);
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
        h = base_fnv1a(h, data[i],
                       sizeof(float) * (size_t)ir_numel(rt_store_type(store0, sl[i].index)));
    meta_add(mp, "checksum", "%016" PRIx64, h);

    /* rt_st_write_in syncs the file and DIR (base_file): it survives a crash.
     * The name is dprun's own: never written through a link; DIR is created
     * when missing. */
    char why[1024];
    int rc = 0;
    if (rt_store_failed(store0, why, sizeof why)) /* what was read is not the tensors: */
        rc = base_fail(err, errlen, "--checkpoint not written: %s", why); /* the last one stays */
    else if ((rc = rt_st_write_in(dir, RT_CKPT_FILE, e, k, mp->kv, why, sizeof why)))
        base_fail(err, errlen, "--checkpoint %s", why);
    free(mp);
    for (int i = 0; i < k; i++) free(data[i]);
    free(data);
    free(e);
    free(sl);
    return rc;
}

/* ---- reading ---- */

/* The checks and the copy into the stores, of a parsed file. */
static int load_parsed(const rt_st_file *f, const char *path, const dpc_plan *plan,
                       rt_store *store0, int n, float *stats, rt_ckpt_state *s, char *err,
                       size_t errlen) {
    int rc = rt_ckpt_check_header(f, path, plan, n, s, err, errlen);
    int count = rt_store_count(store0);
    slot *sl = calloc((size_t)(n * count) + 1, sizeof *sl);
    RT_CHECK_ALLOC(sl);
    int k = list_slots(plan, store0, n, sl);
    if (!rc && f->n != k)
        rc = base_fail(err, errlen,
                       "%s: the checkpoint holds %d tensors; this plan with %d replica%s needs %d",
                       path, f->n, n, n == 1 ? "" : "s", k);
    /* Every tensor present with our shape before anything is written. */
    for (int i = 0; i < k && !rc; i++) {
        int j = rt_st_find(f, sl[i].name);
        const ir_type *t = rt_store_type(store0, sl[i].index);
        int same = j >= 0 && f->tensors[j].ndim == t->ndim;
        for (int d = 0; same && d < t->ndim; d++) same = f->tensors[j].shape[d] == t->dim[d];
        if (j < 0)
            rc = base_fail(err, errlen, "%s: the checkpoint has no tensor '%s'", path, sl[i].name);
        else if (!same)
            rc = base_fail(err, errlen, "%s: tensor '%s' has another shape than this plan's", path,
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
        char why[1024];
        snprintf(why, sizeof why, "%s", err);
        base_fail(err, errlen, "checkpoint refused: %s", why);
    }
    free(sl);
    return rc;
}

int rt_ckpt_read(const char *dir, const dpc_plan *plan, rt_store *store0, int n, float *stats,
                 rt_ckpt_state *s, char *err, size_t errlen) {
    char path[4096];
    ckpt_path(dir, path, sizeof path);
    char why[1024];
    rt_st_file *f = rt_st_read(path, why, sizeof why);
    if (!f) return base_fail(err, errlen, "checkpoint refused: %s", why);
    int rc = load_parsed(f, path, plan, store0, n, stats, s, err, errlen);
    rt_st_free(f);
    return rc;
}

int rt_ckpt_load(const char *name, const unsigned char *buf, size_t len, const dpc_plan *plan,
                 rt_store *store0, int n, float *stats, rt_ckpt_state *s, char *err,
                 size_t errlen) {
    char why[1024];
    rt_st_file *f = rt_st_parse(name, buf, len, why, sizeof why);
    if (!f) return base_fail(err, errlen, "checkpoint refused: %s", why);
    int rc = load_parsed(f, name, plan, store0, n, stats, s, err, errlen);
    rt_st_free(f);
    return rc;
}
