/* Tests for ir/text.c: the IR text form reads back losslessly (every node
 * field, floats bit for bit, the train section), a graph dumped after any
 * pass and continued through the rest (dpc_compile's --from-ir) gives the
 * full run's final graph and plan bytes, and bad text is refused at
 * FILE:LINE:COL naming what was expected. */
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "driver/compile.h"
#include "frontend/frontend.h"
#include "base/err.h"
#include "base/file.h"
#include "ir/text.h"
#include "passes/passes.h"
#include "tests/harness.h"

static char err[4096];

static char *dump_text(const ir_text_file *t, size_t *len) {
    char *text = NULL;
    FILE *f = open_memstream(&text, len);
    ir_text_write(t, f);
    fclose(f);
    return text;
}

/* Every field a pass, codegen or the plan reads. */
static int same_node(const ir_node *a, const ir_node *b) {
    int nia = ir_op_num_iattrs(a->op), nfa = ir_op_num_fattrs(a->op);
    if (a->op != b->op || a->ninputs != b->ninputs || !ir_type_equal(&a->type, &b->type) ||
        a->flags != b->flags || strcmp(a->name, b->name) || a->line != b->line ||
        a->col != b->col || a->group != b->group)
        return 0;
    for (int j = 0; j < a->ninputs; j++)
        if (a->input[j] != b->input[j]) return 0;
    for (int j = 0; j < nia; j++)
        if (a->iattr[j] != b->iattr[j]) return 0;
    return memcmp(a->fattr, b->fattr, (size_t)nfa * sizeof a->fattr[0]) == 0; /* bit for bit */
}

static int same_graph(const ir_graph *a, const ir_graph *b) {
    if (!a || !b || a->n != b->n) return 0;
    for (int i = 0; i < a->n; i++)
        if (!same_node(&a->nodes[i], &b->nodes[i])) return 0;
    return 1;
}

static int same_doubles(const double *a, const double *b, int n) {
    return memcmp(a, b, (size_t)n * sizeof *a) == 0;
}

/* Every field of ir/ir.h's table equal (doubles bit for bit). */
static int same_train(const ir_train *a, const ir_train *b) {
    for (int i = 0; i < IR_TRAIN_NFIELDS; i++) {
        const ir_train_field *f = &ir_train_fields[i];
        const void *x = ir_train_cptr(a, f), *y = ir_train_cptr(b, f);
        int same = 1;
        switch (f->kind) {
        case IR_TK_I32:
        case IR_TK_ENUM: same = *(const int *)x == *(const int *)y; break;
        case IR_TK_F64: same = same_doubles(x, y, 1); break;
        case IR_TK_F64X3: same = same_doubles(x, y, 3); break;
        case IR_TK_STR: same = !strcmp(x, y); break;
        case IR_TK_LR:
            same = a->lr_steps == b->lr_steps &&
                   !memcmp(a->lr_epoch, b->lr_epoch, (size_t)a->lr_steps * sizeof(int)) &&
                   same_doubles(a->lr_value, b->lr_value, a->lr_steps);
            break;
        case IR_TK_LR_PART: break;
        }
        if (!same) return 0;
    }
    return 1;
}

/* The `# train` line's positions (ir/ir.h's rank column) are 0, 1, ...
 * once each, an optional part's keys side by side, and only the LR
 * field's parts left off the line. */
TEST(train_table_ranks_cover_the_line) {
    int seen[IR_TRAIN_NFIELDS] = {0}, on_line = 0;
    for (int i = 0; i < IR_TRAIN_NFIELDS; i++) {
        const ir_train_field *f = &ir_train_fields[i];
        CHECK((f->rank < 0) == (f->kind == IR_TK_LR_PART));
        if (f->rank < 0) continue;
        CHECK(f->rank < IR_TRAIN_NFIELDS && !seen[f->rank]);
        if (f->rank < IR_TRAIN_NFIELDS) seen[f->rank] = 1;
        on_line++;
    }
    for (int r = 0; r < on_line; r++) CHECK(seen[r]);
    int last_when = -1, parts = 0;
    for (int r = 0; r < on_line; r++)
        for (int i = 0; i < IR_TRAIN_NFIELDS; i++)
            if (ir_train_fields[i].rank == r) {
                int w = (int)ir_train_fields[i].when;
                parts += w != last_when && w != IR_TW_ALWAYS;
                last_when = w;
            }
    CHECK(parts == 4); /* OPTIM, CURVE, NONZERO, TOKENS: one run each */
}

