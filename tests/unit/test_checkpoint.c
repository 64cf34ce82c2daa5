/* Tests for runtime/checkpoint: a round trip restores every replica's
 * tensors (shared ones from replica 0, BatchNorm statistics per replica)
 * and the counters exactly; every flipped header byte, sampled data bytes
 * and every truncation are refused and leave the stores untouched; another
 * plan, model or replica count is refused. */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include "frontend/frontend.h"
#include "passes/passes.h"
#include "base/sha256.h"
#include "runtime/files/files.h"
#include "runtime/runtime.h"
#include "tests/fixture.h"
#include "tests/harness.h"

static char err[2048];
static rt_backend *be;
static char dir[256];

static const char *BN = FX_NET("bn_tiny", FX_CONV_BN FX_GAP_LOGITS, 4, 5);

static dpc_plan *make_plan(void) {
    dpc_plan *p = fx_plan(BN, 4, NULL, 1, err, sizeof err);
    if (p) p->checksum = 0x0123456789abcdefull;
    return p;
}

/* n stores, each tensor filled with values that name store, tensor and element. */
static void make_stores(const dpc_plan *p, int n, rt_store **st, float salt) {
    for (int r = 0; r < n; r++) {
        st[r] = rt_store_new(be, p->train);
        for (int i = 0; i < rt_store_count(st[r]); i++) {
            int64_t k = ir_numel(rt_store_type(st[r], i));
            float *v = malloc(sizeof *v * (size_t)k);
            for (int64_t j = 0; j < k; j++)
                v[j] = salt + 1000.0f * (float)r + 10.0f * (float)i + 0.001f * (float)j;
            rt_store_write(st[r], i, v);
            free(v);
        }
    }
}

static void free_stores(rt_store **st, int n) {
    for (int r = 0; r < n; r++) rt_store_free(st[r]);
}

/* Tensor i of store a equals tensor i of store b. */
static int same_tensor(rt_store *a, rt_store *b, int i) {
    int64_t k = ir_numel(rt_store_type(a, i));
    float *x = malloc(sizeof *x * (size_t)k), *y = malloc(sizeof *y * (size_t)k);
    rt_store_read(a, i, x);
    rt_store_read(b, i, y);
    int same = !memcmp(x, y, sizeof *x * (size_t)k);
    free(x);
    free(y);
    return same;
}

static int is_bn_stat(const char *name) { return strstr(name, "running") != NULL; }

static rt_ckpt_state sample_state(void) {
    rt_ckpt_state s;
    memset(&s, 0, sizeof s);
    s.step = 41, s.steps_per_epoch = 13, s.global_batch = 12, s.seed = 18446744073709551615ull;
    snprintf(s.data, sizeof s.data, "synthetic");
    s.shuffle = 1, s.augment = 0;
    s.epoch_loss_sum = 0.1 + 0.2; /* not a short decimal: must survive exactly */
    s.epoch_skipped = 2, s.prev_lr = 1.0 / 3.0;
    s.epoch_seconds = 1.5, s.total_seconds = 1e-300;
    s.metrics_bytes = 1234;
    snprintf(s.metrics_sha256, sizeof s.metrics_sha256, "%064d", 7);
    /* step 41 of 13 per epoch: epoch 3, the pending line epoch 2's */
    s.pending = (rt_ckpt_metrics){.epoch = 2,
                                  .lr = 0.1,
                                  .train_loss = 0.1 + 0.7,
                                  .batch = 12,
                                  .steps = 13,
                                  .seconds = 1.0 / 7.0,
                                  .input_wait_s = 0.25,
                                  .test_accuracy = -1};
    snprintf(s.flags, sizeof s.flags, "--lr=0.1;--on-nan=stop");
    return s;
}

/* The checkpoint of n replicas in this process, as runtime/train/train.c
 * gathers and scatters it (without MPI): every replica's statistics in one
 * array; on reading, replica 0's other tensors become every replica's. */
static int write_stores(const char *d, const dpc_plan *p, rt_store **st, int n,
                        const rt_ckpt_state *s) {
    int64_t S = rt_ckpt_stats_count(p, st[0]);
    float *stats = malloc(sizeof(float) * (size_t)(n * S) + 1);
    for (int r = 0; r < n; r++) rt_ckpt_stats_read(p, st[r], stats + r * S);
    int rc = rt_ckpt_write(d, p, st[0], n, stats, s, err, sizeof err);
    free(stats);
    return rc;
}

