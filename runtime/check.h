/* runtime/check.h — failure reporting shared by the runtime's C files.
 *
 * RT_CHECK_ALLOC(p)  aborts with file:line when an allocation failed.
 * RT_SYS_FAIL(...)   prints "file:line: message: strerror(errno)".
 * RT_FAIL(...)       prints "file:line: message".
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

/* One out-of-memory report for compiler and runtime: base/err.h's. */
#define RT_CHECK_ALLOC(p) BASE_CHECK_ALLOC(p)

#define RT_SYS_FAIL(...)                                \
    do {                                                \
        int rt_errno_ = errno;                          \
        fprintf(stderr, "%s:%d: ", __FILE__, __LINE__); \
        fprintf(stderr, __VA_ARGS__);                   \
        fprintf(stderr, ": %s\n", strerror(rt_errno_)); \
    } while (0)

#define RT_FAIL(...)                                    \
    do {                                                \
        fprintf(stderr, "%s:%d: ", __FILE__, __LINE__); \
        fprintf(stderr, __VA_ARGS__);                   \
        fputc('\n', stderr);                            \
    } while (0)

#endif
