/* format/memplan.h — the memory-plan record (plan section "MEMP") and the
 * memory a plan needs: what dpc writes (passes/memplan.c plans, through
 * passes.h's pass_memplan_run) and dprun reads, checks and adds up. Both
 * sides include this header; it holds the record, never the planner.
 *
 * Steps are the execution order codegen emits: each fusion group, and each
 * other non-source node, is one step, in graph order. A node's storage is
 * its own unless it is a view or an assign (ir_storage_of). The arena holds
 * every stored activation: not sources (inputs have their own buffers;
 * parameters and states live in the runtime's store), not gradients of
 * parameters (IR_FLAG_GRAD: persistent buffers outside the arena, read after
 * the step and by collectives) nor their sums (allreduce: written by the
 * communication queue while later steps run). A tensor lives from the step
 * that makes it to the last step that reads it (directly or through a
 * view); outputs (IR_FLAG_OUTPUT, IR_FLAG_LOSS) live to the end. An
 * elementwise step may write an output over an input that dies there (same
 * size, every read of it at the element being written): in place. Offsets
 * are 64-byte aligned.
 *
 * Usage:
 *     fmt_memplan *m = pass_memplan_run(g, err, sizeof err);  // dpc (passes.h)
 *     m->offset[i]      // byte offset of node i in the arena, -1 if none
 *     unsigned char *bytes; size_t len;
 *     fmt_memplan_serialize(m, &bytes, &len);   // plan section "MEMP"
 *     fmt_memplan *q = NULL;
 *     fmt_memplan_section_find(bytes, len, g, &q, err, sizeof err);  // dprun
 *     fmt_memplan_free(m);
 */
#ifndef DPC_FORMAT_MEMPLAN_H
#define DPC_FORMAT_MEMPLAN_H

#include <stddef.h>
#include <stdint.h>

#include "ir/ir.h"

#define FMT_MEMPLAN_ALIGN   64
#define FMT_MEMPLAN_SECTION "MEMP"

typedef struct {
    uint64_t graph_hash; /* ir_graph_hash of the graph planned */
    int n;               /* nodes */
    int nsteps;
    int64_t *offset;     /* per node: byte offset in the arena, -1 if not in it */
    int64_t *bytes;      /* per node: bytes it occupies there (aligned), 0 if none */
    int *def, *last;     /* per node: first and last step of its lifetime, -1 */
    int *inplace;        /* per node: the node whose bytes it takes over, -1 */
    int *step;           /* per node: its step, -1 for sources */
    int64_t arena_bytes; /* the arena's planned size */
    int64_t naive_bytes; /* every arena tensor in a buffer of its own */
    int64_t lower_bytes; /* the most bytes live at one step: no plan does better */
} fmt_memplan;

void fmt_memplan_free(fmt_memplan *m);
/* Lifetimes only (offsets -1): what pass_memplan_run plans and what a
 * loaded plan is checked against. */
fmt_memplan *fmt_memplan_lifetimes(const ir_graph *g);
/* First and one-past-last node of the step of node at (steps are
 * contiguous runs of nodes). */
void fmt_memplan_step_range(const fmt_memplan *m, int at, int *lo, int *hi);
/* Whether node o's step may write o over the bytes of node e (in place). */
int fmt_memplan_inplace_ok(const ir_graph *g, const fmt_memplan *m, int o, int e);
/* Checks a plan against g: hash, every offset aligned and inside the arena,
 * only arena-eligible nodes placed, and no two tensors whose lifetimes meet
 * share a byte (except an in-place pair). 0, or -1 with a message. */
int fmt_memplan_check(const fmt_memplan *m, const ir_graph *g, char *err, size_t errlen);
/* Bytes of a plan (little endian, self-delimiting: "DPCM", version, total
 * length, graph hash, arena/naive/lower bytes, node count, an offset per
 * node); records sit back to back in the MEMP section (train, eval). */
int fmt_memplan_serialize(const fmt_memplan *m, unsigned char **out, size_t *len);
/* The plan in a section made for g, rebuilt with lifetimes and checked:
 * 0 and *out; 1 when the section holds none for g; -1 with a message when
 * the bytes are malformed or the plan does not fit g. */
int fmt_memplan_section_find(const unsigned char *buf, size_t len, const ir_graph *g,
                             fmt_memplan **out, char *err, size_t errlen);

/* ---- memory needs and limits ------------------------------------------------
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
 *     fmt_memory need;
 *     fmt_memory_need(train, train_plan, eval, eval_plan, &need);  // plans may be NULL
 *     int64_t limit = base_parse_size(getenv("DPC_MAX_MEMORY"));  // -1: malformed
 *     if (fmt_memory_total(&need) > limit) { fmt_memory_describe(&need, buf, sizeof buf); ... }
 */
typedef struct {
    int64_t params;                  /* trainable parameters */
    int64_t state;                   /* optimizer state and BatchNorm running statistics */
    int64_t train, eval;             /* each program's activations, inputs and gradients */
    int64_t train_batch, eval_batch; /* the programs' batches, for messages */
} fmt_memory;

/* Bytes program g needs besides the store; m: its memory plan, or NULL
 * when it runs without one (a buffer per stored tensor). */
int64_t fmt_program_bytes(const ir_graph *g, const fmt_memplan *m);
void fmt_memory_need(const ir_graph *train, const fmt_memplan *train_plan, const ir_graph *eval,
                     const fmt_memplan *eval_plan, fmt_memory *out);
int64_t fmt_memory_total(const fmt_memory *m);
/* "parameters 4.0 GiB, optimizer and BatchNorm state 4.0 GiB, train
 * program 8.1 GiB at batch 128, eval program 1.2 GiB at batch 80" */
void fmt_memory_describe(const fmt_memory *m, char *buf, size_t n);
/* dpc's limit when neither --max-memory nor DPC_MAX_MEMORY says otherwise:
 * more than any single accelerator holds, so only absurd plans hit it. */
#define FMT_MAX_MEMORY_DEFAULT ((int64_t)256 << 30)

#endif
