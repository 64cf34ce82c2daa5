/* passes/passes.h — graph-to-graph transformations, run in this order:
 *
 *     lower      batchnorm → bn_mean/bn_var/bn_apply (+ ema/assign of the
 *                running statistics) in training graphs; bn_apply on the
 *                running statistics in eval graphs
 *     autodiff   reverse mode from the loss node (gradient of the summed
 *                per-sample loss); each parameter's gradient is flagged
 *                IR_FLAG_GRAD and named "PARAM.grad"
 *     optimizer  the train section's update as graph ops (MXNet's SGD with
 *                momentum, lars, lamb, adamw); adds the scalar inputs "lr" and
 *                "grad_scale" ("step" for lamb, adamw) and per param its state,
 *                "PARAM.momentum" or "PARAM.adam_m" and "PARAM.adam_v"
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
 *     memplan    the memory plan of the final graph (not a graph rewrite):
 *                lifetimes over the execution order, in-place reuse,
 *                best-fit offsets of every activation in one arena
 *                (pass_memplan_run; the record is format/memplan.h's);
 *                the last pass of a pipeline
 *
 * Each pass takes the graph by reference and may replace it (*g is freed and
 * set to the new graph); it returns 0, or -1 with a message in err. Every
 * pass leaves a graph that passes ir_verify().
 *
 * Usage:
 *     pass_options o = pass_default_options();
 *     if (pass_run_train(&train, &schedule, &o, err, sizeof err)) ...;
 *     if (pass_run_eval(&eval, &o, err, sizeof err)) ...;
 * or, a pipeline of one's own (dpc --passes):
 *     pass_pipeline base, pl;
 *     pass_pipeline_default(&o, &base);
 *     if (pass_pipeline_parse("lower,autodiff,fuse", &base, &pl, err, sizeof err)) ...;
 *     pass_env e = {&schedule, &memplan, NULL, NULL};
 *     if (pass_pipeline_run(&pl, PASS_TRAIN, &train, &e, err, sizeof err)) ...;
 */
#ifndef DPC_PASSES_H
#define DPC_PASSES_H

#include <stdint.h>
#include <stdio.h>

#include "ir/ir.h"
#include "format/graph.h"
#include "format/memplan.h"

int pass_lower(ir_graph **g, char *err, size_t errlen);
/* The same; sync_all: every training batchnorm synchronised over the
 * replicas (lower's sync_bn=1, `dpc --sync-bn`), not only those the .net
 * marks sync=true. Synchronised statistics read the input
 * FMT_REPLICA_SCALE, 1/R for R replicas, which the executor sets. */
int pass_lower_sync(ir_graph **g, int sync_all, char *err, size_t errlen);
/* A synchronised statistic is scale(allreduce{sync=1}(stat), replica_scale),
 * the replicas' mean of stat; lower makes the forward ones and autodiff the
 * backward ones. pass_replica_mean adds it to g (nodes at line:col) and
 * returns the mean, or -1 with why; pass_synced_stat returns the stat a
 * node is the mean of (and *replica_scale), or -1 when it is not one. */
int pass_replica_mean(ir_graph *g, int stat, int replica_scale, int line, int col, char *why,
                      size_t whylen);
int pass_synced_stat(const ir_graph *g, int node, int *replica_scale);
int pass_autodiff(ir_graph **g, char *err, size_t errlen);

/* ---- memory planning (memplan.c) ---------------------------------------------
 * The plan of g's final form (format/memplan.h says what it holds):
 * offsets chosen best-fit, largest tensors first. NULL + message when g
 * does not verify. */
fmt_memplan *pass_memplan_run(const ir_graph *g, char *err, size_t errlen);
int pass_optimizer(ir_graph **g, const ir_train *t, char *err, size_t errlen);

/* ---- dead-node elimination (dce.c: docs/passes.md's example) --------------
 * Drops nodes nothing the runtime reads depends on; *removed (may be NULL)
 * says how many. Before fuse. */
int pass_dce(ir_graph **g, int *removed, char *err, size_t errlen);

/* ---- activation recomputation (remat.c) -------------------------------------
 * After autodiff (and after fuse, which it reruns on its result): frees
 * forward outputs of relu/add/bias_add/bn_apply chains after their last
 * forward use and recomputes each, by a copy of its chain from the tensors
 * kept anyway, before its first backward use, largest first, while the
 * planned arena shrinks, until it fits budget_bytes (0: as small as the
 * pass can make it). Results are bit for bit unchanged. A budget it cannot
 * meet is an error naming the best arena and the shortfall. */