/* Graphs straight from the frontend and the passes, through the text and
 * back: field for field, and the text again. */
TEST(graphs_read_back_field_for_field) {
    const char *models[] = {"models/cnn_small.net", "models/resnet18.net"};
    for (int m = 0; m < 2; m++) {
        fe_program *p = fe_parse_file_err(models[m], err, sizeof err);
        CHECK_MSG(p != NULL, "%s", err);
        if (!p) continue;
        ir_text_file t;
        memset(&t, 0, sizeof t);
        snprintf(t.model, sizeof t.model, "%s", fe_network_name(p));
        snprintf(t.source, sizeof t.source, "%s", models[m]);
        snprintf(t.after, sizeof t.after, "fuse");
        t.has_train = 1;
        t.train = *fe_train(p);
        t.train.lr_value[0] = 1.0 / 3; /* needs all 17 digits */
        if (m) { /* resnet18: a poly curve and a non-default optimizer, the header's optional fields */
            t.train.lr_steps = 1, t.train.lr_kind = IR_LR_POLY, t.train.lr_final = 1.0 / 7;
            t.train.lr_power = 0.5;
            t.train.optimizer = IR_OPT_LAMB, t.train.exclude = IR_EXCLUDE_BIAS;
            t.train.beta2 = 1.0 / 7, t.train.eps = 1e-6;
            t.train.warmup_epochs = 0, t.train.warmup_steps = 3, t.train.lr_decay_steps = 7;
            t.train.clip_norm = 1.0 / 3;
            t.train.init_kind = IR_TRAIN_INIT_NORMAL, t.train.init_std = 0.25;
        }
        t.train.batch = 4, t.train.eval_batch = 5; /* the graphs' batches */
        t.graph[0] = fe_build_graph_err(p, 4, 1, err, sizeof err);
        t.graph[1] = fe_build_graph_err(p, 5, 0, err, sizeof err);
        fe_free(p);
        pass_options o = pass_default_options();
        o.precision = m ? PASS_PRECISION_BF16 : PASS_PRECISION_FP32;
        CHECK_MSG(pass_run_train(&t.graph[0], &t.train, &o, err, sizeof err) == 0, "%s", err);
        CHECK_MSG(pass_run_eval(&t.graph[1], &o, err, sizeof err) == 0, "%s", err);
        /* names and flags the passes never make (UTF-8 as \xHH; a control
         * character would be refused), floats that need every digit */
        ir_node *last = &t.graph[0]->nodes[t.graph[0]->n - 1];
        snprintf(last->name, sizeof last->name, "a \"b\" \\c\xc3\xa9 #[x]");
        last->flags |= 1u << 12;
        for (int i = 0; i < t.graph[0]->n; i++)
            if (t.graph[0]->nodes[i].op == IR_OP_EMA) t.graph[0]->nodes[i].fattr[1] = 1.0 / 3;
        size_t len;
        char *text = dump_text(&t, &len);
        ir_text_file back;
        CHECK_MSG(ir_text_parse("g.ir", text, len, &back, err, sizeof err) == 0, "%s", err);
        CHECK(same_graph(t.graph[0], back.graph[0]) && same_graph(t.graph[1], back.graph[1]));
        CHECK(back.has_train && same_train(&t.train, &back.train));
        CHECK_STR(back.model, t.model);
        CHECK_STR(back.source, t.source);
        CHECK_STR(back.after, "fuse");
        size_t len2;
        char *again = dump_text(&back, &len2);
        CHECK(len == len2 && !memcmp(text, again, len));
        CHECK(strstr(text, "=0.3333333333333333 ") != NULL);
        CHECK((strstr(text, " optimizer=lamb ") && strstr(text, " exclude=2 ")) == m);
        CHECK((strstr(text, " nesterov=") == NULL) == !m); /* sgd with defaults: as before */
        CHECK((strstr(text, " warmup_steps=3 lr_decay_steps=7 clip_norm=0.3333333333333333 "
                            "init_kind=1 init_std=0.25") != NULL) == m);
        CHECK(m == 0 || strstr(text, ":bf16") != NULL);
        CHECK((strstr(text, " lr_curve=poly lr_final=0.14285714285714285 lr_power=0.5 ") != NULL) ==
              m);
        free(again);
        free(text);
        ir_text_free(&back);
        ir_text_free(&t);
    }
}

