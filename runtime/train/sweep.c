/* runtime/train/sweep.c — sweep specs, their combinations, ranking and the table. */
#include "runtime/train/train.h"
#include "base/err.h"
#include "base/file.h"
#include "base/parse.h"

#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include <sys/stat.h>

#include "runtime/check.h"
#include "runtime/clock.h"
#include "runtime/train/replicas.h"
#include "runtime/log.h"

/* The keys a spec may name, with what a value must be. */
typedef enum {
    KIND_POSITIVE_REAL,
    KIND_COUNT,
    KIND_POSITIVE_COUNT,
    KIND_SEED,
    KIND_SCALING,
    KIND_BOOL
} value_kind;

static const struct {
    const char *name;
    rt_sweep_key key;
    value_kind kind;
} KEYS[] = {
    {"lr", RT_SWEEP_LR, KIND_POSITIVE_REAL},
    {"warmup", RT_SWEEP_WARMUP, KIND_COUNT},
    {"epochs", RT_SWEEP_EPOCHS, KIND_POSITIVE_COUNT},
    {"gpus", RT_SWEEP_GPUS, KIND_POSITIVE_COUNT},
    {"seed", RT_SWEEP_SEED, KIND_SEED},
    {"lr-scaling", RT_SWEEP_LR_SCALING, KIND_SCALING},
    {"momentum-correction", RT_SWEEP_MOMENTUM_CORRECTION, KIND_BOOL},
    {"warmup-per-iteration", RT_SWEEP_WARMUP_PER_ITERATION, KIND_BOOL},
};
#define NKEYS (sizeof KEYS / sizeof KEYS[0])

static const char *key_name(rt_sweep_key k) {
    for (size_t i = 0; i < NKEYS; i++)
        if (KEYS[i].key == k) return KEYS[i].name;
    return "?";
}

static const char *key_list(void) {
    return "lr, warmup, epochs, gpus, seed, lr-scaling, momentum-correction, warmup-per-iteration";
}

/* One value of a key, checked by its kind; 0 or -1 with a message (the
 * spec's text escaped: it may come from a file, BASE_ESC). */
static int parse_value(const char *key, value_kind kind, const char *v, double *out, char *err,
                       size_t errlen) {
    switch (kind) {
    case KIND_POSITIVE_REAL: {
        double d;
        if (base_parse_f64(v, &d) || !isfinite(d) || d <= 0)
            return base_fail(err, errlen, "%s: '%s' is not a positive number", key, BASE_ESC(v));
        *out = d;
        return 0;
    }
    case KIND_COUNT:
    case KIND_POSITIVE_COUNT:
    case KIND_SEED: {
        /* Values travel as doubles: seeds up to 2^53 stay exact. */
        long long lo = kind == KIND_POSITIVE_COUNT ? 1 : 0, hi = 100000;
        if (kind == KIND_SEED) hi = 1LL << 53;
        if (!strcmp(key, "gpus")) hi = RT_MAX_LOCAL_REPLICAS;
        int64_t n;
        if (base_parse_i64(v, &n) || !isdigit((unsigned char)v[0]) || n < lo || n > hi)
            return base_fail(err, errlen, "%s: '%s' is not an integer in %lld..%lld", key,
                             BASE_ESC(v), lo, hi);
        *out = (double)n;
        return 0;
    }
    case KIND_SCALING:
        if (ir_lr_scaling_parse(v) < 0)
            return base_fail(err, errlen, "%s: '%s' is not one of none, linear, sqrt", key,
                             BASE_ESC(v));
        *out = ir_lr_scaling_parse(v);
        return 0;
    case KIND_BOOL:
        if (!strcmp(v, "0"))
            *out = 0;
        else if (!strcmp(v, "1"))
            *out = 1;
        else
            return base_fail(err, errlen, "%s: '%s' is not 0 or 1", key, BASE_ESC(v));
        return 0;
    }
    return base_fail(err, errlen, "%s: unknown value kind", key);
}

