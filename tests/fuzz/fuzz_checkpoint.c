/* libFuzzer target: the checkpoint loader (runtime/files/files.h) and
 * the checks a resume makes against its run (flags, the metrics file).
 *
 * The first byte picks one of three ways in:
 *   0  raw: the rest is the checkpoint file;
 *   1  splice: the rest (a 2-byte offset, then bytes) is written over a
 *      valid checkpoint of the target's plan, and the checksum fixed up
 *      when the result still parses (anyone can recompute an FNV-1a);
 *   2  semantic: the rest is a script of edits to the valid checkpoint's
 *      metadata pairs and tensor table — set a value (to the input's bytes
 *      or to an interesting one: INT64_MAX, nan, inf, "", a long string,
 *      ...), duplicate a key, delete one, add one, drop or rename a
 *      tensor — after which the file is written out again, the checksum
 *      fixed up, so the checks behind the checksum are what is fuzzed.
 * Whatever rt_ckpt_load accepts must hold what it promises (a step in the
 * run's range, finite sums, a consistent pending line, a prefix hash, ...);
 * a broken promise aborts. FUZZ_CHECKPOINT_SEED=PATH writes the valid
 * checkpoint, as a raw-mode input, to PATH (tests/fuzz/corpus/checkpoint);
 * FUZZ_CHECKPOINT_VERBOSE=1 prints each input's refusal (or "accepted").
 */
#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/file.h"
#include "base/sha256.h"
#include "runtime/runtime.h"
#include "runtime/files/files.h"
#include "tests/fixture.h"

#define REPLICAS 2
#define MINE     "--lr=0.1;--on-nan=stop;--accumulate=1"

static dpc_plan *plan;
static rt_store *store;
static float *stats;
static unsigned char *valid;
static size_t valid_len;
static rt_st_file *vf; /* valid, parsed */

/* A metrics file of two lines; the valid checkpoint records its first. */
static const char METRICS[] = "{\"epoch\": 0, \"lr\": 0.1}\n{\"epoch\": 1, \"lr\": 0.1}\n";
enum { METRICS_PREFIX = 24 };

static void die(const char *what, const char *err) {
    fprintf(stderr, "fuzz_checkpoint: %s: %s\n", what, err);
    abort();
}

static void init(void) {
    char err[2048];
    plan = fx_plan(FX_NET("fz", FX_CONV_BN FX_GAP_LOGITS, 4, 4), 4, NULL, 1, err, sizeof err);
    if (!plan) die("plan", err);
    plan->checksum = 0x0123456789abcdefull;
    rt_backend *be = rt_backend_cpu();
    store = rt_store_new(be, plan->train);
    for (int i = 0; i < rt_store_count(store); i++) {
        int64_t k = ir_numel(rt_store_type(store, i));
        float *v = malloc(sizeof *v * (size_t)k + 1);
        for (int64_t j = 0; j < k; j++) v[j] = (float)i + 0.001f * (float)j;
        rt_store_write(store, i, v);
        free(v);
    }
    int64_t S = rt_ckpt_stats_count(plan, store);
    stats = calloc((size_t)(REPLICAS * S) + 1, sizeof *stats);
    rt_ckpt_state s;
    memset(&s, 0, sizeof s);
    s.step = 41, s.steps_per_epoch = 13, s.global_batch = 8, s.seed = 7;
    snprintf(s.data, sizeof s.data, "synthetic");
    s.shuffle = 1, s.augment = 1, s.epoch_loss_sum = 1.25, s.epoch_skipped = 1, s.prev_lr = 0.1;
    s.epoch_seconds = 0.5, s.total_seconds = 2;
    s.metrics_bytes = METRICS_PREFIX;
    unsigned char d[32];
    base_sha256(METRICS, METRICS_PREFIX, d);
    base_sha256_hex(d, s.metrics_sha256);
    s.pending = (rt_ckpt_metrics){2, 0.1, 0.5, 8, 13, 0.25, 0.01, -1};
    snprintf(s.flags, sizeof s.flags, "%s", MINE);
    char dir[] = "/tmp/fuzz_checkpoint_XXXXXX";
    if (!mkdtemp(dir)) die("mkdtemp", dir);
    if (rt_ckpt_write(dir, plan, store, REPLICAS, stats, &s, err, sizeof err)) die("write", err);
    char path[256];
    snprintf(path, sizeof path, "%s/%s", dir, RT_CKPT_FILE);
    valid = base_file_read(path, 1 << 24, &valid_len, err, sizeof err);
    if (!valid) die("read", err);
    unlink(path);
    rmdir(dir);
    vf = rt_st_parse("valid", valid, valid_len, err, sizeof err);
    if (!vf) die("parse", err);
    rt_ckpt_state got;
    if (rt_ckpt_load("valid", valid, valid_len, plan, store, REPLICAS, stats, &got, err,
                     sizeof err))
        die("the valid checkpoint is refused", err);
    const char *seed = getenv("FUZZ_CHECKPOINT_SEED");
    if (seed) {
        FILE *f = fopen(seed, "wb");
        if (!f || fputc(0, f) == EOF || fwrite(valid, 1, valid_len, f) != valid_len || fclose(f))
            die("cannot write", seed);
    }
}