static int read_stores(const char *d, const dpc_plan *p, rt_store **st, int n, rt_ckpt_state *s) {
    int64_t S = rt_ckpt_stats_count(p, st[0]);
    float *stats = malloc(sizeof(float) * (size_t)(n * S) + 1);
    int rc = rt_ckpt_read(d, p, st[0], n, stats, s, err, sizeof err);
    for (int r = 1; r < n && !rc; r++) {
        for (int i = 0; i < rt_store_count(st[0]); i++) {
            float *buf = malloc(sizeof(float) * (size_t)ir_numel(rt_store_type(st[0], i)) + 1);
            rt_store_read(st[0], i, buf);
            rt_store_write(st[r], i, buf);
            free(buf);
        }
        rt_ckpt_stats_write(p, st[r], stats + r * S);
    }
    free(stats);
    return rc;
}

static char *ckpt_file(void) {
    static char path[300];
    snprintf(path, sizeof path, "%s/%s", dir, RT_CKPT_FILE);
    return path;
}

TEST(round_trip_restores_replicas_and_counters) {
    dpc_plan *p = make_plan();
    CHECK(p != NULL);
    if (!p) return;
    rt_store *src[3], *dst[3];
    make_stores(p, 3, src, 0.5f);
    make_stores(p, 3, dst, -7.0f);
    rt_ckpt_state s = sample_state(), got;
    CHECK(!rt_ckpt_exists(dir));
    CHECK_MSG(write_stores(dir, p, src, 3, &s) == 0, "%s", err);
    CHECK(rt_ckpt_exists(dir));
    CHECK_MSG(read_stores(dir, p, dst, 3, &got) == 0, "%s", err);
    CHECK(got.step == 41 && got.steps_per_epoch == 13 && got.global_batch == 12);
    CHECK(got.seed == 18446744073709551615ull && !strcmp(got.data, "synthetic"));
    CHECK(got.shuffle == 1 && got.augment == 0 && got.epoch_skipped == 2 &&
          got.metrics_bytes == 1234);
    CHECK(got.epoch_loss_sum == 0.1 + 0.2 && got.prev_lr == 1.0 / 3.0);
    CHECK(got.epoch_seconds == 1.5 && got.total_seconds == 1e-300);
    CHECK_STR(got.metrics_sha256, s.metrics_sha256);
    CHECK(!memcmp(&got.pending, &s.pending, sizeof s.pending));
    CHECK_STR(got.flags, s.flags);
    int stats = 0;
    for (int r = 0; r < 3; r++)
        for (int i = 0; i < rt_store_count(dst[r]); i++) {
            const char *name = rt_store_name(dst[r], i);
            /* BatchNorm statistics per replica; the rest is replica 0's. */
            int own = r == 0 || is_bn_stat(name);
            stats += r > 0 && own;
            CHECK_MSG(same_tensor(dst[r], src[own ? r : 0], i), "replica %d tensor %s", r, name);
        }
    CHECK(stats == 2 * 2 * 1); /* replicas 1, 2 x running mean, var x one BatchNorm */
    free_stores(src, 3);
    free_stores(dst, 3);
    unlink(ckpt_file());
    fx_plan_free(p);
}

/* Refused, and the stores keep their values. */
static int refused_untouched(const dpc_plan *p, int n) {
    rt_store *dst[3], *ref[3];
    make_stores(p, n, dst, -7.0f);
    make_stores(p, n, ref, -7.0f);
    rt_ckpt_state got;
    err[0] = 0;
    int rc = read_stores(dir, p, dst, n, &got);
    int untouched = 1;
    for (int r = 0; r < n; r++)
        for (int i = 0; i < rt_store_count(dst[r]); i++)
            untouched &= same_tensor(dst[r], ref[r], i);
    free_stores(dst, n);
    free_stores(ref, n);
    return rc != 0 && untouched && !strncmp(err, "checkpoint refused: ", 20);
}

static unsigned char *read_all(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    *len = (size_t)ftell(f);
    fseek(f, 0, SEEK_SET);
    unsigned char *b = malloc(*len);
    if (fread(b, 1, *len, f) != *len) *len = 0;
    fclose(f);
    return b;
}

static void write_all(const char *path, const unsigned char *b, size_t len) {
    FILE *f = fopen(path, "wb");
    fwrite(b, 1, len, f);
    fclose(f);
}

