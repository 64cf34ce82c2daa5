/* ir/err.c — see err.h. */
#include "ir/err.h"

#include <stdarg.h>
#include <stdio.h>

int ir_fail(char *err, size_t errlen, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, errlen, fmt, ap);
    va_end(ap);
    return -1;
}
