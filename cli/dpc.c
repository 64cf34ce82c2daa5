/* cli/dpc.c — the compiler driver: parse arguments, wire frontend → IR →
 * plan. Logic worth testing lives in the modules, not here. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "codegen/codegen.h"
#include "frontend/frontend.h"
#include "ir/ir.h"
#include "ir/plan.h"
#include "passes/passes.h"

typedef struct {
    const char *model, *out, *dot, *dump_after, *target;
    int dump_ir, summary, batch;
} dpc_args;

static void usage(FILE *f) {
    fputs("usage: dpc MODEL.net [-o PLAN] [options]\n"
          "  -o PLAN            write the compiled plan\n"
          "  --summary          layer table and trainable parameter count\n"
          "  --dump-ir[=PASS]   IR text after all passes (or after PASS)\n"
          "  --dot FILE         Graphviz of the final training graph\n"
          "  --batch N          override the per-device batch of the train section\n"
          "  --target cpu|cuda|all  kernel sources to emit (default all)\n"
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
        if (!strcmp(s, "-o") || !strcmp(s, "--dot") || !strcmp(s, "--batch") ||
            !strcmp(s, "--target")) {
            if (i + 1 >= argc) return die("missing value after", s);
            const char *v = argv[++i];
            if (!strcmp(s, "-o")) a->out = v;
            else if (!strcmp(s, "--dot")) a->dot = v;
            else if (!strcmp(s, "--target")) {
                if (strcmp(v, "cpu") && strcmp(v, "cuda") && strcmp(v, "all"))
                    return die("--target takes cpu, cuda or all, got", v);
                a->target = v;
            }
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
    if (a->dump_after && strcmp(a->dump_after, "elaborate") != 0) {
        int known = 0;
        for (int i = 0; pass_names[i]; i++) known |= !strcmp(pass_names[i], a->dump_after);
        if (!known) return die("unknown pass for --dump-ir (known: elaborate lower autodiff optimizer)",
                               a->dump_after);
    }
    if (!a->target) a->target = "all";
    return 0;
}

/* Renders both programs in one dialect into one plan section. */
static int add_kernels(dpc_plan *plan, cg_dialect d, char *err, size_t errlen) {
    const ir_graph *progs[2] = {plan->train, plan->eval};
    unsigned char *section = NULL;
    size_t len = 0;
    int rc = 0;
    for (int i = 0; i < 2 && !rc; i++) {
        cg_program *p = cg_generate(progs[i], d, NULL, err, errlen);
        unsigned char *bytes;
        size_t n;
        if (!p || cg_program_serialize(p, &bytes, &n)) {
            rc = -1;
        } else {
            section = realloc(section, len + n);
            if (!section) abort();
            memcpy(section + len, bytes, n);
            len += n;
            free(bytes);
        }
        cg_program_free(p);
    }
    if (!rc && plan_add_section(plan, cg_section_tag(d), section, len)) {
        snprintf(err, errlen, "cannot add plan section %s", cg_section_tag(d));
        rc = -1;
    }
    free(section);
    return rc;
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
    if (!rc && a.summary) ir_summary(plan.train, stdout);
    if (!rc && a.dump_after && !strcmp(a.dump_after, "elaborate")) ir_dump(plan.train, stdout);

    pass_options po = pass_default_options();
    po.dump_after = a.dump_after && strcmp(a.dump_after, "elaborate") ? a.dump_after : NULL;
    po.dump = stdout;
    pass_options eval_po = po;
    eval_po.dump_after = NULL; /* one dump: the training program's */
    if (!rc && (pass_run_train(&plan.train, &plan.schedule, &po, err, sizeof err) ||
                pass_run_eval(&plan.eval, &eval_po, err, sizeof err))) {
        fprintf(stderr, "%s: error: %s\n", a.model, err);
        rc = 1;
    }
    if (!rc && a.dump_ir && !a.dump_after) ir_dump(plan.train, stdout);
    int want_c = strcmp(a.target, "cuda") != 0, want_cuda = strcmp(a.target, "cpu") != 0;
    if (!rc && a.out &&
        ((want_c && add_kernels(&plan, CG_DIALECT_C, err, sizeof err)) ||
         (want_cuda && add_kernels(&plan, CG_DIALECT_CUDA, err, sizeof err)))) {
        fprintf(stderr, "%s: error: code generation: %s\n", a.model, err);
        rc = 1;
    }
    if (!rc && a.dot) rc = write_dot(plan.train, plan.model, a.dot);
    if (!rc && a.out && plan_write(&plan, a.out, err, sizeof err)) {
        fprintf(stderr, "%s\n", err);
        rc = 1;
    }
    ir_free(plan.train);
    ir_free(plan.eval);
    plan_free_sections(&plan);
    return rc;
}