/* One dpc_compile into memory: the report's text and, with out, the plan's bytes. */
static int compile(dpc_options o, const char *out, char **report, unsigned char **plan,
                   size_t *plan_len) {
    size_t len;
    FILE *f = open_memstream(report, &len);
    o.report = f;
    o.out = out;
    o.target = "cpu";
    int rc = dpc_compile(&o, err, sizeof err);
    fclose(f);
    if (!rc && out) {
        char why[256];
        *plan = base_file_read(out, (size_t)1 << 30, plan_len, why, sizeof why);
        if (!*plan) rc = base_fail(err, sizeof err, "%s", why);
    }
    return rc;
}

/* The models in models/, sorted (the model-zoo nets included: most of this
 * test's time). */
static int list_models(char names[][128], int max) {
    DIR *d = opendir("models");
    int n = 0;
    for (struct dirent *e; d && (e = readdir(d)) && n < max;) {
        size_t len = strlen(e->d_name);
        if (len > 4 && len < 100 && !strcmp(e->d_name + len - 4, ".net"))
            snprintf(names[n++], 128, "models/%.100s", e->d_name);
    }
    if (d) closedir(d);
    qsort(names, (size_t)n, sizeof names[0], (int (*)(const void *, const void *))strcmp);
    return n;
}

/* Every model, fp32 and bf16, fused and not, dumped after elaborate and
 * after each pass of its pipeline: dump -> read -> dump is the same text,
 * and continuing from the dump gives the full run's final graph (its dump)
 * and plan. */
TEST(every_pass_boundary_continues_to_the_same_plan) {
    char models[16][128], path[64];
    int nm = list_models(models, 16), boundaries = 0, expected = 0;
    CHECK(nm >= 4);
    snprintf(path, sizeof path, "/tmp/dpc_test_irtext_XXXXXX");
    int fd = mkstemp(path);
    CHECK(fd >= 0);
    if (fd >= 0) close(fd);
    for (int m = 0; m < nm; m++)
        for (int variant = 0; variant < 4; variant++) {
            dpc_options o = {0};
            o.precision = variant & 1 ? "bf16" : "fp32";
            o.no_fuse = variant >> 1;
            o.model = models[m];
            o.dump_ir = 1;
            pass_pipeline pl;
            CHECK_MSG(dpc_pipeline(&o, &pl, err, sizeof err) == 0, "%s", err);
            const char *passes[PASS_PIPELINE_MAX + 1] = {"elaborate"};
            int np = 1;
            for (int i = 0; i < pl.n; i++) passes[np++] = pl.step[i].pass->name;
            CHECK(np >= (o.no_fuse ? 7 : 8));
            expected += np;
            char *full = NULL, *text = NULL, *final = NULL;
            unsigned char *plan = NULL, *plan2 = NULL;
            size_t plan_len = 0, plan2_len = 0;
            CHECK_MSG(compile(o, path, &full, &plan, &plan_len) == 0, "%s", err);
            for (int k = 0; k < np && plan; k++) {
                const char *what = passes[k];
                dpc_options d = o;
                d.dump_ir = 1;
                d.dump_after = what;
                CHECK_MSG(compile(d, NULL, &text, NULL, NULL) == 0, "%s after %s: %s", models[m],
                          what, err);
                ir_text_file t;
                size_t len = strlen(text), len2 = 0;
                CHECK_MSG(ir_text_parse("d.ir", text, len, &t, err, sizeof err) == 0, "%s", err);
                char *again = dump_text(&t, &len2);
                CHECK_MSG(len == len2 && !memcmp(text, again, len), "%s after %s: text differs",
                          models[m], what);
                CHECK_STR(t.after, what);
                ir_text_free(&t);
                free(again);

                dpc_options c = o;
                c.model = NULL;
                c.from_ir = "d.ir";
                c.source = text;
                c.source_len = len;
                CHECK_MSG(compile(c, path, &final, &plan2, &plan2_len) == 0, "%s after %s: %s",
                          models[m], what, err);
                CHECK_MSG(final && !strcmp(final, full), "%s %s%s after %s: final graph differs",
                          models[m], o.precision, o.no_fuse ? " unfused" : "", what);
                CHECK_MSG(plan2 && plan2_len == plan_len && !memcmp(plan, plan2, plan_len),
                          "%s %s%s after %s: plan differs", models[m], o.precision,
                          o.no_fuse ? " unfused" : "", what);
                boundaries++;
                free(text);
                free(final);
                free(plan2);
                text = final = NULL;
                plan2 = NULL;
            }
            free(full);
            free(plan);
        }
    unlink(path);
    CHECK(boundaries == expected && expected >= nm * 30);
}

