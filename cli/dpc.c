/* cli/dpc.c — the compiler driver: parse arguments, wire frontend → IR →
 * plan. Logic worth testing lives in the modules, not here. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "frontend/frontend.h"
#include "ir/ir.h"
#include "ir/plan.h"

typedef struct {
    const char *model, *out, *dot, *dump_after;
    int dump_ir, summary, batch;
} dpc_args;

static void usage(FILE *f) {
    fputs("usage: dpc MODEL.net [-o PLAN] [options]\n"
          "  -o PLAN            write the compiled plan\n"
          "  --summary          layer table and trainable parameter count\n"
          "  --dump-ir[=PASS]   IR text after all passes (or after PASS)\n"
          "  --dot FILE         Graphviz of the final training graph\n"
          "  --batch N          override the per-device batch of the train section\n"
          "  -h, --help         this text\n",
          f);
}

static int die(const char *msg, const char *arg) {
    fprintf(stderr, "dpc: error: %s%s%s\n", msg, arg ? ": " : "", arg ? arg : "");
    return 1;
}

/* Returns 0 on success, 1 on a usage error (already reported), -1 for --help. */
static int parse_args(int argc, char **argv, dpc_args *a) {
    for (int i = 1; i < argc; i++) {
        const char *s = argv[i];
        if (!strcmp(s, "-h") || !strcmp(s, "--help")) return -1;
        if (!strcmp(s, "-o") || !strcmp(s, "--dot") || !strcmp(s, "--batch")) {
            if (i + 1 >= argc) return die("missing value after", s);
            const char *v = argv[++i];
            if (!strcmp(s, "-o")) a->out = v;
            else if (!strcmp(s, "--dot")) a->dot = v;
            else {
                char *end;
                long b = strtol(v, &end, 10);
                if (*end || b <= 0 || b > 1 << 20) return die("--batch needs a positive integer, got", v);
                a->batch = (int)b;
            }
        } else if (!strcmp(s, "--summary")) {
            a->summary = 1;
        } else if (!strcmp(s, "--dump-ir")) {
            a->dump_ir = 1;
        } else if (!strncmp(s, "--dump-ir=", 10)) {
            a->dump_ir = 1;
            a->dump_after = s + 10;
        } else if (s[0] == '-' && s[1]) {
            return die("unknown option", s);
        } else if (a->model) {
            return die("more than one model file", s);
        } else {
            a->model = s;
        }
    }
    if (!a->model) return die("no model file (usage: dpc MODEL.net -o PLAN)", NULL);
    if (!a->out && !a->summary && !a->dump_ir && !a->dot)
        return die("nothing to do: give -o PLAN, --summary, --dump-ir or --dot", NULL);
    if (a->dump_after && strcmp(a->dump_after, "elaborate") != 0)
        return die("unknown pass for --dump-ir (known: elaborate)", a->dump_after);
    return 0;
}

static int write_dot(const ir_graph *g, const char *name, const char *path) {
    FILE *f = fopen(path, "w");
    if (!f) {
        perror(path);
        return 1;
    }
    ir_dot(g, name, f);
    if (fclose(f)) {
        perror(path);
        return 1;
    }
    return 0;
}

int main(int argc, char **argv) {
    dpc_args a = {0};
    int rc = parse_args(argc, argv, &a);
    if (rc < 0) {
        usage(stdout);
        return 0;
    }
    if (rc) return 1;

    fe_program *prog = fe_parse_file(a.model);
    if (!prog) return 1;
    dpc_plan plan = {0};
    plan.schedule = *fe_train(prog);
    if (a.batch) plan.schedule.batch = a.batch;
    snprintf(plan.model, sizeof plan.model, "%s", fe_network_name(prog));
    snprintf(plan.source, sizeof plan.source, "%s", a.model);
    plan.train = fe_build_graph(prog, plan.schedule.batch, 1);
    plan.eval = plan.train ? fe_build_graph(prog, plan.schedule.eval_batch, 0) : NULL;
    fe_free(prog);
    rc = plan.train && plan.eval ? 0 : 1;

    char err[512];
    if (!rc && (ir_verify(plan.train, err, sizeof err) || ir_verify(plan.eval, err, sizeof err))) {
        fprintf(stderr, "%s: internal error: %s\n", a.model, err);
        rc = 1;
    }
    if (!rc && a.summary) ir_summary(plan.train, stdout);
    if (!rc && a.dump_ir) ir_dump(plan.train, stdout);
    if (!rc && a.dot) rc = write_dot(plan.train, plan.model, a.dot);
    if (!rc && a.out && plan_write(&plan, a.out, err, sizeof err)) {
        fprintf(stderr, "%s\n", err);
        rc = 1;
    }
    ir_free(plan.train);
    ir_free(plan.eval);
    return rc;
}