/* ---- writing a safetensors file from pieces ---- */

typedef struct {
    char *buf;
    size_t len, cap;
} sbuf;

static void put(sbuf *b, const void *p, size_t n) {
    if (b->len + n + 1 > b->cap) {
        b->cap = (b->len + n + 1) * 2;
        b->buf = realloc(b->buf, b->cap);
        if (!b->buf) abort();
    }
    memcpy(b->buf + b->len, p, n);
    b->len += n;
}
static void puts_(sbuf *b, const char *s) { put(b, s, strlen(s)); }

static void put_json_string(sbuf *b, const char *s, size_t n) {
    put(b, "\"", 1);
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        char esc[8];
        if (c == '"' || c == '\\')
            snprintf(esc, sizeof esc, "\\%c", c);
        else if (c < 0x20)
            snprintf(esc, sizeof esc, "\\u%04x", c);
        else
            esc[0] = (char)c, esc[1] = 0;
        puts_(b, esc);
    }
    put(b, "\"", 1);
}

enum { MAXMETA = 64, MAXT = 64, MAXV = 4096 };

typedef struct {
    int nmeta;
    char key[MAXMETA][MAXV], val[MAXMETA][MAXV];
    int nt;
    char name[MAXT][256];
    int src[MAXT]; /* the valid file's tensor whose shape and bytes it has */
} doc;

static void load_doc(doc *d) {
    d->nmeta = vf->nmeta < MAXMETA ? vf->nmeta : MAXMETA;
    for (int i = 0; i < d->nmeta; i++) {
        snprintf(d->key[i], MAXV, "%s", vf->meta_keys[i]);
        snprintf(d->val[i], MAXV, "%s", vf->meta_values[i]);
    }
    d->nt = vf->n < MAXT ? vf->n : MAXT;
    for (int i = 0; i < d->nt; i++) {
        snprintf(d->name[i], sizeof d->name[i], "%s", vf->tensors[i].name);
        d->src[i] = i;
    }
}

/* The file of d; "checksum" values written as 16 zeros, to be fixed up. */
static void write_doc(const doc *d, sbuf *out) {
    sbuf h = {0};
    puts_(&h, "{\"__metadata__\":{");
    for (int i = 0; i < d->nmeta; i++) {
        if (i) puts_(&h, ",");
        put_json_string(&h, d->key[i], strlen(d->key[i]));
        puts_(&h, ":");
        if (!strcmp(d->key[i], "checksum"))
            puts_(&h, "\"0000000000000000\"");
        else
            put_json_string(&h, d->val[i], strlen(d->val[i]));
    }
    puts_(&h, "}");
    uint64_t at = 0;
    for (int i = 0; i < d->nt; i++) {
        const rt_st_tensor *t = &vf->tensors[d->src[i]];
        char shape[256] = "", tail[128];
        for (int k = 0; k < t->ndim; k++)
            snprintf(shape + strlen(shape), sizeof shape - strlen(shape), "%s%lld", k ? "," : "",
                     (long long)t->shape[k]);
        puts_(&h, ",");
        put_json_string(&h, d->name[i], strlen(d->name[i]));
        snprintf(tail, sizeof tail,
                 ":{\"dtype\":\"F32\",\"shape\":[%s],\"data_offsets\":[%llu,%llu]}", shape,
                 (unsigned long long)at, (unsigned long long)(at + t->end - t->begin));
        puts_(&h, tail);
        at += t->end - t->begin;
    }
    puts_(&h, "}");
    while (h.len % 8) put(&h, " ", 1);
    unsigned char len8[8];
    for (int k = 0; k < 8; k++) len8[k] = (unsigned char)((uint64_t)h.len >> (8 * k));
    put(out, len8, 8);
    put(out, h.buf, h.len);
    for (int i = 0; i < d->nt; i++) {
        const rt_st_tensor *t = &vf->tensors[d->src[i]];
        put(out, valid + vf->data_start + t->begin, (size_t)(t->end - t->begin));
    }
    free(h.buf);
}