/* ---- refusals ---------------------------------------------------------- */

static const char *GOOD = "# graph: 4 nodes\n"
                          "%0 = input \"x\" : [2,3]\n"
                          "%1 = param \"w\" init=xavier : [4,3]\n"
                          "%2 = dense %0 %1 : [2,4]\n"
                          "%3 = relu %2 : [2,4] [output]\n";

/* GOOD with line `line` (1-based) replaced by with (NULL: dropped). */
static char *edit(int line, const char *with) {
    static char buf[1024];
    size_t used = 0;
    const char *p = GOOD;
    for (int l = 1; *p; l++) {
        const char *nl = strchr(p, '\n');
        size_t n = (size_t)(nl - p) + 1;
        if (l != line)
            used += (size_t)snprintf(buf + used, sizeof buf - used, "%.*s", (int)n, p);
        else if (with)
            used += (size_t)snprintf(buf + used, sizeof buf - used, "%s\n", with);
        p += n;
    }
    return buf;
}

static void refused(const char *text, size_t len, const char *want) {
    ir_text_file t;
    int rc = ir_text_parse("t.ir", text, len, &t, err, sizeof err);
    CHECK_MSG(rc != 0 && !strcmp(err, want), "got '%s', want '%s'", rc ? err : "success", want);
    CHECK(t.graph[0] == NULL && t.graph[1] == NULL);
}

static void refused_str(const char *text, const char *want) { refused(text, strlen(text), want); }

TEST(good_text_reads) {
    ir_text_file t;
    CHECK_MSG(ir_text_parse("t.ir", GOOD, strlen(GOOD), &t, err, sizeof err) == 0, "%s", err);
    CHECK(t.graph[0] && t.graph[0]->n == 4 && !t.graph[1] && !t.has_train);
    CHECK(t.graph[0] && t.graph[0]->nodes[3].flags == IR_FLAG_OUTPUT);
    ir_text_free(&t);
}

