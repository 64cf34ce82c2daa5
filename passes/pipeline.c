/* passes/pipeline.c — the pass manager and the registry of passes.
 *
 * Runs the passes of pass_registry in its order, each in the programs it
 * names (fuse only when o->fuse; --dump-ir=fuse then shows the unfused
 * graph), checks the graph with ir_verify after each one (a pass that
 * breaks an invariant is caught at its own door, not three passes later),
 * and prints the graph after the pass named by --dump-ir=PASS.
 */
#include <stdio.h>
#include <string.h>

#include "ir/err.h"
#include "passes/passes.h"

static int run_lower(ir_graph **g, const pass_context *c, char *err, size_t errlen) {
    (void)c;
    return pass_lower(g, err, errlen);
}

static int run_autodiff(ir_graph **g, const pass_context *c, char *err, size_t errlen) {
    (void)c;
    return pass_autodiff(g, err, errlen);
}

static int run_optimizer(ir_graph **g, const pass_context *c, char *err, size_t errlen) {
    return pass_optimizer(g, c->train, err, errlen);
}

static int run_partition(ir_graph **g, const pass_context *c, char *err, size_t errlen) {
    return pass_partition(g, c->options ? c->options->bucket_bytes : 0, err, errlen);
}

static int run_precision(ir_graph **g, const pass_context *c, char *err, size_t errlen) {
    return pass_precision(g, c->options ? c->options->precision : PASS_PRECISION_FP32, err, errlen);
}

static int run_layout(ir_graph **g, const pass_context *c, char *err, size_t errlen) {
    if (!c->options || !c->options->layout) return 0;
    if (pass_layout(g, err, errlen)) return -1;
    if (c->options->layout > 1)
        pass_layout_report(*g, c->train ? "train" : "eval",
                           c->options->dump ? c->options->dump : stdout);
    return 0;
}

static int run_fuse(ir_graph **g, const pass_context *c, char *err, size_t errlen) {
    if (c->options && !c->options->fuse) return 0;
    return pass_fuse(g, err, errlen);
}

/* The all-reduces (partition) exist before fusion, so fuse sees them as the
 * opaque steps they are and never groups across them. The eval program is
 * the forward pass with running-statistics BatchNorm: no gradients, no
 * update. */
const pass_info pass_registry[] = {
    {"lower", run_lower, PASS_TRAIN | PASS_EVAL, "batchnorm into its statistics and their use"},
    {"autodiff", run_autodiff, PASS_TRAIN, "reverse-mode gradients from the loss"},
    {"optimizer", run_optimizer, PASS_TRAIN, "SGD with momentum as graph ops"},
    {"partition", run_partition, PASS_TRAIN, "all-reduce of the gradients, in buckets"},
    {"precision", run_precision, PASS_TRAIN | PASS_EVAL,
     "bf16 storage of activations (--precision)"},
    {"layout", run_layout, PASS_TRAIN | PASS_EVAL,
     "channel-major activations between convolutions (--layout; off by default)"},
    {"fuse", run_fuse, PASS_TRAIN | PASS_EVAL, "fusion groups, one kernel each (--no-fuse: none)"},
    {NULL, NULL, 0, NULL},
};

pass_options pass_default_options(void) {
    pass_options o = {1, 1, NULL, NULL, 0, PASS_PRECISION_FP32, 0};
    return o;
}

const pass_info *pass_find(const char *name) {
    for (const pass_info *p = pass_registry; p->name; p++)
        if (strcmp(p->name, name) == 0) return p;
    return NULL;
}

const char *pass_names_str(char *buf, size_t n) {
    size_t len = 0;
    if (n) buf[0] = 0;
    for (const pass_info *p = pass_registry; p->name && len < n; p++) {
        int w = snprintf(buf + len, n - len, "%s%s", len ? " " : "", p->name);
        if (w < 0) break;
        len += (size_t)w;
    }
    return buf;
}

static int check_options(const pass_options *o, char *err, size_t errlen) {
    char known[256];
    if (o && o->dump_after && !pass_find(o->dump_after))
        return ir_fail(err, errlen, "unknown pass '%s' (known: %s)", o->dump_after,
                       pass_names_str(known, sizeof known));
    return 0;
}

/* Verifies the graph a pass left and dumps it when asked to. */
static int after(const char *pass, ir_graph *g, const pass_options *o, char *err, size_t errlen) {
    char why[256];
    if (ir_verify(g, why, sizeof why))
        return ir_fail(err, errlen, "internal error: graph invalid after %s: %s", pass, why);
    if (o && o->dump_after && strcmp(o->dump_after, pass) == 0)
        ir_dump(g, o->dump ? o->dump : stdout);
    return 0;
}

static int run_program(ir_graph **g, unsigned program, const ir_train *t, const pass_options *o,
                       char *err, size_t errlen) {
    if (check_options(o, err, errlen)) return -1;
    pass_context c = {t, o};
    for (const pass_info *p = pass_registry; p->name; p++) {
        if (!(p->programs & program)) continue;
        if (p->run(g, &c, err, errlen) || after(p->name, *g, o, err, errlen)) return -1;
    }
    return 0;
}

int pass_run_train(ir_graph **g, const ir_train *t, const pass_options *o, char *err,
                   size_t errlen) {
    return run_program(g, PASS_TRAIN, t, o, err, errlen);
}

int pass_run_eval(ir_graph **g, const pass_options *o, char *err, size_t errlen) {
    return run_program(g, PASS_EVAL, NULL, o, err, errlen);
}