typedef struct {
    int candidates, recomputed, nodes_added;
    int64_t arena_before, arena_after;
} pass_remat_report;
int pass_remat(ir_graph **g, int64_t budget_bytes, pass_remat_report *rep, char *err,
               size_t errlen);

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
 * and outputs stay f32. TF32 stores everything in f32 and marks every f32
 * GEMM op IR_FLAG_TF32: its operands are rounded to TF32 (tensor cores on
 * the GPU, the same rounding on the cpu). */
typedef enum { PASS_PRECISION_FP32, PASS_PRECISION_BF16, PASS_PRECISION_TF32 } pass_precision_kind;
int pass_precision(ir_graph **g, pass_precision_kind p, char *err, size_t errlen);
/* "fp32" / "bf16" / "tf32" -> *out; -1 for anything else. */
int pass_precision_parse(const char *name, pass_precision_kind *out);
/* BF16 when any tensor of g is stored in bf16, TF32 when a GEMM runs in TF32. */
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

/* ---- library convolutions (conv.c) --------------------------------------------
 * After precision and layout: marks the convolutions that run as library
 * calls (IR_FLAG_CONV_LIB, and IR_FLAG_CONV_TUNE for auto) and those dpc
 * lowers as dense products (IR_FLAG_CONV_DENSE). Values in the order the
 * pipeline's enum names them. */
typedef enum {
    PASS_CONV_IM2COL,
    PASS_CONV_LIBRARY,
    PASS_CONV_AUTO,
    PASS_CONV_DENSE
} pass_conv_kind;
int pass_conv(ir_graph **g, pass_conv_kind k, char *err, size_t errlen);

typedef struct {
    int fuse, memplan;             /* 1 = in the default pipeline */
    const char *dump_after;        /* pass name, or NULL */
    FILE *dump;                    /* where --dump-ir=PASS writes */
    size_t bucket_bytes;           /* partition's bucket size; 0 = PASS_BUCKET_BYTES_DEFAULT */
    pass_precision_kind precision; /* bf16 activations, TF32 GEMMs (default fp32) */
    int layout;                    /* 1: layout in the default pipeline; 2: with report=1 */
    pass_conv_kind conv;           /* not im2col: the conv pass in the default pipeline */
} pass_options;

pass_options pass_default_options(void);

/* ---- the registry and the pipeline (pipeline.c) ------------------------------
 * Every pass, in the order of the default pipeline: its name, the programs
 * it applies to, a line about it, its options and its prerequisites. The
 * default pipeline, --passes, --list-passes, --dump-ir's check and dpc's
 * help all read it. Adding a pass is one entry and its run function.
 *
 * A pipeline is text: `lower,autodiff,partition(bucket_mb=25),precision(bf16)`.
 * An option value without a name (only the first) is the pass's first
 * option. Options not given take the base pipeline's value for that pass
 * (the flags: --bucket-mb, --precision), else the registry's default. */
enum { PASS_TRAIN = 1, PASS_EVAL = 2 };
enum { PASS_OPTS_MAX = 4, PASS_DEPS_MAX = 8, PASS_PIPELINE_MAX = 32 };
typedef enum { PASS_OPT_INT, PASS_OPT_FLOAT, PASS_OPT_ENUM, PASS_OPT_SIZE } pass_opt_type;
typedef struct {
    const char *name; /* NULL ends a pass's list */
    pass_opt_type type;
    double def;            /* default; for an enum, the index into values */
    double min, max;       /* int, float, size: the range (min excluded when min_open) */
    int min_open;          /* 1: min itself is out of range */
    const char *values[4]; /* enum: the allowed names, NULL-terminated */
    const char *help;      /* one line */
} pass_opt;

