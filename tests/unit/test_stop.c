/* Tests for runtime/train/stop.c: a signal that arrives while a run ends —
 * during the final evaluation, before it, after it — stops the run with
 * 128 + signal, never 0; with a checkpoint, a resume redoes what was
 * stopped and writes the metrics line the run owed. The signal is raised
 * by the run's log stream when a given line is flushed, so it lands at
 * that point exactly (a real SIGINT from outside, tests/signals_test.sh). */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/file.h"
#include "runtime/log.h"
#include "runtime/train/train.h"
#include "tests/fixture.h"
#include "tests/harness.h"

static char err[2048], tmp[256];
static const char *NET = FX_NET("stop_tiny", FX_CONV_BN FX_GAP_LOGITS, 8, 8);

/* The log: kept in memory; raises SIGINT once when a line holding `when`
 * reaches it (rt_train flushes after each line). */
static const char *when;
static int raised;
static char logbuf[16384];
static size_t loglen;

static ssize_t log_write(void *cookie, const char *buf, size_t n) {
    (void)cookie;
    size_t k = n < sizeof logbuf - 1 - loglen ? n : sizeof logbuf - 1 - loglen;
    memcpy(logbuf + loglen, buf, k);
    loglen += k;
    logbuf[loglen] = 0;
    if (when && !raised && strstr(logbuf, when)) raised = 1, raise(SIGINT);
    return (ssize_t)n;
}

static FILE *log_open(const char *trigger) {
    when = trigger, raised = 0, loglen = 0, logbuf[0] = 0;
    return fopencookie(NULL, "w", (cookie_io_functions_t){.write = log_write});
}

static char *slurp(const char *path) {
    size_t len;
    char why[256];
    char *t = (char *)base_file_read(path, 1 << 20, &len, why, sizeof why);
    return t ? t : calloc(1, 1);
}

/* rt_train on the synthetic set, 5000 / 8 = 625 steps per epoch: steps
 * (-1: all of epochs), the log raising SIGINT at `trigger` (NULL: never). */
static int train(const dpc_plan *p, long steps, int epochs, int resume, const char *trigger,
                 rt_train_result *res) {
    char ck[300], metrics[300];
    snprintf(ck, sizeof ck, "%s/ck", tmp);
    snprintf(metrics, sizeof metrics, "%s/m.jsonl", tmp);
    rt_train_options o = rt_train_defaults();
    o.device = "cpu", o.data = "synthetic", o.seed = 1, o.data_workers = 0;
    o.steps = steps, o.epochs = epochs, o.resume = resume;
    o.final_eval = RT_FINAL_EVAL_BOTH; /* what these tests stop in */
    o.checkpoint = ck, o.metrics = metrics, o.result = res;
    rt_log_set_prefix("test_stop"); /* the training's lines on stderr */
    o.out = log_open(trigger);
    int rc = rt_train(p, &o, err, sizeof err);
    fclose(o.out);
    return rc;
}

static void clean(void) {
    char cmd[700];
    snprintf(cmd, sizeof cmd, "rm -rf '%s/ck' '%s/m.jsonl'", tmp, tmp);
    CHECK(system(cmd) == 0);
}

/* --steps stops mid-epoch: its checkpoint comes first, then the epoch's
 * end, then the final evaluation, which the signal stops. */
TEST(sigint_during_the_final_evaluation) {
    dpc_plan *p = fx_plan(NET, 8, NULL, 1, err, sizeof err);
    CHECK_MSG(p != NULL, "%s", err);
    if (!p) return;
    clean();
    rt_train_result res;
    int rc = train(p, 10, 0, 0, "EPOCH  0:", &res);
    CHECK_MSG(rc == 128 + SIGINT, "rc %d: %s", rc, err);
    CHECK(raised && !res.finished && !strstr(logbuf, "Training time"));
    char path[300];
    snprintf(path, sizeof path, "%s/m.jsonl", tmp);
    char *m = slurp(path);
    CHECK_MSG(!*m, "the metrics file holds '%s'", m); /* the line is owed, not written */
    free(m);
    /* The resume (the same command) evaluates and writes the line. */
    rc = train(p, 10, 0, 1, NULL, &res);
    CHECK_MSG(rc == 0 && res.finished, "rc %d: %s", rc, err);
    CHECK(strstr(logbuf, "EPOCH  0:") && strstr(logbuf, "Training time"));
    m = slurp(path);
    CHECK_MSG(!strncmp(m, "{\"epoch\": 0, ", 13) && strstr(m, "\"steps\": 10,") &&
                  strstr(m, "\"train_accuracy\"") && strchr(m, '\n') == m + strlen(m) - 1,
              "%s", m);
    free(m);
    fx_plan_free(p);
}

/* The last epoch's end: its checkpoint is written, then the run stops
 * before the final evaluation; the resume only evaluates. */
TEST(sigint_at_the_last_epoch_end) {
    dpc_plan *p = fx_plan(NET, 8, NULL, 1, err, sizeof err);
    if (!p) return;
    clean();
    rt_train_result res;
    int rc = train(p, -1, 0, 0, "EPOCH  0:", &res);
    CHECK_MSG(rc == 128 + SIGINT && !res.finished, "rc %d: %s", rc, err);
    rc = train(p, -1, 0, 1, NULL, &res);
    CHECK_MSG(rc == 0 && res.finished, "rc %d: %s", rc, err);
    CHECK(!strstr(logbuf, "EPOCH") && strstr(logbuf, "Training time"));
    fx_plan_free(p);
}

/* After the final evaluation only writes remain: they finish, and the run
 * still does not exit 0. */
TEST(sigint_after_the_final_evaluation) {
    dpc_plan *p = fx_plan(NET, 8, NULL, 1, err, sizeof err);
    if (!p) return;
    clean();
    rt_train_result res;
    int rc = train(p, 10, 0, 0, "Training time", &res);
    CHECK_MSG(rc == 128 + SIGINT, "rc %d: %s", rc, err);
    CHECK(res.finished);
    char path[300];
    snprintf(path, sizeof path, "%s/m.jsonl", tmp);
    char *m = slurp(path);
    CHECK_MSG(strstr(m, "\"train_accuracy\"") != NULL, "%s", m);
    free(m);
    fx_plan_free(p);
}

int main(void) {
    const char *t = getenv("TMPDIR");
    snprintf(tmp, sizeof tmp, "%s/dpc_test_stop_XXXXXX", t && *t ? t : "/tmp");
    if (!mkdtemp(tmp)) return 1;
    RUN(sigint_during_the_final_evaluation);
    RUN(sigint_at_the_last_epoch_end);
    RUN(sigint_after_the_final_evaluation);
    clean();
    rmdir(tmp);
    return harness_done();
}
