/* ir/err.c — see err.h. */
#include "ir/err.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

int ir_fail(char *err, size_t errlen, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, errlen, fmt, ap);
    va_end(ap);
    return -1;
}

const char *ir_esc(char *buf, size_t len, const char *s) {
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

int ir_has_control(const char *s, size_t n) {
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c < 0x20 || c == 0x7f) return 1;
        if (c == 0xc2 && i + 1 < n && (unsigned char)s[i + 1] >= 0x80 &&
            (unsigned char)s[i + 1] <= 0x9f)
            return 1;
    }
    return 0;
}
