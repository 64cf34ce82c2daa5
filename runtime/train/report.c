/* runtime/train/report.c — what a run reports besides its log lines: its
 * error (handed to rt_train's caller), the --metrics file, and the log's
 * flush. */
#include <errno.h>
#include <math.h>
#include <signal.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "base/err.h"
#include "base/file.h"
#include "runtime/train/internal.h"

int rt_run_fail(rt_run *r, const char *fmt, ...) {
    rt_progress_clear(&r->bar);
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(r->error, sizeof r->error, fmt, ap);
    va_end(ap);
    return 1;
}

int rt_run_open_metrics(rt_run *r) {
    r->metrics = open_memstream(&r->metrics_buf, &r->metrics_len);
    if (!r->metrics) return rt_run_fail(r, "--metrics %s: %s", r->metrics_path, strerror(errno));
    return 0;
}

/* The metrics text so far, replacing the file atomically (see rt_run). */
int rt_run_flush_metrics(rt_run *r) {
    if (fflush(r->metrics) != 0 || ferror(r->metrics))
        return rt_run_fail(r, "--metrics %s: out of memory", r->metrics_path);
    /* A sweep's run-N.jsonl is a name of dprun's own: never through a link. */
    const rt_train_options *o = r->o;
    int rc = o->metrics_dir && r->metrics_path == o->metrics
                 ? base_file_write_all_in(o->metrics_dir, o->metrics_name, r->metrics_buf,
                                          r->metrics_len, r->err, sizeof r->err)
                 : base_file_write_all(r->metrics_path, r->metrics_buf, r->metrics_len, r->err,
                                       sizeof r->err);
    if (rc) return rt_run_fail(r, "--metrics %s", r->err);
    return 0;
}

/* The epoch's metrics object, without its closing brace (the last epoch's
 * gets the final accuracies appended). A checkpoint keeps these numbers,
 * not the text: a resumed run writes the same line from them. */
void rt_run_metrics_line(char *buf, size_t len, const rt_ckpt_metrics *m, int tokens) {
    char loss[32] = "null"; /* JSON has no NaN: a non-finite loss (--on-nan skip) */
    if (isfinite(m->train_loss)) snprintf(loss, sizeof loss, "%.9g", m->train_loss);
    snprintf(buf, len,
             "{\"epoch\": %d, \"lr\": %.9g, \"train_loss\": %s, \"batch\": %d, \"steps\": %ld, "
             "\"seconds\": %.3f, \"img_per_s\": %.1f, \"input_wait_s\": %.4f",
             (int)m->epoch, m->lr, loss, (int)m->batch, (long)m->steps, m->seconds,
             m->seconds > 0 ? (double)m->steps * (double)m->batch / m->seconds : 0.0,
             m->input_wait_s);
    if (m->test_accuracy >= 0 && tokens) /* a language model's: its val loss */
        snprintf(buf + strlen(buf), len - strlen(buf),
                 ", \"val_loss\": %.9g, \"val_bits_per_token\": %.9g", m->test_accuracy,
                 m->test_accuracy / M_LN2);
    else if (m->test_accuracy >= 0)
        snprintf(buf + strlen(buf), len - strlen(buf), ", \"test_accuracy\": %.6f",
                 m->test_accuracy);
}

/* The log is a side channel: a reader that went away (`dprun ... | head`)
 * must not kill the run mid-step (SIGPIPE is ignored while it runs), nor
 * leave it training for nobody. The run stops at the next step as on
 * SIGINT, with its checkpoint, and exits 141 (128 + SIGPIPE). */
void rt_run_flush_log(rt_run *r) {
    FILE *out = r->o->out;
    errno = 0;
    if ((fflush(out) != 0 || ferror(out)) && errno == EPIPE) rt_run_request_stop(SIGPIPE);
}
