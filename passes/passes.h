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

typedef struct {
    int fuse, memplan;      /* 1 = on; memplan is the caller's to run (pass_memplan_run) */
    const char *dump_after; /* pass name, or NULL */
    FILE *dump;             /* where --dump-ir=PASS writes */
    size_t bucket_bytes;    /* partition's bucket size; 0 = PASS_BUCKET_BYTES_DEFAULT */
    pass_precision_kind precision; /* storage of activations (default fp32) */
} pass_options;

pass_options pass_default_options(void);

/* ---- the registry (pipeline.c) ---------------------------------------------
 * Every pass in the order pass_run_* runs it, the programs it runs in, and a
 * line about it; the names are what dump_after (--dump-ir=PASS) may take.
 * The pipeline, dpc's --dump-ir check and dpc's help all read it. */
typedef struct {
    const ir_train *train;     /* the train section (optimizer), NULL for eval */
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
int pass_run_train(ir_graph **g, const ir_train *t, const pass_options *o, char *err,
                   size_t errlen);
int pass_run_eval(ir_graph **g, const pass_options *o, char *err, size_t errlen);

/* ---- memory planning (memplan.c) ------------------------------------------
 * Steps are the execution order codegen emits: each fusion group, and each
 * other non-source node, is one step, in graph order. A node's storage is
 * its own unless it is a view or an assign (ir_storage_of). The arena holds
 * every stored activation: not sources (inputs have their own buffers;
 * parameters and states live in the runtime's store), not gradients of
 * parameters (IR_FLAG_GRAD: persistent buffers outside the arena, read after
 * the step and by collectives) nor their sums (allreduce: written by the
 * communication queue while later steps run). A tensor lives from the step that makes it
 * to the last step that reads it (directly or through a view); outputs
 * (IR_FLAG_OUTPUT, IR_FLAG_LOSS) live to the end. An elementwise step may
 * write an output over an input that dies there (same size, every read of
 * it at the element being written): in place. Offsets are chosen best-fit,
 * largest tensors first, 64-byte aligned.
 *
 * Usage:
 *     pass_memplan *m = pass_memplan_run(g, err, sizeof err);
 *     m->offset[i]      // byte offset of node i in the arena, -1 if none
 *     unsigned char *bytes; size_t len;
 *     pass_memplan_serialize(m, &bytes, &len);   // plan section "MEMP"
 *     pass_memplan *q = NULL;
 *     pass_memplan_section_find(bytes, len, g, &q, err, sizeof err);
 *     pass_memplan_free(m);
 */
#define MEMPLAN_ALIGN 64
#define MEMPLAN_SECTION "MEMP"

typedef struct {
    uint64_t graph_hash;   /* ir_graph_hash of the graph planned */
    int n;                 /* nodes */
    int nsteps;
    int64_t *offset;       /* per node: byte offset in the arena, -1 if not in it */
    int64_t *bytes;        /* per node: bytes it occupies there (aligned), 0 if none */
    int *def, *last;       /* per node: first and last step of its lifetime, -1 */
    int *inplace;          /* per node: the node whose bytes it takes over, -1 */
    int *step;             /* per node: its step, -1 for sources */
    int64_t arena_bytes;   /* the arena's planned size */
    int64_t naive_bytes;   /* every arena tensor in a buffer of its own */
    int64_t lower_bytes;   /* the most bytes live at one step: no plan does better */
} pass_memplan;

pass_memplan *pass_memplan_run(const ir_graph *g, char *err, size_t errlen);
void pass_memplan_free(pass_memplan *m);
/* Lifetimes only (offsets -1): what pass_memplan_run plans and what a
 * loaded plan is checked against. */
pass_memplan *pass_memplan_lifetimes(const ir_graph *g);
/* Whether step s may write node o over the bytes of node e (in place). */
int pass_memplan_inplace_ok(const ir_graph *g, const pass_memplan *m, int o, int e);
/* Checks a plan against g: hash, every offset aligned and inside the arena,
 * only arena-eligible nodes placed, and no two tensors whose lifetimes meet
 * share a byte (except an in-place pair). 0, or -1 with a message. */
int pass_memplan_check(const pass_memplan *m, const ir_graph *g, char *err, size_t errlen);
/* Bytes of a plan (little endian, self-delimiting: "DPCM", version, total
 * length, graph hash, arena/naive/lower bytes, node count, an offset per
 * node); records sit back to back in the MEMP section (train, eval). */
int pass_memplan_serialize(const pass_memplan *m, unsigned char **out, size_t *len);
/* The plan in a section made for g, rebuilt with lifetimes and checked:
 * 0 and *out; 1 when the section holds none for g; -1 with a message when
 * the bytes are malformed or the plan does not fit g. */
int pass_memplan_section_find(const unsigned char *buf, size_t len, const ir_graph *g,
                              pass_memplan **out, char *err, size_t errlen);

/* ---- memory needs and limits (memplan.c) --------------------------------
 * What one device holds for a plan, in bytes, the way the runtime allocates
 * it (runtime/exec/exec.c, runtime/exec/store.c): parameters and states (momentum,
 * BatchNorm statistics) once, in the store both programs share; per
 * program its arena (or, without a plan, a buffer per stored tensor) plus
 * the buffers outside it (inputs, gradients, all-reduced sums). Sums
 * saturate at INT64_MAX. Refusing a plan whose total exceeds a limit
 * turns an absurd model or batch into one message at compile or load time
 * instead of an allocation failure deep in a run.
 *
 * Usage:
 *     pass_memory need;
 *     pass_memory_need(train, train_plan, eval, eval_plan, &need);  // plans may be NULL
 *     int64_t limit = pass_parse_size(getenv("DPC_MAX_MEMORY"));  // -1: malformed
 *     if (pass_memory_total(&need) > limit) { pass_memory_describe(&need, buf, sizeof buf); ... }
 */
typedef struct {
    int64_t params;       /* trainable parameters */
    int64_t state;        /* optimizer state and BatchNorm running statistics */
    int64_t train, eval;  /* each program's activations, inputs and gradients */
    int64_t train_batch, eval_batch; /* the programs' batches, for messages */
} pass_memory;

/* Bytes program g needs besides the store; m: its memory plan, or NULL
 * when it runs without one (a buffer per stored tensor). */
int64_t pass_program_bytes(const ir_graph *g, const pass_memplan *m);
void pass_memory_need(const ir_graph *train, const pass_memplan *train_plan, const ir_graph *eval,
                      const pass_memplan *eval_plan, pass_memory *out);
int64_t pass_memory_total(const pass_memory *m);
/* "parameters 4.0 GiB, optimizer and BatchNorm state 4.0 GiB, train
 * program 8.1 GiB at batch 128, eval program 1.2 GiB at batch 80" */
void pass_memory_describe(const pass_memory *m, char *buf, size_t n);
/* Adds without overflowing: INT64_MAX when the sum would pass it. */
int64_t pass_bytes_add(int64_t a, int64_t b);
/* a x k, saturating like pass_bytes_add (a, k >= 0). */
int64_t pass_bytes_mul(int64_t a, int64_t k);
/* "12.4 GiB", "512.0 MiB", "100 bytes" into buf; returns buf. */
const char *pass_bytes_str(int64_t bytes, char *buf, size_t n);
/* A size as a user writes it: bytes ("1000000"), or a number with a unit
 * K, M, G, T (powers of 1024; "KiB", "MB" ... spelt either way, any case):
 * "8G", "1.5 GiB", "512m". -1 when malformed, zero or negative. */
int64_t pass_parse_size(const char *s);
/* dpc's limit when neither --max-memory nor DPC_MAX_MEMORY says otherwise:
 * more than any single accelerator holds, so only absurd plans hit it. */
#define PASS_MAX_MEMORY_DEFAULT ((int64_t)256 << 30)

#endif