typedef struct {
    const ir_train *train; /* the train section (optimizer), NULL for eval */
    const double *arg;     /* the step's option values, in the pass's option order */
    fmt_memplan **memplan; /* where memplan leaves its plan (replacing any), or NULL */
} pass_context;
typedef struct {
    const char *name;
    int (*run)(ir_graph **g, const pass_context *c, char *err, size_t errlen);
    unsigned programs; /* PASS_TRAIN | PASS_EVAL */
    const char *about; /* one line */
    /* Passes that must come earlier in the pipeline (of those that apply
     * to the program being run), and passes that, when present, must come
     * earlier; "*" in after means every other pass. */
    const char *requires[PASS_DEPS_MAX], *after[PASS_DEPS_MAX];
    pass_opt opts[PASS_OPTS_MAX];
    int optional; /* 1: not in the default pipeline; --passes names it */
} pass_info;
/* Terminated by an entry whose name is NULL. */
extern const pass_info pass_registry[];
/* The entry named name, or NULL. */
const pass_info *pass_find(const char *name);
/* "lower autodiff ..." for messages: the names in order into buf; returns buf. */
const char *pass_names_str(char *buf, size_t n);
/* The index of p's option named name, or -1. */
int pass_opt_find(const pass_info *p, const char *name);
/* Parses text as a value of o (range checked): 0, or -1 + message naming
 * the option, the allowed range or values and the text. */
int pass_opt_parse(const pass_opt *o, const char *text, double *out, char *err, size_t errlen);
/* The value in the form pass_opt_parse reads back to the same double. */
const char *pass_opt_str(const pass_opt *o, double v, char *buf, size_t n);
/* --list-passes: the registry, a block per pass. */
void pass_list(FILE *f);

typedef struct {
    const pass_info *pass;
    double arg[PASS_OPTS_MAX];
} pass_step;
typedef struct pass_pipeline {
    int n;
    pass_step step[PASS_PIPELINE_MAX];
    /* Bit i: pass_registry[i] already ran on the graph the pipeline starts
     * from (a graph read back from a dump): it counts as earlier for the
     * prerequisites, and a step may not run it again. 0 from the frontend;
     * dpc --from-ir sets the passes up to the file's `# after:` (but
     * memplan, whose plan a dump does not hold: driver/compile.c). */
    unsigned done;
} pass_pipeline;

/* The default pipeline as o sets it: every pass of the registry (fuse
 * unless o->fuse, memplan unless o->memplan), partition's bucket_mb from
 * o->bucket_bytes, precision's from o->precision. */
void pass_pipeline_default(const pass_options *o, pass_pipeline *out);
/* Parses spec over base (whose steps give the options' defaults, and whose
 * done out takes) and checks it (pass_pipeline_check). 0, or -1 + message quoting the
 * offending part of the spec. */
int pass_pipeline_parse(const char *spec, const pass_pipeline *base, pass_pipeline *out, char *err,
                        size_t errlen);
/* Removes the passes named in names ("fuse,memplan"); -1 + message for an
 * unknown one. */
int pass_pipeline_remove(pass_pipeline *pl, const char *names, char *err, size_t errlen);
/* The prerequisites of every step, for train and for eval (the steps that
 * apply to it); 0 or -1 + message naming the passes. */
int pass_pipeline_check(const pass_pipeline *pl, char *err, size_t errlen);
/* Sets option opt of pass's step to v (a value its schema allows); -1 when
 * pl has no such step or option. */
int pass_pipeline_set(pass_pipeline *pl, const char *pass, const char *opt, double v);
/* The index of the step running pass name, or -1. */
int pass_pipeline_find(const pass_pipeline *pl, const char *name);
/* The pipeline as text pass_pipeline_parse reads back to the same
 * pipeline (every option written name=value). */
void pass_pipeline_print(const pass_pipeline *pl, FILE *f);

/* Called after each step that runs in the program (index: its position in
 * pl, from 0); ms: the pass's wall time; nodes_before: the graph's node
 * count before it. Non-zero stops the pipeline (message in err). */
typedef int (*pass_hook)(void *user, unsigned program, int index, const pass_info *p,
                         const ir_graph *g, int nodes_before, double ms, char *err, size_t errlen);
typedef struct {
    const ir_train *train; /* NULL for eval */
    fmt_memplan **memplan; /* where the memplan step leaves its plan, or NULL */
    pass_hook hook;        /* or NULL */
    void *user;
} pass_env;
/* Runs the steps of pl that apply to program, ir_verify after each. 0 or
 * -1 + message. */
int pass_pipeline_run(const pass_pipeline *pl, unsigned program, ir_graph **g, const pass_env *e,
                      char *err, size_t errlen);

/* The default pipeline of o without memplan (memplan is the caller's to
 * run), and --dump-ir=o->dump_after to o->dump (stdout when NULL). */
int pass_run_train(ir_graph **g, const ir_train *t, const pass_options *o, char *err,
                   size_t errlen);
int pass_run_eval(ir_graph **g, const pass_options *o, char *err, size_t errlen);
#endif
