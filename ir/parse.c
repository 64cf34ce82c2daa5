/* ir/parse.c — whole-string numbers (parse.h). */
#include "ir/parse.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

int ir_parse_i64(const char *s, int64_t *out) {
    char *end;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (!*s || *end || errno) return -1;
    *out = v;
    return 0;
}

int ir_parse_u64(const char *s, uint64_t *out) {
    char *end;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 10);
    if (!*s || *end || errno || strchr(s, '-')) return -1;
    *out = v;
    return 0;
}

int ir_parse_f64(const char *s, double *out) {
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (!*s || *end || (errno == ERANGE && isinf(v))) return -1;
    *out = v;
    return 0;
}
