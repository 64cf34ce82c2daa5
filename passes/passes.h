/* passes/passes.h — graph-to-graph transformations, run in this order:
 *
 *     lower      batchnorm → bn_mean/bn_var/bn_apply (+ ema/assign of the
 *                running statistics) in training graphs; bn_apply on the
 *                running statistics in eval graphs
 *     autodiff   reverse mode from the loss node (gradient of the summed
 *                per-sample loss); each parameter's gradient is flagged
 *                IR_FLAG_GRAD and named "PARAM.grad"
 *     optimizer  MXNet SGD with momentum as graph ops; adds the scalar inputs
 *                "lr" and "grad_scale" and a state "PARAM.momentum" per param
 *
 * Each pass takes the graph by reference and may replace it (*g is freed and
 * set to the new graph); it returns 0, or -1 with a message in err. Every
 * pass leaves a graph that passes ir_verify().
 *
 * Usage:
 *     pass_options o = pass_default_options();
 *     if (pass_run_train(&train, &schedule, &o, err, sizeof err)) ...;
 *     if (pass_run_eval(&eval, &o, err, sizeof err)) ...;
 */
#ifndef DPC_PASSES_H
#define DPC_PASSES_H

#include <stdio.h>

#include "ir/ir.h"

int pass_lower(ir_graph **g, char *err, size_t errlen);
int pass_autodiff(ir_graph **g, char *err, size_t errlen);
int pass_optimizer(ir_graph **g, const ir_train *t, char *err, size_t errlen);

typedef struct {
    int fuse, memplan;      /* later passes; 1 = on */
    const char *dump_after; /* pass name, or NULL */
    FILE *dump;             /* where --dump-ir=PASS writes */
} pass_options;

pass_options pass_default_options(void);
/* The names dump_after may take, NULL-terminated. */
extern const char *const pass_names[];
int pass_run_train(ir_graph **g, const ir_train *t, const pass_options *o, char *err,
                   size_t errlen);
int pass_run_eval(ir_graph **g, const pass_options *o, char *err, size_t errlen);

#endif
