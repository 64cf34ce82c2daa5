/* Tests for the pass registry and the pipeline (passes/pipeline.c): the
 * registry's entries are whole, option values parse and print back, the
 * default pipeline follows the options, text pipelines round-trip and are
 * refused with the part named, and pass_pipeline_run calls the hook per
 * pass and leaves the memory plan with the caller, as pass_run_* and
 * pass_memplan_run would. (tests/unit/test_pipeline.c is the input
 * pipeline's.) */
#include <stdlib.h>

#include "base/err.h"
#include "tests/fixture.h"
#include "tests/harness.h"

static char err[1024];

TEST(registry_entries_are_whole) {
    int n = 0;
    for (const pass_info *p = pass_registry; p->name; p++, n++) {
        CHECK_MSG(p->run && p->about && p->about[0] && p->programs &&
                      !(p->programs & ~(unsigned)(PASS_TRAIN | PASS_EVAL)),
                  "%s", p->name);
        CHECK(pass_find(p->name) == p);
        for (int r = 0; r < PASS_DEPS_MAX && p->requires[r]; r++)
            CHECK_MSG(pass_find(p->requires[r]) && pass_find(p->requires[r]) < p, "%s needs %s",
                      p->name, p->requires[r]);
        for (int r = 0; r < PASS_DEPS_MAX && p->after[r]; r++)
            CHECK_MSG(!strcmp(p->after[r], "*") || pass_find(p->after[r]) < p, "%s after %s",
                      p->name, p->after[r]);
        for (int k = 0; k < PASS_OPTS_MAX && p->opts[k].name; k++) {
            const pass_opt *o = &p->opts[k];
            char text[64];
            double v = -1;
            CHECK(o->help && o->help[0] && pass_opt_find(p, o->name) == k);
            /* the default is a value the option allows, and prints back to itself */
            CHECK_MSG(pass_opt_parse(o, pass_opt_str(o, o->def, text, sizeof text), &v, err,
                                     sizeof err) == 0 &&
                          v == o->def,
                      "%s.%s: %s", p->name, o->name, err);
        }
    }
    CHECK(n == 11 && !strcmp(pass_registry[n - 1].name, "memplan"));
    CHECK(pass_find("layout") != NULL && pass_opt_find(pass_find("fuse"), "x") == -1);
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    pass_list(f);
    fclose(f);
    CHECK(strstr(text, "partition  train: ") && strstr(text, "default 25)") &&
          strstr(text, "after (when in the pipeline): (every other pass)"));
    free(text);
}

TEST(option_values_parse_and_print_back) {
    const pass_opt i = {.name = "n", .type = PASS_OPT_INT, .def = 2, .min = 1, .max = 8},
                   fl = {.name = "x", .type = PASS_OPT_FLOAT, .min = 0, .max = 1, .min_open = 1},
                   e = {.name = "e", .type = PASS_OPT_ENUM, .values = {"a", "b", "c"}},
                   sz = {.name = "s", .type = PASS_OPT_SIZE, .min = 0, .max = 1 << 30};
    double v = 0;
    CHECK(pass_opt_parse(&i, "8", &v, err, sizeof err) == 0 && v == 8);
    CHECK(pass_opt_parse(&i, "9", &v, err, sizeof err) == -1 &&
          strstr(err, "n takes int in [1, 8]") && strstr(err, "'9'"));
    CHECK(pass_opt_parse(&i, "1.5", &v, err, sizeof err) == -1);
    CHECK(pass_opt_parse(&fl, "0", &v, err, sizeof err) == -1 && strstr(err, "(0, 1]"));
    CHECK(pass_opt_parse(&fl, "1", &v, err, sizeof err) == 0 && v == 1);
    CHECK(pass_opt_parse(&fl, "nan", &v, err, sizeof err) == -1);
    CHECK(pass_opt_parse(&e, "c", &v, err, sizeof err) == 0 && v == 2);
    CHECK(pass_opt_parse(&e, "d", &v, err, sizeof err) == -1 &&
          strstr(err, "e takes a|b|c, got 'd'"));
    CHECK(pass_opt_parse(&sz, "4K", &v, err, sizeof err) == 0 && v == 4096);
    CHECK(pass_opt_parse(&sz, "2G", &v, err, sizeof err) == -1 && strstr(err, "a size"));
    char buf[64];
    CHECK_STR(pass_opt_str(&e, 1, buf, sizeof buf), "b");
    const double xs[] = {0.1, 1e-4, 25, 1.0 / 3, 104.0 / (1 << 20)};
    for (int k = 0; k < 5; k++) {
        pass_opt_str(&fl, xs[k], buf, sizeof buf);
        CHECK_MSG(strtod(buf, NULL) == xs[k], "%s", buf);
    }
    CHECK_STR(pass_opt_str(&fl, 0.1, buf, sizeof buf), "0.1");
}

static char *printed(const pass_pipeline *pl) {
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    pass_pipeline_print(pl, f);
    fclose(f);
    return text;
}

