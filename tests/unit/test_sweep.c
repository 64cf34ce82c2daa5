/* Tests for runtime/sweep: the spec parser and its errors, sweep files, the
 * cartesian product and how it lands in rt_train_options, the ranking
 * (test accuracy, ties, failed and diverged runs last) and the table; plus
 * the base-lr override (--lr) of rt_train_schedule; and that rt_train and
 * rt_sweep_run hand their errors back instead of printing them. */
#include <math.h>
#include <stdlib.h>
#include <unistd.h>

#include "runtime/train/train.h"
#include "tests/harness.h"

static char err[512];

/* Parsing must fail with a message that contains want. */
static int parse_fails(const char *spec, const char *want) {
    rt_sweep s;
    err[0] = 0;
    if (rt_sweep_parse(&s, spec, err, sizeof err) != -1) return 0;
    if (!strstr(err, want)) {
        fprintf(stderr, "  spec '%s': message '%s' lacks '%s'\n", spec, err, want);
        return 0;
    }
    return 1;
}

TEST(parses_keys_and_values) {
    rt_sweep s;
    CHECK(rt_sweep_parse(&s, "  lr=0.05,0.1,0.2\twarmup=0,5 lr-scaling=none,linear ", err,
                         sizeof err) == 0);
    CHECK(s.axes == 3);
    CHECK(s.axis[0].key == RT_SWEEP_LR && s.axis[0].count == 3);
    CHECK_NEAR(s.axis[0].value[2], 0.2, 0);
    CHECK_STR(s.axis[0].text[1], "0.1");
    CHECK(s.axis[1].key == RT_SWEEP_WARMUP && s.axis[1].count == 2);
    CHECK(s.axis[2].key == RT_SWEEP_LR_SCALING);
    CHECK(s.axis[2].value[0] == IR_LR_SCALING_NONE && s.axis[2].value[1] == IR_LR_SCALING_LINEAR);
    CHECK(rt_sweep_count(&s) == 12);
    CHECK(rt_sweep_parse(&s,
                         "seed=0,9007199254740992 gpus=1,2,4 epochs=1 momentum-correction=0,1 "
                         "warmup-per-iteration=1",
                         err, sizeof err) == 0);
    CHECK(rt_sweep_count(&s) == 2 * 3 * 1 * 2 * 1);
}

TEST(bad_tokens_are_named) {
    CHECK(parse_fails("", "names no key=values"));
    CHECK(parse_fails("   ", "names no key=values"));
    CHECK(parse_fails("lr", "'lr' is not key=value"));
    CHECK(parse_fails("=0.1", "'=0.1' is not key=value"));
    CHECK(parse_fails("rate=0.1", "'rate' is not a sweep key (one of lr, warmup"));
    CHECK(parse_fails("lr=0.1,,0.2", "'lr=0.1,,0.2': an empty value"));
    CHECK(parse_fails("lr=0.1,", "an empty value"));
    CHECK(parse_fails("lr=", "an empty value"));
    CHECK(parse_fails("lr=0.1,abc", "lr: 'abc' is not a positive number"));
    CHECK(parse_fails("lr=-1", "lr: '-1' is not a positive number"));
    CHECK(parse_fails("lr=0", "lr: '0' is not a positive number"));
    CHECK(parse_fails("lr=nan", "lr: 'nan' is not a positive number"));
    CHECK(parse_fails("lr=inf", "lr: 'inf' is not a positive number"));
    CHECK(parse_fails("warmup=-1", "warmup: '-1' is not an integer in 0..100000"));
    CHECK(parse_fails("warmup=1.5", "warmup: '1.5' is not an integer"));
    CHECK(parse_fails("epochs=0", "epochs: '0' is not an integer in 1..100000"));
    CHECK(parse_fails("gpus=1000", "gpus: '1000' is not an integer in 1..256"));
    CHECK(parse_fails("seed=+3", "seed: '+3' is not an integer"));
    CHECK(parse_fails("lr-scaling=cubic", "lr-scaling: 'cubic' is not one of none, linear, sqrt"));
    CHECK(parse_fails("momentum-correction=yes", "momentum-correction: 'yes' is not 0 or 1"));
    CHECK(parse_fails("lr=0.1 lr=0.2", "'lr' is given twice"));
    CHECK(parse_fails("lr=0.1,0.10", "lr: '0.10' is given twice"));
    CHECK(parse_fails("lr=0.1 warmup=0,5 lr=0.2", "'lr' is given twice"));
    /* A spec file's bytes reach the message escaped. */
    CHECK(parse_fails("lr=0.1,\033[31mx", "lr: '\\x1b[31mx' is not a positive number"));
    CHECK(parse_fails("\033]0;t\a=1", "'\\x1b]0;t\\x07' is not a sweep key"));
    CHECK(parse_fails("\033[2J", "'\\x1b[2J' is not key=value"));
    CHECK(parse_fails("lr=\xc2\x9b"
                      "1",
                      "lr: '\\xc2\\x9b1' is not a positive number"));
    CHECK(parse_fails("gpus=\033", "gpus: '\\x1b' is not an integer"));
    CHECK(!strchr(err, '\033'));
    char many[512] = "seed=0";
    for (int i = 1; i <= RT_SWEEP_MAX_VALUES; i++)
        snprintf(many + strlen(many), sizeof many - strlen(many), ",%d", i);
    CHECK(parse_fails(many, "more than 32 values"));
    CHECK(
        parse_fails(
            "lr=1,2,3,4,5,6,7,8 warmup=1,2,3,4,5,6,7,8 seed=1,2,3,4,5,6,7,8 epochs=1,2,3,4,5,6,7,8",
            "4096 combinations; at most 4096") == 0);
    CHECK(parse_fails(
        "lr=1,2,3,4,5,6,7,8 warmup=1,2,3,4,5,6,7,8 seed=1,2,3,4,5,6,7,8 epochs=1,2,3,4,5,6,7,8,9",
        "combinations; at most 4096"));
}

