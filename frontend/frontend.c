/* frontend/frontend.c — the public entry points: read the file, make sure
 * it is text, parse, check, and try one elaboration so that every error in
 * the program is reported by fe_parse_*(). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "frontend/ast.h"
#include "base/err.h"
#include "base/file.h"

enum { MAX_SOURCE = 16 << 20 }; /* bytes; a model is a few KiB */

/* Valid UTF-8 without NUL bytes (RFC 3629: no overlongs, no surrogates). */
static int is_text(const unsigned char *s, size_t n) {
    for (size_t i = 0; i < n;) {
        unsigned c = s[i];
        if (c == 0) return 0;
        if (c < 0x80) {
            i++;
            continue;
        }
        size_t len = c >= 0xc2 && c <= 0xdf   ? 2
                     : c >= 0xe0 && c <= 0xef ? 3
                     : c >= 0xf0 && c <= 0xf4 ? 4
                                              : 0;
        if (len == 0 || i + len > n) return 0;
        for (size_t k = 1; k < len; k++)
            if ((s[i + k] & 0xc0) != 0x80) return 0;
        unsigned c1 = s[i + 1];
        if ((c == 0xe0 && c1 < 0xa0) || (c == 0xed && c1 > 0x9f) || (c == 0xf0 && c1 < 0x90) ||
            (c == 0xf4 && c1 > 0x8f))
            return 0;
        i += len;
    }
    return 1;
}

fe_program *fe_parse_string(const char *path, const char *src, size_t len) {
    return fe_parse_string_err(path, src, len, NULL, 0);
}

fe_program *fe_parse_string_err(const char *path, const char *src, size_t len, char *err,
                                size_t errlen) {
    return fe_parse_string_defs(path, src, len, NULL, 0, err, errlen);
}

fe_program *fe_parse_string_defs(const char *path, const char *src, size_t len,
                                 const fe_define *defs, int ndefs, char *err, size_t errlen) {
    fe_program *P = calloc(1, sizeof *P);
    BASE_CHECK_ALLOC(P);
    size_t plen = strlen(path);
    P->path = fe_strndup(&P->arena, path, plen);
    P->diag.path = P->path;
    P->diag.msg = err;
    P->diag.msglen = errlen;
    P->defs = defs;
    P->ndefs = ndefs;
    fe_loc start = {1, 1};
    if (len == 0 || !src) {
        fe_error(&P->diag, start, "empty file");
    } else if (len > MAX_SOURCE) {
        fe_error(&P->diag, start, "file too large (more than %d bytes)", MAX_SOURCE);
    } else if (!is_text((const unsigned char *)src, len)) {
        fe_error(&P->diag, start, "not a text file");
    } else if (fe_run_parser(P, src, len) == 0 && fe_check(P) == 0) {
        /* Types and shapes: elaborate once at the training batch. */
        ir_graph *g = fe_build_graph_err(P, P->train.batch, 1, err, errlen);
        int rc = g ? fe_check_graph(P, g) : -1;
        ir_free(g);
        if (rc == 0) return P;
    }
    fe_free(P);
    return NULL;
}

fe_program *fe_parse_file(const char *path) { return fe_parse_file_err(path, NULL, 0); }

fe_program *fe_parse_file_err(const char *path, char *errbuf, size_t errlen) {
    return fe_parse_file_defs(path, NULL, 0, errbuf, errlen);
}

fe_program *fe_parse_file_defs(const char *path, const fe_define *defs, int ndefs, char *errbuf,
                               size_t errlen) {
    fe_diag d = {path, 0, errbuf, errlen}; /* for the read errors */
    /* A regular file of at most MAX_SOURCE bytes: a FIFO or a device is
     * refused at once rather than read (or waited on) forever. */
    size_t len;
    char why[1024];
    char *buf = (char *)base_file_read(path, MAX_SOURCE, &len, why, sizeof why);
    if (!buf) {
        size_t n = strlen(path); /* fe_error names the file itself */
        fe_error(&d, (fe_loc){0, 0}, "%s",
                 !strncmp(why, path, n) && !strncmp(why + n, ": ", 2) ? why + n + 2 : why);
        return NULL;
    }
    fe_program *p = fe_parse_string_defs(path, buf, len, defs, ndefs, errbuf, errlen);
    free(buf);
    return p;
}

void fe_free(fe_program *p) {
    if (!p) return;
    fe_arena_free(&p->arena);
    free(p);
}

const char *fe_network_name(const fe_program *p) { return p->networks->name; }

const ir_train *fe_train(const fe_program *p) { return &p->train; }

int fe_has_train(const fe_program *p) { return p->trains != NULL; }
