/* runtime/train/checkpoint.c — checkpoints as safetensors files with a checksum
 * and the run's position in the metadata (checkpoint.h). */
#include "runtime/train/checkpoint.h"
#include "base/err.h"
#include "base/hash.h"
#include "base/parse.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "runtime/check.h"
#include "runtime/device/sha256.h"
#include "runtime/exec/exec.h"
#include "runtime/train/safetensors.h"

/* A broken invariant of this file (not of the input): abort, saying where. */
#define CKPT_ASSERT(cond, ...)    \
    do {                          \
        if (!(cond)) {            \
            RT_FAIL(__VA_ARGS__); \
            abort();              \
        }                         \
    } while (0)

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
    h = base_fnv1a_str(h, name);
    h = base_fnv1a(h, &ndim, sizeof ndim);
    return base_fnv1a(h, shape, sizeof *shape * (size_t)ndim);
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

/* Every key a checkpoint's metadata holds, in the order they are written;
 * a file with any other key, or one of these twice, is refused. */
static const char *const KEYS[] = {"producer",
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
enum { NKEYS = sizeof KEYS / sizeof *KEYS };

typedef struct {
    const char *kv[2 * NKEYS + 1];
    char val[NKEYS][1100]; /* flags is up to 1023 */
    int n;
} meta_list;

static void meta_add(meta_list *m, const char *key, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void meta_add(meta_list *m, const char *key, const char *fmt, ...) {
    CKPT_ASSERT(m->n / 2 < NKEYS && !strcmp(KEYS[m->n / 2], key), "checkpoint key %s out of order",
                key);
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

/* What the checks of one file share: it, its name, the message buffer. */
typedef struct {
    const rt_st_file *f;
    const char *path;
    char *err;
    size_t errlen;
} reader;

/* A value as a message shows it: at most 40 bytes. */
/* A value from the file, cut short and with control bytes escaped. */
static const char *shown(const char *v, char buf[64]) { return base_esc(buf, 64, v); }

static const char *need_meta(reader *c, const char *key) {
    const char *v = rt_st_meta(c->f, key);
    if (!v)
        base_fail(c->err, c->errlen, "%s: not a dpc checkpoint: no '%s' in its metadata", c->path,
                  key);
    return v;
}

/* A value that is not of its key's kind or range. */
static int corrupt(reader *c, const char *key, const char *v, const char *why) {
    char b[64];
    return base_fail(c->err, c->errlen, "%s: corrupt checkpoint: '%s' is '%s' (%s)", c->path, key,
                     shown(v, b), why);
}

/* An integer in [lo, hi]. */
static int meta_i64(reader *c, const char *key, int64_t lo, int64_t hi, int64_t *out) {
    const char *v = need_meta(c, key);
    if (!v) return -1;
    if (base_parse_i64(v, out)) return corrupt(c, key, v, "not an integer");
    if (*out < lo || *out > hi) {
        char why[96];
        snprintf(why, sizeof why, "not between %" PRId64 " and %" PRId64, lo, hi);
        return corrupt(c, key, v, why);
    }
    return 0;
}

static int meta_int(reader *c, const char *key, int lo, int hi, int *out) {
    int64_t v;
    if (meta_i64(c, key, lo, hi, &v)) return -1;
    *out = (int)v;
    return 0;
}

/* A finite number >= lo (nan_ok: or NaN). */
static int meta_f64(reader *c, const char *key, double lo, int nan_ok, double *out) {
    const char *v = need_meta(c, key);
    if (!v) return -1;
    if (base_parse_f64(v, out)) return corrupt(c, key, v, "not a number");
    if (isnan(*out) && nan_ok) return 0;
    if (!isfinite(*out)) return corrupt(c, key, v, "not finite");
    if (*out < lo) return corrupt(c, key, v, lo == 0 ? "negative" : "out of range");
    return 0;
}

/* A string that fits len (a NUL included); empty_ok: may be "". */
static int meta_str(reader *c, const char *key, char *out, size_t len, int empty_ok) {
    const char *v = need_meta(c, key);
    if (!v) return -1;
    if (strlen(v) >= len) return corrupt(c, key, v, "too long");
    if (!*v && !empty_ok) return corrupt(c, key, v, "empty");
    snprintf(out, len, "%s", v);
    return 0;
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

/* The format version: this one, or a clear refusal of another. */
static int check_version(reader *c) {
    const char *version = need_meta(c, "dpc_checkpoint");
    if (!version) return -1;
    if (!strcmp(version, RT_CKPT_VERSION)) return 0;
    char b[64];
    if (!strcmp(version, "1") || !strcmp(version, "2"))
        return base_fail(c->err, c->errlen,
                         "%s: checkpoint format version %s, written by an older dprun; this dprun "
                         "reads version %s (an older checkpoint names its metrics file, which "
                         "this dprun no longer trusts): finish that run with the dprun that "
                         "wrote it, or start afresh",
                         c->path, version, RT_CKPT_VERSION);
    return base_fail(c->err, c->errlen,
                     "%s: checkpoint format version '%s'; this dprun reads version %s", c->path,
                     shown(version, b), RT_CKPT_VERSION);
}

/* Each metadata key one of KEYS, none twice (a reader taking the first
 * of two would see another file than one taking the last). */
static int check_keys(reader *c) {
    int seen[NKEYS] = {0};
    char b[64];
    for (int i = 0; i < c->f->nmeta; i++) {
        int k = 0;
        while (k < NKEYS && strcmp(KEYS[k], c->f->meta_keys[i])) k++;
        if (k == NKEYS)
            return base_fail(c->err, c->errlen,
                             "%s: corrupt checkpoint: unknown key '%s' in its metadata", c->path,
                             shown(c->f->meta_keys[i], b));
        if (seen[k]++)
            return base_fail(c->err, c->errlen,
                             "%s: corrupt checkpoint: key '%s' appears twice in its metadata",
                             c->path, KEYS[k]);
    }
    return 0;
}

static int is_hex64(const char *v) {
    if (strlen(v) != 64) return 0;
    for (const char *p = v; *p; p++)
        if (!strchr("0123456789abcdef", *p)) return 0;
    return 1;
}

/* The metrics file's prefix and the pending line, against the position. */
static int check_metrics_fields(reader *c, rt_ckpt_state *s) {
    rt_ckpt_metrics *m = &s->pending;
    if (meta_i64(c, "metrics_bytes", -1, RT_CKPT_METRICS_MAX, &s->metrics_bytes) ||
        meta_str(c, "metrics_sha256", s->metrics_sha256, sizeof s->metrics_sha256, 1))
        return -1;
    if (s->metrics_bytes >= 0 ? !is_hex64(s->metrics_sha256) : *s->metrics_sha256 != 0)
        return corrupt(c, "metrics_sha256", s->metrics_sha256,
                       s->metrics_bytes >= 0 ? "not 64 hex digits"
                                             : "set, but 'metrics_bytes' is -1");
    /* A line held back for the final accuracies: the one of the epoch
     * before the step's, when that epoch ended its run and the run kept a
     * metrics file; else none (-1), every line written. */
    int64_t want = s->metrics_bytes >= 0 ? s->step / s->steps_per_epoch - 1 : -1;
    if (meta_i64(c, "pending_epoch", -1, INT32_MAX, &m->epoch)) return -1;
    if (m->epoch != want && m->epoch != -1) {
        char why[160];
        snprintf(why, sizeof why,
                 "at step %" PRId64 " of %" PRId64 " per epoch%s it must be %s%" PRId64, s->step,
                 s->steps_per_epoch, s->metrics_bytes >= 0 ? "" : " without a metrics file",
                 want >= 0 ? "-1 or " : "", want);
        return corrupt(c, "pending_epoch", rt_st_meta(c->f, "pending_epoch"), why);
    }
    int none = m->epoch < 0;
    if (meta_f64(c, "pending_lr", 0, 0, &m->lr) ||
        meta_f64(c, "pending_train_loss", -INFINITY, 1, &m->train_loss) ||
        meta_i64(c, "pending_batch", none ? 0 : s->global_batch, none ? 0 : s->global_batch,
                 &m->batch) ||
        meta_i64(c, "pending_steps", none ? 0 : 1, none ? 0 : s->steps_per_epoch, &m->steps) ||
        meta_f64(c, "pending_seconds", 0, 0, &m->seconds) ||
        meta_f64(c, "pending_input_wait_s", 0, 0, &m->input_wait_s) ||
        meta_f64(c, "pending_test_accuracy", -1, 0, &m->test_accuracy))
        return -1;
    const char *bad = NULL;
    if (m->test_accuracy > 1 || (m->test_accuracy < 0 && m->test_accuracy != -1))
        bad = "pending_test_accuracy";
    if (none && (m->lr != 0 || m->train_loss != 0 || m->seconds != 0 || m->input_wait_s != 0 ||
                 m->test_accuracy != 0))
        bad = m->lr                ? "pending_lr"
              : m->train_loss != 0 ? "pending_train_loss"
              : m->seconds         ? "pending_seconds"
              : m->input_wait_s    ? "pending_input_wait_s"
                                   : "pending_test_accuracy";
    if (bad)
        return corrupt(c, bad, rt_st_meta(c->f, bad),
                       none ? "set, but 'pending_epoch' is -1" : "not -1 or between 0 and 1");
    return 0;
}

/* The position and counters, each in its range. */
static int check_position(reader *c, rt_ckpt_state *s) {
    memset(s, 0, sizeof *s);
    if (meta_i64(c, "steps_per_epoch", 1, INT32_MAX, &s->steps_per_epoch) ||
        meta_i64(c, "step", 0, (int64_t)INT32_MAX * s->steps_per_epoch, &s->step) ||
        meta_int(c, "global_batch", 1, INT32_MAX, &s->global_batch))
        return -1;
    const char *seed = need_meta(c, "seed");
    if (!seed) return -1;
    if (base_parse_u64(seed, &s->seed)) return corrupt(c, "seed", seed, "not an unsigned integer");
    int64_t in_epoch = s->step % s->steps_per_epoch;
    if (meta_str(c, "data", s->data, sizeof s->data, 0) ||
        meta_int(c, "shuffle", 0, 1, &s->shuffle) || meta_int(c, "augment", 0, 1, &s->augment) ||
        meta_f64(c, "epoch_loss_sum", 0, 0, &s->epoch_loss_sum) ||
        meta_i64(c, "epoch_skipped", 0, in_epoch, &s->epoch_skipped) ||
        meta_f64(c, "prev_lr", 0, 0, &s->prev_lr) ||
        meta_f64(c, "epoch_seconds", 0, 0, &s->epoch_seconds) ||
        meta_f64(c, "total_seconds", 0, 0, &s->total_seconds))
        return -1;
    /* At an epoch's end the next epoch has no sums yet. */
    if (!in_epoch && s->epoch_loss_sum != 0)
        return corrupt(c, "epoch_loss_sum", rt_st_meta(c->f, "epoch_loss_sum"),
                       "not 0 at an epoch's end");
    if (!in_epoch && s->epoch_seconds != 0)
        return corrupt(c, "epoch_seconds", rt_st_meta(c->f, "epoch_seconds"),
                       "not 0 at an epoch's end");
    if (check_metrics_fields(c, s)) return -1;
    return meta_str(c, "flags", s->flags, sizeof s->flags, 0);
}

/* Format, keys, checksum, plan and replica count; then the position. */
static int check_header(reader *c, const dpc_plan *plan, int n, rt_ckpt_state *s) {
    if (check_version(c) || check_keys(c)) return -1;
    const char *sum = need_meta(c, "checksum");
    if (!sum) return -1;
    char want[32], b[64];
    snprintf(want, sizeof want, "%016" PRIx64, rt_ckpt_checksum(c->f));
    if (strcmp(sum, want))
        return base_fail(c->err, c->errlen,
                         "%s: corrupt checkpoint: checksum mismatch (stored %s, computed %s)",
                         c->path, shown(sum, b), want);
    const char *producer = need_meta(c, "producer");
    if (!producer) return -1;
    if (strcmp(producer, "dpc")) return corrupt(c, "producer", producer, "not dpc");
    char model[IR_NAME_MAX], plan_sum[32], mine[32];
    if (meta_str(c, "model", model, sizeof model, 0) ||
        meta_str(c, "plan_checksum", plan_sum, sizeof plan_sum, 0))
        return -1;
    snprintf(mine, sizeof mine, "%016" PRIx64, plan->checksum);
    if (strcmp(model, plan->model) || strcmp(plan_sum, mine))
        return base_fail(
            c->err, c->errlen,
            "%s: the checkpoint belongs to another plan (model %s, plan checksum %s); this "
            "plan is model %s, plan checksum %s",
            c->path, model, plan_sum, plan->model, mine);
    int64_t replicas;
    const char *rv = need_meta(c, "replicas");
    if (!rv) return -1;
    if (base_parse_i64(rv, &replicas) || replicas < 1)
        return corrupt(c, "replicas", rv, "not a positive integer");
    if (replicas != n)
        return base_fail(
            c->err, c->errlen,
            "%s: the checkpoint was written by a run of %lld replica%s (--gpus); this run has "
            "%d",
            c->path, (long long)replicas, replicas == 1 ? "" : "s", n);
    return check_position(c, s);
}

/* ---- the checks against the resuming run ---- */

/* "--k=v;--k=v" split into at most max (key, value) pairs in buf; -1 when
 * an entry is not --KEY=VALUE or the list is longer. */
static int split_flags(const char *list, char *buf, size_t len, char **key, char **val, int max) {
    snprintf(buf, len, "%s", list);
    int n = 0;
    char *save;
    if (!*buf) return -1;
    for (char *t = buf;; t = NULL) {
        char *item = strtok_r(t, ";", &save);
        if (!item) break;
        char *eq = strchr(item, '=');
        if (n == max || !eq || strncmp(item, "--", 2) || eq == item + 2) return -1;
        *eq = 0;
        key[n] = item, val[n++] = eq + 1;
    }
    /* strtok_r skips empty items: ";;" or a leading ';' is malformed too. */
    if (strstr(list, ";;") || *list == ';' || list[strlen(list) - 1] == ';') return -1;
    return n;
}

int rt_ckpt_check_flags(const char *path, const char *saved, const char *mine, char *err,
                        size_t errlen) {
    enum { MAX = 32 };
    char a[1024], m[1024], *ak[MAX], *av[MAX], *mk[MAX], *mv[MAX], b[64];
    int na = split_flags(saved, a, sizeof a, ak, av, MAX);
    int nm = split_flags(mine, m, sizeof m, mk, mv, MAX);
    CKPT_ASSERT(nm >= 0, "this run's flags '%s' do not parse", mine);
    if (na < 0)
        return base_fail(err, errlen,
                         "%s: corrupt checkpoint: 'flags' is '%s' (not --KEY=VALUE;...)", path,
                         shown(saved, b));
    for (int i = 0; i < na; i++) {
        int j = 0;
        while (j < nm && strcmp(ak[i], mk[j])) j++;
        for (int k = 0; k < i; k++)
            if (!strcmp(ak[k], ak[i]))
                return base_fail(err, errlen, "%s: corrupt checkpoint: 'flags' holds %s twice",
                                 path, shown(ak[i], b));
        if (j == nm)
            return base_fail(err, errlen,
                             "%s: corrupt checkpoint: 'flags' holds %s, not a flag "
                             "this dprun records",
                             path, shown(ak[i], b));
        if (strcmp(av[i], mv[j])) {
            char b2[64];
            return base_fail(err, errlen,
                             "%s was written with %s %s; this run has %s %s (a resume continues "
                             "bit for bit only with the same flags)",
                             path, mk[j], shown(av[i], b2), mk[j], mv[j]);
        }
    }
    for (int j = 0; j < nm; j++) {
        int i = 0;
        while (i < na && strcmp(ak[i], mk[j])) i++;
        if (i == na)
            return base_fail(err, errlen,
                             "%s: corrupt checkpoint: 'flags' lacks %s (this run has %s %s)", path,
                             mk[j], mk[j], mv[j]);
    }
    return 0;
}

/* A line dprun writes to a metrics file: one JSON object of printable
 * ASCII starting with its epoch (report.c), without its newline. */
static int metrics_line(const unsigned char *p, size_t n) {
    static const char head[] = "{\"epoch\": ";
    if (n < sizeof head || memcmp(p, head, sizeof head - 1) || p[n - 1] != '}') return 0;
    for (size_t i = 0; i < n; i++)
        if (p[i] < 0x20 || p[i] > 0x7e) return 0;
    return 1;
}

int rt_ckpt_check_metrics(const char *path, const rt_ckpt_state *s, const char *metrics,
                          const unsigned char *text, size_t len, char *err, size_t errlen) {
    int64_t want = s->metrics_bytes;
    if (want < 0)
        return base_fail(err, errlen,
                         "%s was written without --metrics; this run has --metrics %s (its file "
                         "would lack the epochs before the checkpoint)",
                         path, metrics);
    if (!text && want > 0)
        return base_fail(err, errlen,
                         "--metrics %s does not exist; the checkpoint %s was written when it held "
                         "%" PRId64 " bytes",
                         metrics, path, want);
    if (!text) return 0;
    if (len < (size_t)want)
        return base_fail(err, errlen,
                         "--metrics %s: %zu bytes, shorter than the %" PRId64
                         " it had at the checkpoint %s; it is not the file that checkpoint was "
                         "written with",
                         metrics, len, want, path);
    unsigned char d[32];
    char hex[65];
    rt_sha256(text, (size_t)want, d);
    rt_sha256_hex(d, hex);
    if (strcmp(hex, s->metrics_sha256) || (want > 0 && text[want - 1] != '\n'))
        return base_fail(err, errlen,
                         "--metrics %s: its first %" PRId64
                         " bytes are not those the checkpoint %s recorded (SHA-256 differs); it "
                         "is not the metrics file that run wrote (name that file, or resume "
                         "without --metrics)",
                         metrics, want, path);
    /* After the prefix: lines the run wrote after its checkpoint, which
     * the resumed run writes again. Anything else is not dprun's to drop. */
    long line = 1;
    for (int64_t i = 0; i < want; i++) line += text[i] == '\n';
    for (size_t at = (size_t)want; at < len; line++) {
        const unsigned char *nl = memchr(text + at, '\n', len - at);
        size_t n = nl ? (size_t)(nl - (text + at)) : len - at;
        if (!nl || !metrics_line(text + at, n))
            return base_fail(err, errlen,
                             "--metrics %s: line %ld is not a metrics line dprun writes; a resume "
                             "from %s would drop it (the checkpoint recorded the first %" PRId64
                             " bytes)",
                             metrics, line, path, want);
        at += n + 1;
    }
    return 0;
}

/* The checks and the copy into the stores, of a parsed file. */
static int load_parsed(const rt_st_file *f, const char *path, const dpc_plan *plan,
                       rt_store *store0, int n, float *stats, rt_ckpt_state *s, char *err,
                       size_t errlen) {
    reader c = {f, path, err, errlen};
    int rc = check_header(&c, plan, n, s);
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