TEST(default_pipeline_follows_the_options) {
    pass_options o = pass_default_options();
    pass_pipeline pl;
    pass_pipeline_default(&o, &pl);
    char *t = printed(&pl);
    CHECK_STR(
        t,
        "lower(sync_bn=0),autodiff,optimizer,partition(bucket_mb=25),precision(precision=fp32),fuse,"
        "memplan\n");
    free(t);
    o.fuse = 0, o.memplan = 0, o.bucket_bytes = 3 << 19, o.precision = PASS_PRECISION_BF16;
    pass_pipeline_default(&o, &pl);
    t = printed(&pl);
    CHECK_STR(
        t,
        "lower(sync_bn=0),autodiff,optimizer,partition(bucket_mb=1.5),precision(precision=bf16)\n");
    free(t);
    CHECK(pass_pipeline_find(&pl, "fuse") == -1 && pass_pipeline_find(&pl, "partition") == 3);
    CHECK(pass_pipeline_set(&pl, "partition", "bucket_mb", 2) == 0 && pl.step[3].arg[0] == 2);
    CHECK(pass_pipeline_set(&pl, "fuse", "x", 2) == -1);
    CHECK(pass_pipeline_remove(&pl, "precision,fuse", err, sizeof err) == 0 && pl.n == 4);
    CHECK(pass_pipeline_remove(&pl, "fuse,nope", err, sizeof err) == -1 &&
          strstr(err, "unknown pass 'nope'"));
}

TEST(text_pipelines_round_trip_and_take_their_defaults) {
    pass_options o = pass_default_options();
    o.bucket_bytes = 1 << 20;
    pass_pipeline base, pl, again;
    pass_pipeline_default(&o, &base);
    /* options not given come from base; given ones win; positional is the first */
    CHECK(pass_pipeline_parse("lower,autodiff,optimizer,partition,precision(bf16)", &base, &pl, err,
                              sizeof err) == 0);
    CHECK(pl.n == 5 && pl.step[3].arg[0] == 1 && pl.step[4].arg[0] == PASS_PRECISION_BF16);
    CHECK(pass_pipeline_parse("lower,autodiff,optimizer,partition(bucket_mb=0.5)", &base, &pl, err,
                              sizeof err) == 0 &&
          pl.step[3].arg[0] == 0.5);
    CHECK(pass_pipeline_parse("lower,autodiff,optimizer,partition(0.25),fuse()", NULL, &pl, err,
                              sizeof err) == 0 &&
          pl.step[3].arg[0] == 0.25 && pl.n == 5);
    CHECK(pass_pipeline_parse("lower,autodiff,optimizer,partition", NULL, &pl, err, sizeof err) ==
              0 &&
          pl.step[3].arg[0] == 25); /* no base: the registry's default */
    /* what print writes, parse reads back to the same steps */
    o.bucket_bytes = 104, o.precision = PASS_PRECISION_BF16;
    pass_pipeline_default(&o, &base);
    char *t = printed(&base);
    t[strlen(t) - 1] = 0;
    CHECK_MSG(pass_pipeline_parse(t, NULL, &again, err, sizeof err) == 0, "%s", err);
    CHECK(again.n == base.n &&
          !memcmp(again.step, base.step, (size_t)base.n * sizeof base.step[0]));
    free(t);
}

TEST(bad_pipelines_are_refused_naming_the_part) {
    const struct {
        const char *spec, *want;
    } bad[] = {
        {"lower,frob", "unknown pass 'frob' (known: lower autodiff"},
        {"lower,autodiff,optimizer,partition(size=1)",
         "unknown option 'size' in 'partition(size=1)'"},
        {"lower,autodiff,optimizer,partition(bucket_mb=-1)",
         "'partition(bucket_mb=-1)': bucket_mb takes"},
        {"lower,precision(fp16)", "precision takes fp32|bf16|tf32, got 'fp16'"},
        {"lower,precision(bf16,fp32)", "'fp32' in 'precision(bf16,fp32)': only the first"},
        {"lower,precision(precision=bf16,precision=bf16)", "option 'precision' given twice"},
        {"lower,fuse(1)", "'fuse(1)': pass 'fuse' takes no options"},
        {"lower,fuse,lower", "pass 'lower' appears twice"},
        {"lower,optimizer", "pass 'optimizer' needs 'autodiff' before it (train program)"},
        {"fuse,lower", "pass 'fuse' needs 'lower' before it"},
        {"lower,fuse,precision", "pass 'precision' must come before 'fuse'"},
        {"lower,memplan,fuse", "pass 'fuse' must come before 'memplan'"},
        {"lower,autodiff,optimizer,partition(bucket_mb=1", "'partition(bucket_mb=1': unbalanced"},
        {"lower,fuse)", "'fuse)': unbalanced parentheses"},
        {"lower,(bf16)", "'(bf16)': a pass name is missing"},
        {"lower,,fuse", "an empty element at offset 6 of 'lower,,fuse'"},
        {"", "an empty pipeline"},
    };
    pass_pipeline pl;
    for (size_t k = 0; k < sizeof bad / sizeof bad[0]; k++) {
        err[0] = 0;
        CHECK_MSG(pass_pipeline_parse(bad[k].spec, NULL, &pl, err, sizeof err) == -1 &&
                      strstr(err, "--passes: ") == err && strstr(err, bad[k].want),
                  "'%s': %s", bad[k].spec, err);
    }
    /* the eval program is checked too: its steps are those that apply to it */
    pl.n = 0;
    pl.step[pl.n++].pass = pass_find("precision");
    pl.step[pl.n++].pass = pass_find("lower");
    CHECK(pass_pipeline_check(&pl, err, sizeof err) == -1 && strstr(err, "needs 'lower'"));
    /* a graph read back after lower and autodiff: those count as earlier, and do not run again */
    pass_pipeline base = {.done = 1u << (pass_find("lower") - pass_registry) |
                                  1u << (pass_find("autodiff") - pass_registry)};
    CHECK_MSG(
        pass_pipeline_parse("optimizer,partition,fuse,memplan", &base, &pl, err, sizeof err) == 0 &&
            pl.done == base.done,
        "%s", err);
    CHECK(pass_pipeline_parse("optimizer,lower", &base, &pl, err, sizeof err) == -1 &&
          strstr(err, "pass 'lower' already ran on the graph"));
    base.done = 0;
    CHECK(pass_pipeline_parse("optimizer", &base, &pl, err, sizeof err) == -1 &&
          strstr(err, "pass 'optimizer' needs 'autodiff' before it"));
}

