/* driver/args.c — the table-driven command-line parser (driver/args.h). */
#include "driver/args.h"

#include <ctype.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "base/err.h"
#include "ir/ir.h"
#include "base/parse.h"

int arg_vfail(const char *prog, const char *fmt, va_list ap) {
    fprintf(stderr, "%s: error: ", prog);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    return 1;
}

int arg_fail(const char *prog, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    arg_vfail(prog, fmt, ap);
    va_end(ap);
    return 1;
}

void arg_usage(const arg_parser *p, FILE *f) {
    fputs(p->usage, f);
    for (size_t i = 0; i < p->nspecs; i++) {
        const arg_spec *s = &p->specs[i];
        int wide = (int)strlen(s->shown) > p->width;
        fprintf(f, "  %-*s %*s", p->width, s->shown, wide ? p->wide_gap - 1 : 0, "");
        for (const char *c = s->help; *c; c++) {
            fputc(*c, f);
            if (*c == '\n') fprintf(f, "%*s", p->width + 3, "");
        }
        fputc('\n', f);
    }
}

int arg_choice(const char *choices, const char *val, char *list, size_t len) {
    int found = -1, i = 0;
    list[0] = 0;
    for (const char *p = choices; *p; i++) {
        size_t n = strcspn(p, "|");
        if (strlen(val) == n && !strncmp(p, val, n)) found = i;
        snprintf(list + strlen(list), len - strlen(list), "%s%.*s", i ? ", " : "", (int)n, p);
        p += n + (p[n] == '|');
    }
    return found;
}

/* Stores option s's value val (NULL: none was given) in dst; 1 after an error. */
static int store(const arg_parser *p, const arg_spec *s, const char *val, void *dst) {
    char *at = (char *)dst + s->at, list[128];
    int64_t v;
    double x;
    switch (s->kind) {
    case ARG_HELP:
    case ARG_VERSION: return 0;
    case ARG_FLAG:
        if (val) return arg_fail(p->prog, "%s takes no value", s->name);
        *(int *)at = s->lo ? (int)s->lo : 1;
        return 0;
    case ARG_NONEMPTY:
        if (!*val) return arg_fail(p->prog, "%s", s->check);
        /* fallthrough */
    case ARG_STRING: *(const char **)at = val; return 0;
    case ARG_INT:
    case ARG_LONG:
        if (base_parse_i64(val, &v) || v < s->lo || v > s->hi)
            return arg_fail(p->prog, "%s: '%s' is not an integer in %ld..%ld", s->name, val, s->lo,
                            s->hi);
        if (s->kind == ARG_INT)
            *(int *)at = (int)v;
        else
            *(long *)at = (long)v;
        return 0;
    case ARG_CHOICE: {
        int k = arg_choice(s->check, val, list, sizeof list);
        if (k < 0) return arg_fail(p->prog, "%s: '%s' is not one of %s", s->name, val, list);
        *(int *)at = k;
        return 0;
    }
    case ARG_LR:
        if (base_parse_f64(val, &x) || !(x > 0) || isinf(x))
            return arg_fail(p->prog, "%s: '%s' is not a positive number", s->name, val);
        if (x > IR_MAX_LR)
            return arg_fail(p->prog, "%s: '%s' is above the largest lr, 1e6", s->name, val);
        *(double *)at = x;
        return 0;
    case ARG_SEED:
        if (base_parse_u64(val, (uint64_t *)at))
            return arg_fail(p->prog, "%s: '%s' is not a non-negative integer", s->name, val);
        return 0;
    case ARG_CALL: return s->call(p, s, val, dst);
    }
    return 0;
}

int arg_parse(const arg_parser *p, int argc, char **argv, void *dst) {
    const char **positional = (const char **)((char *)dst + p->positional);
    int stop = 0; /* 2 or 3: the first --help or --version, returned once all parse */
    for (int i = 1; i < argc; i++) {
        const char *arg = argv[i], *val = NULL;
        char opt[64];
        const char *eq = strncmp(arg, "--", 2) == 0 ? strchr(arg, '=') : NULL;
        if (eq && (size_t)(eq - arg) < sizeof opt) {
            snprintf(opt, sizeof opt, "%.*s", (int)(eq - arg), arg);
            val = eq + 1;
        } else {
            snprintf(opt, sizeof opt, "%s", arg);
        }
        const arg_spec *s = NULL;
        for (size_t k = 0; k < p->nspecs && !s; k++)
            if (!strcmp(opt, p->specs[k].name) ||
                (p->specs[k].kind == ARG_HELP && !strcmp(opt, "-h")))
                s = &p->specs[k];
        if (s && val && s->form == ARG_NEXT) s = NULL; /* --opt=V is no name it knows */
        if (s && (s->kind == ARG_HELP || s->kind == ARG_VERSION)) {
            if (!stop) stop = s->kind == ARG_HELP ? 2 : 3;
        } else if (s) {
            if (!val && s->kind != ARG_FLAG && s->form != ARG_EQ) {
                /* `--epochs --steps 5` lacks a value: the next option is
                 * never taken as one (`--opt=--x` still passes such a value) */
                if (i + 1 >= argc || (argv[i + 1][0] == '-' && argv[i + 1][1] == '-' &&
                                      isalpha((unsigned char)argv[i + 1][2])))
                    return arg_fail(p->prog, ARG_MISSING_VALUE, opt);
                val = argv[++i];
            }
            if (store(p, s, val, dst)) return 1;
        } else if (arg[0] == '-' && arg[1]) {
            base_near n = {0};
            for (size_t k = 0; k < p->nspecs; k++) base_near_try(&n, opt, p->specs[k].name);
            if (!n.best) return arg_fail(p->prog, p->unknown, arg);
            char msg[256];
            snprintf(msg, sizeof msg, p->unknown, arg);
            return arg_fail(p->prog, "%s; did you mean '%s'?", msg, n.best);
        } else if (*positional && p->more) {
            if (p->more(dst, arg)) return 1;
        } else if (*positional) {
            return arg_fail(p->prog, p->extra, arg);
        } else {
            *positional = arg;
        }
    }
    return stop;
}
