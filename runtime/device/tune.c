/* runtime/device/tune.c — what was measured for a tuned library
 * convolution (dpc --conv auto), once per descriptor:
 *   - which way it runs, the library or its alternative (im2col, or the
 *     direct kernel when grouped; measured
 *     by the executor, exec.c run_conv);
 *   - which algorithm the library runs it with (measured by cuDNN's
 *     search, runtime/cuda/cudnn.c).
 * Each is kept
 *   - for the process, shared by every replica, so replicas run the same
 *     arithmetic;
 *   - in the kernel cache (DPC_CACHE_DIR), in a record for the machine
 *     and this build of dpc (rt_conv_where: this CPU model and thread
 *     count, or the GPU and its cuDNN; and the executable's bytes), so
 *     later runs on it choose as the first did, without measuring.
 *     `dprun --tune` measures every one again.
 * The record is data: each line is checked field by field (a descriptor
 * cg_conv_validate accepts, a known way, finite times, an algorithm
 * number the library is asked about before it is used) and a bad line is
 * dropped with one notice; it never names a file or holds code.
 *
 * Lines: "conv DESC WAY LIB_MS ALT_MS" and "algo DESC ALGO", where DESC is
 * "DIR N C H W K kh kw sh sw ph pw Ho Wo G TX TW TY DENSE"; the
 * alternative's WAY is "im2col" whatever it is (the descriptor's groups
 * and DENSE say). */
#include <inttypes.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/hash.h"
#include "runtime/check.h"
#include "runtime/device/device.h"
#include "runtime/env.h"
#include "runtime/log.h"

typedef struct choice {
    uint64_t where; /* the machine it was measured on (rt_conv_where) */
    cg_conv d;
    int way; /* RT_CONV_UNKNOWN: not measured (only its algorithm was) */
    double lib_ms, alt_ms;
    int algo; /* -1: not measured */
    struct choice *next;
} choice;

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static choice *choices;
static int retune;
#define MAX_WHERE 8
static uint64_t loaded[MAX_WHERE]; /* the records read so far */
static int nloaded;

static const char *way_name(int way) { return way == RT_CONV_LIBRARY ? "library" : "im2col"; }
/* What the alternative of d is, for messages. */
static const char *alternative_name(const cg_conv *d) {
    return d->G > 1 ? "direct" : d->dense ? "dense" : "im2col";
}

/* This build of dpc, by the bytes of its executable: how a backend drives
 * a library (how it splits a call, which calls it declines) is part of
 * what was measured, so another build measures again. The cpu's key (its
 * model and the pool's size) is fixed for the process too: both are
 * made once, never per call (run_conv asks for every tuned call). */
static uint64_t build_hash, cpu_where;
static pthread_once_t where_once = PTHREAD_ONCE_INIT;
static void where_start(void) {
    uint64_t h = BASE_FNV1A_INIT;
    FILE *f = fopen("/proc/self/exe", "rb");
    if (f) {
        static char buf[1 << 16]; /* once per process (pthread_once) */
        size_t n;
        while ((n = fread(buf, 1, sizeof buf, f)) > 0) h = base_fnv1a(h, buf, n);
        fclose(f);
    }
    build_hash = h;
    int threads = rt_cpu_threads();
    cpu_where = rt_cache_cpu_hash(base_fnv1a(0x9e3779b97f4a7c15ull, &threads, sizeof threads));
}

uint64_t rt_conv_where(const rt_backend *be) {
    pthread_once(&where_once, where_start);
    uint64_t h = be && be->tune_key ? be->tune_key(be) : cpu_where;
    return base_fnv1a(h, &build_hash, sizeof build_hash);
}

/* The record's name in the cache: the machine's, and the line format's
 * (2: descriptors with groups; 3: and DENSE). */
static void record_name(uint64_t where, char *name, size_t n) {
    rt_cache_name(name, n, "tune", where, "conv 3");
}

static choice *find(uint64_t where, const cg_conv *d) {
    choice *c = choices;
    while (c && (c->where != where || !cg_conv_equal(&c->d, d))) c = c->next;
    return c;
}

/* where's entry for d (a key: its nalt cleared), made when there is none. */
static choice *entry(uint64_t where, const cg_conv *d) {
    choice *c = find(where, d);
    if (c) return c;
    c = calloc(1, sizeof *c);
    RT_CHECK_ALLOC(c);
    c->where = where;
    c->d = *d;
    c->way = RT_CONV_UNKNOWN, c->algo = -1;
    c->next = choices;
    choices = c;
    return c;
}

