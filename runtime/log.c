/* runtime/log.c — the runtime's stderr lines (log.h). */
#include "runtime/log.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

static char prefix[64] = "dpc: ";

void rt_log_set_prefix(const char *name) { snprintf(prefix, sizeof prefix, "%s: ", name); }

const char *rt_log_prefix(void) { return prefix; }

void rt_log(int level, const char *fmt, ...) {
    static const char *const word[] = {"", "note: ", "warning: ", "error: ", "debug: "};
    const char *w = level >= 0 && level <= RT_LOG_DEBUG ? word[level] : "";
    char line[4096];
    int n = snprintf(line, sizeof line, "%s%s", prefix, w);
    va_list ap;
    va_start(ap, fmt);
    int m = vsnprintf(line + n, sizeof line - (size_t)n, fmt, ap);
    va_end(ap);
    if (m >= 0 && (size_t)n + (size_t)m + 1 < sizeof line) { /* one write */
        line[n + m] = '\n';
        fwrite(line, 1, (size_t)n + (size_t)m + 1, stderr);
        return;
    }
    /* A long one (a generated source): in pieces. */
    fputs(prefix, stderr);
    fputs(w, stderr);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
}

void rt_log_at(const char *file, int line, int errnum, const char *fmt, ...) {
    char msg[2048];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    if (errnum)
        rt_log(RT_LOG_ERROR, "%s:%d: %s: %s", file, line, msg, strerror(errnum));
    else
        rt_log(RT_LOG_ERROR, "%s:%d: %s", file, line, msg);
}
