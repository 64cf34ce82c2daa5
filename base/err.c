/* base/err.c — see err.h. */
#include "base/err.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

int base_fail(char *err, size_t errlen, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, errlen, fmt, ap);
    va_end(ap);
    return -1;
}

const char *base_esc(char *buf, size_t len, const char *s) {
    if (!len) return buf;
    if (!s) s = "(null)";
    size_t total = 0, k = 0;
    for (const unsigned char *p = (const unsigned char *)s; *p && total < len; p++)
        total += *p == '\\' ? 2 : *p < 0x20 || *p >= 0x7f ? 4 : 1;
    /* all of it, or as much as fits before "..." */
    size_t room = total < len ? len - 1 : len > 4 ? len - 4 : 0;
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        char one[5];
        size_t n = *p == '\\'                ? (size_t)snprintf(one, sizeof one, "\\\\")
                   : *p < 0x20 || *p >= 0x7f ? (size_t)snprintf(one, sizeof one, "\\x%02x", *p)
                                             : (one[0] = (char)*p, 1);
        if (k + n > room) break;
        memcpy(buf + k, one, n);
        k += n;
    }
    if (total >= len && len > 4) memcpy(buf + k, "...", 3), k += 3;
    buf[k] = 0;
    return buf;
}

int base_has_control(const char *s, size_t n) {
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c < 0x20 || c == 0x7f) return 1;
        if (c == 0xc2 && i + 1 < n && (unsigned char)s[i + 1] >= 0x80 &&
            (unsigned char)s[i + 1] <= 0x9f)
            return 1;
    }
    return 0;
}

/* Edits from a to b (optimal string alignment: insert, delete, replace,
 * swap two neighbours); stops counting above limit. */
static int edits(const char *a, const char *b, int limit) {
    enum { MAX = 64 };
    size_t la = strlen(a), lb = strlen(b);
    if (la >= MAX || lb >= MAX) return limit + 1;
    if ((la > lb ? la - lb : lb - la) > (size_t)limit) return limit + 1;
    int d[MAX + 1][MAX + 1];
    for (size_t i = 0; i <= la; i++) d[i][0] = (int)i;
    for (size_t j = 0; j <= lb; j++) d[0][j] = (int)j;
    for (size_t i = 1; i <= la; i++)
        for (size_t j = 1; j <= lb; j++) {
            int v = d[i - 1][j - 1] + (a[i - 1] != b[j - 1]);
            if (d[i - 1][j] + 1 < v) v = d[i - 1][j] + 1;
            if (d[i][j - 1] + 1 < v) v = d[i][j - 1] + 1;
            if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1] &&
                d[i - 2][j - 2] + 1 < v)
                v = d[i - 2][j - 2] + 1;
            d[i][j] = v;
        }
    return d[la][lb];
}

void base_near_try(base_near *n, const char *word, const char *cand) {
    size_t len = strlen(word);
    int limit = len <= 2 ? 0 : len <= 4 ? 1 : len <= 8 ? 2 : 3; /* "k" is not near "x" */
    int e = edits(word, cand, limit);
    if (e > 0 && e <= limit && (!n->best || e < n->dist)) n->best = cand, n->dist = e;
}