/* A line's descriptor into d: the characters it took, or -1. */
static int parse_desc(const char *s, cg_conv *d) {
    long long v[14];
    int dir, t[3], dense, used = 0;
    memset(d, 0, sizeof *d);
    if (sscanf(s,
               "%d %lld %lld %lld %lld %lld %lld %lld %lld %lld %lld %lld %lld %lld %lld %d %d %d "
               "%d%n",
               &dir, &v[0], &v[1], &v[2], &v[3], &v[4], &v[5], &v[6], &v[7], &v[8], &v[9], &v[10],
               &v[11], &v[12], &v[13], &t[0], &t[1], &t[2], &dense, &used) != 19)
        return -1;
    *d = (cg_conv){.dir = dir,
                   .N = v[0],
                   .C = v[1],
                   .H = v[2],
                   .W = v[3],
                   .K = v[4],
                   .kh = v[5],
                   .kw = v[6],
                   .sh = v[7],
                   .sw = v[8],
                   .ph = v[9],
                   .pw = v[10],
                   .Ho = v[11],
                   .Wo = v[12],
                   .G = v[13],
                   .type_x = t[0],
                   .type_w = t[1],
                   .type_y = t[2],
                   .tune = 1,
                   .dense = dense};
    int64_t size[3];
    char why[160];
    cg_conv_sizes(d, size);
    return cg_conv_validate(d, size, why, sizeof why) ? -1 : used;
}

/* One line into where's entries: 0, or -1 when anything is off. */
static int parse_line(uint64_t where, const char *line) {
    cg_conv d;
    int n, used = 0;
    int kind = !strncmp(line, "conv ", 5) ? 1 : !strncmp(line, "algo ", 5) ? 2 : 0;
    if (!kind || (n = parse_desc(line + 5, &d)) < 0) return -1;
    const char *rest = line + 5 + n;
    if (kind == 1) {
        char wayword[16];
        double lib_ms, alt_ms;
        if (sscanf(rest, " %15s %lf %lf%n", wayword, &lib_ms, &alt_ms, &used) != 3 ||
            rest[used] != '\0')
            return -1;
        int way = !strcmp(wayword, "library")  ? RT_CONV_LIBRARY
                  : !strcmp(wayword, "im2col") ? RT_CONV_ALTERNATIVE
                                               : RT_CONV_UNKNOWN;
        if (way == RT_CONV_UNKNOWN || !isfinite(lib_ms) || !isfinite(alt_ms) || lib_ms < 0 ||
            alt_ms < 0)
            return -1;
        choice *c = entry(where, &d);
        if (c->way == RT_CONV_UNKNOWN) c->way = way, c->lib_ms = lib_ms, c->alt_ms = alt_ms;
    } else {
        int algo;
        if (sscanf(rest, " %d%n", &algo, &used) != 1 || rest[used] != '\0' || algo < 0 ||
            algo > 255)
            return -1;
        choice *c = entry(where, &d);
        if (c->algo < 0) c->algo = algo;
    }
    return 0;
}

/* where's record, once per process (under mu). nalt is not in it: a
 * descriptor is matched with its nalt set to the record's caller's. */
static void load(uint64_t where) {
    for (int i = 0; i < nloaded; i++)
        if (loaded[i] == where) return;
    if (nloaded < MAX_WHERE) loaded[nloaded++] = where; /* more machines: read again */
    if (retune) return;
    rt_cache c;
    char err[512], name[128];
    if (rt_cache_open(&c, err, sizeof err)) return; /* no cache: measure */
    record_name(where, name, sizeof name);
    size_t len;
    char *text = (char *)rt_cache_read(&c, name, &len);
    int bad = 0;
    for (char *line = text, *end; line && *line; line = end) {
        end = strchr(line, '\n');
        if (end)
            *end++ = 0;
        else
            end = line + strlen(line);
        if (parse_line(where, line)) bad++;
    }
    if (bad) {
        char *path = rt_cache_path(&c, name);
        rt_log(RT_LOG_NOTE, "%s: %d malformed line%s ignored; measuring those again", path, bad,
               bad == 1 ? "" : "s");
        free(path);
    }
    free(text);
    rt_cache_close(&c);
}

/* Rewrites where's record with every choice this process knows of it
 * (under mu). */
