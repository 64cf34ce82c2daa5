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
 * The record is data, of at most TUNE_RECORD_MAX bytes (a larger one is
 * not read, with a notice), indexed by a hash so that reading it is linear
 * in its lines; each line is checked field by field and must parse
 * in full (at most TUNE_LINE_MAX characters, a descriptor
 * cg_conv_validate accepts, a known way, times in 0..TUNE_MAX_MS, an
 * algorithm number the library is asked about before it is used, nothing
 * after them); a bad line is dropped with one notice and measured again;
 * it never names a file or holds code.
 *
 * Lines: "conv DESC WAY LIB_MS ALT_MS" and "algo DESC ALGO", where DESC is
 * "DIR N C H W K kh kw sh sw ph pw Ho Wo G TX TW TY DENSE"; the
 * alternative's WAY is "im2col" whatever it is (the descriptor's groups
 * and DENSE say). */
#include <fcntl.h>
#include <inttypes.h>
#include <math.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "base/hash.h"
#include "base/parse.h"
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

/* The choices by (where, descriptor), open addressing, at most half full:
 * a record of 10^5 lines is read in linear time (a search of the list per
 * line took minutes). */
static choice **table;
static size_t table_cap, table_n;

static size_t key_hash(uint64_t where, const cg_conv *d) {
    const int64_t *x[CG_CONV_NDIMS] = CG_CONV_DIMS((cg_conv *)d);
    uint64_t h = base_fnv1a(BASE_FNV1A_INIT, &where, sizeof where);
    for (int j = 0; j < CG_CONV_NDIMS; j++) h = base_fnv1a(h, x[j], sizeof *x[j]);
    int f[8] = {d->dir, d->type_x, d->type_w, d->type_y, d->tf32, d->tune, d->nalt, d->dense};
    return (size_t)base_fnv1a(h, f, sizeof f);
}

static choice **slot(uint64_t where, const cg_conv *d) {
    size_t i = key_hash(where, d) & (table_cap - 1);
    while (table[i] && (table[i]->where != where || !cg_conv_equal(&table[i]->d, d)))
        i = (i + 1) & (table_cap - 1);
    return &table[i];
}

static choice *find(uint64_t where, const cg_conv *d) { return table_cap ? *slot(where, d) : NULL; }

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
    if (2 * (table_n + 1) > table_cap) { /* grow: every choice again */
        free(table);
        table_cap = table_cap ? 2 * table_cap : 64;
        table = calloc(table_cap, sizeof *table);
        RT_CHECK_ALLOC(table);
        for (choice *k = choices->next; k; k = k->next) *slot(k->where, &k->d) = k;
    }
    *slot(where, d) = c;
    table_n++;
    return c;
}

/* The bounds of a record line. A time is milliseconds, finite, at least 0
 * (0 and 0: the library declined the shape) and at most TUNE_MAX_MS (a
 * measured one above it is kept as TUNE_MAX_MS); with it every field's
 * widest spelling fits a line of TUNE_LINE_MAX characters (401 at most:
 * 15 int64s, 4 ints, a way word and two times of "%.4f" below 1e6), and a
 * longer line is malformed. */
#define TUNE_MAX_MS     1e6
#define TUNE_LINE_MAX   512
#define DESC_FIELDS     19
/* A record's bytes: 65536 lines of the longest, far more than every model's
 * convolutions on one machine; a larger one is not read (measured again,
 * then rewritten with what this process knows). */
#define TUNE_RECORD_MAX ((size_t)TUNE_LINE_MAX << 16)

/* The next field of *s (fields are separated by one space) into tok:
 * 0, or -1 when there is none, it is empty or longer than tok. */
static int next_field(const char **s, char *tok, size_t cap) {
    const char *p = *s;
    size_t n = strcspn(p, " ");
    if (!n || n >= cap) return -1;
    memcpy(tok, p, n);
    tok[n] = 0;
    *s = p[n] ? p + n + 1 : p + n;
    return p[n] && !p[n + 1] ? -1 : 0; /* a trailing space is not a field */
}