/* The first "checksum" value made right, when the file parses. */
static void fix_checksum(unsigned char *buf, size_t len) {
    char err[512];
    rt_st_file *f = rt_st_parse("fix", buf, len, err, sizeof err);
    if (!f) return;
    char hex[17];
    snprintf(hex, sizeof hex, "%016llx", (unsigned long long)rt_ckpt_checksum(f));
    rt_st_free(f);
    static const char key[] = "\"checksum\":\"";
    unsigned char *p = memmem(buf, len, key, sizeof key - 1);
    if (p && (size_t)(p - buf) + sizeof key - 1 + 16 <= len) memcpy(p + sizeof key - 1, hex, 16);
}

/* ---- semantic edits ---- */

static const char *const INTERESTING[] = {
    "0",
    "-1",
    "1",
    "2",
    "13",
    "41",
    "9223372036854775807",
    "-9223372036854775808",
    "18446744073709551615",
    "18446744073709551616",
    "2147483648",
    "nan",
    "-nan",
    "inf",
    "-inf",
    "0x1p+1024",
    "1e308",
    "1e-320",
    "-0",
    "0x1.8p+1",
    "",
    " 1",
    "1 ",
    "+1",
    "0x10",
    "1e3",
    "--lr=0.1",
    "--lr=0.1;--on-nan=stop",
    MINE ";--lr=0.1",
    MINE ";",
    ";" MINE,
    "--lr=0.2;--on-nan=stop;--accumulate=1",
    "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855",
    "\x1b[2J",
    "synthetic",
    "dpc",
    "3",
    "2\n",
    "0.5"};
enum { NINTERESTING = sizeof INTERESTING / sizeof *INTERESTING };

/* Applies the edit script in [p, end) to d. */
static void edit(doc *d, const uint8_t *p, const uint8_t *end) {
    while (end - p >= 3) {
        int op = p[0] % 7, k = p[1];
        size_t n = p[2];
        p += 3;
        if ((size_t)(end - p) < n) n = (size_t)(end - p);
        char v[MAXV];
        memcpy(v, p, n);
        v[n] = 0; /* a NUL inside ends the value, as a C string would */
        p += n;
        int m = d->nmeta ? k % d->nmeta : 0;
        switch (op) {
        case 0: /* set to the input's bytes */
            if (d->nmeta) snprintf(d->val[m], MAXV, "%s", v);
            break;
        case 1: /* set to an interesting value, or a long one */
            if (!d->nmeta) break;
            if (n && v[0] == 'L')
                memset(d->val[m], '9', 3000), d->val[m][3000] = 0;
            else
                snprintf(d->val[m], MAXV, "%s",
                         INTERESTING[(n ? (uint8_t)v[0] : 0) % NINTERESTING]);
            break;
        case 2: /* duplicate a key, with a value */
            if (d->nmeta && d->nmeta < MAXMETA) {
                memmove(d->key[m + 1], d->key[m], (size_t)(d->nmeta - m) * MAXV);
                memmove(d->val[m + 1], d->val[m], (size_t)(d->nmeta - m) * MAXV);
                snprintf(d->val[m + 1], MAXV, "%s", n ? v : d->val[m]);
                d->nmeta++;
            }
            break;
        case 3: /* delete a key */
            if (d->nmeta) {
                memmove(d->key[m], d->key[m + 1], (size_t)(d->nmeta - m - 1) * MAXV);
                memmove(d->val[m], d->val[m + 1], (size_t)(d->nmeta - m - 1) * MAXV);
                d->nmeta--;
            }
            break;
        case 4: /* add a key (the input's bytes) */
            if (d->nmeta < MAXMETA) {
                snprintf(d->key[d->nmeta], MAXV, "%s", v);
                snprintf(d->val[d->nmeta], MAXV, "%s", INTERESTING[k % NINTERESTING]);
                d->nmeta++;
            }
            break;
        case 5: /* drop a tensor */
            if (d->nt) {
                int t = k % d->nt;
                memmove(d->name[t], d->name[t + 1], (size_t)(d->nt - t - 1) * sizeof d->name[0]);
                memmove(&d->src[t], &d->src[t + 1], (size_t)(d->nt - t - 1) * sizeof d->src[0]);
                d->nt--;
            }
            break;
        case 6: /* rename a tensor */
            if (d->nt) snprintf(d->name[k % d->nt], sizeof d->name[0], "%s", v);
            break;
        }
    }
}