static void save(uint64_t where) {
    rt_cache c;
    char err[512], name[128];
    if (rt_cache_open(&c, err, sizeof err)) return;
    record_name(where, name, sizeof name);
    size_t cap = 256, len = 0;
    for (const choice *k = choices; k; k = k->next) cap += 512;
    char *text = malloc(cap);
    RT_CHECK_ALLOC(text);
    for (const choice *k = choices; k; k = k->next) {
        const cg_conv *d = &k->d;
        if (k->where != where || d->tf32) continue; /* tf32: no field for it, measured anew */
        char desc[256];
        snprintf(desc, sizeof desc,
                 "%d %" PRId64 " %" PRId64 " %" PRId64 " %" PRId64 " %" PRId64 " %" PRId64
                 " %" PRId64 " %" PRId64 " %" PRId64 " %" PRId64 " %" PRId64 " %" PRId64 " %" PRId64
                 " %" PRId64 " %d %d %d %d",
                 d->dir, d->N, d->C, d->H, d->W, d->K, d->kh, d->kw, d->sh, d->sw, d->ph, d->pw,
                 d->Ho, d->Wo, d->G, d->type_x, d->type_w, d->type_y, d->dense);
        if (k->way != RT_CONV_UNKNOWN)
            len += (size_t)snprintf(text + len, cap - len, "conv %s %s %.4f %.4f\n", desc,
                                    way_name(k->way), k->lib_ms, k->alt_ms);
        if (k->algo >= 0)
            len += (size_t)snprintf(text + len, cap - len, "algo %s %d\n", desc, k->algo);
    }
    if (rt_cache_write(&c, name, text, len, err, sizeof err))
        rt_log(RT_LOG_NOTE, "the convolution choices were not kept: %s", err);
    free(text);
    rt_cache_close(&c);
}

/* Read on every cuDNN call (runtime/cuda/cudnn.c): an atomic, not mu. */
static int nondeterministic;

void rt_conv_set_nondeterministic(int on) {
    __atomic_store_n(&nondeterministic, on != 0, __ATOMIC_RELAXED);
}

int rt_conv_nondeterministic(void) { return __atomic_load_n(&nondeterministic, __ATOMIC_RELAXED); }

void rt_conv_retune(void) {
    pthread_mutex_lock(&mu);
    retune = 1;
    pthread_mutex_unlock(&mu);
}

int rt_conv_choice_get(uint64_t where, const cg_conv *d) {
    cg_conv key = *d;
    key.nalt = 0; /* the record does not keep it */
    pthread_mutex_lock(&mu);
    load(where);
    const choice *c = find(where, &key);
    int way = c ? c->way : RT_CONV_UNKNOWN;
    pthread_mutex_unlock(&mu);
    return way;
}

void rt_conv_choice_set(uint64_t where, const cg_conv *d, int way, double lib_s, double alt_s) {
    cg_conv key = *d;
    key.nalt = 0;
    pthread_mutex_lock(&mu);
    load(where); /* the record's other lines are kept when it is written */
    choice *c = entry(where, &key);
    if (c->way == RT_CONV_UNKNOWN) { /* the first replica's measurement stands */
        c->way = way, c->lib_ms = 1e3 * lib_s, c->alt_ms = 1e3 * alt_s;
        save(where);
        if (retune || rt_debug_level() >= 1 || rt_env_int("DPC_PROFILE", 0)) {
            char times[96]; /* no times: the library declined the shape (exec.c) */
            if (lib_s == 0 && alt_s == 0)
                snprintf(times, sizeof times, "the library declines it");
            else
                snprintf(times, sizeof times, "library %.3f ms, %s %.3f ms", 1e3 * lib_s,
                         alternative_name(d), 1e3 * alt_s);
            char what[160];
            cg_conv_describe(d, what, sizeof what);
            rt_log(RT_LOG_INFO, "conv %s: %s: %s", what, times,
                   way == RT_CONV_LIBRARY ? "library" : alternative_name(d));
        }
    }
    pthread_mutex_unlock(&mu);
}

int rt_conv_algo_get(uint64_t where, const cg_conv *d) {
    cg_conv key = *d;
    key.nalt = 0;
    pthread_mutex_lock(&mu);
    load(where);
    const choice *c = find(where, &key);
    int algo = c ? c->algo : -1;
    pthread_mutex_unlock(&mu);
    return algo;
}

void rt_conv_algo_set(uint64_t where, const cg_conv *d, int algo) {
    cg_conv key = *d;
    key.nalt = 0;
    pthread_mutex_lock(&mu);
    load(where);
    choice *c = entry(where, &key);
    if (algo >= 0 && c->algo != algo) { /* new, or a recorded one the library no longer offers */
        c->algo = algo;
        save(where);
    }
    pthread_mutex_unlock(&mu);
}