/* One `key=v1,v2,...` token (NUL-terminated, no blanks) into a new axis. */
static int parse_token(rt_sweep *s, const char *tok, char *err, size_t errlen) {
    const char *eq = strchr(tok, '=');
    if (!eq || eq == tok)
        return base_fail(err, errlen, "'%s' is not key=value[,value...]", BASE_ESC(tok));
    size_t klen = (size_t)(eq - tok);
    int k = -1;
    for (size_t i = 0; i < NKEYS; i++)
        if (strlen(KEYS[i].name) == klen && !strncmp(KEYS[i].name, tok, klen)) k = (int)i;
    if (k < 0) {
        char key[BASE_ESC_MAX];
        snprintf(key, sizeof key, "%.*s", (int)(klen < sizeof key ? klen : sizeof key - 1), tok);
        return base_fail(err, errlen, "'%s' is not a sweep key (one of %s)", BASE_ESC(key),
                         key_list());
    }
    for (int a = 0; a < s->axes; a++)
        if (s->axis[a].key == KEYS[k].key)
            return base_fail(err, errlen, "'%s' is given twice", KEYS[k].name);
    if (s->axes == RT_SWEEP_MAX_KEYS)
        return base_fail(err, errlen, "more than %d keys", RT_SWEEP_MAX_KEYS);
    rt_sweep_axis *ax = &s->axis[s->axes];
    memset(ax, 0, sizeof *ax);
    ax->key = KEYS[k].key;
    const char *v = eq + 1;
    for (;;) {
        const char *comma = strchr(v, ',');
        size_t len = comma ? (size_t)(comma - v) : strlen(v);
        if (len == 0) return base_fail(err, errlen, "'%s': an empty value", BASE_ESC(tok));
        if (len >= RT_SWEEP_VALUE_LEN)
            return base_fail(err, errlen, "'%s': a value of %zu bytes is too long", BASE_ESC(tok),
                             len);
        if (ax->count == RT_SWEEP_MAX_VALUES)
            return base_fail(err, errlen, "'%s': more than %d values", KEYS[k].name,
                             RT_SWEEP_MAX_VALUES);
        char *text = ax->text[ax->count];
        memcpy(text, v, len);
        text[len] = 0;
        if (parse_value(KEYS[k].name, KEYS[k].kind, text, &ax->value[ax->count], err, errlen))
            return -1;
        for (int j = 0; j < ax->count; j++)
            if (ax->value[j] == ax->value[ax->count])
                return base_fail(err, errlen, "%s: '%s' is given twice", KEYS[k].name,
                                 BASE_ESC(text));
        ax->count++;
        if (!comma) break;
        v = comma + 1;
    }
    s->axes++;
    return 0;
}

int rt_sweep_parse(rt_sweep *s, const char *spec, char *err, size_t errlen) {
    memset(s, 0, sizeof *s);
    const char *p = spec;
    char tok[1024];
    for (;;) {
        while (isspace((unsigned char)*p)) p++;
        if (!*p) break;
        size_t len = 0;
        while (p[len] && !isspace((unsigned char)p[len])) len++;
        if (len >= sizeof tok) {
            char head[41];
            snprintf(head, sizeof head, "%s", p);
            return base_fail(err, errlen, "'%s...' is too long", BASE_ESC(head));
        }
        memcpy(tok, p, len);
        tok[len] = 0;
        if (parse_token(s, tok, err, errlen)) return -1;
        p += len;
    }
    if (s->axes == 0)
        return base_fail(err, errlen, "the sweep names no key=values (keys: %s)", key_list());
    if (rt_sweep_count(s) > RT_SWEEP_MAX_RUNS)
        return base_fail(err, errlen, "%ld combinations; at most %d", rt_sweep_count(s),
                         RT_SWEEP_MAX_RUNS);
    return 0;
}

