/* ir/err.h — errors handed back to the caller as text.
 *
 * Usage:
 *     int parse_thing(..., char *err, size_t errlen) {
 *         if (bad) return ir_fail(err, errlen, "%s: line %d: no value", path, line);
 *         ...
 *     }
 *
 * Most functions of the compiler and runtime report failure as -1 (or NULL)
 * plus a message in a caller's buffer; this is the one helper they format it
 * with.
 *
 * Out of memory is not an error a caller can act on: IR_CHECK_ALLOC(p) prints
 * "file:line: out of memory (p)" and aborts, in the compiler and the runtime
 * alike (runtime/check.h's RT_CHECK_ALLOC is the same macro).
 *     ir_node *n = malloc(sizeof *n);
 *     IR_CHECK_ALLOC(n);
 */
#ifndef DPC_IR_ERR_H
#define DPC_IR_ERR_H

#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>

#define IR_CHECK_ALLOC(p)                                                           \
    do {                                                                            \
        if (!(p)) {                                                                 \
            fprintf(stderr, "%s:%d: out of memory (%s)\n", __FILE__, __LINE__, #p); \
            abort();                                                                \
        }                                                                           \
    } while (0)

/* Formats the message into err (at most errlen bytes, always terminated when
 * errlen > 0) and returns -1. */
int ir_fail(char *err, size_t errlen, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

#endif
