/* runtime/files/checkpoint_meta.c — a checkpoint's metadata read back:
 * the format version, the keys, the checksum, the plan and replica count
 * it belongs to, and every value of the run's position, each of its kind
 * and in its range, before anything is loaded (checkpoint.c). */
#include "runtime/files/internal.h"
#include "base/err.h"
#include "base/parse.h"

#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

/* What the checks of one file share: it, its name, the message buffer. */
typedef struct {
    const rt_st_file *f;
    const char *path;
    char *err;
    size_t errlen;
} reader;

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
                     rt_ckpt_shown(v, b), why);
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
                     rt_ckpt_shown(version, b), RT_CKPT_VERSION);
}

/* Each metadata key one of KEYS, none twice (a reader taking the first
 * of two would see another file than one taking the last). */
static int check_keys(reader *c) {
    int seen[RT_CKPT_NKEYS] = {0};
    char b[64];
    for (int i = 0; i < c->f->nmeta; i++) {
        int k = 0;
        while (k < RT_CKPT_NKEYS && strcmp(rt_ckpt_keys[k], c->f->meta_keys[i])) k++;
        if (k == RT_CKPT_NKEYS)
            return base_fail(c->err, c->errlen,
                             "%s: corrupt checkpoint: unknown key '%s' in its metadata", c->path,
                             rt_ckpt_shown(c->f->meta_keys[i], b));
        if (seen[k]++)
            return base_fail(c->err, c->errlen,
                             "%s: corrupt checkpoint: key '%s' appears twice in its metadata",
                             c->path, rt_ckpt_keys[k]);
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
int rt_ckpt_check_header(const rt_st_file *f, const char *path, const dpc_plan *plan, int n,
                         rt_ckpt_state *s, char *err, size_t errlen) {
    reader r = {f, path, err, errlen}, *c = &r;
    if (check_version(c) || check_keys(c)) return -1;
    const char *sum = need_meta(c, "checksum");
    if (!sum) return -1;
    char want[32], b[64];
    snprintf(want, sizeof want, "%016" PRIx64, rt_ckpt_checksum(c->f));
    if (strcmp(sum, want))
        return base_fail(c->err, c->errlen,
                         "%s: corrupt checkpoint: checksum mismatch (stored %s, computed %s)",
                         c->path, rt_ckpt_shown(sum, b), want);
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