int rt_sweep_read(rt_sweep *s, const char *path, char *err, size_t errlen) {
    /* A regular file (a FIFO is refused, not waited on), no bigger than the
     * spec it may make. */
    size_t size;
    char *text = (char *)base_file_read(path, 1 << 20, &size, err, errlen);
    if (!text) return -1;
    /* Comments out, lines joined by blanks: then the spec parser does the rest,
     * and an error names the line it came from. */
    char spec[16384] = "", line[2048];
    int lineno = 0, rc = 0;
    for (const char *at = text; *at && !rc;) {
        const char *nl = strchr(at, '\n');
        size_t n = nl ? (size_t)(nl - at) : strlen(at);
        lineno++;
        if (n >= sizeof line - 1) {
            rc = base_fail(err, errlen, "%s:%d: line too long", path, lineno);
            break;
        }
        memcpy(line, at, n);
        line[n] = 0;
        at += n + (nl != NULL);
        char *hash = strchr(line, '#');
        if (hash) *hash = 0;
        rt_sweep one;
        char lerr[512];
        const char *q = line;
        while (isspace((unsigned char)*q)) q++;
        if (!*q) continue;
        if (rt_sweep_parse(&one, line, lerr, sizeof lerr)) {
            rc = base_fail(err, errlen, "%s:%d: %s", path, lineno, lerr);
            break;
        }
        if (strlen(spec) + strlen(line) + 2 > sizeof spec) {
            rc = base_fail(err, errlen, "%s:%d: the sweep is too long", path, lineno);
            break;
        }
        strcat(spec, " ");
        strcat(spec, line);
    }
    if (!rc && strlen(text) != size)
        rc = base_fail(err, errlen, "%s: not a text file (a NUL byte)", path);
    free(text);
    if (rc) return rc;
    if (rt_sweep_parse(s, spec, err, errlen)) {
        char msg[512];
        snprintf(msg, sizeof msg, "%s", err);
        return base_fail(err, errlen, "%s: %s", path, msg);
    }
    s->path = path;
    return 0;
}

long rt_sweep_count(const rt_sweep *s) {
    long n = 1;
    for (int a = 0; a < s->axes; a++) {
        n *= s->axis[a].count;
        if (n > RT_SWEEP_MAX_RUNS) return RT_SWEEP_MAX_RUNS + 1L;
    }
    return n;
}

/* Combination i's value index on axis a: mixed radix, the last axis fastest. */
static int digit(const rt_sweep *s, long i, int a) {
    for (int b = s->axes - 1; b > a; b--) i /= s->axis[b].count;
    return (int)(i % s->axis[a].count);
}

void rt_sweep_apply(const rt_sweep *s, long i, rt_train_options *o) {
    for (int a = 0; a < s->axes; a++) {
        double v = s->axis[a].value[digit(s, i, a)];
        switch (s->axis[a].key) {
        case RT_SWEEP_LR: o->lr = v; break;
        case RT_SWEEP_WARMUP: o->warmup_epochs = (int)v; break;
        case RT_SWEEP_EPOCHS: o->epochs = (int)v; break;
        case RT_SWEEP_GPUS: o->gpus = (int)v; break;
        case RT_SWEEP_SEED: o->seed = (uint64_t)v; break;
        case RT_SWEEP_LR_SCALING: o->lr_scaling = (int)v; break;
        case RT_SWEEP_MOMENTUM_CORRECTION: o->momentum_correction = (int)v; break;
        case RT_SWEEP_WARMUP_PER_ITERATION: o->warmup_per_iteration = (int)v; break;
        }
    }
}

void rt_sweep_label(const rt_sweep *s, long i, char *buf, size_t len) {
    size_t used = 0;
    buf[0] = 0;
    for (int a = 0; a < s->axes && used < len; a++) {
        int w = snprintf(buf + used, len - used, "%s%s=%s", a ? " " : "", key_name(s->axis[a].key),
                         s->axis[a].text[digit(s, i, a)]);
        if (w < 0) break;
        used += (size_t)w;
    }
}

int rt_sweep_ok(const rt_train_result *r, char *why, size_t len) {
    if (r->status != 0) {
        snprintf(why, len, "failed: %s", r->error[0] ? r->error : "training stopped with an error");
        return 0;
    }
    if (!r->finished) {
        snprintf(why, len, "failed: no final accuracy");
        return 0;
    }
    if (!isfinite(r->train_loss)) {
        /* Without a stop on NaN the run trains on; it must still rank last. */
        snprintf(why, len, "diverged: train loss %s", isnan(r->train_loss) ? "nan" : "inf");
        return 0;
    }
    if (r->diverged) {
        snprintf(why, len, "diverged: train loss %.3g", r->train_loss);
        return 0;
    }
    if (!isfinite(r->test_accuracy) || r->test_accuracy < 0) {
        snprintf(why, len, "failed: no test accuracy");
        return 0;
    }
    snprintf(why, len, "ok");
    return 1;
}