/* The plan, n stores of it (salt 0.5), and their checkpoint in dir. */
static dpc_plan *plan_checkpointed(rt_store **src, int n) {
    dpc_plan *p = make_plan();
    CHECK(p != NULL);
    if (!p) return NULL;
    make_stores(p, n, src, 0.5f);
    rt_ckpt_state s = sample_state();
    CHECK_MSG(write_stores(dir, p, src, n, &s) == 0, "%s", err);
    return p;
}

TEST(corrupt_and_truncated_checkpoints_are_refused) {
    rt_store *src[2];
    dpc_plan *p = plan_checkpointed(src, 2);
    if (!p) return;
    size_t len = 0;
    unsigned char *good = read_all(ckpt_file(), &len);
    CHECK(good && len > 100);
    if (!good) return;
    size_t header = 8 + (size_t)good[0] + ((size_t)good[1] << 8);
    int missed = 0, tried = 0;
    /* Every header byte, every 7th data byte, inverted. */
    for (size_t at = 0; at < len; at += at < header ? 1 : 7) {
        good[at] = (unsigned char)~good[at];
        write_all(ckpt_file(), good, len);
        good[at] = (unsigned char)~good[at];
        tried++;
        if (!refused_untouched(p, 2)) {
            if (missed++ < 3) fprintf(stderr, "flipped byte %zu was accepted\n", at);
        }
    }
    CHECK_MSG(missed == 0, "%d of %d flipped bytes accepted", missed, tried);
    missed = 0;
    for (size_t cut = 0; cut < len; cut += cut < header + 64 ? 1 : 61) {
        write_all(ckpt_file(), good, cut);
        missed += !refused_untouched(p, 2);
    }
    CHECK_MSG(missed == 0, "%d truncations accepted", missed);
    /* The intact file still loads. */
    write_all(ckpt_file(), good, len);
    rt_store *dst[2];
    make_stores(p, 2, dst, 1.0f);
    rt_ckpt_state got;
    CHECK_MSG(read_stores(dir, p, dst, 2, &got) == 0, "%s", err);
    free_stores(dst, 2);
    free(good);
    free_stores(src, 2);
    unlink(ckpt_file());
    fx_plan_free(p);
}

TEST(another_plan_model_or_replica_count_is_refused) {
    rt_store *src[2];
    dpc_plan *p = plan_checkpointed(src, 2);
    if (!p) return;
    p->checksum ^= 1;
    CHECK(refused_untouched(p, 2));
    CHECK_MSG(
        strstr(
            err,
            "belongs to another plan (model bn_tiny, plan checksum 0123456789abcdef); this plan is "
            "model bn_tiny, plan checksum 0123456789abcdee") != NULL,
        "%s", err);
    p->checksum ^= 1;
    snprintf(p->model, sizeof p->model, "other");
    CHECK(refused_untouched(p, 2));
    CHECK_MSG(strstr(err, "belongs to another plan (model bn_tiny") != NULL, "%s", err);
    snprintf(p->model, sizeof p->model, "bn_tiny");
    CHECK(refused_untouched(p, 3));
    CHECK_MSG(strstr(err, "written by a run of 2 replicas (--gpus); this run has 3") != NULL, "%s",
              err);
    free_stores(src, 2);
    unlink(ckpt_file());
    fx_plan_free(p);
}

TEST(an_unwritable_directory_is_an_error) {
    dpc_plan *p = make_plan();
    CHECK(p != NULL);
    if (!p) return;
    rt_store *src[1];
    make_stores(p, 1, src, 0.5f);
    rt_ckpt_state s = sample_state();
    CHECK(write_stores("/nonexistent/dir/ck", p, src, 1, &s) != 0);
    CHECK_MSG(strstr(err, "--checkpoint /nonexistent/dir/ck: cannot create the directory") != NULL,
              "%s", err);
    free_stores(src, 1);
    fx_plan_free(p);
}

/* A checkpoint whose metadata is out of range (written with a valid
 * checksum, as an attacker would) is refused, naming the key and value. */