/* Combinations run through the spec like nested loops, the last key fastest. */
TEST(combinations_and_options) {
    rt_sweep s;
    CHECK(rt_sweep_parse(&s, "lr=0.05,0.1,0.2 warmup=0,5", err, sizeof err) == 0);
    CHECK(rt_sweep_count(&s) == 6);
    const double lr[] = {0.05, 0.05, 0.1, 0.1, 0.2, 0.2};
    const int warm[] = {0, 5, 0, 5, 0, 5};
    for (long i = 0; i < 6; i++) {
        rt_train_options o = rt_train_defaults();
        rt_sweep_apply(&s, i, &o);
        CHECK_NEAR(o.lr, lr[i], 0);
        CHECK(o.warmup_epochs == warm[i]);
        CHECK(o.gpus == 1 && o.seed == 0 && o.lr_scaling == -1); /* untouched */
    }
    char label[128];
    rt_sweep_label(&s, 3, label, sizeof label);
    CHECK_STR(label, "lr=0.1 warmup=5");

    CHECK(rt_sweep_parse(
              &s,
              "gpus=2 seed=7 epochs=3 lr-scaling=none momentum-correction=1 warmup-per-iteration=1",
              err, sizeof err) == 0);
    rt_train_options o = rt_train_defaults();
    rt_sweep_apply(&s, 0, &o);
    CHECK(o.gpus == 2 && o.seed == 7 && o.epochs == 3 && o.lr_scaling == IR_LR_SCALING_NONE);
    CHECK(o.momentum_correction == 1 && o.warmup_per_iteration == 1);
}

TEST(sweep_file) {
    char path[] = "/tmp/dpc_test_sweep_XXXXXX";
    int fd = mkstemp(path);
    CHECK(fd >= 0);
    FILE *f = fdopen(fd, "w");
    fputs("# the lr sweep\nlr=0.05,0.1   # base lrs\n\n  warmup=0,5\n", f);
    fclose(f);
    rt_sweep s;
    CHECK(rt_sweep_read(&s, path, err, sizeof err) == 0);
    CHECK(s.axes == 2 && rt_sweep_count(&s) == 4);
    f = fopen(path, "w");
    fputs("lr=0.1\nwarmup=x\n", f);
    fclose(f);
    CHECK(rt_sweep_read(&s, path, err, sizeof err) == -1);
    CHECK_MSG(strstr(err, ":2: warmup: 'x' is not an integer") != NULL, "%s", err);
    f = fopen(path, "w");
    fputs("# nothing\n", f);
    fclose(f);
    CHECK(rt_sweep_read(&s, path, err, sizeof err) == -1);
    CHECK_MSG(strstr(err, "names no key=values") != NULL, "%s", err);
    unlink(path);
    CHECK(rt_sweep_read(&s, path, err, sizeof err) == -1);
    CHECK_MSG(strstr(err, "cannot open") != NULL, "%s", err);
}

static rt_train_result done(double test_acc, double loss) {
    rt_train_result r;
    memset(&r, 0, sizeof r);
    r.finished = 1, r.epochs = 1, r.train_loss = loss, r.train_accuracy = test_acc,
    r.test_accuracy = test_acc;
    return r;
}

TEST(ranking) {
    rt_train_result res[7];
    res[0] = done(0.50, 1.0);
    res[1] = done(0.90, 0.3);
    res[2] = done(0.70, 0.5);
    /* failed with an error (a stop on NaN) */
    memset(&res[3], 0, sizeof res[3]);
    res[3].status = 1, res[3].train_loss = NAN;
    snprintf(res[3].error, sizeof res[3].error, "the loss is nan at step 6");
    res[4] = done(0.70, 0.4); /* ties with 2 on accuracy, lower loss: ahead */
    res[5] = done(0.10, NAN); /* trained on with NaN loss: diverged, last */
    res[6] = done(0.70, 0.4); /* ties with 4 entirely: the earlier run first */
    long order[7];
    rt_sweep_rank(res, 7, order);
    const long want[] = {1, 4, 6, 2, 0, 3, 5};
    for (int k = 0; k < 7; k++)
        CHECK_MSG(order[k] == want[k], "rank %d: run %ld, want %ld", k, order[k], want[k]);
    char why[128];
    CHECK(rt_sweep_ok(&res[3], why, sizeof why) == 0);
    CHECK_STR(why, "failed: the loss is nan at step 6");
    CHECK(rt_sweep_ok(&res[5], why, sizeof why) == 0);
    CHECK_STR(why, "diverged: train loss nan");
    CHECK(rt_sweep_ok(&res[1], why, sizeof why) == 1);
}