/* An integer field in lo..hi, written as save writes it: an optional '-'
 * and digits, nothing else. */
static int field_int(const char **s, int64_t lo, int64_t hi, int64_t *out) {
    char tok[32];
    if (next_field(s, tok, sizeof tok)) return -1;
    const char *digits = tok[0] == '-' ? tok + 1 : tok;
    if (!*digits || digits[strspn(digits, "0123456789")] || base_parse_i64(tok, out)) return -1;
    return *out < lo || *out > hi ? -1 : 0;
}

/* A time field: digits with at most one '.', in 0..TUNE_MAX_MS. */
static int field_ms(const char **s, double *out) {
    char tok[32];
    if (next_field(s, tok, sizeof tok)) return -1;
    size_t n = strspn(tok, "0123456789");
    if (!n || (tok[n] && (tok[n] != '.' || tok[n + 1 + strspn(tok + n + 1, "0123456789")])))
        return -1;
    return base_parse_f64(tok, out) || !isfinite(*out) || *out < 0 || *out > TUNE_MAX_MS ? -1 : 0;
}

/* A line's descriptor into d, moving *s past it: 0, or -1. */
static int parse_desc(const char **s, cg_conv *d) {
    int64_t v[DESC_FIELDS];
    for (int i = 0; i < DESC_FIELDS; i++) { /* dir, 14 sizes, 3 types, dense: all ints */
        if (field_int(s, i >= 1 && i <= 14 ? 0 : INT32_MIN, INT32_MAX, &v[i])) return -1;
    }
    /* cg_conv_sizes multiplies them unchecked: its three products must fit first */
    int64_t t;
    if (!v[14] || __builtin_mul_overflow(v[1] * v[2], v[3] * v[4], &t) ||
        __builtin_mul_overflow(v[1] * v[5], v[12] * v[13], &t) ||
        __builtin_mul_overflow(v[5] * (v[2] / v[14]), v[6] * v[7], &t))
        return -1;
    *d = (cg_conv){.dir = (int)v[0],
                   .N = v[1],
                   .C = v[2],
                   .H = v[3],
                   .W = v[4],
                   .K = v[5],
                   .kh = v[6],
                   .kw = v[7],
                   .sh = v[8],
                   .sw = v[9],
                   .ph = v[10],
                   .pw = v[11],
                   .Ho = v[12],
                   .Wo = v[13],
                   .G = v[14],
                   .type_x = (int)v[15],
                   .type_w = (int)v[16],
                   .type_y = (int)v[17],
                   .tune = 1,
                   .dense = (int)v[18]};
    int64_t size[3];
    char why[160];
    cg_conv_sizes(d, size);
    return cg_conv_validate(d, size, why, sizeof why) ? -1 : 0;
}

/* One line into where's entries: 0, or -1 when anything is off (the whole
 * line must parse, every field within its bounds, nothing after it). */