typedef struct {
    int calls[3], last_index, stop_at;
    char order[256];
} seen;

static int record(void *user, unsigned program, int index, const pass_info *p, const ir_graph *g,
                  int nodes_before, double ms, char *e, size_t elen) {
    seen *s = user;
    s->calls[program]++;
    size_t len = strlen(s->order);
    snprintf(s->order + len, sizeof s->order - len, "%s%d:%s", len ? " " : "", index, p->name);
    if (ms < 0 || nodes_before <= 0 || !g->n) return base_fail(e, elen, "bad figures");
    if (index == s->stop_at) return base_fail(e, elen, "stopped at %s", p->name);
    return 0;
}

TEST(pipeline_runs_each_applicable_step_and_leaves_the_plan) {
    fe_program *fp = fe_parse_file("models/cnn_small.net");
    CHECK(fp != NULL);
    if (!fp) return;
    pass_options o = pass_default_options();
    pass_pipeline pl;
    pass_pipeline_default(&o, &pl);
    ir_graph *train = fe_build_graph(fp, 4, 1), *eval = fe_build_graph(fp, 4, 0);
    fmt_memplan *m[2] = {NULL, NULL};
    seen s = {.stop_at = -1};
    pass_env te = {fe_train(fp), &m[0], record, &s}, ee = {NULL, &m[1], record, &s};
    CHECK_MSG(pass_pipeline_run(&pl, PASS_TRAIN, &train, &te, err, sizeof err) == 0, "%s", err);
    CHECK_MSG(pass_pipeline_run(&pl, PASS_EVAL, &eval, &ee, err, sizeof err) == 0, "%s", err);
    CHECK(s.calls[PASS_TRAIN] == 7 && s.calls[PASS_EVAL] == 4);
    CHECK_STR(s.order, "0:lower 1:autodiff 2:optimizer 3:partition 4:precision 5:fuse 6:memplan "
                       "0:lower 4:precision 5:fuse 6:memplan");
    /* memplan's plan is pass_memplan_run's on the final graph; the graph is
     * the one pass_run_* makes */
    fmt_memplan *direct = pass_memplan_run(train, err, sizeof err);
    CHECK(m[0] && m[1] && direct && m[0]->arena_bytes == direct->arena_bytes &&
          m[0]->n == direct->n &&
          !memcmp(m[0]->offset, direct->offset, (size_t)direct->n * sizeof direct->offset[0]));
    ir_graph *legacy = fe_build_graph(fp, 4, 1);
    CHECK(pass_run_train(&legacy, fe_train(fp), &o, err, sizeof err) == 0);
    CHECK(legacy->n == train->n && ir_graph_hash(legacy) == ir_graph_hash(train));
    /* a hook's refusal stops the pipeline, its message kept */
    ir_graph *g = fe_build_graph(fp, 4, 1);
    seen stop = {.stop_at = 2};
    pass_env se = {fe_train(fp), NULL, record, &stop};
    CHECK(pass_pipeline_run(&pl, PASS_TRAIN, &g, &se, err, sizeof err) == -1 &&
          !strcmp(err, "stopped at optimizer") && stop.calls[PASS_TRAIN] == 3);
    fmt_memplan_free(m[0]);
    fmt_memplan_free(m[1]);
    fmt_memplan_free(direct);
    ir_free(train), ir_free(eval), ir_free(legacy), ir_free(g);
    fe_free(fp);
}

int main(void) {
    RUN(registry_entries_are_whole);
    RUN(option_values_parse_and_print_back);
    RUN(default_pipeline_follows_the_options);
    RUN(text_pipelines_round_trip_and_take_their_defaults);
    RUN(bad_pipelines_are_refused_naming_the_part);
    RUN(pipeline_runs_each_applicable_step_and_leaves_the_plan);
    return harness_done();
}
