/* runtime/log.h — the runtime's one way to print a line on stderr, under
 * the prefix the program set.
 *
 * Usage:
 *     rt_log_set_prefix("dprun");                    // once, first thing in main
 *     rt_log(RT_LOG_NOTE, "%s: using %d threads", what, n);
 *         // "dprun: note: cuda: using 4 threads"
 *
 * Levels say which word follows the prefix: RT_LOG_INFO none (progress,
 * DPC_DEBUG's lines), RT_LOG_NOTE "note: ", RT_LOG_WARNING "warning: ", RT_LOG_ERROR "error: ",
 * RT_LOG_DEBUG "debug: ". Nothing is filtered here: a caller decides (by
 * rt_debug_level) whether a line is printed. Errors a caller can act on go
 * back through err/errlen, not here; RT_LOG_ERROR is for the failures no
 * caller can be told of (teardown). Each line is one write, so lines of
 * several threads do not interleave. The prefix is "dpc" until set. */
#ifndef DPC_RUNTIME_LOG_H
#define DPC_RUNTIME_LOG_H

enum { RT_LOG_INFO, RT_LOG_NOTE, RT_LOG_WARNING, RT_LOG_ERROR, RT_LOG_DEBUG };

/* The program's name, without ": " (kept: a literal or static storage). */
void rt_log_set_prefix(const char *name);
/* "NAME: ", as lines begin. */
const char *rt_log_prefix(void);
void rt_log(int level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* An error at a place in the source (check.h's RT_FAIL, RT_SYS_FAIL):
 * "PREFIX: error: FILE:LINE: message", then ": strerror(errnum)" unless
 * errnum is 0. */
void rt_log_at(const char *file, int line, int errnum, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

#endif