/* qsort has no context argument: the results being ranked, per thread. */
static _Thread_local const rt_train_result *ranking;

static int better_first(const void *pa, const void *pb) {
    long a = *(const long *)pa, b = *(const long *)pb;
    char why[8];
    int oka = rt_sweep_ok(&ranking[a], why, sizeof why),
        okb = rt_sweep_ok(&ranking[b], why, sizeof why);
    if (oka != okb) return okb - oka;
    if (oka) {
        const rt_train_result *x = &ranking[a], *y = &ranking[b];
        if (x->test_accuracy != y->test_accuracy)
            return x->test_accuracy > y->test_accuracy ? -1 : 1;
        if (x->train_loss != y->train_loss) return x->train_loss < y->train_loss ? -1 : 1;
    }
    return (a > b) - (a < b);
}

void rt_sweep_rank(const rt_train_result *res, long n, long *order) {
    for (long i = 0; i < n; i++) order[i] = i;
    ranking = res;
    qsort(order, (size_t)n, sizeof *order, better_first);
    ranking = NULL;
}

/* A table cell: the reason text without the characters that end a cell or row. */
static void put_cell(const char *s, FILE *f) {
    for (; *s; s++) fputc(*s == '|' || *s == '\n' ? ' ' : *s, f);
}

void rt_sweep_table(const rt_sweep *s, const rt_train_result *res, long n, FILE *f) {
    long *order = malloc((size_t)(n > 0 ? n : 1) * sizeof *order);
    RT_CHECK_ALLOC(order);
    rt_sweep_rank(res, n, order);
    fputs("| rank |", f);
    for (int a = 0; a < s->axes; a++) fprintf(f, " %s |", key_name(s->axis[a].key));
    fputs(" train loss | train accuracy | test accuracy | training (s) | wall (s) | run | result "
          "|\n|---:|",
          f);
    for (int a = 0; a < s->axes; a++) fputs("---|", f);
    fputs("---:|---:|---:|---:|---:|---:|---|\n", f);
    for (long k = 0; k < n; k++) {
        long i = order[k];
        const rt_train_result *r = &res[i];
        char why[320];
        int ok = rt_sweep_ok(r, why, sizeof why);
        if (ok)
            fprintf(f, "| %ld |", k + 1);
        else
            fputs("| — |", f);
        for (int a = 0; a < s->axes; a++) fprintf(f, " %s |", s->axis[a].text[digit(s, i, a)]);
        if (r->epochs > 0)
            fprintf(f, " %.4f |", r->train_loss);
        else
            fputs(" — |", f);
        for (int k = 0; k < 2; k++) {
            double acc = k ? r->test_accuracy : r->train_accuracy;
            if (r->finished && acc >= 0)
                fprintf(f, " %.4f |", acc);
            else
                fputs(" — |", f);
        }
        fprintf(f, " %.2f | %.2f | %ld | ", r->seconds, r->wall_seconds, i + 1);
        put_cell(why, f);
        if (r->note[0]) {
            fputs("; note: ", f);
            put_cell(r->note, f);
        }
        fputs(" |\n", f);
    }
    free(order);
}

/* The ranked table on stdout and in table_path; an error when no run
 * succeeded. */
static int finish_sweep(const rt_sweep *s, const rt_train_result *res, long n, int good,
                        const char *table_path, char *err, size_t errlen) {
    rt_sweep_table(s, res, n, stdout);
    fflush(stdout);
    if (table_path) {
        char *text = NULL;
        size_t len = 0;
        FILE *f = open_memstream(&text, &len);
        if (f) rt_sweep_table(s, res, n, f);
        int rc = 0;
        char why[1024];
        if (!f || fclose(f) != 0)
            rc = base_fail(err, errlen, "--sweep-out %s: out of memory", table_path);
        else if (base_file_write_all(table_path, text, len, why, sizeof why))
            rc = base_fail(err, errlen, "--sweep-out %s", why);
        free(text);
        if (rc) return rc;
    }
    if (!good)
        return base_fail(err, errlen, "the sweep has no successful run (the table says why)");
    return 0;
}

