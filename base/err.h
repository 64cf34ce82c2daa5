/* base/err.h — errors handed back to the caller as text.
 *
 * Usage:
 *     int parse_thing(..., char *err, size_t errlen) {
 *         if (bad) return base_fail(err, errlen, "%s: line %d: no value", path, line);
 *         ...
 *     }
 *
 * Most functions of the compiler and runtime report failure as -1 (or NULL)
 * plus a message in a caller's buffer; this is the one helper they format it
 * with.
 *
 * Out of memory is not an error a caller can act on: BASE_CHECK_ALLOC(p) prints
 * "file:line: out of memory (p)" and aborts, in the compiler and the runtime
 * alike (runtime/check.h's RT_CHECK_ALLOC is the same macro).
 *     ir_node *n = malloc(sizeof *n);
 *     BASE_CHECK_ALLOC(n);
 */
#ifndef DPC_BASE_ERR_H
#define DPC_BASE_ERR_H

#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>

#define BASE_CHECK_ALLOC(p)                                                         \
    do {                                                                            \
        if (!(p)) {                                                                 \
            fprintf(stderr, "%s:%d: out of memory (%s)\n", __FILE__, __LINE__, #p); \
            abort();                                                                \
        }                                                                           \
    } while (0)

/* Formats the message into err (at most errlen bytes, always terminated when
 * errlen > 0) and returns -1. */
int base_fail(char *err, size_t errlen, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

/* A name or string read from a file, made safe for a one-line message:
 * every byte outside printable ASCII as \xNN (C0 controls, DEL, and all of
 * UTF-8, which can encode C1 controls such as CSI), '\' as \\; cut with
 * "..." to fit len bytes. Returns buf.
 *     base_fail(err, errlen, "%s: tensor '%s' ...", path, BASE_ESC(name));
 * BASE_ESC is base_esc into a temporary that lives until the end of the
 * enclosing block (a compound literal): at most BASE_ESC_MAX - 1 bytes. */
const char *base_esc(char *buf, size_t len, const char *s);
#define BASE_ESC_MAX 128
#define BASE_ESC(s)  base_esc((char[BASE_ESC_MAX]){0}, BASE_ESC_MAX, (s))

/* "did you mean": the candidate closest to a misspelled word, offered one
 * at a time; best stays NULL while none is near enough (edits, a swap of
 * neighbours counting one: none for words up to 2 bytes, 1 up to 4, 2 up
 * to 8, else 3).
 *     base_near n = {0};
 *     for (...) base_near_try(&n, word, candidate[i]);
 *     if (n.best) ... "; did you mean '%s'?", n.best
 */
typedef struct {
    const char *best;
    int dist;
} base_near;
void base_near_try(base_near *n, const char *word, const char *cand);

/* 1 when s[0..n) holds a byte a terminal acts on: a C0 control, DEL, or a
 * C1 control in UTF-8 (U+0080..U+009F). Names and strings that end up in
 * messages and summaries refuse them (plans, IR text). */
int base_has_control(const char *s, size_t n);

#endif
