/* codegen/str.c — the growable string every kernel and module source is
 * built in, and the checked float and double literals constants become:
 * a literal is emitted only if it reads back as the same finite value. */
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "codegen/internal.h"

/* ---- strings ---------------------------------------------------------------- */

static void str_reserve(cg_str *b, size_t extra) {
    if (b->len + extra + 1 <= b->cap) return;
    size_t cap = b->cap ? b->cap : 256;
    while (cap < b->len + extra + 1) cap *= 2;
    char *s = realloc(b->s, cap);
    BASE_CHECK_ALLOC(s);
    b->s = s;
    b->cap = cap;
}

void cg_str_append(cg_str *b, const char *s, size_t n) {
    str_reserve(b, n);
    memcpy(b->s + b->len, s, n);
    b->len += n;
    b->s[b->len] = 0;
}

void cg_str_printf(cg_str *b, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    if (n < 0) abort();
    str_reserve(b, (size_t)n);
    va_start(ap, fmt);
    vsnprintf(b->s + b->len, (size_t)n + 1, fmt, ap);
    va_end(ap);
    b->len += (size_t)n;
}

void cg_str_free(cg_str *b) {
    free(b->s);
    *b = (cg_str){0};
}

/* A literal is checked before it is emitted: only the characters a decimal
 * constant has, and it reads back as the value meant. Anything else (an
 * infinity or NaN prints as "inf"/"nan", a double beyond FLT_MAX becomes an
 * infinite float) gives NULL, never text. */
static int lit_text_ok(const char *s) {
    if (!*s) return 0;
    for (const char *c = s; *c; c++)
        if (!strchr("0123456789.e+-", *c)) return 0;
    return 1;
}

const char *cg_float_lit(double v, char *buf) {
    float f = (float)v;
    if (!isfinite(v) || !isfinite(f)) return NULL;
    /* %.9g round-trips any float; the literal needs a '.' or an exponent
     * before its 'f' suffix to be a float constant at all. */
    snprintf(buf, 32, "%.9g", (double)f);
    if (!strpbrk(buf, ".e")) strcat(buf, ".0");
    if (!lit_text_ok(buf) || strtof(buf, NULL) != f) return NULL;
    strcat(buf, "f");
    return buf;
}

/* A double constant for acc_t arithmetic (eps inside double sqrt). */
const char *cg_double_lit(double v, char *buf) {
    if (!isfinite(v)) return NULL;
    snprintf(buf, 32, "%.17g", v);
    if (!strpbrk(buf, ".e")) strcat(buf, ".0");
    if (!lit_text_ok(buf) || strtod(buf, NULL) != v) return NULL;
    return buf;
}

const char *cg_lit(cg_ctx *cx, double v, int dbl, char *buf) {
    const char *s = dbl ? cg_double_lit(v, buf) : cg_float_lit(v, buf);
    if (s) return s;
    if (!cx->bad_literal)
        cg_fail(cx, "constant %.9g cannot be written as a finite %s literal", v,
                dbl ? "double" : "float");
    cx->bad_literal = 1;
    return "0";
}
