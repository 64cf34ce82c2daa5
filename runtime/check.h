/* runtime/check.h — failure reporting shared by the runtime's C files.
 *
 * RT_CHECK_ALLOC(p)  aborts with file:line when an allocation failed.
 * RT_SYS_FAIL(...)   logs "file:line: message: strerror(errno)" (log.h, an error).
 * RT_FAIL(...)       logs "file:line: message".
 * Errors a caller can act on go back through err/errlen instead; these are
 * for the places where only a message and an error code make sense.
 */
#ifndef DPC_RT_CHECK_H
#define DPC_RT_CHECK_H

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/err.h"
#include "runtime/log.h"

/* One out-of-memory report for compiler and runtime: base/err.h's. */
#define RT_CHECK_ALLOC(p) BASE_CHECK_ALLOC(p)

/* Through the runtime's logger (log.h): "PREFIX: error: file:line: ...". */
#define RT_SYS_FAIL(...) rt_log_at(__FILE__, __LINE__, errno, __VA_ARGS__)
#define RT_FAIL(...)     rt_log_at(__FILE__, __LINE__, 0, __VA_ARGS__)

#endif
