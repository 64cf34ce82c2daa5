/* tests/unit/test_args.c — the command-line parser (driver/args.h): value
 * forms, kinds, messages and the --help layout. The programs' own tables are
 * covered through bin/dpc and bin/dprun by tests/cli_test.sh and
 * tests/dprun_test.sh. */
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "driver/args.h"
#include "tests/harness.h"

typedef struct {
    const char *path, *name, *dump;
    int flag, level, n, choice, dumped;
    long big;
    double lr;
} targs;

#define AT(f) offsetof(targs, f)

static int store_dump(const arg_parser *p, const arg_spec *s, const char *v, void *dst) {
    targs *a = dst;
    (void)p, (void)s;
    a->dumped = 1;
    a->dump = v;
    return 0;
}

static const arg_spec specs[] = {
    {"--flag", "--flag", ARG_FLAG, AT(flag), 0, 0, NULL, "a flag", ARG_EQ_OR_NEXT, NULL},
    {"--two", "--two", ARG_FLAG, AT(level), 2, 0, NULL, "level 2", ARG_NEXT, NULL},
    {"--name", "--name S", ARG_NONEMPTY, AT(name), 0, 0, "--name needs a name",
     "a name\non two lines", ARG_EQ_OR_NEXT, NULL},
    {"--n", "--n N", ARG_INT, AT(n), 1, 8, NULL, "1..8", ARG_NEXT, NULL},
    {"--big", "--big N", ARG_LONG, AT(big), 0, 1000000, NULL, "a long", ARG_EQ_OR_NEXT, NULL},
    {"--pick", "--pick a|b|c-is-long", ARG_CHOICE, AT(choice), 0, 0, "a|b|c-is-long", "one",
     ARG_EQ_OR_NEXT, NULL},
    {"--lr", "--lr X", ARG_LR, AT(lr), 0, 0, NULL, "an lr", ARG_EQ_OR_NEXT, NULL},
    {"--dump", "--dump[=P]", ARG_CALL, 0, 0, 0, NULL, "optional value", ARG_EQ, store_dump},
    {"--help", "-h, --help", ARG_HELP, 0, 0, 0, NULL, "this text", ARG_EQ_OR_NEXT, NULL},
};

static const arg_parser parser = {
    .prog = "t",
    .usage = "usage: t FILE\n",
    .specs = specs,
    .nspecs = sizeof specs / sizeof *specs,
    .positional = AT(path),
    .unknown = "unknown option: %s",
    .extra = "more than one file: %s",
    .width = 12,
    .wide_gap = 2,
};

/* arg_parse over a NULL-terminated list; its stderr into msg. */
static int parse(targs *a, char *msg, size_t len, ...) {
    char *argv[16] = {"t"};
    int argc = 1;
    va_list ap;
    va_start(ap, len);
    for (char *s; (s = va_arg(ap, char *)) && argc < 15;) argv[argc++] = s;
    va_end(ap);
    memset(a, 0, sizeof *a);
    FILE *tmp = tmpfile();
    fflush(stderr);
    int saved = dup(2);
    dup2(fileno(tmp), 2);
    int rc = arg_parse(&parser, argc, argv, a);
    fflush(stderr);
    dup2(saved, 2);
    close(saved);
    rewind(tmp);
    size_t n = fread(msg, 1, len - 1, tmp);
    msg[n] = 0;
    fclose(tmp);
    return rc;
}

TEST(values_and_forms) {
    targs a;
    char m[256];
    CHECK(parse(&a, m, sizeof m, "f.net", "--flag", "--two", "--name=x", "--n", "3", "--big=7",
                "--pick", "c-is-long", "--lr", "0.5", NULL) == 0);
    CHECK(!strcmp(a.path, "f.net") && a.flag == 1 && a.level == 2 && !strcmp(a.name, "x"));
    CHECK(a.n == 3 && a.big == 7 && a.choice == 2 && a.lr == 0.5 && m[0] == 0);
    /* ARG_EQ: never the next argument (that is the positional) */
    CHECK(parse(&a, m, sizeof m, "--dump", "f.net", NULL) == 0);
    CHECK(a.dumped && !a.dump && !strcmp(a.path, "f.net"));
    CHECK(parse(&a, m, sizeof m, "--dump=", NULL) == 0 && a.dumped && !strcmp(a.dump, ""));
    /* "-" and "" are positionals */
    CHECK(parse(&a, m, sizeof m, "-", NULL) == 0 && !strcmp(a.path, "-"));
    CHECK(parse(&a, m, sizeof m, "", NULL) == 0 && a.path && !a.path[0]);
    CHECK(parse(&a, m, sizeof m, "-h", NULL) == 2 && parse(&a, m, sizeof m, "--help=1", NULL) == 2);
    /* --help answers only for a command line that parses in full */
    CHECK(parse(&a, m, sizeof m, "--help", "--flag", "f.net", NULL) == 2 && m[0] == 0);
    CHECK(parse(&a, m, sizeof m, "--help", "--bogus", NULL) == 1 &&
          !strcmp(m, "t: error: unknown option: --bogus\n"));
    CHECK(parse(&a, m, sizeof m, "--bogus", "-h", NULL) == 1);
    CHECK(parse(&a, m, sizeof m, "-h", "--n", "9", NULL) == 1);
}

TEST(messages) {
    targs a;
    char m[256];
    struct {
        const char *arg[3], *want;
    } cases[] = {
        {{"--n=3"}, "t: error: unknown option: --n=3\n"}, /* ARG_NEXT */
        {{"--two=1"}, "t: error: unknown option: --two=1\n"},
        {{"--flag=1"}, "t: error: --flag takes no value\n"},
        {{"--n"}, "t: error: --n needs a value\n"},
        {{"--n", "9"}, "t: error: --n: '9' is not an integer in 1..8\n"},
        {{"--name="}, "t: error: --name needs a name\n"},
        {{"--pick", "d"}, "t: error: --pick: 'd' is not one of a, b, c-is-long\n"},
        {{"--lr", "-1"}, "t: error: --lr: '-1' is not a positive number\n"},
        {{"--lr", "2e6"}, "t: error: --lr: '2e6' is above the largest lr, 1e6\n"},
        {{"-x"}, "t: error: unknown option: -x\n"},
        {{"a", "b"}, "t: error: more than one file: b\n"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        int rc = parse(&a, m, sizeof m, cases[i].arg[0], cases[i].arg[1], cases[i].arg[2]);
        CHECK_MSG(rc == 1 && !strcmp(m, cases[i].want), "%s: rc %d, '%s'", cases[i].arg[0], rc, m);
    }
}

TEST(usage_layout) {
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    arg_usage(&parser, f);
    fclose(f);
    /* padded to the column; wider ones get wide_gap spaces; '\n' indents */
    CHECK(strstr(buf, "usage: t FILE\n  --flag       a flag\n") == buf);
    CHECK(strstr(buf, "  --name S     a name\n               on two lines\n") != NULL);
    CHECK(strstr(buf, "  --pick a|b|c-is-long  one\n") != NULL);
    free(buf);
}

int main(void) {
    RUN(values_and_forms);
    RUN(messages);
    RUN(usage_layout);
    return harness_done();
}
