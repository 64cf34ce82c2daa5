/* runtime/train/report.c — what a run reports besides its log lines: its
 * error (handed to rt_train's caller) and the --metrics file. */
#include <errno.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "ir/err.h"
#include "ir/file.h"
#include "runtime/train/internal.h"

int rt_run_fail(rt_run *r, const char *fmt, ...) {
    rt_progress_clear(&r->bar);
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(r->error, sizeof r->error, fmt, ap);
    va_end(ap);
    return 1;
}

/* path made absolute without requiring that it exist: its directory
 * resolved, its last part kept (a checkpoint names its metrics file so a
 * resume from another directory finds the same one). */
void rt_run_absolute_path(const char *path, char *out, size_t len) {
    char *full = realpath(path, NULL);
    if (full) {
        snprintf(out, len, "%s", full);
        free(full);
        return;
    }
    const char *slash = strrchr(path, '/');
    char dir[4096];
    snprintf(dir, sizeof dir, "%.*s", slash ? (int)(slash - path) + (slash == path) : 1,
             slash ? path : ".");
    char *d = realpath(dir, NULL);
    const char *base = slash ? slash + 1 : path, *dd = d ? d : dir;
    size_t dl = strlen(dd), bl = strlen(base);
    if (dl + 1 + bl < len) {
        memcpy(out, dd, dl);
        out[dl] = '/';
        memcpy(out + dl + 1, base, bl + 1);
    } else {
        snprintf(out, len, "%s", path);
    }
    free(d);
}

int rt_run_open_metrics(rt_run *r) {
    r->metrics = open_memstream(&r->metrics_buf, &r->metrics_len);
    if (!r->metrics) return rt_run_fail(r, "--metrics %s: %s", r->metrics_path, strerror(errno));
    rt_run_absolute_path(r->metrics_path, r->metrics_abs, sizeof r->metrics_abs);
    return 0;
}

/* The metrics text so far, replacing the file atomically (see rt_run). */
int rt_run_flush_metrics(rt_run *r) {
    if (fflush(r->metrics) != 0 || ferror(r->metrics))
        return rt_run_fail(r, "--metrics %s: out of memory", r->metrics_path);
    /* A sweep's run-N.jsonl is a name of dprun's own: never through a link. */
    const rt_train_options *o = r->o;
    int rc = o->metrics_dir && r->metrics_path == o->metrics
                 ? ir_file_write_all_in(o->metrics_dir, o->metrics_name, r->metrics_buf,
                                        r->metrics_len, r->err, sizeof r->err)
                 : ir_file_write_all(r->metrics_path, r->metrics_buf, r->metrics_len, r->err,
                                     sizeof r->err);
    if (rc) return rt_run_fail(r, "--metrics %s", r->err);
    return 0;
}

/* The epoch's metrics object, without its closing brace (the last epoch's
 * gets the final accuracies appended). */
void rt_run_metrics_line(char *buf, size_t len, int epoch, double lr, double loss, int batch,
                         long steps, double seconds, double wait, double test_acc) {
    snprintf(buf, len,
             "{\"epoch\": %d, \"lr\": %.9g, \"train_loss\": %.9g, \"batch\": %d, \"steps\": %ld, "
             "\"seconds\": %.3f, \"img_per_s\": %.1f, \"input_wait_s\": %.4f",
             epoch, lr, loss, batch, steps, seconds,
             seconds > 0 ? (double)steps * batch / seconds : 0.0, wait);
    if (test_acc >= 0)
        snprintf(buf + strlen(buf), len - strlen(buf), ", \"test_accuracy\": %.6f", test_acc);
}
