/* passes/pipeline.c — the pass manager.
 *
 * Runs the passes in their fixed order (fuse only when o->fuse; --dump-ir=fuse
 * then shows the unfused graph), checks the graph with ir_verify
 * after each one (a pass that breaks an invariant is caught at its own
 * door, not three passes later), and prints the graph after the pass named
 * by --dump-ir=PASS.
 */
#include <stdio.h>
#include <string.h>

#include "passes/passes.h"

const char *const pass_names[] = {"lower",     "autodiff",  "optimizer", "partition",
                                   "precision", "fuse",      NULL};

pass_options pass_default_options(void) {
    pass_options o = {1, 1, NULL, NULL, 0, PASS_PRECISION_FP32};
    return o;
}

static int known_pass(const char *name) {
    for (int i = 0; pass_names[i]; i++)
        if (strcmp(pass_names[i], name) == 0) return 1;
    return 0;
}

static int check_options(const pass_options *o, char *err, size_t errlen) {
    if (o && o->dump_after && !known_pass(o->dump_after)) {
        int used = snprintf(err, errlen, "unknown pass '%s' (known:", o->dump_after);
        for (int i = 0; pass_names[i] && used >= 0 && (size_t)used < errlen; i++)
            used += snprintf(err + used, errlen - (size_t)used, " %s", pass_names[i]);
        if (used >= 0 && (size_t)used < errlen) snprintf(err + used, errlen - (size_t)used, ")");
        return -1;
    }
    return 0;
}

/* Verifies the graph a pass left and dumps it when asked to. */
static int after(const char *pass, ir_graph *g, const pass_options *o, char *err, size_t errlen) {
    char why[256];
    if (ir_verify(g, why, sizeof why)) {
        snprintf(err, errlen, "internal error: graph invalid after %s: %s", pass, why);
        return -1;
    }
    if (o && o->dump_after && strcmp(o->dump_after, pass) == 0) ir_dump(g, o->dump ? o->dump : stdout);
    return 0;
}

int pass_run_train(ir_graph **g, const ir_train *t, const pass_options *o, char *err,
                   size_t errlen) {
    if (check_options(o, err, errlen)) return -1;
    if (pass_lower(g, err, errlen) || after("lower", *g, o, err, errlen)) return -1;
    if (pass_autodiff(g, err, errlen) || after("autodiff", *g, o, err, errlen)) return -1;
    if (pass_optimizer(g, t, err, errlen) || after("optimizer", *g, o, err, errlen)) return -1;
    /* The all-reduces exist before fusion, so fuse sees them as the opaque
     * steps they are and never groups across them. */
    if (pass_partition(g, o ? o->bucket_bytes : 0, err, errlen) ||
        after("partition", *g, o, err, errlen))
        return -1;
    if (pass_precision(g, o ? o->precision : PASS_PRECISION_FP32, err, errlen) ||
        after("precision", *g, o, err, errlen))
        return -1;
    if ((!o || o->fuse) && pass_fuse(g, err, errlen)) return -1;
    if (after("fuse", *g, o, err, errlen)) return -1;
    return 0;
}

/* The eval program is the forward pass with running-statistics BatchNorm:
 * no gradients, no update. */
int pass_run_eval(ir_graph **g, const pass_options *o, char *err, size_t errlen) {
    if (check_options(o, err, errlen)) return -1;
    if (pass_lower(g, err, errlen) || after("lower", *g, o, err, errlen)) return -1;
    if (pass_precision(g, o ? o->precision : PASS_PRECISION_FP32, err, errlen) ||
        after("precision", *g, o, err, errlen))
        return -1;
    if ((!o || o->fuse) && pass_fuse(g, err, errlen)) return -1;
    if (after("fuse", *g, o, err, errlen)) return -1;
    return 0;
}