TEST(metadata_out_of_range_is_refused) {
    dpc_plan *p = make_plan();
    CHECK(p != NULL);
    if (!p) return;
    rt_store *src[1];
    make_stores(p, 1, src, 0.5f);
    /* Case i: what the message says about the edit the switch below makes. */
    static const char *const want[] = {
        "'step' is '9223372036854775807' (not between 0 and",
        "'flags' is '' (empty)",
        "'epoch_loss_sum' is 'nan' (not finite)",
        "'prev_lr' is 'inf' (not finite)",
        "'prev_lr' is '-0x1p-1' (negative)",
        "'epoch_seconds' is '-inf' (not finite)",
        "'pending_lr' is 'nan' (not finite)",
        "'pending_test_accuracy' is '0x1p+1' (not -1 or between 0 and 1)",
        "'pending_epoch' is '1' (at step 41 of 13 per epoch it must be -1 or 2)",
        "'pending_batch' is '11' (not between 12 and 12)",
        "'pending_steps' is '14' (not between 1 and 13)",
        "'metrics_sha256' is 'xyz' (not 64 hex digits)",
        "'metrics_bytes' is '-2' (not between -1 and",
        "'shuffle' is '2' (not between 0 and 1)",
        "'global_batch' is '0' (not between 1 and",
        "'epoch_skipped' is '3' (not between 0 and 2)",
        "'steps_per_epoch' is '0' (not between 1 and",
        "'data' is '' (empty)",
        "'epoch_loss_sum' is '0x1p+0' (not 0 at an epoch's end)",
    };
    int n = (int)(sizeof want / sizeof *want);
    for (int i = 0; i < n; i++) {
        rt_ckpt_state s = sample_state();
        switch (i) {
        case 0: s.step = INT64_MAX; break;
        case 1: s.flags[0] = 0; break;
        case 2: s.epoch_loss_sum = NAN; break;
        case 3: s.prev_lr = INFINITY; break;
        case 4: s.prev_lr = -0.5; break;
        case 5: s.epoch_seconds = -INFINITY; break;
        case 6: s.pending.lr = NAN; break;
        case 7: s.pending.test_accuracy = 2; break;
        case 8: s.pending.epoch = 1; break;
        case 9: s.pending.batch = 11; break;
        case 10: s.pending.steps = 14; break;
        case 11: snprintf(s.metrics_sha256, sizeof s.metrics_sha256, "xyz"); break;
        case 12: s.metrics_bytes = -2; break;
        case 13: s.shuffle = 2; break;
        case 14: s.global_batch = 0; break;
        case 15: s.epoch_skipped = 3; break;
        case 16: s.steps_per_epoch = 0; break;
        case 17: s.data[0] = 0; break;
        case 18:
            s.step = 39, s.pending.epoch = 2, s.epoch_skipped = 0, s.epoch_loss_sum = 1,
            s.epoch_seconds = 0;
            break;
        }
        CHECK_MSG(write_stores(dir, p, src, 1, &s) == 0, "%s", err);
        CHECK_MSG(refused_untouched(p, 1) && strstr(err, ckpt_file()) && strstr(err, want[i]),
                  "case %d: want '%s', got '%s'", i, want[i], err);
    }
    free_stores(src, 1);
    unlink(ckpt_file());
    fx_plan_free(p);
}