/* The sweep's files, all checked before the first run: the run's own
 * (rt_train_files), the sweep file, --sweep-out and each run's log and
 * metrics, none of them another; the folder made and each run's names in
 * it neither a link nor other than a regular file. user/sub: the folder as
 * base_file_open_in takes it, shown: as messages name it. */
static int check_sweep_files(const rt_sweep *s, const rt_train_options *base, const char *user,
                             const char *sub, const char *shown, const char *table_path, long n,
                             char *err, size_t errlen) {
    base_file_set *set = base_file_set_new();
    int rc = rt_train_files(base, set, err, errlen);
    if (!rc && s->path)
        rc = base_file_set_add(set, BASE_FILE_INPUT, "the sweep file", s->path, err, errlen);
    if (!rc && table_path)
        rc = base_file_set_add(set, BASE_FILE_OUTPUT, "--sweep-out", table_path, err, errlen);
    for (long i = 0; i < n && !rc; i++)
        for (int k = 0; k < 2 && !rc; k++) {
            char path[4200], name[64];
            snprintf(name, sizeof name, "run-%ld.%s", i + 1, k ? "jsonl" : "log");
            base_path_join(path, sizeof path, shown, name);
            rc = base_file_set_check(set, "--sweep-dir", path, err, errlen);
        }
    base_file_set_free(set);
    if (rc || base_file_check_dir(user, *sub ? sub : NULL, "--sweep-dir", err, errlen) ||
        (table_path && base_file_check_writable(table_path, "--sweep-out", err, errlen)))
        return -1;
    for (long i = 0; i < n; i++)
        for (int k = 0; k < 2; k++) {
            char rel[4200];
            snprintf(rel, sizeof rel, "%s%srun-%ld.%s", sub, *sub ? "/" : "", i + 1,
                     k ? "jsonl" : "log");
            if (base_file_check_in(user, rel, "--sweep-dir", err, errlen)) return -1;
        }
    return 0;
}

/* The folder: --sweep-dir DIR, the user's; or PLAN-sweep beside the
 * plan (r.plan -> r-sweep), a name of dprun's own in the plan's folder,
 * so never a link. user: the folder to write in, sub: the name under it
 * ("" for DIR), shown: the two joined; each U bytes. */
static int sweep_folder(const rt_train_options *base, const char *dir, char *user, char *sub,
                        char *shown, size_t U, char *err, size_t errlen) {
    if (dir) {
        snprintf(user, U, "%s", dir);
        snprintf(shown, U, "%s", dir);
    } else {
        const char *pp = base->plan_path ? base->plan_path : "plan";
        const char *slash = strrchr(pp, '/'), *name = slash ? slash + 1 : pp;
        size_t n = strlen(name);
        if (n > 5 && !strcmp(name + n - 5, ".plan")) n -= 5;
        if (slash)
            snprintf(user, U, "%.*s", (int)(slash - pp) + (slash == pp), pp);
        else
            snprintf(user, U, ".");
        if (snprintf(sub, U, "%.*s-sweep", (int)n, name) >= (int)U ||
            snprintf(shown, U, "%.*s%s", (int)(name - pp), pp, sub) >= (int)U) {
            base_fail(err, errlen, "%s: the name is too long for a sweep folder beside it", pp);
            return 1;
        }
    }
    return 0;
}

