/* driver/args.h — the command lines of dpc and dprun: one table of options
 * per program, parsed into that program's argument struct and printed as
 * its --help.
 *
 * Usage:
 *     typedef struct { const char *path; int info, gpus; } my_args;
 *     static const arg_spec specs[] = {
 *         {"--info", "--info", ARG_FLAG, offsetof(my_args, info), 0, 0, NULL, "print and exit"},
 *         {"--gpus", "--gpus N", ARG_INT, offsetof(my_args, gpus), 1, 4096, NULL, "replicas"},
 *         {"--help", "-h, --help", ARG_HELP, 0, 0, 0, NULL, "this text"},
 *     };
 *     static const arg_parser parser = {
 *         .prog = "prog", .usage = "usage: prog FILE [options]\n",
 *         .specs = specs, .nspecs = sizeof specs / sizeof *specs,
 *         .positional = offsetof(my_args, path), .unknown = "unknown option: %s",
 *         .extra = "more than one file: %s",
 *         .width = 24, .wide_gap = 1};
 *     my_args a = {0};
 *     int rc = arg_parse(&parser, argc, argv, &a);  // 0, 1 (reported), 2: --help, 3: --version
 *     if (rc == 2) arg_usage(&parser, stdout);
 *
 * An option's value comes as `--opt=V` or as the next argument, as its
 * spec's form allows; an argument not starting with '-' (or "-" alone) is
 * the one positional. Errors go to stderr as one line, "PROG: error: ...".
 */
#ifndef DPC_DRIVER_ARGS_H
#define DPC_DRIVER_ARGS_H

#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>

typedef enum {
    ARG_HELP,     /* arg_parse returns 2; also -h */
    ARG_VERSION,  /* arg_parse returns 3 */
    ARG_FLAG,     /* int = lo, or 1 when lo is 0; takes no value */
    ARG_STRING,   /* const char * */
    ARG_NONEMPTY, /* const char *, not empty (`check` is the message) */
    ARG_INT,      /* int in [lo, hi] */
    ARG_LONG,     /* long in [lo, hi] */
    ARG_CHOICE,   /* int: the index of the value in `check` ("a|b") */
    ARG_LR,       /* double: a positive lr up to IR_MAX_LR */
    ARG_SEED,     /* uint64_t */
    ARG_CALL,     /* `call` checks and stores the value */
} arg_kind;

/* Where an option's value may come from. */
typedef enum {
    ARG_EQ_OR_NEXT, /* --opt=V or --opt V (a flag: --opt=V is "takes no value") */
    ARG_NEXT,       /* --opt V only: --opt=V is an unknown option, flags included */
    ARG_EQ,         /* --opt=V or --opt alone (ARG_CALL gets NULL), never the next one */
} arg_form;

typedef struct arg_parser arg_parser;
typedef struct arg_spec arg_spec;

struct arg_spec {
    const char *name;  /* as typed: --gpus (ARG_HELP: also -h) */
    const char *shown; /* the help line's left column */
    arg_kind kind;
    size_t at;         /* where it is stored: offset in the argument struct */
    long lo, hi;       /* ARG_INT, ARG_LONG; ARG_FLAG: lo is the value set */
    const char *check; /* ARG_CHOICE: the values; ARG_NONEMPTY: the message */
    const char *help;  /* each '\n' continues on an indented line */
    arg_form form;
    /* ARG_CALL: val (NULL when an ARG_EQ option has none) into dst, the
     * whole argument struct; 0, or 1 after arg_fail. */
    int (*call)(const arg_parser *p, const arg_spec *s, const char *val, void *dst);
};

struct arg_parser {
    const char *prog;  /* errors read "PROG: error: ..." */
    const char *usage; /* --help's first lines, each ending in '\n' */
    const arg_spec *specs;
    size_t nspecs;
    size_t positional; /* offset of the const char * the positional goes to */
    /* Messages, each with one %s: an unknown option (the argument), a
     * second positional. An option without its value is the same for
     * every program, ARG_MISSING_VALUE. */
    const char *unknown, *extra;
    /* When set, every positional after the first goes here instead of
     * being refused with `extra`: 0, or 1 after arg_fail. */
    int (*more)(void *dst, const char *arg);
    int width;    /* --help: the option column's width */
    int wide_gap; /* --help: spaces after an option wider than that */
};

/* "--steps needs a value": an option given without its value, in every
 * program's words alike. */
#define ARG_MISSING_VALUE "%s needs a value"

/* argv[1..argc-1] into dst: 0, 1 after an error (reported), 2 at --help
 * (nothing printed: the caller prints arg_usage and what it adds), 3 at
 * --version; the first of --help and --version decides, and only when the
 * whole command line parses: an unknown option or a bad value after either
 * is still an error (1). */
int arg_parse(const arg_parser *p, int argc, char **argv, void *dst);

/* p->usage, then a line per option: "  shown  help". */
void arg_usage(const arg_parser *p, FILE *f);

/* "PROG: error: MESSAGE\n" to stderr; returns 1. */
int arg_fail(const char *prog, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
int arg_vfail(const char *prog, const char *fmt, va_list ap);

/* The index of val in "a|b|c", or -1; the values as "a, b, c" in list. */
int arg_choice(const char *choices, const char *val, char *list, size_t len);

#endif