/* ---- what an accepted checkpoint promises ---- */

static void promise(int ok, const char *what) {
    if (!ok) die("an accepted checkpoint breaks a promise", what);
}

static void check_accepted(const rt_ckpt_state *s) {
    const rt_ckpt_metrics *m = &s->pending;
    promise(s->steps_per_epoch >= 1 && s->step >= 0 && s->step / s->steps_per_epoch <= INT32_MAX,
            "step");
    promise(s->global_batch >= 1 && (s->shuffle == 0 || s->shuffle == 1) &&
                (s->augment == 0 || s->augment == 1) && *s->data,
            "shape");
    promise(isfinite(s->epoch_loss_sum) && isfinite(s->prev_lr) && s->prev_lr >= 0 &&
                isfinite(s->epoch_seconds) && s->epoch_seconds >= 0 && isfinite(s->total_seconds) &&
                s->total_seconds >= 0,
            "sums");
    int64_t in_epoch = s->step % s->steps_per_epoch;
    promise(s->epoch_skipped >= 0 && s->epoch_skipped <= in_epoch, "epoch_skipped");
    promise(s->metrics_bytes >= -1 && s->metrics_bytes <= RT_CKPT_METRICS_MAX &&
                (s->metrics_bytes < 0 ? !*s->metrics_sha256 : strlen(s->metrics_sha256) == 64),
            "metrics");
    promise(m->epoch == (s->metrics_bytes >= 0 ? s->step / s->steps_per_epoch - 1 : -1),
            "pending epoch");
    if (m->epoch >= 0)
        promise(m->batch == s->global_batch && m->steps >= 1 && m->steps <= s->steps_per_epoch &&
                    isfinite(m->lr) && m->lr >= 0 && !isinf(m->train_loss) &&
                    isfinite(m->seconds) && m->seconds >= 0 && isfinite(m->input_wait_s) &&
                    m->input_wait_s >= 0 &&
                    (m->test_accuracy == -1 || (m->test_accuracy >= 0 && m->test_accuracy <= 1)),
                "pending line");
    promise(*s->flags != 0, "flags");
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (!plan) init();
    if (!size) return 0;
    char err[2048];
    unsigned char *buf = NULL;
    size_t len = 0;
    int mode = data[0] % 3;
    if (mode == 0) {
        buf = malloc(size);
        memcpy(buf, data + 1, size - 1);
        len = size - 1;
    } else if (mode == 1) {
        size_t at = size >= 3 ? ((size_t)data[1] | (size_t)data[2] << 8) : 0;
        const uint8_t *p = data + (size >= 3 ? 3 : size);
        size_t n = (size_t)(data + size - p);
        len = valid_len > at + n ? valid_len : at + n;
        if (at > valid_len) at = valid_len, len = valid_len + n;
        buf = calloc(len + 1, 1);
        memcpy(buf, valid, valid_len);
        memcpy(buf + at, p, n);
        fix_checksum(buf, len);
    } else {
        doc *d = malloc(sizeof *d);
        load_doc(d);
        edit(d, data + 1, data + size);
        sbuf out = {0};
        write_doc(d, &out);
        free(d);
        buf = (unsigned char *)out.buf, len = out.len;
        fix_checksum(buf, len);
    }
    rt_ckpt_state s;
    int rc = rt_ckpt_load("fuzz.safetensors", buf, len, plan, store, REPLICAS, stats, &s, err,
                          sizeof err);
    if (getenv("FUZZ_CHECKPOINT_VERBOSE")) fprintf(stderr, "%s\n", rc ? err : "accepted");
    if (rc == 0) {
        check_accepted(&s);
        /* What a resume checks next: the flags and the metrics file. */
        rt_ckpt_check_flags("fuzz", s.flags, MINE, err, sizeof err);
        rt_ckpt_check_metrics("fuzz", &s, "m", (const unsigned char *)METRICS, sizeof METRICS - 1,
                              err, sizeof err);
        rt_ckpt_check_metrics("fuzz", &s, "m", NULL, 0, err, sizeof err);
    }
    free(buf);
    return 0;
}