TEST(errors_name_file_line_col_and_what_was_expected) {
    refused_str(edit(4, "%2 = dense %0 %1 [2,4]"),
                "t.ir:4:18: error: unexpected '[', expected ':' and the type");
    refused_str(edit(4, "%2 = densee %0 %1 : [2,4]"), "t.ir:4:6: error: unknown op 'densee'");
    refused_str(edit(4, "%2 = dense %0 : [2,4]"), "t.ir:4:15: error: dense takes 2 inputs, got 1");
    refused_str(edit(5, "%3 = relu %2 %2 : [2,4]"),
                "t.ir:5:14: error: relu takes 1 input, got more");
    refused_str(edit(5, "%3 = relu %2 : [2,x]"), "t.ir:5:19: error: expected a dimension, got 'x'");
    refused_str(edit(5, "%3 = relu %2 : [2,4]:f16"),
                "t.ir:5:22: error: unknown dtype 'f16' (f32, bf16, i32)");
    refused_str(edit(5, "%3 = relu %2 : [2,5]"),
                "t.ir:5:16: error: type [2,5], but relu's shape rule says [2,4]");
    refused_str(edit(4, "%2 = dense %0 %7 : [2,4]"),
                "t.ir:4:15: error: %7 is not defined before %2");
    refused_str(edit(4, "%5 = dense %0 %1 : [2,4]"), "t.ir:4:1: error: expected node %2, got %5");
    refused_str(
        edit(3, "%1 = param \"w\" init=random : [4,3]"),
        "t.ir:3:21: error: unknown initialiser 'random' (zero, one, xavier, normal, scaled)");
    refused_str(edit(3, "%1 = param \"w\" : [4,3]"),
                "t.ir:3:16: error: unexpected ':', expected attribute 'init' of param");
    refused_str(
        edit(5, "%3 = relu %2 : [2,4] [outptu]"),
        "t.ir:5:23: error: unknown flag 'outptu' (output, loss, grad, tf32, libconv, tune, dense)");
    refused_str(edit(5, "%3 = relu %2 : [2,4] junk"),
                "t.ir:5:22: error: unexpected 'junk', expected end of line");
    /* ir_verify's word, at the node it names */
    refused_str(edit(3, "%1 = param \"x\" init=xavier : [4,3]"),
                "t.ir:3:1: error: invalid graph: node 1: duplicate name 'x'");
    /* truncated: inside a line, at a line's end */
    size_t cut = strlen(GOOD) - strlen(" [2,4] [output]\n");
    refused(GOOD, cut,
            "t.ir:5:15: error: unexpected end of file, expected '[' and the type's "
            "dimensions");
    refused_str(edit(5, NULL),
                "t.ir:5:1: error: program train ends after 3 of its 4 nodes (truncated file?)");
    refused_str("", "t.ir:1:1: error: no graph (expected '# graph: N nodes')");
    /* hostile sizes and bytes */
    refused_str("# graph: 999999999 nodes\n",
                "t.ir:1:10: error: a node count 999999999 out of range 0..262144");
    static const char nul[] = "# graph: 1 nodes\n%0 = input \"x\0\" : [2]\n";
    refused(nul, sizeof nul - 1, "t.ir:2:14: error: not a text file (a NUL byte)");
    refused_str("# graph: 1 nodes\n%0 = input \"x\" : [1099511627776,1099511627776]\n",
                "t.ir:2:18: error: tensor has more than 2^40 elements");
    refused_str(edit(2, "%0 = relu %0 : [2,3]"), "t.ir:2:11: error: %0 is not defined before %0");
    refused_str(edit(1, "# graph: 3 nodes"),
                "t.ir:5:1: error: more nodes than the 3 of '# graph: 3 nodes'");
    refused_str("# dpc-ir 1\n# graph: 0 nodes\n",
                "t.ir:3:1: error: unexpected end of file, expected '# end' (truncated file?)");
    refused_str("# graph: 0 nodes\n# end\n%0 = input \"x\" : [2]\n",
                "t.ir:3:1: error: text after '# end'");
    /* Names end up in messages: a terminal control is refused however it
     * is written (plans refuse them too). */
    refused_str(edit(3, "%1 = param \"w\\x1b[31m\" init=xavier : [4,3]"),
                "t.ir:3:12: error: the source's quoted name: control character in a string "
                "(\\xHH below \\x20, \\x7f or a UTF-8 C1)");
    refused_str(edit(3, "%1 = param \"w\\x7f\" init=xavier : [4,3]"),
                "t.ir:3:12: error: the source's quoted name: control character in a string "
                "(\\xHH below \\x20, \\x7f or a UTF-8 C1)");
    refused_str(edit(3, "%1 = param \"w\xc2\x9b"
                        "2J\" init=xavier : [4,3]"),
                "t.ir:3:12: error: the source's quoted name: control character in a string "
                "(\\xHH below \\x20, \\x7f or a UTF-8 C1)");
    refused_str("# dpc-ir 2\n", "t.ir:1:3: error: IR text version 2, this dpc reads version 1");
    refused_str("# program train\n# program train\n", "t.ir:2:11: error: a second program train");
    refused_str("# train batch=0\n", "t.ir:1:15: error: batch 0 out of range 1..1048576");
    refused_str("conv\n", "t.ir:1:1: error: unexpected 'conv', expected a node ('%N = op ...') "
                          "or a '#' line");
}

int main(void) {
    RUN(train_table_ranks_cover_the_line);
    RUN(graphs_read_back_field_for_field);
    RUN(every_pass_boundary_continues_to_the_same_plan);
    RUN(good_text_reads);
    RUN(errors_name_file_line_col_and_what_was_expected);
    return harness_done();
}