TEST(table) {
    rt_sweep s;
    CHECK(rt_sweep_parse(&s, "lr=0.0001,0.01,1000", err, sizeof err) == 0);
    rt_train_result res[3];
    res[0] = done(0.40, 1.5);
    res[1] = done(0.95, 0.1);
    res[1].wall_seconds = 2.5;
    snprintf(res[1].note, sizeof res[1].note, "warmup | changes nothing");
    memset(&res[2], 0, sizeof res[2]);
    res[2].status = 1;
    snprintf(res[2].error, sizeof res[2].error, "the loss | is nan");
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    rt_sweep_table(&s, res, 3, f);
    fclose(f);
    const char *want =
        "| rank | lr | train loss | train accuracy | test accuracy | training (s) | wall (s) | run "
        "| result |\n"
        "|---:|---|---:|---:|---:|---:|---:|---:|---|\n"
        "| 1 | 0.01 | 0.1000 | 0.9500 | 0.9500 | 0.00 | 2.50 | 2 | ok; note: warmup   changes "
        "nothing |\n"
        "| 2 | 0.0001 | 1.5000 | 0.4000 | 0.4000 | 0.00 | 0.00 | 1 | ok |\n"
        "| — | 1000 | — | — | — | 0.00 | 0.00 | 3 | failed: the loss   is nan |\n";
    CHECK_STR(buf, want);
    free(buf);
}

/* --lr scales the whole dict so epoch 0 has the given base lr. */
TEST(base_lr_override) {
    dpc_plan plan;
    memset(&plan, 0, sizeof plan);
    ir_train_defaults(&plan.schedule);
    ir_train *t = &plan.schedule;
    t->epochs = 10, t->lr_steps = 2;
    t->lr_epoch[0] = 0, t->lr_value[0] = 0.1, t->lr_epoch[1] = 5, t->lr_value[1] = 0.01;
    rt_train_options o = rt_train_defaults();
    ir_train got;
    o.lr = 0.4;
    CHECK(rt_train_schedule(&plan, &o, &got, err, sizeof err) == 0);
    CHECK_NEAR(got.lr_value[0], 0.4, 1e-15); /* 0.1 * 4 in f64: one rounding of 2^-53 * 0.4 */
    CHECK_NEAR(got.lr_value[1], 0.04, 1e-15);
    CHECK_NEAR(plan.schedule.lr_value[0], 0.1, 0); /* the plan is not changed */
    o.lr = -1;
    CHECK(rt_train_schedule(&plan, &o, &got, err, sizeof err) == -1);
    CHECK_MSG(strstr(err, "--lr must be positive") != NULL, "%s", err);
}

/* The library reports through err and result; stderr stays empty. */
TEST(errors_come_back) {
    dpc_plan plan;
    memset(&plan, 0, sizeof plan); /* batch 0: the schedule check refuses it */
    snprintf(plan.model, sizeof plan.model, "empty");
    rt_train_result res;
    rt_train_options o = rt_train_defaults();
    o.device = "cpu";
    o.result = &res;
    fflush(stderr);
    FILE *cap = tmpfile();
    CHECK(cap != NULL);
    int saved = dup(2);
    dup2(fileno(cap), 2);
    char msg[2048] = "stale";
    int rc = rt_train(&plan, &o, msg, sizeof msg);
    rt_sweep s;
    char serr[512] = "";
    CHECK(rt_sweep_parse(&s, "lr=0.1", err, sizeof err) == 0);
    rt_train_options base = rt_train_defaults();
    base.ranks = 2;
    int src = rt_sweep_run(&plan, &s, &base, "unused-sweep-dir", NULL, serr, sizeof serr);
    fflush(stderr);
    dup2(saved, 2);
    close(saved);
    CHECK(rc == 1);
    CHECK_STR(msg, "batch must be positive, got 0");
    CHECK(res.status == 1 && !strcmp(res.error, msg));
    CHECK(src == 1);
    CHECK_STR(serr, "--sweep runs in one process; not under mpirun with 2 processes");
    CHECK(ftell(cap) == 0); /* nothing printed */
    fclose(cap);
}

int main(void) {
    RUN(parses_keys_and_values);
    RUN(bad_tokens_are_named);
    RUN(combinations_and_options);
    RUN(sweep_file);
    RUN(ranking);
    RUN(table);
    RUN(base_lr_override);
    RUN(errors_come_back);
    return harness_done();
}