int rt_sweep_run(const dpc_plan *plan, const rt_sweep *s, const rt_train_options *base,
                 const char *dir, const char *table_path, char *err, size_t errlen) {
    if (base->ranks > 1) {
        base_fail(err, errlen, "--sweep runs in one process; not under mpirun with %d processes",
                  base->ranks);
        return 1;
    }
    if (!strcmp(plan->schedule.dataset, "tokens")) { /* it ranks by test accuracy */
        base_fail(err, errlen,
                  "--sweep ranks runs by test accuracy; %s is a language model (data tokens)",
                  plan->model);
        return 1;
    }
    char user[4096], sub[4096] = "", shown[4096];
    if (sweep_folder(base, dir, user, sub, shown, sizeof user, err, errlen)) return 1;
    long n = rt_sweep_count(s);
    if (check_sweep_files(s, base, user, sub, shown, table_path, n, err, errlen)) return 1;
    rt_train_result *res = calloc((size_t)(n > 0 ? n : 1), sizeof *res);
    RT_CHECK_ALLOC(res);
    int rc = 0, good = 0, stopped = 0;
    for (long i = 0; i < n && !rc && !stopped; i++) {
        char label[512], log_path[4200], metrics_path[4200], log_rel[4200], metrics_rel[4200],
            why[320], why_run[2048];
        rt_sweep_label(s, i, label, sizeof label);
        char log_name[64], metrics_name[64];
        snprintf(log_name, sizeof log_name, "run-%ld.log", i + 1);
        snprintf(metrics_name, sizeof metrics_name, "run-%ld.jsonl", i + 1);
        base_path_join(log_path, sizeof log_path, shown, log_name);
        base_path_join(metrics_path, sizeof metrics_path, shown, metrics_name);
        snprintf(log_rel, sizeof log_rel, "%s%srun-%ld.log", sub, *sub ? "/" : "", i + 1);
        snprintf(metrics_rel, sizeof metrics_rel, "%s%srun-%ld.jsonl", sub, *sub ? "/" : "", i + 1);
        /* The log in memory, written through base_file when the run ends. */
        char *log_text = NULL;
        size_t log_len = 0;
        FILE *log = open_memstream(&log_text, &log_len);
        if (!log) {
            rc = base_fail(err, errlen, "%s: cannot write: %s", log_path, strerror(errno));
            break;
        }
        rt_log(RT_LOG_INFO, "sweep: run %ld of %ld: %s (log %s)", i + 1, n, label, log_path);
        rt_train_options o = *base;
        rt_sweep_apply(s, i, &o);
        o.out = log;
        o.metrics = metrics_path;
        o.metrics_dir = user, o.metrics_name = metrics_rel;
        o.result = &res[i];
        /* The table ranks by test accuracy: a run cut short by --steps
         * still measures it. */
        if (o.final_eval < 0 && o.steps > 0) o.final_eval = RT_FINAL_EVAL_TEST;
        fprintf(log, "# sweep run %ld of %ld: %s\n", i + 1, n, label);
        /* A failed run is a row of the table; its message goes where the
         * run's own lines would. */
        double t0 = rt_now();
        if (rt_train(plan, &o, why_run, sizeof why_run) && *why_run)
            rt_log(RT_LOG_ERROR, "%s", why_run);
        res[i].wall_seconds = rt_now() - t0;
        if (res[i].status && res[i].error[0])
            fprintf(log, "%serror: %s\n", rt_log_prefix(), res[i].error);
        int lost = fclose(log) != 0;
        char wrote[1024];
        if (lost)
            rc = base_fail(err, errlen, "out of memory for a sweep log");
        else if (base_file_write_all_in(user, log_rel, log_text, log_len, wrote, sizeof wrote))
            rc = base_fail(err, errlen, "--sweep-dir %s", wrote);
        free(log_text);
        int ok = rt_sweep_ok(&res[i], why, sizeof why);
        good += ok;
        if (ok)
            rt_log(RT_LOG_INFO, "sweep: run %ld: test accuracy %.4f", i + 1, res[i].test_accuracy);
        else
            rt_log(RT_LOG_INFO, "sweep: run %ld: %s", i + 1, why);
        /* A signal stops the run (128 + signal, runtime/train/stop.c) and
         * the sweep with it: no table of a sweep half done. */
        if (res[i].status > 128) {
            stopped = res[i].status;
            rt_log(RT_LOG_INFO, "sweep: stopped during run %ld of %ld; its logs so far are in %s",
                   i + 1, n, dir);
        }
    }
    if (!rc && !stopped) rc = finish_sweep(s, res, n, good, table_path, err, errlen);
    free(res);
    return stopped ? stopped : rc ? 1 : 0;
}
