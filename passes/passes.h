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
 *     partition  data parallelism (SPMD): an allreduce (sum over replicas) of
 *                every parameter gradient, packed into buckets in backward
 *                completion order; the update reads the sums (partition.c)
 *     precision  with --precision bf16, which tensors are stored in bf16
 *                (activations and their gradients; precision.c states the rule)
 *     layout     off by default (o->layout): keeps activations channel-major
 *                (CNHW) between convolutions, with a transpose node, and its
 *                reason, where a reader needs NCHW (layout.c)
 *     fuse       groups pointwise chains and per-channel reductions into one
 *                kernel each (ir_node.group) and orders the graph so each
 *                group is contiguous (rules in fuse.c); off with o->fuse = 0
 *
 * and then, on the final graph, the memory planner (not a graph rewrite):
 *     memplan    lifetimes over the execution order, in-place reuse, best-fit
 *                offsets of every activation in one arena (pass_memplan_run)
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

#include <stdint.h>
#include <stdio.h>

#include "ir/ir.h"
#include "passes/memplan.h"

int pass_lower(ir_graph **g, char *err, size_t errlen);
int pass_autodiff(ir_graph **g, char *err, size_t errlen);
int pass_optimizer(ir_graph **g, const ir_train *t, char *err, size_t errlen);

/* The limits of a group are IR_GROUP_MAX_* (ir.h): codegen's too. */
int pass_fuse(ir_graph **g, char *err, size_t errlen);
/* Clears every node's group. */
void pass_unfuse(ir_graph *g);

/* ---- data parallelism (partition.c) ---------------------------------------
 * After the optimizer, before fuse: every IR_FLAG_GRAD node g gets a node
 * allreduce(g){bucket, offset} right after it, named "g.sum", which the
 * optimizer's update reads instead of g; every other reader (BatchNorm's
 * data gradient) keeps the local value. Buckets are filled in graph order
 * up to bucket_bytes (0: PASS_BUCKET_BYTES_DEFAULT); offset is the
 * gradient's element offset in its packed bucket. A graph without
 * gradients is left alone; a partitioned one is refused. */
#define PASS_BUCKET_BYTES_DEFAULT ((size_t)25 << 20)
int pass_partition(ir_graph **g, size_t bucket_bytes, char *err, size_t errlen);
size_t pass_partition_bucket_bytes(size_t requested); /* 0 -> the default */
typedef struct {
    int first, last; /* graph indices of its first and last allreduce node */
    int grads;       /* gradients in it */
    int64_t floats;  /* packed size */
} pass_bucket;
/* The buckets of a partitioned graph (out[0..max-1] filled); returns how
 * many there are (0 when the graph has no allreduce). */
int pass_partition_buckets(const ir_graph *g, pass_bucket *out, int max);
/* One line: `all-reduce: G gradients, X MiB, in B buckets: ...` */
void pass_partition_describe(const ir_graph *g, FILE *f);

/* ---- mixed precision (precision.c) ------------------------------------------
 * After partition (train) or lower (eval), before fuse. FP32 leaves the
 * graph alone; BF16 sets the dtype of every activation and activation
 * gradient to IR_BF16 (rule in precision.c). Master weights, optimizer
 * state, BatchNorm statistics, parameter gradients, reductions, the loss
 * and outputs stay f32. */
typedef enum { PASS_PRECISION_FP32, PASS_PRECISION_BF16 } pass_precision_kind;
int pass_precision(ir_graph **g, pass_precision_kind p, char *err, size_t errlen);
/* "fp32" / "bf16" -> *out; -1 for anything else. */
int pass_precision_parse(const char *name, pass_precision_kind *out);
/* BF16 when any tensor of g is stored in bf16. */
pass_precision_kind pass_precision_of(const ir_graph *g);
const char *pass_precision_name(pass_precision_kind p);

/* ---- layouts (layout.c) ------------------------------------------------------
 * After precision, before fuse (it refuses a grouped graph). Sets
 * IR_FLAG_CNHW on activations and inserts transpose nodes whose iattr[0] is
 * one of these reasons. */
enum {
    PASS_LAYOUT_WHY_VIEW = 1,    /* a view reads the bytes as NCHW */
    PASS_LAYOUT_WHY_RUNTIME,     /* the runtime reads it (output, loss, gradient) */
    PASS_LAYOUT_WHY_SOURCE,      /* a graph input or parameter is NCHW */
    PASS_LAYOUT_WHY_VIEW_RESULT, /* a view's result (flatten's gradient) is NCHW */
    PASS_LAYOUT_WHY_NCHW,        /* any other NCHW producer */
    PASS_LAYOUT_WHY_READER,      /* its reader works in NCHW only (batchnorm) */
    PASS_LAYOUT_WHY_COUNT
};
int pass_layout(ir_graph **g, char *err, size_t errlen);
/* The reason's words, NULL for a value that is none of them. */
const char *pass_layout_reason(int64_t why);
int pass_layout_transposes(const ir_graph *g);
/* `layout PROG: N channel-major tensors, T transposes`, then one line per
 * transpose: what it transposes and why. */
void pass_layout_report(const ir_graph *g, const char *prog, FILE *f);

typedef struct {
    int fuse, memplan;             /* 1 = on; memplan is the caller's to run (pass_memplan_run) */
    const char *dump_after;        /* pass name, or NULL */
    FILE *dump;                    /* where --dump-ir=PASS writes */
    size_t bucket_bytes;           /* partition's bucket size; 0 = PASS_BUCKET_BYTES_DEFAULT */
    pass_precision_kind precision; /* storage of activations (default fp32) */
    int layout;                    /* 1: run the layout pass; 2: and report to dump (stdout) */
} pass_options;

pass_options pass_default_options(void);

/* ---- the registry (pipeline.c) ---------------------------------------------
 * Every pass in the order pass_run_* runs it, the programs it runs in, and a
 * line about it; the names are what dump_after (--dump-ir=PASS) may take.
 * The pipeline, dpc's --dump-ir check and dpc's help all read it. */
typedef struct {
    const ir_train *train;       /* the train section (optimizer), NULL for eval */
    const pass_options *options; /* may be NULL: the defaults */
} pass_context;
enum { PASS_TRAIN = 1, PASS_EVAL = 2 };
typedef struct {
    const char *name;
    int (*run)(ir_graph **g, const pass_context *c, char *err, size_t errlen);
    unsigned programs; /* PASS_TRAIN | PASS_EVAL */
    const char *about; /* one line */
} pass_info;
/* Terminated by an entry whose name is NULL. */
extern const pass_info pass_registry[];
/* The entry named name, or NULL. */
const pass_info *pass_find(const char *name);
/* "lower autodiff ..." for messages: the names in order into buf; returns buf. */
const char *pass_names_str(char *buf, size_t n);
int pass_run_train(ir_graph **g, const ir_train *t, const pass_options *o, char *err,
                   size_t errlen);
int pass_run_eval(ir_graph **g, const pass_options *o, char *err, size_t errlen);

#endif