static int parse_line(uint64_t where, const char *line) {
    cg_conv d;
    if (strlen(line) >= TUNE_LINE_MAX) return -1;
    int kind = !strncmp(line, "conv ", 5) ? 1 : !strncmp(line, "algo ", 5) ? 2 : 0;
    const char *rest = line + 5;
    if (!kind || parse_desc(&rest, &d)) return -1;
    if (kind == 1) {
        char wayword[16];
        double lib_ms, alt_ms;
        if (next_field(&rest, wayword, sizeof wayword) || field_ms(&rest, &lib_ms) ||
            field_ms(&rest, &alt_ms) || *rest)
            return -1;
        int way = !strcmp(wayword, "library")  ? RT_CONV_LIBRARY
                  : !strcmp(wayword, "im2col") ? RT_CONV_ALTERNATIVE
                                               : RT_CONV_UNKNOWN;
        if (way == RT_CONV_UNKNOWN) return -1;
        choice *c = entry(where, &d);
        if (c->way == RT_CONV_UNKNOWN) c->way = way, c->lib_ms = lib_ms, c->alt_ms = alt_ms;
    } else {
        int64_t algo;
        if (field_int(&rest, 0, 255, &algo) || *rest) return -1;
        choice *c = entry(where, &d);
        if (c->algo < 0) c->algo = (int)algo;
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
    char why[512];
    char *text = (char *)rt_cache_read_max(&c, name, TUNE_RECORD_MAX, &len, why, sizeof why);
    struct stat st;
    if (!text && !fstatat(c.fd, name, &st, AT_SYMLINK_NOFOLLOW) && S_ISREG(st.st_mode) &&
        st.st_size > (off_t)TUNE_RECORD_MAX)
        rt_log(RT_LOG_NOTE, "%s; measuring again", why);
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

/* A time as the record keeps it: within 0..TUNE_MAX_MS (NaN as 0). */
static double kept_ms(double ms) { return ms > TUNE_MAX_MS ? TUNE_MAX_MS : ms > 0 ? ms : 0; }

/* Appends one formatted line to text (len of cap used): 0, or -1 when it
 * would not fit a record line (TUNE_LINE_MAX) or the text, which is then
 * left as it was. */
static int append(char *text, size_t cap, size_t *len, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static int append(char *text, size_t cap, size_t *len, const char *fmt, ...) {
    char line[TUNE_LINE_MAX];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    if (n < 0 || (size_t)n >= sizeof line || (size_t)n >= cap - *len) return -1;
    memcpy(text + *len, line, (size_t)n + 1);
    *len += (size_t)n;
    return 0;
}

/* Rewrites where's record with every choice this process knows of it
 * (under mu). Each line is at most TUNE_LINE_MAX characters, written with
 * its length checked against what is left of the text; one that would not
 * fit is left out (measured again by the next process). */
static void save(uint64_t where) {
    rt_cache c;
    char err[512], name[128];
    if (rt_cache_open(&c, err, sizeof err)) return;
    record_name(where, name, sizeof name);
    size_t cap = 1, len = 0;
    for (const choice *k = choices; k; k = k->next) cap += 2 * TUNE_LINE_MAX;
    char *text = malloc(cap);
    RT_CHECK_ALLOC(text);
    text[0] = 0;
    for (const choice *k = choices; k; k = k->next) {
        const cg_conv *d = &k->d;
        if (k->where != where || d->tf32) continue; /* tf32: no field for it, measured anew */
        char desc[TUNE_LINE_MAX];
        int n = snprintf(desc, sizeof desc,
                         "%d %" PRId64 " %" PRId64 " %" PRId64 " %" PRId64 " %" PRId64 " %" PRId64
                         " %" PRId64 " %" PRId64 " %" PRId64 " %" PRId64 " %" PRId64 " %" PRId64
                         " %" PRId64 " %" PRId64 " %d %d %d %d",
                         d->dir, d->N, d->C, d->H, d->W, d->K, d->kh, d->kw, d->sh, d->sw, d->ph,
                         d->pw, d->Ho, d->Wo, d->G, d->type_x, d->type_w, d->type_y, d->dense);
        if (n < 0 || (size_t)n >= sizeof desc) continue;
        if (k->way != RT_CONV_UNKNOWN)
            (void)append(text, cap, &len, "conv %s %s %.4f %.4f\n", desc, way_name(k->way),
                         kept_ms(k->lib_ms), kept_ms(k->alt_ms));
        if (k->algo >= 0) (void)append(text, cap, &len, "algo %s %d\n", desc, k->algo);
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
        static int told; /* the cost is paid once per machine: say so, once */
        if (!told++ && !retune)
            rt_log(RT_LOG_NOTE,
                   "timing each convolution's ways once for this machine (dpc --conv auto); "
                   "later runs reuse the choices from the kernel cache");
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
