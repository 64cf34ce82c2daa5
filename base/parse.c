/* base/parse.c — whole-string numbers (parse.h). */
#include "base/parse.h"

#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

/* The number starts at s: no white space or '+' before it, which the
 * strto* functions would skip or take. */
static int starts_plain(const char *s) { return *s && !isspace((unsigned char)*s) && *s != '+'; }

int base_parse_i64(const char *s, int64_t *out) {
    char *end;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (!starts_plain(s) || *end || errno) return -1;
    *out = v;
    return 0;
}

int base_parse_u64(const char *s, uint64_t *out) {
    char *end;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 10);
    if (!starts_plain(s) || *end || errno || strchr(s, '-')) return -1;
    *out = v;
    return 0;
}

int base_parse_f64(const char *s, double *out) {
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (!starts_plain(s) || *end || (errno == ERANGE && isinf(v))) return -1;
    *out = v;
    return 0;
}

int64_t base_parse_size(const char *s) {
    if (!s || !starts_plain(s)) return -1;
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (end == s || errno || !(v > 0)) return -1;
    while (*end == ' ') end++;
    double scale = 1;
    const char *units = "KMGTPE";
    const char *u = *end ? strchr(units, toupper((unsigned char)*end)) : NULL;
    if (u) {
        for (const char *k = units; k <= u; k++) scale *= 1024;
        end++;
        if (*end == 'i' || *end == 'I') end++;
        if (*end == 'b' || *end == 'B') end++;
    } else if (*end == 'b' || *end == 'B') {
        end++;
    }
    if (*end) return -1;
    v *= scale;
    if (v < 1 || v >= 9.2e18) return -1; /* below a byte, or past int64 */
    return (int64_t)v;
}