TEST(flags_must_be_the_runs_own) {
    const char *mine = "--lr=0.1;--on-nan=stop;--accumulate=1";
    CHECK_MSG(rt_ckpt_check_flags("ck", mine, mine, err, sizeof err) == 0, "%s", err);
    CHECK_MSG(rt_ckpt_check_flags("ck", "--on-nan=stop;--accumulate=1;--lr=0.1", mine, err,
                                  sizeof err) == 0,
              "%s", err);
    struct {
        const char *saved, *want;
    } bad[] = {
        {"--lr=0.2;--on-nan=stop;--accumulate=1",
         "ck was written with --lr 0.2; this run has --lr 0.1 (a resume"},
        {"", "ck: corrupt checkpoint: 'flags' is '' (not --KEY=VALUE;...)"},
        {"--lr=0.1;;--on-nan=stop;--accumulate=1", "'flags' is '--lr=0.1;;--on-nan"},
        {"--lr=0.1;--on-nan=stop;--accumulate=1;", "(not --KEY=VALUE;...)"},
        {"--lr=0.1;--on-nan=stop", "ck: corrupt checkpoint: 'flags' lacks --accumulate"},
        {"--lr=0.1;--on-nan=stop;--accumulate=1;--lr=0.1", "'flags' holds --lr twice"},
        {"--lr=0.1;--on-nan=stop;--accumulate=1;--evil=1",
         "'flags' holds --evil, not a flag this dprun records"},
        {"lr=0.1;--on-nan=stop;--accumulate=1", "(not --KEY=VALUE;...)"},
        {"--lr;--on-nan=stop;--accumulate=1", "(not --KEY=VALUE;...)"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        err[0] = 0;
        CHECK_MSG(rt_ckpt_check_flags("ck", bad[i].saved, mine, err, sizeof err) != 0 &&
                      strstr(err, bad[i].want),
                  "'%s': want '%s', got '%s'", bad[i].saved, bad[i].want, err);
    }
}

/* The metrics file is checked by its content: the recorded prefix, then
 * only metrics lines dprun writes. */
TEST(metrics_file_must_start_with_the_recorded_prefix) {
    const char *line0 = "{\"epoch\": 0, \"lr\": 0.1}\n", *line1 = "{\"epoch\": 1, \"lr\": 0.1}\n";
    char text[256];
    snprintf(text, sizeof text, "%s%s", line0, line1);
    rt_ckpt_state s;
    memset(&s, 0, sizeof s);
    s.metrics_bytes = (int64_t)strlen(line0);
    unsigned char d[32];
    base_sha256(line0, strlen(line0), d);
    base_sha256_hex(d, s.metrics_sha256);
    const unsigned char *t = (const unsigned char *)text;
    CHECK_MSG(rt_ckpt_check_metrics("ck", &s, "m", t, strlen(line0), err, sizeof err) == 0, "%s",
              err);
    CHECK_MSG(rt_ckpt_check_metrics("ck", &s, "m", t, strlen(text), err, sizeof err) == 0, "%s",
              err);
    CHECK(rt_ckpt_check_metrics("ck", &s, "m", t, 5, err, sizeof err) != 0 &&
          strstr(err, "--metrics m: 5 bytes, shorter than the 24 it had at the checkpoint ck"));
    CHECK(rt_ckpt_check_metrics("ck", &s, "m", NULL, 0, err, sizeof err) != 0 &&
          strstr(err, "--metrics m does not exist; the checkpoint ck was written when it held 24"));
    char other[256];
    snprintf(other, sizeof other, "%s", text);
    other[3] = 'X';
    CHECK(rt_ckpt_check_metrics("ck", &s, "m", (const unsigned char *)other, strlen(other), err,
                                sizeof err) != 0 &&
          strstr(err, "--metrics m: its first 24 bytes are not those the checkpoint ck recorded"));
    /* A tail that is not dprun's: never dropped. */
    const char *tails[] = {"echo pwned\n", "{\"epoch\": 1}", "{\"epoch\": 1, \x1b[2J}\n", "\n"};
    for (size_t i = 0; i < sizeof tails / sizeof *tails; i++) {
        snprintf(other, sizeof other, "%s%s", line0, tails[i]);
        err[0] = 0;
        CHECK_MSG(rt_ckpt_check_metrics("ck", &s, "m", (const unsigned char *)other, strlen(other),
                                        err, sizeof err) != 0 &&
                      strstr(err, "--metrics m: line 2 is not a metrics line dprun writes"),
                  "tail %zu: %s", i, err);
    }
    /* An empty prefix matches any file, but the tail rule still holds. */
    s.metrics_bytes = 0;
    base_sha256("", 0, d);
    base_sha256_hex(d, s.metrics_sha256);
    CHECK(rt_ckpt_check_metrics("ck", &s, "m", (const unsigned char *)"x=1\n", 4, err,
                                sizeof err) != 0 &&
          strstr(err, "line 1 is not a metrics line"));
    CHECK(rt_ckpt_check_metrics("ck", &s, "m", NULL, 0, err, sizeof err) == 0);
    s.metrics_bytes = -1;
    CHECK(rt_ckpt_check_metrics("ck", &s, "m", t, 0, err, sizeof err) != 0 &&
          strstr(err, "ck was written without --metrics; this run has --metrics m"));
}

int main(void) {
    be = rt_backend_cpu();
    snprintf(dir, sizeof dir, "/tmp/dpc_test_ckpt_%d", (int)getpid());
    RUN(round_trip_restores_replicas_and_counters);
    RUN(corrupt_and_truncated_checkpoints_are_refused);
    RUN(another_plan_model_or_replica_count_is_refused);
    RUN(an_unwritable_directory_is_an_error);
    RUN(metadata_out_of_range_is_refused);
    RUN(flags_must_be_the_runs_own);
    RUN(metrics_file_must_start_with_the_recorded_prefix);
    rmdir(dir);
    rt_backend_free(be);
    return harness_done();
}
