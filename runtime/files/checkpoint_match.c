/* runtime/files/checkpoint_match.c — a checkpoint against the run that
 * resumes it: the flags that change the arithmetic, and the metrics file
 * that run names, which must start with the bytes the checkpoint recorded. */
#include "runtime/files/internal.h"
#include "base/err.h"

#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "base/sha256.h"

/* "--k=v;--k=v" split into at most max (key, value) pairs in buf; -1 when
 * an entry is not --KEY=VALUE or the list is longer. */
static int split_flags(const char *list, char *buf, size_t len, char **key, char **val, int max) {
    snprintf(buf, len, "%s", list);
    int n = 0;
    char *save;
    if (!*buf) return -1;
    for (char *t = buf;; t = NULL) {
        char *item = strtok_r(t, ";", &save);
        if (!item) break;
        char *eq = strchr(item, '=');
        if (n == max || !eq || strncmp(item, "--", 2) || eq == item + 2) return -1;
        *eq = 0;
        key[n] = item, val[n++] = eq + 1;
    }
    /* strtok_r skips empty items: ";;" or a leading ';' is malformed too. */
    if (strstr(list, ";;") || *list == ';' || list[strlen(list) - 1] == ';') return -1;
    return n;
}

/* A flag recorded only when given (older checkpoints lack it): absent on
 * one side, it differs as "unset" rather than marking the file corrupt. */
static int optional_flag(const char *key) { return !strcmp(key, "--schedule-steps"); }

static int differs(const char *path, const char *key, const char *saved, const char *mine,
                   char *err, size_t errlen) {
    char b[64];
    return base_fail(err, errlen,
                     "%s was written with %s %s; this run has %s %s (a resume continues bit for "
                     "bit only with the same flags)",
                     path, key, rt_ckpt_shown(saved, b), key, mine);
}

int rt_ckpt_check_flags(const char *path, const char *saved, const char *mine, char *err,
                        size_t errlen) {
    enum { MAX = 32 };
    char a[1024], m[1024], *ak[MAX], *av[MAX], *mk[MAX], *mv[MAX], b[64];
    int na = split_flags(saved, a, sizeof a, ak, av, MAX);
    int nm = split_flags(mine, m, sizeof m, mk, mv, MAX);
    CKPT_ASSERT(nm >= 0, "this run's flags '%s' do not parse", mine);
    if (na < 0)
        return base_fail(err, errlen,
                         "%s: corrupt checkpoint: 'flags' is '%s' (not --KEY=VALUE;...)", path,
                         rt_ckpt_shown(saved, b));
    for (int i = 0; i < na; i++) {
        int j = 0;
        while (j < nm && strcmp(ak[i], mk[j])) j++;
        for (int k = 0; k < i; k++)
            if (!strcmp(ak[k], ak[i]))
                return base_fail(err, errlen, "%s: corrupt checkpoint: 'flags' holds %s twice",
                                 path, rt_ckpt_shown(ak[i], b));
        if (j == nm && optional_flag(ak[i]))
            return differs(path, ak[i], av[i], "unset", err, errlen);
        if (j == nm)
            return base_fail(err, errlen,
                             "%s: corrupt checkpoint: 'flags' holds %s, not a flag "
                             "this dprun records",
                             path, rt_ckpt_shown(ak[i], b));
        if (strcmp(av[i], mv[j])) return differs(path, mk[j], av[i], mv[j], err, errlen);
    }
    for (int j = 0; j < nm; j++) {
        int i = 0;
        while (i < na && strcmp(ak[i], mk[j])) i++;
        if (i == na && optional_flag(mk[j]))
            return differs(path, mk[j], "unset", mv[j], err, errlen);
        if (i == na)
            return base_fail(err, errlen,
                             "%s: corrupt checkpoint: 'flags' lacks %s (this run has %s %s)", path,
                             mk[j], mk[j], mv[j]);
    }
    return 0;
}

/* A line dprun writes to a metrics file: one JSON object of printable
 * ASCII starting with its epoch (report.c), without its newline. */
static int metrics_line(const unsigned char *p, size_t n) {
    static const char head[] = "{\"epoch\": ";
    if (n < sizeof head || memcmp(p, head, sizeof head - 1) || p[n - 1] != '}') return 0;
    for (size_t i = 0; i < n; i++)
        if (p[i] < 0x20 || p[i] > 0x7e) return 0;
    return 1;
}

int rt_ckpt_check_metrics(const char *path, const rt_ckpt_state *s, const char *metrics,
                          const unsigned char *text, size_t len, char *err, size_t errlen) {
    int64_t want = s->metrics_bytes;
    if (want < 0)
        return base_fail(err, errlen,
                         "%s was written without --metrics; this run has --metrics %s (its file "
                         "would lack the epochs before the checkpoint)",
                         path, metrics);
    if (!text && want > 0)
        return base_fail(err, errlen,
                         "--metrics %s does not exist; the checkpoint %s was written when it held "
                         "%" PRId64 " bytes",
                         metrics, path, want);
    if (!text) return 0;
    if (len < (size_t)want)
        return base_fail(err, errlen,
                         "--metrics %s: %zu bytes, shorter than the %" PRId64
                         " it had at the checkpoint %s; it is not the file that checkpoint was "
                         "written with",
                         metrics, len, want, path);
    unsigned char d[32];
    char hex[65];
    base_sha256(text, (size_t)want, d);
    base_sha256_hex(d, hex);
    if (strcmp(hex, s->metrics_sha256) || (want > 0 && text[want - 1] != '\n'))
        return base_fail(err, errlen,
                         "--metrics %s: its first %" PRId64
                         " bytes are not those the checkpoint %s recorded (SHA-256 differs); it "
                         "is not the metrics file that run wrote (name that file, or resume "
                         "without --metrics)",
                         metrics, want, path);
    /* After the prefix: lines the run wrote after its checkpoint, which
     * the resumed run writes again. Anything else is not dprun's to drop. */
    long line = 1;
    for (int64_t i = 0; i < want; i++) line += text[i] == '\n';
    for (size_t at = (size_t)want; at < len; line++) {
        const unsigned char *nl = memchr(text + at, '\n', len - at);
        size_t n = nl ? (size_t)(nl - (text + at)) : len - at;
        if (!nl || !metrics_line(text + at, n))
            return base_fail(err, errlen,
                             "--metrics %s: line %ld is not a metrics line dprun writes; a resume "
                             "from %s would drop it (the checkpoint recorded the first %" PRId64
                             " bytes)",
                             metrics, line, path, want);
        at += n + 1;
    }
    return 0;
}
